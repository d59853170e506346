"""Programmatic dependent launch (sm_90+): a kernel launched with `launch_pdl=True` may start
while the kernel before it in the stream is still running, so its launch latency and its first
weight loads overlap that kernel's tail (config.use_pdl; each ops-mode kernel opts in).

grid_launch_dependents(USE_ASM): `griddepcontrol.launch_dependents;` -- the next kernel in the
    stream, if launched with PDL, may start once every program of this one has executed it (or
    exited). A hint with no memory-ordering meaning: the next kernel still waits in grid_wait for
    this one to complete. Without PDL a no-op. Fallback (the interpreter): nothing.
grid_wait(USE_ASM): `griddepcontrol.wait;` -- blocks until the kernels this one depends on (the
    one before it, when launched with PDL) have completed and their memory writes are visible.
    Without PDL a no-op (the stream already ordered them). A PDL kernel calls it before its first
    access to anything an earlier kernel writes or reads: only loads of weights (never written
    by a kernel) may come before it. Fallback (the interpreter): nothing -- it runs kernels one
    after another.
"""
import triton
import triton.language as tl


@triton.jit
def grid_launch_dependents(USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("griddepcontrol.launch_dependents; mov.u32 $0, 0;", "=r", [],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def grid_wait(USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, 0;", "=r", [],
                                  dtype=tl.int32, is_pure=False, pack=1)
