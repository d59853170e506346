"""Loads and prefetches for the megakernel's weight stream.

ld_stream_b128(ptrs, mask, USE_ASM) -> (w0, w1, w2, w3): for each int32 pointer (16-byte aligned)
    `ld.global.nc.L1::no_allocate.L2::256B.v4.b32` -- the 16 bytes at it, as four int32 words, on
    the non-coherent (read-only) path, not kept in L1 (a weight is read once per step), asking L2
    to fetch the whole 256-byte sector group around it. Only for memory no thread writes while
    the kernel runs (weights): .nc may serve stale data otherwise. Masked-off lanes issue no load
    and return 0 (a predicated load). One pointer per 16 bytes, so the result does not depend on
    how Triton lays the tensor out over threads. Fallback (the interpreter): four plain loads.
prefetch_l2(ptrs, USE_ASM): `prefetch.global.L2 [a];` for every address of the tensor -- asks the
    memory system to bring the 128-byte line holding `a` into L2. It returns nothing the program
    waits for, holds no register after issue and is a hint only: no memory-ordering meaning (a
    later ordinary load returns the current value whatever the prefetch saw). Measured in the
    megakernel four times -- the tile after next, a task's first 32-128 KB before its dependency
    wait, the next task's first 64-512 KB during any unmet wait or only during the attention
    chain's (O_PROJ) wait -- and slower each time
    (config.StreamConfig says by how much); the megakernel holds the first weight piece in
    registers before the wait instead. Kept, with its test, as the hint to try where a stream
    has no registers to spare. Fallback (the interpreter): nothing.
"""
import triton
import triton.language as tl


@triton.jit
def ld_stream_b128(ptrs, mask, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $5, 0; mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; "
            "mov.b32 $3, 0; @p ld.global.nc.L1::no_allocate.L2::256B.v4.b32 {$0, $1, $2, $3}, "
            "[$4]; }", "=r,=r,=r,=r,l,r", [ptrs, mask.to(tl.int32)],
            dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=False, pack=1)
    else:
        return (tl.load(ptrs, mask=mask, other=0), tl.load(ptrs + 1, mask=mask, other=0),
                tl.load(ptrs + 2, mask=mask, other=0), tl.load(ptrs + 3, mask=mask, other=0))


@triton.jit
def prefetch_l2(ptrs, USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
