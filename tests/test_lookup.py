"""Prompt lookup and assisted decoding (generate(prompt_lookup_num_tokens=k) /
generate(assistant_model=draft), fastdecode/lookup.py): the candidate index against a brute-force
scan, and generate()'s tokens against Hugging Face's -- greedy ones identical to HF's
step-by-step decoding (and to HF's own prompt lookup and assisted decoding), sampled ones drawn
from the same distributions as the plain sampler's."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdecode
from conftest import DEVICE
from fastdecode.lookup import NgramIndex
from helpers import record_calls
from models import tiny_model

# a prompt that repeats itself: the tiny models' greedy continuations fall into loops that the
# lookup guesses several tokens ahead
LOOPY = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]]


def scan_candidates(seq, k, max_n, eos):
    """The rule lookup.py states, by brute force: the longest final n-gram (n <= max_n) that
    occurred before, its latest earlier occurrence, the k tokens after it copied on past the end
    of the text from the copy itself, cut before an EOS; none: []."""
    L = len(seq)
    for n in range(min(max_n, L - 1), 0, -1):
        for i in range(L - n - 1, -1, -1):
            if seq[i:i + n] == seq[L - n:]:
                ext = list(seq)
                out = []
                for j in range(i + n, i + n + k):
                    t = ext[j]
                    if t in eos:
                        break
                    out.append(t)
                    ext.append(t)
                if out:
                    return out
                break
    return []


@given(seq=st.lists(st.integers(0, 5), min_size=1, max_size=40), k=st.integers(1, 8),
       max_n=st.integers(1, 4), eos=st.sets(st.integers(0, 5), max_size=1))
def test_candidates_match_a_scan(seq, k, max_n, eos):
    index = NgramIndex(seq[:1], max_n)
    for t in seq[1:]:  # grown one token at a time, as generate() grows it
        index.append(t)
    assert index.candidates(k, eos) == scan_candidates(seq, k, max_n, eos)


def test_candidates_examples():
    idx = NgramIndex([1, 2, 3, 9, 1, 2], 2)
    assert idx.candidates(3) == [3, 9, 1]           # after the earlier "1 2"
    assert idx.candidates(3, eos={9}) == [3]        # cut before an EOS
    assert NgramIndex([4, 4], 2).candidates(5) == [4] * 5   # a run, copied past the end
    assert NgramIndex([1, 2, 3, 1, 2], 1).candidates(4) == [3, 1, 2, 3]  # the latest "2"
    assert NgramIndex([1, 2, 3], 3).candidates(4) == []    # nothing occurred before


def _counting_forward(fm):
    """The row count of each step the runtime's forward takes."""
    return record_calls(fm.runtime, "forward", lambda ids, history=None: ids.shape[0])


@pytest.mark.parametrize("family,mode,loops", [("qwen2", "torch", True), ("llama", "torch", True),
                                               ("mistral", "torch", False),
                                               ("qwen3", "ops", True), ("qwen2", "mega", True)])
def test_greedy_is_hf_greedy(family, mode, loops):
    """fp32: the tokens of HF's greedy decoding, and of HF's own prompt lookup; each step adds
    at least one token, and where the continuation loops (these seeds: all but the Mistral
    one) steps add several (the candidates were accepted)."""
    model = tiny_model(family).to(DEVICE)
    ids = torch.tensor(LOOPY, device=DEVICE)
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
        hf_lookup = model.generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, prompt_lookup_num_tokens=5)
    assert torch.equal(hf_lookup, want)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    rows = _counting_forward(fm)
    got = fm.generate(ids, max_new_tokens=30, prompt_lookup_num_tokens=5, eos_token_id=[])
    assert torch.equal(got, want), (got[0, 12:].tolist(), want[0, 12:].tolist())
    assert max(rows) == 6 and len(rows) <= 29  # steps after the first token's prefill
    assert not loops or len(rows) < 20, rows


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_steps_without_candidates_decode_chunks(mode, monkeypatch):
    """Plain greedy: a step that finds no candidate decodes a chunk of tokens in one launch,
    one token longer after each such step in a row (lookup.IDLE_CHUNK at most), and a step with
    candidates resets it. A prompt of distinct tokens and a small vocabulary's continuation:
    both kinds of steps; the tokens are HF's greedy ones, and EOS / max_new_tokens inside a
    chunk end the sequence there."""
    from fastdecode import lookup
    monkeypatch.setattr(lookup, "IDLE_CHUNK", 3)
    model = tiny_model("mistral").to(DEVICE)
    ids = torch.tensor([[11, 23, 35, 47, 59, 61, 73]], device=DEVICE)
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    chunks = record_calls(fm.runtime, "decode", lambda n, s, history=None: n)
    rows = _counting_forward(fm)
    got = fm.generate(ids, max_new_tokens=30, prompt_lookup_num_tokens=4, eos_token_id=[])
    assert torch.equal(got, want), (got[0, 7:].tolist(), want[0, 7:].tolist())
    # each chunk one longer than the one before, or 1 again after a step with candidates
    assert chunks[0] == 1 and 3 in chunks and max(chunks) == 3, chunks
    grows = [c == min(p + 1, 3) for p, c in zip(chunks, chunks[1:])]
    assert all(g or c == 1 for g, c in zip(grows, chunks[1:])), chunks
    assert 0 < grows.count(False) <= rows.count(5), (chunks, rows)
    # an EOS inside a chunk, and the last token's chunk: the sequence ends there
    eos = int(want[0, 7 + 4])
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    got = fm.generate(ids, max_new_tokens=30, prompt_lookup_num_tokens=4, eos_token_id=eos)
    assert torch.equal(got, want[:, :7 + 5])
    got = fm.generate(ids, max_new_tokens=5, prompt_lookup_num_tokens=4, eos_token_id=[])
    assert torch.equal(got, want[:, :7 + 5])
    # the cache holds the sequence but its last token, as its record (prefix_cache's reuse)
    # says: after the chunks, and after a step that stopped at a row whose candidate was
    # rejected (this run's last step: the entry after that row held the rejected candidate,
    # which the record took for the chosen token -- and a next turn reused)
    assert fm.runtime.fed == got[0, :-1].tolist() and fm.runtime.position == got.shape[1] - 1


def test_hf_processing_and_stops():
    """HF's processors apply to each checked row with the sequence before it (repetition
    penalty, n-gram ban, min_new_tokens' EOS mask): HF's greedy tokens; an EOS stops at once;
    max_new_tokens, the streamer, and the recorded scores are as plain decoding's."""
    model = tiny_model("qwen2").to(DEVICE)
    ids = torch.tensor(LOOPY, device=DEVICE)
    kw = dict(max_new_tokens=20, do_sample=False, repetition_penalty=1.3, no_repeat_ngram_size=4)
    with torch.no_grad():
        want = model.generate(ids, eos_token_id=None, pad_token_id=0, **kw)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode="torch")
    assert torch.equal(fm.generate(ids, prompt_lookup_num_tokens=4, eos_token_id=[], **kw), want)
    plain = fm.generate(ids, max_new_tokens=16, eos_token_id=[])
    eos = int(plain[0, 12 + 5])  # the 6th new token: stops there (or where it first occurs)
    stop = plain[0, 12:].tolist().index(eos) + 1
    got = fm.generate(ids, max_new_tokens=16, eos_token_id=eos, prompt_lookup_num_tokens=4)
    assert torch.equal(got, plain[:, :12 + stop])
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=eos,
                              pad_token_id=0, min_new_tokens=8)
    assert torch.equal(fm.generate(ids, max_new_tokens=16, eos_token_id=eos, min_new_tokens=8,
                                   prompt_lookup_num_tokens=4), want)

    class Collect:
        def __init__(self):
            self.ids, self.ended = [], False

        def put(self, x):
            self.ids += x.reshape(-1).tolist()

        def end(self):
            self.ended = True
    s = Collect()
    out = fm.generate(ids, max_new_tokens=16, eos_token_id=[], prompt_lookup_num_tokens=3,
                      streamer=s, return_dict_in_generate=True, output_scores=True,
                      output_logits=True)
    ref = fm.generate(ids, max_new_tokens=16, eos_token_id=[], return_dict_in_generate=True,
                      output_scores=True)
    assert torch.equal(out.sequences, plain) and s.ended and s.ids == plain[0].tolist()
    assert len(out.scores) == len(out.logits) == 16
    # the same rows up to fp32 summation order (a many-row step's matmuls): K <= 88, ~1e-6
    for a, b in zip(out.scores, ref.scores):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_sampling_draws_from_the_same_distribution():
    """The 2nd and 3rd new tokens (chosen from checked rows, the candidates accepted or not)
    follow the plain sampler's distribution: 600 seeded draws each way, every token's
    frequency within 5 binomial standard deviations of the other's (a vocabulary of 7, a
    temperature that spreads the mass). The same seed gives the same draw; top_k=1 is greedy."""
    model = tiny_model("qwen2", vocab=7).to(DEVICE)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]], device=DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    kw = dict(max_new_tokens=3, do_sample=True, temperature=2.0, eos_token_id=[])
    N = 600
    counts = torch.zeros(2, 2, 7)
    for i in range(N):
        for w, extra in enumerate(({}, {"prompt_lookup_num_tokens": 3})):
            out = fm.generate(ids, seed=i, **kw, **extra)[0, -2:]
            counts[w, 0, out[0]] += 1
            counts[w, 1, out[1]] += 1
    p = counts / N
    pooled = p.mean(0)
    sigma = (pooled * (1 - pooled) * 2 / N).sqrt()
    assert ((p[0] - p[1]).abs() <= 5 * sigma + 1e-9).all(), (p[0], p[1])
    assert (pooled > 0.02).sum() >= 4  # the test has mass to compare
    look = dict(kw, prompt_lookup_num_tokens=3, max_new_tokens=10)
    assert torch.equal(fm.generate(ids, seed=7, **look), fm.generate(ids, seed=7, **look))
    assert torch.equal(fm.generate(ids, top_k=1, **look),
                       fm.generate(ids, max_new_tokens=10, eos_token_id=[]))


def test_bad_lookup_arguments_raise():
    fm = fastdecode.from_hf(tiny_model("llama").to(DEVICE), max_seq_len=32, mode="torch")
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    for kw in ({"prompt_lookup_num_tokens": 0},
               {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            fm.generate(ids, max_new_tokens=4, **kw)


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_assistant_model_greedy_is_hf_greedy(mode):
    """assistant_model (HF's assisted decoding): a draft model proposes, the model checks. The
    tokens are HF's greedy ones (and HF's own assisted decoding's) whatever the draft: itself
    (every candidate accepted: 30 tokens in 2 steps of 16 rows after the prompt's) or a
    one-layer stranger (hardly any accepted: a step per token); the HF draft is packed once.
    (mega, in the interpreter: the drafts run in torch mode, the stranger over 6 tokens, once:
    the second call's draft reuse is torch mode's HF draft packing.)"""
    target = tiny_model("qwen2", layers=3).to(DEVICE)
    stranger = tiny_model("qwen2", layers=1, seed=5).to(DEVICE)
    ids = torch.tensor(LOOPY, device=DEVICE)
    kw = dict(max_new_tokens=30, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        want = target.generate(ids, **kw)
        assert torch.equal(target.generate(ids, assistant_model=stranger, **kw), want)
    fm = fastdecode.from_hf(target, max_seq_len=64, mode=mode)
    if mode == "mega":
        target, stranger = (fastdecode.from_hf(m, max_seq_len=64, mode="torch")
                            for m in (target, stranger))
    rows = _counting_forward(fm)
    got = fm.generate(ids, max_new_tokens=30, eos_token_id=[], assistant_model=target)
    assert torch.equal(got, want) and rows == [16, 16]
    del rows[:]
    n, calls = (30, 2) if mode == "torch" else (6, 1)
    for _ in range(calls):
        got = fm.generate(ids, max_new_tokens=n, eos_token_id=[], assistant_model=stranger)
        assert torch.equal(got, want[:, :12 + n])
    assert len(rows) == calls * (n - 1)
    assert len(getattr(fm, "_drafts", ())) == (2 if mode == "torch" else 0)


def test_assistant_model_arguments():
    """A FastModel as the assistant; sampled decoding with top_k=1 is greedy decoding and a seed
    repeats a draw; the heuristic schedule's k; the errors."""
    from fastdecode.lookup import DraftModel
    target = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(target, max_seq_len=64, mode="torch")
    draft = fastdecode.from_hf(tiny_model("llama", layers=1), max_seq_len=64, mode="torch",
                               device=DEVICE)
    ids = torch.tensor(LOOPY, device=DEVICE)
    plain = fm.generate(ids, max_new_tokens=12, eos_token_id=[])
    kw = dict(max_new_tokens=12, eos_token_id=[], assistant_model=draft)
    assert torch.equal(fm.generate(ids, **kw), plain)
    assert torch.equal(fm.generate(ids, do_sample=True, top_k=1, **kw), plain)
    s = dict(kw, do_sample=True, temperature=1.5, seed=3)
    assert torch.equal(fm.generate(ids, **s), fm.generate(ids, **s))
    d = DraftModel(draft, [1, 2], 6)
    d.accepted(2, 3)
    assert d.k == 5
    d.accepted(5, 5)
    assert d.k == 6      # +2, at most the k asked for
    c = DraftModel(draft, [1, 2], 6, "constant")
    c.accepted(0, 6)
    assert c.k == 6
    with pytest.raises(ValueError, match="exclude each other"):
        fm.generate(ids, prompt_lookup_num_tokens=3, **kw)
    with pytest.raises(ValueError, match="num_assistant_tokens_schedule"):
        fm.generate(ids, num_assistant_tokens_schedule="fast", **kw)
    wide = fastdecode.from_hf(tiny_model("llama", vocab=120), max_seq_len=64, mode="torch",
                              device=DEVICE)
    with pytest.raises(ValueError, match="vocabulary"):
        fm.generate(ids, max_new_tokens=4, assistant_model=wide)


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_forward_and_rewind_past_max_seq_len(mode):
    """Prompt lookup's step (forward, then rewind) repeated more often than the cache has
    positions: every repeat gives the first one's logits, and the history generate() keeps (one
    entry per position) is never indexed past its end (a forward is not a generate step;
    bench_lookup.py's timing loop once ran the GPU's history into the watchdog's word)."""
    model = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=8, mode=mode)
    rt = fm.runtime
    rt.forward(torch.tensor([5, 6, 7, 8], device=DEVICE))
    rows = torch.tensor([9, 5], device=DEVICE)
    first = rt.forward(rows)
    for _ in range(10):  # 11 steps of 2 rows: past the 9 entries of the history
        rt.rewind(4)
        assert torch.equal(rt.forward(rows), first)
    rt.check_status()
    ids = torch.tensor(LOOPY, device=DEVICE)[:, :4]
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    assert torch.equal(fm.generate(ids, max_new_tokens=4, eos_token_id=[]), want)
