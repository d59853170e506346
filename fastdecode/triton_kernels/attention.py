"""Split-KV grouped-query decode attention with a log-sum-exp merge.

For query token t (position qp = pos + t) and query head h (KV head h // G):
    o[t, h] = softmax_j( q[t,h] . k[j] * scale ) @ v[j],  keys j <= qp (causal),
              and j > qp - window when the layer has a sliding window;
    (SOFTCAP: the scores cap tanh(q . k * scale / cap) first -- Gemma 2's attn_logit_softcapping;
     QSCALE: q . k * scale times 1 + beta ln(1 + floor(qp / orig)) -- Ministral 3's
     llama_4_scaling_beta, a query scale growing with the position past the original context;
     ALIBI 1: head h's scores plus slope[h] times the key's position j -- BLOOM's ALiBi, whose
     -slope[h] (qp - j) it equals under the softmax: a query's own position cancels; ALIBI 2:
     (q . k + bf16(slope[h] j)) * scale, the bias rounded as HF's Falcon rounds it:
     spec.ALIBI_BLOOM / ALIBI_FALCON;
     SINKS: head h's sink logit s_h joins the softmax as a key without a value (gpt-oss), o =
     sum_j e^(x_j) v_j / (e^(s_h) + sum_j e^(x_j)) -- split 0 starts its online softmax from it
     (running max s_h, sum 1), so the merge counts it once)
Phase 1 (attention_body), one program per (KV head, split, block of tokens): every key and value
row of the split is read ONCE for all G query heads of its group (rows of the score tile are
(token, group member) pairs, M padded to >= 16 for tl.dot), online softmax in fp32, writes a
normalised partial o [split, t, h, hd] (fp32) and its lse.
Phase 2 (attn_merge_body), one program per (t, KV head, merge_heads q heads of the group; one
head by default: config.merge_heads):
o = sum_i exp(lse_i - M) o_i / sum_i exp(lse_i - M) over the active splits in ascending order
(fixed order: deterministic).
Splits: the keys the step needs, [k0, pos + T) (k0 > 0 only under a sliding window), are dealt
evenly over the n_splits programs of each KV head at every launch (split_range), in chunks rounded
up to BLOCK_S keys -- not over the allocated cache: with a fixed chunk of max_seq_len / n_splits a
2048-key context in a 32768-key cache ran on 2 of 33 splits, and the megakernel decoded Llama-3.2-1B
at 830 instead of 1094 tok/s (H200, 2026-12-02, bench_decode --prompt-len 2048 --max-seq-len 32768).
Bytes (decode): 2 * KVH * L_ctx * hd * 2 -- e.g. 8 KV heads x 4096 keys x 128 x 2 x 2 = 16.8 MB/layer.
"""
import torch
import triton
import triton.language as tl

from ..ptx_inline.memory import prefetch_l2_bulk
from ..spec import ALIBI_BLOOM, ALIBI_FALCON
from ._common import INTERPRET, mm_tile, pdl_start, pdl_wait, round_bf16, soft_cap
from .config import (GPU_SMS, attention_blocks, attention_config, merge_heads, merge_splits,
                     use_pdl)

# ModelSpec.alibi's kinds, as the body's ALIBI constexpr compares them
AL_BLOOM: tl.constexpr = tl.constexpr(ALIBI_BLOOM)
AL_FALCON: tl.constexpr = tl.constexpr(ALIBI_FALCON)


def split_range_host(pos: int, T: int, window: int, n_splits: int, align: int) -> tuple:
    """(k0, chunk): split i of a launch covers keys [k0 + i * chunk, k0 + (i + 1) * chunk) of
    [k0, pos + T); chunk = cdiv(keys, n_splits) rounded up to align (BLOCK_S), so a split's key
    loop has no partial block but its last. The host twin of split_range (the VM's splits)."""
    k0 = max(0, pos - window + 1) if window > 0 else 0
    per = -(-(pos + T - k0) // n_splits)
    return k0, -(-per // align) * align


@triton.jit
def split_range(pos, T, window, n_splits, ALIGN: tl.constexpr):
    """split_range_host in the kernels: (first key, keys per split) of this launch."""
    k0 = pos * 0
    if window > 0:
        k0 = tl.maximum(pos - window + 1, 0)
    return k0, tl.cdiv(tl.cdiv(pos + T - k0, n_splits), ALIGN) * ALIGN


@triton.jit
def kv_prefetch(k_ptr, v_ptr, pos, T, S, HD, window, n_splits, kvh, split, ALIGN: tl.constexpr,
                USE_ASM: tl.constexpr):
    """Ask L2 for the keys and values split `split` of KV head kvh will read at this step (every
    token's, [start, min(start + chunk, pos + T)): split_range) -- one bulk prefetch each
    (ptx_inline.prefetch_l2_bulk: a hint, no ordering; the rows this step's QKV tasks write
    included, which L2 serves current whatever the prefetch saw). Returns (the first key, the
    bytes asked of K and of V)."""
    elt: tl.constexpr = k_ptr.dtype.element_ty.primitive_bitwidth // 8
    k0, chunk = split_range(pos, T, window, n_splits, ALIGN)
    start = k0 + split * chunk
    n = tl.maximum(tl.minimum(start + chunk, pos + T) - start, 0) * HD * elt
    off = (kvh.to(tl.int64) * S + start) * HD
    prefetch_l2_bulk(k_ptr + off, n, USE_ASM)
    prefetch_l2_bulk(v_ptr + off, n, USE_ASM)
    return start, n


@triton.jit
def attention_body(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, pos, T, TM, S, H, HD, window, scale,
                   n_splits, kvh, split, pid_t,
                   GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_TOK: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                   F32: tl.constexpr, DIRECT: tl.constexpr, softcap=0.0,
                   SOFTCAP: tl.constexpr = False, qs_beta=0.0, qs_orig=1,
                   QSCALE: tl.constexpr = False, alibi_ptr=None, ALIBI: tl.constexpr = 0,
                   sink_ptr=None, SINKS: tl.constexpr = False):
    """One (KV head, split, token block) program of phase 1 (module docstring): split `split` of
    n_splits (split_range). DIRECT (n_splits 1): o_ptr is the attention output [T, H * HD] in
    its dtype, written final -- no lse, no merge. SOFTCAP: the scores soft-capped at softcap.
    QSCALE: each query's scores times 1 + qs_beta ln(1 + qp // qs_orig) (module docstring).
    ALIBI (spec.ALIBI_BLOOM / ALIBI_FALCON; 0 none): alibi_ptr [H] the slopes of the heads (this
    rank's), each added times the key's position (module docstring). SINKS: sink_ptr [H] fp32
    the heads' sink logits, counted by split 0 (module docstring)."""
    offs_m = tl.arange(0, BLOCK_M)
    tloc = offs_m // BLOCK_G
    g = offs_m % BLOCK_G
    t = pid_t * BLOCK_TOK + tloc
    h = kvh * GROUP + g
    valid = (g < GROUP) & (tloc < BLOCK_TOK) & (t < T)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HD
    qp = pos + t
    qs = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    if QSCALE:  # the query's position scale: exactly 1 below qs_orig
        qs = 1.0 + qs_beta * tl.log(1.0 + (qp // qs_orig).to(tl.float32))
    slope = tl.zeros([BLOCK_M], dtype=tl.float32)
    if ALIBI:
        slope = tl.load(alibi_ptr + h, mask=valid, other=0.0)
    q = tl.load(q_ptr + (t[:, None] * H + h[:, None]) * HD + offs_d[None, :],
                mask=valid[:, None] & mask_d[None, :], other=0.0)
    # keys this program may need: [first, last] over its tokens, clipped to its split
    t_hi = tl.minimum(T, (pid_t + 1) * BLOCK_TOK)
    k0, chunk = split_range(pos, T, window, n_splits, BLOCK_S)
    start = k0 + split * chunk
    end = tl.minimum(start + chunk, pos + t_hi)
    if window > 0:
        start = tl.maximum(start, pos + pid_t * BLOCK_TOK - window + 1)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if SINKS:  # the sink as the softmax's first term: e^(s - m) = 1 at m = s
        first = valid & (split == 0)
        m_i = tl.load(sink_ptr + h, mask=first, other=float("-inf"))
        l_i = tl.where(first, 1.0, 0.0)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    kv_base = kvh.to(tl.int64) * S * HD
    for s0 in range(start, end, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        mask_s = offs_s < end
        kv_off = kv_base + offs_s[:, None] * HD + offs_d[None, :]
        kvm = mask_s[:, None] & mask_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=kvm, other=0.0)
        v = tl.load(v_ptr + kv_off, mask=kvm, other=0.0)
        sc = mm_tile(q, tl.trans(k), F32) * scale
        if ALIBI == AL_BLOOM:
            sc = sc + slope[:, None] * offs_s[None, :].to(tl.float32)
        elif ALIBI == AL_FALCON:  # the product exact in fp32 (8-bit slope, j < 2^16), one rounding
            sc = sc + round_bf16(slope[:, None] * offs_s[None, :].to(tl.float32)) * scale
        if QSCALE:
            sc = sc * qs[:, None]
        if SOFTCAP:
            sc = soft_cap(sc, softcap)
        ok = mask_s[None, :] & (offs_s[None, :] <= qp[:, None])
        if window > 0:
            ok = ok & (offs_s[None, :] > qp[:, None] - window)
        sc = tl.where(ok, sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(sc - m_use[:, None])
        alpha = tl.exp(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + mm_tile(p.to(v.dtype), v, F32)
        m_i = m_new
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    if DIRECT:
        tl.store(o_ptr + (t[:, None] * H + h[:, None]) * HD + offs_d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=valid[:, None] & mask_d[None, :])
    else:
        row = (split * TM + t) * H + h
        tl.store(o_ptr + row[:, None] * HD + offs_d[None, :], out,
                 mask=valid[:, None] & mask_d[None, :])
        tl.store(lse_ptr + row, lse, mask=valid)


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, pos_ptr, T, TM, S, H, HD, window, scale,
                     n_splits, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_TOK: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                     F32: tl.constexpr, DIRECT: tl.constexpr, PDL: tl.constexpr, softcap,
                     SOFTCAP: tl.constexpr, qs_beta, qs_orig, QSCALE: tl.constexpr, alibi_ptr,
                     ALIBI: tl.constexpr, sink_ptr, SINKS: tl.constexpr):
    pdl_start(PDL)
    pdl_wait(PDL)
    # token blocks last-first: under the causal mask the last tokens' blocks read the most keys,
    # so a long prompt's launch starts its longest programs first and ends on short ones
    attention_body(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, tl.load(pos_ptr), T, TM, S, H, HD, window,
                   scale, n_splits, tl.program_id(0), tl.program_id(1),
                   tl.num_programs(2) - 1 - tl.program_id(2),
                   GROUP, BLOCK_G, BLOCK_TOK, BLOCK_M, BLOCK_S, BLOCK_D, F32, DIRECT, softcap,
                   SOFTCAP, qs_beta, qs_orig, QSCALE, alibi_ptr, ALIBI, sink_ptr, SINKS)


@triton.jit
def attn_merge_body(o_ptr, lse_ptr, out_ptr, pos, T, TM, H, HD, window, n_splits, t, kvh, g0,
                    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_SP: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    """Token t, query heads [g0, g0 + BLOCK_G) of KV head kvh's GROUP (masked to the group):
    [BLOCK_SP splits, BLOCK_G heads, BLOCK_D] tiles, each round's lse and partial o loaded
    together and merged online (running max, rescaled sums): up to BLOCK_SP active splits are
    one round trip to L2 (config.merge_splits; the megakernel waits on it between attention and
    o_proj; a max pass first cost a second one). Bytes: active splits x BLOCK_G x (HD + 1) x 4
    read, BLOCK_G x HD written. Splits in ascending order: deterministic. The active splits:
    those split_range gave keys (BLOCK_S: the attention's, which it rounds the splits to)."""
    offs_g = g0 + tl.arange(0, BLOCK_G)
    mask_g = offs_g < GROUP
    h = kvh * GROUP + offs_g
    offs_d = tl.arange(0, BLOCK_D)
    mask_gd = mask_g[:, None] & (offs_d < HD)[None, :]
    k0, chunk = split_range(pos, T, window, n_splits, BLOCK_S)
    n_act = tl.minimum(n_splits, tl.cdiv(pos + T - k0, chunk))
    sp = tl.arange(0, BLOCK_SP)
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    den = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for s0 in range(0, n_act, BLOCK_SP):
        ms = (s0 + sp) < n_act
        rows = ((s0 + sp[:, None]) * TM + t) * H + h[None, :]  # [SP, G]
        lse = tl.load(lse_ptr + rows, mask=ms[:, None] & mask_g[None, :], other=float("-inf"))
        o = tl.load(o_ptr + rows[:, :, None] * HD + offs_d[None, None, :],
                    mask=ms[:, None, None] & mask_gd[None, :, :], other=0.0)
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_use)  # 0 in the first round (m = -inf)
        w = tl.exp(lse - m_use[None, :])
        den = den * alpha + tl.sum(w, axis=0)
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o, axis=0)
        m = m_new
    out = acc / tl.where(den > 0, den, 1.0)[:, None]
    tl.store(out_ptr + (t * H + h[:, None]) * HD + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_gd)


@triton.jit
def attn_merge_kernel(o_ptr, lse_ptr, out_ptr, pos_ptr, T, TM, H, HD, window, n_splits,
                      GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_SP: tl.constexpr,
                      BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr):
    """grid (T, KV heads, head chunks of BLOCK_G)."""
    pdl_start(PDL)
    pdl_wait(PDL)
    attn_merge_body(o_ptr, lse_ptr, out_ptr, tl.load(pos_ptr), T, TM, H, HD, window, n_splits,
                    tl.program_id(0), tl.program_id(1), tl.program_id(2) * BLOCK_G, GROUP,
                    BLOCK_G, BLOCK_SP, BLOCK_D,
                    BLOCK_S)


def split_plan(max_seq_len: int, n_kv_heads: int, block_s: int = 64, sms: int = GPU_SMS):
    """(chunk, n_splits) of a max_seq_len cache: about 2 programs per SM at full context, chunk
    keys each (a multiple of block_s; what a split reads at full context, the cost model's). At
    a shorter context the splits share the keys there are (split_range)."""
    want = max(1, (2 * sms) // n_kv_heads)
    chunk = triton.cdiv(triton.cdiv(max_seq_len, want), block_s) * block_s
    return chunk, triton.cdiv(max_seq_len, chunk)


def attention(q, k_cache, v_cache, pos, *, window: int = 0, scale=None, out=None,
              n_splits=None, block_s=None, block_tok=None, num_warps=4, num_stages=3,
              scratch=None, heads_per_merge=1, softcap: float = 0.0, qscale: tuple = (),
              alibi=None, alibi_kind: int = ALIBI_BLOOM, sinks=None):
    """q [T, H, hd]; k_cache/v_cache [KVH, S, hd] (one layer, positions < pos+T filled); pos int32
    [1] device tensor. Returns out [T, H*hd] in q's dtype. n_splits: programs per KV head
    (split_plan's for S by default), each taking an even share of the keys; block_s: keys per
    iteration, block_tok: query tokens per program (attention_config's by default; a long
    prompt's pass takes prefill_attention_config's larger tiles); heads_per_merge: q heads per
    merge program (config.merge_heads); softcap > 0: the scores soft-capped (SOFTCAP); qscale
    (beta, orig): the position-dependent query scale (QSCALE; () none); alibi [H] fp32: the
    heads' ALiBi slopes, of alibi_kind (ALIBI: spec.ALIBI_BLOOM / ALIBI_FALCON; None none);
    sinks [H] fp32: the heads' attention-sink logits (SINKS; None none)."""
    T, H, HD = q.shape
    KVH, S, _ = k_cache.shape
    G = H // KVH
    scale = HD ** -0.5 if scale is None else scale
    assert sinks is None or (sinks.dtype == torch.float32 and sinks.shape == (H,)
                             and sinks.is_contiguous())
    bs, bt = attention_config(HD, G, T)
    block_s, block_tok = block_s or bs, block_tok or bt
    if n_splits is None:
        _, n_splits = split_plan(S, KVH, block_s)
    direct = n_splits == 1  # one split: its program writes the output, no merge launch
    if out is None:
        out = torch.empty(T, H * HD, device=q.device, dtype=q.dtype)
    if direct:
        o_part, lse = out[None], out  # no partials (lse_ptr is not read)
    elif scratch is None:
        o_part = torch.empty(n_splits, T, H, HD, device=q.device, dtype=torch.float32)
        lse = torch.empty(n_splits, T, H, device=q.device, dtype=torch.float32)
    else:
        o_part, lse = scratch
    TM = o_part.shape[1]
    BLOCK_G, BLOCK_M, BLOCK_D = attention_blocks(HD, G, block_tok)
    grid = (KVH, n_splits, triton.cdiv(T, block_tok))
    pdl = use_pdl(q.device)
    attention_kernel[grid](q, k_cache, v_cache, out if direct else o_part, lse, pos, T, TM, S, H,
                           HD, window, scale, n_splits, GROUP=G, BLOCK_G=BLOCK_G,
                           BLOCK_TOK=block_tok, BLOCK_M=BLOCK_M, BLOCK_S=block_s, BLOCK_D=BLOCK_D,
                           F32=INTERPRET or q.dtype == torch.float32, DIRECT=direct, PDL=pdl,
                           softcap=float(softcap), SOFTCAP=softcap > 0,
                           qs_beta=float(qscale[0]) if qscale else 0.0,
                           qs_orig=int(qscale[1]) if qscale else 1, QSCALE=bool(qscale),
                           alibi_ptr=alibi, ALIBI=alibi_kind if alibi is not None else 0,
                           sink_ptr=sinks, SINKS=sinks is not None, num_warps=num_warps,
                           num_stages=num_stages, launch_pdl=pdl)
    if direct:
        return out
    mh = merge_heads(G, heads_per_merge)
    attn_merge_kernel[(T, KVH, triton.cdiv(G, mh))](
        o_part, lse, out, pos, T, TM, H, HD, window, n_splits, GROUP=G, BLOCK_G=mh,
        BLOCK_SP=merge_splits(n_splits, mh, BLOCK_D), BLOCK_D=BLOCK_D, BLOCK_S=block_s, PDL=pdl,
        launch_pdl=pdl)
    return out
