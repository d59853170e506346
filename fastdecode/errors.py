"""Errors raised by the kernels' watchdogs (kept apart so kernel launchers and the runtime can
both raise them without importing each other)."""


class MegakernelTimeout(RuntimeError):
    """A bounded GPU wait exceeded its bound (a missing producer, a rank that never signalled, or
    a kernel bug); the kernel exited instead of hanging the GPU. The message says who waited on
    what: program, task, counter and step (megakernel), or rank and invocation (all-reduce)."""
