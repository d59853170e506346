"""The persistent megakernel: whole decode steps, then many steps, in one launch.

One program per SM (cooperative launch: an oversubscribed grid fails at launch instead of hanging).
Program p walks its static queue (schedule.py) once per step; for each instruction (opcodes.py):
    start:    a weight task (GEMV, QKV, lm_head) requests its first weight piece (shared-memory
              stages: its first stages - 1 pieces, the wait inside the stream's first
              iteration): weights never depend on the wait, so their latency hides behind it
    wait:     spin on an acquire load of counters[wait] until >= (epoch + off) * producers
              (decode: one thread polls, a barrier reduction hands every thread the verdict --
              StreamConfig.one_poller)
    run:      dispatch on the opcode to the same *_body functions the `ops` mode launches
    publish:  block barrier, one release add (GPU scope) to counters[signal]
Counters only grow. The epoch is read from the token counter at launch (it counts completed
steps), so nothing is reset between steps or launches. Between steps every program waits for the
previous step's token and stops when the CHOOSE task raised the done flag (EOS, or max steps).
Every spin is bounded: on timeout the first program to notice records (program, queue position,
counter, value, target, step) in the status buffer, raises the abort flag and all programs exit;
the host raises MegakernelTimeout. With one program (serial mode) the queue is a topological order
and no wait can block: that is how it runs under Triton's CPU interpreter.
Tensor parallelism (WORLD > 1, one launch per rank, graph.py): remote counters (negative indices,
opcodes.py) live in every rank's symmetric buffer (xtab: each rank's address of it, in 4-byte
words: [remote counters x WORLD, one set per schedule (each counts its own epochs) | o and down
partial sums fp32 [2, WORLD, TM, D] at x_red | lm_head partial choices [TM, WORLD * n_vparts]
at x_lmv (fp32) and x_lmi (int32)]; state.SymmetricLayout). O and DOWN
tasks write their fp32 partial sums into their own rank's row of the buffer and push them to every
rank (all_reduce.push_rows), then release the remote counter on every rank (system scope); REDUCE
waits for every rank's word of it (acquire, system scope) and adds the partials in rank order
(all_reduce.residual_sum_body); LM_HEAD pushes its partial choice, CHOOSE merges all ranks'.
Every rank computes the same numbers in the same order, so every rank picks the same token.
TRACE: each task records [start, ready (wait over), end (published)] timestamps and its SM
(opcodes.TRACE_WORDS) in trace[program, step * LMAX + position] (globaltimer ns on the GPU; a
logical clock interpreted, and the program id for the SM); a ticket-taking QKV task also its
tiles' end, and the group's completer its ticket's return, its q / k normed and its attention
stored.
"""
import triton
import triton.language as tl

from ..opcodes import LAYER_BITS as _LAYER_BITS, TRACE_WORDS, WORDS, Op
from ..ptx_inline.flags import cta_barrier, spin_acquire, spin_acquire_cta
from ..ptx_inline.memory import prefetch_l2_bulk
from ..ptx_inline.timers import globaltimer_ns, sm_id
from ._common import FP8_PIECES, FP8_WORDS, row_elems
from .all_reduce import peer, push_rows, residual_sum_body
from .attention import attention_body, attn_merge_body, kv_prefetch
from .embedding import embedding_body
from .gemv import gemv_body, stream_start
from .lm_head import choose_merge_body, lm_head_body
from .moe import experts_down_body, route_body
from .qkv_rope import QK_NORM_FULL, qk_norm_rope_body, qkv_rope_body, qkv_start

TW: tl.constexpr = tl.constexpr(TRACE_WORDS)
OP_EMBED: tl.constexpr = tl.constexpr(int(Op.EMBED))
OP_QKV: tl.constexpr = tl.constexpr(int(Op.QKV))
OP_ATTN: tl.constexpr = tl.constexpr(int(Op.ATTN))
OP_MERGE: tl.constexpr = tl.constexpr(int(Op.MERGE))
OP_O: tl.constexpr = tl.constexpr(int(Op.O_PROJ))
OP_GU: tl.constexpr = tl.constexpr(int(Op.GATE_UP))
OP_DOWN: tl.constexpr = tl.constexpr(int(Op.DOWN))
OP_LM: tl.constexpr = tl.constexpr(int(Op.LM_HEAD))
OP_CHOOSE: tl.constexpr = tl.constexpr(int(Op.CHOOSE))
OP_REDUCE: tl.constexpr = tl.constexpr(int(Op.REDUCE))
OP_QKNORM: tl.constexpr = tl.constexpr(int(Op.QKNORM))
OP_QKVA: tl.constexpr = tl.constexpr(int(Op.QKV_ATTN))
OP_QKNA: tl.constexpr = tl.constexpr(int(Op.QKN_ATTN))
OP_ROUTER: tl.constexpr = tl.constexpr(int(Op.ROUTER))
OP_EGU: tl.constexpr = tl.constexpr(int(Op.EXPERT_GU))
OP_EDOWN: tl.constexpr = tl.constexpr(int(Op.EXPERT_DOWN))
NW: tl.constexpr = tl.constexpr(WORDS)
LAYER_BITS: tl.constexpr = tl.constexpr(_LAYER_BITS)
LAYER_MASK: tl.constexpr = tl.constexpr((1 << _LAYER_BITS) - 1)

# status buffer layout (int64): [abort, program, queue position, counter, value, target, step,
# rank waited on (-1: a local counter)]
STATUS_WORDS = 8


@triton.jit
def wait_counter(ctr_ptr, target, status_ptr, max_spin, pid, qi, ctr, step, xtab_ptr, rank,
                 x_ctr, x_spin, WORLD: tl.constexpr, USE_ASM: tl.constexpr,
                 POLL1: tl.constexpr):
    """Spin until counters[ctr] >= target -- for a remote counter (ctr < 0, tensor
    parallelism), until every rank's word of it in this rank's symmetric buffer does, in rank
    order, at most x_spin polls each (the other ranks' launches start when their hosts get there);
    returns 1 if met, 0 on timeout or abort. POLL1 > 0 (StreamConfig.one_poller): a local
    counter is polled by one thread of the program, the outcome shared by a barrier reduction
    (ptx_inline.spin_acquire_cta), the abort word read every POLL1-th poll
    (StreamConfig.abort_every); its value is read again only for a timeout's report."""
    q = pid * 0 - 1
    local = True
    if WORLD > 1:
        local = ctr >= 0
    if local:
        if POLL1:
            met, _ = spin_acquire_cta(ctr_ptr + ctr, target, max_spin, status_ptr, "gpu",
                                      USE_ASM, True, POLL1)
            v = target
            if met == 0:  # timed out or aborted (a met wait reads nothing more): for the report
                v = tl.minimum(tl.load(ctr_ptr + ctr, volatile=True), target - 1)
        else:
            v, _ = spin_acquire(ctr_ptr + ctr, target, max_spin, status_ptr, "gpu", USE_ASM,
                                True)
    else:
        words = peer(xtab_ptr, rank, x_ctr + (-1 - ctr) * WORLD, tl.int32)
        v = target
        for r in range(0, WORLD):
            if v >= target:
                v, _ = spin_acquire(words + r, target, x_spin, status_ptr, "sys", USE_ASM, True)
                q = pid * 0 + r
    ok = (v >= target).to(tl.int32)
    if ok == 0:  # a met wait reads nothing more: the abort word costs a round trip
        zero = (pid * 0).to(tl.int64)
        if tl.load(status_ptr, volatile=True) == 0:  # timed out here, not told to abort
            if tl.atomic_cas(status_ptr, zero, zero + 1) == 0:  # the first to time out reports
                tl.store(status_ptr + 1, pid.to(tl.int64))
                tl.store(status_ptr + 2, qi.to(tl.int64))
                tl.store(status_ptr + 3, ctr.to(tl.int64))
                tl.store(status_ptr + 4, v.to(tl.int64))
                tl.store(status_ptr + 5, target.to(tl.int64))
                tl.store(status_ptr + 6, step.to(tl.int64))
                tl.store(status_ptr + 7, q.to(tl.int64))
    cta_barrier(USE_ASM)  # not tl.debug_barrier: it would keep a stream from being pipelined
    return ok


@triton.jit
def ready(ctr_ptr, target, status_ptr, max_spin, pid, qi, ctr, step, tr, clock_ptr, op,
          xtab_ptr, rank, x_ctr, x_spin, WORLD: tl.constexpr, USE_ASM: tl.constexpr,
          TRACE: tl.constexpr, POLL1: tl.constexpr):
    """A task's dependency wait (wait_counter), then its 'ready' timestamp."""
    ok = wait_counter(ctr_ptr, target, status_ptr, max_spin, pid, qi, ctr, step, xtab_ptr, rank,
                      x_ctr, x_spin, WORLD, USE_ASM, POLL1)
    if TRACE:
        tl.store(tr + 1, globaltimer_ns(op, clock_ptr, USE_ASM))
    return ok


# attention_body as a function of its own in the PTX (.func, a call) rather than inlined
# (StreamConfig.attn_outline): ptxas then allocates its registers apart from the weight streams'
attention_call = triton.jit(attention_body.fn, noinline=True)


@triton.jit
def attend(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, pos, T, TM, S, H, HD, window, scale, n_splits,
           kvh, split, pid_t, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
           BLOCK_TOK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr,
           BLOCK_D: tl.constexpr, F32: tl.constexpr, DIRECT: tl.constexpr,
           OUTLINE: tl.constexpr, softcap, SOFTCAP: tl.constexpr, qs_beta, qs_orig,
           QSCALE: tl.constexpr, alibi_ptr, ALIBI: tl.constexpr):
    """attention_body, inlined or (OUTLINE) called out of line."""
    if OUTLINE:
        attention_call(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, pos, T, TM, S, H, HD, window, scale,
                       n_splits, kvh, split, pid_t, GROUP, BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S,
                       BLOCK_D, F32, DIRECT, softcap, SOFTCAP, qs_beta, qs_orig, QSCALE,
                       alibi_ptr, ALIBI)
    else:
        attention_body(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, pos, T, TM, S, H, HD, window, scale,
                       n_splits, kvh, split, pid_t, GROUP, BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S,
                       BLOCK_D, F32, DIRECT, softcap, SOFTCAP, qs_beta, qs_orig, QSCALE,
                       alibi_ptr, ALIBI)


@triton.jit
def merge_group(opart_ptr, lse_ptr, attn_ptr, pos, T, TM, H, HD, window, n_splits, g, h0, h1,
                GROUP, BLOCK_GM: tl.constexpr, BLOCK_SP: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_S: tl.constexpr):
    """KV group g's attention splits merged for its q heads [h0, h1), BLOCK_GM at a time, every
    token (a MERGE task: one chunk of BLOCK_GM heads; or the ATTN task that completes the group:
    MERGE_IN_ATTN, all of them)."""
    for t in range(0, T):
        for g0 in range(h0, h1, BLOCK_GM):
            attn_merge_body(opart_ptr, lse_ptr, attn_ptr, pos, T, TM, H, HD, window, n_splits,
                            t, g, g0, GROUP, BLOCK_GM, BLOCK_SP, BLOCK_D, BLOCK_S)


@triton.jit
def layer_rope(cos_ptr, sin_ptr, rope_ptr, layer, HD, ROPE_TABLES: tl.constexpr):
    """Layer `layer`'s cos / sin tables: ROPE_TABLES (a model with several tables,
    state.RopeTables: layers without RoPE, or sliding-window layers' own), the row its table
    starts at, rope_ptr[layer]; else the one table."""
    if ROPE_TABLES:
        start = tl.load(rope_ptr + layer) * (HD // 2)
        return cos_ptr + start, sin_ptr + start
    return cos_ptr, sin_ptr


@triton.jit
def qk_norm_group(layer, g, qkraw_ptr, qkn_ptr, cos_ptr, sin_ptr, pos, q_ptr, kc_ptr, T, S,
                  eps, H, KVH, HD, GROUP, BLOCK_SLOT: tl.constexpr, BLOCK_HALF: tl.constexpr,
                  QKN_ORDER: tl.constexpr):
    """Layer `layer`'s KV group g q/k-normalized and rotated (a QKNORM task, or the QKV task that
    completes the group's tiles: NORM_IN_QKV). The layer's norm weights: [H + KVH, HD], a row
    per head slot (packing.PackedWeights.qk_norm)."""
    qk_norm_rope_body(qkraw_ptr, qkn_ptr + layer * (H + KVH) * HD, cos_ptr, sin_ptr, pos, q_ptr,
                      kc_ptr + layer * KVH * S * HD, T, S, eps, H, KVH, HD, g, GROUP, BLOCK_SLOT,
                      BLOCK_HALF, QKN_ORDER)


@triton.jit
def task_kv_prefetch(op, a0, a1, a2, layer, kc_ptr, vc_ptr, win_ptr, pos, T, S, KVH, HD,
                     n_splits, ALIGN: tl.constexpr, USE_ASM: tl.constexpr, KV_PF: tl.constexpr):
    """KV_PF (StreamConfig.kv_prefetch): before its wait, a QKV_ATTN task holding its KV group's
    first tile (a1 == 0) asks L2 for the group's keys and values, which the group's completer
    will read; an ATTN task (its first token block) for its split's (attention.kv_prefetch).
    win_ptr: the layer's sliding window (read only by the tasks that prefetch)."""
    if KV_PF:
        base = layer * KVH * S * HD
        if ((op == OP_QKVA) & (a1 == 0)) | (op == OP_QKNA):
            kv_prefetch(kc_ptr + base, vc_ptr + base, pos, T, S, HD, tl.load(win_ptr), 1, a0, 0,
                        ALIGN, USE_ASM)
        elif (op == OP_ATTN) & (a2 == 0):
            kv_prefetch(kc_ptr + base, vc_ptr + base, pos, T, S, HD, tl.load(win_ptr), n_splits,
                        a0, a1, ALIGN, USE_ASM)


@triton.jit
def next_gate_up(entry, has_next, wgu_ptr, FFN, D):
    """The queue entry after this task: (its layer's w_gu [2 FFN, D], its row tiles lo, hi) if
    it is a GATE_UP task; otherwise (and with no next entry) hi == lo, an empty range -- for
    rows_prefetch."""
    op_n = tl.load(entry, mask=has_next, other=0)
    layer_n = tl.load(entry + 1, mask=has_next, other=0).to(tl.int64)
    lo_n = tl.load(entry + 3, mask=has_next, other=0)
    hi_n = tl.load(entry + 4, mask=has_next, other=0)
    hi_n = tl.where(op_n == OP_GU, hi_n, lo_n)
    return wgu_ptr + layer_n * 2 * FFN * D, lo_n, hi_n


@triton.jit
def rows_prefetch(w_ptr, N, K, lo, hi, BLOCK_N: tl.constexpr, KB: tl.constexpr,
                  USE_ASM: tl.constexpr):
    """The first KB KB of gate rows [lo * BLOCK_N, min(hi * BLOCK_N, N)) of w_gu [2 N, K] and of
    the up rows N rows on, asked into L2 (ptx_inline.prefetch_l2_bulk, one per range). Returns
    the bytes asked per range (0: none)."""
    elt: tl.constexpr = w_ptr.dtype.element_ty.primitive_bitwidth // 8
    r0 = lo * BLOCK_N
    n = tl.maximum(tl.minimum((tl.minimum(hi * BLOCK_N, N) - r0) * K * elt, KB * 1024), 0)
    if n > 0:
        p = w_ptr + r0.to(tl.int64) * K
        prefetch_l2_bulk(p, n, USE_ASM)
        prefetch_l2_bulk(p + N * K, n, USE_ASM)
    return n


@triton.jit
def task_prefetch(entry, has_next, wgu_ptr, FFN, D, RG: tl.constexpr, PF_KB: tl.constexpr,
                  USE_ASM: tl.constexpr):
    """An o_proj task's L2 prefetch before its wait (StreamConfig.l2_prefetch_kb): the first
    PF_KB KB of gate and of up rows of the next queue entry if it is a GATE_UP task (that
    entry's words requested here, after the task's first weight piece: before it they held
    registers across it, compile_check 1B spills 44 -> 88 B)."""
    if PF_KB > 0:
        wl, lo_n, hi_n = next_gate_up(entry, has_next, wgu_ptr, FFN, D)
        rows_prefetch(wl, FFN, D, lo_n, hi_n, RG, PF_KB, USE_ASM)


@triton.jit
def residual_task(x_ptr, w_ptr, b_ptr, h_ptr, T, D, K, eps, lo, hi, a0,
                  ctr_ptr, target, status_ptr, max_spin, pid, qi, ctr, step, tr, clock_ptr, op,
                  xtab_ptr, rank, x_ctr, x_spin, part_off, entry, has_next, wgu_ptr, FFN,
                  BIAS: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STREAM: tl.constexpr,
                  F32: tl.constexpr, WORLD: tl.constexpr, PUSH_BLOCK: tl.constexpr,
                  USE_ASM: tl.constexpr, TRACE: tl.constexpr, PTX: tl.constexpr,
                  STAGES: tl.constexpr, RG: tl.constexpr, PF_KB: tl.constexpr,
                  POLL1: tl.constexpr, part_ptr=None, part_stride=0, KSPLIT: tl.constexpr = 1,
                  POST_NORM: tl.constexpr = False):
    """o_proj / down_proj task: h[:, tiles lo..hi] += x @ W^T (+ bias), the residual stream in
    place -- its first weight piece requested, then its wait (ready), then the stream (STAGES >
    1: the wait inside the stream's first iteration, gemv_body). a0: the token block, or with
    KSPLIT > 1 (a step of several rows, graph.Tiling.ksplit) token block * KSPLIT + K part kp:
    only K part kp of the tiles, its fp32 partial sums stored to part_ptr + kp * part_stride
    (this op's parts; no bias, no residual); REDUCE tasks add the parts, the bias and the
    residual. POST_NORM on one rank (a norm after the block: the sum is normalized whole) stores
    the fp32 sums the same way, as one K part. Tensor parallelism: the fp32 partial sum goes to
    this rank's row of the symmetric
    buffer (element part_off) and is pushed to every rank; REDUCE tasks add it to the residual.
    task_prefetch (StreamConfig.l2_prefetch_kb: an o_proj task, PF_KB > 0) before its wait (the
    register stream: after its first piece; shared-memory stages: before the stream's first
    pieces): the first PF_KB KB of gate and of up rows of the gate|up task at queue entry `entry` (if
    has_next and it is one), asked into L2 -- an o_proj task waits on the attention chain,
    while HBM idles. (The first piece after the wait, or every piece after all but the KV
    groups' completers had published, measured no faster: config.StreamConfig.)"""
    wargs = (ctr_ptr, target, status_ptr, max_spin, pid, qi, ctr, step, tr, clock_ptr, op,
             xtab_ptr, rank, x_ctr, x_spin, WORLD, USE_ASM, TRACE, POLL1)
    tl.static_assert((WORLD == 1) | (KSPLIT == 1), "K parts on one rank only")
    out = h_ptr
    tb = a0
    kp = 0
    if WORLD > 1:
        out = peer(xtab_ptr, rank, part_off, tl.float32)
    PARTS: tl.constexpr = (KSPLIT > 1) | (POST_NORM & (WORLD == 1))  # sums for REDUCE tasks
    if PARTS:
        tb = a0 // KSPLIT
        kp = a0 % KSPLIT
        out = part_ptr + kp * part_stride
    EPI: tl.constexpr = PARTS == 0  # this task adds the bias and (one rank) the residual
    if STAGES > 1:
        task_prefetch(entry, has_next, wgu_ptr, FFN, D, RG, PF_KB, USE_ASM)
        run = gemv_body(x_ptr, w_ptr, w_ptr, b_ptr, h_ptr, out, T, D, K, K, D, D, eps, lo, hi,
                        tb, 0, 0, False, BIAS & EPI, False, (WORLD == 1) & EPI, BLOCK_T, BLOCK_N,
                        BLOCK_K, STREAM, F32, PTX, STAGES, ready, wargs)
    else:
        w0, _ = stream_start(w_ptr, D, K, lo, hi, BLOCK_N, BLOCK_K, False, STREAM, PTX)
        task_prefetch(entry, has_next, wgu_ptr, FFN, D, RG, PF_KB, USE_ASM)
        run = ready(*wargs)
        if run == 1:
            gemv_body(x_ptr, w_ptr, w_ptr, b_ptr, h_ptr, out, T, D, K, K, D, D, eps, lo, hi,
                      tb, w0, w0, False, BIAS & EPI, False, (WORLD == 1) & EPI, BLOCK_T,
                      BLOCK_N, BLOCK_K, STREAM, F32, PTX, kpart=kp, KSPLIT=KSPLIT)
    if WORLD > 1:
        if run == 1:
            tl.debug_barrier()  # every thread's partial sums stored before they are pushed
            push_rows(xtab_ptr, rank, part_off, D, tb * BLOCK_T, tl.minimum(T, tb * BLOCK_T +
                      BLOCK_T), lo * BLOCK_N, tl.minimum(hi * BLOCK_N, D), WORLD, PUSH_BLOCK)
    return run


@triton.jit
def moe_task(op, layer, mix, a0, a1, a2, h_ptr, mnorm_ptr, wr_ptr, weg_ptr, wed_ptr, wgu_ptr,
             wd_ptr, act_ptr, z_ptr, ids_ptr, wt_ptr, s_ptr, mact_ptr, mc_ptr, eps, wargs,
             D: tl.constexpr, FFN: tl.constexpr, NE: tl.constexpr, EF: tl.constexpr,
             TOPK: tl.constexpr, RENORM: tl.constexpr, SHARED: tl.constexpr, ACT: tl.constexpr,
             PRE_NORM: tl.constexpr, RR: tl.constexpr, KD: tl.constexpr, RE: tl.constexpr,
             KG: tl.constexpr, RM: tl.constexpr, KM: tl.constexpr, BE: tl.constexpr,
             BJ: tl.constexpr, BKS: tl.constexpr, STREAM: tl.constexpr, F32: tl.constexpr,
             PW: tl.constexpr, PTX: tl.constexpr, BJD: tl.constexpr, VS: tl.constexpr,
             SIGMOID: tl.constexpr, CHOICE: tl.constexpr, N_GROUP: tl.constexpr,
             TOPK_GROUP: tl.constexpr, RSCALE: tl.constexpr):
    """A mixture's decode task (graph.moe_tasks) of layer `layer` (its norm), the expert stacks'
    layer `mix` (ModelSpec.expert_index): the router wr [L', NE + SHARED, D], experts' gate|up
    weg [L', NE, 2 EF, D] and down wed [L', NE, D, EF], the shared expert's wgu / wd, the
    choice bias mc [L', NE] (CHOICE).
    ROUTER: row tiles [a1, a2) of RR rows of z = norm(h) @ wr^T, fp32 (gemv_body; its first
    piece before the wait; an fp32 router -- ModelSpec.router_fp32 -- by plain loads: the PTX
    pieces read bf16 rows). EXPERT_GU: the routing of z (moe.route_body, with the router's
    SIGMOID / CHOICE / N_GROUP / TOPK_GROUP / RSCALE: ids / weights / the shared scale, which
    every such task computes and stores alike), then slot a0's rows [a1,
    a2) of act(g) * u through expert ids[a0] (a0 = TOPK: the shared expert, into act) -- its
    weights' address known only after the routing. EXPERT_DOWN: d_model's row tiles [a1, a2) of
    h += the experts' weighted down rows (moe.experts_down_body, its tile at a time; VS > 0: the
    shared expert's in the same chunks, BJD experts a chunk). PW: the layer matrices' pieces
    (the experts' too: FP8 rows where the model's are), PTX the router's (float)."""
    NR: tl.constexpr = NE + SHARED
    norm = mnorm_ptr + layer * D
    if op == OP_ROUTER:
        RP: tl.constexpr = PTX if wr_ptr.dtype.element_ty == tl.bfloat16 else 0
        w = wr_ptr + mix * NR * D
        w0, _ = stream_start(w, NR, D, a1, a2, RR, KD, False, STREAM, RP)
        run = ready(*wargs)
        if run == 1:
            gemv_body(h_ptr, w, norm, w, h_ptr, z_ptr, 1, NR, D, D, D, NR, eps, a1, a2, 0, w0,
                      w0, PRE_NORM, False, 0, False, 1, RR, KD, STREAM, F32, RP)
    elif op == OP_EGU:
        run = ready(*wargs)
        if run == 1:
            ids = route_body(z_ptr, ids_ptr, wt_ptr, s_ptr, 0, NE, NR, TOPK, RENORM, SHARED, BE,
                             BJ, mc_ptr + mix * NE, SIGMOID, CHOICE, N_GROUP, TOPK_GROUP, RSCALE)
            if a0 < TOPK:  # slot a0's expert from the registers, not the ids just stored
                e = tl.sum(tl.where(tl.arange(0, BJ) == a0, ids, 0), axis=0).to(tl.int64)
                w = weg_ptr + (mix * NE + e) * (2 * EF) * row_elems(weg_ptr, D)
                w0, w20 = stream_start(w, EF, D, a1, a2, RE, KG, ACT > 0, STREAM, PW)
                gemv_body(h_ptr, w, norm, w, h_ptr, mact_ptr + a0 * EF, 1, EF, D, D, D, EF, eps,
                          a1, a2, 0, w0, w20, PRE_NORM, False, ACT, False, 1, RE, KG, STREAM,
                          F32, PW)
            if SHARED:
                if a0 == TOPK:
                    w = wgu_ptr + mix * (2 * FFN) * row_elems(wgu_ptr, D)
                    w0, w20 = stream_start(w, FFN, D, a1, a2, RE, KG, ACT > 0, STREAM, PW)
                    gemv_body(h_ptr, w, norm, w, h_ptr, act_ptr, 1, FFN, D, D, D, FFN, eps, a1,
                              a2, 0, w0, w20, PRE_NORM, False, ACT, False, 1, RE, KG, STREAM,
                              F32, PW)
    else:
        run = ready(*wargs)
        if run == 1:
            stride_we = D * row_elems(wed_ptr, EF)
            for tile in range(a1, a2):
                experts_down_body(h_ptr, mact_ptr, wed_ptr + mix * NE * stride_we, ids_ptr,
                                  wt_ptr, act_ptr, wd_ptr + mix * D * row_elems(wd_ptr, FFN),
                                  s_ptr, h_ptr, D, EF, FFN, D, EF, FFN, stride_we, 0, 0, tile,
                                  TOPK, SHARED, False, RM, KM, BKS, BJD, F32, VS=VS)
    return run


# run-time values that change between launches must not trigger Triton's integer specialisation
# (== 1, % 16): a recompile of this kernel costs seconds
@triton.jit(do_not_specialize=["tok_ctr", "max_spin", "n_steps", "n_eos", "max_step", "rank",
                               "x_ctr", "x_spin", "x_red", "x_lmv", "x_lmi", "v0", "VFULL",
                               "tkt_base", "qtkt_base"])
def megakernel(queue_ptr, qlen_ptr, LMAX, ctr_ptr, tok_ctr, status_ptr, max_spin, n_steps,
               trace_ptr, clock_ptr,
               done_ptr, eos_ptr, n_eos, max_step,
               ids_ptr, pos_ptr, step_ptr, seed_ptr, temp_ptr, hist_ptr,
               h_ptr, q_ptr, attn_ptr, act_ptr, opart_ptr, lse_ptr, logits_ptr, pval_ptr, pidx_ptr,
               qkraw_ptr, kpart_ptr,
               kc_ptr, vc_ptr, cos_ptr, sin_ptr, win_ptr, rope_ptr,
               emb_ptr, lm_ptr, fnorm_ptr, anorm_ptr, mnorm_ptr, apost_ptr, mpost_ptr,
               wqkv_ptr, bqkv_ptr, qkn_ptr,
               wo_ptr, bo_ptr, wgu_ptr, bgu_ptr, wd_ptr, bd_ptr, blm_ptr, wpe_ptr,
               T, TM, KVH, V, S, eps, scale, n_splits, n_vparts, emb_scale, attn_cap, logit_cap,
               qs_beta, qs_orig, alibi_ptr,
               xtab_ptr, rank, x_ctr, x_spin, x_red, x_lmv, x_lmi, v0, VFULL, tkt_base, qtkt_base,
               wr_ptr, weg_ptr, wed_ptr, z_ptr, mids_ptr, mw_ptr, ms_ptr, mact_ptr, mc_ptr,
               wdgu_ptr, wdd_ptr,
               D: tl.constexpr, FFN: tl.constexpr, H: tl.constexpr, HD: tl.constexpr,
               BIAS_QKV: tl.constexpr, QK_NORM: tl.constexpr, QK_DEFER: tl.constexpr,
               QKN_SLOTS: tl.constexpr, BLOCK_HALF: tl.constexpr, BIAS_O: tl.constexpr,
               BIAS_GU: tl.constexpr, GUB: tl.constexpr,
               BIAS_DOWN: tl.constexpr, SAMPLE: tl.constexpr, BLOCK_T: tl.constexpr,
               STREAM: tl.constexpr, RQ: tl.constexpr, RD: tl.constexpr, RF: tl.constexpr,
               RG: tl.constexpr, KQ: tl.constexpr, KD: tl.constexpr, KF: tl.constexpr,
               KG: tl.constexpr,
               BLOCK_H: tl.constexpr, QKV_CHUNKS: tl.constexpr, QKV_BK: tl.constexpr,
               GROUP: tl.constexpr,
               BLOCK_G: tl.constexpr, BLOCK_TOK: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_GM: tl.constexpr,
               BLOCK_SP: tl.constexpr, EMB_BLOCK: tl.constexpr, MERGE_BLOCK: tl.constexpr, F32: tl.constexpr,
               WORLD: tl.constexpr, RED_BLOCK: tl.constexpr, RED_ROWS: tl.constexpr,
               USE_ASM: tl.constexpr, TRACE: tl.constexpr, PTX: tl.constexpr,
               MERGE_IN_ATTN: tl.constexpr, NORM_IN_QKV: tl.constexpr, SQ: tl.constexpr,
               SO: tl.constexpr, SG: tl.constexpr, SF: tl.constexpr, PF_KB: tl.constexpr = 0,
               POLL1: tl.constexpr = 0, KV_PF: tl.constexpr = False, KSPLIT: tl.constexpr = 1,
               ATTN_OUTLINE: tl.constexpr = False, ROPE_TABLES: tl.constexpr = False,
               QKN_ORDER: tl.constexpr = 1, ACT: tl.constexpr = 1,
               POST_NORM: tl.constexpr = False, SOFTCAP: tl.constexpr = False,
               LOGIT_CAP: tl.constexpr = False, PRE_NORM: tl.constexpr = True,
               QSCALE: tl.constexpr = False, BIAS_LM: tl.constexpr = False,
               POS_EMB: tl.constexpr = False, ALIBI: tl.constexpr = 0,
               FP8W: tl.constexpr = False, MOE: tl.constexpr = False, NE: tl.constexpr = 1,
               EF: tl.constexpr = 1, TOPK: tl.constexpr = 1, RENORM: tl.constexpr = False,
               SHARED: tl.constexpr = False, RE: tl.constexpr = 1, RM: tl.constexpr = 1,
               KM: tl.constexpr = 1, BE: tl.constexpr = 1, BJ: tl.constexpr = 1,
               BKS: tl.constexpr = 1, BJD: tl.constexpr = 1, VS: tl.constexpr = 0,
               RR: tl.constexpr = 1, DFFN: tl.constexpr = 0, SIGMOID: tl.constexpr = False,
               CHOICE: tl.constexpr = False, N_GROUP: tl.constexpr = 1,
               TOPK_GROUP: tl.constexpr = 1, RSCALE: tl.constexpr = 1.0):
    """Model sizes D, FFN, H, HD are constexpr (one compile per model): a decode tile over whole
    rows then folds its chunk loop away and keeps the activation row in registers, which spares
    registers (bench/compile_check.py: 1B shape 255 registers with 48 B of spills when they were
    run-time values, 4 B as constexprs).
    STREAM: decode tiles (each task one stream of weight pieces: gemv_body); RQ/RD/RF rows
    and KQ/KD/KF block K of the GEMV tiles whose rows have q_dim / d_model / ffn_dim elements,
    RG/KG those of gate and up (half a tile each: config.StreamConfig.tile).
    BIAS_QKV / BIAS_O / BIAS_GU / BIAS_DOWN: the projections' biases (PackedWeights.b_qkv ...);
    GUB: b_gu's FFN-long rows a layer (gemv.act_operand_rows: gate's and up's, up's alone, or
    xIELU's two parameters, which ride in that operand with BIAS_GU on and BIAS_DOWN off).
    QK_DEFER (q/k norm, decode): QKV tiles store raw q / k rows to qkraw_ptr and QKNORM tasks
    normalize and rotate them (qkv_rope.qk_norm_rope_body; QK_NORM is then 0). QKN_ORDER: the
    q / k norm before RoPE or after it (qkv_rope.qk_norm_mode; QK_NORM, when not 0, equals it).
    Tensor parallelism (module docstring): xtab_ptr, rank, the word offsets x_ctr (this
    schedule's remote counters) / x_red / x_lmv / x_lmi of the symmetric buffer, x_spin (the
    bound of a remote wait's polls), v0 / VFULL (this rank's first vocabulary id, the whole
    vocabulary); WORLD ranks, RED_BLOCK columns per REDUCE block (opcodes.COST.reduce_block)
    of RED_ROWS token rows at a time (the GEMV tiles' BLOCK_T: a step of up to 16 rows in one
    [16, 256] tile, 32 values a thread per part at 4 warps; compile_check --rows-tile, sm_90a,
    session 39: 32 / 32 B of spills on the 1B / 8B with 4 / 2 K parts, against 64 / 44 B
    summing row by row and 44 / 48 B by 8-row tiles).
    PTX (STREAM, bf16 weights): weight pieces as int32 words, by inline PTX (1) or plain loads
    (2) (_common.weight_chunk). FP8 layer matrices (wqkv / wo / wgu / wd float8_e4m3fn rows of
    _common.row_elems, PackedWeights.fp8) stream (codes, scales) pieces instead (FP8_PIECES,
    known from their pointers' type; FP8W, Tiling.fp8_words: FP8_WORDS, the codes as int32
    words dotted with f16 activations); the lm_head and embeddings stay bf16 and keep PTX. In the
    stream the activations' chunk sits 8 bf16 a thread where the codes sit 16: K is a constexpr
    here, so rows of one chunk convert it once per task (Triton hoists the conversion out of the
    stream loop; standalone, where K is not, it ran inside: config.gemv_stream).
    SQ / SO / SG / SF (STREAM, config.StreamConfig.stages): > 1, the QKV / o_proj / gate|up /
    down tasks stream through shared memory in that many stages, their wait inside the stream
    (gemv.gemv_body, qkv_rope.qkv_rope_body).
    MERGE_IN_ATTN (graph.py, Tiling.merge_in_attn): each ATTN task adds 1 (acq_rel) to its
    group's ticket counter counters[tkt_base + layer * KVH + group] after storing its partials;
    the one that completes a step's tickets (the group's ATTN tasks, Tiling.attn_group_tasks)
    merges the group (no MERGE tasks), BLOCK_GM q heads a round.
    BLOCK_GM (Tiling.merge_heads): q heads per MERGE task; BLOCK_SP: splits per merge round
    (config.merge_splits).
    NORM_IN_QKV (QK_DEFER, Tiling.norm_in_qkv): likewise each QKV task adds its tile count to
    counters[qtkt_base + layer * KVH + group]; the one that completes the group's tiles
    (Tiling.qkv_group_tiles) normalizes and rotates it (no QKNORM tasks).
    QKV_ATTN tasks (opcode; the short-context decode schedule, Tiling.attn_in_qkv) take the same
    ticket whatever NORM_IN_QKV says; the completer norms the group if QK_DEFER, then runs its
    attention over every key as one split, written straight to the attention output
    (attention_body DIRECT): no ATTN or MERGE tasks. An opcode, not a constexpr: both decode
    schedules run one compiled kernel. QKN_ATTN tasks (opcode; that schedule where the q / k
    norms span all heads, QKN_ORDER QK_NORM_FULL: no tile can complete a group) wait for the
    layer's QKV tasks, then norm their group and run its attention the same way.
    PF_KB (STREAM, config.StreamConfig.l2_prefetch_kb): > 0, an o_proj task followed by a
    gate|up task in its queue asks L2 for that task's first PF_KB KB of gate rows and of up rows
    (one bulk prefetch each, ptx_inline.prefetch_l2_bulk) before its dependency wait -- the
    attention chain's, when HBM idles (residual_task).
    KV_PF (config.StreamConfig.kv_prefetch): the keys and values a KV group's attention reads
    asked into L2 before a wait (task_kv_prefetch). ATTN_OUTLINE (StreamConfig.attn_outline):
    the attention body called out of line (attend).
    KSPLIT > 1 (a step of several rows on one rank, graph.Tiling.ksplit): o_proj / down_proj
    tasks (arg0 = token block * KSPLIT + K part) store their K part's fp32 partial sums to
    kpart_ptr [2 (o, down), KSPLIT, TM, D]; REDUCE tasks (arg0: 0 o, 1 down) add the parts in
    order, the bias and the residual (residual_task).
    POST_NORM (ModelSpec.post_norms): a norm after each attention / MLP block (apost_ptr /
    mpost_ptr [L, D]), before the residual add. Each block's output is normalized whole, so its
    sums always go through REDUCE tasks (graph.py): on one rank as a K part of one
    (kpart_ptr), with tensor parallelism the ranks' partials; REDUCE adds norm(sum) to h
    (all_reduce.residual_sum_body NORM). PRE_NORM False (ModelSpec.pre_norms: EXAONE 4): no
    norm before the blocks -- the QKV and gate|up tasks read the residual as it is.
    ACT: the gate|up tasks' activation (gemv.glu_code: its gemv.ACT_CODES code; negative
    for an MLP without a gate, ModelSpec.gated: wgu_ptr [L, FFN, D] up rows alone); emb_scale: what
    an EMBED task multiplies a row by (PackedWeights.embed_scale).
    SOFTCAP / LOGIT_CAP (Gemma 2): the attention scores soft-capped at attn_cap, the logits at
    logit_cap (cap tanh(x / cap), _common.soft_cap; ModelSpec.attn_softcap / logit_softcap).
    QSCALE (Ministral 3): each query's scores times 1 + qs_beta ln(1 + pos // qs_orig)
    (ModelSpec.q_pos_scale; attention.py). ALIBI (BLOOM 1, Falcon-RW 2: ModelSpec.alibi): head
    h's scores plus alibi_ptr[h] (this rank's heads' slopes, PackedWeights.alibi) times the key's
    position (attention.py).
    MOE (a mixture of experts, decode on one rank: graph.moe_tasks): ROUTER / EXPERT_GU /
    EXPERT_DOWN tasks (moe_task) on the router wr_ptr, the experts weg_ptr / wed_ptr and the
    shared expert's wgu_ptr / wd_ptr (SHARED), through the router logits z_ptr, the routing
    mids_ptr / mw_ptr / ms_ptr and the routed slots' activations mact_ptr; NE experts of EF
    rows, TOPK routed (RENORM: renormalized), RE rows an EXPERT_GU tile, RM x KM an
    EXPERT_DOWN tile (moe.down_tile), BE / BJ / BKS the routing's and down body's blocks, BJD
    / VS the down body's experts a chunk and the shared expert's share of them
    (graph.Tiling.moe_vs), RR the ROUTER tile's rows (graph.Tiling.rows_r); the router's
    SIGMOID / CHOICE (its choice bias mc_ptr) / N_GROUP / TOPK_GROUP / RSCALE (moe.route_body).
    A mixture's task words carry its layer's place in its MLP stack above opcodes.LAYER_BITS
    (schedule.encode): the expert stacks', or -- its dense layers (ModelSpec.dense_layers) --
    that of the GATE_UP / DOWN tasks' dense stacks wdgu_ptr / wdd_ptr, DFFN rows wide."""
    pid = tl.program_id(0)
    qlen = tl.load(qlen_ptr + pid)
    QKVN = (H + 2 * KVH) * HD
    QD = H * HD
    GU: tl.constexpr = 2 if ACT > 0 else 1  # w_gu's matrices: gate and up, or up alone
    # the layer matrices' pieces: FP8 rows (quant.fp8_rows: PackedWeights.fp8) stream (codes,
    # scales) pairs -- FP8W: the codes as words, dotted in f16 -- whatever PTX asks of the bf16
    # lm_head; a layer's rows are row_elems apart
    PW: tl.constexpr = (FP8_WORDS if FP8W else FP8_PIECES) \
        if wo_ptr.dtype.element_ty == tl.float8e4nv else PTX
    tl.static_assert((PW < FP8_PIECES) | (PF_KB == 0), "the L2 prefetch reads bf16 rows")
    e0 = tl.load(ctr_ptr + tok_ctr)  # steps completed before this launch (previous launch done)
    run = 1
    s = 0
    while (s < n_steps) & (run == 1):
        if s > 0:  # the previous step's token must be chosen before we look at the done flag
            run = wait_counter(ctr_ptr, e0 + s, status_ptr, max_spin, pid, pid * 0 - 1, tok_ctr,
                               s, xtab_ptr, rank, x_ctr, x_spin, WORLD, USE_ASM, POLL1)
        if run == 1:
            run = (tl.load(done_ptr, volatile=True) == 0).to(tl.int32)
        # the step's first position, read once: CHOOSE advances it after every other task of the
        # step (all are its ancestors), and the tasks' bodies then need no dependent L2 round trip
        # before their loads (attention's key range, RoPE's cos / sin, the merge's active splits)
        pos = tl.load(pos_ptr)
        epoch = e0 + s + 1
        i = 0
        while (i < qlen) & (run == 1):
            w = queue_ptr + (pid * LMAX + i) * NW
            op = tl.load(w)
            layer = tl.load(w + 1).to(tl.int64)
            mix = layer  # the layer's place in its MLP stack (MOE: above LAYER_BITS)
            if MOE:
                mix = layer >> LAYER_BITS
                layer = layer & LAYER_MASK
            a0 = tl.load(w + 2)
            a1 = tl.load(w + 3)
            a2 = tl.load(w + 4)
            wc = tl.load(w + 5)
            target = (epoch + tl.load(w + 7)) * tl.load(w + 6)
            sig = tl.load(w + 8)
            tr = trace_ptr + ((pid * n_steps + s) * LMAX + i) * TW
            if TRACE:
                tl.store(tr, globaltimer_ns(op, clock_ptr, USE_ASM))
                tl.store(tr + 3, sm_id(op, pid, USE_ASM).to(tl.int64))  # opcodes.T_SM
            # this task's dependency wait (ready's arguments)
            wargs = (ctr_ptr, target, status_ptr, max_spin, pid, i, wc, s, tr, clock_ptr, op,
                     xtab_ptr, rank, x_ctr, x_spin, WORLD, USE_ASM, TRACE, POLL1)
            # weight tasks: first weight piece, then the wait; the others: the wait
            if (op == OP_QKV) | (op == OP_QKVA):
                w_qkv = wqkv_ptr + layer * QKVN * row_elems(wqkv_ptr, D)
                cos_l, sin_l = layer_rope(cos_ptr, sin_ptr, rope_ptr, layer, HD, ROPE_TABLES)
                qargs = (h_ptr, w_qkv, anorm_ptr + layer * D, bqkv_ptr + layer * QKVN,
                         qkn_ptr + layer * (H + KVH) * HD, cos_l, sin_l, pos, q_ptr,
                         kc_ptr + layer * KVH * S * HD, vc_ptr + layer * KVH * S * HD,
                         T, D, D, S, eps, H, KVH, HD, a0, a1, a2)
                # KV_PF: the group's K / V asked into L2 (its window read for the keys' range)
                kvpf = (op, a0, a1, a2, layer, kc_ptr, vc_ptr, win_ptr + layer, pos, T, S, KVH,
                        HD, n_splits, BLOCK_S, USE_ASM, KV_PF)
                if SQ > 1:
                    task_kv_prefetch(*kvpf)
                    run = qkv_rope_body(*qargs, 0, 0, GROUP, QKV_CHUNKS, qkraw_ptr, BIAS_QKV,
                                        QK_NORM, BLOCK_T, BLOCK_H, QKV_BK, STREAM, F32, QK_DEFER,
                                        PW, SQ, ready, wargs, D, PRE_NORM)
                else:
                    lo0, hi0 = qkv_start(w_qkv, D, H, KVH, HD, a0, a1, a2, GROUP, QKV_CHUNKS,
                                         BLOCK_H, QKV_BK, STREAM, PW)
                    task_kv_prefetch(*kvpf)  # after the first piece: its window load waits
                    run = ready(*wargs)
                    if run == 1:
                        qkv_rope_body(*qargs, lo0, hi0, GROUP, QKV_CHUNKS, qkraw_ptr, BIAS_QKV,
                                      QK_NORM, BLOCK_T, BLOCK_H, QKV_BK, STREAM, F32, QK_DEFER,
                                      PW, NORM=PRE_NORM)
                if run == 1:
                    # the task that completes the group's tiles norms it (NORM_IN_QKV, or a
                    # deferred q/k norm in QKV_ATTN) and, QKV_ATTN, runs its attention (norms
                    # over all heads: never -- QKN_ATTN tasks -- so not compiled)
                    if ((op == OP_QKVA) & (QKN_ORDER != QK_NORM_FULL)) | NORM_IN_QKV:
                        tl.debug_barrier()  # this task's rows stored before its ticket
                        if TRACE:
                            tl.store(tr + 4, globaltimer_ns(op, clock_ptr, USE_ASM))  # T_TILES
                        # the layer's window, requested under the ticket's round trip: the
                        # attention's key range (its K / V addresses) waits on it
                        win = tl.load(win_ptr + layer)
                        tkt = tl.atomic_add(ctr_ptr + qtkt_base + layer * KVH + a0, a2 - a1,
                                            sem="acq_rel", scope="gpu")
                        # the step's last ticket acquired every other tile's release
                        if (tkt + a2 - a1) % ((GROUP + 2) * QKV_CHUNKS * tl.cdiv(T, BLOCK_T)) \
                                == 0:
                            if TRACE:
                                tl.store(tr + 5, globaltimer_ns(op, clock_ptr, USE_ASM))
                            if QK_DEFER:
                                qk_norm_group(layer, a0, qkraw_ptr, qkn_ptr, cos_l, sin_l,
                                              pos, q_ptr, kc_ptr, T, S, eps, H, KVH, HD, GROUP,
                                              QKN_SLOTS, BLOCK_HALF, QKN_ORDER)
                            if op == OP_QKVA:
                                tl.debug_barrier()  # q / k rows normed by other threads
                                if TRACE:
                                    tl.store(tr + 6, globaltimer_ns(op, clock_ptr, USE_ASM))
                                for tb in range(0, tl.cdiv(T, BLOCK_TOK)):
                                    attend(q_ptr, kc_ptr + layer * KVH * S * HD,
                                           vc_ptr + layer * KVH * S * HD, attn_ptr, lse_ptr,
                                           pos, T, TM, S, H, HD, win, scale, 1, a0, 0, tb,
                                           GROUP, BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S,
                                           BLOCK_D, F32, True, ATTN_OUTLINE, attn_cap,
                                           SOFTCAP, qs_beta, qs_orig, QSCALE, alibi_ptr,
                                           ALIBI)
                                if TRACE:
                                    tl.store(tr + 7, globaltimer_ns(op, clock_ptr, USE_ASM))
            elif op == OP_O:
                run = residual_task(attn_ptr, wo_ptr + layer * D * row_elems(wo_ptr, QD),
                                    bo_ptr + layer * D, h_ptr,
                                    T, D, QD, eps, a1, a2, a0, ctr_ptr, target, status_ptr,
                                    max_spin, pid, i, wc, s, tr, clock_ptr, op, xtab_ptr, rank,
                                    x_ctr, x_spin, x_red + rank * TM * D, w + NW, i + 1 < qlen,
                                    wgu_ptr, FFN, BIAS_O, BLOCK_T, RQ, KQ, STREAM, F32, WORLD,
                                    RED_BLOCK, USE_ASM, TRACE, PW, SO, RG, PF_KB, POLL1,
                                    kpart_ptr, TM * D, KSPLIT, POST_NORM)
            elif op == OP_GU:
                # (a mixture's GATE_UP / DOWN tasks: its dense layers', on their own stacks)
                FW: tl.constexpr = DFFN if MOE else FFN
                wg = wdgu_ptr if MOE else wgu_ptr
                w_gu = wg + mix * GU * FW * row_elems(wg, D)
                if SG > 1:
                    run = gemv_body(h_ptr, w_gu, mnorm_ptr + layer * D, bgu_ptr + layer * GUB * FW,
                                    h_ptr, act_ptr, T, FW, D, D, D, FW, eps, a1, a2, a0, 0, 0,
                                    PRE_NORM, BIAS_GU, ACT, False, BLOCK_T, RG, KG, STREAM, F32,
                                    PW, SG, ready, wargs, D)
                else:
                    # register stream (the 1B class): the first piece before the wait, as the
                    # other ops. Session 11 (per-warp polls) measured it 2% faster after the
                    # wait; with one poller per program (StreamConfig.one_poller) before is
                    # faster: 1B 1249.3 / 1252.7 vs 1172.3 / 1153.2 / 1156.7 / 1175.0 tok/s
                    # (H200, 2026-12-02, c1a1b1c's tree, sweep_mega 256 tokens; RESULTS.md)
                    w0, w20 = stream_start(w_gu, FW, D, a1, a2, RG, KG, ACT > 0, STREAM, PW)
                    run = ready(*wargs)
                    if run == 1:
                        gemv_body(h_ptr, w_gu, mnorm_ptr + layer * D, bgu_ptr + layer * GUB * FW,
                                  h_ptr, act_ptr, T, FW, D, D, D, FW, eps, a1, a2, a0, w0, w20,
                                  PRE_NORM, BIAS_GU, ACT, False, BLOCK_T, RG, KG, STREAM, F32,
                                  PW)
            elif op == OP_DOWN:
                FW: tl.constexpr = DFFN if MOE else FFN
                wdn = wdd_ptr if MOE else wd_ptr
                run = residual_task(act_ptr, wdn + mix * D * row_elems(wdn, FW),
                                    bd_ptr + layer * D, h_ptr,
                                    T, D, FW, eps, a1, a2, a0, ctr_ptr, target, status_ptr,
                                    max_spin, pid, i, wc, s, tr, clock_ptr, op, xtab_ptr, rank,
                                    x_ctr, x_spin, x_red + (WORLD + rank) * TM * D, w, False,
                                    wgu_ptr, FFN, BIAS_DOWN, BLOCK_T, RF, KF, STREAM, F32, WORLD,
                                    RED_BLOCK, USE_ASM, TRACE, PW, SF, RG, 0, POLL1,
                                    kpart_ptr + KSPLIT * TM * D, TM * D, KSPLIT, POST_NORM)
            # (& MOE: a model without experts compiles no such branch -- its compare alone had
            # changed a dense model's code: compile_check Qwen3-8B 48 / 56 -> 60 / 80 B of
            # spills from 88551c7 on, back with this; its H200 rate fell ~7% meanwhile)
            elif ((op == OP_ROUTER) | (op == OP_EGU) | (op == OP_EDOWN)) & MOE:
                if MOE:  # (the body compiled for mixtures only)
                    run = moe_task(op, layer, mix, a0, a1, a2, h_ptr, mnorm_ptr, wr_ptr,
                                   weg_ptr, wed_ptr, wgu_ptr, wd_ptr, act_ptr, z_ptr, mids_ptr,
                                   mw_ptr, ms_ptr, mact_ptr, mc_ptr, eps, wargs, D, FFN, NE, EF,
                                   TOPK, RENORM, SHARED, ACT, PRE_NORM, RR, KD, RE, KG, RM, KM,
                                   BE, BJ, BKS, STREAM, F32, PW, PTX, BJD, VS, SIGMOID, CHOICE,
                                   N_GROUP, TOPK_GROUP, RSCALE)
            elif op == OP_LM:
                w0, _ = stream_start(lm_ptr, V, D, a1, a2, RD, KD, False, STREAM, PTX)
                run = ready(*wargs)
                if run == 1:
                    voff = 0  # one rank: constants, compiled as before tensor parallelism
                    vkey = V
                    if WORLD > 1:
                        voff = v0
                        vkey = VFULL
                    lm_head_body(h_ptr, lm_ptr, fnorm_ptr, logits_ptr, pval_ptr, pidx_ptr,
                                 seed_ptr, temp_ptr, T, V, D, D, V, eps, n_vparts, a1, a2,
                                 a0 % n_vparts, a0 // n_vparts, w0, voff, vkey, True, True, SAMPLE,
                                 BLOCK_T, RD, KD, STREAM, F32, PTX, logit_cap, LOGIT_CAP,
                                 blm_ptr, BIAS_LM)
                    if WORLD > 1:  # this task's partial choices to every rank, rank-major
                        tl.debug_barrier()
                        part = a0 % n_vparts
                        t0 = (a0 // n_vparts) * BLOCK_T
                        for t in range(t0, tl.minimum(T, t0 + BLOCK_T)):
                            pv = tl.load(pval_ptr + t * n_vparts + part)
                            pi = tl.load(pidx_ptr + t * n_vparts + part)
                            at = t * WORLD * n_vparts + rank * n_vparts + part
                            for p in range(0, WORLD):
                                tl.store(peer(xtab_ptr, p, x_lmv, tl.float32) + at, pv)
                                tl.store(peer(xtab_ptr, p, x_lmi, tl.int32) + at, pi)
            else:
                win = tl.load(win_ptr + layer)  # attention's window: requested before the wait
                task_kv_prefetch(op, a0, a1, a2, layer, kc_ptr, vc_ptr, win_ptr + layer, pos, T,
                                 S, KVH, HD, n_splits, BLOCK_S, USE_ASM, KV_PF)
                run = ready(*wargs)
                if run == 1:
                    if op == OP_EMBED:
                        for t in range(a0, a1):
                            for c in range(0, tl.cdiv(D, EMB_BLOCK)):
                                embedding_body(ids_ptr, emb_ptr, h_ptr, D, D, t, c, emb_scale,
                                               EMB_BLOCK, wpe_ptr, pos, POS_EMB)
                    elif op == OP_ATTN:
                        attend(q_ptr, kc_ptr + layer * KVH * S * HD,
                               vc_ptr + layer * KVH * S * HD, opart_ptr, lse_ptr, pos,
                               T, TM, S, H, HD, win, scale, n_splits,
                               a0, a1, a2, GROUP, BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S,
                               BLOCK_D, F32, False, ATTN_OUTLINE, attn_cap, SOFTCAP,
                               qs_beta, qs_orig, QSCALE, alibi_ptr, ALIBI)
                        if MERGE_IN_ATTN:  # the group's last split to finish merges it
                            tl.debug_barrier()  # this split's partials stored before its ticket
                            tkt = tl.atomic_add(ctr_ptr + tkt_base + layer * KVH + a0, 1,
                                                sem="acq_rel", scope="gpu")
                            # acquired every other split's release at the step's last ticket
                            if (tkt + 1) % (n_splits * tl.cdiv(T, BLOCK_TOK)) == 0:
                                merge_group(opart_ptr, lse_ptr, attn_ptr, pos, T, TM, H, HD,
                                            win, n_splits, a0, 0, GROUP, GROUP, BLOCK_GM,
                                            BLOCK_SP, BLOCK_D, BLOCK_S)
                    elif op == OP_QKNORM:
                        if QK_DEFER:
                            cos_l, sin_l = layer_rope(cos_ptr, sin_ptr, rope_ptr, layer, HD,
                                                      ROPE_TABLES)
                            qk_norm_group(layer, a0, qkraw_ptr, qkn_ptr, cos_l, sin_l,
                                          pos, q_ptr, kc_ptr, T, S, eps, H, KVH, HD, GROUP,
                                          QKN_SLOTS, BLOCK_HALF, QKN_ORDER)
                    elif op == OP_QKNA:
                        # (only a model with q / k norms over all heads has these tasks)
                        if QKN_ORDER == QK_NORM_FULL:  # (QK_DEFER: always, at decode)
                            cos_l, sin_l = layer_rope(cos_ptr, sin_ptr, rope_ptr, layer, HD,
                                                      ROPE_TABLES)
                            qk_norm_group(layer, a0, qkraw_ptr, qkn_ptr, cos_l, sin_l,
                                          pos, q_ptr, kc_ptr, T, S, eps, H, KVH, HD, GROUP,
                                          QKN_SLOTS, BLOCK_HALF, QKN_ORDER)
                            tl.debug_barrier()  # q / k rows normed by other threads
                            if TRACE:
                                tl.store(tr + 6, globaltimer_ns(op, clock_ptr, USE_ASM))
                            for tb in range(0, tl.cdiv(T, BLOCK_TOK)):
                                attend(q_ptr, kc_ptr + layer * KVH * S * HD,
                                       vc_ptr + layer * KVH * S * HD, attn_ptr, lse_ptr, pos,
                                       T, TM, S, H, HD, win, scale, 1, a0, 0, tb, GROUP,
                                       BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S, BLOCK_D, F32, True,
                                       ATTN_OUTLINE, attn_cap, SOFTCAP, qs_beta, qs_orig, QSCALE,
                                       alibi_ptr, ALIBI)
                            if TRACE:
                                tl.store(tr + 7, globaltimer_ns(op, clock_ptr, USE_ASM))
                    elif op == OP_MERGE:
                        merge_group(opart_ptr, lse_ptr, attn_ptr, pos, T, TM, H, HD, win,
                                    n_splits, a0, a1, a2, GROUP, BLOCK_GM, BLOCK_SP, BLOCK_D,
                                    BLOCK_S)
                    elif op == OP_CHOOSE:
                        if WORLD == 1:
                            tok, step = choose_merge_body(pval_ptr, pidx_ptr, a0, T - 1, ids_ptr,
                                                          hist_ptr, pos_ptr, step_ptr, seed_ptr,
                                                          T, MERGE_BLOCK)
                        else:  # every rank's partials, rank-major: ties go to the lowest id
                            tok, step = choose_merge_body(
                                peer(xtab_ptr, rank, x_lmv, tl.float32),
                                peer(xtab_ptr, rank, x_lmi, tl.int32), WORLD * a0, T - 1,
                                ids_ptr, hist_ptr, pos_ptr, step_ptr, seed_ptr, T, MERGE_BLOCK)
                        stop = (step + 1 >= max_step).to(tl.int32)
                        for k in range(0, n_eos):
                            stop = stop | (tl.load(eos_ptr + k) == tok).to(tl.int32)
                        tl.store(done_ptr, stop)
                    elif (KSPLIT > 1) | (POST_NORM & (WORLD == 1)):
                        # OP_REDUCE of K parts (or a post norm's one): o's (a0 0) or down's
                        parts = kpart_ptr + a0 * KSPLIT * TM * D
                        if a0 == 0:
                            residual_sum_body(h_ptr, parts, TM * D, T, D, a1, a2, KSPLIT,
                                              RED_BLOCK, bo_ptr + layer * D, BIAS_O, RED_ROWS,
                                              apost_ptr + layer * D, eps, POST_NORM)
                        else:
                            residual_sum_body(h_ptr, parts, TM * D, T, D, a1, a2, KSPLIT,
                                              RED_BLOCK, bd_ptr + layer * D, BIAS_DOWN, RED_ROWS,
                                              mpost_ptr + layer * D, eps, POST_NORM)
                    elif WORLD > 1:  # OP_REDUCE
                        post = apost_ptr + layer * D
                        if a0 == 1:
                            post = mpost_ptr + layer * D
                        residual_sum_body(h_ptr, peer(xtab_ptr, rank, x_red + a0 * WORLD * TM * D,
                                                      tl.float32), TM * D, T, D, a1, a2, WORLD,
                                          RED_BLOCK, ROWS=RED_ROWS, norm_ptr=post, eps=eps,
                                          NORM=POST_NORM)
            if run == 1:
                # publish: every thread's stores precede the barrier; the one release add after
                # it makes them visible at GPU scope to any program that acquires the counter --
                # a remote counter: at system scope, this rank's word of it on every rank
                tl.debug_barrier()
                remote = False
                if WORLD > 1:
                    remote = sig < 0
                if remote:
                    for p in range(0, WORLD):
                        tl.atomic_add(peer(xtab_ptr, p, x_ctr + (-1 - sig) * WORLD + rank,
                                           tl.int32), 1, sem="release", scope="sys")
                else:
                    tl.atomic_add(ctr_ptr + sig, 1, sem="release", scope="gpu")
                if TRACE:
                    tl.store(tr + 2, globaltimer_ns(op, clock_ptr, USE_ASM))
            i += 1
        s += 1
