"""The bytes a decode step must read (the roofline's numerator) for the benchmark shapes, against
the figures in the workspace's KNOWLEDGE.md: Llama-3.2-1B ~2.47 GB (tied head read once),
Llama-3.1-8B ~15.0 GB (embedding table not streamed, lm_head is)."""
import os
import sys

import pytest

from fastdecode.spec import ModelSpec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))


@pytest.mark.parametrize("key,gb", [("1b", 2.47), ("8b", 15.0)])
def test_step_bytes(key, gb):
    from shapes import SHAPES
    spec = ModelSpec.from_hf_config(SHAPES[key][1]())
    assert abs(spec.weight_bytes_per_token() / 1e9 - gb) < 0.01 * gb
    # the KV cache read at 4096 tokens: 2 (k, v) x layers x kv_dim x 4096 x 2 bytes
    assert spec.kv_bytes(4096) == 2 * spec.n_layers * spec.kv_dim * 4096 * 2


@pytest.mark.parametrize("key,active,total,embed_active", [("olmoe-1b-7b", 1.3, 6.9, True),
                                                           ("qwen1.5-moe", 2.7, 14.3, True),
                                                           ("gpt-oss-20b", 3.6, 20.9, False)])
def test_mixture_params(key, active, total, embed_active):
    """A mixture of experts' decode step reads the router, its top_k experts and the shared one,
    not every expert: with the embedding table (not streamed) the parameters a token uses and
    the packed total are the published counts -- OLMoE-1B-7B 1.3B active / 6.9B (its paper),
    Qwen1.5-MoE-A2.7B 2.7B activated / 14.3B (its model card), gpt-oss-20b 3.6B active / 20.9B
    (OpenAI's model card, whose active count leaves the embedding table out), to their
    rounding (gpt-oss's biases and sinks, 0.02B, not counted)."""
    from shapes import SHAPES
    spec = ModelSpec.from_hf_config(SHAPES[key][1]())
    embed = spec.vocab_size * spec.d_model
    assert round((spec.weight_bytes_per_token() / 2 + embed * embed_active) / 1e9, 1) == active
    assert round((spec.weight_bytes_per_token(all_experts=True) / 2 + embed) / 1e9, 1) == total


@pytest.mark.parametrize("layers,experts,active,total,packed", [(24, 32, 3.6, 20.9, 13.7),
                                                                 (36, 128, 5.1, 116.8, 65.2)])
def test_gpt_oss_mxfp4_sizes(layers, experts, active, total, packed):
    """gpt-oss-20b / -120b (OpenAI's model card: 3.6B / 5.1B active of 20.9B / 116.8B, the
    embedding table out of the active count) with their experts kept MXFP4 (quant.MXFP4_BYTES:
    17 / 32 of a byte an element): the 120b's packed weights, embedding and lm_head in bf16
    included, take 65.2 GB -- one 80 GB GPU -- and a step of either reads its routed experts'
    codes and scales: the 20b 3.71 GB a token instead of 7.21."""
    from transformers import GptOssConfig
    from fastdecode.quant import MXFP4_BYTES
    spec = ModelSpec.from_hf_config(GptOssConfig(num_hidden_layers=layers,
                                                 num_local_experts=experts, experts_per_token=4,
                                                 num_experts_per_tok=4))
    embed = spec.vocab_size * spec.d_model
    assert round(spec.weight_bytes_per_token() / 2e9, 1) == active
    assert round((spec.weight_bytes_per_token(all_experts=True) / 2 + embed) / 1e9, 1) == total
    assert round((spec.weight_bytes_per_token(all_experts=True, expert_elt=MXFP4_BYTES)
                  + 2 * embed) / 1e9, 1) == packed
    step = spec.weight_bytes_per_token(expert_elt=MXFP4_BYTES)
    routed = 3 * spec.top_k * spec.expert_ffn * spec.d_model * spec.n_layers
    assert step == spec.weight_bytes_per_token() - 2 * routed + round(routed * 17 / 32)


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen2_moe_dense", "qwen3_moe_dense"])
def test_mixture_bytes_are_the_packed_tensors(family):
    """weight_bytes_per_token(all_experts=True) of a tiny mixture -- dense MLP layers among its
    expert layers too (ModelSpec.dense_layers: their own width, no router or experts) -- is the
    packed matrices', router's, norms' and lm_head's bytes, counted tensor by tensor (the
    biases and q / k norms, which the formula leaves out, aside)."""
    import fastdecode
    from models import tiny_model
    pw = fastdecode.from_hf(tiny_model(family), max_seq_len=16, mode="torch").weights
    names = ("w_qkv", "w_o", "w_gu", "w_down", "w_router", "w_experts_gu", "w_experts_down",
             "w_dense_gu", "w_dense_down", "attn_norm", "mlp_norm", "lm_head", "final_norm")
    tensors = [getattr(pw, n) for n in names if getattr(pw, n) is not None]
    assert bool(pw.spec.dense_layers) == (pw.w_dense_gu is not None) == family.endswith("dense")
    assert pw.spec.weight_bytes_per_token(elt=4, all_experts=True) == \
        sum(4 * t.numel() for t in tensors)
