"""RMSNorm with optional fused residual add.

    h = x + residual (rounded to the activation dtype and written back to residual, as HF keeps it)
    y = h * rsqrt(mean(h^2) + eps) * w          (fp32 math)
Shapes: x, residual, y [T, K]; w [K]. Bytes: 2-3 reads + 1-2 writes of T*K elements; it is a
prologue of the GEMVs in a decode step (NORM flag) and standalone only for tests / final outputs.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_body(x_ptr, res_ptr, w_ptr, out_ptr, K, stride_x, stride_res, stride_out, eps, row,
                 HAS_RES: tl.constexpr, BLOCK_K: tl.constexpr):
    ss = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        m = offs < K
        h = tl.load(x_ptr + row * stride_x + offs, mask=m, other=0.0)
        if HAS_RES:
            r = tl.load(res_ptr + row * stride_res + offs, mask=m, other=0.0)
            h = (h.to(tl.float32) + r.to(tl.float32)).to(res_ptr.dtype.element_ty)
            tl.store(res_ptr + row * stride_res + offs, h, mask=m)
        h = h.to(tl.float32)
        ss += h * h
    rstd = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / K + eps)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        m = offs < K
        if HAS_RES:
            h = tl.load(res_ptr + row * stride_res + offs, mask=m, other=0.0).to(tl.float32)
        else:
            h = tl.load(x_ptr + row * stride_x + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_out + offs, (h * rstd * w).to(out_ptr.dtype.element_ty),
                 mask=m)


@triton.jit
def rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, K, stride_x, stride_res, stride_out, eps,
                   HAS_RES: tl.constexpr, BLOCK_K: tl.constexpr):
    rmsnorm_body(x_ptr, res_ptr, w_ptr, out_ptr, K, stride_x, stride_res, stride_out, eps,
                 tl.program_id(0), HAS_RES, BLOCK_K)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, residual=None, out=None):
    """y = rmsnorm(x (+ residual)); if residual is given it is updated in place to x + residual."""
    T, K = x.shape
    if out is None:
        out = torch.empty_like(x)
    res = residual if residual is not None else x
    rmsnorm_kernel[(T,)](x, res, w, out, K, x.stride(0), res.stride(0), out.stride(0), eps,
                         HAS_RES=residual is not None,
                         BLOCK_K=min(4096, triton.next_power_of_2(K)), num_warps=4)
    return out
