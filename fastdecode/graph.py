"""ModelSpec -> the DAG of Tasks of one step of T tokens (T=1 decode; T<=16 prefill chunk).

Tiles are those of the op bodies (triton_kernels/config.py; decode uses the stream tiles); a task
is a contiguous range of tiles of one op, sized so each op has about one task per program, and
streams its whole range without a per-tile prologue. Dependencies
are counters, one per (op, layer[, KV group]):

    EMBED(s)   waits tok       >= s-1        (the previous step chose the token it embeds)
    QKV(l, g)  waits down[l-1] (emb for l=0) (it reads the whole residual vector: RMSNorm prologue)
    ATTN(l, g) waits qkv[l, g]               (only its own KV head's q, k, v tiles)
    (q/k norm, decode: QKNORM(l, g) waits qkv[l, g] and normalizes + rotates the group's raw q
     and k rows; ATTN(l, g) waits qkn[l, g] -- Tiling.qk_defer; q/k norms over all heads, OLMo 2,
     every step: QKV(l, *) signal qkv[l, 0] and QKNORM(l, g) waits for all of them)
    MERGE(l,g) waits attn[l, g]             (one task per Tiling.merge_heads q heads of g)
    O(l)       waits merge[l]                (it reads the whole attention output)
    (Tiling.attn_in_qkv, short-context decode: no QKNORM, ATTN or MERGE tasks -- QKV_ATTN tasks
     count tiles on qticket[l, g] and the one completing group g normalizes and rotates it (q/k
     norm) and runs its attention over every key, one split, straight to the attention output;
     every QKV_ATTN(l, *) signals merge[l]: three dependency hops fewer per layer. Norms over all
     heads: QKV(l, *) signal qkv[l, 0] as in the split schedule, and a QKN_ATTN(l, g) a group
     waits for all of them, normalizes and rotates group g and runs its attention the same way,
     signalling merge[l]: two hops fewer)
    (Tiling.merge_in_attn: no MERGE tasks -- the last ATTN task of (l, g) to finish, by a ticket
     counter ticket[l, g] it adds to, merges the group's splits, and every ATTN(l, *) signals
     merge[l]: one dependency hop fewer per layer. Tiling.norm_in_qkv, the same for QKNORM: the
     QKV task that completes group g's tiles (qticket[l, g] counts tiles) normalizes and rotates
     the group, and every QKV(l, g) signals qkn[l, g])
    GATE_UP(l) waits o[l];  DOWN(l) waits gu[l];  LM_HEAD waits down[L-1];  CHOOSE waits lm
    (a mixture of experts, decode on one rank -- moe_tasks: ROUTER(l) waits o[l];
     EXPERT_GU(l) waits router[l]; EXPERT_DOWN(l) waits egu[l] and signals down[l])
    (parallel blocks, ModelSpec.parallel: GATE_UP(l) waits merge[l], reading the residual before
     o_proj adds to it; O(l) waits gu[l] -- after every read of it -- and DOWN(l) waits o[l])
Steps of several rows on one rank (Tiling.ksplit > 1): O and DOWN tasks each sum one K part of
their tiles into fp32 partial buffers (signalling po / pdown), and REDUCE tasks add the parts in
order, the bias and the residual -- the tensor-parallel REDUCE below with K parts for ranks:
    REDUCE(l, 0) waits po[l] -> red[l, 0];  REDUCE(l, 1) waits pdown[l] -> red[l, 1]
Tensor parallelism (world W > 1; the spec is one rank's shard, distributed.py): O and DOWN tasks
write fp32 partial sums and push them to every rank (remote counters xo / xdown, opcodes.py), and
REDUCE tasks add the ranks' partials to the residual in rank order:
    REDUCE(l, 0) waits xo[l] (every rank's O tasks)  -> red[l, 0];  GATE_UP(l) waits red[l, 0]
    REDUCE(l, 1) waits xdown[l]                      -> red[l, 1];  QKV(l+1), LM_HEAD wait it
    LM_HEAD pushes its partial choice to every rank (xlm); CHOOSE waits xlm and merges all ranks'
Norms after the blocks (ModelSpec.post_norms, Tiling.post_norm): a block's output is normalized
whole before the residual add, so O and DOWN always store sums (one rank: one K part) and
REDUCE tasks add norm(sum) -- one grid-wide hand-off more per block than a residual added in
the GEMV epilogue. (The block's last o / down task to finish doing the REDUCE work itself, on a
ticket counter as merge_in_attn's, with no REDUCE tasks: built, interpreter- and GPU-tested, and
measured level on an H100 -- Gemma-3-1B 785.9 / 781.9 vs 791.8 / 765.9 tok/s, OLMo-2-1B 865.0 /
864.1 vs 867.3 / 859.5, sweep_mega 256 tokens, interleaved in one process, bench/RESULTS.md
session 54: the ticket's round trip costs what the hand-off did. Removed.)
Two partial buffers (o, down) suffice: rank A pushes o partials of layer l+1 only after every
rank's DOWN(l), which each rank runs after its last REDUCE(l, 0) read them (and the next step's
first push follows every rank's CHOOSE).
Each wait also protects the buffers it overwrites (write-after-read): e.g. O(l) rewrites the
residual only after merge[l], which implies every QKV(l) tile that read it has finished.
RMSNorm is never its own task: each consumer task recomputes it once (row_rstd prologue).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import triton

from .opcodes import COST, Op
from .spec import ModelSpec
from .triton_kernels.attention import split_plan
from .triton_kernels.config import (StreamConfig, attention_config, fp8_tile, gemv_config,
                                     merge_heads, ptx_stream_ok, rows_ksplit, stream_config,
                                     wide_head_keys)
from .triton_kernels.gemv import block_t
from .triton_kernels.moe import down_tile, shared_blocks
from .triton_kernels.qkv_rope import defer_qk_norm, qkv_tile


@dataclass(frozen=True)
class Tiling:
    """Every tile size of one step of T tokens, derived from the model dims and config.py.

    Decode (T=1) is a STREAM: each task streams its tiles' (rows x K chunk) pieces back to back
    (gemv_body), `rows_*` rows per tile and `bk_*` per chunk for rows of q_dim / d_model /
    ffn_dim elements (config.StreamConfig). T>1 tiles loop over K in tl.dot tiles.
    """
    T: int
    block_t: int
    stream: bool
    rows_q: int           # rows per tile, K = q_dim (o_proj)
    rows_d: int           # rows per tile, K = d_model (gate|up, lm_head)
    rows_f: int           # rows per tile, K = ffn_dim (down_proj; a mixture's: its dense layers'
                          # dense_ffn)
    rows_g: int           # rows per tile of each of gate and up (of up alone without a gate,
                          # ModelSpec.gated), K = d_model
    bk_q: int
    bk_d: int
    bk_f: int
    bk_g: int
    num_warps: int
    qkv_pairs: int        # rotation pairs per QKV tile (BLOCK_H)
    qkv_chunks: int       # tiles per head
    qkv_bk: int
    attn_block_s: int
    attn_block_tok: int
    attn_chunk: int       # keys per split at full context (the cost model's; each launch deals
                          # the keys it has evenly over the splits: attention.split_range)
    n_splits: int
    emb_block: int
    qk_defer: bool = False  # q/k norm after the QKV tiles, in QKNORM tasks (qkv_rope.py)
    ptx: int = 0            # decode weight pieces: 1 inline PTX, 2 words by plain loads
                            # (config.StreamConfig.piece_mode; 0 bf16 tiles)
    merge_in_attn: bool = False  # the last ATTN task of a KV group merges it (no MERGE tasks)
    merge_heads: int = 1         # q heads per MERGE task (config.merge_heads: a power of two)
    norm_in_qkv: bool = False    # qk_defer: the last QKV task of a group norms it (no QKNORM)
    attn_in_qkv: bool = False    # decode: the last QKV task of a group runs its attention (one
                                 # split over all keys: short contexts, config.StreamConfig)
    stages: tuple = (1, 1, 1, 1)  # decode: QKV / o / gate|up / down stream stages (StreamConfig)
    l2_prefetch_kb: int = 0       # decode: o_proj tasks' bulk L2 prefetch (StreamConfig)
    kv_prefetch: bool = False     # decode: K / V asked into L2 before the waits (StreamConfig)
    one_poller: bool = False      # decode: waits polled by one thread (StreamConfig)
    abort_every: int = 1          # decode, one_poller: polls per read of the abort word
    ksplit: int = 1               # several rows, one rank: K parts per o / down tile
                                  # (config.rows_ksplit; build_step sets it)
    attn_outline: bool = False    # decode: the attention body out of line (StreamConfig)
    post_norm: bool = False       # norms after the blocks (ModelSpec.post_norms): o / down sums
                                  # through REDUCE tasks, which normalize them
    fp8_words: bool = False       # decode, FP8 rows and bf16 / fp16 activations: the codes as
                                  # words dotted in f16 (StreamConfig.fp8_words)
    rows_e: int = 0               # decode, a mixture: EXPERT_GU's rows per tile (of gate and of
                                  # up; K = d_model, chunks of bk_g)
    moe_rows: int = 0             # EXPERT_DOWN's rows per tile and K chunk
    moe_bk: int = 0               # (StreamConfig.moe_down_tile; steps of several rows:
                                  # moe.down_tile)
    rows_r: int = 0               # decode, a mixture: ROUTER's rows per tile (0: rows_d;
                                  # StreamConfig.router_rows)
    moe_vs: int = 0               # decode: EXPERT_DOWN's shared expert as that many experts
                                  # (StreamConfig.moe_shared_in_chunks, moe.shared_blocks)

    @property
    def parted(self) -> bool:
        """One rank's o / down tasks store fp32 sums (K parts; or one, normalized whole by a
        post norm) for REDUCE tasks, rather than adding to the residual."""
        return self.ksplit > 1 or self.post_norm

    def n_t(self, block=None):
        return triton.cdiv(self.T, block or self.block_t)

    def qkv_group_tiles(self, group: int) -> int:
        """QKV tiles of one KV group: its group q heads, k and v head, for every token block."""
        return (group + 2) * self.qkv_chunks * self.n_t()

    def attn_group_tasks(self) -> int:
        """ATTN tasks of one KV group: its splits, for every attention token block."""
        return self.n_splits * self.n_t(self.attn_block_tok)

    def gemv_rows(self, op: Op) -> int:
        return {Op.O_PROJ: self.rows_q, Op.DOWN: self.rows_f, Op.GATE_UP: self.rows_g,
                Op.EXPERT_GU: self.rows_e, Op.EXPERT_DOWN: self.moe_rows,
                Op.ROUTER: self.rows_r or self.rows_d}.get(op, self.rows_d)

    def gemv_tiles(self, op: Op, N: int) -> int:
        """Tiles of N output rows per token block."""
        return triton.cdiv(N, self.gemv_rows(op))


def few_tiles_rows(rows: int, N: int, n_programs: int) -> int:
    """A decode op's rows per tile where its N output rows make fewer tiles than a third of the
    programs: halved while they make fewer than half -- a phase that leaves most programs idle
    streams at their few programs' rate. Gemma-3-1B's o_proj and down_proj (1152 rows; K 1024 / 6912
    stream in 1024-chunks, so 16 rows a piece: 72 tiles for 264 programs) on an H100, sweep_mega 256
    tokens, one run (bench/RESULTS.md session 54): 16 rows 722.8 / 720.7 tok/s, 8 rows (144 tiles)
    774.0, 4 rows (288 tiles of 8 KB pieces) 729.4 -- more programs, but not pieces so small that
    each holds little in flight; StableLM-2-1.6B's down (64 -> 256 tiles) +7.4%, Qwen2.5-0.5B's
    o_proj / down (56 -> 224) +3.4%; repeated against the tree before the rule (bench_decode,
    interleaved, H100, session 57): Qwen2.5-0.5B +3.9%, SmolLM2-135M +4.0%, GPT-2 XL (its down_proj
    50 -> 200 tiles) +22%. An op already on about half the programs loses: Qwen3-0.6B's o_proj, 128
    -> 256 tiles, -3.5% / -2.4% / -2.7% (bench_decode, interleaved with the tree before the rule,
    H100, sessions 55 / 56), so the third: between the 27% (72 / 264) that gained and the 48% that
    lost. Shapes whose ops all have >= n_programs / 3 tiles (the 1B, the 8B, every tile_table.json
    entry) keep their tiles."""
    if triton.cdiv(N, rows) * 3 >= n_programs:
        return rows
    while rows > 1 and triton.cdiv(N, rows) * 2 < n_programs:
        rows //= 2
    return rows


def make_tiling(spec: ModelSpec, T: int, max_seq_len: int, device,
                stream: StreamConfig | None = None, dtype=None,
                attn_in_qkv: bool = False, n_programs: int | None = None,
                fp8: bool = False) -> Tiling:
    """stream: the decode tile (default config.stream_config; bench/sweep_mega.py varies it);
    dtype: the weights' (the PTX weight pieces need bf16 rows of K % 8 == 0; a step of several
    rows tiles K by their element size, config.rows_tile); fp8: the layer matrices are FP8 rows
    (PackedWeights.fp8: a step of several rows tiles them as 1-byte elements, K chunks within a
    scale group, config.fp8_tile; decode streams their pieces as the bf16 rows'); attn_in_qkv (T=1):
    the short-context decode step (Tiling.attn_in_qkv). Every other field, the split plan
    included, is the same as without it, so both decode schedules run one compiled kernel.
    n_programs (decode): the schedule's programs, for few_tiles_rows (None: the stream's rows)."""
    if attn_in_qkv and T != 1:
        raise ValueError("attn_in_qkv is a decode (T=1) schedule")
    bt = block_t(T)
    half = spec.head_dim // 2
    # a mixture's gate|up / down tiles: its dense layers' (ModelSpec.dense_layers: their GATE_UP /
    # DOWN tasks); without those they tile nothing: the shared expert's width, or an expert's
    ffn = spec.dense_ffn if spec.dense_layers else spec.ffn_dim or spec.expert_ffn
    dims = (spec.q_dim, spec.d_model, ffn)
    elem_bytes = 1 if fp8 else dtype.itemsize if dtype is not None else 2
    if T == 1:
        st = stream or stream_config(device, spec)
        # o_proj (rows of q_dim), the lm_head (d_model), down (ffn_dim), gate|up (d_model, two
        # matrices a piece; one without a gate): each op's piece elements (StreamConfig.elems)
        tiles = [st.tile(spec.q_dim, elems=st.elems(1)), st.tile(spec.d_model),
                 st.tile(ffn, elems=st.elems(3)),
                 st.tile(spec.d_model, 1 + spec.gated, st.elems(2))]
        rows, bks, warps = [t.block_n for t in tiles], [t.block_k for t in tiles], st.num_warps
        rows_e = rows[3]  # a mixture's experts: gate|up's tile over their routed rows
        rows_r = 0
        if spec.moe and n_programs:
            rows_e = few_tiles_rows(rows_e, spec.top_k * spec.expert_ffn, n_programs)
            rows_r = st.router_rows or few_tiles_rows(rows[1], spec.n_experts +
                                                      (spec.ffn_dim > 0), n_programs)
        if n_programs:  # o_proj, down, gate|up by their output rows (the lm_head's vocabulary
            # keeps its rows: a vocab-parallel shard's can differ among ranks, whose lm_head tasks
            # must match)
            for i, n in ((0, spec.d_model), (2, spec.d_model), (3, ffn)):
                rows[i] = few_tiles_rows(rows[i], n, n_programs)
    else:
        cfg = fp8_tile(gemv_config(spec.d_model * 4, spec.d_model, T, device,
                                   elem_bytes=elem_bytes), elem_bytes, T)
        rows, bks, warps, st = [cfg.block_n] * 4, [cfg.block_k] * 4, cfg.num_warps, None
        rows_e, rows_r = cfg.block_n, 0
    moe = None if not spec.moe else st.moe_down_tile(spec.top_k, fp8) if T == 1 else \
        down_tile(spec.top_k, fp8=fp8)
    defer = defer_qk_norm(spec.qk_norm, T, spec.qk_norm_full)
    # q / k norms over all heads (OLMo 2): the norm needs every group's QKV tiles, so no group's
    # last tile may run it (norm_in_qkv) or its attention: QKNORM tasks (the short-context
    # schedule's QKN_ATTN tasks) wait for the whole layer's QKV tasks
    pairs, qkv_bk, _, _ = qkv_tile(spec.head_dim, spec.qk_norm, T, spec.d_model, device,
                                   stream=st, defer=defer, elem_bytes=elem_bytes)
    block_s, block_tok = attention_config(spec.head_dim, spec.group, T)
    # the split plan of the runtime's partials buffer (runtime.py), whatever the decode loop's block
    chunk, n_splits = split_plan(max_seq_len, spec.n_kv_heads, block_s)
    # a megakernel's key blocks: decode's rule (StreamConfig.attention_block), else at most 64 x
    # 128 elements (the split plan's multiples of 64 keys are multiples of those too)
    block_s = st.attention_block(spec.head_dim) if T == 1 else wide_head_keys(spec.head_dim,
                                                                              block_s)
    return Tiling(T=T, block_t=bt, stream=T == 1, rows_q=rows[0], rows_d=rows[1],
                  rows_f=rows[2], rows_g=rows[3], bk_q=bks[0], bk_d=bks[1], bk_f=bks[2],
                  bk_g=bks[3], num_warps=warps,
                  qkv_pairs=pairs, qkv_chunks=triton.cdiv(half, pairs), qkv_bk=qkv_bk,
                  attn_block_s=block_s, attn_block_tok=block_tok,
                  attn_chunk=chunk, n_splits=n_splits,
                  emb_block=min(1024, triton.next_power_of_2(spec.d_model)), qk_defer=defer,
                  ptx=st.piece_mode() if st is not None and ptx_stream_ok(dtype, *dims) else 0,
                  merge_in_attn=st is not None and st.merge_in_attn,
                  merge_heads=merge_heads(spec.group, st.merge_heads if st is not None else 1),
                  norm_in_qkv=st is not None and st.norm_in_qkv and defer and
                  not spec.qk_norm_full,
                  attn_in_qkv=attn_in_qkv,
                  stages=st.op_stages(spec.d_model) if st is not None else (1, 1, 1, 1),
                  # (its prefetch reads gate and up rows: an MLP without a gate takes none)
                  l2_prefetch_kb=st.l2_prefetch_kb if st is not None and spec.gated else 0,
                  kv_prefetch=st is not None and st.kv_prefetch,
                  one_poller=st is not None and st.one_poller,
                  abort_every=st.abort_every if st is not None else 1,
                  attn_outline=st is not None and st.attn_outline, post_norm=spec.post_norms,
                  fp8_words=fp8 and st is not None and st.fp8_word_pieces(dtype, spec.d_model),
                  rows_e=rows_e, moe_rows=moe.block_n if moe else 0,
                  moe_bk=moe.block_k if moe else 0, rows_r=rows_r,
                  moe_vs=shared_blocks(spec.expert_ffn, spec.ffn_dim, dtype, dtype,
                                       st.moe_shared_in_chunks and spec.ffn_dim > 0 and not fp8,
                                       spec.top_k, 16) if spec.moe and T == 1 else 0)


REMOTE = ("xo", "xdown", "xlm")  # counter keys signalled across ranks (tensor parallelism)


@dataclass
class Task:
    op: Op
    layer: int
    args: tuple           # (a0, a1, a2)
    wait: tuple           # counter key
    signal: tuple         # counter key
    cost: int
    wait_off: int = 0     # target = (epoch + wait_off) * producers(wait)


@dataclass
class StepGraph:
    spec: ModelSpec
    tiling: Tiling
    tasks: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)   # key -> index (remote: -1 - x, opcodes.py)
    producers: dict = field(default_factory=dict)  # key -> number of tasks (per rank) signalling it
    n_vparts: int = 0     # lm_head tasks per token block: partial choices per token row
    world: int = 1        # tensor-parallel ranks
    n_local: int = 0      # local counters
    n_remote: int = 0     # remote counters (each one word per rank in the symmetric buffer)

    def counter(self, key):
        if key not in self.counters:
            if key[0] in REMOTE:
                self.counters[key] = -1 - self.n_remote
                self.n_remote += 1
            else:
                self.counters[key] = self.n_local
                self.n_local += 1
        return self.counters[key]

    def add(self, task: Task):
        self.counter(task.wait)
        self.counter(task.signal)
        self.producers[task.signal] = self.producers.get(task.signal, 0) + 1
        self.tasks.append(task)


def ranges(total: int, parts: int):
    """Split [0, total) into min(parts, total) contiguous non-empty ranges whose sizes differ by at
    most one (2048 tiles over 132 programs: 68 x 16 + 64 x 15, not 128 x 16 leaving 4 idle)."""
    parts = max(1, min(parts, total))
    q, r = divmod(total, parts)
    bounds = [i * q + min(i, r) for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def moe_tasks(g: StepGraph, l: int, wait, n_programs: int, elt: int):
    """Layer l's mixture of experts (decode, one rank), after `wait` (its o_proj): ROUTER tasks
    over the router's rows (its E logits, then the shared expert's gate row) -> ("router", l);
    EXPERT_GU tasks, each of one slot -- routed slot j < top_k (its expert read from the routing
    every such task computes alike from z) or top_k, the shared expert -- over its rows ->
    ("egu", l); EXPERT_DOWN tasks over d_model's rows -> ("down", l), what the next layer's QKV
    tasks and the lm_head wait on. A slot's share of the programs follows its tiles."""
    s, tg = g.spec, g.tiling
    oh = COST.task_overhead_bytes
    rows = tg.gemv_rows(Op.ROUTER)
    for a, b in ranges(triton.cdiv(s.n_experts + (s.ffn_dim > 0), rows), n_programs):
        g.add(Task(Op.ROUTER, l, (0, a, b), wait, ("router", l),
                   oh + (b - a) * rows * s.d_model * elt))
    slots = [(j, s.expert_ffn) for j in range(s.top_k)] + [(s.top_k, s.ffn_dim)] * (s.ffn_dim > 0)
    tiles = [triton.cdiv(F, tg.rows_e) for _, F in slots]
    for (j, _), n in zip(slots, tiles):
        for a, b in ranges(n, max(1, n_programs * n // sum(tiles))):
            g.add(Task(Op.EXPERT_GU, l, (j, a, b), ("router", l), ("egu", l),
                       oh + (b - a) * 2 * tg.rows_e * s.d_model * elt))
    row_bytes = (s.top_k * s.expert_ffn + s.ffn_dim) * elt
    for a, b in ranges(triton.cdiv(s.d_model, tg.moe_rows), n_programs):
        g.add(Task(Op.EXPERT_DOWN, l, (0, a, b), ("egu", l), ("down", l),
                   oh + (b - a) * tg.moe_rows * row_bytes))


def build_step(spec: ModelSpec, tiling: Tiling, n_programs: int, world: int = 1,
               lm_vocab: int | None = None) -> StepGraph:
    """world > 1: spec is a rank's shard; lm_vocab: the vocabulary rows every rank tiles (the
    largest shard's, so every rank has the same lm_head tasks; the last rank masks its excess)."""
    s, T = spec, tiling.T
    if s.moe and (T > 1 or world > 1 or s.parallel or s.post_norms):
        raise ValueError("the megakernel's mixture-of-experts tasks run decode steps on one rank "
                         "(steps of several rows and tensor parallelism run ops)")
    if T > 1 and world == 1:
        ops = ((Op.O_PROJ, s.q_dim, tiling.bk_q), (Op.DOWN, s.ffn_dim, tiling.bk_f))
        tiling = dataclasses.replace(tiling, ksplit=rows_ksplit(
            max(tiling.gemv_tiles(op, s.d_model) for op, _, _ in ops) * tiling.n_t(),
            min(triton.cdiv(K, bk) for _, K, bk in ops), n_programs))
    g = StepGraph(spec, tiling, world=world)
    tg = tiling
    # the counter a group's QKV tasks signal: per group, or per layer where the q / k norms span
    # every head (ModelSpec.qk_norm_full: QKNORM tasks then wait for all of the layer's tiles)
    qkv_key = (lambda l, kv: ("qkv", l, 0)) if spec.qk_norm_full else \
        (lambda l, kv: ("qkv", l, kv))
    elt = 2
    tp = world > 1
    g.add(Task(Op.EMBED, 0, (0, T, 0), ("tok",), ("emb",), COST.task_overhead_bytes, -1))
    # ticket counters, each kind contiguous: ticket(l, g) = ticket(0, 0) + l * KVH + g
    split_attn = not tg.attn_in_qkv  # ATTN tasks (and MERGE / QKNORM tasks, unless fused)
    # the short-context schedule of norms over all heads: QKV tasks, then QKN_ATTN tasks
    qkn_attn = tg.attn_in_qkv and spec.qk_norm_full
    for kind in ("ticket",) * (tg.merge_in_attn and split_attn) + \
            ("qticket",) * (tg.norm_in_qkv or (tg.attn_in_qkv and not qkn_attn)):
        for l in range(s.n_layers):
            for kv in range(s.n_kv_heads):
                g.counter((kind, l, kv))
    qkv_tile_bytes = 2 * tg.qkv_pairs * s.d_model * elt
    per_group = tg.qkv_group_tiles(s.group)
    n_red = triton.cdiv(s.d_model, COST.reduce_block)
    red_bytes = max(world, tg.ksplit) * T * COST.reduce_block * 4
    reduced = tp or tg.parted  # the row-parallel ops' partial sums, then REDUCE tasks
    # what a residual write leaves behind: the row-parallel op itself, or its reduction
    after = {"o": lambda l: ("red", l, 0) if reduced else ("o", l),
             "down": lambda l: ("red", l, 1) if reduced else ("down", l)}
    for l in range(s.n_layers):
        prev = after["down"](l - 1) if l else ("emb",)
        for kv in range(s.n_kv_heads):
            # all programs share the QKV phase: group kv gets its share of the n_programs tasks
            parts = n_programs // s.n_kv_heads + (kv < n_programs % s.n_kv_heads)
            for a, b in ranges(per_group, max(1, parts)):
                if split_attn or qkn_attn:
                    g.add(Task(Op.QKV, l, (kv, a, b), prev,
                               ("qkn", l, kv) if tg.norm_in_qkv else qkv_key(l, kv),
                               COST.task_overhead_bytes + (b - a) * qkv_tile_bytes))
                else:
                    g.add(Task(Op.QKV_ATTN, l, (kv, a, b), prev, ("merge", l),
                               COST.task_overhead_bytes + (b - a) * qkv_tile_bytes))
        kv_bytes = 2 * tg.attn_chunk * s.head_dim * elt
        for kv in range(s.n_kv_heads if qkn_attn else 0):
            g.add(Task(Op.QKN_ATTN, l, (kv, 0, 0), qkv_key(l, kv), ("merge", l),
                       COST.task_overhead_bytes + kv_bytes))
        qkv_done = (lambda kv: ("qkn", l, kv)) if tg.qk_defer else (lambda kv: ("qkv", l, kv))
        if tg.qk_defer and not tg.norm_in_qkv and split_attn:
            for kv in range(s.n_kv_heads):
                g.add(Task(Op.QKNORM, l, (kv, 0, 0), qkv_key(l, kv), ("qkn", l, kv),
                           COST.task_overhead_bytes))
        for kv in range(s.n_kv_heads if split_attn else 0):
            for sp in range(tg.n_splits):
                for tb in range(tg.n_t(tg.attn_block_tok)):
                    g.add(Task(Op.ATTN, l, (kv, sp, tb), qkv_done(kv),
                               ("merge", l) if tg.merge_in_attn else ("attn", l, kv),
                               COST.task_overhead_bytes + kv_bytes))
        for kv in range(s.n_kv_heads if split_attn and not tg.merge_in_attn else 0):
            for h0 in range(0, s.group, tg.merge_heads):
                g.add(Task(Op.MERGE, l, (kv, h0, min(s.group, h0 + tg.merge_heads)),
                           ("attn", l, kv), ("merge", l), COST.task_overhead_bytes))
        o = (Op.O_PROJ, "o", ("gu", l) if s.parallel else ("merge", l), s.d_model, s.q_dim)
        experts = s.moe and l not in s.dense_layers  # (a mixture's dense layers: GATE_UP / DOWN)
        ffn = s.dense_ffn if l in s.dense_layers else s.ffn_dim
        gu = (Op.GATE_UP, "gu", ("merge", l) if s.parallel else after["o"](l), ffn,
              (1 + s.gated) * s.d_model)
        down = (Op.DOWN, "down", after["o"](l) if s.parallel else ("gu", l), s.d_model, ffn)
        for op, key, wait, N, K in (gu, o, down) if s.parallel else (o,) if experts else \
                (o, gu, down):
            parts = tg.ksplit if key != "gu" else 1  # arg0: token block * parts + K part
            tile_bytes = tg.gemv_rows(op) * K * elt // parts
            sig = ("x" + key, l) if tp and key != "gu" else \
                ("p" + key, l) if parts > 1 else (key, l)
            for tb in range(tg.n_t()):
                for kp in range(parts):
                    for a, b in ranges(tg.gemv_tiles(op, N), n_programs // parts):
                        g.add(Task(op, l, (tb * parts + kp, a, b), wait, sig,
                                   COST.task_overhead_bytes + (b - a) * tile_bytes))
            if reduced and key != "gu":
                which = 0 if key == "o" else 1
                for a, b in ranges(n_red, n_programs):
                    g.add(Task(Op.REDUCE, l, (which, a, b), sig, ("red", l, which),
                               COST.task_overhead_bytes + (b - a) * red_bytes))
        if experts:
            moe_tasks(g, l, after["o"](l), n_programs, elt)
    # lm_head: one partial choice per task and token row: arg0 = token block * n_vparts + part
    parts = ranges(tg.gemv_tiles(Op.LM_HEAD, lm_vocab or s.vocab_size), n_programs)
    tile_bytes = tg.gemv_rows(Op.LM_HEAD) * s.d_model * elt
    lm = ("xlm",) if tp else ("lm",)
    for tb in range(tg.n_t()):
        for part, (a, b) in enumerate(parts):
            g.add(Task(Op.LM_HEAD, 0, (tb * len(parts) + part, a, b),
                       after["down"](s.n_layers - 1), lm,
                       COST.task_overhead_bytes + (b - a) * tile_bytes))
    g.n_vparts = len(parts)
    g.add(Task(Op.CHOOSE, 0, (len(parts), 0, 0), lm, ("tok",), COST.task_overhead_bytes))
    return g
