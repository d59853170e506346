"""ModelSpec from HF configs: every size from the config, family differences, clear errors."""
from types import SimpleNamespace

import pytest
import torch
import transformers as tf

from fastdecode import UnsupportedModelError
from fastdecode.spec import ModelSpec
from models import FAMILIES, tiny_model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_spec_fields_and_rope_match_hf(family):
    model = tiny_model(family)
    s = ModelSpec.from_hf_config(model.config)
    cfg = model.config
    assert (s.n_layers, s.d_model, s.n_heads, s.vocab_size) == (
        cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size)
    assert s.qkv_dim == model.model.layers[0].self_attn.q_proj.out_features + \
        2 * model.model.layers[0].self_attn.k_proj.out_features
    assert s.tied == bool(cfg.tie_word_embeddings)
    inv = model.model.rotary_emb.inv_freq.float()
    assert torch.allclose(s.rope_inv_freq(), inv, rtol=1e-6, atol=0)
    assert getattr(model.model.rotary_emb, "attention_scaling", 1.0) == 1.0


@pytest.mark.parametrize("family,yarn", [
    ("qwen3", {"factor": 4.0, "original_max_position_embeddings": 64}),
    ("llama", {"factor": 8.0, "original_max_position_embeddings": 32, "beta_fast": 16.0,
               "beta_slow": 2.0, "truncate": False}),
    ("qwen2", {"factor": 2.0, "original_max_position_embeddings": 128, "mscale": 0.8,
               "mscale_all_dim": 0.5}),
    ("mistral", {"factor": 3.0, "original_max_position_embeddings": 40, "attention_factor": 1.3}),
])
def test_yarn_rope_matches_hf(family, yarn):
    """YaRN: the inverse frequencies and the cos / sin scale of HF's own rotary embedding (fp32
    there, fp64 here: 1e-6 relative is a few fp32 ulps)."""
    model = tiny_model(family, rope_scaling={"rope_type": "yarn", **yarn})
    s = ModelSpec.from_hf_config(model.config)
    rot = model.model.rotary_emb
    assert torch.allclose(s.rope_inv_freq(), rot.inv_freq.float(), rtol=1e-6, atol=0)
    assert s.rope_attention_factor() == pytest.approx(rot.attention_scaling, rel=1e-12)
    assert s.rope_attention_factor() != 1.0
    pos = torch.arange(50)[None]
    cos, sin = rot(torch.zeros(1, 50, 1), pos)
    c, sn = s.rope_table(50)
    half = s.head_dim // 2
    assert torch.allclose(c, cos[0, :, :half], rtol=1e-5, atol=1e-6)
    assert torch.allclose(sn, sin[0, :, :half], rtol=1e-5, atol=1e-6)


def test_family_differences():
    spec = lambda fam: ModelSpec.from_hf_config(tiny_model(fam).config)  # noqa: E731
    assert spec("qwen2").attn_bias and not spec("qwen2").o_bias
    assert spec("qwen3").qk_norm and spec("qwen3").head_dim == 14
    assert spec("mistral").layer_windows == (5, 5) and spec("llama").layer_windows == (0, 0)
    assert spec("llama_bias_tied").o_bias and spec("llama_bias_tied").mlp_bias
    assert spec("llama").rope["rope_type"] == "llama3"


def _raw(**kw):  # a config HF itself would refuse to build (odd head_dim)
    base = dict(model_type="llama", hidden_size=56, num_attention_heads=8, num_key_value_heads=8,
                num_hidden_layers=1, intermediate_size=8, vocab_size=10, rms_norm_eps=1e-5)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("make,match", [
    (lambda: tf.GPT2Config(), "gpt2"),
    (lambda: tf.LlamaConfig(hidden_act="gelu"), "hidden_act"),
    (lambda: tf.LlamaConfig(max_position_embeddings=4096, rope_scaling={
        "rope_type": "dynamic", "factor": 4.0}), "dynamic"),
    (lambda: _raw(num_attention_heads=6, num_key_value_heads=4, hidden_size=48), "multiple"),
    (lambda: _raw(head_dim=7), "odd"),
    (lambda: _raw(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (lambda: _raw(hidden_size=64, rope_scaling={"rope_type": "freq_factors",
                                                "factors": [1.0] * 3}),
     "3 rope frequency factors for head_dim 8"),
])
def test_unsupported_configs_raise(make, match):
    with pytest.raises(UnsupportedModelError, match=match):
        ModelSpec.from_hf_config(make())


def test_qwen2_window_layers():
    cfg = tf.Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=7,
                         max_window_layers=2)
    assert ModelSpec.from_hf_config(cfg).layer_windows == (0, 0, 7, 7)
