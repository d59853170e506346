"""L2 prefetch for the megakernel's weight stream.

prefetch_l2(ptrs, USE_ASM): `prefetch.global.L2 [a];` for every address of the tensor -- asks the
    memory system to bring the 128-byte line holding `a` into L2. It returns nothing the program
    waits for, holds no register after issue and is a hint only: no memory-ordering meaning (a
    later ordinary load returns the current value whatever the prefetch saw). Measured in the
    megakernel twice -- the tile after next, and a task's first 32-128 KB before its dependency
    wait -- and slower both times (config.StreamConfig says by how much); the megakernel holds
    the first weight piece in registers before the wait instead. Kept, with its test, as the
    hint to try where a stream has no registers to spare. Fallback (the interpreter): nothing.
"""
import triton
import triton.language as tl


@triton.jit
def prefetch_l2(ptrs, USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
