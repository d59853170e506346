"""Embedding lookup: out[t, :] = E[ids[t], :] * scale (PackedWeights.embed_scale: 1 but for
Granite / Gemma; fp32 product, one rounding, as HF's).  Bytes: T*d*2 read + written (one row per
token)."""
import torch
import triton
import triton.language as tl


@triton.jit
def embedding_body(ids_ptr, emb_ptr, out_ptr, D, stride_out, t, pid_d, scale,
                   BLOCK_D: tl.constexpr):
    tok = tl.load(ids_ptr + t).to(tl.int64)
    offs = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m = offs < D
    row = tl.load(emb_ptr + tok * D + offs, mask=m, other=0.0).to(tl.float32) * scale
    tl.store(out_ptr + t * stride_out + offs, row.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def embedding_kernel(ids_ptr, emb_ptr, out_ptr, D, stride_out, scale, BLOCK_D: tl.constexpr):
    embedding_body(ids_ptr, emb_ptr, out_ptr, D, stride_out, tl.program_id(0), tl.program_id(1),
                   scale, BLOCK_D)


def embedding(ids: torch.Tensor, emb: torch.Tensor, out=None, scale: float = 1.0) -> torch.Tensor:
    """ids [T] int -> out [T, D] rows of emb [V, D] times scale."""
    T = ids.shape[0]
    D = emb.shape[1]
    if out is None:
        out = torch.empty(T, D, device=emb.device, dtype=emb.dtype)
    BLOCK_D = min(1024, triton.next_power_of_2(D))
    embedding_kernel[(T, triton.cdiv(D, BLOCK_D))](ids, emb, out, D, out.stride(0), scale,
                                                     BLOCK_D=BLOCK_D)
    return out
