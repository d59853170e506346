"""Imported first by the package: on a machine without CUDA, run every Triton kernel through
Triton's CPU interpreter. TRITON_INTERPRET is read when a kernel is defined, so it must be set
before fastdecode.triton_kernels is imported. An explicit TRITON_INTERPRET in the environment wins."""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
