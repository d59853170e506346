"""Hugging Face generate() arguments that fastdecode runs through transformers' own logits
processors and stopping criteria, on the host between each step's logits and its choice
(Sampling.host): n-gram bans, bad words, token suppression, sequence bias, forced tokens, typical /
epsilon / eta sampling, stop strings, a time limit. With any of them the whole processing of a
step is HF's list, built here in the order GenerationMixin._get_logits_processor builds it, so
the scores are HF's bit for bit; greedy, temperature, top-k / top-p / min-p, repetition penalty and
min_new_tokens alone keep fastdecode's device-side processing (state.Sampling.warp).
transformers is imported only when one of these arguments is used (a fresh notebook's first token
does not pay for it).
"""
from __future__ import annotations

# generate() arguments handled here, by their neutral values (HF's: unset or these)
HOST_ARGS = {"sequence_bias": (), "no_repeat_ngram_size": (0,), "bad_words_ids": (),
             "forced_bos_token_id": (), "forced_eos_token_id": (),
             "remove_invalid_values": (False,), "exponential_decay_length_penalty": (),
             "suppress_tokens": (), "begin_suppress_tokens": (), "typical_p": (1.0,),
             "epsilon_cutoff": (0.0,), "eta_cutoff": (0.0,), "renormalize_logits": (False,),
             "prefix_allowed_tokens_fn": (), "stop_strings": (), "max_time": ()}


def is_neutral(v, neutral) -> bool:
    """Whether a generate() argument's value leaves HF's tokens as its default does: unset,
    empty, or one of its neutral values (a callable never is)."""
    empty = isinstance(v, (list, tuple, dict, str)) and not v
    return v is None or empty or (not callable(v) and v in neutral)


def set_args(kwargs, gc) -> dict:
    """The HOST_ARGS set to a non-neutral value, by the call, else by the generation config (as
    HF reads them); removed from kwargs."""
    out = {}
    for name, neutral in HOST_ARGS.items():
        v = kwargs.pop(name, None)
        if v is None:
            v = getattr(gc, name, None)
        if not is_neutral(v, neutral):
            out[name] = v
    return out


def build(args: dict, *, prompt_len: int, max_new_tokens: int, eos, device, do_sample: bool,
          temperature: float, top_k, top_p, min_p, repetition_penalty: float,
          min_new_tokens: int, processors=(), criteria=(), tokenizer=None):
    """(processors, criteria): HF's lists for these arguments and the rest of the call's (the
    caller's processors after HF's own, before the warpers; the criteria after HF's)."""
    import transformers.generation.logits_process as lp
    from transformers.generation.stopping_criteria import MaxTimeCriteria, StopStringCriteria
    eos = sorted(eos)
    dev = str(device)
    a = args.get
    procs = []
    if a("sequence_bias"):
        procs.append(lp.SequenceBiasLogitsProcessor(sequence_bias=a("sequence_bias")))
    if repetition_penalty != 1.0:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(float(repetition_penalty)))
    if a("no_repeat_ngram_size"):
        procs.append(lp.NoRepeatNGramLogitsProcessor(a("no_repeat_ngram_size")))
    if a("bad_words_ids"):
        procs.append(lp.NoBadWordsLogitsProcessor(a("bad_words_ids"), eos or None))
    if min_new_tokens > 0 and eos:  # min_length's and min_new_tokens' masks in one
        procs.append(lp.MinNewTokensLengthLogitsProcessor(prompt_len, min_new_tokens, eos,
                                                          device=dev))
    if a("prefix_allowed_tokens_fn"):
        procs.append(lp.PrefixConstrainedLogitsProcessor(a("prefix_allowed_tokens_fn"), 1))
    if a("forced_bos_token_id") is not None:
        procs.append(lp.ForcedBOSTokenLogitsProcessor(a("forced_bos_token_id")))
    if a("forced_eos_token_id") is not None:
        procs.append(lp.ForcedEOSTokenLogitsProcessor(prompt_len + max_new_tokens,
                                                      a("forced_eos_token_id"), device=dev))
    if a("remove_invalid_values"):
        procs.append(lp.InfNanRemoveLogitsProcessor())
    if a("exponential_decay_length_penalty"):
        procs.append(lp.ExponentialDecayLengthPenalty(a("exponential_decay_length_penalty"),
                                                      eos, prompt_len))
    if a("suppress_tokens"):
        procs.append(lp.SuppressTokensLogitsProcessor(a("suppress_tokens"), device=dev))
    if a("begin_suppress_tokens"):
        begin = prompt_len + (prompt_len == 1 and a("forced_bos_token_id") is not None)
        procs.append(lp.SuppressTokensAtBeginLogitsProcessor(a("begin_suppress_tokens"), begin,
                                                             device=dev))
    procs += list(processors)
    if do_sample:
        if temperature != 1.0:
            procs.append(lp.TemperatureLogitsWarper(float(temperature)))
        if top_k:
            procs.append(lp.TopKLogitsWarper(top_k=int(top_k)))
        if top_p is not None and top_p < 1.0:
            procs.append(lp.TopPLogitsWarper(top_p=float(top_p)))
        if min_p is not None:
            procs.append(lp.MinPLogitsWarper(min_p=float(min_p)))
        if a("typical_p") is not None:
            procs.append(lp.TypicalLogitsWarper(mass=float(a("typical_p"))))
        if a("epsilon_cutoff") is not None:
            procs.append(lp.EpsilonLogitsWarper(epsilon=float(a("epsilon_cutoff"))))
        if a("eta_cutoff") is not None:
            procs.append(lp.EtaLogitsWarper(epsilon=float(a("eta_cutoff")), device=dev))
    if a("renormalize_logits"):
        procs.append(lp.LogitNormalization())
    crit = []
    if a("max_time") is not None:
        crit.append(MaxTimeCriteria(max_time=float(a("max_time"))))
    if a("stop_strings"):
        if tokenizer is None:
            raise ValueError("stop_strings needs the model's tokenizer: pass tokenizer=... to "
                             "generate(), as Hugging Face's generate does")
        crit.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=a("stop_strings")))
    return tuple(procs), tuple(crit) + tuple(criteria)
