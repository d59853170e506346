"""Acquire loads for dependency counters and cross-GPU flags.

ld_acquire(ptr, SCOPE, USE_ASM): `ld.global.acquire.<SCOPE>.b32` -- a load that no later load or
    store of this thread may be reordered before, and that makes visible every write released
    (at that scope) by the producer before its flag update; it also keeps the following reads of
    this SM from being served by a stale L1. SCOPE "gpu": the megakernel's counters (producers on
    other SMs); "sys": the all-reduce's flags, released by another GPU writing this GPU's memory
    over NVLink. Fallback (interpreter): an atomic add of 0 with acquire semantics at that scope.
Publishing needs no wrapper: a block barrier (every thread's stores precede it) then one
tl.atomic_add / tl.atomic_xchg(sem="release", scope="gpu" or "sys"), which Triton issues once per
program -- the pattern of CUDA's grid sync (barrier, then one thread's fence + atomic),
cumulative through the barrier.
Inline asm on a scalar runs in every thread that holds a copy of it (KNOWLEDGE.md): these wrappers
are idempotent per thread (a load), so that is what we want here.
"""
import triton
import triton.language as tl


@triton.jit
def ld_acquire(ptr, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    if USE_ASM:
        if SCOPE == "sys":
            return tl.inline_asm_elementwise("ld.global.acquire.sys.b32 $0, [$1];", "=r,l",
                                             [ptr], dtype=tl.int32, is_pure=False, pack=1)
        else:
            return tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l",
                                             [ptr], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)
