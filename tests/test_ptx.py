"""Each inline-PTX wrapper (fastdecode/ptx_inline) against torch: the asm path on a GPU, the
interpreter fallback on the CPU -- one kernel per wrapper, values checked exactly."""
import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from fastdecode.ptx_inline import globaltimer_ns, ld_acquire, prefetch_l2
from fastdecode.triton_kernels._common import INTERPRET

USE_ASM = not INTERPRET


@triton.jit
def _acquire_kernel(src, dst, n, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    i = tl.program_id(0)
    if i < n:
        tl.store(dst + i, ld_acquire(src + i, SCOPE, USE_ASM))


@triton.jit
def _prefetch_copy_kernel(src, dst, n, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    prefetch_l2(src + tl.minimum(offs, n - 1), USE_ASM)  # a hint: must not change what loads see
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _timer_kernel(out, clock, spins, USE_ASM: tl.constexpr):
    t0 = globaltimer_ns(spins, clock, USE_ASM)
    acc = tl.load(out + 2)  # int64, as the loop's loads
    for i in range(0, spins):
        acc += tl.load(out + 2 + (i % 2), volatile=True)
    t1 = globaltimer_ns(spins + acc * 0, clock, USE_ASM)
    tl.store(out, t0)
    tl.store(out + 1, t1)


@pytest.mark.parametrize("scope", ["gpu", "sys"])
@pytest.mark.parametrize("n", [1, 37, 256])
def test_ld_acquire_returns_the_value(n, scope):
    src = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device=DEVICE)
    dst = torch.zeros_like(src)
    _acquire_kernel[(n,)](src, dst, n, SCOPE=scope, USE_ASM=USE_ASM)
    assert torch.equal(dst, src)


@pytest.mark.parametrize("n", [1, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_prefetch_l2_leaves_loads_exact(n, dtype):
    src = torch.randn(n, device=DEVICE).to(dtype)
    dst = torch.zeros_like(src)
    _prefetch_copy_kernel[(triton.cdiv(n, 512),)](src, dst, n, BLOCK=512, USE_ASM=USE_ASM)
    assert torch.equal(dst, src)


def test_globaltimer_is_monotonic():
    """Two reads around a loop of volatile loads: the second is later (GPU: nanoseconds of the
    global timer, advancing by ~1 us steps; interpreter: a logical clock that ticks per read)."""
    out = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    clock = torch.ones(1, dtype=torch.int64, device=DEVICE)
    _timer_kernel[(1,)](out, clock, 20000 if DEVICE.type == "cuda" else 3, USE_ASM=USE_ASM)
    t0, t1 = out[:2].tolist()
    assert 0 < t0 < t1
