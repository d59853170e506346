"""Small named @triton.jit wrappers around single PTX instructions, each with an interpreter
fallback (USE_ASM=False) so every kernel path also runs under TRITON_INTERPRET=1."""
from .flags import (cta_barrier, ld_acquire, nanosleep, red_release_add, spin_acquire,  # noqa: F401
                    spin_acquire_cta, st_release)
from .fp8 import fp8x4_dot_f16  # noqa: F401
from .grid import grid_launch_dependents, grid_wait  # noqa: F401
from .memory import ld_stream_b128, prefetch_l2, prefetch_l2_bulk  # noqa: F401
from .timers import globaltimer_ns, sm_id  # noqa: F401
