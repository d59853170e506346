"""A mixture of experts' routing and combination, around the expert GEMVs (gemv.gemv's experts).

    route:    p = softmax(z[:E]) (fp32) of a row's router logits z [E (+ 1)]; its top_k experts
              e_j by descending p (ties: the lower index), weights w_j = p[e_j] (renormalized
              to sum 1: RENORM); SHARED: the shared expert's scale sigmoid(z[E])
    combine:  h[t] += sum_j w[t, j] y[t * top_k + j] (+ s[t] y_shared[t]), fp32 in choice order,
              rounded once to h's dtype
Shapes: z [T, E (+ 1)] fp32; ids [T * top_k] int32, w [T * top_k] fp32, s [T] fp32; y [T * top_k,
d] fp32 (the experts' down outputs), y_shared [T, d] fp32; h [T, d]. Bytes (decode): route E x 4,
combine (top_k + 2) x d x 4 -- noise beside the experts' 3 x top_k x F x d weight elements a
layer (Qwen3-30B-A3B: 8 x 3 x 768 x 2048 x 2 B = 75 MB, ~17 us at 4.46 TB/s).
HF's routers compute z in the weights' dtype and Qwen's round the weights w_j to it; these keep
z (the router GEMV's fp32 sums) and w in fp32.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def route_body(z_ptr, ids_ptr, w_ptr, s_ptr, t, E, stride_z, TOP_K: tl.constexpr,
               RENORM: tl.constexpr, SHARED: tl.constexpr, BLOCK_E: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """Row t's routing (module docstring): its top_k (ids, weights) at [t * TOP_K, +TOP_K)."""
    offs = tl.arange(0, BLOCK_E)
    z = tl.load(z_ptr + t * stride_z + offs, mask=offs < E, other=-float("inf")).to(tl.float32)
    p = tl.exp(z - tl.max(z, axis=0))
    p = p / tl.sum(p, axis=0)
    q = tl.where(offs < E, p, -1.0)  # probabilities not yet picked; -1: picked or padding
    ks = tl.arange(0, BLOCK_K)
    ids = tl.zeros([BLOCK_K], dtype=tl.int32)
    w = tl.zeros([BLOCK_K], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        best = tl.max(q, axis=0)
        e = tl.min(tl.where(q == best, offs, BLOCK_E), axis=0)
        ids = tl.where(ks == j, e, ids)
        w = tl.where(ks == j, best, w)
        q = tl.where(offs == e, -1.0, q)
    if RENORM:
        w = w / tl.sum(w, axis=0)
    tl.store(ids_ptr + t * TOP_K + ks, ids, mask=ks < TOP_K)
    tl.store(w_ptr + t * TOP_K + ks, w, mask=ks < TOP_K)
    if SHARED:
        zs = tl.load(z_ptr + t * stride_z + E).to(tl.float32)
        tl.store(s_ptr + t, 1.0 / (1.0 + tl.exp(-zs)))


@triton.jit
def route_kernel(z_ptr, ids_ptr, w_ptr, s_ptr, E, stride_z, TOP_K: tl.constexpr,
                 RENORM: tl.constexpr, SHARED: tl.constexpr, BLOCK_E: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    route_body(z_ptr, ids_ptr, w_ptr, s_ptr, tl.program_id(0), E, stride_z, TOP_K, RENORM,
               SHARED, BLOCK_E, BLOCK_K)


def route(z: torch.Tensor, top_k: int, renorm: bool, shared: bool = False, out=None):
    """z [T, E (+ 1 with shared)] fp32 -> (ids [T * top_k] int32, w [T * top_k] fp32, s [T]
    fp32: the shared expert's scale, zeros without one); out: those three tensors to fill."""
    T, E = z.shape[0], z.shape[1] - shared
    assert z.dtype == torch.float32 and z.stride(1) == 1 and 1 <= top_k <= E
    ids, w, s = out if out is not None else (
        torch.empty(T * top_k, device=z.device, dtype=torch.int32),
        torch.empty(T * top_k, device=z.device, dtype=torch.float32),
        torch.zeros(T, device=z.device, dtype=torch.float32))
    route_kernel[(T,)](z, ids, w, s, E, z.stride(0), TOP_K=top_k, RENORM=renorm, SHARED=shared,
                       BLOCK_E=triton.next_power_of_2(E), BLOCK_K=triton.next_power_of_2(top_k),
                       num_warps=1)
    return ids, w, s


@triton.jit
def combine_kernel(h_ptr, y_ptr, w_ptr, ys_ptr, s_ptr, D, stride_h, stride_y, stride_ys,
                   TOP_K: tl.constexpr, SHARED: tl.constexpr, BLOCK_D: tl.constexpr):
    """Grid (T, D blocks): h[t] += sum_j w[t, j] y[t * TOP_K + j] (+ s[t] ys[t]) (module
    docstring), fp32, rounded once."""
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m = offs < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        wj = tl.load(w_ptr + t * TOP_K + j)
        acc += wj * tl.load(y_ptr + (t * TOP_K + j) * stride_y + offs, mask=m, other=0.0)
    if SHARED:
        acc += tl.load(s_ptr + t) * tl.load(ys_ptr + t * stride_ys + offs, mask=m, other=0.0)
    h = tl.load(h_ptr + t * stride_h + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(h_ptr + t * stride_h + offs, (h + acc).to(h_ptr.dtype.element_ty), mask=m)


def combine(h: torch.Tensor, y: torch.Tensor, w: torch.Tensor, shared=None) -> torch.Tensor:
    """h [T, d] += the experts' outputs y [T * top_k, d] fp32 weighted by w [T * top_k] (route's)
    and, shared = (y_shared [T, d] fp32, s [T]), the shared expert's scaled; in place."""
    T, D = h.shape
    top_k = y.shape[0] // T
    assert y.shape == (T * top_k, D) and y.dtype == torch.float32 and w.numel() == T * top_k
    ys, s = shared if shared is not None else (y, w)
    BLOCK_D = min(1024, triton.next_power_of_2(D))
    combine_kernel[(T, triton.cdiv(D, BLOCK_D))](h, y, w, ys, s, D, h.stride(0), y.stride(0),
                                                 ys.stride(0), TOP_K=top_k,
                                                 SHARED=shared is not None, BLOCK_D=BLOCK_D,
                                                 num_warps=4)
    return h
