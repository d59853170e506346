"""Timestamps for the megakernel trace.

globaltimer_ns(dummy, clock_ptr, USE_ASM): `mov.u64 %r, %globaltimer;` -- the GPU-wide nanosecond
    timer (same clock on every SM, updates every ~1 us on recent GPUs: fine for tasks of microseconds,
    too coarse for single instructions). Fallback (interpreter): a logical clock, an atomic
    increment of clock_ptr[0], which orders events exactly as they ran (the interpreter runs one
    program at a time).
sm_id(dummy, pid, USE_ASM): `mov.u32 %r, %smid;` -- the SM this program runs on (0 .. %nsmid - 1;
    PTX does not promise the numbering is contiguous, and a program keeps its SM for its life, so
    one read per launch). For the trace: whether a slow program is slow because of its SM.
    Fallback (interpreter): pid, as if every program had an SM of its own.
"""
import triton
import triton.language as tl


@triton.jit
def globaltimer_ns(dummy, clock_ptr, USE_ASM: tl.constexpr):
    """`dummy`: any int32 scalar (inline asm takes its shape from an operand)."""
    if USE_ASM:
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dummy],
                                         dtype=tl.int64, is_pure=False, pack=1)
    else:
        return tl.atomic_add(clock_ptr, 1)


@triton.jit
def sm_id(dummy, pid, USE_ASM: tl.constexpr):
    """`dummy`: any int32 scalar (inline asm takes its shape from an operand); pid: the
    interpreter's stand-in."""
    if USE_ASM:
        return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [dummy], dtype=tl.int32,
                                         is_pure=True, pack=1)
    else:
        return pid.to(tl.int32)
