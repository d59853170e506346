"""Mixtures of experts (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE, OLMoE, Granite
MoE, gpt-oss with its biased experts and clamped SwiGLU): the routing, expert gate|up and fused
down kernels against reference.py, the checkpoints' expert tensors, the modes that refuse them,
and bf16 against the fp32 HF model. (Every family's
fp32 logits against HF's in torch and ops modes: test_models; random shapes: its property
test.)"""
import dataclasses
from unittest import mock

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdecode
from fastdecode import ops
from fastdecode import reference as R
from fastdecode.module import _default_mode
from fastdecode.quant import dequantize_mxfp4
from fastdecode.spec import ModelSpec, TensorParallelError, UnsupportedModelError
from fastdecode.triton_kernels.config import TileConfig
from conftest import DEVICE
from helpers import ACT_GAIN, U, assert_close, folder_packs_as_from_hf, hf_logits, rel_err, \
    teacher_forced
from models import MOE, tiny_model

DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])


def n_experts(cfg) -> int:
    """A config's expert count, by either of transformers' names for it."""
    return next(getattr(cfg, f) for f in ("num_experts", "num_local_experts")
                if getattr(cfg, f, None))


@given(T=st.sampled_from([1, 1, 3, 16]), E=st.integers(1, 70), data=st.data(),
       renorm=st.booleans(), shared=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_route_matches_reference(T, E, data, renorm, shared, seed):
    """The routing kernel picks reference.route's experts in its order (fp32 softmax; top_k by
    descending probability: distinct random logits, no ties) with its weights to fp32 rounding
    (exp and the sums in another order: a few ulps, 1e-6 relative), and the shared expert's
    sigmoid scale; E past one warp's 32 lanes, top_k up to all of them."""
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    z = (3 * torch.randn(T, E + shared, generator=g)).to(DEVICE)
    ids, w, s = ops.moe_route(z, k, renorm, shared)
    rids, rw, rs = R.route(z, k, renorm, shared)
    assert torch.equal(ids.view(T, k).long().cpu(), rids.cpu())
    assert torch.allclose(w.view(T, k), rw, rtol=1e-6, atol=1e-7)
    if renorm:
        assert torch.allclose(w.view(T, k).sum(-1), torch.ones(T, device=z.device), atol=1e-6)
    if shared:
        assert torch.allclose(s, rs, rtol=1e-6, atol=1e-7)


@given(T=st.sampled_from([1, 1, 3]), groups=st.sampled_from([(1, 1), (1, 1), (2, 1), (4, 2),
                                                               (8, 4), (8, 7)]),
       per=st.integers(2, 20), data=st.data(), renorm=st.booleans(), sigmoid=st.booleans(),
       bias=st.booleans(), scale=st.sampled_from([1.0, 2.5]), seed=st.integers(0, 2**31 - 1))
def test_route_variants_match_reference(T, groups, per, data, renorm, sigmoid, bias, scale,
                                        seed):
    """The routers of ERNIE 4.5 (a choice bias over softmax scores), GLM-4.5 / dots.llm1 and
    DeepSeek-V3 (sigmoid scores, the bias, group-limited picks, a routed scale): the kernel
    picks reference.route's experts in its order and weights them alike (fp32 rounding, as
    test_route_matches_reference) -- E = n_group x 2-20 experts, the bias as large as the
    scores (negative choice values too: their keys' order), top_k up to the kept groups'
    experts."""
    n_group, topk_group = groups
    E = n_group * per
    k = data.draw(st.integers(1, topk_group * per))
    g = torch.Generator().manual_seed(seed)
    z = (3 * torch.randn(T, E, generator=g)).to(DEVICE)
    c = torch.randn(E, generator=g).to(DEVICE) if bias else None
    kw = dict(sigmoid=sigmoid, choice_bias=c, groups=groups, scale=scale)
    ids, w, _ = ops.moe_route(z, k, renorm, **kw)
    rids, rw, _ = R.route(z, k, renorm, **kw)
    assert torch.equal(ids.view(T, k).long().cpu(), rids.cpu())
    assert torch.allclose(w.view(T, k), rw, rtol=1e-6, atol=1e-7)
    if topk_group < n_group:  # every pick from the kept groups, and those are the best
        assert all(len(set((rids[t] // per).tolist())) <= topk_group for t in range(T))


@given(E=st.integers(2, 140), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_route_ties_go_to_the_lower_index(E, data, seed):
    """Logits from three values (many equal probabilities): the routing picks by descending
    probability, equal ones by ascending expert index (a stable sort's order), with their
    probabilities as weights."""
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    z = torch.randint(0, 3, (1, E), generator=g).float().to(DEVICE)
    ids, w, _ = ops.moe_route(z, k, False)
    p = torch.softmax(z, -1)
    want = torch.sort(-p, dim=-1, stable=True).indices[:, :k]
    assert torch.equal(ids.view(1, k).long().cpu(), want.cpu())
    assert torch.allclose(w.view(1, k), p.gather(1, want), rtol=1e-6, atol=1e-7)


@given(T=st.sampled_from([1, 1, 2, 5]), K=st.integers(1, 200), N=st.integers(1, 90),
       E=st.integers(1, 6), data=st.data(), dtype=DTYPES, oai=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_expert_gemv_matches_reference(T, K, N, E, data, dtype, oai, seed):
    """gemv's experts: a token's gate|up through each of its experts (RMSNorm prologue, SwiGLU
    epilogue: an MLP's gain, ACT_GAIN) and the pairs' down rows through theirs, each output row
    against the reference GEMV of its own expert -- rows routed to repeated, skipped and the
    last experts (an off-by-one expert offset reads another expert's rows: O(1) errors). oai:
    gpt-oss's experts -- each with its own bias rows, gate|up through the clamped SwiGLU (the
    gate's and up's sums std ~3 with the biases: past the clamp at 7 now and then)."""
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g).to(DEVICE, dtype)
    nw = (1 + 0.2 * torch.randn(K, generator=g)).to(DEVICE, dtype)
    wgu = (3 * torch.randn(E, 2 * N, K, generator=g) / K ** 0.5).to(DEVICE, dtype)
    wd = (torch.randn(E, K, N, generator=g) / N ** 0.5).to(DEVICE, dtype)
    bgu = torch.randn(E, 2 * N, generator=g).to(DEVICE, dtype) if oai else None
    bd = torch.randn(E, K, generator=g).to(DEVICE, dtype) if oai else None
    act_name = "swiglu_oai" if oai else "silu"
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).view(-1)
    ids = ids.to(DEVICE, torch.int32)
    act = ops.gemv(x, wgu, norm_w=nw, eps=1e-5, bias=bgu, swiglu=True, act=act_name,
                   experts=ids)
    y = ops.gemv(act, wd, bias=bd, experts=ids, out=torch.empty(T * k, K, device=DEVICE))
    for p, e in enumerate(ids.tolist()):
        ref = R.gemv(x[p // k:p // k + 1], wgu[e], norm_w=nw, eps=1e-5, swiglu=True,
                     act=act_name, bias=None if bgu is None else bgu[e])
        assert_close(act[p:p + 1], ref, dtype, K, f"gate|up pair {p}", gain=ACT_GAIN)
        assert_close(y[p:p + 1], R.gemv(act[p:p + 1], wd[e], bias=None if bd is None else bd[e]),
                     torch.float32, N, f"down {p}")


@given(T=st.sampled_from([1, 1, 4]), D=st.integers(1, 200), F=st.integers(1, 600),
       FS=st.integers(1, 150), E=st.integers(1, 6), data=st.data(),
       shared=st.sampled_from([None, "loop", "chunks"]), bias=st.booleans(), dtype=DTYPES,
       seed=st.integers(0, 2**31 - 1), add=st.sampled_from([True, True, False]))
def test_experts_down_matches_reference(T, D, F, FS, E, data, shared, bias, dtype, seed, add):
    """h += sum_j w_j (W_{e_j} act_j (+ b_{e_j}: gpt-oss's biases)) (+ s W_shared act_shared):
    each token's experts' down GEMVs against the reference's, weighted and summed in fp32 with
    the residual, rounded once to h's dtype (odd row counts against the tile's rows, F past the
    experts' 256-wide K chunks; the reduction: the longest row, K = max(F, FS), over top_k + 1
    terms). The shared expert by its own loop after the experts', or streamed in their chunks
    as ceil(FS / F) more experts of F columns (shared_in_chunks: FS up to 150 against F from 1,
    so up to 150 blocks, the last one partial). add False (accumulate, a tensor-parallel rank's
    partial sums): h = the sum, whatever h held (NaN here)."""
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(T, D, generator=g).to(DEVICE, dtype)
    act = torch.randn(T * k, F, generator=g).to(DEVICE, dtype)
    w = (torch.randn(E, D, F, generator=g) / F ** 0.5).to(DEVICE, dtype)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).view(-1)
    ids = ids.to(DEVICE, torch.int32)
    wt = torch.rand(T * k, generator=g).to(DEVICE)
    acts = torch.randn(T, FS, generator=g).to(DEVICE, dtype)
    ws = (torch.randn(D, FS, generator=g) / FS ** 0.5).to(DEVICE, dtype)
    s = torch.rand(T, generator=g).to(DEVICE)
    b = torch.randn(E, D, generator=g).to(DEVICE, dtype) if bias else None
    if not add:
        h.fill_(float("nan"))
    want = h.float().clone() if add else torch.zeros(T, D, device=DEVICE)
    for p, e in enumerate(ids.tolist()):
        want[p // k] += wt[p] * R.gemv(act[p:p + 1], w[e], bias=b if b is None else b[e]) \
            .float()[0]
    if shared:
        want = want + s[:, None] * R.gemv(acts, ws).float()
    ops.moe_down(h, act, w, ids, wt, (acts, ws, s) if shared else None, bias=b,
                 shared_in_chunks=shared == "chunks", accumulate=add)
    assert_close(h, want, dtype, max(F, FS) * (k + 1), "experts' down")


def mxfp4(E, N, K, g, exp=(117, 131)):
    """Random MXFP4 codes [E, N, K / 2] (all 16 e2m1 values) and E8M0 scales [E, N, K / 32]
    (2^-10..2^3 by default), and the fp32 matrix they stand for (quant.dequantize_mxfp4)."""
    blocks = torch.randint(0, 256, (E, N, K // 32, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(*exp, (E, N, K // 32), generator=g, dtype=torch.uint8)
    return (blocks.view(E, N, K // 2).to(DEVICE), scales.to(DEVICE),
            dequantize_mxfp4(blocks, scales).to(DEVICE))


def test_mxfp4_codes_decode_exactly():
    """The MXFP4 GEMV's decode (_common.fp4_pairs, the E8M0 scale by its bits) gives every code
    and exponent their value: one-hot activations pick W's columns one at a time, exactly (one
    nonzero product a sum), against quant.dequantize_mxfp4 -- each of the 16 codes, in both
    nibbles, over E8M0 exponents 0..240 (2^-127..2^113: mxfp4_dot's range)."""
    K, N, E = 64, 16, 2
    g = torch.Generator().manual_seed(0)
    codes, scales, w = mxfp4(E, N, K, g, exp=(0, 241))
    x = torch.eye(K, device=DEVICE)
    for e in range(E):
        ids = torch.full((K,), e, device=DEVICE, dtype=torch.int32)
        got = ops.gemv(x, codes, experts=ids, scales=scales)  # [K, N]: row k is W[:, k]
        assert torch.equal(got.T, w[e])


@given(T=st.sampled_from([1, 1, 3]), K32=st.integers(1, 12), N=st.integers(1, 40),
       E=st.integers(1, 6), data=st.data(), dtype=DTYPES, oai=st.booleans(),
       small=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_mxfp4_experts_match_reference(T, K32, N, E, data, dtype, oai, small, seed):
    """gpt-oss's experts kept MXFP4 (PackedWeights.s_experts_*): gemv's experts gate|up with
    scales (RMSNorm prologue, SwiGLU / clamped SwiGLU epilogue with the experts' biases) and
    experts_down with scales, against the reference on the dequantized matrices; K and F = 32 to
    384, odd row counts; the default tiles (one K chunk: 1024 / 512 columns) or small ones of
    128-column chunks (up to 3, the last cut: each chunk's codes requested while the one before
    is decoded). Tolerance: as the float experts' (each product is exact in fp32: a 2-bit
    significand times a power of two times x; only the sums' order differs)."""
    K = F = 32 * K32
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g).to(DEVICE, dtype)
    nw = (1 + 0.2 * torch.randn(K, generator=g)).to(DEVICE, dtype)
    qgu, sgu, wgu = mxfp4(E, 2 * N, K, g, exp=(120, 124))  # |w| <= 6 / 8: sums std ~ 1-3
    qd, sd, wd = mxfp4(E, K, F, g, exp=(120, 124))
    bgu = torch.randn(E, 2 * N, generator=g).to(DEVICE, dtype) if oai else None
    bd = torch.randn(E, K, generator=g).to(DEVICE, dtype) if oai else None
    act_name = "swiglu_oai" if oai else "silu"
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).view(-1)
    ids = ids.to(DEVICE, torch.int32)
    wgu_ref = wgu.to(dtype)  # exact: a code times a power of two
    tile_gu, tile_down = (TileConfig(16, 128, 4), TileConfig(8, 128, 4)) if small else (None, None)
    act = ops.gemv(x, qgu, norm_w=nw, eps=1e-5, bias=bgu, swiglu=True, act=act_name,
                   experts=ids, scales=sgu, config=tile_gu)
    for p, e in enumerate(ids.tolist()):
        ref = R.gemv(x[p // k:p // k + 1], wgu_ref[e], norm_w=nw, eps=1e-5, swiglu=True,
                     act=act_name, bias=None if bgu is None else bgu[e])
        assert_close(act[p:p + 1], ref, dtype, K, f"gate|up pair {p}", gain=ACT_GAIN)
    h = torch.randn(T, K, generator=g).to(DEVICE, dtype)
    a = torch.randn(T * k, F, generator=g).to(DEVICE, dtype)
    wt = torch.rand(T * k, generator=g).to(DEVICE)
    want = h.float().clone()
    for p, e in enumerate(ids.tolist()):
        want[p // k] += wt[p] * R.gemv(a[p:p + 1], wd[e].to(dtype),
                                       bias=None if bd is None else bd[e]).float()[0]
    ops.moe_down(h, a, qd, ids, wt, bias=bd, scales=sd, config=tile_down)
    assert_close(h, want, dtype, F * k, "experts' down")


@pytest.mark.parametrize("family", MOE)
def test_mixture_modes_and_tp_shards(family):
    """gpt-oss (attention sinks, the experts' biases) and FlexOlmo (norms after its blocks): no
    megakernel tasks for them -- modes mega and vm raise before any weight is packed (from_hf,
    from_pretrained); the others run there (test_models), and a GPU model defaults to mega
    (gpt-oss, FlexOlmo: ops; so does a mixture under tensor parallelism, which the expert tasks
    lack). Two ranks shard every expert (half its width a rank, all experts and the same top_k
    on each: test_tp), or refuse for the attention's sake only (qwen3_moe's 3 KV heads, olmoe's
    and flex_olmo's q / k norms over all heads)."""
    model = tiny_model(family)
    no_tasks = {"gpt_oss": "attention sinks", "flex_olmo": "norms after its blocks"}
    if family in no_tasks:
        packed = []
        with mock.patch("fastdecode.module.pack", side_effect=lambda *a, **k: packed.append(1)):
            for mode in ("mega", "vm"):
                with pytest.raises(UnsupportedModelError, match=no_tasks[family]):
                    fastdecode.from_hf(model, max_seq_len=32, mode=mode)
        assert not packed
    spec = ModelSpec.from_hf_config(model.config)
    routed = model.config.num_experts_per_tok  # (HunYuan's: moe_topk, a per-layer list)
    routed = routed[0] if isinstance(routed, list) else routed
    assert spec.n_experts == n_experts(model.config) and spec.top_k == routed
    cuda = torch.device("cuda")
    assert _default_mode(cuda, spec) == ("ops" if family in no_tasks else "mega")
    assert _default_mode(cuda, spec, world=2) == "ops"
    try:
        sh = spec.shard(0, 2)
    except TensorParallelError as e:
        assert "expert" not in str(e) and family in ("qwen3_moe", "qwen3_moe_dense", "olmoe",
                                                     "flex_olmo"), e
    else:
        assert (sh.expert_ffn * 2, sh.n_experts, sh.top_k) == \
            (spec.expert_ffn, spec.n_experts, spec.top_k)


@pytest.mark.parametrize("kw,dense", [
    (dict(mlp_only_layers=[1, 4, 9]), (1, 4)), (dict(decoder_sparse_step=2), (0, 2, 4)),
    (dict(decoder_sparse_step=2, mlp_only_layers=[3]), (0, 2, 3, 4)),
    (dict(first_k_dense_replace=2), (0, 1)),
    (dict(moe_layer_start_index=1, moe_layer_end_index=3, moe_layer_interval=1), (0, 4)),
    (dict(moe_layer_start_index=0, moe_layer_end_index=-1, moe_layer_interval=2), (0, 2, 4)),
    (dict(mlp_only_layers=[0, 1, 2, 3, 4]), None)])
def test_dense_layers_among_the_experts(kw, dense):
    """Which of a mixture's 5 layers are dense, by each of HF's rules (Qwen's mlp_only_layers
    and decoder_sparse_step -- HF's condition: not listed and (l + 1) % step == 0 --, DeepSeek's
    first_k_dense_replace, ERNIE's start / end (-1: the last) / interval), the expert stacks'
    index of every other layer, and the dense layers' width (intermediate_size); every layer
    dense: a dense model of that width (None)."""
    from types import SimpleNamespace
    from fastdecode.spec import Experts, _experts
    cfg = SimpleNamespace(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=8,
                          intermediate_size=30, norm_topk_prob=False, **kw)
    got = _experts("test", Experts(), cfg, 5)
    if dense is None:
        assert got == dict(ffn_dim=30)
        return
    assert got["dense_layers"] == dense and got["dense_ffn"] == 30
    spec = ModelSpec.from_hf_config(tiny_model("qwen3_moe", layers=5, **kw).config)
    assert spec.dense_layers == dense and spec.expert_layers == tuple(
        l for l in range(5) if l not in dense)
    assert [spec.expert_index(l) for l in spec.expert_layers] == list(
        range(len(spec.expert_layers)))
    assert all(spec.expert_index(l) == -1 for l in dense)


def test_mixture_repr_names_its_experts_and_dense_layers():
    """print(model) says what a mixture holds: routed / all experts x their width, and the
    dense layers and their width where there are some."""
    fm = fastdecode.from_hf(tiny_model("glm4_moe"), max_seq_len=16, mode="torch")
    assert "ffn=20, experts=3/8x20, dense_layers=[0]x40," in repr(fm)
    assert "dense_layers" not in repr(fastdecode.from_hf(tiny_model("qwen2_moe"),
                                                         max_seq_len=16, mode="torch"))


def test_deepseek_router_groups_refused():
    """Groups DeepSeek-V3's router (moe.route_body, in every mode: test_models' glm4_moe /
    dots1) cannot take -- not a power of two, one expert a group -- or more routed experts than
    the kept groups hold are refused when the config is read."""
    for kw, what in ((dict(n_group=3, n_routed_experts=9, topk_group=2), "power of two"),
                     (dict(n_group=8, topk_group=4), "power of two"),
                     (dict(num_experts_per_tok=5), "more than the 2 groups' experts")):
        with pytest.raises(UnsupportedModelError, match=what):
            ModelSpec.from_hf_config(tiny_model("glm4_moe", **kw).config)


@pytest.mark.parametrize("family", ["glm4_moe", "ernie4_5_moe"])
def test_router_kept_fp32(family, tmp_path):
    """GLM-4.5's / ERNIE's router weights stay fp32 in a bf16 model, as HF keeps them
    (_keep_in_fp32_modules_strict): packed from an fp32 checkpoint they are its values
    exactly, the choice bias too, and they stay fp32 as the model moves to fp16; the router's
    logits from bf16 rows are the fp32 sums (the GEMV of fp32 weights, to fp32 rounding over
    d), not those of weights rounded to bf16 (~2^-9 of them off)."""
    model = tiny_model(family)
    model.save_pretrained(tmp_path)
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=16, mode="ops", device=DEVICE,
                                    dtype=torch.bfloat16)
    pw, l = fm.weights, fm.spec.expert_layers[0]
    gate = model.model.layers[l].mlp.gate
    assert pw.w_router.dtype == torch.float32 and pw.embed.dtype == torch.bfloat16
    E = fm.spec.n_experts  # then the shared expert's zero gate row (Experts.shared_gate)
    assert torch.equal(pw.w_router[0, :E].cpu(), gate.weight.detach())
    bias = [b for n, b in model.named_buffers() if n.startswith(f"model.layers.{l}.")] or \
        [gate.moe_statics.e_score_correction_bias.detach()]
    assert torch.equal(pw.b_choice[0].cpu(), bias[0].reshape(-1))
    x = torch.randn(1, fm.spec.d_model, generator=torch.Generator().manual_seed(1))
    x = x.to(DEVICE, torch.bfloat16)
    want = x.float() @ pw.w_router[0].T
    got = ops.gemv(x, pw.w_router[0], out=torch.empty_like(want))
    assert_close(got, want, torch.float32, fm.spec.d_model, "router logits")
    rounded = x.float() @ pw.w_router[0].bfloat16().float().T
    assert (got - want).abs().max() < (rounded - want).abs().max()
    assert fm.to(torch.float16).weights.w_router.dtype == torch.float32


def test_per_layer_routed_counts_that_differ_refused():
    """HunYuan's per-layer routed counts that differ are refused by name before any weight is
    read (one value in the list reads as that value: test_models)."""
    cfg = tiny_model("hunyuan_v1_moe", moe_topk=[2, 3]).config
    with pytest.raises(UnsupportedModelError, match="moe_topk.*differs among the layers"):
        ModelSpec.from_hf_config(cfg)
    assert ModelSpec.from_hf_config(tiny_model("hunyuan_v1_moe").config).top_k == 2


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "granitemoe", "granitemoeshared",
                                    "hunyuan_v1_moe", "flex_olmo", "qwen2_moe_dense",
                                    "ernie4_5_moe", "glm4_moe", "dots1"])
def test_per_expert_checkpoint_folder(family, tmp_path):
    """save_pretrained writes the checkpoint's own layout -- each expert's tensors (Mixtral's
    block_sparse_moe.experts.{e}.w1 / w3 / w2, Qwen's mlp.experts.{e}.gate_proj / up_proj /
    down_proj, the shared expert and its gate), Granite's stacked input_linear / output_linear
    and router.layer (GraniteMoeShared's shared_mlp too), HunYuan's gate.wg and shared_mlp,
    FlexOlmo's, a dense layer's mlp.gate_proj / up_proj / down_proj, DeepSeek-V3's
    shared_experts and choice bias (ERNIE's under mlp.moe_statics): from_pretrained packs
    them as from_hf packs HF's stacked [E, 2F, d] / [E, d, F] parameters, bit for bit."""
    model = tiny_model(family)
    model.save_pretrained(tmp_path)
    folder_packs_as_from_hf(tmp_path, model)


def test_mixture_megakernel_refuses_tp_and_rows_schedules():
    """The megakernel's expert tasks are decode's on one rank: a tensor-parallel runtime in mode
    mega raises before any launch, and a step of several rows (which runs ops) has no schedule
    of them (graph.build_step raises)."""
    from types import SimpleNamespace
    from fastdecode.graph import build_step, make_tiling
    from fastdecode.runtime import Runtime
    fm = fastdecode.from_hf(tiny_model("qwen2_moe"), max_seq_len=32, mode="torch")
    two = SimpleNamespace(world=2, peer_to_peer=True, rank=0)
    with pytest.raises(UnsupportedModelError, match="tensor-parallel"):
        Runtime(fm.weights, 32, "mega", collectives=two)
    tiling = make_tiling(fm.spec, 3, 32, torch.device("cpu"), dtype=torch.float32)
    with pytest.raises(ValueError, match="decode steps on one rank"):
        build_step(fm.spec, tiling, 4)


@pytest.mark.parametrize("family", ["qwen2_moe", "granitemoe"])
def test_mixture_bf16_close_to_fp32_hf(family):
    """bf16 ops mode vs the fp32 HF model holding the same rounded weights, at test_models'
    half-precision bound (4u sqrt(13): ~6 roundings a layer, 2 layers and the head; the
    experts' sum adds one rounding of h, as the dense MLP's residual add). Every expert routed
    (top_k = all of them): a top-k choice is discrete -- bf16 activations move the router's
    logits by ~u of their scale, and random logits of a few experts lie that close often
    enough to swap the k-th and (k + 1)-th somewhere in a run, an O(1) change of that row --
    while the softmax weights of all experts are continuous in the logits. The choice itself is
    held exactly in fp32 (test_models, test_route_matches_reference). Two families: the shared
    expert's path (Qwen2-MoE) and Granite's multipliers; the others' MoE is the same code, their
    attention the dense families' (test_models' half-precision test)."""
    dtype = torch.bfloat16
    every = dict(num_experts_per_tok=n_experts(tiny_model(family).config))
    model = tiny_model(family, dtype=dtype, **every).to(DEVICE)
    ids = torch.randint(0, 101, (1, 37), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    ref = hf_logits(tiny_model(family, dtype=dtype, **every).float().to(DEVICE), ids)
    got = teacher_forced(fastdecode.from_hf(model, max_seq_len=64, mode="ops"), ids, 21)
    assert rel_err(got, ref) < 4 * U[dtype] * 13 ** 0.5, rel_err(got, ref)


def test_megakernel_down_tile_rule():
    """EXPERT_DOWN's tile in the megakernel (StreamConfig.moe_down_tile): 8 rows x 128 for
    float experts whatever top_k (session 68's sweep), 8 rows x ops mode's FP8 K chunk for FP8
    experts (session 72's; ops takes 4 rows at top_k 8) and ops mode's tile for steps of several
    rows; a set field wins; tiles the kernel cannot take
    (tl.arange needs powers of two; FP8 chunks whole scale groups) raise before any compile."""
    from fastdecode.graph import make_tiling
    from fastdecode.triton_kernels.config import StreamConfig
    from fastdecode.triton_kernels.moe import down_tile
    spec = ModelSpec.from_hf_config(tiny_model("qwen2_moe").config)
    st = StreamConfig()
    t = make_tiling(spec, 1, 64, "cpu", stream=st)
    assert (t.moe_rows, t.moe_bk) == (8, 128)
    for k in (spec.top_k, 8):
        t = make_tiling(dataclasses.replace(spec, top_k=k), 1, 64, "cpu", stream=st, fp8=True)
        assert (t.moe_rows, t.moe_bk) == (8, down_tile(k, fp8=True).block_k) == (8, 512 >> (k > 4))
    t, ops_tile = make_tiling(spec, 3, 64, "cpu", stream=st), down_tile(spec.top_k)
    assert (t.moe_rows, t.moe_bk) == (ops_tile.block_n, ops_tile.block_k)
    t = make_tiling(spec, 1, 64, "cpu", stream=StreamConfig(moe_down_rows=2))
    assert (t.moe_rows, t.moe_bk) == (2, 128)
    for kw, fp8 in ((dict(moe_down_rows=6), False), (dict(moe_down_bk=8), False),
                    (dict(moe_down_bk=64), True)):
        with pytest.raises(ValueError, match="powers of two"):
            make_tiling(spec, 1, 64, "cpu", stream=StreamConfig(**kw), fp8=fp8)


def test_megakernel_router_and_shared_tiles():
    """The megakernel's ROUTER tiles: graph.few_tiles_rows of the lm_head's rows over the
    router's E (+ 1) rows at the schedule's programs (a handful of tiles would leave the layer
    waiting on a few programs' streams), or StreamConfig.router_rows; the graph's ROUTER tasks
    cover every router row once. EXPERT_DOWN's shared expert as ceil(FS / F) experts where the
    chunk's experts stay <= 16 (moe.shared_blocks), none for FP8 experts or where turned off."""
    from fastdecode.graph import build_step, few_tiles_rows, make_tiling
    from fastdecode.opcodes import Op
    from fastdecode.triton_kernels.config import StreamConfig
    from fastdecode.triton_kernels.moe import shared_blocks
    spec = ModelSpec.from_hf_config(tiny_model("qwen2_moe").config)  # a shared expert too
    sc = StreamConfig()
    t = make_tiling(spec, 1, 64, "cpu", stream=sc, n_programs=264)
    assert t.gemv_rows(Op.ROUTER) == few_tiles_rows(t.rows_d, spec.n_experts + 1, 264) == 1
    t2 = make_tiling(spec, 1, 64, "cpu", stream=StreamConfig(router_rows=2), n_programs=264)
    assert t2.gemv_rows(Op.ROUTER) == 2
    for tiling in (t, t2):
        g = build_step(spec, tiling, 264)
        rows = tiling.gemv_rows(Op.ROUTER)
        covered = sorted(r for task in g.tasks if task.op == Op.ROUTER and task.layer == 0
                         for r in range(task.args[1] * rows, task.args[2] * rows))
        assert [r for r in covered if r < spec.n_experts + 1] == list(range(spec.n_experts + 1))
    F, FS = spec.expert_ffn, spec.ffn_dim
    assert t.moe_vs == -(-FS // F) and spec.top_k + t.moe_vs <= 16
    assert make_tiling(spec, 1, 64, "cpu", stream=sc, fp8=True).moe_vs == 0
    off = StreamConfig(moe_shared_in_chunks=False)
    assert make_tiling(spec, 1, 64, "cpu", stream=off).moe_vs == 0
    assert shared_blocks(64, 20 * 64, torch.bfloat16, torch.bfloat16, True, 8, 16) == 0
    assert shared_blocks(64, 8 * 64, torch.bfloat16, torch.bfloat16, True, 8, 16) == 8
