"""CachedLauncher (triton_kernels/launch.py): the megakernel launched without Triton's per-call
binding. On the CPU: its key tells apart what Triton specializes on, and its argument order is
the order Triton's binder builds for the megakernel's real call. On the GPU: the same results
as Triton's own launch, one compiled kernel per specialization."""
import pytest
import torch
import triton
import triton.language as tl

import fastdecode
from conftest import DEVICE
from fastdecode.triton_kernels.launch import CachedLauncher
from fastdecode.triton_kernels.megakernel import megakernel
from models import tiny_model


def megakernel_call(family="qwen3", T=1):
    """(grid, args, kw) of a real megakernel launch of a tiny model, captured, not run."""
    fm = fastdecode.from_hf(tiny_model(family, layers=2).to(DEVICE), max_seq_len=32,
                            mode="mega")
    rt, seen = fm.runtime, []
    rt._launcher.launch = lambda k, grid, args, kw: seen.append((grid, args, kw))
    rt.forward(torch.arange(T, device=fm.device) + 3)
    return seen[0]


def test_key_tells_apart_what_triton_specializes_on():
    a = torch.zeros(64)
    key = lambda *args, **kw: CachedLauncher.key((4,), args, kw)  # noqa: E731
    base = key(a, 16, 0.5, BLOCK=8)
    assert base == key(torch.ones(64), 16, 0.5, BLOCK=8)  # another tensor, same alignment
    assert base != key(a[1:], 16, 0.5, BLOCK=8)            # 4 bytes off: not 16-aligned
    assert base != key(a.double(), 16, 0.5, BLOCK=8)       # another dtype
    assert base != key(a, 1, 0.5, BLOCK=8)                 # Triton makes an int of 1 a constant
    assert base != key(a, 17, 0.5, BLOCK=8)                # ... and divisibility by 16 a hint
    assert base != key(a, 16, 0.5, BLOCK=16)               # a constexpr
    assert base != key(a, 16, 0.5, BLOCK=8, num_warps=8)   # a launch option
    assert base != CachedLauncher.key((8,), (a, 16, 0.5), dict(BLOCK=8))  # the grid
    assert base != CachedLauncher.key((4,), (a, 16, 0.5), dict(BLOCK=8), device=1)


@pytest.mark.parametrize("family,T", [("qwen3", 1), ("llama", 3)])
def test_megakernel_values_are_triton_binders_order(family, T):
    """values() lists the megakernel's 143 parameters as Triton 3.6's generated binder does for
    the runtime's real call (built here for an sm_90 target: the binder needs no GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature
    grid, args, kw = megakernel_call(family, T)
    fn = JITFunction(getattr(megakernel, "fn", megakernel))
    binder = create_function_from_signature(fn.signature, fn.params,
                                            make_backend(GPUTarget("cuda", 90, 32)))
    bound = list(binder(*args, **kw)[0].values())
    ours = CachedLauncher(fn).values(args, kw)
    assert len(ours) == len(bound) == len(fn.params) > len(args)
    assert all(a is b for a, b in zip(ours, bound))


@triton.jit
def _axpy(x, y, out, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, a * tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


def test_rejected_cached_launch_falls_back_to_triton(monkeypatch):
    """A launcher that rejects the arguments passed its way (TypeError: nothing ran) leaves
    that call and every later one to Triton's own launch, with a warning."""
    import types
    import warnings

    import fastdecode.triton_kernels.launch as L
    drv = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda d: 0)
    monkeypatch.setattr(L, "driver", types.SimpleNamespace(active=drv))

    class Rejecting:
        function = packed_metadata = None

        def run(self, *a):
            raise TypeError("function takes exactly 9 arguments")
    x = torch.arange(8.0, device=DEVICE)
    y, out = torch.ones_like(x), torch.zeros_like(x)
    launch = CachedLauncher(_axpy)
    with pytest.warns(UserWarning, match="launching through Triton"):
        launch.launch(Rejecting(), (1,), (x, y, out, 8, 2.0), dict(BLOCK=8))
    assert launch._broken
    torch.testing.assert_close(out, 2 * x + y)
    out.zero_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not offered to the launcher again
        launch.launch(Rejecting(), (1,), (x, y, out, 8, 3.0), dict(BLOCK=8))
    torch.testing.assert_close(out, 3 * x + y)


def test_triton_launch_switch(monkeypatch):
    """FASTDECODE_TRITON_LAUNCH=1 (launch.DIRECT off): every launch is Triton's own; the
    compiled kernel handed in is not run."""
    import fastdecode.triton_kernels.launch as L
    monkeypatch.setattr(L, "DIRECT", False)

    class Unused:
        def run(self, *a):
            raise AssertionError("launched directly")
    x = torch.arange(8.0, device=DEVICE)
    out = torch.zeros_like(x)
    CachedLauncher(_axpy).launch(Unused(), (1,), (x, x, out, 8, 2.0), dict(BLOCK=8))
    torch.testing.assert_close(out, 3 * x)


@pytest.mark.gpu
def test_cached_launch_matches_triton_and_specializes():
    """Each call's result is Triton's own launch's, bit for bit; a key per specialization
    (n == 1, n % 16, an unaligned view, another dtype, a constexpr), and a repeated key reuses its compiled kernel."""
    launch = CachedLauncher(_axpy)
    g = torch.Generator(DEVICE).manual_seed(0)
    base = torch.randn(2, 300, device=DEVICE, generator=g)
    kernels = []
    for n, off, dtype, block in [(1, 0, torch.float32, 64), (32, 0, torch.float32, 64),
                                 (37, 0, torch.float32, 64), (37, 1, torch.float32, 64),
                                 (37, 0, torch.float16, 64), (37, 0, torch.float32, 128),
                                 (37, 0, torch.float32, 64)]:
        x, y = (base[i, off:off + n].to(dtype) for i in range(2))
        out, ref = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
        grid, args, kw = (triton.cdiv(n, block),), (x, y, out, n, 1.5), dict(BLOCK=block)
        kernels.append(launch.kernel(grid, args, kw))
        launch(grid, args, kw)
        _axpy[grid](x, y, ref, n, 1.5, **kw)
        torch.testing.assert_close(out, 1.5 * x + y)  # fused multiply-add or not
        assert torch.equal(out, ref)
    assert all(k is not None for k in kernels)
    assert len(launch._kernels) == 6 and kernels[-1] is kernels[2]
    assert kernels[0] is not kernels[2]  # n == 1 compiles its own kernel


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 5])
def test_megakernel_cached_launch_matches_tritons(T, monkeypatch):
    """A forward's logits and a generate()'s tokens through CachedLauncher equal those of
    Triton's own launch (forced by a launch hook), bit for bit."""
    from triton import knobs
    from fastdecode.triton_kernels.launch import launch_hooked
    assert not launch_hooked()  # Triton's default: empty hook chains
    fm = fastdecode.from_hf(tiny_model("llama", layers=2).to(DEVICE), max_seq_len=64,
                            mode="mega")
    ids = torch.arange(T, device=fm.device) + 3

    def run():
        fm.runtime.reset()
        return fm.runtime.forward(ids), fm.generate(ids[None], max_new_tokens=6,
                                                     do_sample=False)
    fast = run()
    assert len(fm.runtime._launcher._kernels) > 0
    hooked = []  # launches through Triton's own path call the hook
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: hooked.append(1))
    assert launch_hooked()
    slow = run()
    assert len(hooked) >= 2
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
