"""Decoding that checks guessed tokens, many a step: Hugging Face's prompt lookup
(generate(prompt_lookup_num_tokens=k): PromptLookup) and assisted decoding
(generate(assistant_model=draft): DraftModel, the guesses a smaller model's).

A decode step streams every weight once whatever the number of tokens it carries (up to
Runtime.max_chunk: 16 rows of activations beside megabytes of weights), so one step can check
several guessed tokens for the price of about one. Prompt lookup's come from the text itself: the
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
the loop (the accepted count decides the next input). Plain greedy decoding (no processors,
records or stopping criteria): a step that finds no candidate decodes a chunk instead
(decode_chunk: one launch of plain decode steps, one token longer after each such step in a
row, IDLE_CHUNK at most), so text that has stopped repeating itself pays a host round trip per
chunk rather than per token -- the same tokens, a repeat found up to a chunk later.
"""
from __future__ import annotations

import torch

from . import reference as R
from .generate import criteria_met, start_sequence
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


class PromptLookup:
    """Candidates copied from the text itself (NgramIndex), k a step at most."""

    def __init__(self, ids, k: int, max_ngram: int):
        self.k, self.index = k, NgramIndex(ids, max_ngram)

    def append(self, tok: int):
        self.index.append(tok)

    def candidates(self, room: int, eos) -> list:
        return self.index.candidates(min(room, self.k), eos)

    def accepted(self, n: int, offered: int):
        pass


class DraftModel:
    """Candidates from a smaller model's greedy continuation (HF's assistant_model): a FastModel
    with its own cache, which keeps what it holds of the sequence (prefix_cache's reuse), so a
    step prefills the target's correction and decodes k - 1 more -- on a GPU one megakernel
    launch and one read of its tokens. k follows HF's "heuristic" schedule unless "constant":
    2 more after a step whose candidates were all accepted, 1 fewer (down to 1) otherwise."""

    def __init__(self, draft, ids, k: int, schedule: str = "heuristic"):
        self.rt, self.seq, self.k, self.adapt = draft.runtime, list(ids), k, schedule != "constant"
        self.kmax, self.vocab = k, draft.spec.vocab_size
        self.foreign = any(t >= self.vocab for t in self.seq)  # a token the draft cannot embed

    def append(self, tok: int):
        self.seq.append(int(tok))
        self.foreign |= tok >= self.vocab

    def candidates(self, room: int, eos) -> list:
        # the draft holds len(seq) + k - 1 positions after its k tokens
        k = min(room, self.k, self.rt.max_seq_len - len(self.seq) + 1)
        if k < 1 or self.foreign:
            return []
        rt = self.rt
        ids = torch.tensor(self.seq, dtype=torch.long, device=rt.state.hist.device)
        start_sequence(rt, ids, _GREEDY, seed=0, eos=eos, max_new_tokens=k, reuse=True)
        if k > 1:
            rt.decode(k - 1, _GREEDY)
        out = []
        for t in rt.tokens(0, k).tolist():  # the draft stops at an EOS: nothing after it
            if t in eos:
                break
            out.append(t)
        rt.fed = (self.seq + out)[:rt.position]
        return out

    def accepted(self, n: int, offered: int):
        if self.adapt and offered:
            self.k = min(self.kmax, self.k + 2) if n == offered else max(1, self.k - 1)


def generate(rt, ids: torch.Tensor, *, max_new_tokens: int, source, rows_max: int,
             sampling: Sampling, eos=frozenset(), streamer=None, seed=None, reuse=False):
    """ids [T] (validated) -> LongTensor [1, T + new] on ids' device. source: the candidates
    (PromptLookup, DraftModel), at most rows_max - 1 a step (a step with any is padded to
    rows_max rows). sampling: HF's processing as one list (hf_processing.build: processors,
    warpers, criteria), applied to each checked row with the sequence before it;
    sampling.record: each new token's processed scores and raw logits into rt.state.record."""
    T = ids.shape[0]
    if T + max_new_tokens > rt.max_seq_len:
        raise ValueError(f"prompt ({T} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len={rt.max_seq_len}; build the model with a larger max_seq_len")
    k = max(0, min(rows_max - 1, rt.max_chunk - 1))  # one step: the last token, k candidates
    st = rt.state
    st.record = ([], []) if sampling.record else None
    if streamer is not None:
        streamer.put(ids[None].cpu())
    if max_new_tokens <= 0:
        return _finish(ids, [], streamer)
    out, seq = [], ids.tolist()

    def emit(tok, scores, raw) -> bool:
        """tok is the sequence's next token: recorded, streamed; True where generation stops."""
        if st.record is not None:
            st.record[0].append(scores.clone())
            st.record[1].append(raw.clone())
        out.append(tok)
        seq.append(tok)
        source.append(tok)
        if streamer is not None:
            streamer.put(torch.tensor([tok]))
        return tok in eos or len(out) == max_new_tokens or _stops(sampling, seq, scores)

    # the first token, as generate's other paths choose it
    start_sequence(rt, ids, sampling, seed=seed, eos=eos, max_new_tokens=max_new_tokens,
                   reuse=reuse)
    tok = int(rt.tokens(0, 1)[0])
    if emit(tok, st.scores, st.raw):
        return _finish(ids, out, streamer)
    # greedy without processors: each row's token is its argmax; and without records or
    # criteria, steps that found no candidate decode a chunk of tokens a launch, one more after
    # each such step in a row (IDLE_CHUNK at most)
    fast = not (sampling.processors or sampling.do_sample)
    plain = fast and not (sampling.criteria or st.record is not None)
    idle = 0
    while True:
        start = rt.position  # the cache holds seq[:-1]: tok, seq[-1], goes in next
        # rows a step may add: the cache's room, and no step across a longrope's switch (its
        # rows before the switch would take the long factors, plain decoding's the short ones)
        fits = min(k, rt.max_seq_len - start - 1, rt.rope_room() - 1)
        room = min(fits, max_new_tokens - len(out))
        cands = source.candidates(room, eos)[:room]
        if not cands and plain:
            idle += 1
            for t in decode_chunk(rt, tok, min(idle, IDLE_CHUNK, max_new_tokens - len(out),
                                               rt.max_seq_len - start), seq):
                if emit(t, None, None):
                    return _finish(ids, out, streamer)
            tok = t
            continue
        idle = 0
        # a step has 1 or k + 1 rows whatever the candidates found (an EOS cut, the last
        # tokens): one row count, one compiled kernel; the padding rows are not read
        pad = fits - len(cands)
        feed = cands + cands[-1:] * pad
        # from host memory: forward's one copy puts it in the step's ids buffer
        rows = rt.forward(torch.tensor([tok] + feed, dtype=torch.long),
                          history=lambda p: seq[:p])
        greedy = rows.float().argmax(-1).tolist() if fast else None  # one sync a step
        for i in range(len(cands) + 1):  # row i: the token after the sequence so far
            raw = scores = rows[i:i + 1]
            if greedy is not None:
                tok = greedy[i]
            else:
                prefix = torch.tensor([seq], dtype=torch.long, device=raw.device)
                for p in sampling.processors:
                    scores = p(prefix, scores)
                tok = R.choose(scores, sample=sampling.do_sample, generator=rt.generator)
            stop = emit(tok, scores, raw)
            if stop or i >= len(cands) or tok != cands[i]:
                break
        rt.rewind(start + i + 1)  # the cache keeps the rows whose inputs were right
        if stop:  # (so it holds the sequence but its last token: generate's prefix record)
            return _finish(ids, out, streamer)
        source.accepted(i, len(cands))


# the most tokens one launch decodes after steps that found no candidate (plain greedy): each
# such step in a row adds one, so text that stopped repeating itself pays one host round trip
# per IDLE_CHUNK tokens instead of one a token, and a repeat is looked for again within as many
IDLE_CHUNK = 8


def decode_chunk(rt, tok: int, n: int, seq: list) -> list:
    """n greedy decode steps from the chosen token tok (not yet in the cache): their n tokens.
    As forward() does, without the stop conditions (the host checks each token) and into
    history from step 0 (Runtime.free_steps); the cache's record of its tokens (prefix_cache)
    kept. seq: the sequence so far, tok its last (the cache holds the others)."""
    st, fed = rt.state, rt.fed
    rt.free_steps()
    st.ids[:1].fill_(tok)
    rt.decode(n, _GREEDY,  # the ids of positions [0, p): seq's, then this chunk's tokens
              history=lambda p: (seq + rt.tokens(0, max(0, p - len(seq))).tolist())[:p])
    toks = rt.tokens(0, n).tolist()
    if fed is not None:
        rt.fed = fed + [tok] + toks[:-1]
    return toks


def _stops(sampling, seq, scores) -> bool:
    """The caller's / HF's stopping criteria on the sequence so far (prompt and new tokens)."""
    return bool(sampling.criteria) and criteria_met(
        sampling.criteria, torch.tensor([seq], dtype=torch.long, device=scores.device), scores)


def _finish(ids, out, streamer):
    if streamer is not None:
        streamer.end()
    new = torch.tensor(out, dtype=torch.long, device=ids.device)
    return torch.cat([ids.long(), new])[None]


_GREEDY = Sampling()
