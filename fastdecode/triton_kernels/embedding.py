"""Embedding lookup: out[t, :] = E[ids[t], :] * scale (PackedWeights.embed_scale: 1 but for
Granite / Gemma; fp32 product, one rounding, as HF's) [+ P[pos + t, :]: POS, learned absolute
positions, GPT-2's wpe -- PackedWeights.pos_embed; the fp32 sum rounded once].  Bytes: T*d*2 read
(twice with POS) + written (one row per token)."""
import torch
import triton
import triton.language as tl


@triton.jit
def embedding_body(ids_ptr, emb_ptr, out_ptr, D, stride_out, t, pid_d, scale,
                   BLOCK_D: tl.constexpr, pos_emb_ptr=None, pos0=0, POS: tl.constexpr = False):
    """Row t (its pid_d-th BLOCK_D slice); POS: plus position pos0 + t's row of pos_emb_ptr."""
    tok = tl.load(ids_ptr + t).to(tl.int64)
    offs = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m = offs < D
    row = tl.load(emb_ptr + tok * D + offs, mask=m, other=0.0).to(tl.float32) * scale
    if POS:
        p = (pos0 + t).to(tl.int64)
        row += tl.load(pos_emb_ptr + p * D + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * stride_out + offs, row.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def embedding_kernel(ids_ptr, emb_ptr, out_ptr, D, stride_out, scale, pos_emb_ptr, pos_ptr,
                     BLOCK_D: tl.constexpr, POS: tl.constexpr):
    pos0 = 0
    if POS:
        pos0 = tl.load(pos_ptr)
    embedding_body(ids_ptr, emb_ptr, out_ptr, D, stride_out, tl.program_id(0), tl.program_id(1),
                   scale, BLOCK_D, pos_emb_ptr, pos0, POS)


def embedding(ids: torch.Tensor, emb: torch.Tensor, out=None, scale: float = 1.0,
              pos_emb: torch.Tensor | None = None, pos: torch.Tensor | None = None
              ) -> torch.Tensor:
    """ids [T] int -> out [T, D] rows of emb [V, D] times scale; pos_emb [P, D]: plus its rows
    pos[0] + t (pos: the first token's position, a device int32 [1], read in the kernel)."""
    T = ids.shape[0]
    D = emb.shape[1]
    if out is None:
        out = torch.empty(T, D, device=emb.device, dtype=emb.dtype)
    BLOCK_D = min(1024, triton.next_power_of_2(D))
    with_pos = pos_emb is not None
    embedding_kernel[(T, triton.cdiv(D, BLOCK_D))](
        ids, emb, out, D, out.stride(0), scale, pos_emb if with_pos else emb,
        pos if with_pos else ids, BLOCK_D=BLOCK_D, POS=with_pos)
    return out
