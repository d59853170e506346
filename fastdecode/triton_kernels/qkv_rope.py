"""Fused QKV projection + bias + q/k RMSNorm + RoPE + KV-cache append.

For each head slot j of the fused weight Wqkv [(H + 2*KVH) * hd, d] (q heads, then k, then v) and
each new token t at position p = pos + t:
    xn      = rmsnorm(x[t]) * attn_norm                       (prologue, fp32)
    y       = Wqkv[j*hd:(j+1)*hd] @ xn (+ bias)               (fp32 accumulation)
    y       = rmsnorm_hd(y) * qk_norm[j]      (Qwen3, q and k heads only; weights by head slot)
    y       = y*cos(p) + rotate_half(y)*sin(p)                (q and k heads; rotate_half pairs
                                                               element i with i + hd/2, as HF)
    (HunYuan: the two lines the other way round -- QK_NORM, qk_norm_mode; OLMo 2: one RMSNorm
     over all q heads' rows at once and one over all k heads' -- QK_NORM_FULL, always
     deferred; a LayerNorm's centering (StableLM, Cohere) is folded into the q / k rows:
     ModelSpec.qk_layer_norm)
    q[t, j] = y | k_cache[j-H, p] = y | v_cache[j-H-KVH, p] = y
A tile is BLOCK_H rotation pairs (row i of the lo half [0, hd/2) with row i of the hi half
[hd/2, hd)) of one head, so the rotation needs no cross-thread shuffle: with 4 pairs per tile
the 1B model's 3072 rows are 384 tiles (the decode GEMV tile of config.py). With q/k RMSNorm
(Qwen3) a tile is the whole head, since the norm sums over all of it -- except in decode
(defer_qk_norm, DEFER): there q and k tiles are as small as any and store their raw fp32 outputs
(bias added), and qk_norm_rope_body, one program per KV group (a QKNORM task in the megakernel,
qk_norm_rope_kernel in ops mode), normalizes and rotates whole heads: a Qwen3-8B layer's QKV in
whole-head tiles of 128 rows is 48 programs, which stream its 50 MB at a fraction of the
bandwidth (ops mode 98 tok/s before deferring, 2026-11-30 on an H200). Any even head_dim.
Tiles are numbered per KV group (qkv_slot) so a megakernel task covers a range of one group's
tiles and signals only that group's attention.
Roofline (decode): bytes = (H + 2 KVH) * hd * d * 2 -- e.g. 12.6 MB for Llama-3.2-1B, 2.8 us.
"""
import torch
import triton
import triton.language as tl

from ._common import (FP8_PIECES, INTERPRET, gemv_acc, next_x_chunk, pdl_start,
                      pdl_wait, row_dot, row_rstd, stream_x0, weight_chunk, x_chunk)
from .config import StreamConfig, fp8_tile, gemv_config, qkv_pairs, stream_ptx, use_pdl
from .gemv import block_t

# the QK_NORM constexpr of the bodies: 0 none, the q / k RMSNorm before RoPE (Qwen3) or after it
# (HunYuan: ModelSpec.qk_norm_after), or over all heads at once before RoPE (OLMo 2:
# ModelSpec.qk_norm_full; qk_norm_rope_body only)
QK_NORM_FIRST = tl.constexpr(1)
QK_NORM_AFTER_ROPE = tl.constexpr(2)
QK_NORM_FULL = tl.constexpr(3)


def qk_norm_mode(qk_norm: bool, after: bool, full: bool = False) -> int:
    """The QK_NORM value of a model's QKV tiles (0 without q / k norm)."""
    if not qk_norm:
        return 0
    return (QK_NORM_FULL if full else QK_NORM_AFTER_ROPE if after else QK_NORM_FIRST).value


def qk_norm_slots(group: int) -> int:
    """BLOCK_SLOT of qk_norm_rope_body: a KV group's q heads and its k head."""
    return triton.next_power_of_2(group + 1)


def defer_qk_norm(qk_norm: bool, T: int, full: bool = False) -> bool:
    """Decode (T=1) with q/k RMSNorm runs it after the QKV tiles (DEFER), in both modes; prefill
    chunks keep whole-head tiles (their tl.dot tiles have >= 16 pairs anyway). A norm over all
    heads (full) always runs after them: no tile holds every head."""
    return qk_norm and (T == 1 or full)


@triton.jit
def qkv_slot(g, u, n_t, H, KVH, GROUP, N_CHUNKS):
    """Tile u of KV group g's (GROUP + 2) head slots -> (head slot j, pair chunk, token block):
    the group's q heads, then its k head, then its v head; token blocks fastest."""
    tb = u % n_t
    rest = u // n_t
    c = rest % N_CHUNKS
    sg = rest // N_CHUNKS
    j = tl.where(sg < GROUP, g * GROUP + sg, tl.where(sg == GROUP, H + g, H + KVH + g))
    return j, c, tb


@triton.jit
def qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, i, n_it, GROUP, N_CHUNKS, BLOCK_H: tl.constexpr,
              BLOCK_K: tl.constexpr, PTX: tl.constexpr):
    """Piece i of a decode-stream QKV task over group g's tiles from u_lo (T=1): the lo and hi rows
    of tile u_lo + i // n_k, K chunk i % n_k (n_k = cdiv(K, BLOCK_K)); a piece at or past n_it
    is masked off (no traffic) -- gemv.stream_piece for the rotation-pair tiles."""
    half = HD // 2
    n_k = tl.cdiv(K, BLOCK_K)
    j, c, _ = qkv_slot(g, u_lo + i // n_k, 1, H, KVH, GROUP, N_CHUNKS)
    offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = (offs_h < half) & (i < n_it)
    k0 = (i % n_k) * BLOCK_K
    w_lo = weight_chunk(w_ptr, j * HD + offs_h, mask_h, k0, K, BLOCK_K, PTX)
    w_hi = weight_chunk(w_ptr, j * HD + half + offs_h, mask_h, k0, K, BLOCK_K, PTX)
    return w_lo, w_hi


@triton.jit
def qkv_start(w_ptr, K, H, KVH, HD, g, u_lo, u_hi, GROUP, N_CHUNKS, BLOCK_H: tl.constexpr,
              BLOCK_K: tl.constexpr, STREAM: tl.constexpr, PTX: tl.constexpr):
    """The first piece of a decode-stream QKV task (tiles [u_lo, u_hi) of group g): the lo and hi
    rows of its first tile, weights only -- requested before the task's dependency wait
    (gemv.stream_start). (0, 0) unless STREAM (T=1: one token block)."""
    if STREAM:
        return qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, 0, (u_hi - u_lo) * tl.cdiv(K, BLOCK_K),
                         GROUP, N_CHUNKS, BLOCK_H, BLOCK_K, PTX)
    else:
        return 0, 0


@triton.jit
def qkv_rope_body(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos,
                  q_ptr, k_ptr, v_ptr, T, K, stride_x, S, eps, H, KVH, HD, g, u_lo, u_hi,
                  w_lo0, w_hi0, GROUP, N_CHUNKS, raw_ptr,
                  BIAS: tl.constexpr, QK_NORM: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, STREAM: tl.constexpr,
                  F32: tl.constexpr, DEFER: tl.constexpr, PTX: tl.constexpr,
                  STAGES: tl.constexpr = 1, WAIT: tl.constexpr = None, wargs=None,
                  K_CONST: tl.constexpr = 0, NORM: tl.constexpr = True):
    """Tiles [u_lo, u_hi) of KV group g (qkv_slot): each is pairs [c*BLOCK_H, (c+1)*BLOCK_H) of
    one head slot for one token block. STREAM (T=1): the decode stream of gemv_body (its first
    piece w_lo0 / w_hi0 from qkv_start) -- the next
    (tile, K chunk) piece and, at a tile's end, the next tile's bias, norm weights and cos/sin
    are requested before the current piece is reduced. STAGES > 1 (STREAM, not PTX): the pieces
    stream through shared memory in Triton's loop pipeline, the dependency wait WAIT(*wargs)
    inside the first iteration and every activation / operand load in a branch on its result
    (gemv.gemv_body's STAGES, K_CONST); w_lo0 / w_hi0 are unused. DEFER: q and k tiles store
    raw fp32 rows to raw_ptr [T, H + KVH, HD] for qk_norm_rope_body (QK_NORM is then False
    here).
    PTX (STREAM, bf16 weights): the pieces are loaded as int32 words, by inline PTX (1) or plain
    loads (2) (_common.weight_chunk). PTX 1: a task's second piece is requested with the
    activations, right after the wait, and each iteration requests the piece after the one in
    flight after its reduction -- H200, 2026-12-04, 27e5351's tree, Llama-3.2-1B table config,
    one process per variant: 1258.8 / 1257.4 tok/s against 1235.3 / 1235.1 requested in the
    loop; with bf16 pieces, which a stream waits for at its back edge, it lost (gemv.gemv_body's
    docstring). Not with PTX 2: level there (1291.2 / 1288.5 vs 1289.5 / 1294.5 tok/s, same
    method, 2026-12-04 session 47) at 249 registers instead of 199.
    NORM: the RMSNorm prologue by norm_ptr (False: the rows as they are -- a model without norms
    before its blocks, ModelSpec.pre_norms).
    Returns 1, or WAIT's result."""
    half = HD // 2
    n_t = tl.cdiv(T, BLOCK_T)
    run = 1
    SPM: tl.constexpr = PTX if PTX >= FP8_PIECES else 0  # the staged stream's pieces: plain / FP8
    if STREAM and STAGES > 1:
        offs_t = tl.arange(0, BLOCK_T)
        mask_t = offs_t < T
        n_k = tl.cdiv(K, BLOCK_K)
        n_it = (u_hi - u_lo) * n_k
        j, c, _ = qkv_slot(g, u_lo, 1, H, KVH, GROUP, N_CHUNKS)
        offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
        rstd = tl.zeros([1, 1], dtype=tl.float32)
        x = tl.zeros([1, BLOCK_K], dtype=tl.float32)
        lo = tl.zeros([1, BLOCK_H], dtype=tl.float32)
        hi = lo
        blo, bhi, nlo, nhi, cs, sn = lo, lo, lo, lo, lo, lo
        for i in tl.range(0, n_it, num_stages=STAGES):
            w_lo, w_hi = qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, i, n_it, GROUP, N_CHUNKS,
                                   BLOCK_H, BLOCK_K, SPM)
            if i == 0:
                if WAIT is not None:
                    run = WAIT(*wargs)
                if run == 1:
                    blo, bhi, nlo, nhi, cs, sn = qkv_operands(
                        j, offs_t, mask_t, offs_h, offs_h < half, pos, bias_ptr, qk_norm_ptr,
                        cos_ptr, sin_ptr, H, HD, BIAS, QK_NORM)
                    x, rstd = stream_x0(x, x_ptr, norm_ptr, stride_x, offs_t, mask_t, K, eps,
                                        n_k, NORM, BLOCK_K, K_CONST)
            if run == 1:
                kc = i % n_k
                if n_k > 1:
                    x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, kc * BLOCK_K, K,
                                rstd, NORM, BLOCK_K)
                lo += row_dot(w_lo, x, SPM)
                hi += row_dot(w_hi, x, SPM)
                if kc == n_k - 1:  # the tile's last chunk: epilogue, next tile's operands
                    j, c, _ = qkv_slot(g, u_lo + i // n_k, 1, H, KVH, GROUP, N_CHUNKS)
                    offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
                    qkv_rope_finish(lo, hi, (blo, bhi, nlo, nhi, cs, sn), j, offs_t, mask_t,
                                    offs_h, offs_h < half, pos, q_ptr, k_ptr, v_ptr, S, eps, H,
                                    KVH, HD, QK_NORM, raw_ptr, DEFER)
                    jn, cn, _ = qkv_slot(g, u_lo + i // n_k + 1, 1, H, KVH, GROUP, N_CHUNKS)
                    offs_hn = cn * BLOCK_H + tl.arange(0, BLOCK_H)
                    blo, bhi, nlo, nhi, cs, sn = qkv_operands(
                        jn, offs_t, mask_t, offs_hn, (offs_hn < half) & (i + 1 < n_it), pos,
                        bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, H, HD, BIAS, QK_NORM)
                    lo = tl.zeros([1, BLOCK_H], dtype=tl.float32)
                    hi = lo
        if n_it == 0:
            if WAIT is not None:
                run = WAIT(*wargs)
    elif STREAM:
        offs_t = tl.arange(0, BLOCK_T)
        mask_t = offs_t < T
        n_k = tl.cdiv(K, BLOCK_K)
        n_it = (u_hi - u_lo) * n_k
        j, c, _ = qkv_slot(g, u_lo, n_t, H, KVH, GROUP, N_CHUNKS)
        offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = (offs_h < half) & (n_it > 0)
        w_lo, w_hi = w_lo0, w_hi0  # requested before x (before the dependency wait)
        if PTX == 1:  # the second piece requested now, with the activations (docstring)
            nxt_lo, nxt_hi = qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, 1, n_it, GROUP, N_CHUNKS,
                                       BLOCK_H, BLOCK_K, PTX)
        opnd = qkv_operands(j, offs_t, mask_t, offs_h, mask_h, pos, bias_ptr, qk_norm_ptr, cos_ptr,
                            sin_ptr, H, HD, BIAS, QK_NORM)
        rstd = tl.zeros([1, 1], dtype=tl.float32)
        if NORM:
            rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)[:, None]
        x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, 0, K, rstd, NORM, BLOCK_K)
        lo = tl.zeros([1, BLOCK_H], dtype=tl.float32)
        hi = lo
        for i in range(0, n_it):
            i1 = i + 1
            jn, cn, _ = qkv_slot(g, u_lo + i1 // n_k, n_t, H, KVH, GROUP, N_CHUNKS)
            offs_hn = cn * BLOCK_H + tl.arange(0, BLOCK_H)
            mask_hn = (offs_hn < half) & (i1 < n_it)
            k1 = (i1 % n_k) * BLOCK_K
            if PTX != 1:
                nxt_lo, nxt_hi = qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, i1, n_it, GROUP,
                                           N_CHUNKS, BLOCK_H, BLOCK_K, PTX)
            x_n = next_x_chunk(x, x_ptr, norm_ptr, offs_t, mask_t, stride_x, k1, K, n_k, rstd,
                               NORM, BLOCK_K)
            lo += row_dot(w_lo, x, PTX)
            hi += row_dot(w_hi, x, PTX)
            if i % n_k == n_k - 1:  # the tile's last chunk: epilogue, next tile's operands
                opnd_n = qkv_operands(jn, offs_t, mask_t, offs_hn, mask_hn, pos, bias_ptr,
                                      qk_norm_ptr, cos_ptr, sin_ptr, H, HD, BIAS, QK_NORM)
                qkv_rope_finish(lo, hi, opnd, j, offs_t, mask_t, offs_h, offs_h < half, pos,
                                q_ptr, k_ptr, v_ptr, S, eps, H, KVH, HD, QK_NORM, raw_ptr, DEFER)
                lo = tl.zeros([1, BLOCK_H], dtype=tl.float32)
                hi = lo
                j, offs_h, opnd = jn, offs_hn, opnd_n
            w_lo, w_hi, x = nxt_lo, nxt_hi, x_n
            if PTX == 1:  # piece i + 2, the one after the piece now in flight
                nxt_lo, nxt_hi = qkv_piece(w_ptr, K, H, KVH, HD, g, u_lo, i + 2, n_it, GROUP,
                                           N_CHUNKS, BLOCK_H, BLOCK_K, PTX)
    else:
        for u in range(u_lo, u_hi):
            j, c, tb = qkv_slot(g, u, n_t, H, KVH, GROUP, N_CHUNKS)
            offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
            mask_t = offs_t < T
            offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
            mask_h = offs_h < half
            rows = j * HD + offs_h
            rstd = tl.zeros([BLOCK_T], dtype=tl.float32)
            if NORM:
                rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)
            lo, hi = gemv_acc(x_ptr, stride_x, offs_t, mask_t, rstd, norm_ptr, w_ptr, rows,
                              rows + half, mask_h, K, 0, K, NORM, True, BLOCK_K, F32)
            opnd = qkv_operands(j, offs_t, mask_t, offs_h, mask_h, pos, bias_ptr, qk_norm_ptr,
                                cos_ptr, sin_ptr, H, HD, BIAS, QK_NORM)
            qkv_rope_finish(lo, hi, opnd, j, offs_t, mask_t, offs_h, mask_h, pos, q_ptr, k_ptr,
                            v_ptr, S, eps, H, KVH, HD, QK_NORM, raw_ptr, DEFER)
    return run


@triton.jit
def qkv_operands(j, offs_t, mask_t, offs_h, mask_h, pos, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr,
                 H, HD, BIAS: tl.constexpr, QK_NORM: tl.constexpr):
    """Everything a tile's epilogue reads besides its dot products, fp32: (bias lo, bias hi,
    q/k-norm weight lo, hi, cos, sin) -- loaded a tile ahead in the decode stream."""
    half = HD // 2
    rows = j * HD + offs_h
    zero = tl.zeros([1, offs_h.shape[0]], dtype=tl.float32)
    blo, bhi, nlo, nhi = zero, zero, zero + 1.0, zero + 1.0
    if BIAS:
        blo = tl.load(bias_ptr + rows, mask=mask_h, other=0.0).to(tl.float32)[None, :]
        bhi = tl.load(bias_ptr + rows + half, mask=mask_h, other=0.0).to(tl.float32)[None, :]
    if QK_NORM:
        nrm = qk_norm_ptr + j * HD
        nlo = tl.load(nrm + offs_h, mask=mask_h, other=0.0).to(tl.float32)[None, :]
        nhi = tl.load(nrm + half + offs_h, mask=mask_h, other=0.0).to(tl.float32)[None, :]
    p = pos + offs_t
    mask = mask_t[:, None] & mask_h[None, :]
    c = tl.load(cos_ptr + p[:, None] * half + offs_h[None, :], mask=mask, other=1.0)
    s = tl.load(sin_ptr + p[:, None] * half + offs_h[None, :], mask=mask, other=0.0)
    return blo, bhi, nlo, nhi, c, s


@triton.jit
def qkv_rope_finish(lo, hi, opnd, j, offs_t, mask_t, offs_h, mask_h, pos, q_ptr, k_ptr, v_ptr,
                    S, eps, H, KVH, HD, QK_NORM: tl.constexpr, raw_ptr, DEFER: tl.constexpr):
    """bias, q/k RMSNorm, RoPE and the store of one tile's lo/hi halves [BLOCK_T, BLOCK_H];
    DEFER: a q or k tile stores its raw rows (bias added) to raw_ptr instead."""
    blo, bhi, nlo, nhi, c, s = opnd
    half = HD // 2
    lo += blo
    hi += bhi
    p = pos + offs_t
    mask = mask_t[:, None] & mask_h[None, :]
    raw = False
    if DEFER:
        raw = j < H + KVH
    if raw:
        dst = raw_ptr + (offs_t[:, None] * (H + KVH) + j) * HD + offs_h[None, :]
        tl.store(dst, lo, mask=mask)
        tl.store(dst + half, hi, mask=mask)
    else:
        qkv_rope_store(lo, hi, nlo, nhi, c, s, j, offs_t, offs_h, mask, p, q_ptr, k_ptr, v_ptr,
                       S, eps, H, KVH, HD, QK_NORM)


@triton.jit
def norm_rotate(lo, hi, nlo, nhi, c, s, eps, HD, QK_NORM: tl.constexpr):
    """Rows of q / k heads as lo / hi halves [R, BLOCK_H]: per-head RMSNorm (QK_NORM: whole heads,
    weights nlo / nhi) then the rotary embedding (cos c, sin s); QK_NORM == QK_NORM_AFTER_ROPE
    (HunYuan): the rotary embedding first, then the norm."""
    if QK_NORM == QK_NORM_AFTER_ROPE:
        lo, hi = lo * c - hi * s, hi * c + lo * s
        r = 1.0 / tl.sqrt((tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1)) / HD + eps)
        return lo * r[:, None] * nlo, hi * r[:, None] * nhi
    if QK_NORM:
        r = 1.0 / tl.sqrt((tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1)) / HD + eps)
        lo = lo * r[:, None] * nlo
        hi = hi * r[:, None] * nhi
    return lo * c - hi * s, hi * c + lo * s


@triton.jit
def qkv_rope_store(lo, hi, nlo, nhi, c, s, j, offs_t, offs_h, mask, p, q_ptr, k_ptr, v_ptr, S,
                   eps, H, KVH, HD, QK_NORM: tl.constexpr):
    """q/k RMSNorm (whole heads in lo / hi), RoPE, and the store to q or the caches."""
    half = HD // 2
    if j < H + KVH:  # q or k head: per-head norm (Qwen3) then rotary embedding
        lo, hi = norm_rotate(lo, hi, nlo, nhi, c, s, eps, HD, QK_NORM)
    if j < H:
        dst = q_ptr + (offs_t[:, None] * H + j) * HD + offs_h[None, :]
    elif j < H + KVH:
        dst = k_ptr + ((j - H) * S + p[:, None]) * HD + offs_h[None, :]
    else:
        dst = v_ptr + ((j - H - KVH) * S + p[:, None]) * HD + offs_h[None, :]
    tl.store(dst, lo.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + half, hi.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def heads_rstd(row_ptr, j0, n, HD, eps, BLOCK_SLOT: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) over heads [j0, j0 + n) of one token's raw rows row_ptr
    [heads, HD] fp32, BLOCK_SLOT heads a round (QK_NORM_FULL's statistics)."""
    offs = tl.arange(0, BLOCK_SLOT)[:, None] * HD + tl.arange(0, 2 * BLOCK_HALF)[None, :]
    ok = (tl.arange(0, 2 * BLOCK_HALF) < HD)[None, :]
    ss = tl.zeros([BLOCK_SLOT, 2 * BLOCK_HALF], dtype=tl.float32)
    for h0 in range(j0, j0 + n, BLOCK_SLOT):
        m = ((h0 + tl.arange(0, BLOCK_SLOT)) < j0 + n)[:, None] & ok
        x = tl.load(row_ptr + h0 * HD + offs, mask=m, other=0.0)
        ss += x * x
    return 1.0 / tl.sqrt(tl.sum(tl.sum(ss, axis=1), axis=0) / (n * HD) + eps)


@triton.jit
def qk_norm_rope_body(raw_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos, q_ptr, k_ptr, T, S, eps,
                      H, KVH, HD, g, GROUP, BLOCK_SLOT: tl.constexpr, BLOCK_HALF: tl.constexpr,
                      QK_NORM: tl.constexpr = QK_NORM_FIRST):
    """The deferred half of qkv_rope_body (DEFER), for KV group g: its q heads and k head, every
    token: the raw fp32 rows from raw_ptr [T, H + KVH, HD] through q/k RMSNorm and RoPE
    (norm_rotate, as a whole-head tile) to q / the k cache. The group's GROUP + 1 heads are one
    [BLOCK_SLOT >= GROUP + 1, BLOCK_HALF >= HD / 2] tile per token, so their loads go out
    together: this runs on the attention chain (the HBM idles), where a head at a time cost a
    dependent L2 round trip each (Qwen3-8B, 2026-12-01 trace: ~7 us from a group's last QKV
    tile to its attention's end, ~3.7 us without q/k norm).
    QK_NORM_FULL (OLMo 2): the q rows normalized over all H heads at once, the k rows over all
    KVH (heads_rstd: every group's raw rows, which the caller has waited for). Weights
    qk_norm_ptr [(H + KVH), HD], a row per head slot (packing.PackedWeights.qk_norm); then
    RoPE."""
    half = HD // 2
    offs_h = tl.arange(0, BLOCK_HALF)
    slot = tl.arange(0, BLOCK_SLOT)
    m = (slot < GROUP + 1)[:, None] & (offs_h < half)[None, :]
    j = tl.where(slot < GROUP, g * GROUP + slot, H + g)  # the group's q heads, then its k head
    nrm = qk_norm_ptr + j[:, None] * HD + offs_h[None, :]
    nlo = tl.load(nrm, mask=m, other=0.0).to(tl.float32)
    nhi = tl.load(nrm + half, mask=m, other=0.0).to(tl.float32)
    for t in range(0, T):
        p = pos + t
        src = raw_ptr + (t * (H + KVH) + j)[:, None] * HD + offs_h[None, :]
        lo = tl.load(src, mask=m, other=0.0)
        hi = tl.load(src + half, mask=m, other=0.0)
        c = tl.load(cos_ptr + p * half + offs_h, mask=offs_h < half, other=1.0)[None, :]
        s = tl.load(sin_ptr + p * half + offs_h, mask=offs_h < half, other=0.0)[None, :]
        if QK_NORM == QK_NORM_FULL:
            rq = heads_rstd(raw_ptr + t * (H + KVH) * HD, 0, H, HD, eps, BLOCK_SLOT, BLOCK_HALF)
            rk = heads_rstd(raw_ptr + t * (H + KVH) * HD, H, KVH, HD, eps, BLOCK_SLOT,
                            BLOCK_HALF)
            r = tl.where(j < H, rq, rk)[:, None]
            lo, hi = lo * r * nlo, hi * r * nhi
            lo, hi = lo * c - hi * s, hi * c + lo * s
        else:
            lo, hi = norm_rotate(lo, hi, nlo, nhi, c, s, eps, HD, QK_NORM)
        dst = tl.where(j < H, q_ptr + (t * H + j) * HD, k_ptr + ((j - H) * S + p) * HD)
        dst = dst[:, None] + offs_h[None, :]
        tl.store(dst, lo.to(q_ptr.dtype.element_ty), mask=m)
        tl.store(dst + half, hi.to(q_ptr.dtype.element_ty), mask=m)


@triton.jit
def qkv_rope_kernel(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos_ptr,
                    q_ptr, k_ptr, v_ptr, raw_ptr, T, K, stride_x, S, eps, H, KVH, HD, GROUP,
                    n_chunks, tiles_per_program,
                    BIAS: tl.constexpr, QK_NORM: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, STREAM: tl.constexpr,
                    F32: tl.constexpr, DEFER: tl.constexpr, PTX: tl.constexpr,
                    PDL: tl.constexpr, STAGES: tl.constexpr, NORM: tl.constexpr):
    """Grid (KV groups, tile ranges of the group). PDL: the first weight piece before pdl_wait
    (gemv.gemv_kernel; STAGES > 1: none -- the position is read after the wait, before the
    body, which the shared-memory stream would need inside its first iteration)."""
    pdl_start(PDL)
    per_group = (GROUP + 2) * n_chunks * tl.cdiv(T, BLOCK_T)
    lo = tl.program_id(1) * tiles_per_program
    hi = tl.minimum(lo + tiles_per_program, per_group)
    w_lo, w_hi = qkv_start(w_ptr, K, H, KVH, HD, tl.program_id(0), lo, hi, GROUP, n_chunks,
                           BLOCK_H, BLOCK_K, STREAM and STAGES == 1, PTX)
    pdl_wait(PDL)
    qkv_rope_body(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr,
                  tl.load(pos_ptr), q_ptr, k_ptr, v_ptr, T, K, stride_x, S, eps, H, KVH, HD,
                  tl.program_id(0), lo, hi, w_lo, w_hi, GROUP, n_chunks, raw_ptr, BIAS, QK_NORM,
                  BLOCK_T, BLOCK_H, BLOCK_K, STREAM, F32, DEFER, PTX, STAGES, NORM=NORM)


@triton.jit
def qk_norm_rope_kernel(raw_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_ptr, T, S, eps,
                        H, KVH, HD, GROUP, BLOCK_SLOT: tl.constexpr, BLOCK_HALF: tl.constexpr,
                        PDL: tl.constexpr, QK_NORM: tl.constexpr):
    """Grid (KV groups,): the deferred q/k norm + RoPE of qkv_rope (DEFER). Bytes: (GROUP + 1)
    raw fp32 heads in (L2: just written), bf16 out -- a few us of latency, no bandwidth."""
    pdl_start(PDL)
    pdl_wait(PDL)
    qk_norm_rope_body(raw_ptr, qk_norm_ptr, cos_ptr, sin_ptr, tl.load(pos_ptr), q_ptr, k_ptr, T,
                      S, eps, H, KVH, HD, tl.program_id(0), GROUP, BLOCK_SLOT, BLOCK_HALF,
                      QK_NORM)


def qkv_tile(head_dim: int, qk_norm: bool, T: int, K: int, device, pairs=None,
             stream: StreamConfig | None = None, defer: bool = False, elem_bytes: int = 2):
    """(BLOCK_H rotation pairs, BLOCK_K, num_warps, stream) of a QKV + RoPE tile.
    stream (T=1): the megakernel's decode stream, lo + hi rows of about stream.elems(0) (QKV's)
    elements (q/k norm: whole heads, K chunked to the same tile elements; defer
    (defer_qk_norm): the q/k norm runs in qk_norm_rope_body, so any tile). elem_bytes: the
    weights' element size (config.gemv_config's tile of several rows)."""
    if stream is not None and T == 1:
        elems = stream.elems(0)
        cfg = stream.tile(K, elems=elems)
        bh = qkv_pairs(head_dim, qk_norm and not defer, T, max(1, cfg.block_n // 2))
        bk = max(16, min(cfg.block_k, elems // (2 * bh)))
        return bh, bk, stream.num_warps, True
    cfg = fp8_tile(gemv_config(K * 4, K, T, device, elem_bytes=elem_bytes), elem_bytes, T)
    whole = qk_norm and not defer
    if pairs is not None and not whole and T == 1:
        bh = triton.next_power_of_2(pairs)
    else:
        bh = qkv_pairs(head_dim, whole, T, cfg.block_n)
    # the tuned GEMV tile's elements (config.py) over both halves' rows (FP8 tl.dot tiles: K
    # chunks within a scale group, fp8_tile)
    bk = max(16, min(cfg.block_k, cfg.block_n * cfg.block_k // bh))
    return bh, bk, cfg.num_warps, False


def qkv_rope(x, w_qkv, norm_w, cos, sin, pos, k_cache, v_cache, *, n_heads, eps, bias=None,
             qk_norm=None, q_out=None, pairs=None, stream: StreamConfig | None = None, raw=None,
             qk_norm_after: bool = False, qk_norm_full: bool = False):
    """x [T, d]; w_qkv [(H+2KVH)*hd, d]; norm_w [d] (None: x not normalized, a model without
    norms before its blocks); cos/sin [S, hd/2] fp32; pos int32 [1] on device;
    k_cache/v_cache [KVH, S, hd] of one layer (written at rows pos..pos+T-1); qk_norm [H + KVH,
    hd], a row per head slot, or None (qk_norm_after: applied after RoPE; qk_norm_full: one norm
    over all q heads and one over all k heads, QK_NORM_FULL); pairs: rotation pairs per program
    (default: config.py's tile); stream: the megakernel's decode tile (qkv_tile); raw: fp32
    scratch of >= T * (H + KVH) * hd for the deferred q/k norm (defer_qk_norm; allocated if
    None). Returns q [T, H, hd]."""
    T, K = x.shape
    KVH, S, HD = k_cache.shape
    if q_out is None:
        q_out = torch.empty(T, n_heads, HD, device=x.device, dtype=k_cache.dtype)
    defer = defer_qk_norm(qk_norm is not None, T, qk_norm_full)
    if defer and raw is None:
        raw = torch.empty(T, n_heads + KVH, HD, device=x.device, dtype=torch.float32)
    BT = block_t(T)
    BLOCK_H, BLOCK_K, warps, streamed = qkv_tile(HD, qk_norm is not None, T, K, x.device, pairs,
                                                 stream, defer, w_qkv.element_size())
    n_chunks = triton.cdiv(HD // 2, BLOCK_H)
    G = n_heads // KVH
    per = stream.tiles if stream is not None else 1
    ptx = streamed and stream_ptx(stream, w_qkv.dtype, K, x.dtype)
    pdl = use_pdl(x.device)
    grid = (KVH, triton.cdiv((G + 2) * n_chunks * triton.cdiv(T, BT), per))
    qkv_rope_kernel[grid](x, w_qkv, norm_w if norm_w is not None else w_qkv,
                          bias if bias is not None else w_qkv,
                          qk_norm if qk_norm is not None else w_qkv, cos, sin, pos,
                          q_out, k_cache, v_cache, raw if defer else q_out, T, K, x.stride(0), S,
                          eps, n_heads, KVH, HD, G, n_chunks, per, BIAS=bias is not None,
                          QK_NORM=qk_norm_mode(qk_norm is not None and not defer, qk_norm_after),
                          BLOCK_T=BT, BLOCK_H=BLOCK_H,
                          BLOCK_K=BLOCK_K, STREAM=streamed,
                          F32=INTERPRET or torch.float32 in (w_qkv.dtype, x.dtype), DEFER=defer,
                          PTX=ptx,
                          PDL=pdl, STAGES=stream.op_stages()[0] if streamed else 1,
                          NORM=norm_w is not None, num_warps=warps, launch_pdl=pdl)
    if defer:
        qk_norm_rope_kernel[(KVH,)](raw, qk_norm, cos, sin, pos, q_out, k_cache, T, S, eps,
                                    n_heads, KVH, HD, G, BLOCK_SLOT=qk_norm_slots(G),
                                    BLOCK_HALF=triton.next_power_of_2(HD // 2), PDL=pdl,
                                    QK_NORM=qk_norm_mode(True, qk_norm_after, qk_norm_full),
                                    launch_pdl=pdl)
    return q_out
