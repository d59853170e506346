"""Long prompts' prefill (runtime._prefill_long: the reference's layer blocks with matmuls in the
weights' dtype and the Triton RMSNorm, SwiGLU and attention kernels, prefill_chunk tokens a pass)
against torch mode, every family: windows, biases, q/k norm, tied heads, passes that start
mid-cache; and in bf16 against the fp32 HF model."""
import pytest
import torch

import fastdecode
from conftest import DEVICE
from helpers import U, rel_err
from models import FAMILIES, MOE, tiny_model


def count_long_passes(fm):
    """Wraps fm's runtime._prefill_long to count its passes."""
    rt, calls = fm.runtime, []
    inner = rt._prefill_long

    def wrapped(ids, **kw):
        calls.append(ids.shape[0])
        return inner(ids, **kw)
    rt._prefill_long = wrapped
    return calls


# the mixtures of experts' long pass is one code path (reference.moe_block): two of them, ops,
# gpt-oss for its attention sinks in the pass's attention, FlexOlmo for its norms after the
# blocks, GLM-4.5 for its dense layer and DeepSeek-V3-style router; Qwen3.5 (its Gated DeltaNet
# in the pass: reference.gdn_block) in ops, its only kernel mode
@pytest.mark.parametrize("family,mode", [
    (f, m) for f in FAMILIES for m in ("ops", "mega")
    if (f not in MOE or m == "ops" and f in ("mixtral", "qwen2_moe", "gpt_oss", "flex_olmo",
                                             "glm4_moe")) and (f, m) != ("qwen3_5_text", "mega")])
def test_long_prompt_matches_torch(family, mode):
    """A 70-token prompt in passes of 32 (32 + 32 + 6 tokens, the later ones attending to the
    cache the earlier wrote): every token's logits within 1e-5 of torch mode's (fp32 weights: the
    matmuls are torch's in both, the Triton RMSNorm, SwiGLU and attention sum in another order
    -- ~1e-6 of fp32 rounding through 2 layers), then the
    same greedy continuation -- the first token chosen by the long path's head, the next ones
    by the decode steps on the cache it filled."""
    model = tiny_model(family).to(DEVICE)
    ids = torch.randint(0, 101, (1, 70), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    ref = fastdecode.from_hf(model, max_seq_len=96, mode="torch")
    want = ref(ids)[0]
    ref.reset()
    want_toks = ref.generate(ids, max_new_tokens=4, eos_token_id=[])
    fm = fastdecode.from_hf(model, max_seq_len=96, mode=mode)
    fm.runtime.prefill_chunk = 32
    calls = count_long_passes(fm)
    got = fm(ids)[0]
    assert calls == [32, 32, 6]
    assert float((got - want).norm() / want.norm()) < 1e-5
    fm.reset()
    assert torch.equal(fm.generate(ids, max_new_tokens=4, eos_token_id=[]), want_toks)
    assert calls == [32, 32, 6] * 2


@pytest.mark.parametrize("family", ["llama_bias_tied", "mistral", "qwen3"])
def test_long_prompt_bf16_close_to_fp32_hf(family):
    """bf16 weights: the long pass keeps activations in bf16 (cuBLAS outputs, as HF's bf16 layers),
    rounded at ~11 points per layer (two normed inputs, the QKV output, q, the attention output,
    o_proj's, two residual adds, gate|up's, the SwiGLU, down's; u = 2^-8 relative each) -- with
    2 layers and the head's 2 the logits' relative error is ~ sqrt(24) u ~ 1.9e-2 at worst (the
    step kernels' bf16 path: 1.2-2.3e-2 against torch mode on these models); we allow 4u sqrt(24)
    = 7.7e-2, and a wrong op is off by O(1). Biases, the 5-key window across passes, q/k norm."""
    model = tiny_model(family, dtype=torch.bfloat16).to(DEVICE)
    ids = torch.randint(0, 101, (1, 70), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with torch.no_grad():
        ref = tiny_model(family, dtype=torch.bfloat16).float().to(DEVICE)(ids).logits[0]
    fm = fastdecode.from_hf(model, max_seq_len=96, mode="ops")
    fm.runtime.prefill_chunk = 32
    calls = count_long_passes(fm)
    got = fm(ids)[0]
    assert calls == [32, 32, 6]
    assert rel_err(got, ref) < 4 * U[torch.bfloat16] * 24 ** 0.5, rel_err(got, ref)


def test_short_prompts_keep_the_step_kernels():
    """Below prefill_min tokens the prompt runs the step kernels (no long pass)."""
    model = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=96, mode="ops")
    calls = count_long_passes(fm)
    fm(torch.arange(fm.runtime.prefill_min - 1, device=DEVICE)[None] % 101)
    assert calls == []
