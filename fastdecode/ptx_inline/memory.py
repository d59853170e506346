"""Memory hints for the decode weight stream.

prefetch_l2(ptrs): `prefetch.global.L2 [a];` for every address of the tensor -- asks the memory
    system to bring the 128-byte line holding `a` into L2, returns nothing, holds no register and
    never faults on the wait for data. The decode stream uses it to keep more bytes in flight than
    registers allow: tiles further ahead are requested into L2 while the next tile loads into
    registers. It has no memory-ordering meaning (a hint; the later ordinary load returns the
    current value whatever the prefetch saw). Fallback (USE_ASM False, the interpreter): nothing.
"""
import triton
import triton.language as tl


@triton.jit
def prefetch_l2(ptrs, USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
