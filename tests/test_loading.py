"""Checkpoints without an HF model object: safetensors folders (one file and sharded with an
index) give the same model as from_hf; the packed layout concatenates back to HF's weights."""
import dataclasses
import json

import pytest
import torch

import fastdecode
from fastdecode.packing import dict_getter, pack
from fastdecode.spec import ModelSpec
from helpers import assert_same_weights, folder_packs_as_from_hf
from models import tiny_model

# the GGUF tests' package: the demo extra, which CI installs; a GPU image may lack it
GGUF_MISSING = "needs the gguf package (pip install -e '.[demo]')"


@pytest.mark.parametrize("shard", [None, "30KB"])
@pytest.mark.parametrize("family", ["llama_bias_tied", "qwen3", "phi3", "granite", "exaone",
                                    "glm", "gemma", "gemma2", "gemma3_text", "glm4", "exaone4",
                                    "olmo2", "olmo3", "hyperclovax", "vaultgemma", "arcee",
                                    "nanochat", "olmo", "stablelm", "starcoder2", "jais2",
                                    "phi", "cohere", "cohere2", "gpt_neox", "gpt2", "gptj",
                                    "gpt_bigcode", "gpt_bigcode_mha", "opt", "falcon",
                                    "falcon_new", "falcon_seq", "falcon_rw", "bloom",
                                    "mpt", "nemotron", "gpt_neo", "xglm"])
def test_safetensors_folder_matches_from_hf(tmp_path, family, shard):
    """exaone: save_pretrained writes EXAONE's own tensor names (transformer.h.0.attn.attention.
    q_proj ...), which packing.renamed_getter reads."""
    model = tiny_model(family)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(tmp_path, **kw)
    if shard:
        assert (tmp_path / "model.safetensors.index.json").exists()
    folder_packs_as_from_hf(tmp_path, model)


@pytest.mark.parametrize("family,prefix,name", [
    ("gpt2", "transformer.", "h.0.attn.c_attn.weight"),
    ("opt", "model.", "decoder.embed_positions.weight"),
    ("gpt_bigcode", "transformer.", "h.0.attn.c_attn.weight")])
def test_files_without_the_base_model_prefix(tmp_path, family, prefix, name):
    """Released files saved from the base model name their tensors without its prefix (GPT-2:
    h.0.attn.c_attn.weight, wte.weight ...; OPT: decoder.layers.0 ...) and without a tied
    lm_head, which HF maps on loading (Family.checkpoint_prefix): read the same."""
    from safetensors.torch import load_file, save_file
    model = tiny_model(family, tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    f = tmp_path / "model.safetensors"
    sd = {k.removeprefix(prefix): v for k, v in load_file(f).items() if k != "lm_head.weight"}
    assert name in sd
    save_file(sd, f)
    folder_packs_as_from_hf(tmp_path, model)


@pytest.mark.parametrize("kind,tied", [("mistral3", False), ("mistral3", True), ("llava", False),
                                       ("gemma3", True), ("qwen2_5_vl", True), ("qwen3_vl", False),
                                       ("qwen3_vl_moe", False), ("glm4v", False),
                                       ("glm4v_moe", False), ("internvl", True),
                                       ("idefics3", False)])
def test_vision_language_folder_reads_its_text_model(tmp_path, kind, tied):
    """A vision-language checkpoint's files keep the language model under language_model.model.
    / language_model.lm_head. (the vision tower beside it, never read): from_pretrained packs the
    same tensors as from_hf of the loaded model, whose state dict names them model.language_model.
    / lm_head (Idefics3: model.text_model. in both)."""
    from models import tiny_vlm
    model = tiny_vlm(kind, tie_word_embeddings=tied)
    model.save_pretrained(tmp_path)
    assert folder_packs_as_from_hf(tmp_path, model).spec.text_of == kind


def test_qwen3_vl_moe_released_expert_layout(tmp_path):
    """Qwen3-VL-MoE's released files hold the stacked experts as [E, in, out] (gate_up_proj [E,
    d, 2F], down_proj [E, F, d]; transformers transposes them as it loads, and saves them [E,
    out, in]): from_pretrained of files written that way packs the loaded model's tensors bit for
    bit (packing.expert_getter tells the two layouts apart by their shape)."""
    from safetensors.torch import load_file, save_file
    from models import tiny_vlm
    model = tiny_vlm("qwen3_vl_moe", tie_word_embeddings=False)
    model.save_pretrained(tmp_path)
    f = tmp_path / "model.safetensors"
    sd = load_file(f)
    names = [k for k in sd if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]
    assert len(names) == 2 * model.config.text_config.num_hidden_layers
    for k in names:
        sd[k] = sd[k].transpose(1, 2).contiguous()
    assert sd[names[0]].shape[1:] != model.state_dict()[names[0]].shape[1:]
    save_file(sd, f)
    folder_packs_as_from_hf(tmp_path, model)


def test_qwen2_vl_transformers4_flat_config(tmp_path):
    """A Qwen2.5-VL config.json as transformers 4.x wrote it -- the text model's fields at its top
    level, the multimodal RoPE as rope_scaling {"type": "mrope"} -- goes through AutoConfig
    (which nests them in text_config) and gives the spec of transformers 5's own config: mrope read
    as the default RoPE (one position on every axis for text)."""
    from fastdecode.loading import load_config
    from models import tiny_vlm
    model = tiny_vlm("qwen2_5_vl", tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    text = d.pop("text_config")
    text.pop("model_type")
    rope = text.pop("rope_parameters")
    d.update(text, rope_theta=rope["rope_theta"],
             rope_scaling={"type": "mrope", "mrope_section": rope["mrope_section"]})
    (tmp_path / "config.json").write_text(json.dumps(d))
    spec = ModelSpec.from_hf_config(load_config(str(tmp_path)))
    assert spec == ModelSpec.from_hf_config(model.config)
    assert spec.family == "qwen2_5_vl_text" and spec.rope["rope_type"] == "default"


def test_dtype_by_name(tmp_path):
    """from_pretrained's dtype as transformers takes it: a torch dtype, its name, or "auto" (the
    checkpoint's, float32 on a CPU); anything else raises before the checkpoint is read."""
    model = tiny_model("qwen2")
    model.save_pretrained(tmp_path)
    kw = dict(max_seq_len=16, device="cpu", mode="torch")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    want = fastdecode.from_pretrained(str(tmp_path), dtype=torch.float32, **kw)(ids)
    for name in ("float32", "auto"):
        fm = fastdecode.from_pretrained(str(tmp_path), dtype=name, **kw)
        assert fm.weights.dtype == torch.float32 and torch.equal(fm(ids), want)
    assert fastdecode.from_pretrained(str(tmp_path), dtype="bfloat16", **kw).weights.dtype == \
        torch.bfloat16
    for bad in ("int8", "float64", torch.int8):
        with pytest.raises(TypeError, match="dtype must be one of"):
            fastdecode.from_pretrained(str(tmp_path / "nowhere"), dtype=bad, **kw)


def test_packing_round_trip():
    model = tiny_model("qwen2")
    sd = model.state_dict()
    spec = ModelSpec.from_hf_config(model.config)
    pw = pack(spec, dict_getter(sd), device="cpu", dtype=torch.float32)
    s = spec
    for i in range(s.n_layers):
        q, k, v = pw.w_qkv[i].split([s.q_dim, s.kv_dim, s.kv_dim])
        assert torch.equal(q, sd[f"model.layers.{i}.self_attn.q_proj.weight"])
        assert torch.equal(k, sd[f"model.layers.{i}.self_attn.k_proj.weight"])
        assert torch.equal(v, sd[f"model.layers.{i}.self_attn.v_proj.weight"])
        assert torch.equal(pw.b_qkv[i], torch.cat([sd[f"model.layers.{i}.self_attn.{x}_proj.bias"]
                                                   for x in "qkv"]))
        g, u = pw.w_gu[i].chunk(2)
        assert torch.equal(g, sd[f"model.layers.{i}.mlp.gate_proj.weight"])
        assert torch.equal(u, sd[f"model.layers.{i}.mlp.up_proj.weight"])
    assert pw.lm_head.data_ptr() == pw.embed.data_ptr()  # tied: one tensor, streamed once


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_packing(dtype):
    """Gemma: the norms packed as 1 + w (fp32 sum, one rounding); the embedding as it is, its
    sqrt(d) factor (HF's normalizer, rounded to the weights' dtype) applied at lookup, so the tied
    lm_head is the same tensor: the rows looked up are HF's scaled embedding, bit for bit."""
    model = tiny_model("gemma", dtype=dtype)
    spec = ModelSpec.from_hf_config(model.config)
    sd = model.state_dict()
    pw = pack(spec, dict_getter(sd), device="cpu", dtype=dtype)
    assert pw.lm_head.data_ptr() == pw.embed.data_ptr()
    assert torch.equal(pw.embed, sd["model.embed_tokens.weight"])
    plus1 = lambda t: (t.float() + 1).to(dtype)  # noqa: E731
    assert torch.equal(pw.final_norm, plus1(sd["model.norm.weight"]))
    assert torch.equal(pw.mlp_norm[1], plus1(sd["model.layers.1.post_attention_layernorm.weight"]))
    assert pw.embed_scale == float(torch.tensor(spec.d_model ** 0.5).to(dtype))
    ids = torch.tensor([3, 7, 3])
    with torch.no_grad():
        assert torch.equal(pw.embed_rows(ids), model.model.embed_tokens(ids))


def test_fused_checkpoint_round_trip():
    """Phi-3 fuses q|k|v (qkv_proj) and gate|up (gate_up_proj): the packed rows are those
    tensors', each q / k head's in rope_permutation's order (half of each head rotated here)."""
    model = tiny_model("phi3")
    sd = model.state_dict()
    s = ModelSpec.from_hf_config(model.config)
    pw = pack(s, dict_getter(sd), device="cpu", dtype=torch.float32)
    perm = s.rope_permutation()
    assert perm is not None and s.rot == s.head_dim // 2
    qk = s.q_dim + s.kv_dim
    for i in range(s.n_layers):
        qkv = sd[f"model.layers.{i}.self_attn.qkv_proj.weight"]
        heads = qkv[:qk].view(-1, s.head_dim, s.d_model)[:, perm].reshape(qk, s.d_model)
        assert torch.equal(pw.w_qkv[i], torch.cat([heads, qkv[qk:]]))
        assert torch.equal(pw.w_gu[i], sd[f"model.layers.{i}.mlp.gate_up_proj.weight"])


def test_missing_tensor_and_bad_dtype_raise():
    model = tiny_model("llama")
    sd = dict(model.state_dict())
    spec = ModelSpec.from_hf_config(model.config)
    del sd["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(KeyError, match="up_proj"):
        pack(spec, dict_getter(sd), device="cpu", dtype=torch.float32)
    sd = {k: (v.to(torch.int8) if "o_proj" in k else v) for k, v in model.state_dict().items()}
    with pytest.raises(TypeError, match="float"):
        pack(spec, dict_getter(sd), device="cpu", dtype=torch.float32)


def test_missing_checkpoint_raises(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="nor a Hugging Face Hub id"):
        fastdecode.from_pretrained("/nonexistent/model", device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        fastdecode.from_pretrained(str(tmp_path), device="cpu")
    import huggingface_hub.constants as hub  # offline, an empty cache: nothing to be had
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(FileNotFoundError, match="Hugging Face Hub or its cache"):
        fastdecode.from_pretrained("no-org/no-model", device="cpu")


def test_hub_id_loads_the_cached_snapshot(tmp_path, monkeypatch):
    """An org/name that is no local path: the snapshot in the Hugging Face cache (offline here,
    as transformers resolves a cached model without network), the same model as from_hf."""
    model = tiny_model("qwen2")
    repo = tmp_path / "hub" / "models--tiny-org--tiny-qwen2"
    rev = "0123456789abcdef0123456789abcdef01234567"
    model.save_pretrained(repo / "snapshots" / rev)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    import huggingface_hub.constants as hub
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    fm = fastdecode.from_pretrained("tiny-org/tiny-qwen2", max_seq_len=32, device="cpu",
                                    dtype=torch.float32, mode="torch")
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(fm(ids), ref(ids))


QWEN2_WINDOWED = dict(use_sliding_window=True, sliding_window=6, max_window_layers=1)
PHI3_LONGROPE = dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0],
                                   "long_factor": [3.0, 4.0, 5.0]},
                     original_max_position_embeddings=16, max_position_embeddings=64)


@pytest.mark.parametrize("family,overrides", [(f, {}) for f in
                                              ["llama", "llama_bias_tied", "mistral", "qwen2",
                                               "qwen3", "phi3", "ministral", "granite", "helium",
                                               "ernie4_5", "seed_oss", "smollm3", "exaone",
                                               "glm", "gemma", "iquestcoder", "cwm",
                                               "gemma2", "gemma3_text", "glm4", "exaone4",
                                               "olmo2", "olmo3", "ministral3", "hyperclovax",
                                               "vaultgemma", "arcee", "nanochat", "olmo",
                                               "stablelm", "starcoder2", "jais2", "phi",
                                               "cohere", "cohere2", "gpt_neox", "gpt2",
                                               "gptj", "gpt_bigcode", "gpt_bigcode_mha",
                                               "opt", "falcon", "falcon_new",
                                               "falcon_seq", "falcon_rw", "bloom",
                                               "mpt", "nemotron", "gpt_neo", "xglm"]] +
                         [("qwen2", QWEN2_WINDOWED), ("phi3", PHI3_LONGROPE)])
def test_json_config_gives_the_autoconfig_spec(tmp_path, family, overrides):
    """from_pretrained reads config.json without transformers (JsonConfig): every ModelSpec field
    equals the one from transformers' AutoConfig, and so do the generation defaults generate()
    falls back on. A Qwen2 sliding window derives its layer types from max_window_layers: when
    config.json lacks layer_types, load_config uses AutoConfig."""
    from transformers import AutoConfig, GenerationConfig

    from fastdecode.loading import JsonConfig, generation_defaults, load_config
    model = tiny_model(family, eos_token_id=7, **overrides)
    model.save_pretrained(tmp_path)
    got = load_config(str(tmp_path))
    want = AutoConfig.from_pretrained(str(tmp_path))
    assert ModelSpec.from_hf_config(got) == ModelSpec.from_hf_config(want)
    if family == "llama":
        assert isinstance(got, JsonConfig)
    if overrides and family == "qwen2":  # what AutoConfig derives must survive a config.json
        assert ModelSpec.from_hf_config(want).layer_windows == (0, 6)  # without layer_types
    # what a transformers model loaded from the folder holds: its generation_config.json, else
    # the settings derived from the model config
    hf = GenerationConfig.from_pretrained(tmp_path) if (
        tmp_path / "generation_config.json").exists() else GenerationConfig.from_model_config(want)
    ours = generation_defaults(got, str(tmp_path))
    for name in ("max_length", "max_new_tokens", "do_sample", "temperature", "top_k", "top_p",
                 "eos_token_id"):
        assert getattr(ours, name) == getattr(hf, name), name


def test_cwm_config_json_without_layer_types(tmp_path):
    """A CWM config.json without layer_types: the config class slides three of every four layers
    (not all, as a window alone says for Mistral), so load_config reads it through AutoConfig."""
    from fastdecode.loading import load_config
    model = tiny_model("cwm", layers=5)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d.pop("layer_types", None)
    (tmp_path / "config.json").write_text(json.dumps(d))
    spec = ModelSpec.from_hf_config(load_config(str(tmp_path)))
    want = ModelSpec.from_hf_config(model.config).layer_windows
    assert spec.layer_windows == want == (0, 5, 5, 5, 0)


@pytest.mark.parametrize("layer_types", [True, False])
def test_gemma3_transformers4_config_json(tmp_path, layer_types):
    """A Gemma 3 config.json as transformers 4.x wrote it (rope_theta, rope_local_base_freq and
    rope_scaling for the full layers, sliding_window_pattern; no rope_parameters), with or
    without layer_types: the spec of transformers 5's own config -- read without transformers
    (JsonConfig) when the layer types are there, through AutoConfig (which derives them from the
    pattern; a window alone would slide every layer) when not."""
    from fastdecode.loading import JsonConfig, load_config
    model = tiny_model("gemma3_text", layers=5)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d.pop("rope_parameters")
    d.update(rope_theta=1e6, rope_local_base_freq=100.0, sliding_window_pattern=2,
             rope_scaling={"rope_type": "linear", "factor": 2.0})
    if not layer_types:
        d.pop("layer_types")
    (tmp_path / "config.json").write_text(json.dumps(d))
    got = load_config(str(tmp_path))
    assert isinstance(got, JsonConfig) == layer_types
    spec = ModelSpec.from_hf_config(got)
    assert spec == ModelSpec.from_hf_config(model.config)
    assert spec.layer_windows == (5, 0, 5, 0, 5) and spec.sliding_rope().rope_theta == 100.0


def test_gemma_released_config_json(tmp_path):
    """Gemma's released config.json files say hidden_act "gelu" (HF's GemmaConfig reads it as
    the tanh GELU, as Gemma was trained) and leave tie_word_embeddings to the class default (tied):
    from_pretrained, reading the file without transformers, gives the HF model's logits."""
    from helpers import hf_logits, rel_err, teacher_forced
    model = tiny_model("gemma")
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d["hidden_act"] = "gelu"
    d.pop("tie_word_embeddings", None)
    (tmp_path / "config.json").write_text(json.dumps(d))
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device="cpu",
                                    dtype=torch.float32, mode="torch")
    assert fm.weights.spec.act == "gelu_tanh"
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])
    assert rel_err(teacher_forced(fm, ids, 6), hf_logits(model, ids)) < 1e-5


@pytest.mark.parametrize("family,own_names,changed", [
    # num_layers, layer_norm_epsilon, activation_function (ExaoneConfig.attribute_map): no
    # rms_norm_eps, so load_config reads it through AutoConfig
    ("exaone", (("num_hidden_layers", "num_layers"), ("rms_norm_eps", "layer_norm_epsilon"),
                ("hidden_act", "activation_function")), {"layer_norm_epsilon": 1e-6}),
    # qkv_bias and bias (InternLM3Config.attribute_map), read by JsonConfig itself
    ("internlm3", (("attention_bias", "qkv_bias"), ("mlp_bias", "bias")), {})])
def test_checkpoint_config_keys(tmp_path, family, own_names, changed):
    """A checkpoint's config.json that names some fields its own way (as the published EXAONE
    and InternLM3 ones do, where save_pretrained writes HF's names): the same spec as the model's,
    a value set under the checkpoint's name (not the class default) read."""
    from fastdecode.loading import load_config
    model = tiny_model(family, layers=3)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    for hf, own in own_names:
        d[own] = d.pop(hf)
    d.update(changed)
    (tmp_path / "config.json").write_text(json.dumps(d))
    spec = ModelSpec.from_hf_config(load_config(str(tmp_path)))
    want = ModelSpec.from_hf_config(model.config)
    assert spec == (dataclasses.replace(want, rms_eps=1e-6) if changed else want)
    assert spec.n_layers == 3


def _write_gguf(path, arch, name, tied, head_dim=None, rope_dims=None, stops=None, split=None):
    """A GGUF as llama.cpp lays one out (metadata, a 50-token vocabulary, the embedding and,
    untied, the output rows) -- the metadata the config comes from, no layers."""
    gguf = pytest.importorskip("gguf", reason=GGUF_MISSING)
    import numpy as np
    w = gguf.GGUFWriter(str(path), arch)
    _model_metadata(w, name, head_dim, rope_dims)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(50)])
    w.add_eos_token_id(7)
    w.add_bos_token_id(3)
    for kind, i in (stops or {}).items():  # eot / eom ids
        getattr(w, f"add_{kind}_token_id")(i)
    if split:
        w.add_uint16("split.count", split)
    w.add_tensor("token_embd.weight", np.zeros((50, 64), np.float32))
    if not tied:
        w.add_tensor("output.weight", np.zeros((50, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _model_metadata(w, name, head_dim=None, rope_dims=None):
    """A small llama.cpp-style model's metadata (d_model 64, 4 heads, 2 KV heads, 2 layers)."""
    w.add_name(name)
    w.add_context_length(256)
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_feed_forward_length(96)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    if head_dim:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if rope_dims:
        w.add_rope_dimension_count(rope_dims)


@pytest.mark.parametrize("arch,tied,head_dim,rope_dims", [
    ("qwen2", True, None, None), ("qwen3", False, 128, None), ("llama", False, None, 16),
    ("llama", True, None, None)])
def test_gguf_config_gives_the_autoconfig_spec(tmp_path, arch, tied, head_dim, rope_dims):
    """The config read from the GGUF reader that also reads the weights (one parse of the file)
    gives the ModelSpec and token ids transformers' AutoConfig gives for the same file."""
    from transformers import AutoConfig
    from fastdecode.loading import gguf_config, gguf_reader
    _write_gguf(tmp_path / "m.gguf", arch, f"tiny {arch}", tied, head_dim, rope_dims)
    ours = gguf_config(gguf_reader(str(tmp_path / "m.gguf")))
    theirs = AutoConfig.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert ModelSpec.from_hf_config(ours) == ModelSpec.from_hf_config(theirs)
    for key in ("eos_token_id", "bos_token_id", "vocab_size", "tie_word_embeddings"):
        assert getattr(ours, key) == getattr(theirs, key), key


def test_gguf_config_defers_to_autoconfig(tmp_path):
    """A llama GGUF whose general.name is "mistral" is a MistralConfig in transformers (its
    sliding-window default included): no config of ours; open_checkpoint then asks AutoConfig. A
    Qwen3 GGUF's head_dim is its attention.key_length (transformers keeps Qwen3Config's default
    128)."""
    from fastdecode.loading import gguf_config, gguf_reader, open_checkpoint
    _write_gguf(tmp_path / "m.gguf", "llama", "mistral", False)
    assert gguf_config(gguf_reader(str(tmp_path / "m.gguf"))) is None
    config, _, _ = open_checkpoint(str(tmp_path / "m.gguf"))
    assert config.model_type == "mistral"
    _write_gguf(tmp_path / "q.gguf", "qwen3", "tiny qwen3", False, head_dim=24)
    assert gguf_config(gguf_reader(str(tmp_path / "q.gguf"))).head_dim == 24


def test_gguf_end_of_turn_tokens_stop_generation(tmp_path):
    """A chat GGUF's end-of-turn / end-of-message ids (llama.cpp's eot / eom, Llama 3.x
    instruct's <|eot_id|> / <|eom_id|>) join its EOS in eos_token_id, as in the HF checkpoint's
    generation_config.json ([128001, 128008, 128009]); without them it is the EOS alone."""
    from fastdecode.loading import generation_defaults, gguf_config, gguf_reader
    _write_gguf(tmp_path / "m.gguf", "llama", "tiny llama", True, stops={"eom": 8, "eot": 9})
    config = gguf_config(gguf_reader(str(tmp_path / "m.gguf")))
    assert config.eos_token_id == [7, 8, 9]
    assert generation_defaults(config).eos_token_id == [7, 8, 9]
    _write_gguf(tmp_path / "e.gguf", "llama", "tiny llama", True, stops={"eot": 7})
    assert gguf_config(gguf_reader(str(tmp_path / "e.gguf"))).eos_token_id == 7


def test_gguf_of_another_architecture_raises_before_parsing_it(tmp_path, monkeypatch):
    """A GGUF of an architecture fastdecode does not implement, or one shard of a split GGUF,
    raises UnsupportedModelError from its metadata alone -- not after transformers' AutoConfig
    has parsed the whole file, nor as a missing tensor."""
    from fastdecode import loading
    from fastdecode.spec import UnsupportedModelError
    _write_gguf(tmp_path / "phi.gguf", "phi3", "tiny phi", True)
    monkeypatch.setattr(loading, "load_config", lambda *a: pytest.fail("AutoConfig was asked"))
    with pytest.raises(UnsupportedModelError, match="architecture 'phi3' is not supported"):
        fastdecode.from_pretrained(str(tmp_path / "phi.gguf"), device="cpu")
    _write_gguf(tmp_path / "s.gguf", "llama", "tiny llama", True, split=3)  # gguf-split shard
    with pytest.raises(UnsupportedModelError, match="one of 3 shards of a split GGUF"):
        fastdecode.from_pretrained(str(tmp_path / "s.gguf"), device="cpu")


def test_gguf_file_reads_what_gguf_reader_reads(tmp_path):
    """fastdecode's GGUF table reader (which skips metadata arrays) against the gguf package's
    GGUFReader on a file with every metadata value type, arrays of numbers, strings and arrays,
    a non-default alignment, and float and quantized tensors: the same scalars, array lengths,
    tensor names, types, shapes and bytes -- and the weights dequantize alike."""
    gguf = pytest.importorskip("gguf", reason=GGUF_MISSING)
    import numpy as np
    from fastdecode.gguf_file import GGUFArray, GGUFFile, GGUFFormatError
    path = tmp_path / "all.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    for i, (add, v) in enumerate([(w.add_uint8, 200), (w.add_int8, -100), (w.add_uint16, 60000),
                                  (w.add_int16, -30000), (w.add_uint32, 4_000_000_000),
                                  (w.add_int32, -2_000_000_000), (w.add_float32, 0.25),
                                  (w.add_bool, True), (w.add_string, "héllo wörld"),
                                  (w.add_uint64, 2 ** 63 + 5), (w.add_int64, -2 ** 62),
                                  (w.add_float64, 1e-300)]):
        add(f"k.{i}", v)
    w.add_array("a.ints", [3, 1, 4, 1, 5])
    w.add_array("a.floats", [0.5, 1.5])
    w.add_array("a.strings", ["", "a", "bb" * 300, "ü"])
    w.add_array("a.nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    w.add_tensor("f32", x)
    w.add_tensor("f16", x[:3].astype(np.float16))
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours, theirs = GGUFFile(str(path)), gguf.GGUFReader(str(path))
    fields = {k: f for k, f in theirs.fields.items() if not k.startswith("GGUF.")}  # header
    assert set(ours.metadata) == set(fields) and ours.metadata["general.alignment"] == 64
    for key, f in fields.items():
        v = ours.metadata[key]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            # parts: key length, key, value type, element type, length, elements...
            assert v == GGUFArray(int(f.types[1]), int(f.parts[4][0])), key
        elif f.types[0] == gguf.GGUFValueType.STRING:
            assert v == bytes(f.parts[f.data[0]]).decode(), key
        else:
            assert v == f.parts[f.data[0]][0].item(), key
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors] == \
        ["f32", "f16", "q8"]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.tensor_type == b.tensor_type and a.shape == tuple(b.shape.tolist()), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        assert np.array_equal(a.data, b.data), a.name
        assert np.array_equal(gguf.quants.dequantize(a.data, a.tensor_type),
                              gguf.quants.dequantize(b.data, b.tensor_type)), a.name
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + bytes(60))
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        GGUFFile(str(tmp_path / "bad.gguf"))
    whole = path.read_bytes()  # an unfinished download: cut in the header, then in the data
    for cut, match in ((60, "cut short in its header"), (len(whole) - 128, "past the file's")):
        (tmp_path / "cut.gguf").write_bytes(whole[:cut])
        with pytest.raises(GGUFFormatError, match=match):
            GGUFFile(str(tmp_path / "cut.gguf"))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
                                   "BF16", "F16", "F32", "Q2_K"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_gguf_dequantize_matches_the_gguf_package(qtype, device, monkeypatch):
    """gguf_file.dequantize (torch, on the CPU and on the GPU where the weights go) against the
    gguf package's numpy reference on random blocks of every byte pattern -- their fp16 scales
    drawn finite -- bit for bit: both compute the same fp32 products and sums in the same order,
    one elementwise op at a time (Q2_K: no torch unpacking, the reference itself)."""
    gguf = pytest.importorskip("gguf", reason=GGUF_MISSING)
    import numpy as np
    from fastdecode.gguf_file import GGUFTensor, dequantize
    qt = gguf.GGMLQuantizationType[qtype]
    block, size = gguf.GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(int(qt))  # the type id: the same blocks every run
    rows, cols = 3, 2 * 256
    if qtype in ("F16", "F32"):
        data = rng.standard_normal((rows, cols)).astype(np.float16 if qtype == "F16" else
                                                          np.float32)
    else:
        data = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
        scales = {"Q6_K": [208], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2],
                  "Q2_K": [80, 82], "BF16": []}.get(qtype, [0])
        for at in scales:
            data[..., at:at + 2] = rng.uniform(-2, 2, (rows, cols // block, 1)).astype(
                np.float16)[..., None].view(np.uint8).reshape(rows, cols // block, 2)
        if qtype == "BF16":  # finite bf16 values: the high halves of fp32 normals
            data = (rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint32) >> 16) \
                .astype(np.uint16).view(np.uint8)
        data = data.reshape(rows, -1)
    t = GGUFTensor("w", qt, (cols, rows), data)
    want = torch.from_numpy(np.array(gguf.quants.dequantize(data, qt), dtype=np.float32))
    got = dequantize(t, device).cpu()
    monkeypatch.setattr("fastdecode.gguf_file.DEQUANT_CHUNK", 256)  # in pieces of a few blocks
    assert torch.equal(dequantize(t, device).cpu(), got)
    assert got.dtype == torch.float32 and got.shape == (rows, cols) == want.shape
    assert torch.isfinite(want).all()
    assert torch.equal(got, want)


def _spm_gguf(path, add_bos=None):
    """A llama-type (sentencepiece: scores, byte tokens) GGUF vocabulary of 284 tokens."""
    gguf = pytest.importorskip("gguf", reason=GGUF_MISSING)
    import numpy as np
    w = gguf.GGUFWriter(str(path), "llama")
    words = ["▁", "▁the", "▁cat", "▁sat", "▁on", "▁mat", "t", "h", "e", "c", "a", "s", "o", "n",
             "m", "▁t", "▁c", "▁s", "▁o", "▁m", "at", "he", "▁h", "é", "▁é"]
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + words
    _model_metadata(w, "tiny llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(words))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(words))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.add_tensor("token_embd.weight", np.zeros((len(toks), 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


_SPM_TEXTS = ["the cat sat on the mat", " the  cat\n", "héllo wörld", ""]


def test_gguf_sentencepiece_tokenizer_matches_autotokenizer(tmp_path):
    """loading.load_tokenizer on a sentencepiece GGUF vocabulary gives AutoTokenizer's ids and
    text (test_smollm2.py: a BPE one), BOS first as llama.cpp adds it there (transformers 5.25's
    AutoTokenizer too; 5.17's leaves it out: compared without it)."""
    from transformers import AutoTokenizer
    from fastdecode.loading import load_tokenizer
    _spm_gguf(tmp_path / "spm.gguf")
    ours, theirs = load_tokenizer(str(tmp_path / "spm.gguf")), AutoTokenizer.from_pretrained(
        str(tmp_path), gguf_file="spm.gguf")
    assert (ours.bos_token, ours.eos_token, ours.unk_token) == ("<s>", "</s>", "<unk>")
    for text in _SPM_TEXTS:
        ids = theirs(text).input_ids
        got = ours(text).input_ids
        assert got[0] == 1 and got[1:] == ids[ids[:1] == [1]:], text
        assert ours.decode(ids) == theirs.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(
            ids, skip_special_tokens=True)


@pytest.mark.parametrize("add_bos", [False, True])
def test_gguf_tokenizer_add_bos_token(tmp_path, add_bos, monkeypatch):
    """tokenizer.ggml.add_bos_token decides whether BOS leads, whichever way transformers'
    converter built the tokenizer (its post-processor here forced to the other choice)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast
    from fastdecode.loading import load_tokenizer
    _spm_gguf(tmp_path / "spm.gguf", add_bos)
    build = PreTrainedTokenizerFast.from_pretrained

    def other_choice(*a, **k):
        tok = build(*a, **k)
        b = [] if add_bos else [("<s>", 1)]
        tok._tokenizer.post_processor = TemplateProcessing(
            single=[t for t, _ in b] + ["$A"], pair=[t for t, _ in b] + ["$A", "$B"],
            special_tokens=b)
        return tok
    monkeypatch.setattr(PreTrainedTokenizerFast, "from_pretrained", other_choice)
    tok = load_tokenizer(str(tmp_path / "spm.gguf"))
    for text in _SPM_TEXTS:
        ids = tok(text).input_ids
        assert (ids[:1] == [1]) == add_bos and 1 not in ids[1:], (text, ids)
        assert tok.decode(ids, skip_special_tokens=True) == tok.decode(
            ids[1:] if add_bos else ids, skip_special_tokens=True)


def _export_gguf(model, path, arch):
    """A tiny HF model as llama.cpp's converter lays it out: its tensor names, llama's q / k rows
    permuted for the interleaved RoPE, a llama3 rope scaling as the rope_freqs tensor of
    per-frequency divisors, matrices in fp16 and norms / biases in fp32."""
    import math

    gguf = pytest.importorskip("gguf", reason=GGUF_MISSING)
    import numpy as np
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_context_length(c.max_position_embeddings)
    w.add_block_count(c.num_hidden_layers)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"] if hasattr(c, "rope_parameters")
                         else c.rope_theta)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_tokenizer_model("gpt2")  # transformers sizes the vocabulary by the token list
    w.add_token_list([f"t{i}" for i in range(c.vocab_size)])
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    if rope.get("rope_type") == "llama3":  # convert_hf_to_gguf.py's LlamaModel, its loop
        theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
        old, lo, hi = (rope["original_max_position_embeddings"], rope["low_freq_factor"],
                       rope["high_freq_factor"])
        factors = []
        for freq in 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim):
            wavelen = 2 * math.pi / freq
            if wavelen < old / hi:
                factors.append(1.0)
            elif wavelen > old / lo:
                factors.append(rope["factor"])
            else:
                smooth = (old / wavelen - lo) / (hi - lo)
                factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, np.float32))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}

    def permute(t, heads):  # convert_hf_to_gguf.py's LlamaModel.permute
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2) \
            .reshape(t.shape)

    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        t = t.float().numpy()
        if name in names:
            g = names[name]
        else:
            _, _, i, rest = name.split(".", 3)
            mod, kind = rest.rsplit(".", 1)
            g = f"blk.{i}.{layer[mod]}.{kind}"
        if arch == "llama" and ".attn_q." in g:
            t = permute(t, c.num_attention_heads)
        elif arch == "llama" and ".attn_k." in g:
            t = permute(t, c.num_key_value_heads)
        w.add_tensor(g, t.astype(np.float16) if t.ndim == 2 else t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("family,arch,llama3", [
    ("llama", "llama", False), ("qwen2", "qwen2", False), ("qwen3", "qwen3", False),
    ("llama", "llama", True)])
def test_gguf_checkpoint_loads_as_transformers_loads_it(tmp_path, family, arch, llama3):
    """from_pretrained of a GGUF (llama.cpp's tensor names and q / k permutation; qwen2's
    biases, qwen3's q / k norms and head_dim 14 on d_model 40) gives the original model's
    weights up to the file's fp16 rounding, and the weights and logits transformers' own GGUF
    loader gives for the same file -- except qwen3's, which transformers cannot load: its GGUF
    config leaves head_dim at Qwen3Config's default 128 (gguf_config reads key_length). With a
    llama3 rope scaling (llama.cpp's rope_freqs tensor, which transformers' GGUF loader leaves
    out) the logits are the original model's on the same fp16-rounded weights."""
    from transformers import AutoModelForCausalLM
    model = tiny_model(family, **({} if llama3 or family != "llama" else {"rope_scaling": None}))
    _export_gguf(model, tmp_path / "m.gguf", arch)
    kw = dict(max_seq_len=32, mode="torch")
    ours = fastdecode.from_pretrained(str(tmp_path / "m.gguf"), device="cpu",
                                      dtype=torch.float32, **kw)
    orig = fastdecode.from_hf(model, **kw)
    for name, t in orig.weights.tensors().items():
        got = ours.weights.tensors()[name]
        assert (t is None) == (got is None), name
        if t is not None:  # fp16 storage: rounding <= 2^-11 relative, or half the subnormal
            # spacing 2^-24 below fp16's smallest normal
            torch.testing.assert_close(got, t, rtol=2 ** -11, atol=2 ** -25)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6] * 3])  # 24 positions: past llama3's 16
    if arch == "qwen3":
        return
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                              dtype=torch.float32).eval()
    theirs = fastdecode.from_hf(hf, **kw)
    assert_same_weights(ours, theirs)
    with torch.no_grad():
        if not llama3:
            assert torch.equal(ours(ids), theirs(ids))
            return
        for p in model.parameters():  # the original model on the file's (fp16) matrices
            if p.ndim == 2:
                p.copy_(p.half().float())
        want = model(ids).logits[0]
        got = ours(ids)[0]
        # fp32 both ways, the inverse frequencies two ways (the file's fp32 divisors, HF's
        # llama3 formula): angles within a few ulps over 24 positions, 48-element sums, 2
        # layers -- ~2e-6 on logits of magnitude ~3 (measured 1.9e-6); 1e-5 leaves 5x
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        # without the divisors (transformers' GGUF loader) the logits are off by ~3
        assert (theirs(ids)[0] - want).abs().max() > 0.1


def test_hub_gguf_file_loads_the_cached_file(tmp_path, monkeypatch):
    """org/name/file.gguf, and org/name with gguf_file= as transformers takes it: that one file
    of the repository from the Hugging Face cache (offline here), the same model as the local
    file; a file the cache lacks raises FileNotFoundError naming it."""
    model = tiny_model("qwen2")
    repo = tmp_path / "hub" / "models--tiny-org--tiny-gguf"
    rev = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots" / rev).mkdir(parents=True)
    _export_gguf(model, repo / "snapshots" / rev / "m-f16.gguf", "qwen2")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    import huggingface_hub.constants as hub
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    kw = dict(max_seq_len=32, device="cpu", dtype=torch.float32, mode="torch")
    ref = fastdecode.from_pretrained(str(repo / "snapshots" / rev / "m-f16.gguf"), **kw)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    want = ref(ids)
    for fm in (fastdecode.from_pretrained("tiny-org/tiny-gguf/m-f16.gguf", **kw),
               fastdecode.from_pretrained("tiny-org/tiny-gguf", gguf_file="m-f16.gguf", **kw)):
        assert torch.equal(fm(ids), want)
    with pytest.raises(FileNotFoundError, match="tiny-org/tiny-gguf/m-q4.gguf"):
        fastdecode.from_pretrained("tiny-org/tiny-gguf/m-q4.gguf", **kw)


def test_transformers_arguments(tmp_path, monkeypatch):
    """from_pretrained takes transformers' own arguments: the Hub download's options reach
    snapshot_download, torch_dtype is dtype, a device_map naming one device is device= (a map
    over several raises), trust_remote_code is taken."""
    import huggingface_hub
    model = tiny_model("qwen2")
    model.save_pretrained(tmp_path)
    seen = {}

    def snapshot_download(repo_id, **kw):
        seen.update(kw, repo_id=repo_id)
        return str(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    fm = fastdecode.from_pretrained("tiny-org/tiny-qwen2", max_seq_len=32, mode="torch",
                                    revision="v1.0", token="hf_x", cache_dir="/c",
                                    local_files_only=True, torch_dtype=torch.float32,
                                    device_map={"": "cpu"}, trust_remote_code=True)
    assert seen == dict(repo_id="tiny-org/tiny-qwen2", revision="v1.0", token="hf_x",
                        cache_dir="/c", local_files_only=True,
                        allow_patterns=fastdecode.loading.HUB_FILES)
    assert fm.device.type == "cpu" and fm.weights.w_qkv.dtype == torch.float32
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(fm(ids), ref(ids))
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, mode="torch",
                                    torch_dtype="bfloat16", device_map="auto" if not
                                    torch.cuda.is_available() else "cpu")
    assert fm.device.type == "cpu" and fm.weights.w_qkv.dtype == torch.bfloat16
    for kw, err, what in [
            (dict(dtype=torch.float16, torch_dtype=torch.bfloat16), TypeError, "disagree"),
            (dict(device_map={"model.embed_tokens": 0, "lm_head": "cpu"}), ValueError, "one device"),
            (dict(device_map="balanced"), ValueError, "one device"),
            (dict(device="cpu", device_map="cuda:1"), ValueError, "disagree")]:
        with pytest.raises(err, match=what):
            fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, mode="torch", **kw)


@pytest.mark.parametrize("sharded", [False, True])
def test_pytorch_pickle_folder(tmp_path, sharded, monkeypatch):
    """A checkpoint of PyTorch pickles (pytorch_model.bin, or shards with their index, as older
    checkpoints hold their weights; a training_args.bin beside them is no weight file): the same
    model as its safetensors copy. Written here with torch.save -- transformers 5 saves only
    safetensors. A Hub snapshot without safetensors fetches the pickles next."""
    model = tiny_model("llama_bias_tied")
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file
    sd = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    if sharded:
        names = sorted(sd)
        parts = [names[:len(names) // 2], names[len(names) // 2:]]
        weight_map = {}
        for i, part in enumerate(parts):
            fn = f"pytorch_model-0000{i + 1}-of-00002.bin"
            torch.save({k: sd[k] for k in part}, tmp_path / fn)
            weight_map.update({k: fn for k in part})
        (tmp_path / "pytorch_model.bin.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        torch.save(sd, tmp_path / "pytorch_model.bin")
    torch.save({"lr": 1e-4, "note": object.__name__}, tmp_path / "training_args.bin")
    folder_packs_as_from_hf(tmp_path, model)
    import huggingface_hub
    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo_id, allow_patterns, **kw: asked.append(allow_patterns)
                        or str(tmp_path))
    assert fastdecode.loading.hub_snapshot("org/old-model") == str(tmp_path)
    assert asked == [fastdecode.loading.HUB_FILES, ["pytorch_model*.bin"]]
