"""Triton's CPU interpreter (TRITON_INTERPRET=1, how CI runs every kernel) without its redundant
re-patching of triton.language at each device-function call.

Triton 3.6's interpreter swaps triton.language's builtins for interpreted ones (_patch_lang:
inspect.getmembers over tl, tl.tensor, tl.math) when a launch starts, restores them when it ends
(GridExecutor.__call__) -- and patches them again at every call of a @triton.jit device function
inside the launch (InterpretedFunction.__call__), though the launch's patches are in place. Our
kernels are built of device functions (each op's _body and its helpers): one megakernel decode
step of a 2-layer tiny model made ~43,000 such calls, and the re-patching took a third of its
interpreted time (cProfile, 2026-12-02; the CPU test suite, 2 cores: 1248 -> 981 s with this).

share_patches() wraps _patch_lang: the language modules are patched once while any launch runs
and restored when the last running launch ends; a device function whose modules are patched
already gets nothing done. Modules first seen by a device function (tl.sum's and tl.cdiv's
globals see triton.language.core, which a launch of our kernels does not patch) are patched then
and restored with the rest (Triton leaves those patched). Launches that overlap -- virtual
tensor-parallel ranks run in threads -- share the patches, where Triton's own end of one launch
restored the builtins under the others (its per-call re-patching covered that up). Only for the
Triton version whose interpreter this was read from; others run unchanged.

It also gives each thread its own launch grid: the interpreter keeps the grid's size and the running
program's index on one module-wide InterpreterBuilder, so two ranks' threads launching kernels of
different grids at once (a long prompt's RMSNorm on one, its attention on the other) read each
other's -- "x >= grid_dim[0]", or a program id from the other launch.

And it turns off the interpreter's integer-overflow sanitizer, whose work is thrown away: every
int32 add / sub / mul (tl.tensor's operators: sanitize_overflow=True) redoes the operation in
int64, compares it with the type's bounds and hands the result to device_assert -- which returns
at once, the interpreter's options having debug=False always (semantic.device_assert). Half the
interpreted time of a megakernel decode step went there (cProfile, 2026-12-07: 55 of 116 s of
test_lookup's mega chunk test in binary_op_sanitize_overflow_impl).
"""
import dataclasses
import inspect
import sys
import threading

import triton

_VERSION = "3.6."
_lock = threading.Lock()
_shared = {"launches": 0, "langs": frozenset(), "scope": None}
_seen: dict = {}  # fn -> (its globals' length, _langs); the interpreter adds globals (tl, np)
                 # to a module when it first runs one of its functions


def _langs(fn) -> frozenset:
    """ids of the triton.language modules visible from fn's globals (what _patch_lang patches)."""
    n, langs = _seen.get(fn, (-1, None))
    if n != len(fn.__globals__):
        import triton.language as tl
        langs = frozenset(id(v) for v in fn.__globals__.values()
                          if inspect.ismodule(v) and v in (tl, tl.core))
        _seen[fn] = (len(fn.__globals__), langs)
    return langs


class _LaunchEnd:
    """The scope a launch restores at its end: the shared patches, once no launch runs."""

    def restore(self):
        with _lock:
            _shared["launches"] -= 1
            if _shared["launches"] == 0:
                _shared["scope"].restore()
                _shared["langs"], _shared["scope"] = frozenset(), None


class _Nothing:
    def restore(self):
        pass


def share_patches() -> bool:
    """Install the wrapper (once); False where this Triton's interpreter is not the one read."""
    from triton.runtime import interpreter as interp
    if getattr(interp, "_fastdecode_shared_patches", False):
        return True
    if not triton.__version__.startswith(_VERSION) or not all(
            hasattr(interp, n) for n in ("_patch_lang", "_LangPatchScope", "GridExecutor")):
        return False
    patch_lang = interp._patch_lang
    launch_code = interp.GridExecutor.__call__.__code__

    def shared_patch_lang(fn):
        launch = sys._getframe(1).f_code is launch_code  # else a device-function call
        with _lock:
            if _shared["launches"] == 0 and not launch:  # outside any launch: Triton's way
                return patch_lang(fn)
            if _shared["scope"] is None:
                _shared["scope"] = interp._LangPatchScope()
            langs = _langs(fn)
            if not langs <= _shared["langs"]:
                # restored, last in first out, with the patches made before them
                _shared["scope"]._changes.extend(patch_lang(fn)._changes)
                _shared["langs"] = _shared["langs"] | langs
            if launch:  # counted once patched: a launch whose patching raised never ends
                _shared["launches"] += 1
        return _LaunchEnd() if launch else _Nothing()

    interp._patch_lang = shared_patch_lang
    tls = threading.local()

    def per_thread(name):
        return property(lambda self: getattr(tls, name, None),
                        lambda self, v: setattr(tls, name, v))
    interp.InterpreterBuilder.grid_idx = per_thread("grid_idx")
    interp.InterpreterBuilder.grid_dim = per_thread("grid_dim")
    options = interp.interpreter_builder.options
    if not options.debug:  # the sanitizer's assert would be a no-op: skip the checks it feeds
        interp.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)
    interp._fastdecode_shared_patches = True
    return True
