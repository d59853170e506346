"""Plain-torch fp32 reference of every op -- the oracle for tests, the `torch` runtime mode and
the benchmarks. Same contracts (shapes, in-place cache writes) as the Triton launchers.
How the layer blocks compute is one hook bundle, Numerics (the fp32 reference, FP32, by default):
the long prompts' prefill (runtime.py) runs the same blocks with matmuls in the weights' dtype
(cuBLAS on a GPU) and the Triton RMSNorm, SwiGLU and attention kernels."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .spec import ALIBI_BLOOM, ALIBI_FALCON, OAI_SWIGLU


def rmsnorm(x, w, eps, residual=None):
    """Returns fp32 rmsnorm(x (+ residual)); residual (if given) is updated in place to x+residual,
    rounded to its dtype, as the kernels keep the residual stream."""
    h = x.float()
    if residual is not None:
        residual.copy_((h + residual.float()).to(residual.dtype))
        h = residual.float()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def block_out(y, norm_w, eps, norm=rmsnorm):
    """A block's output y [T, d] as the residual stream adds it: y itself, or -- where the model
    normalizes its blocks' outputs (ModelSpec.post_norms; norm_w [d], None: no such norm) --
    norm(y, norm_w, eps) (this module's fp32 rmsnorm, or a Numerics' norm)."""
    return y if norm_w is None else norm(y, norm_w, eps)


def soft_cap(x, cap: float):
    """cap tanh(x / cap) (Gemma 2's soft-capping of attention scores and logits; cap 0: x)."""
    return x if not cap else cap * torch.tanh(x / cap)


def mm_fp32(x, w):
    """fp32 x [T, K] @ w [N, K].T in fp32: the reference's matmul."""
    return x.float() @ w.float().t()


def mm_native(x, w):
    """x @ w.T in w's dtype (bf16 / fp16 tensor cores on a GPU, fp32 accumulation, the output
    rounded to w's dtype, as Hugging Face's layers): gemv's epilogue then runs in that dtype, its
    tensors half the bytes of fp32 ones (a long prompt's pass is 2048 tokens of them)."""
    return x.to(w.dtype) @ w.t()


def activation(g, act="silu", params=None):
    """act(g): ModelSpec.act -- silu, gelu_tanh (torch's tanh-approximated GELU, HF's
    gelu_pytorch_tanh; in fp64, then rounded: its 0.5 g (1 + tanh(u)) cancels in fp32 where u
    << 0, 2e-5 relative at g = -4, which the kernels' g sigmoid(2u) form does not), relu2
    (relu(g)^2), relu, gelu (the erf GELU, in fp64 too) or xielu (params [2N]: alpha_p's and
    alpha_n's rows, gemv.XIELU; HF's XIELUActivation with beta 0.5, eps -1e-6, in fp64)."""
    if act == "xielu":
        x = g.double()
        ap, an = params.double().view(2, -1)
        y = torch.where(x > 0, ap * x * x, an * (torch.expm1(torch.clamp(x, max=-1e-6)) - x))
        return (y + 0.5 * x).to(g.dtype)
    if act == "relu2":
        return torch.square(F.relu(g))
    if act == "relu":
        return F.relu(g)
    if act == "silu":
        return F.silu(g)
    if act == "gelu":
        return F.gelu(g.double()).to(g.dtype)
    if act == "gelu_tanh":
        return F.gelu(g.double(), approximate="tanh").to(g.dtype)
    raise ValueError(f"activation {act!r} of one operand: expected one of silu, gelu_tanh, "
                     "relu2, gelu, relu, xielu (swiglu_oai takes its gate and up: glu)")


def glu(y, act="silu", gated=True, params=None):
    """y [T, 2N] = [gate | up] -> act(gate) * up [T, N] in y's dtype; not gated (an MLP without
    a gate, ModelSpec.gated): y [T, N] = up -> act(up) (params: xIELU's, activation); act
    "swiglu_oai": gpt-oss's clamped SwiGLU (spec.OAI_SWIGLU, as HF's GptOssExperts)."""
    if not gated:
        return activation(y, act, params)
    g, u = y.chunk(2, dim=-1)
    if act == "swiglu_oai":
        alpha, limit = OAI_SWIGLU
        c = g.clamp(max=limit)
        return c * torch.sigmoid(alpha * c) * (u.clamp(-limit, limit) + 1)
    return activation(g, act) * u


def gemv(x, w, *, norm_w=None, eps=1e-6, bias=None, residual=None, swiglu=False, act="silu",
         gated=True, num=None):
    """[T, N]: epilogue(prologue(x) @ w.T) in the matmul's output dtype; swiglu: the MLP's
    activation epilogue (glu: act(gate) * up of w = [gate; up], or act(up) if not gated); num: the
    Numerics (FP32: fp32 throughout; the long prompts': the epilogue in the weights' dtype, each
    op computed in fp32 and rounded, as torch does for bf16 / fp16). An xIELU MLP's bias is its
    activation's parameters (gemv.XIELU), not added."""
    num = num or FP32
    y = num.mm(num.norm(x, norm_w, eps) if norm_w is not None else x, w)
    params = None
    if swiglu and act == "xielu":
        params, bias = bias, None
    if bias is not None:
        y = y + bias.to(y.dtype)
    if swiglu:
        y = num.swiglu(y, act, gated, params=params)
    if residual is not None:
        y = y + residual.to(y.dtype)
    return y


def rope(y, cos, sin):
    """y [T, n, hd] fp32, cos/sin [T, hd/2]: y*cos + rotate_half(y)*sin (HF convention)."""
    lo, hi = y.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([lo * c - hi * s, hi * c + lo * s], dim=-1)


def norm_rope(y, norm_w, cos, sin, eps, after=False):
    """q or k heads y [T, n, hd]: their RMSNorm (norm_w [n, hd]; None: none), then RoPE (cos / sin
    [T, hd/2]) -- or RoPE first if after (HunYuan)."""
    if after:
        y = rope(y, cos, sin)
    if norm_w is not None:
        y = rmsnorm(y, norm_w, eps)
    return y if after else rope(y, cos, sin)


def heads_norm(y, w, eps):
    """y [T, n, hd] RMS-normalized over all its heads at once (OLMo 2's q / k norms), w [n, hd]."""
    return rmsnorm(y.reshape(y.shape[0], -1), w.reshape(-1), eps).view(y.shape)


def qkv_rope(x, w_qkv, norm_w, cos, sin, pos, k_cache, v_cache, *, n_heads, eps, bias=None,
             qk_norm=None, num=None, qk_norm_after=False, qk_norm_full=False):
    """Writes k/v of the T tokens at positions pos..pos+T-1 into the layer's cache; returns q fp32
    [T, H, hd]. The q / k norms (qk_norm [H + KVH, hd], a row per head slot; after RoPE if
    qk_norm_after; over all heads at once if qk_norm_full) are this module's rmsnorm whatever
    num's."""
    T = x.shape[0]
    KVH, S, HD = k_cache.shape
    p = int(pos)
    y = gemv(x, w_qkv, norm_w=norm_w, eps=eps, bias=bias, num=num).view(T, n_heads + 2 * KVH, HD)
    q, k, v = y.split([n_heads, KVH, KVH], dim=1)
    c, s = cos[p:p + T].float(), sin[p:p + T].float()
    if qk_norm_full:
        q, k = heads_norm(q, qk_norm[:n_heads], eps), heads_norm(k, qk_norm[n_heads:], eps)
        qk_norm = None
    wq, wk = (None, None) if qk_norm is None else (qk_norm[:n_heads], qk_norm[n_heads:])
    q, k = norm_rope(q, wq, c, s, eps, qk_norm_after), norm_rope(k, wk, c, s, eps, qk_norm_after)
    k_cache[:, p:p + T] = k.transpose(0, 1).to(k_cache.dtype)
    v_cache[:, p:p + T] = v.transpose(0, 1).to(v_cache.dtype)
    return q


def position_scale(qpos, qscale):
    """The query scale at positions qpos (Ministral 3's llama_4_scaling_beta): 1 + beta ln(1 +
    floor(qpos / orig)) for qscale (beta, orig); 1 for qscale ()."""
    if not qscale:
        return torch.ones(qpos.shape, dtype=torch.float32, device=qpos.device)
    beta, orig = qscale
    return 1.0 + beta * torch.log1p(torch.div(qpos, orig, rounding_mode="floor").float())


def alibi_bias(slopes, kp, kind, scale):
    """ALiBi's bias [heads, keys] of the heads' slopes at key positions kp, of ModelSpec.alibi's
    kind: slope j (ALIBI_BLOOM), or Falcon's bf16(slope j) times the attention scale."""
    b = slopes.float()[:, None] * kp.float()[None, :]
    return b.bfloat16().float() * scale if kind == ALIBI_FALCON else b


def attention(q, k_cache, v_cache, pos, *, window=0, scale=None, softcap=0.0, qscale=(),
              alibi=None, alibi_kind=ALIBI_BLOOM, sinks=None):
    """q [T, H, hd] (queries at positions pos..pos+T-1) -> fp32 [T, H*hd]; causal, optional
    window; alibi [H] (ALiBi's slopes): each head's scores plus alibi_bias; each query's scores
    times position_scale (qscale), then soft-capped at softcap (0: not); sinks [H] (attention
    sinks, ModelSpec.attn_sinks): head h's logit joins each of its softmaxes, with no value."""
    T, H, HD = q.shape
    KVH = k_cache.shape[0]
    p = int(pos)
    L = p + T
    scale = HD ** -0.5 if scale is None else scale
    k = k_cache[:, :L].float().repeat_interleave(H // KVH, dim=0)   # [H, L, hd]
    v = v_cache[:, :L].float().repeat_interleave(H // KVH, dim=0)
    qp = torch.arange(p, L, device=q.device)[:, None]
    kp = torch.arange(L, device=q.device)[None, :]
    s = torch.einsum("thd,hld->htl", q.float(), k) * scale
    if alibi is not None:
        s = s + alibi_bias(alibi, kp[0], alibi_kind, scale)[:, None, :]
    s = soft_cap(s * position_scale(qp, qscale)[None], softcap)
    ok = kp <= qp
    if window:
        ok = ok & (kp > qp - window)
    s = s.masked_fill(~ok[None], float("-inf"))
    if sinks is None:
        p = s.softmax(-1)
    else:
        p = torch.cat([s, sinks.float()[:, None, None].expand(H, T, 1)], -1).softmax(-1)[..., :-1]
    o = torch.einsum("htl,hld->thd", p, v)
    return o.reshape(T, H * HD)


def repetition_penalty(logits, seen, penalty: float):
    """HF's RepetitionPenaltyLogitsProcessor: the logits of the tokens already in the sequence
    (seen [V] bool: the prompt's and the chosen tokens) divided by penalty where >= 0 and
    multiplied by it where < 0 (so a penalty > 1 makes them less likely either way)."""
    return torch.where(seen, torch.where(logits < 0, logits * penalty, logits / penalty), logits)


def filter_logits(logits, top_k=None, top_p=None, min_p=None):
    """HF's TopKLogitsWarper, TopPLogitsWarper, then MinPLogitsWarper (min_tokens_to_keep=1) on
    temperature-scaled logits; removed -> -inf. min_p drops the tokens whose probability is below
    min_p times the top token's (the top token itself never: min_p <= 1)."""
    out = logits
    if top_k is not None and top_k > 0:
        k = min(int(top_k), out.shape[-1])
        kth = torch.topk(out, k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        srt, idx = torch.sort(out, descending=False, dim=-1)
        cum = srt.softmax(-1).cumsum(-1)
        remove = cum <= (1 - top_p)
        remove[..., -1:] = False
        out = out.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    if min_p is not None and min_p > 0:
        probs = out.softmax(-1)
        out = out.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))
    return out


def choose(logits, *, temperature=1.0, sample=False, generator=None):
    """Greedy argmax (lowest id on ties) or Gumbel-max sample of softmax(logits / temperature)."""
    if not sample:
        return int(torch.argmax(logits.float(), dim=-1).reshape(-1)[0])
    u = torch.rand(logits.shape, generator=generator, device=logits.device,
                   dtype=torch.float32).clamp_min(1e-20)
    return int(torch.argmax(logits.float() / temperature - torch.log(-torch.log(u))).reshape(-1)[0])


def attention_partial(q, k, v, qpos, key0, key1, window=0, scale=None, softcap=0.0, qscale=(),
                      alibi=None, alibi_kind=ALIBI_BLOOM):
    """Partial attention of queries q [n, G, hd] at positions qpos [n] over keys [key0, key1) of
    one KV head (k, v [S, hd]), causal (+ window; alibi [G]: the group's ALiBi slopes). Returns
    (o normalised [n, G, hd], lse [n, G]); rows with no visible key get o = 0, lse = -inf (as the
    kernel's split phase)."""
    n, G, HD = q.shape
    scale = HD ** -0.5 if scale is None else scale
    kp = torch.arange(key0, max(key0, key1), device=q.device)
    s = torch.einsum("ngd,ld->ngl", q.float(), k[kp].float()) * scale
    if alibi is not None:
        s = s + alibi_bias(alibi, kp, alibi_kind, scale)[None]
    s = soft_cap(s * position_scale(qpos, qscale)[:, None, None], softcap)
    ok = kp[None, :] <= qpos[:, None]
    if window:
        ok = ok & (kp[None, :] > qpos[:, None] - window)
    s = s.masked_fill(~ok[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(torch.isfinite(lse)[..., None], torch.exp(s - lse[..., None]), 0.0)
    o = torch.einsum("ngl,ld->ngd", p, v[kp].float())
    return o, lse


def merge_partials(o, lse):
    """o [splits, ..., hd], lse [splits, ...] -> softmax-weighted sum over splits (fp32)."""
    m = lse.max(0).values
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp(lse - m)
    return (w[..., None] * o).sum(0) / w.sum(0)[..., None]


def l2_normed(x, eps: float = 1e-6):
    """x * rsqrt(sum(x^2) + eps) over the last dim (the FLA library's l2norm, HF's)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def gated_delta(y, conv_w, A_log, dt, norm_w, conv_state, state, gdn: tuple, eps: float):
    """A Gated DeltaNet's mixer after its in_proj, fp32, on rows y [T, conv + value_dim + 2 nv]
    = [q | k | v | z | b | a] (ModelSpec.gdn_dims): c = SiLU(the causal depthwise convolution of
    q|k|v over conv_state [kernel - 1, conv] (the rows before) and y, taps conv_w [conv,
    kernel]); q, k L2-normed (q / sqrt(dk) too), each k head serving nv / nk value heads; per
    row, beta = sigmoid(b), decay e^g with g = -exp(A_log) softplus(a + dt) ([nv] each), and the
    state S [nv, dk, dv] <- e^g S + k (beta (v - S^T k))^T, o = S^T q; o's RMSNorm (eps) times
    norm_w [dv] times SiLU(z) -> [T, value_dim]. conv_state and state (fp32) are updated in place.
    The kernel's contract (triton_kernels.gated_delta)."""
    nk, nv, dk, dv, kc = gdn
    T, kd, vd = y.shape[0], nk * dk, nv * dv
    conv = 2 * kd + vd
    x = torch.cat([conv_state.float(), y[:, :conv].float()])  # [kc - 1 + T, conv]
    w = conv_w.float()
    c = F.silu(sum(x[j:j + T] * w[:, j] for j in range(kc)))
    if kc > 1:
        conv_state.copy_(x[-(kc - 1):].to(conv_state.dtype))
    q, k = (l2_normed(c[:, o:o + kd].view(T, nk, dk)).repeat_interleave(nv // nk, 1)
            for o in (0, kd))
    q = q / math.sqrt(dk)
    v = c[:, 2 * kd:].view(T, nv, dv)
    z, b, a = y[:, conv:].float().split([vd, nv, nv], -1)
    beta = torch.sigmoid(b)
    decay = torch.exp(-A_log.float().exp() * F.softplus(a + dt.float()))
    S, o = state.float(), torch.empty(T, nv, dv, device=y.device)
    for t in range(T):
        S = S * decay[t, :, None, None]
        delta = (v[t] - (S * k[t, :, :, None]).sum(1)) * beta[t, :, None]
        S = S + k[t, :, :, None] * delta[:, None, :]
        o[t] = (S * q[t, :, :, None]).sum(1)
    state.copy_(S)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * norm_w.float()
    return (o * F.silu(z.view(T, nv, dv))).view(T, vd)


@dataclass(frozen=True)
class Numerics:
    """How the layer blocks compute. mm(x, w): x @ w.T; norm(x, w, eps): the d_model-wide
    RMSNorms; swiglu(y [T, 2N], act, gated, params=) -> [T, N] (glu's contract); attend(q, k_cache,
    v_cache, pos, window=, softcap=, qscale=, alibi=, alibi_kind=, sinks=): the attention (this
    module's, or a kernel's with the same contract); delta(y, conv_w, A_log, dt, norm_w, conv_state,
    state, gdn, eps): a Gated DeltaNet's mixer (gated_delta's contract)."""
    mm: Callable = mm_fp32
    norm: Callable = rmsnorm
    swiglu: Callable = glu
    attend: Callable = attention
    delta: Callable = gated_delta


FP32 = Numerics()  # the reference


def attention_block(pw, l, h, pos, k_cache, v_cache, cos, sin, num=FP32):
    """Layer l's attention output projection [T, d] (fp32 under FP32), without the residual:
    o_proj(attention(qkv_rope(rmsnorm(h)))) + o bias. On a tensor-parallel shard it is this rank's
    partial sum. Writes the T new keys / values into the layer's cache."""
    s = pw.spec
    a = s.attn_index(l)  # the attention stacks' layer (ModelSpec.linear_layers: not theirs)
    pick = lambda t: None if t is None else t[a]  # noqa: E731
    q = qkv_rope(h, pw.matrix("qkv", l), pw.pre_norm(0, l), cos, sin, pos, k_cache, v_cache,
                 n_heads=s.n_heads, eps=s.rms_eps, bias=pick(pw.b_qkv), qk_norm=pick(pw.qk_norm),
                 num=num, qk_norm_after=s.qk_norm_after, qk_norm_full=s.qk_norm_full)
    o = num.attend(q.to(pw.dtype), k_cache, v_cache, pos, window=s.layer_windows[l],
                   softcap=s.attn_softcap, qscale=s.q_pos_scale, alibi=pw.alibi,
                   alibi_kind=s.alibi, sinks=None if pw.sinks is None else pw.sinks[l])
    if pw.w_gate is not None:  # each head's output times sigmoid(its gate rows . x)
        g = gemv(h, pw.w_gate[a], norm_w=pw.pre_norm(0, l), eps=s.rms_eps, num=num)
        o = (o.reshape(g.shape).float() * torch.sigmoid(g.float())).to(o.dtype)
    return gemv(o.to(pw.dtype), pw.matrix("o", l), bias=pick(pw.b_o), num=num)


def gdn_block(pw, l, h, conv_state, state, num=FP32):
    """Layer l's Gated DeltaNet [T, d] (fp32 under FP32), without the residual: out_proj(
    gated_delta(in_proj(rmsnorm(h)))); conv_state / state: the layer's (updated in place)."""
    s = pw.spec
    i = s.lin_index(l)
    y = gemv(h, pw.w_lin_in[i], norm_w=pw.pre_norm(0, l), eps=s.rms_eps, num=num)
    o = num.delta(y.to(pw.dtype), pw.lin_conv[i], pw.lin_alog[i], pw.lin_dt[i], pw.lin_norm[i],
                  conv_state, state, s.gdn, s.rms_eps)
    return gemv(o.to(pw.dtype), pw.w_lin_out[i], num=num)


def route(logits, top_k: int, norm_topk: bool, shared: bool = False, sigmoid: bool = False,
          choice_bias=None, groups: tuple = (1, 1), scale: float = 1.0):
    """A mixture's routing of rows logits [T, E (+ 1)] -- the router's E logits, then, shared,
    the shared expert's gate logit -> (ids [T, top_k] int64, weights [T, top_k] fp32, the shared
    expert's scale [T] fp32 or None): scores p = softmax over the E logits in fp32 (sigmoid:
    each logit's sigmoid -- DeepSeek-V3, GLM-4.5), its top_k by descending p -- or by p +
    choice_bias [E] where there is one (the routers' e_score_correction_bias: ERNIE 4.5,
    DeepSeek-V3), from the best groups only where groups (n_group, topk_group) limit them (the E
    experts in n_group runs, each scored by the sum of its two best; the topk_group best kept) --
    weighted by p, renormalized to sum 1 where norm_topk (HF's Mixtral, Qwen2 / Qwen3-MoE and
    OLMoE routers), times scale (routed_scaling_factor); the shared scale sigmoid(logit E)."""
    E = logits.shape[1] - shared
    z = logits[:, :E].float()
    p = torch.sigmoid(z) if sigmoid else torch.softmax(z, -1)
    choice = p if choice_bias is None else p + choice_bias.float()
    n_group, topk_group = groups
    if topk_group < n_group:
        by_group = choice.view(-1, n_group, E // n_group)
        best = by_group.topk(2, dim=-1).values.sum(-1).topk(topk_group, dim=-1).indices
        keep = torch.zeros_like(by_group[..., 0], dtype=torch.bool).scatter_(1, best, True)
        choice = choice.masked_fill(~keep.repeat_interleave(E // n_group, 1), float("-inf"))
    ids = torch.topk(choice, top_k, dim=-1).indices
    w = p.gather(1, ids)
    if norm_topk:
        w = w / w.sum(-1, keepdim=True)
    return ids, w * scale, torch.sigmoid(logits[:, E].float()) if shared else None


def router_args(pw, l) -> dict:
    """route's router keywords for layer l of the model (ModelSpec's router fields)."""
    s = pw.spec
    return dict(sigmoid=s.router_sigmoid, groups=s.expert_groups, scale=s.routed_scale,
                choice_bias=None if pw.b_choice is None else pw.b_choice[s.expert_index(l)])


def moe_block(pw, l, h, num=FP32):
    """Layer l's mixture of experts [T, d] fp32, without the residual: x = rmsnorm(h) (h where
    the model has no norm before its blocks), each row's sum over its routed experts (route of
    the router's logits, plus its bias where there is one: ModelSpec.expert_bias) of weight x
    down_e(act(gate_e x) * up_e x) (each with its expert's biases, there too), plus the shared
    expert's output times its sigmoid gate where there is one (ModelSpec.ffn_dim > 0). Experts
    run on the rows that picked them (a host loop: torch mode and the long prompts' pass)."""
    s = pw.spec
    norm_w = pw.pre_norm(1, l)  # None: no norm before the block (FlexOlmo)
    x = h if norm_w is None else num.norm(h, norm_w, s.rms_eps)
    i = s.expert_index(l)  # the expert stacks' layer
    pick = lambda t, *e: None if t is None else t[(i, *e)]  # noqa: E731
    ids, w, shared = route(gemv(x, pw.w_router[i], bias=pick(pw.b_router), num=num), s.top_k,
                           s.norm_topk, s.ffn_dim > 0, **router_args(pw, l))
    out = torch.zeros(h.shape[0], s.d_model, device=h.device, dtype=torch.float32)
    for e in ids.unique().tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        act = gemv(x[t], pw.expert_matrix(0, l, e), bias=pick(pw.b_experts_gu, e), swiglu=True,
                   act=s.act, num=num).to(pw.dtype)
        y = gemv(act, pw.expert_matrix(1, l, e), bias=pick(pw.b_experts_down, e), num=num)
        out.index_add_(0, t, w[t, j, None] * y.float())
    if s.ffn_dim:
        act = gemv(x, pw.matrix("gu", l), swiglu=True, act=s.act, num=num).to(pw.dtype)
        out += shared[:, None] * gemv(act, pw.matrix("down", l), num=num).float()
    return out


def mlp_block(pw, l, h, num=FP32):
    """Layer l's MLP [T, d] (fp32 under FP32), without the residual: down(act(gate) * up)(
    rmsnorm(h)) (down(act(up)) without a gate); a mixture of experts': moe_block (but its
    dense layers', ModelSpec.dense_layers: their own MLP's)."""
    s = pw.spec
    if s.moe and l not in s.dense_layers:
        return moe_block(pw, l, h, num)
    pick = lambda t: None if t is None else t[l]  # noqa: E731
    act = gemv(h, pw.matrix("gu", l), norm_w=pw.pre_norm(1, l), eps=s.rms_eps, bias=pick(pw.b_gu),
               swiglu=True, act=s.act, gated=s.gated, num=num).to(pw.dtype)
    return gemv(act, pw.matrix("down", l), bias=pick(pw.b_down), num=num)


def head_logits(pw, x, rows=slice(None), num=FP32):
    """The logits [T, V] fp32 of rows x [T, d]: the final norm, the lm_head (rows: those vocab
    rows only) and its bias (ModelSpec.head_bias), soft-capped (ModelSpec.logit_softcap)."""
    s = pw.spec
    b = None if pw.b_head is None else pw.b_head[rows]
    y = gemv(x, pw.lm_head[rows], norm_w=pw.final_norm, eps=s.rms_eps, bias=b, num=num)
    return soft_cap(y.float(), s.logit_softcap)
