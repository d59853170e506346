"""GEMV / skinny GEMM with fused prologue and epilogue.

    y[t, n] = epilogue( sum_k prologue(x)[t, k] * W[n, k] )
    prologue: RMSNorm of the input row (NORM):  x * rsqrt(mean(x^2) + eps) * norm_w
    epilogue: + bias[n] (BIAS);  act(y_gate) * y_up with W = [gate; up] stacked [2N, K] (SWIGLU:
              ACT_CODES' code of act -- 1 silu (SwiGLU), 2 the tanh GELU (GeGLU: Gemma), 3
              relu^2, 4 the erf GELU, 5 relu, 6 xIELU, 7 gpt-oss's clamped SwiGLU, its own up
              term); or, SWIGLU negative (an MLP without a gate: Arcee, StarCoder2, GPT-NeoX,
              OPT, Apertus), act(y) of W [N, K];
              + residual[t, n] (RESIDUAL, may alias the output: the residual stream updated in place)
experts (a mixture's, EXPERTS): W [E, N or 2N, K] stacked (a bias [E, N or 2N] too), and each
program pair p (grid axis 1) runs the GEMV of expert ids[p] on x row p // x_div (gate|up: a
token's row for each of its top_k experts) into out row p; the router's ids are read after
pdl_wait, the weights after them.

Shapes: x [T, K] (bf16/fp16/fp32), W [N or 2N, K] row-major, y [T, N]. fp32 accumulation.
Roofline (decode, T=1): bytes = N*K*2 (weights, bf16) + small; at the ~4.46 TB/s a read-only stream
reaches on an H200 (KNOWLEDGE.md), e.g. 2048x8192 gate|up of Llama-3.2-1B = 67 MB -> 15 us.
"""
import torch
import triton
import triton.language as tl

from ._common import (FP8_GROUP, FP8_PIECES, INTERPRET, gemv_acc, next_x_chunk, pdl_ready,
                      pdl_start, pdl_wait, row_dot, row_partials, row_rstd, row_sum, stream_x0,
                      weight_chunk, x_chunk, x_chunk_apply, x_chunk_raw)
from ..spec import OAI_SWIGLU
from .config import (StreamConfig, TileConfig, fp8_tile, gemv_config, gemv_stream, row_elems,
                     stream_ptx, use_pdl)

# the MLP epilogue's activations, by ModelSpec.act: the SWIGLU constexpr's magnitude (glu_code)
ACT_CODES = {"silu": 1, "gelu_tanh": 2, "relu2": 3, "gelu": 4, "relu": 5, "xielu": 6,
             "swiglu_oai": 7}
# xIELU (Apertus: arXiv 2411.13010, HF's XIELUActivation) has two learned scalars a layer, alpha_p
# and alpha_n (after their softplus), which ride in the MLP's bias operands: the "bias" rows of
# an xIELU MLP are [alpha_p x N | alpha_n x N] (PackedWeights.b_gu), no bias is added, and its
# beta and eps are HF's fixed buffers (packing checks a checkpoint's)
XIELU = tl.constexpr(6)
XIELU_BETA = tl.constexpr(0.5)
XIELU_EPS = tl.constexpr(-1e-6)
# gpt-oss's clamped SwiGLU (spec.OAI_SWIGLU: configs with other values are refused)
OAI = tl.constexpr(7)
OAI_ALPHA = tl.constexpr(OAI_SWIGLU[0])
OAI_LIMIT = tl.constexpr(OAI_SWIGLU[1])


def act_operand_rows(act: str, gated: bool) -> int:
    """N-long rows of an MLP's bias operand a layer (PackedWeights.b_gu): gate's and up's with a
    gate, up's alone without, xIELU's alpha_p and alpha_n."""
    return 2 if gated or act == "xielu" else 1


def glu_code(act: str, gated: bool = True) -> int:
    """The SWIGLU constexpr of the MLP's epilogue: act's code, positive with a gate (act(gate) *
    up over W = [gate; up]: two matrices a tile), negative without (act(up) over W = up); gpt-
    oss's clamped SwiGLU needs its gate (its own up term)."""
    if act == "swiglu_oai" and not gated:
        raise ValueError("the clamped SwiGLU (swiglu_oai) acts on a gate and an up row: gated")
    return ACT_CODES[act] if gated else -ACT_CODES[act]


# an MXFP4 expert GEMV's tile (gemv's scales): 8 rows (and their 8 up rows) of 512 bytes -- 1024
# elements, 16 code words a thread a row at 4 warps (_common.mxfp4_dot). H100, sweep_moe --mxfp4
# (bench/RESULTS.md session 62), gpt-oss-20b's gate|up of 4 experts, the word decode with the
# next chunk requested ahead, us: 25.7 against 16 x 1024 28.6, 4 x 1024 28.7, 8 x 1024 at 8
# warps 31.4, 4 / 8 x 2048 38.1 / 40.6; one chunk at a time 8 x 1024 27.5-27.7, 8 x 512 31.5.
MXFP4_TILE = TileConfig(block_n=8, block_k=1024, num_warps=4)
# FP8 experts' gate|up tile (quant.fp8_rows; dense FP8 rows: config.FP8_DECODE_TILE's 2 rows):
# 4 rows (and their 4 up rows) of 2048 codes at 4 warps -- H100, sweep_moe --fp8 (bench/
# RESULTS.md session 67), the top_k experts' gate|up, us: OLMoE-1B-7B (top 8, 1024 x 2048)
# 14.42 against 16.01-16.20 at 2 x 2048, 15.67 at 8 x 1024, 16.95 at 4 x 1024, 17.30 at 8 x
# 2048 x 8 warps; Qwen1.5-MoE (top 4, 1408 x 2048) 11.17 against 12.06-12.12 at 2 x 2048
FP8_EXPERTS_TILE = TileConfig(block_n=4, block_k=2048, num_warps=4)


GELU_C = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi): gelu_tanh(x) = x sigmoid(2 GELU_C (x + 0.044715 x^3))
SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2): gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))


@triton.jit
def epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, offs_n, mask_n, N, stride_res,
                      BIAS: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr):
    """(bias, up-bias, residual) of a [BLOCK_T, BLOCK_N] tile as fp32 (zeros where unused).
    Loaded a tile ahead in the decode stream: a load here costs an L2 round trip per tile."""
    b = tl.zeros([1, offs_n.shape[0]], dtype=tl.float32)
    b2 = b
    r = tl.zeros([offs_t.shape[0], offs_n.shape[0]], dtype=tl.float32)
    if BIAS:
        b = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        if SWIGLU > 0 or SWIGLU == -XIELU:  # the up rows' bias; xIELU's alpha_n
            b2 = tl.load(bias_ptr + N + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + offs_t[:, None] * stride_res + offs_n[None, :],
                    mask=mask_t[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    return b, b2, r


@triton.jit
def gemv_epilogue(acc, acc2, b, b2, r, SWIGLU: tl.constexpr):
    """(acc + bias) [act(gate) * (up + up-bias)] + residual on fp32 tiles (glu_code: SWIGLU >
    0; < 0 act(acc + bias), an MLP without a gate). act by its ACT_CODES code: silu and the tanh
    GELU are both g sigmoid(z) -- silu z = g; torch's tanh GELU 0.5 g (1 + tanh(u)), u = GELU_C
    (g + 0.044715 g^3), is g sigmoid(2u) (1 + tanh(u) = 2 sigmoid(2u)): one exp, no tanh (which
    Triton's interpreter lacks), an fp32 ulp or two from torch's tanh form where it does not
    cancel; relu2 max(g, 0)^2; the erf GELU 0.5 g (1 + erf(g / sqrt(2))) (torch's exact GELU,
    HF's "gelu"); relu max(g, 0) (OPT); xIELU (b, b2: alpha_p, alpha_n, not a bias) alpha_p g^2
    + beta g where g > 0, else alpha_n (expm1(min(g, eps)) - g) + beta g -- expm1 by Kahan's
    (u - 1) m / log(u), u = e^m, to an ulp or two (u - 1 where m < -1, past its cancellation);
    gpt-oss's (OAI) c sigmoid(alpha c) (clamp(up, -limit, limit) + 1), c = min(g, limit).
    (Written inline: the same math through a helper function cost the Llama-3.1-8B megakernel
    4 B more spills, compile_check sm_90a.)"""
    if SWIGLU != -XIELU:
        acc += b
    if SWIGLU != 0:
        CODE: tl.constexpr = SWIGLU if SWIGLU > 0 else -SWIGLU
        up = acc2 + b2 if SWIGLU > 0 else 1.0
        if CODE == 3:
            g = tl.maximum(acc, 0.0)
            acc = g * g * up
        elif CODE == 4:
            acc = 0.5 * acc * (1.0 + tl.math.erf(acc * SQRT1_2)) * up
        elif CODE == 5:
            acc = tl.maximum(acc, 0.0) * up
        elif CODE == OAI:
            c = tl.minimum(acc, OAI_LIMIT)
            acc = c / (1.0 + tl.exp(-OAI_ALPHA * c)) * \
                (tl.minimum(tl.maximum(up, -OAI_LIMIT), OAI_LIMIT) + 1.0)
        elif CODE == XIELU:
            m = tl.minimum(acc, XIELU_EPS)
            u = tl.exp(m)
            em1 = tl.where(m < -1.0, u - 1.0, (u - 1.0) * m / tl.log(u))
            acc = tl.where(acc > 0.0, b * acc * acc, b2 * (em1 - acc)) + XIELU_BETA * acc
        else:
            z = acc
            if CODE == 2:
                z = (2.0 * GELU_C) * (acc + 0.044715 * acc * acc * acc)
            acc = acc / (1.0 + tl.exp(-z)) * up
    return acc + r


@triton.jit
def tile_rstd(x_ptr, stride_x, T, K, eps, pid_t, NORM: tl.constexpr, BLOCK_T: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """The RMSNorm statistics [BLOCK_T] of token block pid_t's rows (_common.row_rstd; zeros
    unless NORM), computed once per task for all its tiles (gemv_tile's rstd): a task of several
    tiles re-reading x over K per tile paid a dependent round of loads per K chunk each time --
    the 1B's lm_head task of a multi-row step runs ~15 tiles (RESULTS.md session 39; its chunk
    loop unrolled at d_model grew a rows step's code from 118 / 120 KB to 161 / 212 KB on the
    1B / 8B: not kept untimed)."""
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    if NORM:
        return row_rstd(x_ptr, stride_x, offs_t, offs_t < T, K, eps, BLOCK_K)
    else:
        return tl.zeros([BLOCK_T], dtype=tl.float32)


@triton.jit
def gemv_tile(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, T, N, K, stride_x, stride_res, rstd,
              pid_n, pid_t,
              NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              F32: tl.constexpr, kpart=0, KSPLIT: tl.constexpr = 1, s_ptr=None,
              W4: tl.constexpr = False):
    """One [BLOCK_T, BLOCK_N] output tile in fp32 registers, K streamed BLOCK_K at a time, epilogue
    applied; rstd: tile_rstd of token block pid_t. Returns (y, offs_t, mask_t, offs_n, mask_n).
    W4: W is MXFP4 (codes w_ptr, scales s_ptr: _common.gemv_acc).
    KSPLIT > 1: only part kpart of the KSPLIT parts of whole BLOCK_K chunks K is cut into (the
    last ones may be short or empty: zeros) -- a partial sum, which the caller stores for a
    fixed-order reduction."""
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    k_lo = 0
    k_hi = K
    if KSPLIT > 1:
        per = tl.cdiv(tl.cdiv(K, BLOCK_K), KSPLIT) * BLOCK_K
        k_lo = kpart * per
        k_hi = tl.minimum(K, k_lo + per)
    acc, acc2 = gemv_acc(x_ptr, stride_x, offs_t, mask_t, rstd, norm_ptr, w_ptr, offs_n, offs_n + N,
                         mask_n, K, k_lo, k_hi, NORM, SWIGLU > 0, BLOCK_K, F32, s_ptr, W4)
    b, b2, r = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, offs_n, mask_n, N, stride_res,
                                 BIAS, SWIGLU, RESIDUAL)
    return gemv_epilogue(acc, acc2, b, b2, r, SWIGLU), offs_t, mask_t, offs_n, mask_n


@triton.jit
def stream_piece(w_ptr, N, K, tile_lo, i, n_it, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 TWO: tl.constexpr, PTX: tl.constexpr):
    """Piece i of a decode-stream task over row tiles from tile_lo of W [N (x2 if TWO), K]: rows
    of tile tile_lo + i // n_k, K chunk i % n_k (n_k = cdiv(K, BLOCK_K)); a piece at or past
    n_it is masked off (no traffic). -> (w, w2), w2 the up rows if TWO."""
    n_k = tl.cdiv(K, BLOCK_K)
    rows = (tile_lo + i // n_k) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < N) & (i < n_it)
    k0 = (i % n_k) * BLOCK_K
    w = weight_chunk(w_ptr, rows, mask, k0, K, BLOCK_K, PTX)
    w2 = w
    if TWO:
        w2 = weight_chunk(w_ptr, rows + N, mask, k0, K, BLOCK_K, PTX)
    return w, w2


@triton.jit
def stream_start(w_ptr, N, K, tile_lo, tile_hi, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 TWO: tl.constexpr, STREAM: tl.constexpr, PTX: tl.constexpr):
    """The first piece of a decode-stream task over row tiles [tile_lo, tile_hi) of W [N (x2 if
    TWO: gate|up), K]: its weights only. They depend on nothing, so the megakernel requests them
    before the task's dependency wait and the wait hides their latency. (0, 0) unless STREAM."""
    if STREAM:
        rows = tile_lo * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_r = (rows < N) & (tile_hi > tile_lo)
        w = weight_chunk(w_ptr, rows, mask_r, 0, K, BLOCK_K, PTX)
        w2 = w
        if TWO:
            w2 = weight_chunk(w_ptr, rows + N, mask_r, 0, K, BLOCK_K, PTX)
        return w, w2
    else:
        return 0, 0


@triton.jit
def stream_reduce(w, w2, x, acc, acc2, accp, accp2, b, b2, r, i, n_it, tile_lo, bias_ptr, res_ptr,
                  out_ptr, N, K, stride_res, offs_t, mask_t, BIAS: tl.constexpr,
                  SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, PTX: tl.constexpr):
    """Piece i of gemv_body's register stream, (w, w2) with its activation chunk x, reduced into
    the tile's sums; at the tile's last chunk the epilogue, the store, and the next tile's bias
    / residual requested. -> (acc, acc2, accp, accp2, b, b2, r)."""
    n_k = tl.cdiv(K, BLOCK_K)
    if n_k > 1:
        accp += row_partials(w, x, PTX)
        if SWIGLU > 0:
            accp2 += row_partials(w2, x, PTX)
    else:
        acc += row_dot(w, x, PTX)
        if SWIGLU > 0:
            acc2 += row_dot(w2, x, PTX)
    if i % n_k == n_k - 1:  # the tile's last chunk: epilogue, store, next tile's operands
        if n_k > 1:
            acc = row_sum(accp)
            acc2 = row_sum(accp2)
            accp = tl.zeros_like(accp)
            accp2 = accp
        rows1 = (tile_lo + (i + 1) // n_k) * BLOCK_N + tl.arange(0, BLOCK_N)
        b_n, b2_n, r_n = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, rows1,
                                           (rows1 < N) & (i + 1 < n_it), N, stride_res, BIAS,
                                           SWIGLU, RESIDUAL)
        y = gemv_epilogue(acc, acc2, b, b2, r, SWIGLU)
        offs_n = (tile_lo + i // n_k) * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(out_ptr + offs_n[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=mask_t[:, None] & (offs_n < N)[None, :])
        acc = tl.zeros_like(acc)
        acc2 = acc
        b, b2, r = b_n, b2_n, r_n
    return acc, acc2, accp, accp2, b, b2, r


@triton.jit
def gemv_body(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x, stride_res,
              stride_out, eps, tile_lo, tile_hi, pid_t, w0, w20,
              NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              STREAM: tl.constexpr, F32: tl.constexpr, PTX: tl.constexpr,
              STAGES: tl.constexpr = 1, WAIT: tl.constexpr = None, wargs=None,
              K_CONST: tl.constexpr = 0, kpart=0, KSPLIT: tl.constexpr = 1, s_ptr=None,
              W4: tl.constexpr = False):
    """Output tiles [tile_lo, tile_hi) of BLOCK_N rows for token block pid_t; (w0, w20): the
    first piece from stream_start (STREAM) or ignored. Returns 1, or WAIT's result.

    STREAM (decode, T=1): the task is one continuous weight stream of (tile, K chunk) pieces;
    each iteration first requests the next piece (weights, activation chunk, and at a tile's
    last chunk the next tile's bias/residual), then reduces the current one, so the next
    piece's load overlaps the current one's reduction (the megakernel runs one or two programs
    per SM and needs ~32 KB of loads in flight per SM to cover HBM latency). With bf16 pieces
    the iteration then waits at its back edge for the piece it requested (_common.weight_chunk:
    one piece in flight, not two); the word pieces (PTX 1 / 2) carry it in flight. BLOCK_K < K
    chunks long rows so the activation chunk stays a few registers. The second piece requested
    right after the wait, with the activations (then piece i reduced before piece i + 2 is
    requested), measured slower with bf16 pieces (H200, 2026-12-04, 27e5351 + an ad hoc
    constant in this body, qkv_rope_body and lm_head_body; Llama-3.2-1B table config, one
    process per variant, interleaved, tok/s): QKV tasks only 1224.9 / 1223.7, with x's loads
    issued before it 1214.9 / 1232.4 / 1227.4, QKV and lm_head 1230.8 / 1228.7, every op
    1120.9 / 1118.5 (124 B of spills), against 1267.0-1278.8 as it is -- in its SASS each bf16
    piece is split (PRMT) 68-126 instructions after its request, so nothing overlapped the
    wait. With PTX pieces the QKV change gains (1258.8 / 1257.4 vs 1235.3 / 1235.1) but stays
    below the plain stream (bench/RESULTS.md session 46). With word pieces the loop unrolled by
    two (piece i + 1 requested, piece i reduced, piece i + 2 requested into piece i's registers,
    piece i + 1 reduced: no register moves left at its back edges in the SASS) ran slower,
    1239.3 / 1237.0 vs 1289.5 / 1294.5 tok/s (session 47; 255 vs 199 registers, code 150.4 vs
    125.4 KB). Otherwise each tile loops over K on its own (ops mode: many programs per SM
    supply the loads in flight; T>1: tl.dot tiles).
    PTX (STREAM, bf16 weights): the pieces are loaded as int32 words, by inline PTX (1) or plain
    loads (2) (_common.weight_chunk).
    STAGES > 1 (STREAM, not PTX): one load of piece i per iteration, which Triton's loop
    pipeliner turns into cp.async copies to shared memory issued STAGES - 1 iterations ahead --
    the pieces in flight wait in shared memory, not registers. The task's dependency wait
    WAIT(*wargs) (the megakernel's; None: nothing to wait for) runs inside the first iteration,
    so the pipeline's first STAGES - 1 pieces load during it; every activation load (x, the
    norm's statistics, the residual) sits in a branch on the wait's result, where the pipeliner
    leaves it in place (K_CONST: K as a constexpr, the megakernel's d_model -- the norm's
    statistics loop over chunked rows unrolled, _common.stream_x0). Rows chunked over K (n_k >
    1) request the next piece's activation chunk an iteration ahead (x_chunk_raw) and convert it
    at use (x_chunk_apply), so its L1/L2 latency does not stall the iteration (8B / Qwen3-8B
    down_proj, 14336 = 4 chunks: +1.5% tok/s, A/B in one run, bench/RESULTS.md session 11). w0 /
    w20 are unused.
    Rows chunked over K (both streams) add up each piece's row_partials -- sums within a thread
    -- and reduce across threads (shuffles, shared memory, a barrier) once per tile, at its last
    chunk, not once per piece (+0.4-0.9% tok/s on 8B / Qwen3-8B / 1B, A/B in one run, session
    12).
    KSPLIT > 1 (not STREAM; a megakernel step of several rows, graph.Tiling.ksplit): each tile
    sums only K part kpart (gemv_tile) and stores that fp32 partial sum (no epilogue) to out.
    W4 (not STREAM, T = 1): W is MXFP4, its codes at w_ptr and E8M0 scales at s_ptr
    (_common.gemv_acc)."""
    tl.static_assert((KSPLIT == 1) | (not STREAM), "K parts split the tiles' K loops")
    tl.static_assert((not W4) | (not STREAM), "MXFP4 weights run the tile loop")
    SPM: tl.constexpr = PTX if PTX >= FP8_PIECES else 0  # the staged stream's pieces: plain / FP8
    run = 1
    # row_partials' columns a piece: one per 16-byte chunk, or per FP8 scale group
    PV: tl.constexpr = min(FP8_GROUP if PTX >= FP8_PIECES else
                           128 // w_ptr.dtype.element_ty.primitive_bitwidth, BLOCK_K)
    if STREAM and STAGES > 1:
        offs_t = tl.arange(0, 1)
        mask_t = offs_t < T
        n_k = tl.cdiv(K, BLOCK_K)
        n_it = (tile_hi - tile_lo) * n_k
        rows0 = tile_lo * BLOCK_N + tl.arange(0, BLOCK_N)
        rstd = tl.zeros([1, 1], dtype=tl.float32)
        x = tl.zeros([1, BLOCK_K], dtype=tl.float32)
        xr = tl.zeros([1, BLOCK_K], dtype=x_ptr.dtype.element_ty)  # chunked rows: the next
        nr = tl.zeros([1, BLOCK_K], dtype=norm_ptr.dtype.element_ty)  # chunk's loads, as stored
        acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
        acc2 = acc
        b = acc
        b2 = acc
        r = acc
        accp = tl.zeros([BLOCK_N, BLOCK_K // PV], dtype=tl.float32)  # chunked rows' row_partials
        accp2 = accp
        for i in tl.range(0, n_it, num_stages=STAGES):
            w, w2 = stream_piece(w_ptr, N, K, tile_lo, i, n_it, BLOCK_N, BLOCK_K, SWIGLU > 0,
                                 SPM)
            if i == 0:
                if WAIT is not None:
                    run = WAIT(*wargs)
                if run == 1:
                    b, b2, r = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, rows0,
                                                 rows0 < N, N, stride_res, BIAS, SWIGLU,
                                                 RESIDUAL)
                    x, rstd = stream_x0(x, x_ptr, norm_ptr, stride_x, offs_t, mask_t, K, eps,
                                        n_k, NORM, BLOCK_K, K_CONST)
                    if n_k > 1:
                        xr, nr = x_chunk_raw(x_ptr, norm_ptr, offs_t, mask_t, stride_x, 0, K,
                                             NORM, BLOCK_K)
            if run == 1:
                if n_k > 1:  # this piece's chunk, requested an iteration ago; the next one's
                    x = x_chunk_apply(xr, nr, rstd, NORM)
                    xr, nr = x_chunk_raw(x_ptr, norm_ptr, offs_t, mask_t, stride_x,
                                         ((i + 1) % n_k) * BLOCK_K, K, NORM, BLOCK_K)
                acc, acc2, accp, accp2, b, b2, r = stream_reduce(
                    w, w2, x, acc, acc2, accp, accp2, b, b2, r, i, n_it, tile_lo, bias_ptr,
                    res_ptr, out_ptr, N, K, stride_res, offs_t, mask_t, BIAS, SWIGLU, RESIDUAL,
                    BLOCK_N, BLOCK_K, SPM)
        if n_it == 0:
            if WAIT is not None:
                run = WAIT(*wargs)
    elif STREAM:
        offs_t = tl.arange(0, 1)
        mask_t = offs_t < T
        n_k = tl.cdiv(K, BLOCK_K)
        n_it = (tile_hi - tile_lo) * n_k
        rows = tile_lo * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_r = (rows < N) & (n_it > 0)
        w, w2 = w0, w20  # requested before the activations (before the dependency wait)
        b, b2, r = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, rows, mask_r, N,
                                     stride_res, BIAS, SWIGLU, RESIDUAL)
        if NORM:
            rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)[:, None]
        else:
            rstd = tl.zeros([1, 1], dtype=tl.float32)
        x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, 0, K, rstd, NORM, BLOCK_K)
        acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
        acc2 = acc
        accp = tl.zeros([BLOCK_N, BLOCK_K // PV], dtype=tl.float32)  # chunked rows' row_partials
        accp2 = accp
        for i in range(0, n_it):
            w_n, w2_n = stream_piece(w_ptr, N, K, tile_lo, i + 1, n_it, BLOCK_N, BLOCK_K,
                                     SWIGLU > 0, PTX)
            x_n = next_x_chunk(x, x_ptr, norm_ptr, offs_t, mask_t, stride_x,
                               ((i + 1) % n_k) * BLOCK_K, K, n_k, rstd, NORM, BLOCK_K)
            acc, acc2, accp, accp2, b, b2, r = stream_reduce(
                w, w2, x, acc, acc2, accp, accp2, b, b2, r, i, n_it, tile_lo, bias_ptr, res_ptr,
                out_ptr, N, K, stride_res, offs_t, mask_t, BIAS, SWIGLU, RESIDUAL, BLOCK_N,
                BLOCK_K, PTX)
            w, w2, x = w_n, w2_n, x_n
    else:
        rstd = tile_rstd(x_ptr, stride_x, T, K, eps, pid_t, NORM, BLOCK_T, BLOCK_K)
        for tile in range(tile_lo, tile_hi):
            y, offs_t, mask_t, offs_n, mask_n = gemv_tile(
                x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, T, N, K, stride_x, stride_res, rstd,
                tile, pid_t, NORM, BIAS, SWIGLU, RESIDUAL, BLOCK_T, BLOCK_N, BLOCK_K, F32, kpart,
                KSPLIT, s_ptr, W4)
            tl.store(out_ptr + offs_t[:, None] * stride_out + offs_n[None, :],
                     y.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_n[None, :])
    return run


@triton.jit
def gemv_kernel(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x, stride_res,
                stride_out, eps, tiles_per_program, ids_ptr, stride_we, stride_be, x_div, s_ptr,
                stride_se,
                NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr,
                RESIDUAL: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, STREAM: tl.constexpr, F32: tl.constexpr,
                PTX: tl.constexpr, PDL: tl.constexpr, STAGES: tl.constexpr,
                EXPERTS: tl.constexpr = False, W4: tl.constexpr = False):
    """PDL (config.use_pdl): the stream's first weight piece (STAGES > 1: its first STAGES - 1)
    is requested before pdl_wait, so it loads while the kernel before this one finishes.
    EXPERTS: program pair p = program_id(1) is one row's GEMV by expert ids[p] (a [E, rows, K]
    stack, stride_we elements an expert; its bias rows stride_be apart) of x row p // x_div
    into out row p -- its weights are requested only after pdl_wait, as the router's kernel
    wrote ids. W4: W is MXFP4 (codes [.., K / 2] uint8 at w_ptr, E8M0 scales [.., K / 32] at
    s_ptr, stride_se an expert), through the tile loop."""
    pdl_start(PDL)
    lo = tl.program_id(0) * tiles_per_program
    hi = tl.minimum(lo + tiles_per_program, tl.cdiv(N, BLOCK_N))
    pid_t = tl.program_id(1)
    if EXPERTS:
        pdl_wait(PDL)
        e = tl.load(ids_ptr + pid_t).to(tl.int64)
        w_ptr += e * stride_we
        if W4:
            s_ptr += e * stride_se
        if BIAS:
            bias_ptr += e * stride_be
        x_ptr += (pid_t // x_div).to(tl.int64) * stride_x
        out_ptr += pid_t.to(tl.int64) * stride_out
        pid_t = 0
        T = 1
    if STREAM and STAGES > 1:
        gemv_body(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x,
                  stride_res, stride_out, eps, lo, hi, pid_t, 0, 0, NORM, BIAS,
                  SWIGLU, RESIDUAL, BLOCK_T, BLOCK_N, BLOCK_K, STREAM, F32, PTX, STAGES,
                  pdl_ready, (PDL,))
    else:
        w0, w20 = stream_start(w_ptr, N, K, lo, hi, BLOCK_N, BLOCK_K, SWIGLU > 0, STREAM, PTX)
        pdl_wait(PDL)
        gemv_body(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x,
                  stride_res, stride_out, eps, lo, hi, pid_t, w0, w20, NORM, BIAS,
                  SWIGLU, RESIDUAL, BLOCK_T, BLOCK_N, BLOCK_K, STREAM, F32, PTX, s_ptr=s_ptr,
                  W4=W4)


def block_t(T: int) -> int:
    """Decode (T=1) streams with a register reduction; T>1 uses tl.dot tiles of M=16 (its minimum)."""
    return 1 if T == 1 else 16


def gemv(x: torch.Tensor, w: torch.Tensor, *, norm_w=None, eps: float = 1e-6, bias=None,
         residual=None, swiglu: bool = False, act: str = "silu", gated: bool = True, out=None,
         config=None, stream: StreamConfig | None = None,
         experts: torch.Tensor | None = None, scales: torch.Tensor | None = None) -> torch.Tensor:
    """Launcher: x [T, K], w [N, K] (or [2N, K] with swiglu: act(gate) * up, act an ACT_CODES
    name; swiglu without a gate, gated False: act(x @ w.T) of w [N, K]) -> out [T, N] in x's
    dtype.
    stream (T=1 only): the megakernel's decode stream, `stream.tiles` tiles per program, for
    testing and timing that path standalone. Neither config nor stream: decode takes
    tile_table.json's choice for this GPU and shape (config.gemv_stream, else gemv_config).
    experts (int32 [P], a mixture's expert per output row; P a multiple of T): w [E, N or 2N, K]
    (bias [E, N or 2N], each expert's) and out row p = x row p // (P / T) through expert
    experts[p] -> out [P, N] (no residual; a decode row streams each expert as T=1 does).
    scales (with experts; quant's "mxfp4"): w holds MXFP4 codes [E, N or 2N, K / 2] uint8 and
    scales their E8M0 exponents [E, N or 2N, K / 32] uint8; each row pair runs the tile loop
    (_common.gemv_acc's W4; config, else MXFP4_TILE).
    w float8_e4m3fn (an FP8 checkpoint's matrix kept 8-bit: quant.fp8_rows' rows, [N or 2N,
    row_elems(K)]): codes times their scales in fp32 (_common.weight_chunk's FP8_PIECES; a
    stream's FP8 words with bf16 / fp16 x: f16 products, StreamConfig.fp8_words); the decode
    stream's pieces or the tile loop (gemv_config: the table's streams are bf16's; a mixture's
    FP8 experts: FP8_EXPERTS_TILE on a GPU)."""
    T, K = x.shape
    w4 = scales is not None
    if w4:
        assert experts is not None and w.dtype == torch.uint8 and scales.dtype == torch.uint8
        assert K % 32 == 0 and w.shape[-1] * 2 == K and scales.shape == (*w.shape[:2], K // 32)
        assert scales.is_contiguous()
    parts = 2 if swiglu and gated else 1  # matrices a tile: gate and up, or one
    stack, ids, P, bstride = w, w, T, 0
    if experts is not None:
        assert w.dim() == 3 and residual is None and experts.numel() % T == 0
        assert bias is None or (bias.shape == w.shape[:2] and bias.is_contiguous())
        bstride = 0 if bias is None else bias.stride(0)
        assert experts.dtype == torch.int32 and experts.is_contiguous()
        stack, w, ids, P = w, w[0], experts, experts.numel()
    N = w.shape[0] // parts
    assert w.shape[1] == (K // 2 if w4 else row_elems(K, w.dtype)) and x.stride(1) == 1
    assert stack.is_contiguous()
    if w4:
        stream, config = None, config or MXFP4_TILE
    elif experts is not None and w.dtype == torch.float8_e4m3fn and not INTERPRET:
        config = config or FP8_EXPERTS_TILE
    elif stream is None and config is None and T == 1:
        stream = gemv_stream(N, K, x.device, rows=w.shape[0], parts=parts, dtype=w.dtype)
    if out is None:
        out = torch.empty(P, N, device=x.device, dtype=x.dtype)
    res = residual if residual is not None else out
    BT = block_t(T) if experts is None else 1
    ptx = 0 if w4 else stream_ptx(stream, w.dtype, K, x.dtype)  # FP8: FP8_PIECES / WORDS
    pdl = use_pdl(x.device)
    if stream is not None:
        assert T == 1, "the stream is the decode (T=1) path"
        cfg = stream.tile(K, parts)
        per = stream.tiles
    else:
        # (experts: each row pair is a T = 1 GEMV of its own expert: the decode tile)
        cfg = fp8_tile(config or gemv_config(N, K, T if experts is None else 1, x.device,
                                             rows=w.shape[0], elem_bytes=w.element_size()),
                       w.element_size(), BT)
        per = 1
    grid = (triton.cdiv(triton.cdiv(N, cfg.block_n), per), triton.cdiv(P, BT))
    gemv_kernel[grid](x, stack, norm_w if norm_w is not None else w,
                      bias if bias is not None else w, res, out, T, N, K, x.stride(0),
                      res.stride(0), out.stride(0), eps, per, ids, stack.stride(0), bstride,
                      P // T, scales if w4 else w, scales.stride(0) if w4 else 0,
                      NORM=norm_w is not None, BIAS=bias is not None,
                      SWIGLU=glu_code(act, gated) if swiglu else 0,
                      RESIDUAL=residual is not None, BLOCK_T=BT, BLOCK_N=cfg.block_n,
                      BLOCK_K=cfg.block_k, STREAM=stream is not None,
                      F32=INTERPRET or torch.float32 in (w.dtype, x.dtype), PTX=ptx, PDL=pdl,
                      # the op's stages: gate|up's (with or without a gate), else down's
                      STAGES=stream.op_stages()[2 if swiglu else 3] if stream is not None else 1,
                      EXPERTS=experts is not None, W4=w4, num_warps=cfg.num_warps,
                      launch_pdl=pdl)
    return out


@triton.jit
def swiglu_kernel(y_ptr, p_ptr, out_ptr, N, stride_y, stride_out, BLOCK_N: tl.constexpr,
                  ACT: tl.constexpr):
    """Grid (T, N blocks): the GEMV's MLP epilogue (gemv_epilogue, ACT: glu_code) on a row of
    a matmul's [gate | up] output (ACT < 0: its up output alone; xIELU: its parameter rows
    p_ptr [2N])."""
    t = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = offs < N
    row = y_ptr + t.to(tl.int64) * stride_y + offs
    g = tl.load(row, mask=m, other=0.0).to(tl.float32)
    u = g
    if ACT > 0:
        u = tl.load(row + N, mask=m, other=0.0).to(tl.float32)
    b = tl.zeros([BLOCK_N], dtype=tl.float32)
    b2 = b
    if ACT == -XIELU:
        b = tl.load(p_ptr + offs, mask=m, other=0.0).to(tl.float32)
        b2 = tl.load(p_ptr + N + offs, mask=m, other=0.0).to(tl.float32)
    y = gemv_epilogue(g, u, b, b2, 0.0, ACT)
    tl.store(out_ptr + t.to(tl.int64) * stride_out + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def swiglu(y: torch.Tensor, act: str = "silu", gated: bool = True, out=None,
           params=None) -> torch.Tensor:
    """y [T, 2N] = [gate | up] (a long prompt's cuBLAS gate|up output) -> act(gate) * up [T, N]
    in y's dtype, fp32 math, rounded once (not gated: y [T, N] = up -> act(up); params: xIELU's
    [alpha_p x N | alpha_n x N], the layer's PackedWeights.b_gu). Bytes: 3 x T x
    N elements (bf16 at 4.4 TB/s: 2048 tokens of Llama-3.1-8B's 14336 in ~40 us; torch's silu
    then mul on the strided halves, 5 x, took 166 us -- H200 profile of bench_prefill,
    2026-12-02)."""
    T, N2 = y.shape
    N = N2 // 2 if gated else N2
    assert N2 == (1 + gated) * N and y.stride(1) == 1
    if out is None:
        out = torch.empty(T, N, device=y.device, dtype=y.dtype)
    BLOCK_N = min(2048, triton.next_power_of_2(N))
    if act == "xielu" and (params is None or params.numel() != 2 * N):
        raise ValueError(f"xIELU needs its parameter rows [2 x {N}] (params)")
    swiglu_kernel[(T, triton.cdiv(N, BLOCK_N))](y, params if act == "xielu" else y, out, N,
                                                y.stride(0), out.stride(0),
                                                BLOCK_N=BLOCK_N, ACT=glu_code(act, gated),
                                                num_warps=4)
    return out
