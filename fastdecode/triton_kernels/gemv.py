"""GEMV / skinny GEMM with fused prologue and epilogue.

    y[t, n] = epilogue( sum_k prologue(x)[t, k] * W[n, k] )
    prologue: RMSNorm of the input row (NORM):  x * rsqrt(mean(x^2) + eps) * norm_w
    epilogue: + bias[n] (BIAS);  silu(y_gate) * y_up with W = [gate; up] stacked [2N, K] (SWIGLU);
              + residual[t, n] (RESIDUAL, may alias the output: the residual stream updated in place)

Shapes: x [T, K] (bf16/fp16/fp32), W [N or 2N, K] row-major, y [T, N]. fp32 accumulation.
Roofline (decode, T=1): bytes = N*K*2 (weights, bf16) + small; at the ~4.46 TB/s a read-only stream
reaches on an H200 (KNOWLEDGE.md), e.g. 2048x8192 gate|up of Llama-3.2-1B = 67 MB -> 15 us.
"""
import torch
import triton
import triton.language as tl

from ._common import INTERPRET, gemv_acc, prefetch_rows, resident_x, row_dot, row_rstd, weight_rows
from .config import StreamConfig, gemv_config


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
        if SWIGLU:
            b2 = tl.load(bias_ptr + N + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + offs_t[:, None] * stride_res + offs_n[None, :],
                    mask=mask_t[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    return b, b2, r


@triton.jit
def gemv_epilogue(acc, acc2, b, b2, r, SWIGLU: tl.constexpr):
    """(acc + bias) [silu(gate) * (up + up-bias)] + residual on fp32 tiles."""
    acc += b
    if SWIGLU:
        acc = acc / (1.0 + tl.exp(-acc)) * (acc2 + b2)
    return acc + r


@triton.jit
def gemv_tile(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, T, N, K, stride_x, stride_res, eps,
              pid_n, pid_t,
              NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              F32: tl.constexpr):
    """One [BLOCK_T, BLOCK_N] output tile in fp32 registers, K streamed BLOCK_K at a time, epilogue
    applied. Returns (y, offs_t, mask_t, offs_n, mask_n)."""
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    if NORM:
        rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)
    else:
        rstd = tl.zeros([BLOCK_T], dtype=tl.float32)
    acc, acc2 = gemv_acc(x_ptr, stride_x, offs_t, mask_t, rstd, norm_ptr, w_ptr, offs_n, offs_n + N,
                         mask_n, K, NORM, SWIGLU, BLOCK_K, F32)
    b, b2, r = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, offs_n, mask_n, N, stride_res,
                                 BIAS, SWIGLU, RESIDUAL)
    return gemv_epilogue(acc, acc2, b, b2, r, SWIGLU), offs_t, mask_t, offs_n, mask_n


@triton.jit
def gemv_body(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x, stride_res,
              stride_out, eps, tile_lo, tile_hi, pid_t,
              NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              RESIDENT: tl.constexpr, AHEAD: tl.constexpr, F32: tl.constexpr):
    """Output tiles [tile_lo, tile_hi) of BLOCK_N rows for token block pid_t.

    RESIDENT (decode, T=1, BLOCK_K >= K): the normalised activation row stays in registers and
    whole weight rows stream through; everything a tile needs (weights, bias, residual) is loaded
    one tile ahead, so no load waits inside the loop except for data already in flight (two
    tiles per program: the megakernel runs one program per SM and needs ~32 KB of loads in flight
    per SM to cover HBM latency), and the tile AHEAD tiles further is prefetched into L2 (more
    bytes in flight without registers). The first tile is requested before the activation row. Other
    cases loop over K per tile (ops mode: many programs per SM supply the loads in flight; T>1:
    tl.dot tiles)."""
    if RESIDENT:
        offs_t = tl.arange(0, 1)
        mask_t = offs_t < T
        offs_n = tile_lo * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = (offs_n < N) & (tile_lo < tile_hi)
        w = weight_rows(w_ptr, offs_n, mask_n, K, BLOCK_K)
        w2 = w
        if SWIGLU:
            w2 = weight_rows(w_ptr, offs_n + N, mask_n, K, BLOCK_K)
        b, b2, r = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, offs_n, mask_n, N,
                                     stride_res, BIAS, SWIGLU, RESIDUAL)
        xn = resident_x(x_ptr, norm_ptr, K, eps, NORM, BLOCK_K)
        for tile in range(tile_lo, tile_hi):
            nxt = offs_n + BLOCK_N
            mask_nxt = (nxt < N) & (tile + 1 < tile_hi)
            w_next = weight_rows(w_ptr, nxt, mask_nxt, K, BLOCK_K)
            pf = nxt + AHEAD * BLOCK_N
            mask_pf = (pf < N) & (tile + 1 + AHEAD < tile_hi)
            prefetch_rows(w_ptr, pf, mask_pf, K, BLOCK_K, AHEAD)
            if SWIGLU:
                prefetch_rows(w_ptr, pf + N, mask_pf, K, BLOCK_K, AHEAD)
            w2_next = w_next
            if SWIGLU:
                w2_next = weight_rows(w_ptr, nxt + N, mask_nxt, K, BLOCK_K)
            b_next, b2_next, r_next = epilogue_operands(bias_ptr, res_ptr, offs_t, mask_t, nxt,
                                                        mask_nxt, N, stride_res, BIAS, SWIGLU,
                                                        RESIDUAL)
            acc = row_dot(w, xn)
            acc2 = acc
            if SWIGLU:
                acc2 = row_dot(w2, xn)
            y = gemv_epilogue(acc, acc2, b, b2, r, SWIGLU)
            tl.store(out_ptr + offs_n[None, :], y.to(out_ptr.dtype.element_ty),
                     mask=mask_t[:, None] & mask_n[None, :])
            offs_n, mask_n = nxt, mask_nxt
            w, w2, b, b2, r = w_next, w2_next, b_next, b2_next, r_next
    else:
        for tile in range(tile_lo, tile_hi):
            y, offs_t, mask_t, offs_n, mask_n = gemv_tile(
                x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, T, N, K, stride_x, stride_res, eps,
                tile, pid_t, NORM, BIAS, SWIGLU, RESIDUAL, BLOCK_T, BLOCK_N, BLOCK_K, F32)
            tl.store(out_ptr + offs_t[:, None] * stride_out + offs_n[None, :],
                     y.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_n[None, :])


@triton.jit
def gemv_kernel(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x, stride_res,
                stride_out, eps, tiles_per_program,
                NORM: tl.constexpr, BIAS: tl.constexpr, SWIGLU: tl.constexpr,
                RESIDUAL: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, RESIDENT: tl.constexpr, AHEAD: tl.constexpr,
                F32: tl.constexpr):
    lo = tl.program_id(0) * tiles_per_program
    gemv_body(x_ptr, w_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, T, N, K, stride_x, stride_res,
              stride_out, eps, lo, tl.minimum(lo + tiles_per_program, tl.cdiv(N, BLOCK_N)),
              tl.program_id(1), NORM, BIAS, SWIGLU, RESIDUAL, BLOCK_T, BLOCK_N, BLOCK_K, RESIDENT,
              AHEAD, F32)


def block_t(T: int) -> int:
    """Decode (T=1) streams with a register reduction; T>1 uses tl.dot tiles of M=16 (its minimum)."""
    return 1 if T == 1 else 16


def gemv(x: torch.Tensor, w: torch.Tensor, *, norm_w=None, eps: float = 1e-6, bias=None,
         residual=None, swiglu: bool = False, out=None, config=None,
         stream: StreamConfig | None = None) -> torch.Tensor:
    """Launcher: x [T, K], w [N, K] (or [2N, K] with swiglu) -> out [T, N] in x's dtype.
    stream (T=1 only): the megakernel's resident-x tile streaming `stream.tiles` tiles per
    program, for testing and timing that path standalone."""
    T, K = x.shape
    N = w.shape[0] // 2 if swiglu else w.shape[0]
    assert w.shape[1] == K and x.stride(1) == 1 and w.is_contiguous()
    if out is None:
        out = torch.empty(T, N, device=x.device, dtype=x.dtype)
    res = residual if residual is not None else out
    BT = block_t(T)
    if stream is not None:
        assert T == 1, "the resident-x stream is the decode (T=1) path"
        cfg = stream.tile(K)
        per = stream.tiles
    else:
        cfg = config or gemv_config(N, K, T, x.device)
        per = 1
    grid = (triton.cdiv(triton.cdiv(N, cfg.block_n), per), triton.cdiv(T, BT))
    gemv_kernel[grid](x, w, norm_w if norm_w is not None else w, bias if bias is not None else w,
                      res, out, T, N, K, x.stride(0), res.stride(0), out.stride(0), eps, per,
                      NORM=norm_w is not None, BIAS=bias is not None, SWIGLU=swiglu,
                      RESIDUAL=residual is not None, BLOCK_T=BT, BLOCK_N=cfg.block_n,
                      BLOCK_K=cfg.block_k, RESIDENT=stream is not None,
                      AHEAD=stream.ahead if stream is not None else 0,
                      F32=INTERPRET or w.dtype == torch.float32, num_warps=cfg.num_warps)
    return out
