"""Acquire loads for dependency counters and cross-GPU flags.

ld_acquire_gpu(ptr): `ld.global.acquire.gpu.b32` -- a load that no later load or store of this
    thread may be reordered before, and that makes visible every write released (at .gpu scope) by
    the producer before its counter update; it also keeps the following reads of this SM from being
    served by a stale L1. Fallback (interpreter): an atomic add of 0 with acquire semantics.
ld_acquire_sys(ptr): `ld.global.acquire.sys.b32` -- the same at system scope: it synchronizes
    with a release by another GPU (a peer writing this GPU's memory over NVLink), as the
    all-reduce's flags need. Fallback: an atomic add of 0, acquire, scope "sys".
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
def ld_acquire_gpu(ptr, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [ptr],
                                         dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")


@triton.jit
def ld_acquire_sys(ptr, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise("ld.global.acquire.sys.b32 $0, [$1];", "=r,l", [ptr],
                                         dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.atomic_add(ptr, 0, sem="acquire", scope="sys")
