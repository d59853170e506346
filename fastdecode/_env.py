"""Imported first by the package.

On a machine without CUDA, run every Triton kernel through Triton's CPU interpreter.
TRITON_INTERPRET is read when a kernel is defined, so it must be set before
fastdecode.triton_kernels is imported. An explicit TRITON_INTERPRET in the environment wins.

On a GPU, Triton's cache key: `triton_key()` hashes libtriton.so (~415 MB with Triton 3.6,
~0.4 s on the H200 host) the first time any kernel is looked up in the cache, on the first
token's path. `start_triton_key()` computes it in a thread when a model starts loading (hashing
and file reads release the GIL, so it runs beside the checkpoint read; started at import it
slowed the imports it raced); `triton_key_ready()` joins it before the first kernel is needed.
"""
import os
import threading

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

_key_thread = None


def start_triton_key():
    """Start hashing Triton's install in a thread (once; GPU and compiled kernels only)."""
    global _key_thread
    if _key_thread is None and os.environ.get("TRITON_INTERPRET", "0") in ("0", "") and \
            torch.cuda.is_available():
        from triton.runtime.cache import triton_key  # functools.lru_cache: later calls are free
        _key_thread = threading.Thread(target=triton_key, name="fastdecode-triton-key",
                                       daemon=True)
        _key_thread.start()


def triton_key_ready():
    """Wait for the cache-key hash (starting it if nobody did), so the first kernel lookup does
    not compute it a second time beside it."""
    start_triton_key()
    if _key_thread is not None:
        _key_thread.join()
