"""Sampling: Gumbel-max frequencies match softmax(logits / T) (chi-square), top-k / top-p / min-p
never emit an excluded token and match HF's warpers, the repetition penalty matches HF's processor
and HF's greedy generate, seeds reproduce."""
import pytest
import torch

import fastdecode
from fastdecode import ops
from fastdecode import reference as R
from conftest import DEVICE
from models import tiny_model

# chi-square critical values at p = 1e-4 (df = 7 and df = 11): a correct sampler fails once in
# 10,000 runs; the draws are seeded, so the test is deterministic anyway.
CHI2_CRIT = {7: 29.88, 11: 37.37}


def chi2(counts, probs):
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def gumbel_counts(logits, temp, n, seed):
    """n independent samples: n identical rows, each row gets its own philox offsets."""
    rows = logits[None].expand(n, -1).contiguous().to(DEVICE)
    seedb = torch.tensor([seed], dtype=torch.int64, device=DEVICE)
    tempb = torch.tensor([temp], dtype=torch.float32, device=DEVICE)
    pval, pidx = ops.sample_logits(rows, seedb, tempb, block_n=4)  # several slices: merge exercised
    toks = pidx.gather(1, pval.argmax(1, keepdim=True))[:, 0].long().cpu()
    return torch.bincount(toks, minlength=logits.shape[0]).double()


@pytest.mark.parametrize("temp", [0.7, 1.0, 1.6])
def test_gumbel_max_frequencies(temp):
    logits = torch.tensor([1.0, 0.5, -0.3, 2.0, 0.0, -1.0, 1.5, 0.2, 0.9, -0.5, 1.1, 0.3])
    counts = gumbel_counts(logits, temp, 3000, seed=1234)
    probs = torch.softmax(logits.double() / temp, 0)
    assert chi2(counts, probs) < CHI2_CRIT[11]
    # the same test has the power to reject a sampler that ignores the temperature
    wrong = torch.softmax(logits.double(), 0)
    if temp != 1.0:
        assert chi2(counts, wrong) > CHI2_CRIT[11]


def test_lm_head_sample_path_frequencies():
    """The fused lm_head SAMPLE path: x rows identical, W chosen so logits are known exactly."""
    K, V = 8, 8
    w = torch.eye(V, K)
    logits = torch.tensor([0.3, 1.2, -0.4, 0.8, 0.0, 1.5, -1.0, 0.6])
    # rmsnorm(x) * norm_w = logits when x = logits, norm_w = rms(logits)
    rms = logits.pow(2).mean().add(1e-6).sqrt()
    x = logits[None].expand(3000, -1).contiguous()
    seedb = torch.tensor([99], dtype=torch.int64)
    tempb = torch.tensor([0.8])
    _, pval, pidx = ops.lm_head(x.to(DEVICE), w.to(DEVICE), torch.full((K,), float(rms)).to(DEVICE),
                                1e-6, sample=True, seed=seedb.to(DEVICE), temp=tempb.to(DEVICE))
    toks = pidx.gather(1, pval.argmax(1, keepdim=True))[:, 0].long().cpu()
    counts = torch.bincount(toks, minlength=V).double()
    assert chi2(counts, torch.softmax(logits.double() / 0.8, 0)) < CHI2_CRIT[7]


def test_filter_logits_matches_hf_warpers():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(1, 50, generator=g) * 3
        k = int(torch.randint(1, 50, (1,), generator=g))
        p = float(torch.rand(1, generator=g))
        ref = TopPLogitsWarper(p)(None, TopKLogitsWarper(k)(None, logits.clone()))
        assert torch.equal(R.filter_logits(logits, k, p), ref)


def test_penalty_and_min_p_match_hf_processors():
    """Bit for bit: elementwise fp32 ops in the same order as HF's."""
    from transformers.generation.logits_process import (MinPLogitsWarper,
                                                        RepetitionPenaltyLogitsProcessor)
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        V = int(torch.randint(2, 80, (1,), generator=g))
        logits = torch.randn(1, V, generator=g) * 3
        ids = torch.randint(0, V, (1, int(torch.randint(1, 30, (1,), generator=g))), generator=g)
        seen = torch.zeros(V, dtype=torch.bool)
        seen[ids[0]] = True
        pen = 0.1 + 2.5 * float(torch.rand(1, generator=g))
        ref = RepetitionPenaltyLogitsProcessor(pen)(ids, logits.clone())
        assert torch.equal(R.repetition_penalty(logits, seen, pen), ref)
        mp = float(torch.rand(1, generator=g))
        ref = MinPLogitsWarper(mp)(ids, logits.clone())
        assert torch.equal(R.filter_logits(logits, min_p=mp), ref)


def allowed_next(logits, seq, t, kw, temp):
    """Reference: the tokens HF's processors leave at step t of seq (penalty over seq[:t])."""
    row = logits[t - 1:t]
    if kw.get("repetition_penalty", 1.0) != 1.0:
        seen = torch.zeros(row.shape[-1], dtype=torch.bool, device=row.device)
        seen[seq[:t]] = True
        row = R.repetition_penalty(row, seen, kw["repetition_penalty"])
    return R.filter_logits(row / temp, kw.get("top_k"), kw.get("top_p"), kw.get("min_p"))


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_top_k_top_p_never_emit_excluded_tokens(mode):
    """mega: filtered sampling steps fall back to the ops bodies (the task stream samples with
    temperature only), the rest of the sequence stays in the megakernel. With a repetition
    penalty the allowed set of each step depends on every token before it."""
    model = tiny_model("llama", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.randint(0, 61, (1, 5), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    for kw in (dict(top_k=3), dict(top_p=0.6), dict(top_k=5, top_p=0.8), dict(min_p=0.3),
               dict(top_k=2, repetition_penalty=3.0), dict(min_p=0.2, repetition_penalty=0.5)):
        out = fm.generate(ids, max_new_tokens=10, do_sample=True, temperature=1.3, seed=7, **kw)
        with torch.no_grad():
            logits = model(out).logits[0].float()
        for t in range(ids.shape[1], out.shape[1]):
            allowed = allowed_next(logits, out[0], t, kw, 1.3)
            assert torch.isfinite(allowed[0, out[0, t]]), (kw, t)


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_repetition_penalty_greedy_matches_hf(family, mode):
    """Greedy with a penalty (HF applies it without sampling too): HF's generate token for
    token, penalties that discourage (> 1) and encourage (< 1) repeats; each one changes the
    sequence, so the test can tell a penalty that is not applied."""
    model = tiny_model(family, vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.randint(0, 61, (1, 6), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    plain = fm.generate(ids, max_new_tokens=14)
    for pen in (2.0, 0.5):
        out = fm.generate(ids, max_new_tokens=14, repetition_penalty=pen)
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=14, do_sample=False, repetition_penalty=pen)
        assert torch.equal(out, ref), pen
        assert not torch.equal(out, plain), pen


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_min_new_tokens_matches_hf(mode):
    """No stop token among the first min_new_tokens (or before min_length, prompt included):
    the stop token greedy decoding emits 2nd is masked until then, as HF's processors do,
    greedy and with a penalty; without them the sequence ends by then."""
    model = tiny_model("llama", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.randint(0, 61, (1, 6), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    eos = [int(fm.generate(ids, max_new_tokens=2, eos_token_id=[])[0, -1]), 60]
    assert fm.generate(ids, max_new_tokens=12, eos_token_id=eos).shape[1] <= 8
    for kw, least in ((dict(min_new_tokens=5), 11), (dict(min_length=13), 13),
                      (dict(min_new_tokens=9, repetition_penalty=0.7), 15)):
        out = fm.generate(ids, max_new_tokens=12, eos_token_id=eos, **kw)
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=12, eos_token_id=eos, do_sample=False, **kw)
        assert torch.equal(out, ref), kw
        assert out.shape[1] >= least, kw


@pytest.mark.parametrize("mode", ["torch", "ops"])
def test_min_p_one_keeps_only_the_top_token(mode):
    """min_p=1 removes every token less likely than the top one: sampling gives the greedy
    sequence whatever the seed and temperature."""
    model = tiny_model("qwen3", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.tensor([[3, 1, 4, 1, 5]], device=DEVICE)
    greedy = fm.generate(ids, max_new_tokens=10)
    for seed in (1, 2):
        out = fm.generate(ids, max_new_tokens=10, do_sample=True, temperature=3.0, min_p=1.0,
                          seed=seed)
        assert torch.equal(out, greedy)


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_seed_reproducible(mode):
    model = tiny_model("qwen3", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    a = fm.generate(ids, max_new_tokens=12, do_sample=True, temperature=2.0, seed=11)
    b = fm.generate(ids, max_new_tokens=12, do_sample=True, temperature=2.0, seed=11)
    c = fm.generate(ids, max_new_tokens=12, do_sample=True, temperature=2.0, seed=12)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)  # 12 tokens at T=2 over 61 ids: a collision is ~impossible


class BanOddAndLast:
    """A caller's logits processor that reads input_ids: no odd token id, never the last token
    again (so HF and fastdecode must hand it the same prompt + tokens each step)."""
    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, 1::2] = float("-inf")
        scores[0, input_ids[0, -1]] = float("-inf")
        return scores


class StopAtMultipleOf:
    """A caller's stopping criterion: ends the sequence at a token divisible by m (HF returns a
    bool tensor per row). HF's sampling loop hands criteria scores=None unless asked for scores;
    fastdecode hands them the step's processed scores."""
    def __init__(self, m):
        self.m = m

    def __call__(self, input_ids, scores, **kw):
        assert scores is None or (scores.shape[0] == 1 and torch.isfinite(scores).any())
        return input_ids[:, -1] % self.m == 0


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_caller_logits_processor_and_stopping_criteria_match_hf(mode):
    """HF's LogitsProcessorList / StoppingCriteriaList run on the host between each step's
    logits and its choice (after the penalty, before the warpers, as HF orders them): greedy
    tokens equal HF's generate; the criterion ends the sequence where HF's does; sampled tokens
    obey the processor."""
    from transformers import LogitsProcessorList, StoppingCriteriaList
    model = tiny_model("qwen2", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.randint(0, 61, (1, 5), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    plain = fm.generate(ids, max_new_tokens=10, eos_token_id=[])
    for kw in (dict(logits_processor=LogitsProcessorList([BanOddAndLast()])),
               dict(logits_processor=LogitsProcessorList([BanOddAndLast()]),
                    repetition_penalty=1.5),
               dict(stopping_criteria=StoppingCriteriaList([StopAtMultipleOf(4)]))):
        out = fm.generate(ids, max_new_tokens=10, eos_token_id=[], **kw)
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None,
                                 pad_token_id=0, **kw)
        assert torch.equal(out, ref), kw
        assert not torch.equal(out, plain), kw  # each one changes this sequence
    out = fm.generate(ids, max_new_tokens=10, eos_token_id=[], do_sample=True, temperature=2.0,
                      seed=5, logits_processor=[BanOddAndLast()])
    new = out[0, 5:]
    assert (new % 2 == 0).all() and (new[1:] != new[:-1]).all()


# the plain greedy continuation of the test's prompt: 44 27 44 57 3 30 17 43 14 44 43 21
HF_ARGS = [dict(no_repeat_ngram_size=1), dict(bad_words_ids=[[4], [57, 3]], suppress_tokens=[30]),
           dict(begin_suppress_tokens=[0, 44], sequence_bias={(3,): 4.0, (17, 43): -9.0}),
           dict(forced_eos_token_id=1, exponential_decay_length_penalty=(3, 1.4),
                eos_token_id=[1, 10]),
           dict(no_repeat_ngram_size=3, repetition_penalty=1.6, min_new_tokens=6,
                renormalize_logits=True, eos_token_id=[10]),
           dict(prefix_allowed_tokens_fn=lambda b, seq: [int(seq[-1]) // 2, 17, 40])]


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_hf_processors_match_hf_greedy(mode):
    """The rest of HF's processors (n-gram bans, bad words, suppression, sequence bias, forced
    and decayed EOS, prefix constraints) by transformers' own classes in HF's order: HF's greedy
    generate token for token, each argument set changing this sequence."""
    model = tiny_model("mistral", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.randint(0, 61, (1, 6), generator=torch.Generator().manual_seed(9)).to(DEVICE)
    plain = fm.generate(ids, max_new_tokens=12, eos_token_id=[10])
    for kw in HF_ARGS:
        kw = {"eos_token_id": [10], **kw}
        out = fm.generate(ids, max_new_tokens=12, **kw)
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0, **kw)
        assert torch.equal(out, ref), kw
        assert not torch.equal(out, plain), kw
    import copy  # a model's generation_config setting one applies, as in HF
    gc = copy.deepcopy(fm.generation_config)
    gc.no_repeat_ngram_size = 1
    assert torch.equal(fm.generate(ids, max_new_tokens=12, eos_token_id=[10], generation_config=gc),
                       fm.generate(ids, max_new_tokens=12, eos_token_id=[10],
                                   no_repeat_ngram_size=1))


def test_hf_sampling_warpers_keep_their_support():
    """typical / epsilon / eta sampling (HF's warpers, after temperature and top-k): every drawn
    token is one the warpers keep, and they do remove some."""
    from transformers.generation.logits_process import (EpsilonLogitsWarper, EtaLogitsWarper,
                                                        TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TypicalLogitsWarper)
    model = tiny_model("llama", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode="ops")
    ids = torch.tensor([[2, 7, 1, 8]], device=DEVICE)
    for kw, warper in ((dict(typical_p=0.5), TypicalLogitsWarper(0.5)),
                       (dict(epsilon_cutoff=0.05), EpsilonLogitsWarper(0.05)),
                       (dict(eta_cutoff=0.3), EtaLogitsWarper(0.3, device=str(DEVICE)))):
        out = fm.generate(ids, max_new_tokens=10, do_sample=True, temperature=1.7, top_k=20,
                          seed=1, eos_token_id=[], **kw)
        with torch.no_grad():
            logits = model(out).logits[0].float()
        cut = 0  # steps where the warper removed some of top-k's 20 (so the test can fail)
        for t in range(4, out.shape[1]):
            s = TopKLogitsWarper(20)(None, TemperatureLogitsWarper(1.7)(None, logits[t - 1:t]))
            w = warper(out[:, :t], s)
            assert torch.isfinite(w[0, out[0, t]]), (kw, t)
            cut += int(torch.isfinite(w).sum() < 20)
        assert cut > 0, kw


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
def test_return_dict_scores_and_logits_match_hf(mode):
    """return_dict_in_generate with output_scores / output_logits: HF's output object, the
    sequences HF's, one [1, V] fp32 row per new token -- scores after the processors (a
    repetition penalty and a bad word here: -inf where HF has it), logits raw. Tolerance: fp32
    logits of a 2-layer model summed in another order (the 1e-4 of test_api's forward)."""
    model = tiny_model("qwen3", vocab=61).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    ids = torch.tensor([[5, 3, 8, 1]], device=DEVICE)
    kw = dict(max_new_tokens=6, eos_token_id=None, return_dict_in_generate=True,
              output_scores=True, output_logits=True, repetition_penalty=1.4, bad_words_ids=[[7]])
    out = fm.generate(ids, **kw)
    with torch.no_grad():
        ref = model.generate(ids, do_sample=False, pad_token_id=0, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(out.logits) == len(ref.scores) == out.sequences.shape[1] - 4
    for ours, theirs in zip(out.scores + out.logits, ref.scores + ref.logits):
        assert ours.shape == (1, 61) and ours.dtype == torch.float32
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        fin = torch.isfinite(theirs)
        assert torch.allclose(ours[fin], theirs[fin], atol=1e-4, rtol=1e-4)
    assert torch.isinf(out.scores[0][0, 7]) and not torch.isinf(out.logits[0][0, 7])
    plain = fm.generate(ids, max_new_tokens=6, eos_token_id=None, return_dict_in_generate=True)
    assert plain.scores is None and torch.equal(plain.sequences,
                                                fm.generate(ids, max_new_tokens=6))
