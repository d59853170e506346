"""The decode step in each mode, over a DecodeState (state.py: KV cache, activations, the
device-side step state).

Modes (the debugging ladder, DESIGN.md): `torch` runs reference.py ops on the packed weights (the
oracle); `vm` runs the scheduled task stream with torch ops (optionally in a random legal
interleaving); `ops` runs one Triton launch per fused op, and on CUDA replays a decode step captured
once in a CUDA graph; `mega` runs whole steps, and many steps per launch, in the persistent
megakernel (serial, one program, under the CPU interpreter).

Everything a step needs is on the device -- input token ids, position, step counter, RNG counter,
temperature -- so a captured step replays unchanged: its last kernel writes the chosen token into
the next step's input and advances the position.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import torch
import triton

from . import _env  # noqa: F401
from . import ops
from . import reference as R
from .errors import MegakernelTimeout
from .opcodes import COST, TRACE_WORDS, Op
from .packing import PackedWeights
from .spec import UnsupportedModelError, vocab_range
from .state import MAX_EOS, DecodeState, Sampling, SymmetricLayout
from .triton_kernels.config import (attention_blocks, merge_block, merge_splits,
                                    prefill_attention_config, sm_count, stream_config)
from .triton_kernels.qkv_rope import qk_norm_mode, qk_norm_slots
from .triton_kernels._common import INTERPRET
from .triton_kernels.gemv import act_operand_rows, glu_code
from .triton_kernels.launch import CachedLauncher
from .triton_kernels.megakernel import megakernel

MODES = ("torch", "vm", "ops", "mega")


def _set_carveout(function: int, percent: int):
    """cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (9),
    percent) through the driver library torch has loaded."""
    import ctypes
    rc = ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(function), 9,
                                                        ctypes.c_int(percent))
    if rc != 0:
        raise RuntimeError(f"cuFuncSetAttribute(carveout {percent}) failed: CUresult {rc}")


class SingleRank:
    """The collectives of a single rank: nothing to reduce or gather."""
    world, rank = 1, 0

    @staticmethod
    def all_reduce(x):
        return x

    @staticmethod
    def gather_vocab(x):
        return x


def lacks_tasks(spec, weights=None, world: int = 1) -> str:
    """What of the model the megakernel (and the VM) has no tasks for ('': nothing): attention
    sinks; of a mixture of experts (its tasks: decode on one rank, float or FP8 experts --
    graph.moe_tasks; dense layers among them: GATE_UP / DOWN tasks on their own stacks) biased
    experts, norms after the blocks (FlexOlmo), tensor-parallel ranks (world > 1) or MXFP4
    experts (weights: the packed ones, where known)."""
    if spec.attn_sinks:
        return "attention sinks"
    if spec.linear_layers:
        return "Gated DeltaNet (linear-attention) layers"
    if not spec.moe:
        return ""
    if spec.expert_bias:
        return "a mixture of experts with biases"
    if spec.post_norms:
        return "a mixture of experts with norms after its blocks"
    if world > 1:
        return "a mixture of experts over tensor-parallel ranks"
    if weights is not None and weights.s_experts_gu is not None:
        return "a mixture of MXFP4 experts"
    return ""


def check_mode(spec, mode: str | None, weights=None, world: int = 1):
    """A mode the model can run (None: the default, which can): else ValueError -- before any
    weight is packed (from_hf, from_pretrained) and again at the runtime (weights, world:
    lacks_tasks')."""
    if mode is None:
        return
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")
    lacks = lacks_tasks(spec, weights, world)
    if lacks and mode in ("vm", "mega"):
        raise UnsupportedModelError(
            f"{spec.family}: {lacks} runs in mode='ops' (one kernel per op, CUDA-graphed) or "
            f"'torch'; mode={mode!r} has no tasks for it yet")


class Runtime:
    def __init__(self, pw: PackedWeights, max_seq_len: int, mode: str, max_chunk: int | None = None,
                 cuda_graph: bool = True, n_programs: int | None = None, collectives=None,
                 vocab_size: int | None = None):
        """collectives: tensor-parallel all_reduce / gather_vocab (distributed.py); vocab_size:
        the full vocabulary when pw is a vocab shard."""
        self.collectives = collectives or SingleRank()
        check_mode(pw.spec, mode, pw, self.collectives.world)
        self.tp = self.collectives.world > 1
        if self.tp and mode == "vm":
            raise ValueError("tensor parallelism runs in mode='torch', 'ops' or 'mega' (the VM "
                             "simulates one rank)")
        if self.tp and mode == "mega" and not self.collectives.peer_to_peer:
            raise ValueError("mode='mega' with tensor parallelism needs one GPU per rank (NCCL and "
                             "symmetric memory: the ranks write each other's memory); processes "
                             "on CPUs run mode='torch' or 'ops'")
        self.pw, self.spec, self.mode = pw, pw.spec, mode
        self.cuda = pw.device.type == "cuda"
        if mode in ("ops", "mega") and not self.cuda and not INTERPRET and \
                torch.cuda.is_available():
            raise ValueError(f"mode={mode!r} runs Triton kernels, which need the weights on a CUDA "
                             f"device (they are on {pw.device}); move the model to the GPU, or "
                             "use mode='torch' (Triton's CPU interpreter, TRITON_INTERPRET=1 "
                             "before importing fastdecode, runs them exactly but slowly)")
        # a CUDA graph of one ops-mode decode step: every ops step, and in mega mode the top-k /
        # top-p steps (the megakernel samples with temperature only; those steps run the ops
        # bodies). Not yet with tensor parallelism: the collectives would have to be captured too
        self.cuda_graph = cuda_graph and self.cuda and mode in ("ops", "mega") and not self.tp
        # tokens per prefill step: the megakernel's T>1 tiles pad M to 16 (one tl.dot row block)
        self.max_chunk = max_chunk or (64 if self.cuda and mode == "ops" else 16)
        # prompts of prefill_min tokens or more prefill through _prefill_long, prefill_chunk
        # tokens a pass (its gate|up activations in the weights' dtype: 2 x ffn x 2 bytes a
        # token, 117 MB at 2048 tokens of Llama-3.1-8B in bf16)
        self.prefill_min, self.prefill_chunk = 64, 2048
        self.state = DecodeState(pw, max_seq_len, self.max_chunk, vocab_size)
        # this rank's vocabulary rows [v0, v1) of the whole vocabulary (one rank: all of it)
        self.vocab = vocab_range(self.state.logits.shape[1], self.collectives.rank,
                                 self.collectives.world)
        self.max_seq_len = max_seq_len
        self._graphs: dict = {}
        self._gen = None
        # the tokens whose keys and values the cache holds, in order, while the host knows them
        # (None after decode steps until their tokens are read: generate() sets it back)
        self.fed: list | None = []
        self._schedules: dict = {}
        # task-stream modes: programs of the schedule (mega on a GPU: StreamConfig.per_sm per SM,
        # all resident; serial mode on the CPU: one; vm: 4 unless asked)
        self._n_programs = n_programs
        self.vm_rng = None  # random.Random -> the VM runs a random legal interleaving
        # decode steps per host round trip (mega: per launch); the host reads chunk i's tokens
        # while chunk i+1 runs
        self.decode_chunk = 16 if self.cuda else 1
        # megakernel: spin bound per wait (GPU: well under 1 s of acquire polls; interpreter: serial
        # mode never needs to wait, so a short bound turns a missing producer into an error fast)
        self.max_spin = 1 << 17 if self.cuda else 64  # H200: ~3 us per poll -> ~0.4 s
        self._counters: dict = {}  # per schedule: (counters, encoded queues, queue lengths)
        self.mega_stream = None    # StreamConfig overriding the decode task tiles (tile sweeps)
        # steps of several rows (their own compiled kernel: config.MULTI_ROW_TILE) whose
        # cooperative launch was refused at per_sm programs per SM: first retried with the SM's
        # most shared memory (this carveout), then run one program per SM; decode keeps its
        # per_sm and carveout (_launch_mega)
        self._rows_carveout = None
        self._rows_one_per_sm = False
        self.x = None              # tensor parallelism, mega: the ranks' symmetric buffer
        self._tp_ready: set = set()  # megakernel variants every rank has compiled
        self._carved: set = set()  # (compiled kernel's CUfunction, StreamConfig.carveout) set
        self._launcher = CachedLauncher(megakernel)  # launches without Triton's binding
        # a remote wait (tensor parallelism) also spans the ranks' host-side skew between
        # launches: GPU ~4 M polls of ~1-3 us = seconds; interpreter: the other ranks' threads
        # share the CPU
        self.max_spin_remote = 1 << 22 if self.cuda else 1 << 24
        self.tp_barrier_s = 600.0  # how long a rank waits for the others to compile a variant
        if self.tp and mode == "mega":  # collective: every rank constructs its runtime
            self.x = SymmetricLayout(self.spec, self.state.h.shape[0], self.n_programs,
                                     self.collectives)

    @functools.cached_property
    def _table_stream(self):  # looked up once: the host loop reads the stream per chunk
        return stream_config(self.pw.device, self.spec)

    @property
    def stream(self):
        """The megakernel's decode stream: mega_stream if set (sweeps, the one-program-per-SM
        fallback), else this GPU's and model's entry of the shipped table (config.stream_config)."""
        return self.mega_stream or self._table_stream

    @property
    def n_programs(self) -> int:
        if self._n_programs:
            return self._n_programs
        if self.mode == "mega" and self.cuda:
            return sm_count(self.pw.device) * self.stream.per_sm
        return 1 if self.mode == "mega" else 4

    @n_programs.setter
    def n_programs(self, n: int):
        self._n_programs = n
        self._schedules.clear()

    def programs(self, T: int) -> int:
        """Programs of a step of T rows' schedule: n_programs, or one per SM for T > 1 after that
        kernel's launch fell back (_launch_mega)."""
        if T > 1 and self._rows_one_per_sm and self.cuda and not self._n_programs:
            return sm_count(self.pw.device)
        return self.n_programs

    # ---- sequence control -------------------------------------------------------------------
    def reset(self, keep: int = 0):
        """An empty cache, or (keep > 0) one that keeps its first `keep` positions (keep <= the
        tokens fed known to it: fed) for a prompt that starts with them (prefill(start=keep))."""
        st = self.state
        if keep and (self.fed is None or keep > len(self.fed)):
            raise ValueError(f"cannot keep {keep} cached positions: "
                             f"{0 if self.fed is None else len(self.fed)} are known")
        if self.spec.linear_layers and keep != st.n_pos:
            if keep:
                raise ValueError(f"cannot keep {keep} of {st.n_pos} cached positions: a Gated "
                                 "DeltaNet's state holds all of them")
            st.clear_recurrent()
        st.pos.fill_(keep)
        st.step.zero_()
        st.done.zero_()
        st.n_pos = keep
        self.fed = self.fed[:keep] if keep else []

    def set_stop(self, eos_ids, max_steps: int):
        """In-kernel stop conditions of the task modes: EOS ids and the number of chosen tokens."""
        st = self.state
        eos = sorted(eos_ids)
        if len(eos) > MAX_EOS:
            raise ValueError(f"at most {MAX_EOS} eos_token_id values are supported, got {len(eos)}")
        if eos:
            st.eos[:len(eos)].copy_(torch.tensor(eos, dtype=torch.int32))
        st.n_eos, st.max_step = len(eos), int(max_steps)

    def free_steps(self):
        """The next steps' token choices neither stop nor continue generate()'s history: no stop
        condition, history from hist[0] again -- so forwards and rewinds repeated past
        max_seq_len (prompt lookup, a user's own loop) never index past the history."""
        self.set_stop([], 1 << 30)
        self.state.done.zero_()
        self.state.step.zero_()

    @property
    def position(self) -> int:
        return self.state.n_pos

    def rewind(self, n: int):
        """Keep the first n positions of the cache (n <= position): the entries after them are
        overwritten by the next tokens fed (prompt lookup's rejected candidates)."""
        if not 0 <= n <= self.state.n_pos:
            raise ValueError(f"rewind to {n}: the cache holds {self.state.n_pos} positions")
        if self.spec.linear_layers and 0 < n < self.state.n_pos:
            raise ValueError(f"rewind to {n} of {self.state.n_pos} positions: a Gated "
                             "DeltaNet's recurrent state cannot go back (to 0 only)")
        if self.spec.linear_layers and n == 0:
            self.state.clear_recurrent()
        self.state.pos.fill_(n)
        self.state.n_pos = n
        if self.fed is not None:
            del self.fed[n:]

    @property
    def generator(self) -> torch.Generator | None:
        """The torch generator of host-side sampled choices (seeded by set_sampling)."""
        return self._gen

    def set_sampling(self, sampling: Sampling, seed: int | None):
        st = self.state
        st.temp.fill_(float(sampling.temperature))
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        st.seed.fill_(int(seed))
        self._gen = torch.Generator(device=self.pw.device).manual_seed(int(seed))

    def _check_room(self, T: int):
        if self.state.n_pos + T > self.max_seq_len:
            raise ValueError(f"sequence of {self.state.n_pos + T} tokens exceeds max_seq_len="
                             f"{self.max_seq_len}")

    # ---- public steps -----------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, history=None) -> torch.Tensor:
        """Append ids [T] (host or device memory) to the cache; return fp32 logits [T, V] of
        every new token. history: generate()'s steps (rope_call)."""
        T = ids.shape[0]
        self._check_room(T)
        self.rope_call(T, history)
        out = []
        long, step = self._chunking(T)
        for c0 in range(0, T, step):
            chunk = ids[c0:c0 + step]
            self.free_steps()
            if long:
                out.append(self._prefill_long(chunk, all_logits=True, sampling=Sampling()))
                continue
            self._run(chunk, all_logits=True, sampling=Sampling())
            out.append(self.state.logits[:chunk.shape[0]].clone())
        if self.fed is not None:  # after the launches: a GPU ids' read-back waits behind them
            self.fed += ids.tolist()
        return out[0] if len(out) == 1 else torch.cat(out, 0)  # a step: no second copy

    def prefill(self, ids: torch.Tensor, sampling: Sampling, start: int = 0):
        """Append the prompt ids [T] -- from ids[start] on: the cache holds the first `start`
        (reset(keep=start)) -- and the last chunk chooses the first new token (into hist). A
        repetition penalty starts from all the prompt's tokens."""
        T = ids.shape[0]
        if self.state.n_pos != start or not 0 <= start < T:
            raise ValueError(f"prefill from token {start} of {T} with {self.state.n_pos} cached")
        self._check_room(T - start)
        self.rope_call(T - start, lambda p: ids[:p])
        if sampling.penalized:
            self.state.seen.zero_()
            self.state.seen[ids.to(self.state.seen.device).long()] = True
        self.state.prompt = ids.to(self.state.hist.device).long()
        if self.fed is not None:
            self.fed += ids[start:].tolist()
        long, step = self._chunking(T - start)
        for c0 in range(start, T, step):
            last = c0 + step >= T  # earlier chunks only fill the KV cache
            if last:
                self.state.step.zero_()  # the token after the prompt is step 0 of the history
            self.state.done.zero_()      # a chunk's token choice is not a stop
            run = self._prefill_long if long else self._run
            run(ids[c0:c0 + step], all_logits=False, sampling=sampling, head=last)

    def rope_call(self, T: int, history=None):
        """longrope (state.LongRope): the tables a call of T tokens at the current position
        reads -- HF's per forward: the long factors everywhere if the call reaches the original
        context orig, else the short ones. history (generate's calls: p -> the ids of the cached
        positions [0, p)): as HF's generate for Phi-3, a call that takes the sequence past orig
        with the cache at most orig long first re-encodes the cache with the long factors."""
        lr, p = self.state.longrope, self.state.n_pos
        if lr is None:
            return
        lr.use(p + T > lr.orig)
        if lr.long and history is not None and 0 < p <= lr.orig:
            self._refill(history(p))

    def rope_room(self) -> int:
        """Positions a call may fill from the current one with the tables plain decoding uses
        for each: up to a longrope's original context, if the cache is short of it."""
        lr, p = self.state.longrope, self.state.n_pos
        return lr.orig - p if lr is not None and p < lr.orig else self.max_seq_len

    def _refill(self, ids):
        """The cache's positions [0, len(ids)) encoded again from their token ids, with no
        logits and no choice; the token to feed next (state.ids[0]) kept."""
        st, T, fed = self.state, len(ids), self.fed
        ids = torch.as_tensor(ids, dtype=torch.long)
        cur = st.ids[:1].clone()
        self.rewind(0)
        long, step = self._chunking(T)
        for c0 in range(0, T, step):
            chunk = ids[c0:c0 + step]
            if long:
                self._prefill_long(chunk, all_logits=False, sampling=Sampling(), head=False)
                continue
            st.ids[:len(chunk)].copy_(chunk)
            run = self._step_ops if self.mode in ("ops", "mega") else self._step_torch
            run(len(chunk), False, Sampling(), head=False)
            st.pos += len(chunk)
            st.n_pos += len(chunk)
        st.ids[:1].copy_(cur)
        self.fed = fed

    def _long_prompt(self, T: int) -> bool:
        """Whether T prompt tokens prefill through _prefill_long (ops and mega modes)."""
        return self.mode in ("ops", "mega") and T >= self.prefill_min

    def _chunking(self, T: int) -> tuple[bool, int]:
        """How T tokens fed at once run: (through _prefill_long, tokens a pass)."""
        long = self._long_prompt(T)
        return long, self.prefill_chunk if long else self.max_chunk

    def _prefill_long(self, ids, *, all_logits, sampling, head=True):
        """ids [T] of a long prompt in one pass, compute-bound: the reference's layer blocks under
        Numerics of the weights' dtype -- cuBLAS matmuls (reference.mm_native, 2 x params x T
        FLOPs), the Triton RMSNorm and SwiGLU, and the Triton attention kernel with one split per
        KV head and prefill_attention_config's 64-row tiles (the T / block_tok token blocks give
        the parallelism). H200, 8B shape, 8192 tokens: 0.26 s to the first token, HF eager's time
        (bench_prefill, bench/RESULTS.md session 25); the step kernels' decode-shaped tiles, one
        pass over the weights per max_chunk tokens, took 6.5 s (mega) / 1.8 s (ops); this path
        with fp32 activations between the cuBLAS calls and 4-token attention tiles 0.46 s, with
        the tiles fixed 0.33 s.
        head: the last token's lm_head and choice (_head_ops), which advance the position.
        Returns the fp32 logits [T, V] of every token if all_logits."""
        st, pw, s = self.state, self.pw, self.spec
        T = ids.shape[0]
        h = pw.embed_rows(ids.to(pw.device).long(),
                          torch.arange(st.n_pos, st.n_pos + T, device=pw.device))
        block_s, block_tok, warps = prefill_attention_config(s.head_dim, s.group)

        def attend(q, k_cache, v_cache, pos, window, softcap, qscale, alibi, alibi_kind, sinks):
            return ops.attention(q, k_cache, v_cache, st.pos, window=window, softcap=softcap,
                                 qscale=qscale, alibi=alibi, alibi_kind=alibi_kind, sinks=sinks,
                                 n_splits=1, block_s=block_s, block_tok=block_tok,
                                 num_warps=warps)

        def delta(y, conv_w, A_log, dt, norm_w, conv_state, state, gdn, eps):  # rows in-kernel
            return ops.gated_delta(y, conv_w, A_log, dt, norm_w, conv_state, state, gdn=gdn,
                                   eps=eps)

        num = R.Numerics(mm=R.mm_native, norm=ops.rmsnorm, swiglu=ops.swiglu, attend=attend,
                         delta=delta)
        for l in range(s.n_layers):
            self._layer_reference(l, h, st.n_pos, num)
        logits = None
        if all_logits:
            logits = self.collectives.gather_vocab(R.head_logits(pw, h, num=num))
        if head:
            self._head_ops(h, T, False, sampling)
        else:
            st.pos += T
        st.n_pos += T
        return logits

    def decode(self, n: int, sampling: Sampling, history=None):
        """n decode steps, each feeding back the token the previous step chose. No host sync
        (but in the caller's logits processors: Sampling.host). history: p -> the ids of the
        cached positions [0, p) (rope_call); by default the prompt and the chosen tokens."""
        self._check_room(n)
        self.fed = None
        lr, p = self.state.longrope, self.state.n_pos
        if lr is not None and p <= lr.orig < p + n:  # a step at orig: the re-encode first
            if p < lr.orig:
                self.decode(lr.orig - p, sampling)
            self.rope_call(1, history or self._generated)
            return self._decode(p + n - lr.orig, sampling)
        self.rope_call(1)
        self._decode(n, sampling)

    def _generated(self, p: int) -> torch.Tensor:
        """The ids of positions [0, p) of generate()'s sequence: its prompt, then its tokens."""
        return self.state.sequence(p - len(self.state.prompt))[0]

    def _decode(self, n: int, sampling: Sampling):
        if self.mode == "mega" and not sampling.filtered:
            short = self._short_steps(1, n)  # the short-context schedule's, then the others
            for m in (short, n - short):
                if m:
                    self._launch_mega(self.schedule(1, m), m, sampling)
                    self.state.n_pos += m
        elif self.cuda_graph:
            g = self._graph(sampling)
            for _ in range(n):
                g.replay()
                if sampling.host:  # the graph stops at the logits: the caller's Python next
                    self._choose_ops(1, 1, sampling)
            self.state.n_pos += n
        else:
            for _ in range(n):
                self._run(None, all_logits=False, sampling=sampling)

    def tokens(self, start: int, stop: int) -> torch.Tensor:
        """Chosen tokens of steps [start, stop) (step 0 is the token after the prompt)."""
        return self.state.hist[start:stop]

    # ---- one step ---------------------------------------------------------------------------
    def _run(self, ids, *, all_logits, sampling, head=True):
        st = self.state
        if ids is not None:
            T = ids.shape[0]
            st.ids[:T].copy_(ids, non_blocking=True)  # int64 or CPU ids: one copy
        else:
            T = 1
        if self.mode == "torch":
            self._step_torch(T, all_logits, sampling, head)
        elif self.mode == "ops" or sampling.filtered or (self.spec.moe and T > 1):
            # top-k / top-p / min-p and the repetition penalty process the whole row of logits
            # (Sampling.warp): the task stream's choice is greedy or temperature sampling only,
            # so those steps run the same bodies as ops; so do a mixture's steps of several rows
            # (its tasks are decode's: graph.moe_tasks)
            self._step_ops(T, all_logits, sampling, head)
        else:  # the task stream always runs whole steps (its last task advances the position)
            self._step_tasks(T, sampling, all_logits)
            head = True
        if not head:
            st.pos += T
        st.n_pos += T

    def _layer_args(self, l):
        """Layer l's q|k|v bias, q / k norms, o bias (by its place in the attention stacks)
        and MLP biases."""
        pw, s = self.pw, self.spec
        a = None if l in s.linear_layers else s.attn_index(l)  # a Gated DeltaNet: none of them
        pick = lambda t, i: None if t is None or i is None else t[i]  # noqa: E731
        return pick(pw.b_qkv, a), pick(pw.qk_norm, a), pick(pw.b_o, a), pick(pw.b_gu, l), \
            pick(pw.b_down, l)

    def _layer_reference(self, l, h, pos, num=R.FP32):
        """Layer l on the rows h [T, d] in place by the reference blocks under num (torch mode;
        the long prompts' pass), the first at position pos; parallel blocks
        (ModelSpec.parallel): the MLP reads the layer's input, before the attention's add."""
        pw, st, s = self.pw, self.state, self.spec
        if l in s.linear_layers:
            i = s.lin_index(l)
            a = R.gdn_block(pw, l, h, st.conv_state[i], st.rec_state[i], num=num)
        else:
            i = s.attn_index(l)
            a = R.attention_block(pw, l, h, pos, st.k_cache[i], st.v_cache[i],
                                  *st.rope.layer(l), num=num)
        m = R.mlp_block(pw, l, h, num=num) if self.spec.parallel else None
        self._add_reduced(h, a, pw.post_norm(0, l), num.norm)
        self._add_reduced(h, R.mlp_block(pw, l, h, num=num) if m is None else m,
                          pw.post_norm(1, l), num.norm)

    def _add_reduced(self, h, part, norm_w=None, norm=R.rmsnorm):
        """h += the all-reduced partial sums (fp32, rank order; one rank: part itself) -- or
        their RMSNorm by norm_w, a norm after the block (ModelSpec.post_norms) -- the residual
        add of the torch mode and the long prompts' pass: computed in fp32 (under FP32), rounded
        once to h's dtype (torch's in-place add of a bf16 h)."""
        h.add_(R.block_out(self.collectives.all_reduce(part), norm_w, self.spec.rms_eps, norm))

    def _residual_gemv(self, x, w, bias, h, norm_w=None):
        """h += x @ w^T (+ bias): fused in the GEMV epilogue on one rank; with tensor parallelism
        the row-parallel partial sums (fp32) are all-reduced first, as in torch mode. norm_w (a
        norm after the block, ModelSpec.post_norms): the fp32 sums all-reduced, then h += their
        RMSNorm by the megakernel's REDUCE body (ops.residual_add)."""
        if not self.tp and norm_w is None:
            ops.gemv(x, w, bias=bias, residual=h, out=h)
            return
        part = ops.gemv(x, w, bias=bias, out=self.state.part[:x.shape[0]])
        if norm_w is None:
            self._add_reduced(h, part)
        else:
            ops.residual_add(h, self.collectives.all_reduce(part), norm_w, self.spec.rms_eps)

    def _step_ops(self, T, all_logits, sampling, head=True, choose=True):
        st, pw, s = self.state, self.pw, self.spec
        h = st.h[:T]
        ops.embedding(st.ids[:T], pw.embed, out=h, scale=pw.embed_scale, pos_emb=pw.pos_embed,
                      pos=st.pos)
        for l in range(s.n_layers):
            b_qkv, qk_norm, b_o, b_gu, b_down = self._layer_args(l)
            if l in s.linear_layers:  # a Gated DeltaNet: its output and out_proj take the
                # attention's and o_proj's places
                mixed, w_o = self._gdn_ops(l, h, T), pw.w_lin_out[s.lin_index(l)]
            else:
                mixed, w_o = self._attention_ops(l, h, T, b_qkv, qk_norm), pw.w_o[s.attn_index(l)]
            if s.moe and l not in s.dense_layers:
                self._residual_gemv(mixed, w_o, b_o, h, pw.post_norm(0, l))
                self._moe_ops(l, h, T)
                continue
            w_gu, w_down = pw.mlp_weights(l)  # a mixture's dense layers' too
            act = st.mlp_act(l)[:T]
            # parallel blocks (ModelSpec.parallel): the MLP reads the layer's input, before
            # o_proj adds to it
            for op in ("gu", "o") if s.parallel else ("o", "gu"):
                if op == "o":
                    self._residual_gemv(mixed, w_o, b_o, h, pw.post_norm(0, l))
                else:
                    ops.gemv(h, w_gu, norm_w=pw.pre_norm(1, l), eps=s.rms_eps, bias=b_gu,
                             swiglu=True, act=s.act, gated=s.gated, out=act)
            self._residual_gemv(act, w_down, b_down, h, pw.post_norm(1, l))
        if head:
            self._head_ops(h, T, all_logits, sampling, choose)

    def _attention_ops(self, l, h, T, b_qkv, qk_norm):
        """Layer l's attention of the rows h [T, d] by the ops bodies (QKV + RoPE + the KV
        append, the attention; times its output gate's sigmoid where the model has one:
        ModelSpec.attn_gate) -> state.attn [T, H * hd], o_proj's input."""
        st, pw, s = self.state, self.pw, self.spec
        a = s.attn_index(l)
        ops.qkv_rope(h, pw.w_qkv[a], pw.pre_norm(0, l), *st.rope.layer(l), st.pos,
                     st.k_cache[a], st.v_cache[a], n_heads=s.n_heads, eps=s.rms_eps, bias=b_qkv,
                     qk_norm=qk_norm, q_out=st.q[:T], raw=st.qk_raw,
                     qk_norm_after=s.qk_norm_after, qk_norm_full=s.qk_norm_full)
        ops.attention(st.q[:T], st.k_cache[a], st.v_cache[a], st.pos,
                      window=s.layer_windows[l], softcap=s.attn_softcap,
                      qscale=s.q_pos_scale, alibi=pw.alibi, alibi_kind=s.alibi,
                      sinks=None if pw.sinks is None else pw.sinks[l],
                      n_splits=st.o_part.shape[0], scratch=(st.o_part, st.lse),
                      out=st.attn[:T])
        if pw.w_gate is not None:  # in the activations' dtype, as HF's
            gate = ops.gemv(h, pw.w_gate[a], norm_w=pw.pre_norm(0, l), eps=s.rms_eps,
                            out=st.gate[:T])
            st.attn[:T].mul_(torch.sigmoid(gate))
        return st.attn[:T]

    def _gdn_ops(self, l, h, T):
        """Layer l's Gated DeltaNet mixer of the rows h [T, d] by the ops bodies (in_proj after
        the norm, then gated_delta: the convolution, the state's update, the gated norm) ->
        state.lin_out [T, value_dim], out_proj's input; the layer's states updated."""
        st, pw, s = self.state, self.pw, self.spec
        i = s.lin_index(l)
        y = ops.gemv(h, pw.w_lin_in[i], norm_w=pw.pre_norm(0, l), eps=s.rms_eps,
                     out=st.lin_in[:T])
        return ops.gated_delta(y, pw.lin_conv[i], pw.lin_alog[i], pw.lin_dt[i], pw.lin_norm[i],
                               st.conv_state[i], st.rec_state[i], gdn=s.gdn, eps=s.rms_eps,
                               out=st.lin_out[:T])

    def _moe_ops(self, l, h, T):
        """Layer l's mixture of experts added into the rows h [T, d] by the ops bodies
        (reference.moe_block's math, no host sync: CUDA-graph capturable): the router's GEMV
        after the MLP's norm, the routing, the top_k experts' gate|up GEMVs by the routed ids,
        the shared expert's gate|up, then one kernel of the experts' (and the shared expert's)
        down GEMVs adding their weighted sum into h; the router's and the experts' biases where
        the model has them (ModelSpec.expert_bias). Tensor parallelism: every rank routes alike
        (the router replicated), runs its slice of each expert's rows, and its fp32 partial
        sums (the down kernel's, stored) are all-reduced into h. A norm after the block
        (ModelSpec.post_norms, FlexOlmo): the fp32 sums (all-reduced) normalized, then added
        (ops.residual_add, as _residual_gemv's)."""
        st, pw, s = self.state, self.pw, self.spec
        norm, P, i = pw.pre_norm(1, l), T * s.top_k, s.expert_index(l)
        pick = lambda t: None if t is None else t[i]  # noqa: E731
        ops.gemv(h, pw.w_router[i], norm_w=norm, eps=s.rms_eps, bias=pick(pw.b_router),
                 out=st.router[:T])
        ids, w, scale = ops.moe_route(st.router[:T], s.top_k, s.norm_topk, s.ffn_dim > 0,
                                      out=(st.moe_ids[:P], st.moe_w[:P], st.moe_s[:T]),
                                      **R.router_args(pw, l))
        ops.gemv(h, pw.w_experts_gu[i], norm_w=norm, eps=s.rms_eps, bias=pick(pw.b_experts_gu),
                 swiglu=True, act=s.act, experts=ids, out=st.moe_act[:P],
                 scales=pick(pw.s_experts_gu))
        shared = None
        if s.ffn_dim:
            shared = (ops.gemv(h, pw.w_gu[i], norm_w=norm, eps=s.rms_eps, swiglu=True, act=s.act,
                               out=st.act[:T]), pw.w_down[i], scale)
        post = pw.post_norm(1, l)
        # fp32 sums, stored, where they are not the residual's update as they are: a rank's
        # partial sums, or the block's output a norm follows
        into = st.part[:T] if self.tp or post is not None else h
        ops.moe_down(into, st.moe_act[:P], pw.w_experts_down[i], ids, w, shared,
                     bias=pick(pw.b_experts_down), scales=pick(pw.s_experts_down),
                     accumulate=into is h)
        if self.tp:
            self._add_reduced(h, into, post)
        elif post is not None:
            ops.residual_add(h, into, post, s.rms_eps)

    def _head_ops(self, h, T, all_logits, sampling, choose=True):
        """The lm_head and the token choice of a step's rows h [T, d] (the logits of all of them
        into state.logits, or of the last), by the ops bodies; the position advances by T.
        choose False (Sampling.filtered): the logits only, _choose_ops to follow."""
        st, pw, s = self.state, self.pw, self.spec
        x = h if all_logits else h[T - 1:]
        n = x.shape[0]
        if not (self.tp or sampling.filtered):  # the token choice fused into the lm_head
            _, pval, pidx = ops.lm_head(x, pw.lm_head, pw.final_norm, s.rms_eps,
                                        softcap=s.logit_softcap, bias=pw.b_head,
                                        logits=st.logits[:n] if all_logits else None,
                                        sample=sampling.do_sample, seed=st.seed, temp=st.temp,
                                        partials=(st.pval, st.pidx))
            ops.choose_merge(pval, pidx, n - 1, st.ids, st.hist, st.pos, st.step, st.seed, T)
            return
        # the whole last row of logits first: the penalty and the warpers process it
        # (Sampling.warp), and a vocab-parallel lm_head gathers the ranks' rows (rank order; the
        # same bits and seed on every rank, Gumbel noise keyed on global token ids, so every rank
        # picks the same token)
        ops.lm_head(x, pw.lm_head, pw.final_norm, s.rms_eps, softcap=s.logit_softcap,
                    bias=pw.b_head, logits=st.logits_shard[:n],
                    choose=False, partials=(st.pval, st.pidx))
        if self.tp:
            st.logits[:n].copy_(self.collectives.gather_vocab(st.logits_shard[:n]))
        if choose:
            self._choose_ops(n, T, sampling)

    def _choose_ops(self, n, T, sampling):
        """The token choice from row n - 1 of state.logits, processed (Sampling.warp)."""
        st = self.state
        last, temp = sampling.warp(st.logits[n - 1:n], st.temp, st)
        pval, pidx = ops.sample_logits(last, st.seed, st.one if temp is None else temp,
                                       sample=sampling.do_sample, partials=(st.pval, st.pidx))
        ops.choose_merge(pval, pidx, 0, st.ids, st.hist, st.pos, st.step, st.seed, T)
        if sampling.penalized:  # a device index: no sync, graph-capturable
            st.seen.index_fill_(0, st.ids[:1].long(), True)

    def _step_torch(self, T, all_logits, sampling, head=True):
        """Reference ops; with tensor parallelism each block's partial sum is all-reduced (fp32,
        rank order) before the residual add and the vocab shards of the logits are gathered."""
        st, pw, s, tp = self.state, self.pw, self.spec, self.collectives
        p = st.n_pos
        h = st.h[:T]
        h.copy_(pw.embed_rows(st.ids[:T].long(), torch.arange(p, p + T, device=h.device)))
        for l in range(s.n_layers):
            self._layer_reference(l, h, p)
        if not head:
            return
        x = h if all_logits else h[T - 1:]
        logits = tp.gather_vocab(R.head_logits(pw, x))
        st.logits[:x.shape[0]].copy_(logits)
        last, temp = sampling.warp(logits[-1:], sampling.temperature, st)
        tok = R.choose(last, temperature=1.0 if temp is None else temp,
                       sample=sampling.do_sample, generator=self._gen)
        if sampling.penalized:
            st.seen[tok] = True
        step = int(st.step)
        st.ids[0] = tok
        st.hist[step] = tok
        st.step += 1
        st.pos += T

    def _short_steps(self, T: int, n: int) -> int:
        """How many of the next n steps of T tokens run the short-context decode schedule
        (Tiling.attn_in_qkv): decode steps whose keys fit StreamConfig.short_context_keys."""
        if T != 1 or self.mode not in ("mega", "vm"):
            return 0
        keys = self.stream.short_context_keys(
            self.spec.head_dim, self.pw.dtype.itemsize)
        return max(0, min(n, keys - self.state.n_pos))

    def schedule(self, T: int, n_steps: int = 1, short: bool | None = None):
        """The (cached) task schedule of the next n_steps steps of T tokens: the short-context
        decode schedule if all of them fit it (_short_steps), unless `short` says which."""
        if short is None:
            short = self._short_steps(T, n_steps) == n_steps
        key = (T, short)
        if key not in self._schedules:
            from .graph import build_step, make_tiling
            from .schedule import build_schedule
            tiling = make_tiling(self.spec, T, self.max_seq_len, self.pw.device, self.stream,
                                 self.pw.dtype, attn_in_qkv=short, n_programs=self.programs(T),
                                 fp8=self.pw.fp8)
            world = self.collectives.world
            # every rank tiles the largest shard's rows (rank 0's): the same lm_head tasks
            lm_vocab = vocab_range(self.state.logits.shape[1], 0, world)[1] if world > 1 \
                else None
            graph = build_step(self.spec, tiling, self.programs(T), world, lm_vocab)
            st, need = self.state, graph.n_vparts * T  # one partial choice per lm_head task and row
            if need > st.pval.numel():
                st.pval = torch.zeros(need, device=st.pval.device, dtype=st.pval.dtype)
                st.pidx = torch.zeros(need, device=st.pidx.device, dtype=st.pidx.dtype)
                self._graphs.clear()  # captured with the old buffers
            need = 2 * graph.tiling.ksplit * st.h.numel() if graph.tiling.parted else 0
            if need > st.kpart.numel():  # o / down tiles' K parts (graph.Tiling.parted)
                st.kpart = torch.zeros(need, device=st.kpart.device, dtype=torch.float32)
                self._graphs.clear()
            self._schedules[key] = build_schedule(graph, self.programs(T))
        return self._schedules[key]

    def _step_tasks(self, T, sampling, all_logits=False):
        sched = self.schedule(T)
        if self.mode == "vm":
            from .vm import VM
            VM(self).run_step(sched, sampling, self.vm_rng)
        else:
            self._launch_mega(sched, 1, sampling)
            self.check_status()
            if self.tp and all_logits:  # forward(): the logits' vocab shards, gathered
                st = self.state
                st.logits[:T].copy_(self.collectives.gather_vocab(st.logits_shard[:T]))

    def _launch_mega(self, sched, n_steps, sampling, trace=None, clock=None):
        """One launch of n_steps steps of `sched`. If the GPU cannot hold per_sm programs of this
        kernel on every SM at once (registers or shared memory of another GPU or model), CUDA
        refuses the cooperative launch before anything runs: retry with one program per SM --
        for every step if a decode step's kernel was refused, else (a step of several rows: its
        own compiled kernel, larger tiles) for the steps of several rows only, and those first
        with the most shared memory an SM has (carveout 100: the driver's own choice can leave
        two programs of ~100 KB without room -- seen on tiny models' multi-row kernels)."""
        try:
            self._launch_mega_once(sched, n_steps, sampling, trace, clock)
        except RuntimeError as e:
            stream, tg = self.stream, sched.graph.tiling
            rows = tg.T > 1
            if "cooperative" in str(e) and rows and self._rows_carveout is None and \
                    stream.carveout != 100:
                self._rows_carveout = 100
                return self._launch_mega(sched, n_steps, sampling, trace, clock)
            if "cooperative" not in str(e) or stream.per_sm == 1 or trace is not None or \
                    self._n_programs or (rows and self._rows_one_per_sm):
                raise
            if rows:
                warnings.warn(f"megakernel: {e}; steps of several rows fall back to one program "
                              "per SM")
                self._rows_one_per_sm = True
                for key in [k for k in self._schedules if k[0] not in (1, "permuted")]:
                    self._counters.pop(id(self._schedules.pop(key)), None)
            else:
                warnings.warn(f"megakernel: {e}; falling back to one program per SM")
                self.mega_stream = dataclasses.replace(stream, per_sm=1)
                self._schedules.clear()
                self._counters.clear()
            self._launch_mega(self.schedule(tg.T, short=tg.attn_in_qkv), n_steps, sampling)

    def _launch_mega_once(self, sched, n_steps, sampling, trace, clock):
        assert not sampling.filtered, "top-k / top-p steps run through _step_ops"
        st, pw, s, tg = self.state, self.pw, self.spec, sched.graph.tiling
        if self.tp and sched.graph.n_vparts > self.x.nvp:
            # more lm_head parts than the programs it was sized for (n_programs raised): a new
            # buffer (collective: every rank does the same) whose remote counters start at 0, so
            # every schedule's local ones restart too
            self.x = SymmetricLayout(s, st.h.shape[0], sched.n_programs, self.collectives)
            self._counters.clear()
            self._tp_ready.clear()
        key = id(sched)
        if key not in self._counters:
            self._counters[key] = (torch.zeros(sched.n_counters, device=pw.device,
                                               dtype=torch.int32),
                                   sched.words.to(pw.device), sched.lengths.to(pw.device))
        ctr, words, lengths = self._counters[key]
        self._last_sched = sched
        dummy = pw.final_norm
        opt = lambda t: t if t is not None else dummy  # noqa: E731
        n_vparts = sched.graph.n_vparts
        G = s.group
        block_g, block_m, block_d = attention_blocks(s.head_dim, G, tg.attn_block_tok)
        kw = dict(launch_cooperative_grid=True) if self.cuda else {}
        x, world = self.x, self.collectives.world
        x_ctr = x.counters(sched) if x is not None else 0
        # a mixture's decode row: its shared expert's and its dense layers' activations in turn
        # (ModelSpec.dense_layers), in the wider of their buffers' first rows
        act = st.dense_act if s.moe and s.dense_ffn > s.ffn_dim else st.act
        args = (
            words, lengths, words.shape[1], ctr, sched.graph.counters[("tok",)], st.status,
            # with tensor parallelism any wait may stand behind another rank: the remote bound
            self.max_spin_remote if self.tp else self.max_spin, n_steps,
            trace if trace is not None else st.status,
            clock if clock is not None else st.status, st.done, st.eos, st.n_eos, st.max_step,
            st.ids, st.pos, st.step, st.seed, st.temp, st.hist,
            st.h, st.q, st.attn, act, st.o_part, st.lse, st.logits_shard, st.pval, st.pidx,
            st.qk_raw, st.kpart,
            st.k_cache, st.v_cache, st.rope.cos, st.rope.sin, st.windows, st.rope.offsets,
            pw.embed, pw.lm_head, pw.final_norm, opt(pw.attn_norm), opt(pw.mlp_norm),
            opt(pw.post_attn_norm), opt(pw.post_mlp_norm), pw.w_qkv,
            opt(pw.b_qkv), opt(pw.qk_norm), pw.w_o, opt(pw.b_o), pw.w_gu, opt(pw.b_gu),
            pw.w_down, opt(pw.b_down), opt(pw.b_head), opt(pw.pos_embed),
            tg.T, st.h.shape[0], s.n_kv_heads, s.vocab_size, self.max_seq_len, s.rms_eps,
            s.head_dim ** -0.5, tg.n_splits, n_vparts, pw.embed_scale, s.attn_softcap,
            s.logit_softcap, *(s.q_pos_scale or (0.0, 1)), opt(pw.alibi),
            x.table if x else st.status, self.collectives.rank, x_ctr, self.max_spin_remote,
            x.red if x else 0, x.lmv if x else 0, x.lmi if x else 0, self.vocab[0],
            st.logits.shape[1], sched.graph.counters.get(("ticket", 0, 0), 0),
            sched.graph.counters.get(("qticket", 0, 0), 0),
            # a mixture's router, experts and buffers (graph.moe_tasks)
            *((pw.w_router, pw.w_experts_gu, pw.w_experts_down, st.router, st.moe_ids,
               st.moe_w, st.moe_s, st.moe_act) if s.moe else (st.status,) * 8),
            # its router's choice bias, its dense layers' stacks
            opt(pw.b_choice), opt(pw.w_dense_gu), opt(pw.w_dense_down))
        kw.update(
            D=s.d_model, FFN=s.ffn_dim, H=s.n_heads, HD=s.head_dim,
            BIAS_QKV=pw.b_qkv is not None,
            QK_NORM=qk_norm_mode(pw.qk_norm is not None and not tg.qk_defer, s.qk_norm_after),
            QK_DEFER=tg.qk_defer, QKN_SLOTS=qk_norm_slots(G),
            QKN_ORDER=qk_norm_mode(True, s.qk_norm_after, s.qk_norm_full),
            BLOCK_HALF=triton.next_power_of_2(s.head_dim // 2),
            BIAS_O=pw.b_o is not None, BIAS_GU=pw.b_gu is not None,
            GUB=act_operand_rows(s.act, s.gated), BIAS_DOWN=pw.b_down is not None,
            ACT=glu_code(s.act, s.gated),
            SAMPLE=sampling.do_sample, BLOCK_T=tg.block_t, STREAM=tg.stream, RQ=tg.rows_q,
            RD=tg.rows_d, RF=tg.rows_f, RG=tg.rows_g, KQ=tg.bk_q, KD=tg.bk_d, KF=tg.bk_f,
            KG=tg.bk_g,
            BLOCK_H=tg.qkv_pairs, QKV_CHUNKS=tg.qkv_chunks, QKV_BK=tg.qkv_bk,
            GROUP=G,
            BLOCK_G=block_g, BLOCK_TOK=tg.attn_block_tok,
            BLOCK_M=block_m, BLOCK_S=tg.attn_block_s,
            BLOCK_D=block_d, BLOCK_GM=tg.merge_heads,
            BLOCK_SP=merge_splits(tg.n_splits, tg.merge_heads, block_d, tg.num_warps),
            EMB_BLOCK=tg.emb_block, MERGE_BLOCK=merge_block(world * n_vparts),
            F32=INTERPRET or pw.dtype == torch.float32, WORLD=world,
            RED_BLOCK=COST.reduce_block, RED_ROWS=tg.block_t,
            USE_ASM=not INTERPRET,
            TRACE=trace is not None, PTX=tg.ptx, MERGE_IN_ATTN=tg.merge_in_attn,
            NORM_IN_QKV=tg.norm_in_qkv, SQ=tg.stages[0], SO=tg.stages[1], SG=tg.stages[2],
            # (a mixture's o_proj is followed by ROUTER tasks, and its layer words carry more)
            SF=tg.stages[3], PF_KB=0 if s.moe else tg.l2_prefetch_kb, KV_PF=tg.kv_prefetch,
            POLL1=tg.abort_every if tg.one_poller else 0, KSPLIT=tg.ksplit,
            ATTN_OUTLINE=tg.attn_outline, ROPE_TABLES=len(st.rope.cos) > st.rope.rows,
            POST_NORM=s.post_norms, PRE_NORM=s.pre_norms, SOFTCAP=s.attn_softcap > 0,
            LOGIT_CAP=s.logit_softcap > 0, QSCALE=bool(s.q_pos_scale),
            BIAS_LM=pw.b_head is not None, POS_EMB=pw.pos_embed is not None,
            ALIBI=s.alibi, FP8W=tg.fp8_words, num_warps=tg.num_warps)
        if s.moe:
            kw.update(MOE=True, NE=s.n_experts, EF=s.expert_ffn, TOPK=s.top_k,
                      RENORM=s.norm_topk, SHARED=s.ffn_dim > 0, RE=tg.rows_e, RM=tg.moe_rows,
                      KM=tg.moe_bk, BE=triton.next_power_of_2(s.n_experts),
                      BJ=triton.next_power_of_2(s.top_k),
                      BJD=triton.next_power_of_2(s.top_k + tg.moe_vs), VS=tg.moe_vs,
                      RR=tg.gemv_rows(Op.ROUTER),
                      BKS=min(1024, triton.next_power_of_2(max(s.ffn_dim, 16))),
                      DFFN=s.dense_ffn, SIGMOID=s.router_sigmoid,
                      CHOICE=pw.b_choice is not None, N_GROUP=s.expert_groups[0],
                      TOPK_GROUP=s.expert_groups[1], RSCALE=float(s.routed_scale))
        grid = (sched.n_programs,)
        variant = (key, sampling.do_sample, trace is not None)
        # this launch's compiled kernel, compiled and loaded (not launched) on first use
        k = self._launcher.kernel(grid, args, kw)
        if self.tp and variant not in self._tp_ready:
            # every rank has compiled this variant, built its launcher and loaded it (Triton does
            # the last two at the first launch: seconds on a cold cache) before any rank
            # launches it: a rank still compiling would leave the others' bounded waits to time
            # out
            x.barrier(self.tp_barrier_s)
            self._tp_ready.add(variant)
        carve = self.stream.carveout if self.cuda else None
        if tg.T > 1 and self._rows_carveout is not None:
            carve = self._rows_carveout
        if carve is not None and k is not None and (k.function, carve) not in self._carved:
            _set_carveout(k.function, carve)  # on the compiled kernel this launch runs, once
            self._carved.add((k.function, carve))
        self._launcher.launch(k, grid, args, kw)

    def trace_decode(self, n_steps: int = 1, order=None, ids=None):
        """Run n_steps decode steps of the megakernel with per-task timestamps (continuing the
        current sequence). Returns (schedule, trace [P, n_steps, max_len, TRACE_WORDS] int64 on
        the CPU: opcodes.TRACE_WORDS). order: program p runs the queue of program order[p]
        (schedule.permuted; the returned schedule is that one). ids [T] (n_steps 1): one step
        of those T rows instead (prompt lookup's check, a prefill chunk)."""
        if self.mode != "mega":
            raise ValueError("tracing needs mode='mega'")
        T = 1 if ids is None else ids.shape[0]
        if T > 1 and n_steps != 1:
            raise ValueError("a traced step of several rows is one step")
        self._check_room(n_steps * T)
        if ids is not None:
            self.state.ids[:T].copy_(ids)
        sched = self.schedule(T, n_steps)
        if order is not None and list(order) != list(range(sched.n_programs)):
            from .schedule import permuted
            # cached beside its schedule: its counters continue from launch to launch
            key = ("permuted", id(sched), tuple(order))
            if key not in self._schedules:
                self._schedules[key] = permuted(sched, order)
            sched = self._schedules[key]
        P, L = sched.words.shape[:2]
        trace = torch.zeros(P, n_steps, L, TRACE_WORDS, device=self.pw.device, dtype=torch.int64)
        clock = torch.ones(1, device=self.pw.device, dtype=torch.int64)  # interpreter's clock
        self.state.done.zero_()
        self._launch_mega(sched, n_steps, Sampling(), trace=trace, clock=clock)
        self.check_status()
        self.state.n_pos += n_steps * T
        self.fed = None  # as after decode steps: the cache's tokens are no longer the host's
        return sched, trace.cpu()

    def status_word(self, dst: torch.Tensor):
        """Queue a copy of the watchdog's abort word (0: no wait timed out) into dst (one int64,
        pinned host memory on CUDA): read once the stream gets there, it says whether the
        launches before it timed out without waiting for the ones queued after (check_status
        reads the live word: a sync)."""
        dst.copy_(self.state.status[:1], non_blocking=dst.is_pinned())

    def check_status(self):
        """Raise MegakernelTimeout if the last megakernel launch timed out (syncs)."""
        st = self.state
        if self.mode != "mega" or int(st.status[0]) == 0:
            return
        prog, qi, ctr, val, target, step, rank = st.status[1:].tolist()
        names = {v: k for k, v in self._last_sched.graph.counters.items()}
        for c, _, _ in self._counters.values():
            c.zero_()
        st.status.zero_()
        where = "a step boundary" if qi < 0 else f"queue position {qi}"
        if rank < 0:
            raise MegakernelTimeout(
                f"megakernel wait timed out: program {prog} at {where} (step {step} of the "
                f"launch) waited on counter {ctr} {names.get(ctr)} = {val}, target {target}. "
                "The kernel exited; counters were reset.")
        raise MegakernelTimeout(
            f"megakernel wait timed out on rank {self.collectives.rank}: program {prog} at {where} "
            f"(step {step} of the launch) waited for rank {rank}'s {names.get(ctr)} signals "
            f"({val} of {target}): rank {rank} never pushed its part. The tensor-parallel "
            "state is inconsistent now: restart every rank.")

    # ---- CUDA graph of one decode step (ops mode) --------------------------------------------
    def _graph(self, sampling: Sampling):
        key = sampling.key
        if key in self._graphs:
            return self._graphs[key]
        st = self.state
        kept = (st.pos, st.step, st.seed, st.ids, st.seen)
        saved = [t.clone() for t in kept]

        def restore():
            for t, v in zip(kept, saved):
                t.copy_(v)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        choose = not sampling.host  # else up to the logits: decode() runs _choose_ops
        with torch.cuda.stream(side):  # compile + warm up outside the capture
            self._step_ops(1, False, sampling, choose=choose)
        torch.cuda.current_stream().wait_stream(side)
        restore()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._step_ops(1, False, sampling, choose=choose)
        restore()
        torch.cuda.synchronize()
        self._graphs[key] = g
        return g
