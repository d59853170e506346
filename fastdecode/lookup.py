"""Prompt lookup decoding: Hugging Face's generate(prompt_lookup_num_tokens=k).

A decode step streams every weight once whatever the number of tokens it carries (up to
Runtime.max_chunk: 16 rows of activations beside megabytes of weights), so one step can check
several guessed tokens for the price of about one. The guesses come from the text itself: the
last n-gram of the sequence (n = max_matching_ngram_size down to 1, the longest first) is looked
up where it last occurred before, and the k tokens that followed it there are the candidates,
cut before an EOS. (HF's PromptLookupCandidateGenerator takes the left-most occurrence and
stops at the end of the text; the latest one, copied on past the end, follows a loop or a
re-quoted passage where it is now -- the tokens are the same either way, only how many a step
accepts differs.) Text that repeats its context (summaries, code edits, quoting RAG answers)
accepts several tokens a step.

One step feeds [last chosen token, candidates] through Runtime.forward, which returns the logits
of every row; row i's token is chosen as a plain step would choose it after the sequence so far
(HF's processors and warpers on the host: hf_processing.build), and row i + 1 counts only while
row i's choice equals candidate i. So the tokens are those of step-by-step decoding -- greedy
ones exactly up to the rounding of a many-row step (the same tiles, another row count), sampled
ones drawn from the same distributions (other random draws) -- and the KV entries of rejected
candidates are dropped by moving the position back (Runtime.rewind): the next step overwrites
them. A step without candidates is a one-row step; one with any is padded to k + 1 rows, so a
GPU compiles one more kernel variant, not one per candidate count. Steps run with the host in
the loop (the accepted count decides the next input).
"""
from __future__ import annotations

import torch

from . import reference as R
from .generate import start_sequence
from .state import Sampling


class NgramIndex:
    """The latest occurrence of every n-gram (n <= max_n) of a growing token list, so the lookup
    of the sequence's final n-gram is O(1) per step instead of a scan of the context."""

    def __init__(self, tokens, max_n: int):
        self.seq, self.max_n, self.last = [], max_n, {}
        self.before = [None] * (max_n + 1)  # n -> the final n-gram's occurrence before it
        for t in tokens:
            self.append(t)

    def append(self, tok: int):
        self.seq.append(int(tok))
        end = len(self.seq)
        for n in range(1, min(self.max_n, end) + 1):
            key = tuple(self.seq[end - n:])
            self.before[n] = self.last.get(key)
            self.last[key] = end - n

    def candidates(self, k: int, eos=()) -> list:
        """Up to k tokens that followed the latest earlier occurrence of the longest final n-gram
        that occurred before, cut before the first EOS id. The copy may run into the tokens it
        is copying (an occurrence p tokens back continues with the last p tokens, again and
        again): a loop of any period, a run of one token, is guessed k tokens ahead."""
        seq = self.seq
        for n in range(min(self.max_n, len(seq) - 1), 0, -1):
            i = self.before[n]
            if i is not None:  # copied as LZ77 copies: past the end, from the copy itself
                out = []
                for j in range(i + n, i + n + k):
                    t = seq[j] if j < len(seq) else out[j - len(seq)]
                    if t in eos:
                        break
                    out.append(t)
                if out:
                    return out
        return []


def generate(rt, ids: torch.Tensor, *, max_new_tokens: int, k: int, max_ngram: int,
             sampling: Sampling, eos=frozenset(), streamer=None, seed=None, reuse=False):
    """ids [T] (validated) -> LongTensor [1, T + new] on ids' device. sampling: HF's processing
    as one list (hf_processing.build: processors, warpers, criteria), applied to each checked
    row with the sequence before it; sampling.record: each new token's processed scores and raw
    logits into rt.state.record."""
    T = ids.shape[0]
    if T + max_new_tokens > rt.max_seq_len:
        raise ValueError(f"prompt ({T} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len={rt.max_seq_len}; build the model with a larger max_seq_len")
    k = max(0, min(int(k), rt.max_chunk - 1))  # one step: the last token and k candidates
    st = rt.state
    st.record = ([], []) if sampling.record else None
    if streamer is not None:
        streamer.put(ids[None].cpu())
    out = []
    if max_new_tokens > 0:
        # the first token, as generate's other paths choose it
        start_sequence(rt, ids, sampling, seed=seed, eos=eos, max_new_tokens=max_new_tokens,
                       reuse=reuse)
        index = NgramIndex(ids.tolist(), max_ngram)
        tok, scores, raw = int(rt.tokens(0, 1)[0]), st.scores, st.raw
        rows, cands, start = None, [], 0
        while True:
            fast = rows is not None and not (sampling.processors or sampling.do_sample)
            greedy = rows.float().argmax(-1).tolist() if fast else None  # one sync a step
            for i in range(1 if rows is None else len(cands) + 1):
                if fast:
                    raw = scores = rows[i:i + 1]
                    tok = greedy[i]
                elif rows is not None:  # row i: the token after the sequence so far
                    raw = rows[i:i + 1]
                    scores = raw
                    seq = torch.tensor([index.seq], dtype=torch.long, device=raw.device)
                    for p in sampling.processors:
                        scores = p(seq, scores)
                    tok = R.choose(scores, sample=sampling.do_sample, generator=rt.generator)
                if st.record is not None:
                    st.record[0].append(scores.clone())
                    st.record[1].append(raw.clone())
                out.append(tok)
                index.append(tok)
                if streamer is not None:
                    streamer.put(torch.tensor([tok]))
                if tok in eos or len(out) == max_new_tokens or _stops(sampling, index, scores):
                    return _finish(ids, out, streamer)
                if rows is None or i >= len(cands) or tok != cands[i]:
                    break
            if rows is not None:  # the cache keeps the rows whose inputs were right
                rt.rewind(start + i + 1)
            start = rt.position
            room = min(k, rt.max_seq_len - start - 1)
            cands = index.candidates(room, eos)
            # a step has 1 or room + 1 rows whatever the candidates found (an EOS cut, the
            # last tokens): one row count, one compiled kernel; the padding rows are not read
            feed = cands + cands[-1:] * (room - len(cands))
            rows = rt.forward(torch.tensor([tok] + feed, dtype=torch.long, device=ids.device))
    return _finish(ids, out, streamer)


def _stops(sampling, index, scores) -> bool:
    """The caller's / HF's stopping criteria on the sequence so far (prompt and new tokens)."""
    if not sampling.criteria:
        return False
    seq = torch.tensor([index.seq], dtype=torch.long, device=scores.device)
    return any(bool(torch.as_tensor(c(seq, scores)).any()) for c in sampling.criteria)


def _finish(ids, out, streamer):
    if streamer is not None:
        streamer.end()
    new = torch.tensor(out, dtype=torch.long, device=ids.device)
    return torch.cat([ids.long(), new])[None]
