"""Long prompts' prefill (runtime._prefill_long: the reference's layer blocks with matmuls in the
weights' dtype and the Triton attention kernel, prefill_chunk tokens a pass) against torch mode,
every family: windows, biases, q/k norm, tied heads, passes that start mid-cache."""
import pytest
import torch

import fastdecode
from conftest import DEVICE
from models import FAMILIES, tiny_model


def count_long_passes(fm):
    """Wraps fm's runtime._prefill_long to count its passes."""
    rt, calls = fm.runtime, []
    inner = rt._prefill_long

    def wrapped(ids, **kw):
        calls.append(ids.shape[0])
        return inner(ids, **kw)
    rt._prefill_long = wrapped
    return calls


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("mode", ["ops", "mega"])
def test_long_prompt_matches_torch(family, mode):
    """A 70-token prompt in passes of 32 (32 + 32 + 6 tokens, the later ones attending to the
    cache the earlier wrote): every token's logits within 1e-5 of torch mode's (fp32 weights: the
    matmuls are torch's in both, only the attention kernel sums in another order), then the
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


def test_short_prompts_keep_the_step_kernels():
    """Below prefill_min tokens the prompt runs the step kernels (no long pass)."""
    model = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=96, mode="ops")
    calls = count_long_passes(fm)
    fm(torch.arange(fm.runtime.prefill_min - 1, device=DEVICE)[None] % 101)
    assert calls == []
