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
    megakernel twice -- the tile after next, and a task's first 32-128 KB before its dependency
    wait -- and slower both times (config.StreamConfig says by how much); the megakernel holds
    the first weight piece in registers before the wait instead. Kept, with its test, as the
    hint to try where a stream has no registers to spare. Fallback (the interpreter): nothing.
prefetch_l2_range(ptr, nbytes, gap, BLOCK, USE_ASM): prefetch_l2 over the bytes [ptr, ptr + nbytes)
    and, if gap > 0, [ptr + gap, ptr + gap + nbytes) (gate|up: two matrices), BLOCK 128-byte lines
    per round (one per thread at BLOCK = 32 x warps). ptr: an int8 pointer. The megakernel's wait
    prefetches the next task's first weights with it (StreamConfig.wait_prefetch_kb).
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


@triton.jit
def prefetch_l2_range(ptr, nbytes, gap, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    lines = tl.arange(0, BLOCK).to(tl.int64) * 128
    for c in range(0, tl.cdiv(nbytes, BLOCK * 128)):
        o = tl.minimum(c * (BLOCK * 128) + lines, nbytes - 1)  # never past the range
        prefetch_l2(ptr + o, USE_ASM)
        if gap > 0:
            prefetch_l2(ptr + gap + o, USE_ASM)
