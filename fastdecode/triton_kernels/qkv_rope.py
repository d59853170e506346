"""Fused QKV projection + bias + q/k RMSNorm + RoPE + KV-cache append.

For each head slot j of the fused weight Wqkv [(H + 2*KVH) * hd, d] (q heads, then k, then v) and
each new token t at position p = pos + t:
    xn      = rmsnorm(x[t]) * attn_norm                       (prologue, fp32)
    y       = Wqkv[j*hd:(j+1)*hd] @ xn (+ bias)               (fp32 accumulation)
    y       = rmsnorm_hd(y) * {q,k}_norm      (Qwen3, q and k heads only)
    y       = y*cos(p) + rotate_half(y)*sin(p)                (q and k heads; rotate_half pairs
                                                               element i with i + hd/2, as HF)
    q[t, j] = y | k_cache[j-H, p] = y | v_cache[j-H-KVH, p] = y
A program owns BLOCK_H rotation pairs (row i of the lo half [0, hd/2) with row i of the hi half
[hd/2, hd)) of one head, so the rotation needs no cross-thread shuffle: with 4 pairs per program
the 1B model's 3072 rows are 384 programs (the decode GEMV tile of config.py). With q/k RMSNorm
(Qwen3) a program owns the whole head, since the norm sums over all of it. Any even head_dim.
Roofline (decode): bytes = (H + 2 KVH) * hd * d * 2 -- e.g. 12.6 MB for Llama-3.2-1B, 2.8 us.
"""
import torch
import triton
import triton.language as tl

from ._common import INTERPRET, gemv_acc, row_rstd
from .config import gemv_config, qkv_pairs
from .gemv import block_t


@triton.jit
def qkv_rope_body(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos_ptr,
                  q_ptr, k_ptr, v_ptr, T, K, stride_x, S, eps, H, KVH, HD, j, chunk, pid_t,
                  BIAS: tl.constexpr, QK_NORM: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, F32: tl.constexpr):
    """Head slot j (q heads, k heads, v heads), pairs [chunk*BLOCK_H, (chunk+1)*BLOCK_H)."""
    half = HD // 2
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    offs_h = chunk * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < half
    rows = j * HD + offs_h
    rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)
    lo, hi = gemv_acc(x_ptr, stride_x, offs_t, mask_t, rstd, norm_ptr, w_ptr, rows, rows + half,
                      mask_h, K, True, True, BLOCK_K, F32)
    if BIAS:
        lo += tl.load(bias_ptr + rows, mask=mask_h, other=0.0).to(tl.float32)[None, :]
        hi += tl.load(bias_ptr + rows + half, mask=mask_h, other=0.0).to(tl.float32)[None, :]
    pos = tl.load(pos_ptr)
    p = pos + offs_t
    mask = mask_t[:, None] & mask_h[None, :]
    if j < H + KVH:  # q or k head: per-head norm (Qwen3) then rotary embedding
        if QK_NORM:
            nrm = qk_norm_ptr + (j >= H).to(tl.int32) * HD
            r = 1.0 / tl.sqrt((tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1)) / HD + eps)
            lo = lo * r[:, None] * tl.load(nrm + offs_h, mask=mask_h, other=0.0).to(tl.float32)[None, :]
            hi = hi * r[:, None] * tl.load(nrm + half + offs_h, mask=mask_h,
                                           other=0.0).to(tl.float32)[None, :]
        c = tl.load(cos_ptr + p[:, None] * half + offs_h[None, :], mask=mask, other=1.0)
        s = tl.load(sin_ptr + p[:, None] * half + offs_h[None, :], mask=mask, other=0.0)
        lo, hi = lo * c - hi * s, hi * c + lo * s
    if j < H:
        dst = q_ptr + (offs_t[:, None] * H + j) * HD + offs_h[None, :]
    elif j < H + KVH:
        dst = k_ptr + ((j - H) * S + p[:, None]) * HD + offs_h[None, :]
    else:
        dst = v_ptr + ((j - H - KVH) * S + p[:, None]) * HD + offs_h[None, :]
    tl.store(dst, lo.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + half, hi.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def qkv_rope_kernel(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos_ptr,
                    q_ptr, k_ptr, v_ptr, T, K, stride_x, S, eps, H, KVH, HD,
                    n_chunks, BIAS: tl.constexpr, QK_NORM: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, F32: tl.constexpr):
    pid = tl.program_id(0)
    qkv_rope_body(x_ptr, w_ptr, norm_ptr, bias_ptr, qk_norm_ptr, cos_ptr, sin_ptr, pos_ptr,
                  q_ptr, k_ptr, v_ptr, T, K, stride_x, S, eps, H, KVH, HD,
                  pid // n_chunks, pid % n_chunks, tl.program_id(1),
                  BIAS, QK_NORM, BLOCK_T, BLOCK_H, BLOCK_K, F32)


def qkv_rope(x, w_qkv, norm_w, cos, sin, pos, k_cache, v_cache, *, n_heads, eps, bias=None,
             qk_norm=None, q_out=None, pairs=None):
    """x [T, d]; w_qkv [(H+2KVH)*hd, d]; cos/sin [S, hd/2] fp32; pos int32 [1] on device;
    k_cache/v_cache [KVH, S, hd] of one layer (written at rows pos..pos+T-1); qk_norm [2, hd] or
    None; pairs: rotation pairs per program (default: config.py's tile). Returns q [T, H, hd]."""
    T, K = x.shape
    KVH, S, HD = k_cache.shape
    if q_out is None:
        q_out = torch.empty(T, n_heads, HD, device=x.device, dtype=k_cache.dtype)
    BT = block_t(T)
    half = HD // 2
    cfg = gemv_config(w_qkv.shape[0], K, T, x.device)
    if pairs is not None and qk_norm is None and T == 1:
        BLOCK_H = triton.next_power_of_2(pairs)
    else:
        BLOCK_H = qkv_pairs(HD, qk_norm is not None, T, cfg.block_n)
    n_chunks = triton.cdiv(half, BLOCK_H)
    grid = ((n_heads + 2 * KVH) * n_chunks, triton.cdiv(T, BT))
    qkv_rope_kernel[grid](x, w_qkv, norm_w, bias if bias is not None else w_qkv,
                          qk_norm if qk_norm is not None else norm_w, cos, sin, pos,
                          q_out, k_cache, v_cache, T, K, x.stride(0), S, eps, n_heads, KVH, HD,
                          n_chunks, BIAS=bias is not None, QK_NORM=qk_norm is not None, BLOCK_T=BT,
                          BLOCK_H=BLOCK_H, BLOCK_K=cfg.block_k,
                          F32=INTERPRET or w_qkv.dtype == torch.float32,
                          num_warps=cfg.num_warps)
    return q_out
