"""ModelSpec from HF configs: every size from the config, family differences, clear errors."""
import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
import transformers as tf

from fastdecode import UnsupportedModelError
from fastdecode.loading import JsonConfig
from fastdecode.spec import FAMILIES as SPEC_FAMILIES, TIED_BY_DEFAULT, ModelSpec
from models import FAMILIES, tiny_model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_spec_fields_and_rope_match_hf(family):
    model = tiny_model(family)
    s = ModelSpec.from_hf_config(model.config)
    cfg = model.config
    assert (s.n_layers, s.d_model, s.n_heads, s.vocab_size) == (
        cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size)
    assert s.tied == bool(cfg.tie_word_embeddings)
    if family in ("gpt2", "gpt_bigcode", "gpt_bigcode_mha", "opt", "biogpt", "gpt_neo", "xglm"):
        # no rotary embedding: learned positions (XGLM's sinusoidal; BioGPT's and XGLM's embedded
        # rows scaled as HF's embed_scale)
        assert s.learned_positions and s.nope_layers == tuple(range(s.n_layers))
        attn = model.model.decoder.layers[0].self_attn if family == "opt" else \
            model.biogpt.layers[0].self_attn if family == "biogpt" else \
            model.model.layers[0].self_attn if family == "xglm" else model.transformer.h[0].attn
        if family == "gpt_neo":  # unscaled scores (HF's attention has no scale); local layers
            attn = attn.attention
            assert s.attn_scale == 1.0 and s.q_scale == math.sqrt(s.head_dim)
            assert s.layer_windows == tuple(cfg.window_size if t == "local" else 0
                                            for t in cfg.attention_layers) == (0, 5)
        assert s.qkv_dim == (attn.c_attn.nf if family == "gpt2" else 3 * attn.q_proj.out_features
                             if family in ("opt", "biogpt", "gpt_neo", "xglm") else
                             attn.c_attn.out_features)
        want = model.biogpt.embed_tokens.embed_scale if family == "biogpt" else \
            model.model.embed_tokens.embed_scale if family == "xglm" else 1.0
        assert s.embed_scale == want
        return
    if family == "bloom":  # ALiBi, no rotary embedding: HF's slopes, bit for bit
        from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
        assert s.alibi and s.nope_layers == tuple(range(s.n_layers)) and s.embed_norm
        assert torch.equal(s.alibi_slopes(), _get_alibi_slopes(s.n_heads, "cpu"))
        for n in (1, 2, 3, 5, 8, 12, 16, 71, 112):  # powers of two and the tails past them
            sn = dataclasses.replace(s, n_heads=n, n_kv_heads=n)
            assert torch.equal(sn.alibi_slopes(), _get_alibi_slopes(n, "cpu")), n
        assert s.qkv_dim == model.transformer.h[0].self_attention.query_key_value.out_features
        return
    if family == "mpt":  # ALiBi with MPT's slopes: build_mpt_alibi_tensor's, bit for bit
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor
        assert s.alibi and s.alibi_mpt and s.nope_layers == tuple(range(s.n_layers))
        assert s.max_position == cfg.max_seq_len and s.act == "gelu" and not s.attn_bias
        for n in (1, 2, 3, 5, 6, 8, 12, 16, 71):
            sn = dataclasses.replace(s, n_heads=n, n_kv_heads=n)
            want = build_mpt_alibi_tensor(n, 2)[:, 0, 0] * -1  # the slopes times position -1
            assert torch.equal(sn.alibi_slopes(), want), n
        return
    if family in ("gptj", "codegen"):  # a sin / cos table of its own (rotary_dim columns)
        assert s.rot == cfg.rotary_dim and s.rope_interleaved and s.parallel
        pos = torch.arange(7).float()
        attn = model.transformer.h[0].attn
        if hasattr(attn, "embed_positions"):  # transformers <= 5.17: a [max_pos, rot] buffer,
            sin, cos = attn.embed_positions[None, :7].float().chunk(2, dim=-1)  # sin | cos
        else:  # later: a rotary module, in the attention or the model
            rot = getattr(attn, "rotary_emb", None) or model.transformer.rotary_emb
            sin, cos = rot(torch.zeros(1), pos[None].long())
        c, sn = s.rope_table(7)
        assert torch.allclose(cos[0].float(), c[:, :s.rot // 2], atol=1e-6)
        assert torch.allclose(sin[0].float(), sn[:, :s.rot // 2], atol=1e-6)
        return
    falcon = family.startswith("falcon")
    inner = model.gpt_neox if family == "gpt_neox" else model.transformer if falcon else \
        model.model
    first = s.attn_layers[0]  # (Qwen3.5's first layer is a Gated DeltaNet's)
    attn = inner.layers[0].attention if family == "gpt_neox" else \
        inner.h[0].self_attention if falcon else inner.layers[first].self_attn
    assert s.qkv_dim == (attn.qkv_proj.out_features if family == "phi3" else
                         attn.query_key_value.out_features if family == "gpt_neox" or falcon
                         else attn.q_proj.out_features // (1 + s.attn_gate)
                         + 2 * attn.k_proj.out_features)
    rot = inner.rotary_emb
    # Gemma 3: a rotary embedding per layer type, HF's attributes prefixed by it
    kinds = [("full_attention_", s), ("sliding_attention_", s.sliding_rope())] \
        if s.local_rope else [("", s)]
    for prefix, sp in kinds:
        inv = getattr(rot, prefix + "inv_freq").float()  # Phi-3: of the rotated dims only
        assert torch.equal(sp.rope_inv_freq()[:len(inv)], inv)  # HF's fp32 ops: the same bits
        assert not sp.rope_inv_freq()[len(inv):].any()
        assert sp.rope_attention_factor() == pytest.approx(
            getattr(rot, prefix + "attention_scaling", 1.0), rel=1e-12)


@pytest.mark.parametrize("family,yarn", [
    ("qwen3", {"factor": 4.0, "original_max_position_embeddings": 64}),
    ("llama", {"factor": 8.0, "original_max_position_embeddings": 32, "beta_fast": 16.0,
               "beta_slow": 2.0, "truncate": False}),
    ("qwen2", {"factor": 2.0, "original_max_position_embeddings": 128, "mscale": 0.8,
               "mscale_all_dim": 0.5}),
    ("mistral", {"factor": 3.0, "original_max_position_embeddings": 40, "attention_factor": 1.3}),
])
def test_yarn_rope_matches_hf(family, yarn):
    """YaRN: the inverse frequencies, the cos / sin scale and the tables of HF's own rotary
    embedding, bit for bit (the same fp32 ops)."""
    model = tiny_model(family, rope_scaling={"rope_type": "yarn", **yarn})
    s = ModelSpec.from_hf_config(model.config)
    rot = model.model.rotary_emb
    assert torch.equal(s.rope_inv_freq(), rot.inv_freq.float())
    assert s.rope_attention_factor() == pytest.approx(rot.attention_scaling, rel=1e-12)
    assert s.rope_attention_factor() != 1.0
    pos = torch.arange(50)[None]
    cos, sin = rot(torch.zeros(1, 50, 1), pos)
    c, sn = s.rope_table(50)
    half = s.head_dim // 2
    assert torch.equal(c, cos[0, :, :half]) and torch.equal(sn, sin[0, :, :half])


def test_family_differences():
    spec = lambda fam: ModelSpec.from_hf_config(tiny_model(fam).config)  # noqa: E731
    assert spec("qwen2").attn_bias and not spec("qwen2").o_bias
    assert spec("qwen3").qk_norm and spec("qwen3").head_dim == 14
    assert spec("mistral").layer_windows == (5, 5) and spec("llama").layer_windows == (0, 0)
    assert spec("ministral").layer_windows == (5, 0) and spec("phi3").layer_windows == (6, 6)
    g = spec("granite")
    assert (g.embed_scale, g.residual_scale, g.attn_scale, g.logits_scale) == (3.0, 0.5, 0.2, 0.4)
    assert g.tied and not g.shares_head and spec("qwen2").shares_head
    assert spec("llama").q_scale == 1.0 and g.q_scale == pytest.approx(0.2 * 8 ** 0.5)
    h, e, so = spec("helium"), spec("ernie4_5"), spec("seed_oss")
    assert (h.attn_bias, h.o_bias, h.mlp_bias) == (True, False, False) and h.rope_interleaved
    assert (e.attn_bias, e.o_bias, e.mlp_bias) == (True, True, True) and e.rope_interleaved
    assert (so.attn_bias, so.o_bias, so.mlp_bias) == (True, False, True)
    assert torch.equal(h.rope_permutation(), torch.tensor([0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]))
    assert spec("llama_bias_tied").o_bias and spec("llama_bias_tied").mlp_bias
    assert spec("llama").rope["rope_type"] == "llama3"
    sm = ModelSpec.from_hf_config(tiny_model("smollm3", layers=5).config)
    assert sm.nope_layers == (1, 3) and sm.layer_windows == (0, 4, 0, 4, 0)
    assert spec("llama").nope_layers == ()
    gl = spec("glm")
    assert (gl.attn_bias, gl.o_bias, gl.mlp_bias, gl.rot, gl.rope_interleaved) == (
        True, False, False, 6, True)
    g2 = spec("gemma2")
    assert (g2.attn_softcap, g2.logit_softcap, g2.layer_windows) == (3.0, 2.0, (5, 0))
    assert g2.post_norms and not g2.local_rope and g2.q_scale == pytest.approx((12 / 20) ** 0.5)
    assert spec("llama").attn_softcap == spec("llama").logit_softcap == 0.0
    e4 = spec_of("exaone4", layers=4)
    assert not e4.pre_norms and e4.post_norms and e4.qk_norm and e4.nope_layers == (1, 3)
    assert e4.layer_windows == (5, 0, 5, 0) and spec("llama").pre_norms
    # no window: every layer rotates, as HF's (its RoPE skip needs a sliding window set)
    assert spec_of("exaone4", sliding_window=None, layer_types=["full_attention"] * 2
                   ).nope_layers == ()
    o2, o3 = spec("olmo2"), spec("olmo3")
    assert o2.qk_norm_full and not o2.pre_norms and o2.post_norms and not o2.local_rope
    assert o3.qk_norm_full and o3.layer_windows == (5, 0) and o3.sliding_rope().rope_theta == 100
    assert not spec("qwen3").qk_norm_full
    g4, g3 = spec("glm4"), spec("gemma3_text")
    assert g4.post_norms and not gl.post_norms and g4.rot == 6 and not g4.local_rope
    assert g3.post_norms and g3.qk_norm and g3.act == "gelu_tanh" and g3.layer_windows == (5, 0)
    assert g3.attn_scale == 24 ** -0.5 and g3.q_scale == pytest.approx((16 / 24) ** 0.5)
    assert g3.rope == {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}
    assert g3.sliding_rope().rope_theta == 100.0 and g3.sliding_rope().rope["rope_type"] == \
        "default"
    # a model whose layers all attend fully needs no second table
    assert not spec_of("gemma3_text", sliding_window_pattern=1).local_rope
    q5 = spec_of("qwen3_5_text", layers=5)  # every second layer attends (the tiny model's)
    assert q5.linear_layers == (0, 2, 4) and q5.attn_layers == (1, 3) and q5.attn_gate
    assert q5.gdn == (2, 6, 6, 10, 3) and q5.gdn_dims == (12, 60, 84, 156)
    assert [q5.attn_index(l) for l in q5.attn_layers] == [0, 1] and q5.rot == 4
    assert [q5.lin_index(l) for l in q5.linear_layers] == [0, 1, 2]
    assert not spec("qwen3").linear_layers and spec("qwen3").attn_layers == (0, 1)


def spec_of(family, **kw):
    return ModelSpec.from_hf_config(tiny_model(family, **kw).config)


def test_layer_norm_specs():
    """LayerNorm families: the eps from the family's field (OLMo 1's a constant 1e-5), the norm
    biases switching on the q / k / v and MLP biases they fold into and the logits' bias, a tied
    head never the (centered) embedding's tensor."""
    s = spec_of("stablelm", layer_norm_eps=3e-6)
    assert s.layer_norm and s.head_bias and s.attn_bias and s.mlp_bias and not s.o_bias
    assert s.rms_eps == 3e-6 and s.rot == 4 and s.gated
    c = spec_of("starcoder2", norm_epsilon=2e-6)
    assert c.rms_eps == 2e-6 and not c.gated and c.act == "gelu_tanh" and c.o_bias
    assert c.layer_windows == (5, 5) and c.tied and not c.shares_head
    o = spec_of("olmo")
    assert o.layer_norm and not (o.head_bias or o.attn_bias or o.mlp_bias) and o.rms_eps == 1e-5
    assert o.tied and not o.shares_head
    j = spec_of("jais2", layer_norm_eps=4e-6)
    assert j.rms_eps == 4e-6 and j.mlp_bias and j.o_bias and j.act == "relu2" and not j.gated
    # parallel blocks: Phi's biases on every projection whatever the config says, Cohere's
    # logits multiplier, Cohere 2's full layers without RoPE
    p = spec_of("phi")
    assert p.parallel and p.attn_bias and p.o_bias and p.mlp_bias and p.head_bias and p.rot == 6
    co, c2 = spec_of("cohere"), spec_of("cohere2")
    assert co.parallel and co.rope_interleaved and co.logits_scale == 0.5 and not co.head_bias
    assert co.tied and not co.shares_head and not spec_of("llama").parallel
    assert c2.parallel and c2.layer_windows == (5, 0) and c2.nope_layers == (1,)
    # per-head q / k LayerNorms by a config flag (StableLM-2-12B, Command R+): RMSNorms of heads
    # whose rows packing centers; StableLM's parallel blocks by use_parallel_residual
    sq, cq, st_ = spec_of("stablelm_qk"), spec_of("cohere_qk"), spec_of("stablelm")
    assert sq.qk_norm and sq.qk_layer_norm and sq.parallel and not sq.qk_norm_full
    assert cq.qk_norm and cq.qk_layer_norm and not co.qk_norm and not co.qk_layer_norm
    assert not (st_.qk_norm or st_.parallel) and not spec_of("qwen3").qk_layer_norm
    cg = spec_of("codegen")  # GPT-J's blocks (rotary_dim on interleaved pairs, the head's bias)
    assert cg.parallel and cg.rope_interleaved and cg.rot == 4 and cg.head_bias and cg.mlp_bias
    assert (cg.n_heads, cg.n_kv_heads, cg.head_dim, cg.act) == (8, 8, 6, "gelu_tanh")
    ap = spec_of("apertus")  # xIELU without a gate, q / k norms, q / k / v / o biases
    assert (ap.act, ap.gated, ap.qk_norm, ap.attn_bias, ap.o_bias, ap.mlp_bias) == \
        ("xielu", False, True, True, True, False)
    g2 = ModelSpec.from_hf_config(tf.GPT2Config(n_embd=64, n_head=4, layer_norm_epsilon=3e-6))
    assert (g2.ffn_dim, g2.act, g2.rms_eps, g2.max_position) == (256, "gelu_tanh", 3e-6, 1024)
    assert g2.learned_positions and g2.tied and not g2.shares_head and g2.attn_bias
    nx = spec_of("gpt_neox")
    assert nx.parallel and nx.act == "gelu" and nx.rot == 4 and nx.mlp_bias and nx.o_bias
    assert not spec_of("gpt_neox", use_parallel_residual=False).parallel
    # GPT-BigCode: the KV heads from multi_query (its config's num_key_value_heads can hold the
    # class default's 12, which the model never reads); OPT: LayerNorm eps 1e-5, ReLU, ffn_dim,
    # the biases by enable_bias (the norms' biases keep q / k / v and gate / up biased)
    bc, mha = spec_of("gpt_bigcode"), spec_of("gpt_bigcode_mha")
    assert (bc.n_heads, bc.n_kv_heads, mha.n_heads, mha.n_kv_heads) == (6, 1, 4, 4)
    assert bc.learned_positions and bc.tied and bc.act == "gelu_tanh" and mha.act == "gelu"
    op = spec_of("opt")
    assert (op.rms_eps, op.act, op.ffn_dim, op.gated) == (1e-5, "relu", 70, False)
    assert op.learned_positions and op.o_bias and op.head_bias and not op.tied
    nob = spec_of("opt", enable_bias=False)
    assert not nob.o_bias and nob.attn_bias and nob.mlp_bias
    # Falcon: parallel by parallel_attn or the new decoder architecture (which ignores it), the
    # KV heads by multi_query or num_kv_heads, the erf GELU, biases by `bias`
    f7, f40, fseq = spec_of("falcon"), spec_of("falcon_new"), spec_of("falcon_seq")
    assert (f7.parallel, f40.parallel, fseq.parallel) == (True, True, False)
    assert (f7.n_kv_heads, f40.n_kv_heads, fseq.n_kv_heads) == (1, 2, 4)
    assert spec_of("falcon_new", parallel_attn=False).parallel
    # the KV heads as the model reads them, whatever the config reports: transformers 5.17's
    # FalconConfig maps num_key_value_heads to num_kv_heads (= the q heads by default)
    for key, want in (("falcon", 1), ("falcon_new", 2), ("falcon_seq", 4), ("falcon_rw", 9)):
        d = dict(tiny_model(key).config.to_dict(), num_key_value_heads=99)
        assert ModelSpec.from_hf_config(JsonConfig(d)).n_kv_heads == want, key
        d["num_key_value_heads"] = d["num_attention_heads"]
        assert ModelSpec.from_hf_config(JsonConfig(d)).n_kv_heads == want, key
    assert f7.act == "gelu" and not f7.o_bias and f40.o_bias and f40.mlp_bias and f7.tied


def test_tied_by_default_is_the_config_classes_default():
    """A config.json without tie_word_embeddings (transformers 4 writes only the values that
    differ from its base class's default, True: Gemma's files lack it) ties where the family's
    config class does."""
    classes = tf.models.auto.configuration_auto.CONFIG_MAPPING
    for mt in SPEC_FAMILIES:
        if mt in classes:
            want = bool(getattr(classes[mt](), "tie_word_embeddings", False))
            assert (mt in TIED_BY_DEFAULT) == want, mt
    for family, tied in (("gemma", True), ("llama", False)):
        d = tiny_model(family).config.to_dict()
        del d["tie_word_embeddings"]
        assert ModelSpec.from_hf_config(JsonConfig(d)).tied == tied, family


def test_peri_ln_and_vaultgemma_specs():
    """HyperCLOVAX's norms after the blocks follow its use_post_norm; its logits multiplied by
    logits_scaling (Granite's divided). VaultGemma: Gemma 2's caps and layers, no post norms.
    (Their own test: transformers versions before these models skip it.)"""
    h = spec_of("hyperclovax")
    assert h.post_norms and h.pre_norms and (h.residual_scale, h.logits_scale) == (0.5, 2.5)
    assert not spec_of("hyperclovax", use_post_norm=False).post_norms
    # a config.json without the attention's multiplier: the class's head_dim ** -0.5, not
    # Granite's 1.0
    d = tiny_model("hyperclovax").config.to_dict()
    want = ModelSpec.from_hf_config(type(tiny_model("hyperclovax").config)(**dict(
        d, attention_multiplier=None)))
    del d["attention_multiplier"]
    assert ModelSpec.from_hf_config(JsonConfig(d)) == want and want.attn_scale == 8 ** -0.5
    v = spec_of("vaultgemma")
    assert not v.post_norms and v.pre_norms and v.layer_windows == (5, 0)
    assert (v.attn_softcap, v.logit_softcap, v.act) == (3.0, 2.0, "gelu_tanh")


def _raw(**kw):  # a config HF itself would refuse to build (odd head_dim)
    base = dict(model_type="llama", hidden_size=56, num_attention_heads=8, num_key_value_heads=8,
                num_hidden_layers=1, intermediate_size=8, vocab_size=10, rms_norm_eps=1e-5)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("make,match", [
    (lambda: tf.OlmoConfig(clip_qkv=8.0), "clip_qkv=8.0"),
    (lambda: tf.PhiConfig(qk_layernorm=True), "qk_layernorm=True"),
    (lambda: tf.LlamaConfig(hidden_act="xielu"), "xIELU in an MLP with a gate"),
    (lambda: tf.CodeGenConfig(n_embd=48, n_head=6), "4 blocks"),  # q|k|v in 4 blocks of heads
    (lambda: tf.BloomConfig(apply_residual_connection_post_layernorm=True), "after the norm"),
    (lambda: tf.MptConfig(attn_config={"clip_qkv": 6.0}), "clip_qkv=6.0"),
    (lambda: tf.MptConfig(attn_config={"qk_ln": True}), "q / k LayerNorms"),
    (lambda: tf.MptConfig(attn_config={"alibi": False}), "no ALiBi"),
    (lambda: tf.GPTJConfig(rotary_dim=5), "rotary_dim=5"),
    (lambda: tf.GPT2Config(scale_attn_by_inverse_layer_idx=True), "1 / layer"),
    (lambda: tf.GPT2Config(scale_attn_weights=False), "unscaled attention"),
    (lambda: tf.GPTBigCodeConfig(scale_attn_weights=False), "unscaled attention"),
    (lambda: tf.OPTConfig(hidden_size=1024, num_attention_heads=16, word_embed_proj_dim=512),
     "word_embed_proj_dim=512 != 1024"),  # OPT-350m's projections in / out
    (lambda: tf.OPTConfig(do_layer_norm_before=False), "do_layer_norm_before=False"),
    (lambda: tf.OPTConfig(_remove_final_layer_norm=True), "no final LayerNorm"),
    (lambda: tf.XGLMConfig(pad_token_id=5), "pad_token_id=5 zeroes position 3's sinusoidal row"),
    (lambda: tf.DbrxConfig(), "mixture of experts whose router"),
    # a dense family's config with experts (a Mixtral GGUF file reads as a llama config)
    (lambda: _raw(num_local_experts=8, num_experts_per_tok=2), "llama: its config sets "
     "num_local_experts=8 -- a mixture of experts"),
    (lambda: tf.MixtralConfig(num_experts_per_tok=9), "num_experts_per_tok=9 of "
     "num_local_experts=8"),
    (lambda: tf.OlmoeConfig(clip_qkv=4.0), "clip_qkv=4.0"),
    # a mixture of experts no table names, known by its config's fields
    (lambda: _raw(model_type="new_moe", num_local_experts=8),
     "'new_moe' is not supported \\(a mixture of experts\\)"),
    (lambda: _raw(model_type="new_dense"), "'new_dense' is not supported; fastdecode supports"),
    (lambda: tf.PersimmonConfig(), "q / k LayerNorms with biases"),
    (lambda: tf.Gemma3TextConfig(use_bidirectional_attention=True), "bidirectional"),
    (lambda: _raw(attn_logit_softcapping=-1.0), "negative soft-capping"),
    (lambda: _raw(rope_parameters={"full_attention": {"rope_type": "default"},
                                   "sliding_attention": {"rope_type": "default"}}),
     "per-layer-type rope_parameters"),
    (lambda: _raw(model_type="gemma3_text", query_pre_attn_scalar=8, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6}, "sliding_attention": {
            "rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}},
        sliding_window=4, hidden_activation="gelu_pytorch_tanh"), "longrope on the sliding"),
    (lambda: tf.Mistral3Config(text_config=dict(model_type="lfm2")),
     "mistral3's language model: model_type 'lfm2' is not supported \\(short convolution"),
    (lambda: tf.LlamaConfig(hidden_act="quick_gelu"), "hidden_act"),
    (lambda: _raw(model_type="qwen3_next"), "linear-attention"),
    (lambda: _raw(model_type="gemma4_text"), "per-layer head sizes"),
    (lambda: tf.LlamaConfig(max_position_embeddings=4096, rope_scaling={
        "rope_type": "dynamic", "factor": 4.0}), "dynamic"),
    (lambda: _raw(num_attention_heads=6, num_key_value_heads=4, hidden_size=48), "multiple"),
    (lambda: _raw(head_dim=7), "odd"),
    (lambda: _raw(hidden_size=64, partial_rotary_factor=0.5,
                  rope_scaling={"rope_type": "linear", "factor": 2.0}), "partial_rotary_factor"),
    (lambda: tf.Phi3Config(hidden_size=48, num_attention_heads=4, partial_rotary_factor=0.05),
     "rotates 0 of head_dim 12"),
    (lambda: _raw(model_type="phi3", hidden_size=48, num_attention_heads=4,
                  num_key_value_heads=4, partial_rotary_factor=0.25,
                  rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                "original_max_position_embeddings": 16}), "odd rotary dim"),
    (lambda: _raw(hidden_size=64, rope_scaling={"rope_type": "freq_factors",
                                                "factors": [1.0] * 3}),
     "3 rope frequency factors for head_dim 8"),
])
def test_unsupported_configs_raise(make, match):
    with pytest.raises(UnsupportedModelError, match=match):
        ModelSpec.from_hf_config(make())


def test_unsupported_reasons_name_no_supported_type():
    """spec.UNSUPPORTED's reasons are for model types fastdecode does not run: none a family of
    its own or a vision-language wrapper it reads the language model of."""
    from fastdecode.spec import TEXT_OF, UNSUPPORTED
    assert not set(UNSUPPORTED) & (set(SPEC_FAMILIES) | set(TEXT_OF))


@pytest.mark.parametrize("family", ["phi3", "glm"])
@pytest.mark.parametrize("factor", [0.5, 0.75, 1 / 3, 1.0, 5.5 / 24])
def test_partial_rotary_matches_hf(family, factor):
    """Partial rotary (head_dim 24): HF rotates dims [0, rot) in pairs (i, i + rot/2) -- GLM:
    (2i, 2i + 1) -- and passes the rest through; the kernels rotate pairs (i, i + 12) of the
    packed q / k, whose dims rope_permutation reorders, with inv_freq 0 (cos 1, sin 0) past
    rot/2. Rotated so, the packed head is HF's rotated head in the same order, bit for bit.
    An odd int(24 x factor) (5): HF's 3 frequencies over 5, rotating 6 dims."""
    model = tiny_model(family, hidden_size=96, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=24, partial_rotary_factor=factor)
    s = ModelSpec.from_hf_config(model.config)
    assert s.rot == 2 * -(-int(24 * factor) // 2) and s.head_dim == 24
    perm = s.rope_permutation()
    assert (perm is None) == (factor == 1.0 and family == "phi3")  # GLM's pairs: interleaved
    perm = torch.arange(24) if perm is None else perm
    assert sorted(perm.tolist()) == list(range(24))
    inv = model.model.rotary_emb.inv_freq.float()
    assert torch.equal(s.rope_inv_freq()[:s.rot // 2], inv)
    assert not s.rope_inv_freq()[s.rot // 2:].any()
    pos = torch.arange(40)
    cos, sin = model.model.rotary_emb(torch.zeros(1, 40, 1), pos[None])
    q, k = torch.randn(2, 1, 1, 40, 24).unbind(0)
    modeling = tf.models.phi3.modeling_phi3 if family == "phi3" else tf.models.glm.modeling_glm
    want = modeling.apply_rotary_pos_emb(q, k, cos, sin)[0][0, 0]
    c, sn = s.rope_table(40)
    x = q[0, 0][:, perm]
    got = torch.cat([x[:, :12] * c - x[:, 12:] * sn, x[:, 12:] * c + x[:, :12] * sn], 1)
    assert torch.equal(got, want[:, perm])  # the same tables and the same two products


@pytest.mark.parametrize("extra", [{}, {"attention_factor": 1.1}, {"factor": 2.0}])
def test_longrope_tables_match_hf(extra):
    """longrope: HF's short and long inverse frequencies (the long ones: a forward reaching
    past the original context of 16), its cos / sin scale, and the tables -- the short factors'
    below 16 and the long ones' from it on, or the long ones' everywhere -- bit for bit."""
    lr = {"rope_type": "longrope", "short_factor": [1.0, 1.3, 2.1], "long_factor": [1.5, 3.0, 7.0]}
    model = tiny_model("phi3", rope_scaling={**lr, **extra}, original_max_position_embeddings=16,
                       max_position_embeddings=64)
    s = ModelSpec.from_hf_config(model.config)
    rot = model.model.rotary_emb
    assert s.longrope_orig == 16 and s.rot == 6
    assert s.rope_attention_factor() == pytest.approx(rot.attention_scaling, rel=1e-12)
    assert s.rope_attention_factor() != 1.0
    tables = {long: s.rope_table(30, long) for long in (False, True)}
    for n, long in ((10, False), (30, True)):  # HF picks the factors by the forward's length
        cos, sin = rot(torch.zeros(1, n, 1), torch.arange(n)[None])
        assert torch.equal(s.rope_inv_freq(long)[:3], rot.inv_freq.float())
        for mine, hf in zip(tables[long], (cos, sin)):
            assert torch.equal(mine[:n, :3], hf[0, :, :3])
            assert torch.equal(mine[:, 3:], torch.full_like(mine[:, 3:], float(hf is cos)))
    for short_t, long_t in zip(*tables.values()):
        assert torch.equal(short_t[16:], long_t[16:]) and not torch.equal(short_t, long_t)


def test_longrope_config_forms():
    """transformers 4.x's form (rope_scaling "su", the original context on the config) reads
    as 5.x's; factor lists that do not match the rotated pairs raise."""
    base = dict(model_type="phi3", hidden_size=48, num_attention_heads=4, num_key_value_heads=4,
                num_hidden_layers=1, intermediate_size=8, vocab_size=10, rms_norm_eps=1e-5,
                max_position_embeddings=64)
    su = {"type": "su", "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}
    s = ModelSpec.from_hf_config(SimpleNamespace(**base, rope_scaling=su,
                                                 original_max_position_embeddings=16))
    assert s.rope["rope_type"] == "longrope" and s.longrope_orig == 16
    with pytest.raises(UnsupportedModelError, match="long_factor has 5 entries for 6"):
        ModelSpec.from_hf_config(SimpleNamespace(**base, rope_scaling=dict(
            su, long_factor=[2.0] * 5), original_max_position_embeddings=16))
    with pytest.raises(UnsupportedModelError, match="original_max_position_embeddings"):
        ModelSpec.from_hf_config(SimpleNamespace(**base, rope_scaling=su))


def test_partial_factor_ignored_where_hf_ignores_it():
    """Llama's default rope rotates the whole head whatever partial_rotary_factor says (HF's
    too): the spec rotates all of it."""
    s = ModelSpec.from_hf_config(_raw(hidden_size=64, partial_rotary_factor=0.5))
    assert s.rot == s.head_dim == 8
    assert s.rope_permutation() is None


def test_qwen2_window_layers():
    cfg = tf.Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=7,
                         max_window_layers=2)
    assert ModelSpec.from_hf_config(cfg).layer_windows == (0, 0, 7, 7)
