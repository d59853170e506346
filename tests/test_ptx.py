"""Each inline-PTX wrapper (fastdecode/ptx_inline) against torch: the asm path on a GPU, the
interpreter fallback on the CPU -- one kernel per wrapper, values checked exactly."""
import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from fastdecode.ptx_inline import (cta_barrier, fp8x4_dot_f16, globaltimer_ns,
                                   grid_launch_dependents, grid_wait, ld_acquire, ld_stream_b128,
                                   nanosleep, prefetch_l2, prefetch_l2_bulk, red_release_add,
                                   sm_id, spin_acquire, spin_acquire_cta, st_release)
from fastdecode.triton_kernels._common import INTERPRET

USE_ASM = not INTERPRET


@triton.jit
def _acquire_kernel(src, dst, n, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    i = tl.program_id(0)
    if i < n:
        tl.store(dst + i, ld_acquire(src + i, SCOPE, USE_ASM))


@triton.jit
def _spin_kernel(flags, targets, aborts, out, max_spin, ABORT: tl.constexpr,
                 USE_ASM: tl.constexpr):
    i = tl.program_id(0)
    v, n = spin_acquire(flags + i, tl.load(targets + i), max_spin, aborts + i, "gpu", USE_ASM,
                        ABORT)
    tl.store(out + 2 * i, v)
    tl.store(out + 2 * i + 1, n)


@triton.jit
def _spin_cta_kernel(flags, targets, aborts, out, max_spin, ABORT: tl.constexpr,
                     USE_ASM: tl.constexpr, EVERY: tl.constexpr = 1):
    i = tl.program_id(0)
    met, n = spin_acquire_cta(flags + i, tl.load(targets + i), max_spin, aborts + i, "gpu",
                              USE_ASM, ABORT, EVERY)
    tl.store(out + 2 * i, met)
    tl.store(out + 2 * i + 1, n)


@triton.jit
def _pdl_producer_kernel(data, n, spins, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    """Lets the next kernel launch at once, then spins a while before writing data."""
    grid_launch_dependents(USE_ASM)
    offs = tl.arange(0, BLOCK)
    acc = tl.load(data + n)  # data[n] stays 0
    for i in range(0, spins):
        acc += tl.load(data + n, volatile=True)
    tl.store(data + offs, offs * 3 + 1 + acc, mask=offs < n)


@triton.jit
def _pdl_consumer_kernel(data, out, n, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    grid_wait(USE_ASM)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(data + offs, mask=offs < n), mask=offs < n)


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


@triton.jit
def _sm_id_kernel(out, spins, USE_ASM: tl.constexpr):
    pid = tl.program_id(0)
    first = sm_id(pid, pid, USE_ASM)
    acc = pid * 0
    for i in range(0, spins):  # some time on the SM between the two reads
        acc += tl.load(out + 2 * pid, volatile=True)
    tl.store(out + 2 * pid, first)
    tl.store(out + 2 * pid + 1, sm_id(pid + acc * 0, pid, USE_ASM))


def test_sm_id_names_the_programs_sm():
    """A grid of 4 x the SM count: every program reads the same SM id twice (a program never
    moves), ids are >= 0, and the grid spreads over at least half the SMs (the block scheduler
    fills SMs breadth-first; a constant, e.g. a wrong register, fails this). Whether the ids
    are contiguous (0 .. SMs - 1) PTX does not promise, so it is not asserted. Interpreted: the
    program id."""
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count if DEVICE.type == "cuda" else 8
    out = torch.full((4 * n_sm, 2), -1, dtype=torch.int32, device=DEVICE)
    _sm_id_kernel[(4 * n_sm,)](out, 50, USE_ASM=USE_ASM)
    out = out.cpu()
    assert torch.equal(out[:, 0], out[:, 1]) and int(out.min()) >= 0
    if USE_ASM:
        assert len(torch.unique(out[:, 0])) >= n_sm // 2
    else:
        assert torch.equal(out[:, 0], torch.arange(4 * n_sm, dtype=torch.int32))


@pytest.mark.parametrize("scope", ["gpu", "sys"])
@pytest.mark.parametrize("n", [1, 37, 256])
def test_ld_acquire_returns_the_value(n, scope):
    src = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device=DEVICE)
    dst = torch.zeros_like(src)
    _acquire_kernel[(n,)](src, dst, n, SCOPE=scope, USE_ASM=USE_ASM)
    assert torch.equal(dst, src)


@pytest.mark.parametrize("abort", [True, False])
def test_spin_acquire_is_bounded(abort):
    """Program i polls flags[i] for targets[i]: met at once (0 polls), never met (max_spin
    polls, the value it last read), and with its abort word set: ABORT stops after the poll that
    read it (1 poll), without ABORT it polls on to max_spin."""
    max_spin = 20
    flags = torch.tensor([5, 5, 3, 3], dtype=torch.int32, device=DEVICE)
    targets = torch.tensor([5, 4, 4, 9], dtype=torch.int32, device=DEVICE)
    aborts = torch.tensor([0, 0, 0, 1], dtype=torch.int64, device=DEVICE)
    out = torch.full((8,), -1, dtype=torch.int32, device=DEVICE)
    _spin_kernel[(4,)](flags, targets, aborts, out, max_spin, ABORT=abort, USE_ASM=USE_ASM)
    v, n = out.view(4, 2).cpu().unbind(1)
    assert v.tolist() == [5, 5, 3, 3]
    assert n.tolist() == [0, 0, max_spin, 1 if abort else max_spin]


@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("abort", [True, False])
def test_spin_acquire_cta_is_bounded(abort, num_warps, every):
    """The one-thread poll with its outcome shared by a barrier reduction: the same cases as
    test_spin_acquire_is_bounded, each program's verdict (met 1 / 0) and polls the same in every
    thread -- a thread that left the loop on its own would hang the barrier or store another
    count (every thread stores; the last store wins). every: the abort word read at every
    every-th poll, so an abort stops the spin at poll `every`."""
    max_spin = 20
    flags = torch.tensor([5, 5, 3, 3], dtype=torch.int32, device=DEVICE)
    targets = torch.tensor([5, 4, 4, 9], dtype=torch.int32, device=DEVICE)
    aborts = torch.tensor([0, 0, 0, 1], dtype=torch.int64, device=DEVICE)
    out = torch.full((8,), -1, dtype=torch.int32, device=DEVICE)
    _spin_cta_kernel[(4,)](flags, targets, aborts, out, max_spin, ABORT=abort, USE_ASM=USE_ASM,
                           EVERY=every, num_warps=num_warps)
    met, n = out.view(4, 2).cpu().unbind(1)
    assert met.tolist() == [1, 1, 0, 0]
    assert n.tolist() == [0, 0, max_spin, every if abort else max_spin]


def test_grid_wait_sees_the_previous_kernels_writes():
    """A consumer launched with programmatic dependent launch starts while the producer (which
    let it launch at once) still spins; after grid_wait it reads every word the producer wrote."""
    n = 300
    data = torch.zeros(n + 1, dtype=torch.int32, device=DEVICE)
    out = torch.full((n,), -1, dtype=torch.int32, device=DEVICE)
    pdl = USE_ASM and torch.cuda.get_device_capability()[0] >= 9
    _pdl_producer_kernel[(1,)](data, n, 20000 if USE_ASM else 3, BLOCK=512, USE_ASM=USE_ASM)
    _pdl_consumer_kernel[(1,)](data, out, n, BLOCK=512, USE_ASM=USE_ASM, launch_pdl=pdl)
    assert torch.equal(out.cpu(), torch.arange(n, dtype=torch.int32) * 3 + 1)


@triton.jit
def _bulk_prefetch_copy_kernel(src, dst, n, skew, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    """Each program asks L2 for its block (from `skew` bytes in: unaligned starts and ends get
    trimmed, past-the-end sizes are the caller's), then copies it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    base = src + tl.program_id(0) * BLOCK
    z = prefetch_l2_bulk(base.to(tl.pointer_type(tl.int8), bitcast=True) + skew,
                         (tl.minimum(n - tl.program_id(0) * BLOCK, BLOCK) * 2 - skew), USE_ASM)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m) + z.to(tl.bfloat16), mask=m)


@pytest.mark.parametrize("n,skew", [(1, 0), (7, 1), (1000, 0), (4099, 3), (4099, 16)])
def test_prefetch_l2_bulk_leaves_loads_exact(n, skew):
    """The bulk prefetch's range trimmed to 16-byte alignment (odd starts, short and odd-sized
    ranges): it faults nowhere and changes nothing a load sees."""
    src = torch.randn(n, device=DEVICE).to(torch.bfloat16)
    dst = torch.zeros_like(src)
    _bulk_prefetch_copy_kernel[(triton.cdiv(n, 512),)](src, dst, n, skew, BLOCK=512,
                                                        USE_ASM=USE_ASM)
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


@triton.jit
def _stream_copy_kernel(src, dst, n_chunks, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    """Words of 16-byte chunks [0, n_chunks) of src (int32 view) -> dst, chunks past the end 0."""
    j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    w = ld_stream_b128(src + 4 * j, j < n_chunks, USE_ASM)
    for i in tl.static_range(4):
        tl.store(dst + 4 * j + i, w[i])


@triton.jit
def _fp8_dot_kernel(w, xa, xb, out, n, BLOCK: tl.constexpr, USE_ASM: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, fp8x4_dot_f16(tl.load(w + i, mask=m), tl.load(xa + i, mask=m),
                                    tl.load(xb + i, mask=m), USE_ASM), mask=m)


@triton.jit
def _release_kernel(flags, adds, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    pid = tl.program_id(0)
    tl.debug_barrier()
    st_release(flags + pid, pid + 7, SCOPE, USE_ASM)
    red_release_add(adds, pid + 1, SCOPE, USE_ASM)


@triton.jit
def _message_kernel(data, flag, out, n, max_spin, BLOCK: tl.constexpr, USE_ASM: tl.constexpr,
                    CTA_BARRIER: tl.constexpr = False):
    """Program 0 writes data then releases the flag; program 1 acquires it, then reads data.
    Every thread of program 0 writes, thread 0 alone releases: the block barrier between them
    (tl.debug_barrier, or CTA_BARRIER: the cta_barrier wrapper) orders the other threads'
    writes before the release."""
    offs = tl.arange(0, BLOCK)
    if tl.program_id(0) == 0:
        tl.store(data + offs, offs * 3 + 1, mask=offs < n)
        if CTA_BARRIER:
            cta_barrier(USE_ASM)
        else:
            tl.debug_barrier()
        st_release(flag, 1, "gpu", USE_ASM)
    else:
        v = ld_acquire(flag, "gpu", USE_ASM)
        k = 0
        while (v == 0) & (k < max_spin):
            nanosleep(32, USE_ASM)
            v = ld_acquire(flag, "gpu", USE_ASM)
            k += 1
        tl.store(out + offs, tl.load(data + offs, mask=offs < n), mask=(offs < n) & (v == 1))


@pytest.mark.parametrize("n", [1, 5, 300])
def test_ld_stream_b128_reads_16_byte_chunks(n):
    """Every chunk's 16 bytes in order (bf16 weights seen as int32 words); masked chunks read
    nothing and give 0."""
    src = torch.randn(8 * n + 8, device=DEVICE).to(torch.bfloat16).view(torch.int32)
    dst = torch.full((4 * (n + 64),), -1, dtype=torch.int32, device=DEVICE)
    _stream_copy_kernel[(triton.cdiv(n, 64),)](src, dst, n, BLOCK=64, USE_ASM=USE_ASM)
    assert torch.equal(dst[:4 * n], src[:4 * n])
    assert not dst[4 * n:4 * triton.cdiv(n, 64) * 64].any()


@pytest.mark.parametrize("n", [1, 77, 1000])
def test_fp8x4_dot_f16_rounds_as_f16_math(n):
    """Four e4m3 codes a word times two f16 pairs: torch's f16 products (each rounded), each
    lane's two summed in f16, the lanes added in fp32 -- equal bit for bit (every e4m3 value
    and every f16 product of them is what torch computes; a code's subnormals and the f16
    products' too included: codes of N(0, 64), activations of N(0, 3) and some of 1e-4)."""
    g = torch.Generator().manual_seed(n)
    codes = (torch.randn(n, 4, generator=g) * 64).to(torch.float8_e4m3fn)
    x = torch.randn(n, 4, generator=g) * 3
    x[::7] *= 3e-5
    x = x.to(torch.float16)
    ref = ((codes.to(torch.float16) * x)[:, :2] + (codes.to(torch.float16) * x)[:, 2:]).float()
    ref = ref[:, 0] + ref[:, 1]
    words = lambda t: t.contiguous().view(torch.int32).reshape(n).to(DEVICE)  # noqa: E731
    out = torch.empty(n, device=DEVICE)
    _fp8_dot_kernel[(triton.cdiv(n, 256),)](words(codes.view(torch.uint8)), words(x[:, :2]),
                                           words(x[:, 2:]), out, n, BLOCK=256, USE_ASM=USE_ASM)
    assert torch.equal(out.cpu(), ref)


@pytest.mark.parametrize("scope", ["gpu", "sys"])
def test_release_store_and_add_once_per_program(scope):
    """Each program stores its flag and adds pid + 1 once: a wrapper that ran in every thread
    would add 128x (4 warps)."""
    n = 40
    flags = torch.zeros(n, dtype=torch.int32, device=DEVICE)
    adds = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    _release_kernel[(n,)](flags, adds, SCOPE=scope, USE_ASM=USE_ASM, num_warps=4)
    assert torch.equal(flags.cpu(), torch.arange(n, dtype=torch.int32) + 7)
    assert int(adds) == n * (n + 1) // 2


@pytest.mark.parametrize("cta_barrier", [False, True])
def test_release_acquire_message_passing(cta_barrier):
    """A consumer program that sees the producer's released flag (spinning with a nanosleep
    backoff) sees the data written before it -- by every thread of the producer, which a block
    barrier (tl.debug_barrier or the cta_barrier wrapper) ordered before thread 0's release."""
    n = 200
    data = torch.zeros(n, dtype=torch.int32, device=DEVICE)
    out = torch.full((n,), -1, dtype=torch.int32, device=DEVICE)
    flag = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    _message_kernel[(2,)](data, flag, out, n, 1 << 24, BLOCK=256, USE_ASM=USE_ASM,
                          CTA_BARRIER=cta_barrier)
    assert int(flag) == 1
    assert torch.equal(out.cpu(), torch.arange(n, dtype=torch.int32) * 3 + 1)
