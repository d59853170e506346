"""Gated DeltaNet mixer (Qwen3.5's linear-attention layers), after its in_proj GEMV.

Per value head v (k head v // (nv / nk)) and row t of y = [q | k | v | z | b | a]:
    c      = SiLU(sum_j conv_w[:, j] x[t - kernel + 1 + j])   x: conv_state rows, then y's q|k|v
    q, k   = L2-normed (q / sqrt(dk) too)   beta = sigmoid(b)   g = -exp(A_log) softplus(a + dt)
    S      = e^g S;  S += k (beta (v - S^T k))^T;  o = S^T q           (S [dk, dv] fp32)
    out    = RMSNorm(o) * norm_w * SiLU(z)
(reference.gated_delta is the contract.) One program per value head holds its state in registers
over the step's rows, so a prompt's rows run in one launch; the convolution's state (the last
kernel - 1 rows of q|k|v) is read by every program of a k head, so it is shifted after the
kernel. Bytes a decode step: the state read and written (nv dk dv 4 x 2: 4 MB on a 32-head
layer of 128 x 128) and y's row; the in_proj / out_proj GEMVs are the layer's weight bytes.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _conv_silu(y_ptr, cs_ptr, w_ptr, t, ch, m, stride_y, stride_cs, KC: tl.constexpr):
    """SiLU of the causal depthwise convolution at row t of channels ch (mask m): the taps of
    rows t - KC + 1 .. t, from the convolution's state (rows before the step) or y, in fp32."""
    acc = tl.zeros(ch.shape, dtype=tl.float32)
    for j in tl.static_range(KC):
        u = t - (KC - 1) + j  # the input row of tap j: < 0 in the state's rows
        x = tl.load(y_ptr + u * stride_y + ch, mask=m & (u >= 0), other=0.0).to(tl.float32) + \
            tl.load(cs_ptr + (KC - 1 + u) * stride_cs + ch, mask=m & (u < 0),
                    other=0.0).to(tl.float32)
        acc += x * tl.load(w_ptr + ch * KC + j, mask=m, other=0.0).to(tl.float32)
    return acc * tl.sigmoid(acc)


@triton.jit
def gated_delta_body(y_ptr, w_ptr, alog_ptr, dt_ptr, nw_ptr, cs_ptr, s_ptr, out_ptr, T, stride_y,
                     stride_cs, stride_out, eps, hv, NK: tl.constexpr, NV: tl.constexpr,
                     DK: tl.constexpr, DV: tl.constexpr, KC: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr):
    """Value head hv's rows 0..T-1 (this module's docstring); its state S [DK, DV] fp32 at
    s_ptr + hv DK DV, loaded once and stored once."""
    KD: tl.constexpr = NK * DK
    VD: tl.constexpr = NV * DV
    CONV: tl.constexpr = 2 * KD + VD
    hk = hv // (NV // NK)
    ok = tl.arange(0, BK)
    ov = tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    sp = s_ptr + hv * DK * DV + ok[:, None] * DV + ov[None, :]
    sm = mk[:, None] & mv[None, :]
    S = tl.load(sp, mask=sm, other=0.0)
    A = -tl.exp(tl.load(alog_ptr + hv))
    dt = tl.load(dt_ptr + hv)
    nw = tl.load(nw_ptr + ov, mask=mv, other=0.0).to(tl.float32)
    for t in range(0, T):
        q = _conv_silu(y_ptr, cs_ptr, w_ptr, t, hk * DK + ok, mk, stride_y, stride_cs, KC)
        k = _conv_silu(y_ptr, cs_ptr, w_ptr, t, KD + hk * DK + ok, mk, stride_y, stride_cs, KC)
        v = _conv_silu(y_ptr, cs_ptr, w_ptr, t, 2 * KD + hv * DV + ov, mv, stride_y, stride_cs,
                       KC)
        q = q / tl.sqrt(tl.sum(q * q, 0) + 1e-6) / tl.sqrt(DK * 1.0)
        k = k / tl.sqrt(tl.sum(k * k, 0) + 1e-6)
        row = y_ptr + t * stride_y
        beta = tl.sigmoid(tl.load(row + CONV + VD + hv).to(tl.float32))
        x = tl.load(row + CONV + VD + NV + hv).to(tl.float32) + dt
        softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
        S = S * tl.exp(A * softplus)
        delta = (v - tl.sum(S * k[:, None], 0)) * beta
        S = S + k[:, None] * delta[None, :]
        o = tl.sum(S * q[:, None], 0)
        o = o / tl.sqrt(tl.sum(o * o, 0) / DV + eps) * nw
        z = tl.load(row + CONV + hv * DV + ov, mask=mv, other=0.0).to(tl.float32)
        tl.store(out_ptr + t * stride_out + hv * DV + ov,
                 (o * z * tl.sigmoid(z)).to(out_ptr.dtype.element_ty), mask=mv)
    tl.store(sp, S, mask=sm)


@triton.jit
def gated_delta_kernel(y_ptr, w_ptr, alog_ptr, dt_ptr, nw_ptr, cs_ptr, s_ptr, out_ptr, T, stride_y,
                       stride_cs, stride_out, eps, NK: tl.constexpr, NV: tl.constexpr,
                       DK: tl.constexpr, DV: tl.constexpr, KC: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr):
    gated_delta_body(y_ptr, w_ptr, alog_ptr, dt_ptr, nw_ptr, cs_ptr, s_ptr, out_ptr, T, stride_y,
                     stride_cs, stride_out, eps, tl.program_id(0), NK, NV, DK, DV, KC, BK, BV)


def gated_delta(y, conv_w, A_log, dt, norm_w, conv_state, state, *, gdn: tuple, eps: float,
                out=None):
    """y [T, conv + value_dim + 2 nv] (in_proj's rows) -> out [T, value_dim] in y's dtype;
    conv_state [kernel - 1, conv] and state [nv, dk, dv] (fp32) updated in place
    (reference.gated_delta's contract; gdn = ModelSpec.gdn)."""
    nk, nv, dk, dv, kc = gdn
    T, conv = y.shape[0], 2 * nk * dk + nv * dv
    if state.dtype != torch.float32 or not state.is_contiguous():
        raise ValueError("the Gated DeltaNet state must be a contiguous fp32 tensor")
    if out is None:
        out = torch.empty(T, nv * dv, device=y.device, dtype=y.dtype)
    BK, BV = triton.next_power_of_2(dk), triton.next_power_of_2(dv)
    gated_delta_kernel[(nv,)](y, conv_w, A_log, dt, norm_w, conv_state, state, out, T, y.stride(0),
                              conv_state.stride(0), out.stride(0), eps, NK=nk, NV=nv, DK=dk,
                              DV=dv, KC=kc, BK=BK, BV=BV, num_warps=8 if BK * BV >= 8192 else 4)
    if kc > 1:  # the last kernel - 1 rows of q|k|v, after every program has read the state
        conv_state.copy_(torch.cat([conv_state, y[:, :conv]])[-(kc - 1):])
    return out
