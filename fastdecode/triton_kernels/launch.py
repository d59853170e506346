"""Launching a Triton kernel of many arguments without Triton's per-call binding.

`kernel[grid](*args, **kw)` binds and specializes every argument in Python on each call
(JITFunction.run: the generated binder, the cache key, the launch metadata). For the megakernel
-- 143 parameters, 50 of them tensors -- the binder alone takes 178 us per launch on a 2-core
CPU here (Triton 3.6); on the H200 machine's host Triton's launch took 157 us and the runtime's
whole launch call 192 us, serial with the GPU wherever the caller waits for the step: prompt
lookup's check of its candidates, each prefill chunk (bench/RESULTS.md session 36: a one-row
forward 1149 us around 751 us of kernel).

CachedLauncher keeps the compiled kernel per specialization key -- each tensor's dtype and
whether its address is 16-byte aligned (what Triton specializes a pointer on), every other
argument's exact value (Triton specializes an int on == 1, divisibility by 16 and its width),
the constexprs and launch options, the grid and the current device: ~20 us -- and passes the
arguments straight to the compiled kernel's launcher, without launch metadata or hooks.
The first launch of a key compiles / loads the kernel through Triton and checks that the
argument order built here is the one Triton's binder builds; where it differs (another
Triton), or once the launcher rejects arguments passed this way (a TypeError / ValueError
before anything runs), every launch goes through Triton's own path, as under the interpreter
or with a launch hook set (a profiler's: Triton 3.6's hook chains are empty by default), or
with FASTDECODE_TRITON_LAUNCH=1 in the environment.
kernel() still returns the compiled kernel there (the runtime sets its carveout).
"""
from __future__ import annotations

import os
import warnings

import torch
from triton import knobs
from triton.runtime import driver

from ._common import INTERPRET

DIRECT = os.environ.get("FASTDECODE_TRITON_LAUNCH", "0") in ("0", "")  # read at import


def launch_hooked() -> bool:
    """Whether a launch hook is set: Triton 3.6's knobs hold a HookChain, empty by default."""
    h = knobs.runtime.launch_enter_hook
    return h is not None and bool(getattr(h, "calls", True))


class CachedLauncher:
    """launcher(grid, args, kw) == fn[grid](*args, **kw), minus the per-call binding."""

    def __init__(self, fn, max_keys: int = 64):
        self.fn, self.max_keys = fn, max_keys
        self._kernels: dict = {}
        # the arguments' order did not check out, or the launcher rejected them: Triton's own
        # launches from then on
        self._broken = False
        params = getattr(fn, "params", None) or []
        self._names = [p.name for p in params]
        self._defaults = {p.name: p.default for p in params}

    @staticmethod
    def key(grid, args, kw, device=0) -> tuple:
        """What the compiled kernel depends on, cheaply (~20 us for the megakernel's args)."""
        k = [device, tuple(grid)]
        for a in args:
            if isinstance(a, torch.Tensor):
                k.append(a.dtype)
                k.append(a.data_ptr() % 16 == 0)
            else:
                k.append(a)
        k.extend(kw.items())
        return tuple(k)

    def values(self, args, kw) -> list:
        """Every parameter's value in the kernel's order, constexprs included (the launcher
        skips those), as Triton's binder lists them."""
        n = len(args)
        return list(args) + [kw[k] if k in kw else self._defaults[k] for k in self._names[n:]]

    def kernel(self, grid, args, kw):
        """The compiled, loaded kernel of this call's specialization (compiled on first use;
        None under the interpreter). The first key also checks the argument order."""
        if INTERPRET:
            return None
        if launch_hooked():  # launched through Triton: not cached, compiled and loaded all the same
            k = self.fn.run(*args, grid=grid, warmup=True, **kw)
            k._init_handles()
            return k
        device = driver.active.get_current_device()
        key = self.key(grid, args, kw, device)
        k = self._kernels.get(key)
        if k is None:
            k = self.fn.run(*args, grid=grid, warmup=True, **kw)
            k._init_handles()
            if not self._broken:
                binder = self.fn.device_caches[device][-1]
                bound = list(binder(*args, **kw)[0].values())
                ours = self.values(args, kw)
                if len(bound) != len(ours) or any(a is not b for a, b in zip(bound, ours)):
                    warnings.warn(f"{self.fn}: Triton binds its arguments in another order; "
                                  "launching through Triton")
                    self._broken = True
            if len(self._kernels) >= self.max_keys:
                self._kernels.clear()
            self._kernels[key] = k
        return k

    def launch(self, kernel, grid, args, kw):
        """Launch `kernel` (self.kernel(grid, args, kw)) directly; through Triton's own launch
        under the interpreter, with a launch hook set, or once the direct launch was refused."""
        if kernel is None or not DIRECT or self._broken or launch_hooked():
            self.fn[grid](*args, **kw)
            return
        g = tuple(grid) + (1, 1)
        stream = driver.active.get_current_stream(driver.active.get_current_device())
        try:
            kernel.run(g[0], g[1], g[2], stream, kernel.function, kernel.packed_metadata, None,
                       None, None, *self.values(args, kw))
        except (TypeError, ValueError, SystemError) as e:  # argument parsing: nothing launched
            warnings.warn(f"{self.fn}: the cached launch failed ({e}); launching through Triton")
            self._broken = True
            self.fn[grid](*args, **kw)

    def __call__(self, grid, args, kw):
        self.launch(self.kernel(grid, args, kw), grid, args, kw)
