"""A mixture of experts' routing and combination, around the expert GEMVs (gemv.gemv's experts).

    route:    p = softmax(z[:E]) (fp32; SIGMOID: sigmoid(z[:E]), DeepSeek-V3's) of a row's
              router logits z [E (+ 1)]; its top_k experts e_j by descending p -- or p + c, a
              choice bias c [E] (CHOICE: e_score_correction_bias), among the TOPK_GROUP best of
              N_GROUP runs of experts (each scored by its two best) -- (ties: the lower index),
              weights w_j = p[e_j] (renormalized to sum 1: RENORM) times SCALE; SHARED: the
              shared expert's scale sigmoid(z[E])
    down:     h[t] += sum_j w[t, j] (W_{e_j} act[t * top_k + j] (+ b_{e_j}: gpt-oss's biases))
              (+ s[t] (W_shared act_shared[t])),
              in fp32 (a fixed order: each expert's dot products, then their weighted sum),
              rounded once to h's dtype: the experts' down GEMVs, their weighted sum and the
              residual add in one kernel
Shapes: z [T, E (+ 1)] fp32; ids [T * top_k] int32, w [T * top_k] fp32, s [T] fp32; act [T *
top_k, F] (the experts' gate|up outputs, gemv's experts), W [E, d, F]; h [T, d]. Bytes (decode):
route E x 4; down top_k x d x F weight elements (+ d x F_shared), its share of the experts' 3 x
top_k x F x d a layer (Qwen3-30B-A3B: 8 x 3 x 768 x 2048 x 2 B = 75 MB, ~17 us at 4.46 TB/s).
HF's routers compute z in the weights' dtype and Qwen's round the weights w_j to it; these keep
z (the router GEMV's fp32 sums) and w in fp32.
Measured and removed (H100, 2026-12-06, session 60): the routing run by the router GEMV's last
program to finish a row (an acq_rel ticket, one launch fewer a layer; correct on the GPU) --
OLMoE-1B-7B ops + graph 792.9 / 793.0 tok/s against 800.7 / 801.7 with this separate kernel,
interleaved: the ticket and the last program's serial routing cost more than the launch.
"""
import torch
import triton
import triton.language as tl

from ._common import (FP8_GROUP, FP8_PIECES, INTERPRET, mxfp4_dot, mxfp4_load, pdl_start,
                      pdl_wait, row_partials, weight_chunk)
from ..spec import expert_groups_ok
from .config import TileConfig, row_elems, use_pdl
from .gemv import gemv_tile


@triton.jit
def _order_key(x):
    """int64 keys [BLOCK_E] that order as the fp32 x (negatives too: their bits flipped, the
    others' sign bit set -- the radix sort's map), in [0, 2^32): above -1."""
    u = x.to(tl.int32, bitcast=True)
    flip = tl.where(u < 0, -1, -2147483648)  # all bits / the sign bit
    return (u ^ flip).to(tl.int64) & 0xFFFFFFFF


@triton.jit
def _best_groups(c, offs, E, N_GROUP: tl.constexpr, TOPK_GROUP: tl.constexpr):
    """c [BLOCK_E] with the experts outside the TOPK_GROUP best of N_GROUP equal runs -inf:
    a run's score its two best values' sum (HF's DeepSeek-V3 router: top-2 per group, the
    groups' top-k; ties to the lower group)."""
    gid = offs // (E // N_GROUP)
    gs = tl.arange(0, N_GROUP)
    score = tl.zeros([N_GROUP], dtype=tl.float32)
    for g in tl.static_range(N_GROUP):
        x = tl.where(gid == g, c, -float("inf"))
        m1 = tl.max(x, axis=0)
        n1 = tl.sum((x == m1).to(tl.int32), axis=0)
        m2 = tl.where(n1 > 1, m1, tl.max(tl.where(x < m1, x, -float("inf")), axis=0))
        score = tl.where(gs == g, m1 + m2, score)
    keep = tl.zeros_like(c) != 0
    for _ in tl.static_range(TOPK_GROUP):
        best = tl.max(score, axis=0)
        g = tl.min(tl.where(score == best, gs, N_GROUP), axis=0)
        keep = keep | (gid == g)
        score = tl.where(gs == g, -float("inf"), score)
    return tl.where(keep, c, -float("inf"))


@triton.jit
def route_body(z_ptr, ids_ptr, w_ptr, s_ptr, t, E, stride_z, TOP_K: tl.constexpr,
               RENORM: tl.constexpr, SHARED: tl.constexpr, BLOCK_E: tl.constexpr,
               BLOCK_K: tl.constexpr, c_ptr=None, SIGMOID: tl.constexpr = False,
               CHOICE: tl.constexpr = False, N_GROUP: tl.constexpr = 1,
               TOPK_GROUP: tl.constexpr = 1, SCALE: tl.constexpr = 1.0):
    """Row t's routing (module docstring): its top_k (ids, weights) at [t * TOP_K, +TOP_K);
    -> the ids [BLOCK_K] int32 (rank order, past TOP_K zeros), in registers for a caller that
    streams one of them (the megakernel's EXPERT_GU: no round trip through the stored ids).
    Each pick is one max over int64 keys (p's bits -- p >= 0, so they order as p -- above
    BLOCK_E - 1 - index: ties go to the lower index), not a max and then an argmin: every
    EXPERT_GU task of the megakernel routes before its first weight request, so its reductions
    across warps (a shared-memory round trip and barriers each) sit on the critical path (top 8:
    8 such reductions fewer a task). Timed against the max + argmin loop (H100, 2026-12-07,
    sweep_mega olmoe-1b-7b, one process a run, bench/RESULTS.md session 70): 918.8 / 920.4 /
    943.5 vs 969.8 / 902.7 / 928.5 tok/s -- level within the spread; kept for the fewer
    reductions. CHOICE / N_GROUP > TOPK_GROUP (DeepSeek-V3's router; ops mode's route_kernel
    and the megakernel's EXPERT_GU tasks alike): the keys order p + c (_order_key), the
    weights p[e_j] gathered."""
    offs = tl.arange(0, BLOCK_E)
    z = tl.load(z_ptr + t * stride_z + offs, mask=offs < E, other=-float("inf")).to(tl.float32)
    if SIGMOID:
        p = 1.0 / (1.0 + tl.exp(-z))
    else:
        p = tl.exp(z - tl.max(z, axis=0))
        p = p / tl.sum(p, axis=0)
    PLAIN: tl.constexpr = not CHOICE and N_GROUP <= TOPK_GROUP  # the keys hold p itself
    if PLAIN:  # p >= 0: its bits order as p
        bits = p.to(tl.int32, bitcast=True).to(tl.int64)
    else:
        c = p
        if CHOICE:
            c += tl.load(c_ptr + offs, mask=offs < E, other=0.0).to(tl.float32)
        if N_GROUP > TOPK_GROUP:
            c = _best_groups(c, offs, E, N_GROUP, TOPK_GROUP)
        bits = _order_key(c)
    # choice values not yet picked as keys, above their index's bits (p's 31 bits shifted by
    # 32; _order_key's 32 by 16: BLOCK_E <= 2^16); -1: picked or padding
    SHIFT: tl.constexpr = 16 + 16 * PLAIN
    key = tl.where(offs < E, (bits << SHIFT) | (BLOCK_E - 1 - offs).to(tl.int64), -1)
    ks = tl.arange(0, BLOCK_K)
    ids = tl.zeros([BLOCK_K], dtype=tl.int32)
    w = tl.zeros([BLOCK_K], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        best = tl.max(key, axis=0)
        e = BLOCK_E - 1 - (best & ((1 << SHIFT) - 1)).to(tl.int32)
        ids = tl.where(ks == j, e, ids)
        if PLAIN:
            pe = (best >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        else:
            pe = tl.sum(tl.where(offs == e, p, 0.0), axis=0)
        w = tl.where(ks == j, pe, w)
        key = tl.where(offs == e, -1, key)
    if RENORM:
        w = w / tl.sum(w, axis=0)
    if SCALE != 1.0:
        w = w * SCALE
    tl.store(ids_ptr + t * TOP_K + ks, ids, mask=ks < TOP_K)
    tl.store(w_ptr + t * TOP_K + ks, w, mask=ks < TOP_K)
    if SHARED:
        zs = tl.load(z_ptr + t * stride_z + E).to(tl.float32)
        tl.store(s_ptr + t, 1.0 / (1.0 + tl.exp(-zs)))
    return ids


@triton.jit
def route_kernel(z_ptr, ids_ptr, w_ptr, s_ptr, c_ptr, E, stride_z, TOP_K: tl.constexpr,
                 RENORM: tl.constexpr, SHARED: tl.constexpr, BLOCK_E: tl.constexpr,
                 BLOCK_K: tl.constexpr, SIGMOID: tl.constexpr, CHOICE: tl.constexpr,
                 N_GROUP: tl.constexpr, TOPK_GROUP: tl.constexpr, SCALE: tl.constexpr):
    route_body(z_ptr, ids_ptr, w_ptr, s_ptr, tl.program_id(0), E, stride_z, TOP_K, RENORM,
               SHARED, BLOCK_E, BLOCK_K, c_ptr, SIGMOID, CHOICE, N_GROUP, TOPK_GROUP, SCALE)


def route(z: torch.Tensor, top_k: int, renorm: bool, shared: bool = False, out=None,
          sigmoid: bool = False, choice_bias=None, groups: tuple = (1, 1), scale: float = 1.0):
    """z [T, E (+ 1 with shared)] fp32 -> (ids [T * top_k] int32, w [T * top_k] fp32, s [T]
    fp32: the shared expert's scale, zeros without one); out: those three tensors to fill.
    sigmoid, choice_bias [E] fp32, groups (n_group, topk_group), scale: reference.route's."""
    T, E = z.shape[0], z.shape[1] - shared
    assert z.dtype == torch.float32 and z.stride(1) == 1 and 1 <= top_k <= E <= 1 << 16
    n_group, topk_group = groups
    if not expert_groups_ok(E, n_group, topk_group):
        raise ValueError(f"grouped routing needs a power-of-two group count with two experts "
                         f"or more a group, got the best {topk_group} of {n_group} groups of "
                         f"{E} experts")
    if choice_bias is not None:
        assert choice_bias.dtype == torch.float32 and choice_bias.shape == (E,)
    ids, w, s = out if out is not None else (
        torch.empty(T * top_k, device=z.device, dtype=torch.int32),
        torch.empty(T * top_k, device=z.device, dtype=torch.float32),
        torch.zeros(T, device=z.device, dtype=torch.float32))
    route_kernel[(T,)](z, ids, w, s, z if choice_bias is None else choice_bias, E, z.stride(0),
                       TOP_K=top_k, RENORM=renorm, SHARED=shared,
                       BLOCK_E=triton.next_power_of_2(E), BLOCK_K=triton.next_power_of_2(top_k),
                       SIGMOID=sigmoid, CHOICE=choice_bias is not None, N_GROUP=n_group,
                       TOPK_GROUP=topk_group, SCALE=float(scale), num_warps=1)
    return ids, w, s


@triton.jit
def experts_down_kernel(h_ptr, act_ptr, w_ptr, ids_ptr, wt_ptr, acts_ptr, ws_ptr, s_ptr, b_ptr, D,
                        F, FS, stride_h, stride_a, stride_as, stride_we, stride_be,
                        TOP_K: tl.constexpr, SHARED: tl.constexpr, BIAS: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        BLOCK_KS: tl.constexpr, BLOCK_J: tl.constexpr, F32: tl.constexpr,
                        PDL: tl.constexpr, ws4_ptr=None, W4: tl.constexpr = False,
                        VS: tl.constexpr = 0, ADD: tl.constexpr = True):
    """Grid (D tiles, T): experts_down_body of tile program_id(0), token program_id(1). The
    expert ids come from the kernels before it: read after pdl_wait."""
    pdl_start(PDL)
    pdl_wait(PDL)
    experts_down_body(h_ptr, act_ptr, w_ptr, ids_ptr, wt_ptr, acts_ptr, ws_ptr, s_ptr, b_ptr, D,
                      F, FS, stride_h, stride_a, stride_as, stride_we, stride_be,
                      tl.program_id(1).to(tl.int64), tl.program_id(0), TOP_K, SHARED, BIAS,
                      BLOCK_N, BLOCK_K, BLOCK_KS, BLOCK_J, F32, ws4_ptr, W4, VS, ADD)


@triton.jit
def experts_down_body(h_ptr, act_ptr, w_ptr, ids_ptr, wt_ptr, acts_ptr, ws_ptr, s_ptr, b_ptr, D,
                      F, FS, stride_h, stride_a, stride_as, stride_we, stride_be, t, tile,
                      TOP_K: tl.constexpr, SHARED: tl.constexpr, BIAS: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_KS: tl.constexpr, BLOCK_J: tl.constexpr, F32: tl.constexpr,
                      ws4_ptr=None, W4: tl.constexpr = False, VS: tl.constexpr = 0,
                      ADD: tl.constexpr = True):
    """Token t's rows [tile * BLOCK_N, +BLOCK_N) of h += sum_j w[t, j]
    (W_e[rows] . act[t * TOP_K + j] (+ b_e[rows]: BIAS, b [E, D] stride_be apart)) over its
    experts e = ids[t * TOP_K + j] (+ s[t] (Ws[rows] .
    acts[t]), the shared expert, by gemv_tile in BLOCK_KS chunks), fp32, h rounded once. Each
    K chunk loads the rows of all TOP_K experts at once ([BLOCK_J, BLOCK_N, BLOCK_K]): one
    round trip a chunk, not one an expert. The expert ids come from the kernels before it: read
    after pdl_wait. W4: W is MXFP4, its codes [E, D, F / 2] uint8 at w_ptr and E8M0 scales [E,
    D, F / 32] at ws4_ptr, both contiguous: the chunk's J x N rows as rows e D + n of the [E D,
    F / 2] stack (_common.mxfp4_load), each chunk's requested while the one before is decoded
    (as gemv's). W float8_e4m3fn (an FP8 checkpoint's experts kept 8-bit: quant.fp8_rows' rows,
    [E, D, row_elems(F)]), known from w_ptr's type: each chunk's codes and their rows' scales of
    the same [E D, row_elems(F)] stack (_common.weight_chunk's FP8_PIECES), each 128 columns'
    sum times its scale (row_partials). VS > 0 (SHARED, bf16 / fp16 / fp32 weights, VS F >=
    FS): the shared expert's columns as VS more experts of F columns, j = TOP_K + v its columns
    [v F, v F + F) weighted by s[t], in the same chunks as the routed ones (BLOCK_J >= TOP_K +
    VS) -- its rows streamed with theirs, not after them in a loop of their own. Used by
    experts_down_kernel and the megakernel's EXPERT_DOWN tasks. ADD False: h = the sum, h not
    read (a tensor-parallel rank's partial sums, which the all-reduce adds to the residual)."""
    js = tl.arange(0, BLOCK_J)
    mj = js < TOP_K
    e = tl.load(ids_ptr + t * TOP_K + js, mask=mj, other=0).to(tl.int64)
    wj = tl.load(wt_ptr + t * TOP_K + js, mask=mj, other=0.0)
    mv = (js >= TOP_K) & (js < TOP_K + VS)  # the shared expert's column blocks (VS > 0)
    vcol = (js - TOP_K).to(tl.int64) * F
    if VS > 0:
        wj = tl.where(mv, tl.load(s_ptr + t), wj)
    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mr = rows < D
    acc = tl.zeros([BLOCK_J, BLOCK_N], dtype=tl.float32)
    RN: tl.constexpr = BLOCK_J * BLOCK_N
    rn = tl.reshape(e[:, None] * D + rows[None, :], [RN])  # W4's rows e D + n, their mask
    mn = tl.reshape(mj[:, None] & mr[None, :], [RN])
    W8: tl.constexpr = w_ptr.dtype.element_ty == tl.float8e4nv
    tl.static_assert((VS == 0) | (SHARED and not W4 and not W8), "VS: SHARED, float weights")
    q, s = rn, rn  # (bound for both branches; W4: the first chunk's codes and scales)
    if W8:
        g = tl.zeros([RN, BLOCK_K // min(FP8_GROUP, BLOCK_K)], dtype=tl.float32)
    if W4:
        q, s = mxfp4_load(w_ptr, ws4_ptr, rn, mn, 0, F, F, BLOCK_K)
        g = tl.zeros([RN, BLOCK_K // 32], dtype=tl.float32)  # the group sums
    for k0 in range(0, F, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        mk = ks < F
        ap = act_ptr + (t * TOP_K + js)[:, None] * stride_a + ks[None, :]
        am = mj[:, None] & mk[None, :]
        if VS > 0:  # the shared expert's blocks read its own activations, in the same load
            col = vcol[:, None] + ks[None, :]  # the shared expert's columns
            ms = mv[:, None] & mk[None, :] & (col < FS)
            ap = tl.where(mv[:, None], acts_ptr + t * stride_as + col, ap)
            am = am | ms
        a = tl.load(ap, mask=am, other=0.0)
        if W4:
            qn, sn = mxfp4_load(w_ptr, ws4_ptr, rn, mn, k0 + BLOCK_K, F, F, BLOCK_K)
            x = tl.broadcast_to(a.to(tl.float32)[:, None, :], [BLOCK_J, BLOCK_N, BLOCK_K])
            g += mxfp4_dot(q, s, tl.reshape(x, [RN, BLOCK_K]))
            q, s = qn, sn
        elif W8:
            c = weight_chunk(w_ptr, rn, mn, k0, F, BLOCK_K, FP8_PIECES)
            x = tl.broadcast_to(a.to(tl.float32)[:, None, :], [BLOCK_J, BLOCK_N, BLOCK_K])
            g += row_partials(c, tl.reshape(x, [RN, BLOCK_K]), FP8_PIECES)
        else:
            wp = w_ptr + e[:, None, None] * stride_we + rows[None, :, None].to(tl.int64) * F \
                + ks[None, None, :]
            wm = mj[:, None, None] & mr[None, :, None] & mk[None, None, :]
            if VS > 0:
                wp = tl.where(mv[:, None, None], ws_ptr + rows[None, :, None].to(tl.int64) * FS
                              + col[:, None, :], wp)
                wm = wm | (ms[:, None, :] & mr[None, :, None])
            w = tl.load(wp, mask=wm, other=0.0, eviction_policy="evict_first")
            acc += tl.sum(w.to(tl.float32) * a.to(tl.float32)[:, None, :], axis=2)
    if W4 or W8:
        acc += tl.reshape(tl.sum(g, axis=1), [BLOCK_J, BLOCK_N])
    if BIAS:
        acc += tl.load(b_ptr + e[:, None] * stride_be + rows[None, :],
                       mask=mj[:, None] & mr[None, :], other=0.0).to(tl.float32)
    y = tl.sum(acc * wj[:, None], axis=0)[None, :]
    if SHARED and VS == 0:
        ys, offs_t, mask_t, offs_n, mask_n = gemv_tile(
            acts_ptr + t * stride_as, ws_ptr, ws_ptr, ws_ptr, ws_ptr, 1, D, FS, 0, 0,
            tl.zeros([1], dtype=tl.float32), tile, 0, False, False, 0, False, 1,
            BLOCK_N, BLOCK_KS, F32)
        y += tl.load(s_ptr + t) * ys
    m = mr[None, :]
    if ADD:
        y += tl.load(h_ptr + t * stride_h + rows[None, :], mask=m, other=0.0).to(tl.float32)
    tl.store(h_ptr + t * stride_h + rows[None, :], y.to(h_ptr.dtype.element_ty), mask=m)


# the experts' down tile (rows a program, K chunk, warps): an H100 sweep of 2026-12-06 (bench/
# RESULTS.md session 59; 16 launches a CUDA graph over disjoint experts, T = 1) -- of 10 tiles
# (1-16 rows x 64-1024 K, 4 / 8 warps) 2 x 256 at 8 warps was within 3% / 6% of the best on
# OLMoE-1B-7B's 8 experts of 1024 / Qwen1.5-MoE's 4 of 1408 (2399 / 2125 GB/s), where a loop of
# one expert at a time (gemv_tile each, 4 x 1024) streamed 2260 / 1782: its id, then its rows,
# one dependent round trip each. Since session 60 the rows a program follow the routed count
# (down_tile): a K chunk of all top_k experts' rows is ~4096 elements (16 B a thread at 8 warps)
# -- bench/sweep_moe.py, H100, three runs on two machines, us, 2 / 4 / 8 rows x 256: gpt-oss-
# 20b's top 4 of 2880 28.6-28.8 / 24.7-24.8 / 24.7-24.9 (2690 GB/s at 4), Qwen1.5-MoE's top 4 of
# 1408 10.8-10.9 / 10.2-10.4 / 10.2-10.4, OLMoE's top 8 of 1024 13.7-13.9 / 13.7-14.9 /
# 14.2-18.5 (session 59's sweep the same way: 2 x 256 2399, 4 x 256 2225 GB/s)
# MXFP4 experts (scales): a 512-element chunk, 256 bytes a row, 32 / top_k rows -- H100,
# sweep_moe --mxfp4 (bench/RESULTS.md session 62), gpt-oss-20b's top 4 of 2880, the word decode
# with the next chunk requested ahead (us): 8 rows x 512 15.2-15.7 (at 4 / 8 warps), 8 x 256
# 15.5, 8 x 1024 at 4 warps 16.9, 16 x 512 17.7-22.1, 4 x 1024 18.2; one chunk at a time 8 x
# 1024 at 4 warps 14.5, 8 x 512 16.0-16.5
# FP8 experts (quant.fp8_rows: a code a byte): 32 / top_k rows as MXFP4's, 256 codes a row a
# chunk at top_k 8, 512 below -- H100, sweep_moe --fp8 (bench/RESULTS.md session 67), two runs,
# us: OLMoE-1B-7B's top 8 of 1024 4 x 256 8.80 against 8 x 256 8.92, 4 x 512 at 4 / 8 warps
# 9.07 / 10.58, 2 x 256 10.03-10.14, 2 x 512 10.28-10.47; Qwen1.5-MoE's top 4 of 1408 8 x 512
# 7.11 against 4 x 512 7.21-7.48, 8 x 256 9.39, 4 x 256 9.08
DOWN_BLOCK_K, DOWN_WARPS, DOWN_BLOCK_K_MXFP4 = 256, 8, 512


def down_tile(top_k: int, mxfp4: bool = False, fp8: bool = False) -> TileConfig:
    """experts_down's default tile for top_k routed experts: DOWN_BLOCK_K (MXFP4:
    DOWN_BLOCK_K_MXFP4; FP8: 256 at top_k >= 8, else 512), DOWN_WARPS and 16 / top_k rows (MXFP4
    and FP8: 32 / top_k), a power of two, 1 to 8 (top_k 8 -> 2, 4 -> 4, 2 -> 8; MXFP4 / FP8 8
    -> 4, 4 -> 8)."""
    rows = max(1, min(8, (32 if mxfp4 or fp8 else 16) // triton.next_power_of_2(top_k)))
    bk = DOWN_BLOCK_K_MXFP4 if mxfp4 else (256 if top_k >= 8 else 512) if fp8 else DOWN_BLOCK_K
    return TileConfig(block_n=rows, block_k=bk, num_warps=DOWN_WARPS)


def shared_blocks(F: int, FS: int, w_dtype, ws_dtype, shared: bool = True, top_k: int = 1,
                  max_j: int | None = None) -> int:
    """experts_down_body's VS: the shared expert's FS columns as that many experts of F, where
    the shared expert exists, both matrices are float and (max_j) the chunk's BLOCK_J =
    next_power_of_2(top_k + VS) stays <= max_j (0: its own loop after the experts')."""
    fp = lambda d: d not in (torch.uint8, torch.float8_e4m3fn)  # noqa: E731
    vs = triton.cdiv(FS, F) if shared and fp(w_dtype) and fp(ws_dtype) else 0
    return 0 if max_j is not None and triton.next_power_of_2(top_k + vs) > max_j else vs


def experts_down(h: torch.Tensor, act: torch.Tensor, w: torch.Tensor, ids: torch.Tensor,
                 weights: torch.Tensor, shared=None, config=None, bias=None,
                 scales: torch.Tensor | None = None,
                 shared_in_chunks: bool = False, accumulate: bool = True) -> torch.Tensor:
    """h [T, d] += sum_j weights[t, j] (act[t * top_k + j] @ w[ids[.]].T + bias[ids[.]]), the
    experts' down projections (w [E, d, F]; bias [E, d] or None) weighted and summed in fp32 per
    token, plus -- shared = (acts [T, FS], ws [d, FS], s [T]) -- the shared expert's down times
    its scale; in place, one kernel (no fp32 outputs of the experts written and read back).
    Tiles: config (a TileConfig), else down_tile(top_k); the shared expert's K in chunks of up
    to 1024. scales (quant's "mxfp4"): w holds MXFP4 codes [E, d, F / 2] uint8 and scales their
    E8M0 exponents [E, d, F / 32] uint8 (F % 32 == 0). w float8_e4m3fn: FP8 rows [E, d,
    row_elems(F)] (quant.fp8_rows; the shared expert's ws too, where it is FP8).
    shared_in_chunks: float matrices' shared expert streamed in the routed experts' chunks
    (experts_down_body's VS). accumulate False: h = that sum, h's values not read (no zeroing
    launch before it)."""
    T, D = h.shape
    P, F = act.shape
    top_k = P // T
    w4 = scales is not None
    if w4:
        assert w.dtype == torch.uint8 and scales.dtype == torch.uint8 and F % 32 == 0
        assert scales.shape == (*w.shape[:2], F // 32) and scales.is_contiguous()
    assert P == T * top_k and w.shape[1:] == (D, F // 2 if w4 else row_elems(F, w.dtype))
    assert ids.numel() == P == weights.numel()
    assert w.is_contiguous() and act.stride(1) == 1 and ids.dtype == torch.int32
    acts, ws, s = shared if shared is not None else (act, w, weights)
    FS = acts.shape[-1]
    assert shared is None or (ws.shape == (D, row_elems(FS, ws.dtype)) and ws.is_contiguous()
                              and acts.shape[0] == T)
    assert bias is None or (bias.shape == w.shape[:2] and bias.is_contiguous())
    cfg = config or down_tile(top_k, w4, w.dtype == torch.float8_e4m3fn)
    vs = shared_blocks(F, FS, w.dtype, ws.dtype, shared is not None and shared_in_chunks)
    pdl = use_pdl(h.device)
    experts_down_kernel[(triton.cdiv(D, cfg.block_n), T)](
        h, act, w, ids, weights, acts, ws, s, w if bias is None else bias, D, F, FS,
        h.stride(0), act.stride(0), acts.stride(0), w.stride(0),
        0 if bias is None else bias.stride(0), TOP_K=top_k, SHARED=shared is not None,
        BIAS=bias is not None,
        BLOCK_N=cfg.block_n, BLOCK_K=min(cfg.block_k, triton.next_power_of_2(F)),
        BLOCK_KS=min(1024, triton.next_power_of_2(FS)),
        BLOCK_J=triton.next_power_of_2(top_k + vs),
        F32=INTERPRET or torch.float32 in (w.dtype, act.dtype),
        PDL=pdl, ws4_ptr=scales if w4 else w, W4=w4, VS=vs, ADD=accumulate,
        num_warps=cfg.num_warps, launch_pdl=pdl)
    return h
