"""Acquire loads and fences for the megakernel's dependency counters.

ld_acquire_gpu(ptr): `ld.global.acquire.gpu.b32` -- a load that no later load or store of this
    thread may be reordered before, and that makes visible every write released (at .gpu scope) by
    the producer before its counter update; it also keeps the following reads of this SM from being
    served by a stale L1. Fallback (interpreter): an atomic add of 0 with acquire semantics.
fence_acq_rel_gpu(): `fence.acq_rel.gpu` executed by every thread before the publishing barrier,
    so the stores of all threads of the program are ordered before the single release add that
    publishes them. Fallback: nothing (the interpreter runs programs one after another).
Inline asm on a scalar runs in every thread that holds a copy of it (KNOWLEDGE.md): these wrappers
are idempotent per thread (a load, a fence), so that is what we want here; the counter increment
itself stays a tl.atomic_add, which Triton issues once per program.
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
def fence_acq_rel_gpu(dummy, USE_ASM: tl.constexpr):
    """`dummy`: any int32 scalar (inline asm needs an operand to take its shape from)."""
    if USE_ASM:
        tl.inline_asm_elementwise("fence.acq_rel.gpu; mov.u32 $0, 0;", "=r,r", [dummy],
                                  dtype=tl.int32, is_pure=False, pack=1)
