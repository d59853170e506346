"""Device helpers shared by every op body: the streaming GEMV loop, row RMS statistics, matmul tiles.

Nothing here owns a launch; every function is @triton.jit and inlined into the op bodies, which in
turn are called by the standalone kernels and (next) the megakernel.
"""
import os

import triton
import triton.language as tl

from ..ptx_inline.fp8 import fp8x4_dot_f16
from ..ptx_inline.grid import grid_launch_dependents, grid_wait
from ..ptx_inline.memory import ld_stream_b128
from ._interpreter import share_patches

# Triton's CPU interpreter cannot do bf16 arithmetic or bf16 tl.dot correctly (KNOWLEDGE.md):
# on that path every tile is converted to fp32 first and dots run in IEEE fp32.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# inline PTX on the GPU, the wrappers' plain-Triton fallbacks under the interpreter
ASM: tl.constexpr = tl.constexpr(not INTERPRET)
if INTERPRET:
    share_patches()


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """A standalone kernel's first step under programmatic dependent launch (config.use_pdl): the
    next kernel may launch as soon as every program of this one has started."""
    if PDL:
        grid_launch_dependents(ASM)


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """Under PDL, before a kernel's first access to activations (anything a kernel writes or
    reads): the kernel before it has completed. Weight loads may be issued before it."""
    if PDL:
        grid_wait(ASM)


@triton.jit
def pdl_ready(PDL: tl.constexpr):
    """pdl_wait as a shared-memory stream's dependency wait (gemv.gemv_body's WAIT): the stream's
    first pieces are requested before it, inside the stream. Returns 1 (met)."""
    pdl_wait(PDL)
    return 1


@triton.jit
def sq_sum(x_ptr, stride_x, offs_t, mask_t, k0, K, BLOCK_K: tl.constexpr):
    """sum of x[t, k0:k0 + BLOCK_K]^2 (within K) for each row t, fp32 -> [BLOCK_T]."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    m = mask_t[:, None] & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_t[:, None] * stride_x + offs_k[None, :], mask=m, other=0.0)
    x = x.to(tl.float32)
    return tl.sum(x * x, axis=1)


@triton.jit
def row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K: tl.constexpr,
             K_CONST: tl.constexpr = 0):
    """1 / sqrt(mean(x[t, :K]^2) + eps) for each row t of a [T, K] activation (fp32 math) -> [BLOCK_T].
    K_CONST: K as a constexpr (0: not known at compile time) -- the chunks' loop unrolled, so it
    can sit inside a loop that Triton's pipeliner pipelines (it skips loops with a nested one)."""
    ss = tl.zeros([offs_t.shape[0]], dtype=tl.float32)
    if K_CONST > 0:
        for k0 in tl.static_range(0, K_CONST, BLOCK_K):
            ss += sq_sum(x_ptr, stride_x, offs_t, mask_t, k0, K_CONST, BLOCK_K)
    else:
        for k0 in range(0, K, BLOCK_K):
            ss += sq_sum(x_ptr, stride_x, offs_t, mask_t, k0, K, BLOCK_K)
    return 1.0 / tl.sqrt(ss / K + eps)


@triton.jit
def x_chunk_raw(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, K, NORM: tl.constexpr,
                BLOCK_K: tl.constexpr):
    """The loads of x_chunk, as stored (x [BLOCK_T, BLOCK_K] of rows offs_t, and norm_w [1,
    BLOCK_K] if NORM; else zeros of its dtype): a stream can request them an iteration before it
    converts them (x_chunk_apply), so their latency does not stall the iteration that requests
    them. One row (decode): row 0, whatever offs_t holds."""
    offs = k0 + tl.arange(0, BLOCK_K)
    m = offs < K
    if offs_t.shape[0] == 1:
        x = tl.load(x_ptr + offs, mask=m, other=0.0)[None, :]
    else:
        x = tl.load(x_ptr + offs_t[:, None] * stride_x + offs[None, :],
                    mask=mask_t[:, None] & m[None, :], other=0.0)
    nw = tl.zeros([1, BLOCK_K], dtype=norm_ptr.dtype.element_ty)
    if NORM:
        nw = tl.load(norm_ptr + offs, mask=m, other=0.0)[None, :]
    return x, nw


@triton.jit
def x_chunk_apply(x, nw, rstd, NORM: tl.constexpr):
    """x_chunk from x_chunk_raw's loads."""
    x = x.to(tl.float32)
    if NORM:
        x = x * rstd * nw.to(tl.float32)
    return x


@triton.jit
def x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, K, rstd, NORM: tl.constexpr,
            BLOCK_K: tl.constexpr):
    """Activation rows x[offs_t, k0 : k0 + BLOCK_K] as fp32 [BLOCK_T, BLOCK_K], times rstd
    [BLOCK_T, 1] * norm_w if NORM (the RMSNorm prologue). A few KB, served by L1 after the first
    tile of a decode task. (Measured and removed, H200, 2026-12-04, sweep_mega --model 1b
    --new-tokens 256, one process per variant: a decode stream's whole row and norm weights
    requested together, the statistics summed from those registers -- one round trip after the
    wait instead of row_rstd's and then this one's: megakernel 1287.2 / 1277.3 vs 1287.6 /
    1275.2 tok/s; trace_step's one-tile QKV tasks 1.82 vs 1.92 us from ready to stored.)"""
    x, nw = x_chunk_raw(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, K, NORM, BLOCK_K)
    return x_chunk_apply(x, nw, rstd, NORM)


@triton.jit
def stream_x0(x, x_ptr, norm_ptr, stride_x, offs_t, mask_t, K, eps, n_k, NORM: tl.constexpr,
              BLOCK_K: tl.constexpr, K_CONST: tl.constexpr = 0):
    """A shared-memory stream's activations at its first piece (gemv.gemv_body STAGES > 1), in the
    branch on its dependency wait's result (the pipeliner leaves those loads there, after the
    wait): (x, rstd) -- the norm's statistics if NORM (else zero), and x's chunk 0 if the rows
    are whole (n_k == 1; chunked rows load their chunk per piece, x returned as given).
    K_CONST: K as a constexpr (the megakernel's d_model; 0: not known) -- the statistics' chunk
    loop unrolled, so chunked rows keep the stream loop pipelined (row_rstd)."""
    rstd = tl.zeros([1, 1], dtype=tl.float32)
    if NORM:
        rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K, K_CONST)[:, None]
    if n_k == 1:
        x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, 0, K, rstd, NORM, BLOCK_K)
    return x, rstd


@triton.jit
def next_x_chunk(x, x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, K, n_k, rstd,
                 NORM: tl.constexpr, BLOCK_K: tl.constexpr):
    """The activation chunk at k0 for the next piece of a stream: loaded when rows span n_k > 1
    chunks; with whole rows the rows x already in registers (n_k is a constexpr when K is, as in
    the megakernel, and the branch folds away)."""
    x_n = x
    if n_k > 1:
        x_n = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, K, rstd, NORM, BLOCK_K)
    return x_n


# FP8 weights (quant.fp8_rows: an FP8 checkpoint's dense matrices kept 8-bit): a packed row holds
# its K e4m3 codes, then its fp32 scales, one per FP8_GROUP columns (the row's scale of each
# 128-column block: W[n, k] = code[n, k] * scale[n, k // FP8_GROUP]), padded to 16 bytes
# (row_elems), so an op reaches a row's scales from its codes' pointer alone, and the pieces of a
# stream are (codes, scales) pairs: the PTX constexpr FP8_PIECES (weight_chunk, row_partials);
# FP8_WORDS the same pieces with the codes as int32 words, dotted with f16 activations
# (config.StreamConfig.fp8_words); PTX >= FP8_PIECES: FP8 rows
FP8_GROUP = tl.constexpr(128)
FP8_PIECES = tl.constexpr(3)
FP8_WORDS = tl.constexpr(4)


@triton.jit
def row_elems(w_ptr, K):
    """Elements of W's dtype from one packed row to the next: K, or an FP8 row's bytes (its codes,
    its scales, the padding to 16 bytes)."""
    if w_ptr.dtype.element_ty == tl.float8e4nv:
        return (K + 4 * tl.cdiv(K, FP8_GROUP) + 15) // 16 * 16
    else:
        return K


@triton.jit
def weight_chunk(w_ptr, rows, mask_r, k0, K, BLOCK_K: tl.constexpr, PTX: tl.constexpr):
    """W[rows, k0 : k0 + BLOCK_K], the decode weight stream's piece. Masked rows cost no traffic,
    so a load past a task's end is free.
    Plain Triton (PTX 0): one [BLOCK_R, BLOCK_K] tile, loaded past L1 (evict_first; Triton
    emits 16-byte ld.global.L1::evict_first.L2::cache_hint.v4 loads for it). A bf16 tile lives
    in registers one element a register: its loads' words are split (PRMT) as they land, so a
    stream carrying a piece across its loop's back edge waits there for the piece (sm_90a SASS).
    PTX 1 (bf16 W, K % 8 == 0, 16-byte aligned rows): four int32 [BLOCK_R, BLOCK_K / 8] words of
    16-byte chunks, ptx_inline.ld_stream_b128 (ld.global.nc.L1::no_allocate.L2::256B.v4):
    one pointer per chunk, so each thread's 16 bytes are contiguous whatever the layout. The
    words are unpacked only where they are used (row_dot), so the loads stay in flight.
    PTX 2 (config.StreamConfig.words; the same rows): the same four words from one plain int32
    [BLOCK_R, BLOCK_K / 2] load (16-byte ld.global.L1::evict_first, as PTX 0's), split in
    registers (renames: each thread holds whole chunks) -- the PTX pieces' form without their
    cache operators.
    FP8_PIECES (W float8_e4m3 rows of row_elems): (codes [BLOCK_R, BLOCK_K] as plain PTX 0
    loads, their scales [BLOCK_R, max(BLOCK_K / FP8_GROUP, 1)] fp32 from the rows' tails -- 4
    bytes a 128 codes). FP8_WORDS: the codes as int32 words [BLOCK_R, BLOCK_K / 4] (four codes
    a word; 16-byte loads as PTX 2's), the same scales."""
    if PTX >= FP8_PIECES:
        base = rows[:, None].to(tl.int64) * row_elems(w_ptr, K)
        if PTX == FP8_WORDS:  # K % 16 == 0 (quant.fp8_rows): whole words, 16-byte rows
            j = k0 // 4 + tl.arange(0, BLOCK_K // 4)
            c = tl.load(w_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + base // 4
                        + j[None, :], mask=mask_r[:, None] & (j[None, :] < K // 4), other=0,
                        eviction_policy="evict_first")
        else:
            offs_k = k0 + tl.arange(0, BLOCK_K)
            c = tl.load(w_ptr + base + offs_k[None, :],
                        mask=mask_r[:, None] & (offs_k[None, :] < K), other=0.0,
                        eviction_policy="evict_first")
        GP: tl.constexpr = min(FP8_GROUP, BLOCK_K)
        g = k0 // FP8_GROUP + tl.arange(0, BLOCK_K // GP)
        s = tl.load(w_ptr.to(tl.pointer_type(tl.float32), bitcast=True) + (base + K) // 4
                    + g[None, :], mask=mask_r[:, None] & (g[None, :] * FP8_GROUP < K), other=0.0)
        return c, s
    elif PTX == 2:
        j = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        # K % 8 == 0: a mask of j < K / 2 is constant over each thread's 4 words (16-byte loads)
        w = tl.load(w_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
                    + rows[:, None].to(tl.int64) * (K // 2) + j[None, :],
                    mask=mask_r[:, None] & (j[None, :] < K // 2), other=0,
                    eviction_policy="evict_first")
        # word i of chunk c is column 4 c + i = 4 c + 2 (i >> 1) + (i & 1)
        lo, hi = tl.split(tl.reshape(w, [w.shape[0], BLOCK_K // 8, 2, 2]))  # i & 1
        w0, w2 = tl.split(lo)  # i >> 1
        w1, w3 = tl.split(hi)
        return w0, w1, w2, w3
    elif PTX:
        j = k0 // 8 + tl.arange(0, BLOCK_K // 8)
        ptrs = (w_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
                + rows[:, None].to(tl.int64) * (K // 2) + 4 * j[None, :])
        return ld_stream_b128(ptrs, mask_r[:, None] & (8 * j[None, :] < K), ASM)
    else:
        offs_k = k0 + tl.arange(0, BLOCK_K)
        return tl.load(w_ptr + rows[:, None].to(tl.int64) * K + offs_k[None, :],
                       mask=mask_r[:, None] & (offs_k[None, :] < K), other=0.0,
                       eviction_policy="evict_first")


@triton.jit
def bf16_word_dot(w, xl, xh):
    """The two bf16 of int32 words w (element 2i in the low half, little-endian) times xl, xh in
    fp32: a bf16 is the top half of an fp32, so each conversion is a shift or a mask (exact)."""
    return (w << 16).to(tl.float32, bitcast=True) * xl + \
        (w & -65536).to(tl.float32, bitcast=True) * xh


@triton.jit
def f16_pairs(x):
    """An activation chunk x [1, BLOCK_K] (fp32) as the f16 pairs FP8_WORDS dots with its code
    words: (xa, xb) int32 [1, BLOCK_K / 4], word j of xa holding x[4j] * 2^-8 (its low half) and
    x[4j + 1] * 2^-8, of xb x[4j + 2] and x[4j + 3]. The 2^-8 (exact) keeps a code (|c| <= 448)
    times x within f16 for |x| < ~37000; an x under ~0.016 lands in f16's subnormals (absolute
    error <= 2^-25 of the scaled value)."""
    h = (x * 0.00390625).to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 65535
    lo, hi = tl.split(tl.reshape(h, [1, x.shape[1] // 4, 2, 2]))  # x[4j + 2a + b]: b
    p = lo | (hi << 16)  # [1, BLOCK_K / 4, 2 (a)]
    return tl.split(p)


@triton.jit
def row_partials(w, x, PTX: tl.constexpr):
    """A weight piece (weight_chunk) times its activation chunk x [1, BLOCK_K], summed only over
    each 16-byte chunk of a row -> [BLOCK_R, BLOCK_K * bytes / 16] fp32: sums within a thread
    (each thread loads whole 16-byte chunks), no shuffles, no shared memory, no barrier. A stream
    over rows chunked along K adds these up over a tile's chunks and reduces across threads once
    per tile (row_sum) instead of once per piece. PTX: row_dot's word products before its sum;
    FP8_PIECES: [BLOCK_R, max(BLOCK_K / FP8_GROUP, 1)], each scale group's sum times its
    scale. FP8_WORDS: the same sums, each word's four products by ptx_inline.fp8x4_dot_f16 with
    the activations as f16 pairs of x * 2^-8 (f16_pairs; the scales times 2^8): each product
    and each pair of them rounded to f16 (relative 2^-11 a product, against the fp32 path's
    none), for bf16 / fp16 activations (config.StreamConfig.fp8_words)."""
    if PTX == FP8_WORDS:
        c, s = w
        BK: tl.constexpr = 4 * c.shape[1]
        GP: tl.constexpr = min(FP8_GROUP, BK)
        xa, xb = f16_pairs(x)
        d = fp8x4_dot_f16(c, xa, xb, ASM)
        return tl.sum(tl.reshape(d, [c.shape[0], BK // GP, GP // 4]), axis=2) * (s * 256.0)
    elif PTX == FP8_PIECES:
        c, s = w
        GP: tl.constexpr = min(FP8_GROUP, c.shape[1])
        p = c.to(tl.float32) * x
        return tl.sum(tl.reshape(p, [c.shape[0], c.shape[1] // GP, GP]), axis=2) * s
    elif PTX:
        x0, x1 = tl.split(tl.reshape(x, [1, x.shape[1] // 8, 2, 2, 2]))  # h
        x00, x01 = tl.split(x0)  # i & 1
        x10, x11 = tl.split(x1)
        x000, x001 = tl.split(x00)  # i >> 1: x_{h, i & 1, i >> 1}
        x010, x011 = tl.split(x01)
        x100, x101 = tl.split(x10)
        x110, x111 = tl.split(x11)
        acc = bf16_word_dot(w[0], x000, x100) + bf16_word_dot(w[1], x010, x110)
        acc += bf16_word_dot(w[2], x001, x101) + bf16_word_dot(w[3], x011, x111)
        return acc
    else:
        V: tl.constexpr = min(128 // w.dtype.primitive_bitwidth, w.shape[1])
        p = w.to(tl.float32) * x
        return tl.sum(tl.reshape(p, [w.shape[0], w.shape[1] // V, V]), axis=2)


@triton.jit
def row_sum(partials):
    """row_partials (or their sum over a tile's chunks) -> the rows' dot products [1, BLOCK_R]."""
    return tl.sum(partials, axis=1)[None, :]


@triton.jit
def row_dot(w, x, PTX: tl.constexpr):
    """A weight piece (weight_chunk) . its activation chunk x [1, BLOCK_K] -> [1, BLOCK_R] fp32.
    PTX: w is four int32 words [R, BLOCK_K / 8] of 16-byte chunks; x is split the same way
    (element 8 j + 2 i + h of x meets half h of word i of chunk j): reshaped to
    [1, BLOCK_K / 8, 2 (i >> 1), 2 (i & 1), 2 (h)] and split on its last axis three times --
    in-register renames when each thread holds whole chunks of x, as the loads give it."""
    if PTX:  # words, FP8 pieces
        return row_sum(row_partials(w, x, PTX))
    else:
        return tl.sum(w.to(tl.float32) * x, axis=1)[None, :]


@triton.jit
def piece_dot(w, x, F32: tl.constexpr):
    """A weight piece w [BLOCK_R, BLOCK_K] (plain loads) against its activation chunk x
    [BLOCK_T, BLOCK_K] fp32 (x_chunk) -> [BLOCK_T, BLOCK_R] fp32. One row: row_dot, a register
    reduction of fp32 x. Several (BLOCK_T >= 16, a step of several rows): a tl.dot tile, x
    rounded to the weights' dtype."""
    if x.shape[0] == 1:
        return row_dot(w, x, False)
    else:
        return mm_tile(x.to(w.dtype), tl.trans(w), F32)


@triton.jit
def fp4_pairs(w, n: tl.constexpr):
    """Nibble n (0-3) of each 16-bit half of the MXFP4 code words w (uint32: eight OCP e2m1
    codes, nibble i the element 8 j + i; sign bit 3, exponent bits 2-1, mantissa bit 0) -> the
    values of elements 8 j + n and 8 j + 4 + n times 2^-14, fp32: the word shifted so both
    nibbles top their halves, its sign bits kept and its magnitudes' 3 bits moved to bits 9-11
    (the exponent's low two, the mantissa's top one) make each half the fp16 2^(e - 15) (1 + m /
    2), or for e = 0 the subnormal m 2^-15 -- the value times 2^-14, exact -- and fp16 -> fp32 is
    one conversion a half. Two elements a shift and a LOP3, no byte extraction: sm_90a SASS of
    gpt-oss's gate|up kernel, 385 instructions a K chunk's loop against 626 by bytes a nibble at
    a time; H100, sweep_moe --mxfp4, gpt-oss-20b, us: gate|up 27.7 vs 36.7, down 16.0 vs 23.3
    (bench/RESULTS.md session 62). (A decode by fp32 bits, (m << 22) + (126 << 23) with a
    select for m < 2, was slower still: 49.0 us, session 61.)"""
    t = w << (4 * (3 - n))
    h = (t & 0x80008000) | ((t >> 3) & 0x0E000E00)
    lo = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    hi = (h >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def mxfp4_dot(q, s, x):
    """MXFP4 rows (quant's "mxfp4": two e2m1 codes a byte, the low nibble the even element, one
    E8M0 exponent a 32 elements) against fp32 activations: q uint32 [R, BK / 8] code words
    (fp4_pairs), s uint8 [R, BK / 32], x [R or 1, BK] -> the group sums [R, BK / 32] fp32,
    2^(s_g - 127) sum_(k in g) fp4(code_k) x_k -- the caller adds them up over its chunks and
    reduces across the groups once, after its K loop (no cross-thread reduction a chunk). Each
    code's value is exact in fp32, so is its product with a bf16 x; the scale, a power of two,
    multiplies each group's sum, times 2^14 for fp4_pairs' 2^-14: fp32 bits (s + 14) << 23 (E8M0
    s > 240, 2^113 and up, would overflow them: no trained weight's scale). The eight values of
    each word are joined back into element order ([R, BK / 8, 8]: element 8 j + 4 a + 2 b + c at
    [j, a, b, c]) to meet x in its own order, so x is converted between layouts once, not split
    eight ways (sm_90a SASS: the gate|up kernel's K loop 768 instructions and no shuffles,
    against 819 with eight splits and a reduction a chunk; H200, sweep_moe --mxfp4, gpt-oss-20b:
    gate|up 24.05 against 25.24 us, down 14.52 against 15.16: bench/RESULTS.md session 63).
    BK % 32 == 0."""
    v0, v4 = fp4_pairs(q, 0)
    v1, v5 = fp4_pairs(q, 1)
    v2, v6 = fp4_pairs(q, 2)
    v3, v7 = fp4_pairs(q, 3)
    v = tl.join(tl.join(tl.join(v0, v4), tl.join(v2, v6)),
                tl.join(tl.join(v1, v5), tl.join(v3, v7)))
    R: tl.constexpr = q.shape[0]
    G: tl.constexpr = q.shape[1] // 4
    p = tl.reshape(v, [R, G, 32]) * tl.reshape(x, [x.shape[0], G, 32])
    g = tl.sum(p, axis=2)
    return g * ((s.to(tl.int32) + 14) << 23).to(tl.float32, bitcast=True)


@triton.jit
def soft_cap(x, cap):
    """cap tanh(x / cap) (Gemma 2's soft-capping of attention scores and logits), as sign(x)
    cap (1 - e) / (1 + e), e = exp(-2 |x| / cap): no overflow, and no tanh (which Triton's
    interpreter lacks); absolute error ~ cap 2^-24 (near 0, 1 - e cancels to e's last bit)."""
    e = tl.exp(-2.0 * tl.abs(x) / cap)
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t) * cap


@triton.jit
def round_bf16(x):
    """fp32 x rounded to the nearest bf16 (ties to even), as fp32 -- torch's .bfloat16() of a
    finite value. By its bits: Triton's interpreter casts to bf16 by truncation."""
    b = x.to(tl.uint32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.to(tl.float32, bitcast=True)


@triton.jit
def mm_tile(a, b, F32: tl.constexpr):
    """a [M, K] @ b [K, N] with fp32 accumulation; bf16/fp16 operands on the GPU, IEEE fp32 under
    the interpreter (F32)."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b.to(a.dtype))


@triton.jit
def mxfp4_load(q_ptr, s_ptr, rows, mask_r, k0, k_hi, K, BLOCK_K: tl.constexpr):
    """MXFP4 rows `rows` of W [N, K] (codes q_ptr [N, K / 2], scales s_ptr [N, K / 32]) over
    columns [k0, k0 + BLOCK_K) below k_hi -> (q uint32 [R, BLOCK_K / 8] code words, s uint8 [R,
    BLOCK_K / 32]) for mxfp4_dot. (sm_90a: 8-byte loads, 2 words a thread in the layout the
    compiler gives the words -- the same with k0 / 8 written as a multiple of 4; the measured
    form.)"""
    b = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    g = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    r = rows[:, None].to(tl.int64)
    q = tl.load(q_ptr.to(tl.pointer_type(tl.uint32)) + r * (K // 32) * 4 + b[None, :],
                mask=mask_r[:, None] & (b < k_hi // 8)[None, :], other=0,
                eviction_policy="evict_first")
    s = tl.load(s_ptr + r * (K // 32) + g[None, :],
                mask=mask_r[:, None] & (g < k_hi // 32)[None, :], other=0)
    return q, s


@triton.jit
def gemv_acc(x_ptr, stride_x, offs_t, mask_t, rstd, norm_ptr, w_ptr, rows, rows2, mask_r, K,
             k_lo, k_hi, NORM: tl.constexpr, TWO: tl.constexpr, BLOCK_K: tl.constexpr,
             F32: tl.constexpr, s_ptr=None, W4: tl.constexpr = False):
    """Stream W[rows, k_lo:k_hi] (and W[rows2, k_lo:k_hi] if TWO) against the T activation
    rows; W's rows hold K elements (the whole row: k_lo 0, k_hi K; a K part of a split tile:
    gemv.gemv_tile's KSPLIT).

    acc[t, r] = sum_k xn[t, k] * W[rows[r], k], xn = x * rstd * norm_w if NORM else x.
    Returns (acc, acc2), each [BLOCK_T, BLOCK_R] fp32 (acc2 is zeros unless TWO).
    Each K chunk is x_chunk's rows against the weights by piece_dot: T == 1 (BLOCK_T == 1) in
    fp32 registers (decode: a pure weight stream); BLOCK_T >= 16 on tl.dot tiles with M padded
    to BLOCK_T (prefill / verify chunks).
    Weights are row-major [N, K]: each program reads BLOCK_R contiguous rows, BLOCK_K at a time.
    W4 (BLOCK_T 1; K and BLOCK_K multiples of 32): W is MXFP4, w_ptr its codes [N, K / 2] uint8
    and s_ptr its E8M0 scales [N, K / 32] (mxfp4_load, mxfp4_dot), each chunk's codes requested
    while the chunk before is decoded -- the decode, not HBM, is the bound (H100, sweep_moe
    --mxfp4, gpt-oss-20b's gate|up: 25.7 us against 27.7 one chunk at a time; bench_decode
    425.3 against 414.2 tok/s: bench/RESULTS.md session 62).
    FP8 W (float8_e4m3 rows of row_elems: quant.fp8_rows), known from w_ptr's type: T = 1 by
    row_dot's scaled group sums, T > 1 on tl.dot tiles of the codes (exact in bf16 / fp16) with
    each chunk's product times its rows' scales (BLOCK_K <= FP8_GROUP: config.fp8_tile).
    """
    BLOCK_T: tl.constexpr = offs_t.shape[0]
    BLOCK_R: tl.constexpr = rows.shape[0]
    acc = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
    if W4:
        q, s = mxfp4_load(w_ptr, s_ptr, rows, mask_r, k_lo, k_hi, K, BLOCK_K)
        q2, s2 = q, s
        g = tl.zeros([BLOCK_R, BLOCK_K // 32], dtype=tl.float32)
        g2 = tl.zeros([BLOCK_R, BLOCK_K // 32], dtype=tl.float32)
        if TWO:
            q2, s2 = mxfp4_load(w_ptr, s_ptr, rows2, mask_r, k_lo, k_hi, K, BLOCK_K)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            qn, sn = mxfp4_load(w_ptr, s_ptr, rows, mask_r, k0 + BLOCK_K, k_hi, K, BLOCK_K)
            q2n, s2n = qn, sn
            if TWO:
                q2n, s2n = mxfp4_load(w_ptr, s_ptr, rows2, mask_r, k0 + BLOCK_K, k_hi, K, BLOCK_K)
            x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, k_hi, rstd[:, None], NORM,
                        BLOCK_K)
            g += mxfp4_dot(q, s, x)
            if TWO:
                g2 += mxfp4_dot(q2, s2, x)
            q, s, q2, s2 = qn, sn, q2n, s2n
        acc += tl.sum(g, axis=1)[None, :]
        acc2 += tl.sum(g2, axis=1)[None, :]
    else:
        # FP8 weights: T = 1 by row_dot's scaled group sums; tl.dot tiles (BLOCK_K <=
        # FP8_GROUP: one scale a row a chunk) on the codes as the activations' dtype (exact),
        # each chunk's product times its rows' scales
        FP8: tl.constexpr = w_ptr.dtype.element_ty == tl.float8e4nv
        PM: tl.constexpr = FP8_PIECES if FP8 else 0
        for k0 in range(k_lo, k_hi, BLOCK_K):
            # (k_hi is K or a whole number of BLOCK_K chunks: weight_chunk's mask k < K is k_hi's)
            w = weight_chunk(w_ptr, rows, mask_r, k0, K, BLOCK_K, PM)
            w2 = w
            if TWO:
                w2 = weight_chunk(w_ptr, rows2, mask_r, k0, K, BLOCK_K, PM)
            x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, k0, k_hi, rstd[:, None], NORM,
                        BLOCK_K)
            if FP8:
                if BLOCK_T > 1:
                    tl.static_assert(BLOCK_K <= FP8_GROUP, "an FP8 tile's chunk has one scale")
                    XT: tl.constexpr = tl.float32 if F32 else x_ptr.dtype.element_ty
                    acc += piece_dot(w[0].to(XT), x, F32) * tl.reshape(w[1], [BLOCK_R])[None, :]
                    if TWO:
                        acc2 += piece_dot(w2[0].to(XT), x, F32) * \
                            tl.reshape(w2[1], [BLOCK_R])[None, :]
                else:
                    acc += row_dot(w, x, PM)
                    if TWO:
                        acc2 += row_dot(w2, x, PM)
            else:
                acc += piece_dot(w, x, F32)
                if TWO:
                    acc2 += piece_dot(w2, x, F32)
    return acc, acc2
