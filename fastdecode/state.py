"""The buffers of one sequence and how its next token is chosen: Sampling (Hugging Face's
choice, in its order), DecodeState (KV cache, activations, the device-side step state every mode
and the megakernel read and write) and, tensor parallelism in mode="mega", SymmetricLayout (the
ranks' shared buffer). runtime.py runs the steps over them."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from . import reference as R
from .errors import MegakernelTimeout
from .packing import PackedWeights, device_free_bytes
from .triton_kernels.attention import split_plan
from .triton_kernels.config import attention_config
from .triton_kernels.lm_head import n_vocab_tiles
from .triton_kernels.megakernel import STATUS_WORDS

MAX_EOS = 16  # EOS ids the megakernel checks in-kernel


def check_kv_fits(spec, max_seq_len: int, dtype: torch.dtype, free_bytes: int):
    """The KV cache of max_seq_len positions (2 x L x KVH x S x hd elements) must fit the
    device's free memory, with 1/16 of it left for the activations and the other buffers (each
    a few MB): too large a max_seq_len raises a ValueError naming the largest that fits, before
    anything is allocated -- not an out-of-memory error from deep inside."""
    per_pos = spec.kv_bytes(1, dtype.itemsize)
    room = free_bytes - free_bytes // 16
    if max_seq_len * per_pos > room:
        gib = 1 << 30
        raise ValueError(f"max_seq_len={max_seq_len}: the KV cache needs "
                         f"{max_seq_len * per_pos / gib:.1f} GiB and {free_bytes / gib:.1f} GiB "
                         f"are free on the device; max_seq_len={max(0, room // per_pos)} is the "
                         f"largest that fits")


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen, in Hugging Face's order: the stop tokens masked before
    min_new_tokens and the repetition penalty on the raw logits (its processors: greedy or
    sampled), the caller's logits processors, then, sampling, temperature, top_k, top_p and
    min_p (its warpers). processors / criteria: HF LogitsProcessor / StoppingCriteria callables
    (input_ids [1, L] with the prompt, scores [1, V] fp32): Python on the host between a step's
    logits and its choice (Sampling.host)."""
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0  # the stop tokens (DecodeState.eos) cannot end the first ones
    processors: tuple = ()
    criteria: tuple = ()
    record: bool = False  # keep each step's scores and raw logits (output_scores / _logits)

    @property
    def host(self) -> bool:
        """Steps that hand the host their logits (caller's processors or stopping criteria, a
        record): one at a time, the ops bodies up to the logits (a CUDA graph on a GPU), then
        the caller's Python and the choice (_choose_ops); the megakernel's steps not used."""
        return bool(self.processors or self.criteria or self.record)

    @property
    def penalized(self) -> bool:
        return self.repetition_penalty != 1.0

    @property
    def filtered(self) -> bool:
        """Whether a step needs its whole row of logits processed before the choice (by torch
        ops on the device, graph-captured in ops mode): the task stream's fused lm_head choice
        does greedy and temperature only, so the megakernel hands such steps to ops mode."""
        return self.penalized or self.min_new_tokens > 0 or self.host or self.do_sample and (
            (self.top_k or 0) > 0 or (self.top_p is not None and self.top_p < 1.0)
            or (self.min_p or 0) > 0)

    @property
    def key(self):
        f = self.filtered
        return (self.do_sample, self.top_k if f else None, self.top_p if f else None,
                self.min_p if f else None, self.repetition_penalty, self.min_new_tokens,
                self.host)

    def warp(self, last, temp, st):
        """last [1, V] fp32 logits -> (processed logits, the temperature left to the choice, None
        once the warpers applied it): the stop tokens at -inf while fewer than min_new_tokens
        were chosen (st.step, on the device: no sync, graph-capturable), the penalty on the
        tokens seen (st.seen), the caller's processors (on the host: they get the prompt and the
        chosen tokens), then the warpers on last / temp (a device scalar or a float). Keeps the
        raw and processed rows in st.raw / st.scores (output_logits / _scores, the criteria)."""
        st.raw = last
        if self.min_new_tokens > 0:
            stop = torch.zeros_like(last).index_fill_(1, st.eos[:st.n_eos].long(), float("-inf"))
            last = torch.where(st.step < self.min_new_tokens, last + stop, last)
        if self.penalized:
            last = R.repetition_penalty(last, st.seen, self.repetition_penalty)
        if self.processors:
            seq = st.sequence(int(st.step))
            for p in self.processors:
                last = p(seq, last)
        if self.do_sample and self.filtered:
            last, temp = R.filter_logits(last / temp, self.top_k, self.top_p, self.min_p), None
        st.scores = last  # for the stopping criteria: HF passes them the processed scores
        return last, temp


class DecodeState:
    """Buffers of one sequence. Activations hold up to max_chunk tokens per step."""

    def __init__(self, pw: PackedWeights, max_seq_len: int, max_chunk: int,
                 vocab_size: int | None = None):
        s, dev, dt = pw.spec, pw.device, pw.dtype
        V = vocab_size or s.vocab_size
        self.max_seq_len, self.max_chunk = max_seq_len, max_chunk
        if dev.type == "cuda":
            check_kv_fits(s, max_seq_len, dt, device_free_bytes(dev))
        kv_shape = (len(s.attn_layers), s.n_kv_heads, max_seq_len, s.head_dim)
        self.k_cache = torch.zeros(kv_shape, device=dev, dtype=dt)
        self.v_cache = torch.zeros(kv_shape, device=dev, dtype=dt)
        T = max_chunk
        if s.linear_layers:  # Gated DeltaNet layers (ModelSpec.gdn): each one's last kernel - 1
            # q|k|v rows (the convolution's), its recurrent state [nv, dk, dv] in fp32, and a
            # step's in_proj rows and mixer outputs
            _, nv, dk, dv, kc = s.gdn
            _, vd, conv, rows = s.gdn_dims
            Ll = len(s.linear_layers)
            self.conv_state = torch.zeros(Ll, kc - 1, conv, device=dev, dtype=dt)
            self.rec_state = torch.zeros(Ll, nv, dk, dv, device=dev, dtype=torch.float32)
            self.lin_in = torch.zeros(T, rows, device=dev, dtype=dt)
            self.lin_out = torch.zeros(T, vd, device=dev, dtype=dt)
        if s.attn_gate:  # a step's output gate rows (ModelSpec.attn_gate)
            self.gate = torch.zeros(T, s.q_dim, device=dev, dtype=dt)
        self.h = torch.zeros(T, s.d_model, device=dev, dtype=dt)
        self.q = torch.zeros(T, s.n_heads, s.head_dim, device=dev, dtype=dt)
        self.attn = torch.zeros(T, s.q_dim, device=dev, dtype=dt)
        # q/k norm: the raw q and k rows of a decode step's QKV tiles (graph.Tiling.qk_defer)
        self.qk_raw = torch.zeros(T if s.qk_norm else 1, s.n_heads + s.n_kv_heads, s.head_dim,
                                  device=dev, dtype=torch.float32)
        self.act = torch.zeros(T, s.ffn_dim, device=dev, dtype=dt)
        # a mixture's dense layers' (ModelSpec.dense_layers) activations, their own width
        self.dense_act = torch.zeros(T, s.dense_ffn, device=dev, dtype=dt)
        self._dense_layers = s.dense_layers
        if s.moe:  # a mixture of experts (ops mode): the router's logits (and the shared
            # expert's gate logit), each row's top_k experts and weights, the shared expert's
            # scale, the experts' activations (triton_kernels/moe.py)
            P = T * s.top_k
            self.router = torch.zeros(T, s.n_experts + (s.ffn_dim > 0), device=dev,
                                      dtype=torch.float32)
            self.moe_ids = torch.zeros(P, device=dev, dtype=torch.int32)
            self.moe_w = torch.zeros(P, device=dev, dtype=torch.float32)
            self.moe_s = torch.zeros(T, device=dev, dtype=torch.float32)
            self.moe_act = torch.zeros(P, s.expert_ffn, device=dev, dtype=dt)
        block_s, _ = attention_config(s.head_dim, s.group, 1)
        _, n_splits = split_plan(max_seq_len, s.n_kv_heads, block_s)
        self.o_part = torch.zeros(n_splits, T, s.n_heads, s.head_dim, device=dev,
                                  dtype=torch.float32)
        self.lse = torch.zeros(n_splits, T, s.n_heads, device=dev, dtype=torch.float32)
        self.logits = torch.zeros(T, V, device=dev, dtype=torch.float32)
        # tensor parallelism (ops mode): a rank's lm_head rows and row-parallel partial sums
        self.logits_shard = self.logits if V == s.vocab_size else torch.zeros(
            T, s.vocab_size, device=dev, dtype=torch.float32)
        self.part = torch.zeros(T, s.d_model, device=dev, dtype=torch.float32)
        # megakernel steps of several rows: the o / down tiles' K parts' partial sums [2, ksplit,
        # T, d_model] (graph.Tiling.ksplit; Runtime.schedule grows it to a schedule's)
        self.kpart = torch.zeros(1, device=dev, dtype=torch.float32)
        tiles = max(n_vocab_tiles(s.vocab_size, s.d_model, t, dev) * t for t in (1, T))
        tiles = max(tiles, n_vocab_tiles(V, 0, 1, dev, block_n=1024))
        self.pval = torch.zeros(tiles, device=dev, dtype=torch.float32)
        self.pidx = torch.zeros(tiles, device=dev, dtype=torch.int32)
        self.ids = torch.zeros(T, device=dev, dtype=torch.int32)
        self.pos = torch.zeros(1, device=dev, dtype=torch.int32)
        self.step = torch.zeros(1, device=dev, dtype=torch.int32)
        self.seed = torch.zeros(1, device=dev, dtype=torch.int64)
        self.temp = torch.ones(1, device=dev, dtype=torch.float32)
        self.one = torch.ones(1, device=dev, dtype=torch.float32)
        self.hist = torch.zeros(max_seq_len + 1, device=dev, dtype=torch.int64)
        # the tokens of the sequence so far (prompt and chosen), for the repetition penalty
        self.seen = torch.zeros(V, device=dev, dtype=torch.bool)
        # generate()'s prompt (int64) and the last step's processed scores: the caller's logits
        # processors and stopping criteria see them (Sampling.host)
        self.prompt = self.hist[:0]
        self.scores = self.raw = self.record = None
        self.rope = RopeTables(s, max_seq_len, dev)
        orig = s.longrope_orig
        self.longrope = LongRope(s, self, orig) if orig is not None and orig < max_seq_len \
            else None
        self.windows = torch.tensor(list(s.layer_windows), device=dev, dtype=torch.int32)
        self.n_pos = 0  # host mirror of pos
        # megakernel stop conditions and watchdog status (see triton_kernels/megakernel.py)
        self.done = torch.zeros(1, device=dev, dtype=torch.int32)
        self.eos = torch.zeros(MAX_EOS, device=dev, dtype=torch.int32)
        self.n_eos, self.max_step = 0, 1 << 30
        self.status = torch.zeros(STATUS_WORDS, device=dev, dtype=torch.int64)

    def clear_recurrent(self):
        """The Gated DeltaNet layers' states emptied (a sequence from position 0)."""
        self.conv_state.zero_()
        self.rec_state.zero_()

    def mlp_act(self, l: int) -> torch.Tensor:
        """Layer l's MLP activations [max_chunk, its width]: a mixture's dense layers'
        (dense_act), else act (a mixture's: its shared expert's)."""
        return self.dense_act if l in self._dense_layers else self.act

    def sequence(self, n: int) -> torch.Tensor:
        """HF's input_ids [1, L]: generate()'s prompt and the first n chosen tokens."""
        return torch.cat([self.prompt, self.hist[:n]])[None]


class RopeTables:
    """A model's RoPE tables, cos and sin [rows, head_dim/2] fp32 (ModelSpec.rope_table), then
    -- when the sliding-window layers rotate by a RoPE of their own (ModelSpec.sliding_rope:
    Gemma 3) -- theirs, and -- when some layers take no RoPE (ModelSpec.nope_layers: SmolLM3) --
    as many identity rows (cos 1, sin 0: y * 1 - x * 0 is y exactly), which those layers read in
    their place: every kernel and reference path unchanged but for the table a layer is given
    (layer), the megakernel's by a per-layer row offset (offsets, on the device; its rope_ptr).
    The first table's rows come first (LongRope rewrites them)."""

    def __init__(self, spec, rows: int, device):
        cos, sin = spec.rope_table(rows)
        tables, starts = [(cos, sin)], [0] * spec.n_layers
        local = spec.sliding_rope()
        if local is not None:
            tables.append(local.rope_table(rows))
            starts = [rows if w else 0 for w in spec.layer_windows]
        if spec.nope_layers:
            starts = [len(tables) * rows if l in spec.nope_layers else r
                      for l, r in enumerate(starts)]
            tables.append((torch.ones_like(cos), torch.zeros_like(sin)))
        self.cos = torch.cat([c for c, _ in tables]).to(device)
        self.sin = torch.cat([s for _, s in tables]).to(device)
        self.rows, self.starts = rows, starts
        self.offsets = torch.tensor(starts, device=device, dtype=torch.int32)

    def layer(self, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer l's cos, sin [rows, head_dim/2]."""
        r = slice(self.starts[l], self.starts[l] + self.rows)
        return self.cos[r], self.sin[r]


class LongRope:
    """A longrope's two tables (ModelSpec.longrope_orig): state.rope's tables hold the short
    factors' below the original context `orig` and the long factors' from it on; a forward that
    reaches past orig takes the long factors' at every position (use(True)). Only rows [0, orig)
    differ: both versions of them are kept on the device (the short ones copied from the state's
    table as built), switching is one copy."""

    def __init__(self, spec, st: "DecodeState", orig: int):
        self.st, self.orig, self.long = st, orig, False
        rope = st.rope
        self.rows = {False: [rope.cos[:orig].clone(), rope.sin[:orig].clone()],
                     True: [t.to(rope.cos.device) for t in spec.rope_table(orig, True)]}

    def use(self, long: bool):
        if long != self.long:
            self.st.rope.cos[:self.orig].copy_(self.rows[long][0])
            self.st.rope.sin[:self.orig].copy_(self.rows[long][1])
            self.long = long


class SymmetricLayout:
    """Tensor parallelism, mode="mega": each rank's symmetric buffer (collectives.symmetric), in
    4-byte words (triton_kernels/megakernel.py):
        [0, red)     remote counters [TM + 1, n_remote, world] int32 (graph.REMOTE: xo and xdown
                     of every layer, xlm), one set per schedule (a step of T tokens: set T;
                     the short-context decode schedule: set 0), since each counts its own
                     schedule's epochs
        [red, lmv)   o / down partial sums fp32 [2, world, TM, d_model]
        [lmv, lmi)   lm_head partial choices fp32 [TM, world * n_vparts]; [lmi, ready) their ids
        [ready, ...) the host-side barrier's words [world] (ready())
    n_vparts <= programs per rank: sized for this launch's programs."""

    def __init__(self, spec, TM: int, n_programs: int, collectives):
        W = collectives.world
        self.n_remote, self.nvp, self.world = 2 * spec.n_layers + 1, n_programs, W
        align = lambda n: -(-n // 64) * 64  # noqa: E731  (256-byte aligned regions)
        self.red = align((TM + 1) * self.n_remote * W)
        self.lmv = align(self.red + 2 * W * TM * spec.d_model)
        self.lmi = align(self.lmv + TM * W * n_programs)
        self.ready = align(self.lmi + TM * W * n_programs)
        self.buf, self.table, self.peers = collectives.symmetric(self.ready + W)
        self.rank, self.arrivals = collectives.rank, 0

    def barrier(self, timeout_s: float):
        """Every rank's host reaches this point (the n-th call on every rank) before any returns,
        through the symmetric buffer: each rank writes n into word [ready + its rank] of every
        rank's buffer, then polls its own. A rank missing after timeout_s -> MegakernelTimeout
        naming it (dist.barrier would block until NCCL's watchdog, minutes later)."""
        self.arrivals += 1
        n = self.arrivals
        for p in self.peers:
            p[self.ready + self.rank].fill_(n)
        words = self.buf[self.ready:self.ready + self.world]
        t0 = time.monotonic()
        while True:
            if self.buf.is_cuda:  # this rank's fills done: its stream, not the device (virtual
                # ranks sharing one GPU run their megakernels on other streams meanwhile)
                torch.cuda.current_stream(self.buf.device).synchronize()
            seen = words.tolist()
            if min(seen) >= n:
                return
            if time.monotonic() - t0 > timeout_s:
                late = [r for r, v in enumerate(seen) if v < n]
                raise MegakernelTimeout(
                    f"tensor parallelism: rank {self.rank} waited {timeout_s:.0f} s for rank(s) "
                    f"{late} to reach launch {n} of the megakernel; they never did")
            time.sleep(1e-3)

    def counters(self, sched) -> int:
        """The word offset of this schedule's remote counters."""
        g = sched.graph
        if g.n_remote > self.n_remote or g.n_vparts > self.nvp:
            raise RuntimeError(f"symmetric buffer sized for {self.n_remote} remote counters and "
                               f"{self.nvp} lm_head parts; the schedule has {g.n_remote} and "
                               f"{g.n_vparts}")
        return (0 if g.tiling.attn_in_qkv else g.tiling.T) * self.n_remote * self.world
