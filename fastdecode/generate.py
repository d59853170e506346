"""The decode loop: validation, sampling front end, streaming and stop conditions.

The host never waits on the token it is about to feed back: a chunk of steps runs on the GPU while
the host reads the previous chunk's tokens (pinned copy + event), streams them and checks EOS --
and the megakernel's watchdog word, copied beside them: reading the live word would wait for the
chunk just queued, and the next launch would then go out only after it (the host's launch work,
~0.3-0.5 ms, on the GPU's critical path once every chunk).
"""
from __future__ import annotations

import dataclasses

import torch

from .hf_processing import is_neutral
from .runtime import Runtime
from .state import Sampling

# generate() kwargs that HF accepts and that change nothing for batch-1 decoding here -- at the
# values check_hf_kwargs lets through (a value that would change the result raises instead)
_HARMLESS = {"pad_token_id", "bos_token_id", "use_cache", "output_attentions",
             "output_hidden_states",
             "num_beams",
             "token_type_ids", "tokenizer", "synced_gpus",
             # beam-search only, or about HF's own cache / compile: nothing here
             "length_penalty", "early_stopping", "low_memory", "cache_implementation",
             "disable_compile", "compile_config"}
# HF generate() arguments that change the tokens unless at these values (HF's defaults): passed at
# one of them they are accepted, otherwise refused (check_hf_kwargs)
# (the processors and criteria transformers implements run through hf_processing.HOST_ARGS)
_NEUTRAL = {"encoder_no_repeat_ngram_size": (0,), "guidance_scale": (1.0,),
            "num_beam_groups": (1,), "diversity_penalty": (0.0,), "past_key_values": ()}


def check_hf_kwargs(kwargs):
    """Hugging Face generate() arguments that fastdecode cannot honour raise a clear error instead
    of being ignored (an ignored one would return another sequence than HF's, or another type)."""
    def set_to(name, default):
        return kwargs.get(name, default) not in (None, default)
    if set_to("num_beams", 1):
        raise ValueError("beam search is not supported (num_beams must be 1)")
    for name in ("output_attentions", "output_hidden_states"):
        if kwargs.get(name):
            raise ValueError(f"{name}=True is not supported: generate() returns the token ids "
                             f"and, with return_dict_in_generate=True, the scores / logits "
                             f"(output_scores, output_logits); fm(input_ids) returns logits")
    for name, ok in _NEUTRAL.items():
        v = kwargs.get(name)
        if not is_neutral(v, ok):
            raise ValueError(f"{name}={v!r} is not supported (batch-1 decoding: no beam "
                             f"groups, guidance or encoder; a custom token "
                             f"choice as a logits_processor / stopping_criteria callable)")
    unknown = set(kwargs) - _HARMLESS - set(_NEUTRAL)
    images = sorted(unknown & {"pixel_values", "image_sizes", "pixel_attention_mask",
                               "image_grid_thw", "pixel_values_videos", "video_grid_thw"})
    if images:  # a vision-language model's language model decodes alone (spec.TEXT_OF)
        raise TypeError(f"generate() got {images}: images are not supported (fastdecode runs a "
                        f"vision-language model's language model alone, on text)")
    if unknown:
        raise TypeError(f"generate() got unsupported arguments {sorted(unknown)}")


def validate_ids(input_ids, device, vocab_size, attention_mask=None, what="input_ids"):
    """Checks that make bad input fail with a clear error before any GPU work. Returns ids [T]."""
    if not torch.is_tensor(input_ids):
        raise TypeError(f"{what} must be a torch.LongTensor of shape [1, T], got {type(input_ids)}")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2:
        raise ValueError(f"{what} must have shape [1, T], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"fastdecode decodes one sequence at a time (batch size 1); {what} has "
                         f"batch size {input_ids.shape[0]}")
    if input_ids.shape[1] == 0:
        raise ValueError(f"{what} is empty")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{what} must be an integer tensor (torch.long), got {input_ids.dtype}")
    if input_ids.device.type != device.type:
        raise ValueError(f"{what} is on {input_ids.device} but the model runs on {device}; move it "
                         f"with .to({str(device)!r})")
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids "
                             f"shape {tuple(input_ids.shape)}")
        if not bool((attention_mask != 0).all()):
            raise ValueError("attention_mask has zeros: padding is not supported (batch size 1 "
                             "needs no padding; pass the unpadded prompt)")
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{what} holds token ids outside [0, {vocab_size}): min {lo}, max {hi}")
    return input_ids[0]


def _eos_ids(eos_token_id) -> list:
    """eos_token_id (None, an int, a list or a tensor) as a list of ints, in its order."""
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, int):
        return [eos_token_id]
    if torch.is_tensor(eos_token_id):
        return [int(x) for x in eos_token_id.reshape(-1).tolist()]
    return [int(x) for x in eos_token_id]


def new_token_count(max_new_tokens, max_length, gc, prompt_len: int, max_position: int) -> int:
    """How many tokens generate() adds, as transformers decides it (_prepare_generated_length):
    max_new_tokens (the argument, else the generation config's); else max_length (the argument,
    else the config's; the prompt included) -- but a config max_length that is transformers' own
    default (None in 5.x, 20 in 4.x: nobody set it) means 20 new tokens, as many as
    max_position_embeddings leaves after the prompt."""
    if max_new_tokens is None:
        max_new_tokens = getattr(gc, "max_new_tokens", None)
    if max_new_tokens is not None:
        return int(max_new_tokens)
    total = max_length if max_length is not None else getattr(gc, "max_length", None)
    if max_length is None and total == _default_max_length(gc):
        return max(0, min(prompt_len + 20, max_position) - prompt_len)
    return max(0, int(total) - prompt_len)


def _default_max_length(gc):
    """GenerationConfig().max_length of gc's transformers version if gc is one of its configs;
    else None (loading.generation_defaults' stand-in follows transformers 5)."""
    cls = type(gc)
    return cls().max_length if cls.__module__.startswith("transformers") else None


def _eos_set(eos_token_id):
    return set(_eos_ids(eos_token_id))


def cached_prefix(fed, ids: torch.Tensor) -> int:
    """How many of the prompt's first tokens the cache already holds (fed: the tokens it holds,
    Runtime.fed), at most all but the last: the prompt's last token is fed to get its logits."""
    if not fed:
        return 0
    new = ids.tolist()
    n = min(len(fed), len(new) - 1)
    c = 0
    while c < n and fed[c] == new[c]:
        c += 1
    return c


def start_sequence(rt: Runtime, ids, sampling, *, seed, eos, max_new_tokens: int,
                   reuse: bool = False):
    """The cache emptied -- or, reuse (prefix_cache), kept for the prompt's first tokens it
    already holds -- the choice and the stops set, the prompt prefilled (from the first token
    not cached), its last chunk choosing the first new token."""
    keep = cached_prefix(rt.fed, ids) if reuse else 0
    lr = rt.state.longrope
    if keep and lr is not None and lr.long and len(ids) <= lr.orig:
        keep = 0  # the cache holds keys of the long factors, a fresh call's are the short ones
    if keep != rt.position and rt.spec.linear_layers:
        keep = 0  # a Gated DeltaNet's state holds the whole sequence: kept only when the prompt
        # extends all of it
    rt.reset(keep)
    rt.set_sampling(sampling, seed)
    rt.set_stop(eos, max_new_tokens)
    rt.prefill(ids, sampling, start=keep)


def run_generate(rt: Runtime, ids: torch.Tensor, *, max_new_tokens: int, sampling: Sampling,
                 eos_token_id=None, streamer=None, seed=None, chunk: int | None = None,
                 candidates=None, reuse: bool = False):
    """ids [T] (validated) -> LongTensor [1, T + new] on ids' device. candidates: prompt ids ->
    (source, rows a step) -- decoding that checks guessed tokens many rows a step (lookup.py:
    prompt lookup, a draft model), sampling then being HF's whole processing
    (hf_processing.build). reuse: keep the cached keys and values of the prompt's first tokens
    where the cache holds them (prefix_cache)."""
    T = ids.shape[0]
    if T + max_new_tokens > rt.max_seq_len:
        raise ValueError(f"prompt ({T} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len={rt.max_seq_len}; build the model with a larger max_seq_len")
    if sampling.do_sample and not sampling.temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {sampling.temperature}")
    if not sampling.repetition_penalty > 0:  # HF's check
        raise ValueError(f"repetition_penalty must be > 0, got {sampling.repetition_penalty}")
    if sampling.do_sample and sampling.min_p is not None and not 0 <= sampling.min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {sampling.min_p}")
    eos = _eos_set(eos_token_id)
    if sampling.min_new_tokens and not eos:  # nothing to mask: the plain (fused) choice
        sampling = dataclasses.replace(sampling, min_new_tokens=0)
    for f in sampling.processors + sampling.criteria:
        if not callable(f):
            raise TypeError(f"logits_processor / stopping_criteria entries must be callables "
                            f"(input_ids, scores) -> ..., got {type(f).__name__}")
    if candidates is not None:
        from . import lookup as lk
        source, rows = candidates(ids.tolist())
        seq = lk.generate(rt, ids, max_new_tokens=max_new_tokens, source=source, rows_max=rows,
                          sampling=sampling, eos=eos, streamer=streamer, seed=seed, reuse=reuse)
    else:
        seq = _decode(rt, ids, max_new_tokens, sampling, eos, streamer, seed, chunk, reuse)
    if max_new_tokens > 0:
        # the cache holds the prompt and every new token but the last (steps that ran on past
        # an EOS in a chunk hold more, unknown: those positions are not reused)
        rt.fed = seq[0, :rt.position].tolist()
    return seq


def _decode(rt, ids, max_new_tokens, sampling, eos, streamer, seed, chunk, reuse):
    """Plain decoding: the new tokens chosen one a step (host or in-kernel choice)."""
    if streamer is not None:
        streamer.put(ids[None].cpu())
    out = []
    rt.state.record = ([], []) if sampling.record else None
    if max_new_tokens > 0:
        start_sequence(rt, ids, sampling, seed=seed, eos=eos, max_new_tokens=max_new_tokens,
                       reuse=reuse)
        if sampling.host:
            out = _host_tokens(rt, max_new_tokens, sampling, eos, streamer)
        else:
            out = _stream_tokens(rt, max_new_tokens, sampling, eos, streamer,
                                 chunk or rt.decode_chunk)
    if streamer is not None:
        streamer.end()
    new = torch.tensor(out, dtype=torch.long, device=ids.device)
    return torch.cat([ids.long(), new])[None]


def stack_sequences(seqs, pad_token_id, eos_token_id=None):
    """num_return_sequences' runs [1, T_i] -> [N, max T_i], the shorter ones (stopped at EOS or
    by a criterion) padded with pad_token_id, else (as HF does) the first EOS id."""
    if pad_token_id is None:
        pad_token_id = next(iter(_eos_ids(eos_token_id)), None)
    width = max(s.shape[1] for s in seqs)
    if pad_token_id is None and any(s.shape[1] < width for s in seqs):
        raise ValueError("num_return_sequences > 1: the sequences ended at different lengths and "
                         "neither pad_token_id nor eos_token_id is set to pad them with")
    out = seqs[0].new_full((len(seqs), width), pad_token_id if pad_token_id is not None else 0)
    for i, s in enumerate(seqs):
        out[i, :s.shape[1]] = s[0]
    return out


def _host_tokens(rt, max_new, sampling, eos, streamer):
    """The caller's logits processors and stopping criteria, or a record of each step's scores
    and logits (Sampling.host): one step at a time, each token read before the next step; a
    criterion that returns True for the sequence so far (prompt and tokens, HF's input_ids) and
    the step's processed scores ends it after that token, as in HF."""
    out = []
    st = rt.state
    for i in range(max_new):
        if i:
            rt.decode(1, sampling)
        tok = int(rt.tokens(i, i + 1)[0])
        out.append(tok)
        if st.record is not None:  # the row is overwritten by the next step
            st.record[0].append(st.scores.clone())
            st.record[1].append(st.raw.clone())
        if streamer is not None:
            streamer.put(torch.tensor([tok]))
        if tok in eos:
            break
        if sampling.criteria and criteria_met(sampling.criteria, st.sequence(i + 1), st.scores):
            break
    return out


def criteria_met(criteria, seq: torch.Tensor, scores: torch.Tensor) -> bool:
    """Whether a stopping criterion (HF's StoppingCriteria, or any callable (input_ids, scores))
    ends the sequence seq [1, L] (prompt and new tokens) after the step of these scores."""
    return any(bool(torch.as_tensor(c(seq, scores)).any()) for c in criteria)


def _stream_tokens(rt, max_new, sampling, eos, streamer, chunk):
    pinned = rt.cuda
    buf = torch.empty(max_new, dtype=torch.int64, pin_memory=pinned)
    # each chunk's copy of the watchdog word (Runtime.status_word), read with its tokens
    words = torch.zeros(2 + max_new // max(1, chunk), dtype=torch.int64, pin_memory=pinned)
    out, done = [], 1   # step 0's token comes from the prefill

    def enqueue(a, b, k):
        buf[a:b].copy_(rt.tokens(a, b), non_blocking=pinned)
        rt.status_word(words[k:k + 1])
        ev = torch.cuda.Event() if pinned else None
        if ev is not None:
            ev.record()
        return a, b, k, ev
    pending = enqueue(0, 1, 0)
    while pending is not None:
        nxt = None
        n = min(chunk, max_new - done)
        a, b, k, ev = pending
        if n > 0:  # keep the GPU busy while the host reads the previous tokens
            rt.decode(n, sampling)
            nxt = enqueue(done, done + n, k + 1)
            done += n
        if ev is not None:
            ev.synchronize()
        if words[k]:  # that chunk's launch timed out: wait for the queued one, then raise
            rt.check_status()
        for tok in buf[a:b].tolist():
            out.append(tok)
            if streamer is not None:
                streamer.put(torch.tensor([tok]))
            if tok in eos:
                return out
        pending = nxt
    return out
