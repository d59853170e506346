"""Quantized checkpoints (fastdecode.quant): FP8 block-scaled ones load with transformers' own
dequantized weights, bit for bit; every other method, and a float8 tensor without its scales,
raise before any weights are packed."""
import copy
import itertools
import json
import re

import pytest
import torch

import fastdecode
from fastdecode.quant import dequantize_fp8
from conftest import DEVICE
from helpers import assert_same_weights, folder_packs_as_from_hf
from models import tiny_model

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value


def quantize_fp8(w: torch.Tensor, bn: int, bk: int):
    """w [N, K] -> (float8_e4m3fn codes, fp32 scales [ceil(N / bn), ceil(K / bk)]): each block's
    absolute max maps to FP8_MAX, as the FP8 checkpoints' quantizers write them (partial last
    blocks included)."""
    N, K = w.shape
    gn, gk = -(-N // bn), -(-K // bk)
    pad = torch.zeros(gn * bn, gk * bk, device=w.device)
    pad[:N, :K] = w.float()
    blocks = pad.reshape(gn, bn, gk, bk)
    s = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / s[:, None, :, None]).to(torch.float8_e4m3fn).reshape(gn * bn, gk * bk)
    return q[:N, :K].contiguous(), s


def blockwise(q: torch.Tensor, s: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """The weight FP8 codes stand for, each element times its block's scale looked up by
    index: the tests' own formula, apart from dequantize_fp8's block expansion."""
    n, k = torch.meshgrid(torch.arange(q.shape[0]), torch.arange(q.shape[1]), indexing="ij")
    return q.float() * s[n // bn, k // bk]


def write_fp8_checkpoint(model, path, block, skip=("lm_head",)):
    """model saved as an FP8 checkpoint: every 2-D linear weight but the embeddings and `skip`
    as float8 codes + weight_scale_inv, the config's quantization_config as Qwen3-*-FP8's.
    -> {name: the weight the codes and scales stand for}."""
    def fp8(name, w):
        q, s = quantize_fp8(w, *block)
        return {name: q, name + "_scale_inv": s}, blockwise(q, s, *block)
    return _write_quantized(model, path, skip, fp8, {
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
        "weight_block_size": list(block)})


def write_compressed_fp8_checkpoint(model, path, strategy, size=None):
    """model saved as llm-compressor writes an FP8 checkpoint (compressed-tensors,
    float-quantized): weight_scale per tensor ([1]), channel ([N, 1]), group of `size` columns
    ([N, K / size]) or block (`size`, [ceil(N / bn), ceil(K / bk)]), static input scales and
    zero points (zeros) beside them, the lm_head left out by the config's ignore list."""
    def fp8(name, w):
        N, K = w.shape
        bn, bk = {"tensor": (N, K), "channel": (1, K), "group": (1, size)}.get(strategy, size)
        q, s = quantize_fp8(w, bn, bk)
        want = blockwise(q, s, bn, bk)
        if strategy == "tensor":
            s = s.reshape(1)
        return {name: q, name + "_scale": s, name + "_zero_point": torch.zeros_like(s),
                name.removesuffix("weight") + "input_scale": torch.ones(1)}, want
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
               "strategy": strategy, "group_size": size if strategy == "group" else None,
               "block_structure": list(size) if strategy == "block" else None}
    return _write_quantized(model, path, ("lm_head",), fp8, {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "quantization_status": "compressed", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                      "input_activations": dict(weights, strategy="tensor")}}})


def _write_quantized(model, path, skip, quantize, qconfig):
    """model saved, each 2-D linear weight but `skip` replaced by quantize(name, w)'s tensors
    (*proj.weight, and Mixtral's experts' w1 / w2 / w3), qconfig as its config's
    quantization_config. -> {name: the weight they stand for}."""
    from safetensors.torch import load_file, save_file
    model.save_pretrained(path)
    f = path / "model.safetensors"
    sd, want = load_file(f), {}
    for name in list(sd):
        w = sd[name]
        linear = name.endswith("proj.weight") or re.search(r"\.w[123]\.weight$", name)
        if w.dim() == 2 and linear and not any(s in name for s in skip):
            tensors, want[name] = quantize(name, w)
            sd.update(tensors)
    save_file(sd, f, metadata={"format": "pt"})
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = qconfig
    (path / "config.json").write_text(json.dumps(cfg))
    return want


def hf_weight(sd: dict, name: str) -> torch.Tensor:
    """HF's state-dict tensor of a checkpoint's tensor name: an expert's gate / up / down rows
    as their part of HF's stacked experts ([E, 2F, d] gate|up, [E, d, F] down)."""
    m = re.fullmatch(r"(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
    if m is None:
        return sd[name]
    if m[3] == "down":
        return sd[f"{m[1]}.down_proj"][int(m[2])]
    return sd[f"{m[1]}.gate_up_proj"][int(m[2])].chunk(2)[m[3] == "up"]


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_fp8_checkpoint_packs_transformers_dequantized_weights(tmp_path, family):
    """transformers dequantizes an FP8 checkpoint (its Fp8Dequantize, asked for: without a GPU
    it does so by itself; fp32 here): fastdecode packs the same bits and gives the same logits
    as that HF model. The tiny models' odd sizes (56, 28, 40, 68 ...) take 4 x 4 blocks, which
    transformers' grid rule needs to divide them; partial blocks below."""
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    sizes = dict(moe_intermediate_size=28) if family == "qwen3_moe" else {}  # 4 x 4 blocks
    want = write_fp8_checkpoint(tiny_model(family, **sizes), tmp_path, (4, 4))
    # dequantize=True: what transformers does by itself where no GPU is (with one, it would
    # keep FP8Linear modules on the CPU)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, quantization_config=
                                              FineGrainedFP8Config(dequantize=True,
                                                                   weight_block_size=(4, 4)))
    hf.eval()
    sd = hf.state_dict()
    for name, w in want.items():  # the oracle itself: HF's weights are the blocks' q * s
        assert torch.equal(hf_weight(sd, name), w), name
    fm = folder_packs_as_from_hf(tmp_path, hf)  # the packed bits and logits of from_hf(hf)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        hf_logits = hf(ids).logits.float()
    fm.reset()  # folder_packs_as_from_hf ran these ids through its cache
    out = fm(ids)
    # fp32 both ways on the same weights: only the summation order differs (K <= 68 terms)
    torch.testing.assert_close(out, hf_logits, rtol=1e-4, atol=1e-4)


def test_fp8_partial_blocks(tmp_path):
    """128 x 128 blocks over weights of 28-68 rows and columns: one partial block each, its
    scale the block's (DeepSeek's and transformers 5.17's convention: scale grid ceil(N / bn) x
    ceil(K / bk)); the packed q|k|v rows are the codes times their blocks' scales."""
    model = tiny_model("qwen3")
    want = write_fp8_checkpoint(model, tmp_path, (128, 128))
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu",
                                    dtype=torch.float32, mode="torch")
    w_qkv = fm.weights.w_qkv[0]
    parts = [want[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv"]
    assert torch.equal(w_qkv, torch.cat(parts))
    # a 128 x 128 block over the whole weight: one scale, so each code times that scale
    q, s = quantize_fp8(model.model.layers[0].self_attn.q_proj.weight.detach(), 128, 128)
    assert s.shape == (1, 1)
    assert torch.equal(dequantize_fp8(q, s, (128, 128)), q.float() * s[0, 0])
    # the partial blocks' scales, not one per tensor: 16 x 16 blocks over 56 x 40, 4 x 3 scales
    q, s = quantize_fp8(model.model.layers[0].self_attn.q_proj.weight.detach(), 16, 16)
    assert s.shape == (4, 3)
    assert torch.equal(dequantize_fp8(q, s, (16, 16)), blockwise(q, s, 16, 16))


def test_fp8_blocks_against_per_element_scales():
    """dequantize_fp8's block expansion against each element's scale looked up by index."""
    torch.manual_seed(0)
    w = torch.randn(37, 53)
    q, s = quantize_fp8(w, 8, 16)
    assert torch.equal(dequantize_fp8(q, s, (8, 16)), blockwise(q, s, 8, 16))
    # without the config's block: the one the grid divides the weight into (transformers' rule)
    q2, s2 = quantize_fp8(w[:32, :48], 8, 16)
    assert torch.equal(dequantize_fp8(q2, s2), blockwise(q2, s2, 8, 16))
    with pytest.raises(ValueError, match="weight_block_size"):
        dequantize_fp8(q, s)
    with pytest.raises(ValueError, match="scales"):
        dequantize_fp8(q, s, (16, 16))
    # the quantization itself round-trips within e4m3's 3-bit significand (2^-4 relative)
    assert ((dequantize_fp8(q, s, (8, 16)) - w).abs() <= w.abs() / 16 + s.max() / 512).all()


def test_fp8_sharded_rows_match_the_whole(tmp_path):
    """A rank's rows (get(name, index)) are the whole weight's dequantized rows, though a block
    straddles the ranks' boundary."""
    from fastdecode.loading import open_checkpoint
    from fastdecode.quant import dequantizing_getter
    write_fp8_checkpoint(tiny_model("qwen3"), tmp_path, (8, 8))
    config, get, _ = open_checkpoint(str(tmp_path))
    get = dequantizing_getter(config, get)
    name = "model.layers.0.mlp.gate_proj.weight"  # 68 rows: 34 a rank, block rows 32-39 split
    whole = get(name)
    assert torch.equal(get(name, (slice(34, 68),)), whole[34:])
    assert torch.equal(get(name, (slice(None), slice(20, 40))), whole[:, 20:40])


def test_fp8_tensor_without_scales_raises(tmp_path):
    from safetensors.torch import load_file, save_file
    write_fp8_checkpoint(tiny_model("llama"), tmp_path, (4, 4))
    f = tmp_path / "model.safetensors"
    sd = load_file(f)
    del sd["model.layers.1.mlp.down_proj.weight_scale_inv"]
    save_file(sd, f, metadata={"format": "pt"})
    with pytest.raises(TypeError, match="down_proj.weight_scale_inv"):
        fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu", mode="torch")
    # without a quantization_config, a float8 tensor is not read as its codes' values either
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TypeError, match="float8"):
        fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu", mode="torch")


@pytest.mark.parametrize("strategy,size", [("tensor", None), ("channel", None), ("group", 4),
                                           ("block", (16, 16))])
def test_compressed_tensors_fp8_checkpoint(tmp_path, strategy, size):
    """compressed-tensors' FP8 weights, each strategy's scale layout (block: 16 x 16 over the
    tiny model's 28-68 rows / columns, partial blocks): the packed weights are the codes times
    their scales (compressed_tensors' dequantize, (q - 0) * s), bit for bit -- the same model
    as from_hf of the HF model holding those dequantized weights; the lm_head, ignored, read as
    it is."""
    model = tiny_model("qwen3")
    want = write_compressed_fp8_checkpoint(model, tmp_path, strategy, size)
    with torch.no_grad():
        for name, w in want.items():
            model.get_parameter(name).copy_(w)
    folder_packs_as_from_hf(tmp_path, model)


def test_compressed_tensors_other_schemes_raise(tmp_path):
    """Integer or 4-bit compressed-tensors weights, sparse ones and an asymmetric fp8 weight
    (a nonzero zero point) raise UnsupportedModelError, naming what."""
    from safetensors.torch import load_file, save_file
    write_compressed_fp8_checkpoint(tiny_model("llama"), tmp_path, "channel")
    path = tmp_path / "config.json"
    good = json.loads(path.read_text())

    def load_with(**changes):
        cfg = json.loads(json.dumps(good))
        cfg["quantization_config"].update(changes)
        path.write_text(json.dumps(cfg))
        return fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu",
                                          mode="torch")
    groups = good["quantization_config"]["config_groups"]
    int4 = {"group_0": dict(groups["group_0"], weights=dict(groups["group_0"]["weights"],
                                                             type="int", num_bits=4))}
    for changes, what in [({"format": "pack-quantized", "config_groups": int4}, "pack-quantized"),
                          ({"format": "int-quantized"}, "int-quantized"),
                          ({"sparsity_config": {"format": "sparse-24-bitmask"}}, "sparsity")]:
        with pytest.raises(fastdecode.UnsupportedModelError, match=what):
            load_with(**changes)
    load_with()  # the checkpoint itself loads
    f = tmp_path / "model.safetensors"
    sd = load_file(f)
    sd["model.layers.0.mlp.up_proj.weight_zero_point"] += 1
    save_file(sd, f, metadata={"format": "pt"})
    with pytest.raises(fastdecode.UnsupportedModelError, match="up_proj.weight: an asymmetric"):
        load_with()


@pytest.mark.parametrize("method", ["gptq", "awq", "bitsandbytes", "fbgemm_fp8"])
def test_other_quantizations_raise_before_reading_weights(tmp_path, method, monkeypatch):
    """The method named, from the config alone: no tensor read, nothing packed; from_hf of a
    model holding such weights (a bitsandbytes Linear4bit's uint8 bytes) too. A model whose
    weights transformers dequantized as it loaded (a GGUF's: float weights, its
    quantization_config kept) packs as the unquantized model."""
    import fastdecode.module as module
    model = tiny_model("llama")
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": method, "bits": 4}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setattr(module, "pack", lambda *a, **k: pytest.fail("packed"))
    with pytest.raises(fastdecode.UnsupportedModelError, match=method):
        fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu", mode="torch")
    monkeypatch.undo()
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    model.config.quantization_config = {"quant_method": "gguf"}
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(fm(ids), ref(ids))
    model.config.quantization_config = {"quant_method": method}
    proj = model.model.layers[0].mlp.up_proj
    proj.weight = torch.nn.Parameter(torch.zeros(proj.weight.numel() // 2, 1, dtype=torch.uint8),
                                     requires_grad=False)
    with pytest.raises(fastdecode.UnsupportedModelError, match=method):
        fastdecode.from_hf(model, max_seq_len=32, mode="torch")


def test_from_hf_of_a_float8_model():
    """An HF model holding float8 weights and their scales (transformers' FP8Linear on a GPU
    keeps them so) packs them dequantized: the same bits as the model with those weights
    dequantized."""
    import copy
    model = tiny_model("qwen3")
    model.config.quantization_config = {"quant_method": "fp8", "weight_block_size": [4, 4]}
    dequantized = copy.deepcopy(model)
    layers = zip(model.model.layers.modules(), dequantized.model.layers.modules())
    for mod, twin in layers:
        if isinstance(mod, torch.nn.Linear):
            q, s = quantize_fp8(mod.weight.detach(), 4, 4)
            mod.weight = torch.nn.Parameter(q, requires_grad=False)
            mod.register_buffer("weight_scale_inv", s)
            twin.weight = torch.nn.Parameter(blockwise(q, s, 4, 4), requires_grad=False)
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    ref = fastdecode.from_hf(dequantized, max_seq_len=32, mode="torch")
    assert fm.weights.w_qkv.dtype == torch.float32  # the embedding's dtype, not float8
    assert_same_weights(fm, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("block", [(4, 4), (128, 128)])
def test_fp8_checkpoint_on_the_gpu(tmp_path, block):
    """On the GPU: from_pretrained dequantizes there (fp32, exact) and packs the CPU's bits in
    bf16; transformers' own FP8 model (FP8Linear: float8 weights and scales kept) packs the same
    through from_hf; the megakernel runs both alike (the same bits in, the same deterministic
    kernel)."""
    from transformers import AutoModelForCausalLM
    write_fp8_checkpoint(tiny_model("qwen3"), tmp_path, block)
    cpu = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu",
                                     dtype=torch.bfloat16, mode="torch")
    gpu = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cuda",
                                     dtype=torch.bfloat16, mode="mega")
    assert_same_weights(gpu, cpu)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, device_map="cuda")
    assert any(p.dtype == torch.float8_e4m3fn for p in hf.parameters())  # kept quantized
    fm = fastdecode.from_hf(hf, max_seq_len=32, mode="mega")
    assert_same_weights(fm, cpu)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]], device="cuda")
    assert torch.equal(fm(ids), gpu(ids))  # the same packed bits, the deterministic megakernel
    assert torch.equal(fm.generate(ids, max_new_tokens=8), gpu.generate(ids, max_new_tokens=8))


def write_mxfp4_checkpoint(model, path, seed=5):
    """A gpt-oss model saved as openai/gpt-oss-20b's MXFP4 checkpoint: its experts'
    gate_up_proj / down_proj as random _blocks (codes of all 16 values) and _scales (2^-10..2^3),
    the rest unquantized; the model's expert parameters set to what they stand for
    (transformers' convert_moe_packed_tensors). -> (the state dict saved, the config saved)."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    model.save_pretrained(path)
    f = path / "model.safetensors"
    sd = load_file(f)
    g = torch.Generator().manual_seed(seed)
    for name in [n for n in sd if n.endswith(("gate_up_proj", "down_proj"))]:
        E, K, N = sd.pop(name).shape  # HF's [E, in, out]
        blocks = torch.randint(0, 256, (E, N, K // 32, 16), generator=g, dtype=torch.uint8)
        scales = torch.randint(117, 131, (E, N, K // 32), generator=g, dtype=torch.uint8)
        sd.update({name + "_blocks": blocks, name + "_scales": scales})
        w = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, K, N]
        assert w.shape == (E, K, N)
        model.get_parameter(name).data.copy_(w)
    save_file(sd, f, metadata={"format": "pt"})
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]}
    (path / "config.json").write_text(json.dumps(cfg))
    return sd, cfg


def test_mxfp4_checkpoint_keeps_transformers_experts_in_4_bits(tmp_path):
    """A gpt-oss MXFP4 checkpoint (its experts' gate_up_proj / down_proj as _blocks and _scales,
    the rest unquantized, quantization_config as openai/gpt-oss-20b's): from_pretrained packs
    the experts as MXFP4 codes and scales (PackedWeights.s_experts_*), which dequantize to the
    matrices transformers' own convert_moe_packed_tensors gives -- bit for bit, gate|up's
    interleaved rows de-interleaved as HF's parameters are packed. from_hf of the HF model
    holding those dequantized matrices packs them as MXFP4 too (quant.encode_mxfp4: exact, so
    lossless), the same values and every other tensor the same; with one expert value off the
    MXFP4 grid it packs float experts. The logits: from_pretrained's and from_hf's the same
    bits in torch and ops modes (the same values; a group whose codes from_hf doubled and scale
    halved sums the same products), the ops mode's (the MXFP4 GEMV tiles: _common.mxfp4_dot)
    within fp32 rounding of the float experts' ops run (the same products, exact in fp32,
    summed in another order: ~1e-6 relative; the value off the grid set back in the packed
    float experts). Random
    codes of all 16 values, exponents 2^-10..2^3 (the nibble order or the exponent's bias off:
    other weights). from_hf of a model still holding the packed bytes (transformers'
    Mxfp4GptOssExperts on a GPU) says to load the folder."""
    model = tiny_model("gpt_oss", hidden_size=64, intermediate_size=32)  # K % 32 == 0
    sd, cfg = write_mxfp4_checkpoint(model, tmp_path)
    def hf_matrices(m):  # [E, 2F, d] gate rows then up rows; [E, d, F]
        ex = m.model.layers
        return [[torch.cat([x.gate_up_proj.mT[:, 0::2], x.gate_up_proj.mT[:, 1::2]], 1),
                 x.down_proj.mT] for x in (layer.mlp.experts for layer in ex)]
    off = copy.deepcopy(model)  # one expert value off the MXFP4 grid: float experts
    with torch.no_grad():
        off.model.layers[1].mlp.experts.down_proj[1, 2, 3] = 0.7  # not (1 or 1.5) x 2^k
    for mode, dev in (("torch", "cpu"), ("ops", DEVICE)):
        ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]], device=dev)
        fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device=dev,
                                        dtype=torch.float32, mode=mode)
        ref = fastdecode.from_hf(model, max_seq_len=32, mode=mode, device=dev)
        flt = fastdecode.from_hf(off, max_seq_len=32, mode=mode, device=dev)
        pw, rw, fw = fm.weights, ref.weights, flt.weights
        for w in (pw, rw):
            assert w.w_experts_gu.dtype == w.s_experts_down.dtype == torch.uint8  # 4-bit codes
            assert w.w_experts_gu.device.type == torch.device(dev).type
        assert fw.s_experts_gu is None and fw.w_experts_gu.dtype == torch.float32
        fw.w_experts_down[1, 1].copy_(rw.expert_matrix(1, 1, 1))  # the grid's value back
        assert pw.spec == rw.spec == fw.spec
        for name, t in fw.tensors().items():
            if not name.startswith(("w_experts", "s_experts")):
                for w in (pw, rw):
                    assert (t is None) == (w.tensors()[name] is None), name
                    assert t is None or torch.equal(w.tensors()[name], t), name
        for l, (gu, down) in enumerate(hf_matrices(model)):
            for e, which in itertools.product(range(rw.spec.n_experts), (0, 1)):
                want = (gu, down)[which][e].to(dev)
                assert torch.equal(pw.expert_matrix(which, l, e), want)
                assert torch.equal(rw.expert_matrix(which, l, e), want)
        got = fm(ids)  # (each call appends to the model's cache: one each)
        assert torch.equal(got, ref(ids))
        torch.testing.assert_close(got, flt(ids), rtol=1e-5, atol=1e-5)
    model.config.quantization_config = cfg["quantization_config"]
    experts = model.model.layers[0].mlp.experts
    experts.down_proj = torch.nn.Parameter(sd["model.layers.0.mlp.experts.down_proj_blocks"]
                                           .flatten(-2), requires_grad=False)
    with pytest.raises(TypeError, match=r"from_pretrained\(path\) reads the MXFP4"):
        fastdecode.from_hf(model, max_seq_len=32, mode="torch")
