"""lm_head with the final RMSNorm prologue and an in-kernel token choice (argmax or Gumbel-max).

Phase 1 (lm_head_body), one program (or megakernel task) per (range of BLOCK_N vocab slices, token block):
    logits[t, n] = W[n] . rmsnorm(x[t]) * final_norm (+ b[n])  (fp32; stored if WRITE_LOGITS;
                   BIAS: a LayerNorm family's final norm bias through the head, ModelSpec.
                   head_bias; SOFTCAP: cap tanh(logits / cap), Gemma 2's final_logit_softcapping)
    score[t, n]  = logits[t, n]                                (greedy)
                 = logits[t, n] / temperature + Gumbel(u)      (SAMPLE; u = philox(seed, t*V + n))
    partial max and argmax of score over its slices -> pval/pidx [T, n_parts]
Phase 2 (choose_merge_body), one program: the max over parts in ascending part order (ties go to
the lowest token id), written as the next input token and to the token history; it advances the
device-side position, step and RNG counter, so a CUDA graph of the step can be replayed as is.
argmax_i(l_i / T + G_i), G_i ~ Gumbel(0, 1) i.i.d., is a sample of softmax(l / T) (Gumbel-max trick).
Bytes (decode): V * d * 2 -- e.g. 128256 x 2048 x 2 = 525 MB for Llama-3.2-1B's tied head, 118 us
at 4.46 TB/s: the largest single matrix of that model.
"""
import torch
import triton
import triton.language as tl

from ._common import (INTERPRET, next_x_chunk, pdl_start, pdl_wait, row_dot, row_rstd,
                      soft_cap, weight_chunk, x_chunk)
from .config import StreamConfig, gemv_config, merge_block, stream_ptx, use_pdl
from .gemv import block_t, gemv_tile, stream_start, tile_rstd


@triton.jit
def tile_choice(vals, offs_t, offs_n, mask_n, V, seed, temp, SAMPLE: tl.constexpr):
    """(max, argmax) per token row of vals [BLOCK_T, BLOCK_N] over this vocab slice, or of
    vals / temperature + Gumbel noise (SAMPLE; seed, temp: scalars); ties go to the lowest id."""
    if SAMPLE:
        u = tl.rand(seed, offs_t[:, None] * V + offs_n[None, :])
        u = tl.maximum(u, 1e-20)
        vals = vals / temp - tl.log(-tl.log(u))
    vals = tl.where(mask_n[None, :], vals, float("-inf"))
    best = tl.max(vals, axis=1)
    idx = tl.argmax(vals, axis=1, tie_break_left=True) + tl.min(offs_n, axis=0)
    return best, idx.to(tl.int32)


@triton.jit
def keep_best(best, bidx, vals, offs_t, offs_n, mask_n, V, seed, temp, SAMPLE: tl.constexpr):
    """Running choice over a task's slices, visited in ascending order (strict >: ties keep the
    earlier, lower token id)."""
    v, i = tile_choice(vals, offs_t, offs_n, mask_n, V, seed, temp, SAMPLE)
    better = v > best
    return tl.where(better, v, best), tl.where(better, i, bidx)


@triton.jit
def lm_head_body(x_ptr, w_ptr, norm_ptr, logits_ptr, pval_ptr, pidx_ptr, seed_ptr, temp_ptr,
                 T, V, K, stride_x, stride_logits, eps, n_parts, tile_lo, tile_hi, part, pid_t, w0,
                 v0, VKEY, WRITE_LOGITS: tl.constexpr, CHOOSE: tl.constexpr, SAMPLE: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 STREAM: tl.constexpr, F32: tl.constexpr, PTX: tl.constexpr, softcap=0.0,
                 SOFTCAP: tl.constexpr = False, b_ptr=None, BIAS: tl.constexpr = False):
    """Vocab tiles [tile_lo, tile_hi) of BLOCK_N rows for token block pid_t; one partial choice
    per token row at pval/pidx[t, part]. STREAM (T=1): the decode stream of gemv_body, w0 its
    first piece (gemv.stream_start). v0: the vocabulary id of row 0 (a tensor-parallel rank's
    shard starts there; 0 otherwise), VKEY: the whole vocabulary (Gumbel noise is keyed on
    t * VKEY + global id, so every tensor-parallel layout draws the same sample). T > 1: the
    norm's statistics once for all the task's tiles (gemv.tile_rstd)."""
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    best = tl.full([BLOCK_T], float("-inf"), dtype=tl.float32)
    bidx = tl.zeros([BLOCK_T], dtype=tl.int32)
    seed = 0
    temp = 1.0
    if SAMPLE:  # loaded once: a load inside the loop would wait an L2 round trip per tile
        seed = tl.load(seed_ptr)
        temp = tl.load(temp_ptr)
    if STREAM:
        n_k = tl.cdiv(K, BLOCK_K)
        n_it = (tile_hi - tile_lo) * n_k
        w = w0  # requested before x (before the dependency wait)
        rstd = row_rstd(x_ptr, stride_x, offs_t, mask_t, K, eps, BLOCK_K)[:, None]
        x = x_chunk(x_ptr, norm_ptr, offs_t, mask_t, stride_x, 0, K, rstd, True, BLOCK_K)
        acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
        for i in range(0, n_it):
            i1 = i + 1
            rows1 = (tile_lo + i1 // n_k) * BLOCK_N + tl.arange(0, BLOCK_N)
            k1 = (i1 % n_k) * BLOCK_K
            w_n = weight_chunk(w_ptr, rows1, (rows1 < V) & (i1 < n_it), k1, K, BLOCK_K, PTX)
            x_n = next_x_chunk(x, x_ptr, norm_ptr, offs_t, mask_t, stride_x, k1, K, n_k, rstd,
                               True, BLOCK_K)
            acc += row_dot(w, x, PTX)
            if i % n_k == n_k - 1:
                offs_n = (tile_lo + i // n_k) * BLOCK_N + tl.arange(0, BLOCK_N)
                mask_n = offs_n < V
                if BIAS:
                    acc += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
                if SOFTCAP:
                    acc = soft_cap(acc, softcap)
                if WRITE_LOGITS:
                    tl.store(logits_ptr + offs_n[None, :], acc,
                             mask=mask_t[:, None] & mask_n[None, :])
                if CHOOSE:
                    best, bidx = keep_best(best, bidx, acc, offs_t, offs_n + v0, mask_n, VKEY,
                                           seed, temp, SAMPLE)
                acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
            w, x = w_n, x_n
    else:
        rstd = tile_rstd(x_ptr, stride_x, T, K, eps, pid_t, True, BLOCK_T, BLOCK_K)
        for tile in range(tile_lo, tile_hi):
            y, offs_t, mask_t, offs_n, mask_n = gemv_tile(
                x_ptr, w_ptr, norm_ptr, w_ptr, x_ptr, T, V, K, stride_x, stride_x, rstd, tile,
                pid_t, True, False, False, False, BLOCK_T, BLOCK_N, BLOCK_K, F32)
            if BIAS:
                y += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
            if SOFTCAP:
                y = soft_cap(y, softcap)
            if WRITE_LOGITS:
                tl.store(logits_ptr + offs_t[:, None] * stride_logits + offs_n[None, :], y,
                         mask=mask_t[:, None] & mask_n[None, :])
            if CHOOSE:
                best, bidx = keep_best(best, bidx, y, offs_t, offs_n + v0, mask_n, VKEY, seed,
                                       temp, SAMPLE)
    if CHOOSE:
        tl.store(pval_ptr + offs_t * n_parts + part, best, mask=mask_t)
        tl.store(pidx_ptr + offs_t * n_parts + part, bidx, mask=mask_t)


@triton.jit
def lm_head_kernel(x_ptr, w_ptr, norm_ptr, logits_ptr, pval_ptr, pidx_ptr, seed_ptr, temp_ptr,
                   T, V, K, stride_x, stride_logits, eps, tiles_per_program,
                   WRITE_LOGITS: tl.constexpr, CHOOSE: tl.constexpr, SAMPLE: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   STREAM: tl.constexpr, F32: tl.constexpr, PTX: tl.constexpr,
                   PDL: tl.constexpr, softcap, SOFTCAP: tl.constexpr, b_ptr,
                   BIAS: tl.constexpr):
    """PDL: the first weight piece before pdl_wait (gemv.gemv_kernel)."""
    pdl_start(PDL)
    pid = tl.program_id(0)
    lo = pid * tiles_per_program
    hi = tl.minimum(lo + tiles_per_program, tl.cdiv(V, BLOCK_N))
    w0, _ = stream_start(w_ptr, V, K, lo, hi, BLOCK_N, BLOCK_K, False, STREAM, PTX)
    pdl_wait(PDL)
    lm_head_body(x_ptr, w_ptr, norm_ptr, logits_ptr, pval_ptr, pidx_ptr, seed_ptr, temp_ptr,
                 T, V, K, stride_x, stride_logits, eps, tl.num_programs(0), lo, hi, pid,
                 tl.program_id(1), w0, 0, V, WRITE_LOGITS, CHOOSE, SAMPLE, BLOCK_T, BLOCK_N,
                 BLOCK_K, STREAM, F32, PTX, softcap, SOFTCAP, b_ptr, BIAS)


@triton.jit
def sample_logits_kernel(logits_ptr, pval_ptr, pidx_ptr, seed_ptr, temp_ptr, T, V, stride_logits,
                         n_tiles, SAMPLE: tl.constexpr, BLOCK_T: tl.constexpr,
                         BLOCK_N: tl.constexpr):
    """Phase 1 on precomputed (e.g. top-k / top-p filtered) logits [T, V]."""
    pid_n = tl.program_id(0)
    offs_t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < V
    vals = tl.load(logits_ptr + offs_t[:, None] * stride_logits + offs_n[None, :],
                   mask=mask_t[:, None] & mask_n[None, :], other=float("-inf"))
    seed = 0
    temp = 1.0
    if SAMPLE:
        seed = tl.load(seed_ptr)
        temp = tl.load(temp_ptr)
    best, idx = tile_choice(vals, offs_t, offs_n, mask_n, V, seed, temp, SAMPLE)
    tl.store(pval_ptr + offs_t * n_tiles + pid_n, best, mask=mask_t)
    tl.store(pidx_ptr + offs_t * n_tiles + pid_n, idx, mask=mask_t)


@triton.jit
def choose_merge_body(pval_ptr, pidx_ptr, n_tiles, row, tok_ptr, hist_ptr, pos_ptr, step_ptr,
                      seed_ptr, advance, BLOCK: tl.constexpr):
    best = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    bidx = tl.zeros([BLOCK], dtype=tl.int32)
    for i0 in range(0, n_tiles, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        v = tl.load(pval_ptr + row * n_tiles + offs, mask=offs < n_tiles, other=float("-inf"))
        ix = tl.load(pidx_ptr + row * n_tiles + offs, mask=offs < n_tiles, other=0)
        better = v > best  # strict: earlier slices win ties
        best = tl.where(better, v, best)
        bidx = tl.where(better, ix, bidx)
    top = tl.max(best, axis=0)
    # lowest token id among lanes holding the max (lane order != slice order across lanes)
    tok = tl.min(tl.where(best == top, bidx, 2147483647), axis=0)
    step = tl.load(step_ptr)
    tl.store(tok_ptr, tok)
    tl.store(hist_ptr + step, tok.to(tl.int64))
    tl.store(step_ptr, step + 1)
    tl.store(pos_ptr, tl.load(pos_ptr) + advance)
    tl.store(seed_ptr, tl.load(seed_ptr) + 1)
    return tok, step


@triton.jit
def choose_merge_kernel(pval_ptr, pidx_ptr, n_tiles, row, tok_ptr, hist_ptr, pos_ptr, step_ptr,
                        seed_ptr, advance, BLOCK: tl.constexpr):
    choose_merge_body(pval_ptr, pidx_ptr, n_tiles, row, tok_ptr, hist_ptr, pos_ptr, step_ptr,
                      seed_ptr, advance, BLOCK)


def n_vocab_tiles(V: int, K: int, T: int, device, block_n=None) -> int:
    return triton.cdiv(V, block_n or gemv_config(V, K, T, device).block_n)


def _partials(partials, T, n_tiles, device):
    """Views [T, n_tiles] of caller-owned flat (fp32, int32) buffers, or fresh ones."""
    if partials is None:
        return (torch.empty(T, n_tiles, device=device, dtype=torch.float32),
                torch.empty(T, n_tiles, device=device, dtype=torch.int32))
    pval, pidx = partials
    return pval[:T * n_tiles].view(T, n_tiles), pidx[:T * n_tiles].view(T, n_tiles)


def lm_head(x, w, norm_w, eps, *, logits=None, choose=True, sample=False, seed=None, temp=None,
            partials=None, stream: StreamConfig | None = None, softcap: float = 0.0,
            bias=None):
    """x [T, d] -> (logits [T, V] fp32 or None, pval, pidx [T, n_parts]) with the token choice:
    one partial per program. stream (T=1): the megakernel's decode stream, `stream.tiles` tiles
    per program. softcap > 0: the logits soft-capped (ModelSpec.logit_softcap); bias [V]: added
    to them before (PackedWeights.b_head)."""
    T, K = x.shape
    V = w.shape[0]
    ptx = stream_ptx(stream, w.dtype, K)
    if stream is not None:
        assert T == 1, "the stream is the decode (T=1) path"
        cfg, per = stream.tile(K), stream.tiles
    else:
        cfg, per = gemv_config(V, K, T, x.device, elem_bytes=w.element_size()), 1
    n_parts = triton.cdiv(triton.cdiv(V, cfg.block_n), per)
    pval, pidx = _partials(partials, T, n_parts, x.device)
    dummy = pval
    BT = block_t(T)
    pdl = use_pdl(x.device)
    lm_head_kernel[(n_parts, triton.cdiv(T, BT))](
        x, w, norm_w, logits if logits is not None else dummy, pval, pidx,
        seed if seed is not None else pidx, temp if temp is not None else pval,
        T, V, K, x.stride(0), logits.stride(0) if logits is not None else 0, eps, per,
        WRITE_LOGITS=logits is not None, CHOOSE=choose, SAMPLE=sample, BLOCK_T=BT,
        BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, STREAM=stream is not None,
        F32=INTERPRET or w.dtype == torch.float32, PTX=ptx, PDL=pdl, softcap=float(softcap),
        SOFTCAP=softcap > 0, b_ptr=bias if bias is not None else dummy, BIAS=bias is not None,
        num_warps=cfg.num_warps, launch_pdl=pdl)
    return logits, pval, pidx


def sample_logits(logits, seed, temp, *, sample=True, block_n=1024, partials=None):
    """Phase 1 over given logits [T, V] -> (pval, pidx) partials."""
    T, V = logits.shape
    n_tiles = triton.cdiv(V, block_n)
    pval, pidx = _partials(partials, T, n_tiles, logits.device)
    BT = min(64, triton.next_power_of_2(T))
    sample_logits_kernel[(n_tiles, triton.cdiv(T, BT))](
        logits, pval, pidx, seed, temp, T, V, logits.stride(0), n_tiles, SAMPLE=sample,
        BLOCK_T=BT, BLOCK_N=block_n)
    return pval, pidx


def choose_merge(pval, pidx, row, tok, hist, pos, step, seed, advance):
    """Phase 2: tok[0] = argmax over partials of `row`; hist[step] = tok; pos += advance; step += 1."""
    n_tiles = pval.shape[1]
    # one program; 16 warps keep ~4 loads per thread in flight over merge_block's lanes
    choose_merge_kernel[(1,)](pval, pidx, n_tiles, row, tok, hist, pos, step, seed, advance,
                              BLOCK=merge_block(n_tiles),
                              num_warps=16 if n_tiles > 4096 else 4)
