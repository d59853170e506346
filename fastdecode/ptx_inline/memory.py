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
prefetch_l2_bulk(ptr, nbytes, USE_ASM): `cp.async.bulk.prefetch.L2.global [a], n;` (sm_90) from
    thread 0 of the program only -- one instruction asks the copy engine behind the SM (the TMA
    unit) to bring a whole byte range into L2, where prefetch_l2 needs one per 128-byte line in
    the SM's load pipeline (ahead of the dependency polls). The range [ptr, ptr + nbytes) is
    trimmed to 16-byte alignment inward (the instruction needs an aligned address and a size that
    is a multiple of 16); an empty range issues nothing. A hint, like prefetch_l2: no
    memory-ordering meaning, nothing waits on it. Returns 0. Fallback (the interpreter): nothing.
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
def prefetch_l2_bulk(ptr, nbytes, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .u32 t, n; .reg .u64 a, e; mov.u32 t, %tid.x; "
            "add.u64 a, $1, 15; and.b64 a, a, -16; cvt.u64.u32 e, $2; add.u64 e, e, $1; "
            "and.b64 e, e, -16; setp.eq.u32 p, t, 0; setp.gt.and.u64 p, e, a, p; "
            "sub.u64 e, e, a; cvt.u32.u64 n, e; "
            "@p cp.async.bulk.prefetch.L2.global [a], n; mov.u32 $0, 0; }",
            "=r,l,r", [ptr.to(tl.pointer_type(tl.int8), bitcast=True), nbytes.to(tl.int32)],
            dtype=tl.int32, is_pure=False, pack=1)
    else:
        return nbytes * 0
