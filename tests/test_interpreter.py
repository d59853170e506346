"""The interpreter shim (triton_kernels/_interpreter.py): triton.language patched once while
launches run, not again at every device-function call -- and the kernels compute what they did."""
import dataclasses
import threading

import pytest
import torch
import triton
import triton.language as tl

from fastdecode.triton_kernels._common import INTERPRET

pytestmark = pytest.mark.skipif(not INTERPRET, reason="Triton's CPU interpreter only")


@triton.jit
def _scaled_sum(x_ptr, i, BLOCK: tl.constexpr):
    """A device function that itself calls Triton's own jit functions (tl.sum, tl.cdiv: their
    globals see triton.language.core, which the launch does not patch)."""
    x = tl.load(x_ptr + i * BLOCK + tl.arange(0, BLOCK))
    return tl.sum(x * tl.cdiv(i + 2, 2), axis=0)


@triton.jit
def _rows_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for i in range(0, n):
        tl.store(out_ptr + i, _scaled_sum(x_ptr, i, BLOCK))


def _run_and_check(n=12, block=16, seed=0):
    x = torch.randn(n, block, generator=torch.Generator().manual_seed(seed))
    out = torch.empty(n)
    _rows_kernel[(1,)](x, out, n, BLOCK=block)
    want = x.sum(1) * torch.div(torch.arange(n) + 3, 2, rounding_mode="floor")
    torch.testing.assert_close(out, want)  # fp32 sums of 16 terms: reordering only


def _builtins_restored():
    return all(tl.core.is_builtin(f) for f in (tl.load, tl.store, tl.arange, tl.core.load))


def test_device_calls_do_not_repatch(monkeypatch):
    """Triton patches module by module in _patch_builtin (tl, tl.tensor, tl.math, descriptors,
    triton.language.core): with the shim a launch runs it for its modules once and for
    triton.language.core at the first device call that sees it -- as often for 4 rows as for 24
    (3 device calls a row), where Triton patched all of them again at every call."""
    from triton.runtime import interpreter as interp
    assert getattr(interp, "_fastdecode_shared_patches", False)
    calls = []
    real = interp._patch_builtin
    monkeypatch.setattr(interp, "_patch_builtin", lambda *a: calls.append(a[0]) or real(*a))
    counts = []
    # each launch patches again: the one before restored them at its end. The first launch of a
    # module's functions adds globals to it (the interpreter's rewrite: tl, np), so tl.cdiv sees
    # tl too from the second on: compare launches after a first
    for n in (4, 4, 24, 4):
        calls.clear()
        _run_and_check(n=n, seed=n)
        counts.append(len(calls))
        assert _builtins_restored()
    assert counts[1] == counts[2] == counts[3] and 0 < counts[1] <= 12, counts


def test_overlapping_launches_share_the_patches():
    """Launches in threads (as virtual tensor-parallel ranks run): each computes its rows while
    the others start and end, and the builtins are Triton's again after the last one."""
    errors = []

    def worker(seed):
        try:
            for k in range(3):
                _run_and_check(n=6 + seed, seed=10 * seed + k)
        except Exception as e:  # noqa: BLE001  (reported below, with the thread's seed)
            errors.append((seed, repr(e)))
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _builtins_restored()


@triton.jit
def _grid_kernel(out_ptr, spin):
    """Records each program's (index, grid size) after a Python-speed loop that lets other
    threads' launches run in between."""
    acc = tl.program_id(0) * 0
    for _ in range(spin):
        acc += 1
    pid = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    code = (tl.program_id(0) * 100 + tl.program_id(1)) * 10000 + tl.num_programs(0) * 100
    tl.store(out_ptr + pid, code + tl.num_programs(1) + acc - spin)


def test_threads_launch_their_own_grids():
    """Overlapping launches of different grids (ranks' threads at different kernels of a long
    prompt's pass): each program sees its own index and grid size, no other launch's."""
    errors = []

    def worker(gx, gy):
        try:
            for _ in range(3):
                out = torch.full((gx * gy,), -1, dtype=torch.int32)
                _grid_kernel[(gx, gy)](out, 40)
                x, y = torch.arange(gx).repeat(gy), torch.arange(gy).repeat_interleave(gx)
                want = (x * 100 + y) * 10000 + gx * 100 + gy
                assert torch.equal(out, want.to(torch.int32)), (gx, gy, out.tolist())
        except Exception as e:  # noqa: BLE001  (reported below, with the thread's grid)
            errors.append(((gx, gy), repr(e)[:300]))
    threads = [threading.Thread(target=worker, args=g) for g in ((17, 1), (3, 7), (1, 11))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@triton.jit
def _int_mix_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, (x * 7 + offs) - (x >> 3) * 5)


def test_overflow_sanitizer_off_computes_the_same(monkeypatch):
    """The shim turns off the interpreter's integer-overflow checks (their device_assert is a
    no-op without debug): int32 arithmetic, wrapping products included, gives the same values
    with the checks as without -- and torch's int32 result."""
    from triton.runtime import interpreter as interp
    assert interp.interpreter_builder.options.sanitize_overflow is False
    x = torch.randint(-2**31, 2**31 - 1, (64,), dtype=torch.int32,
                      generator=torch.Generator().manual_seed(0))
    outs = []
    for sanitize in (False, True):
        monkeypatch.setattr(interp.interpreter_builder, "options", dataclasses.replace(
            interp.interpreter_builder.options, sanitize_overflow=sanitize))
        out = torch.empty_like(x)
        _int_mix_kernel[(1,)](x, out, BLOCK=64)
        outs.append(out)
    want = (x * 7 + torch.arange(64, dtype=torch.int32)) - (x >> 3) * 5
    assert torch.equal(outs[0], want) and torch.equal(outs[1], want)
