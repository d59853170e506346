"""fastdecode: batch-1 LLM decoding at the speed of the GPU's memory, in Triton.

    fm = fastdecode.from_hf(model)                 # or from_pretrained(path | "x.gguf" | "smollm2")
    out = fm.generate(input_ids, max_new_tokens=64)
    fastdecode.patch(model)                        # model.generate now runs through fastdecode
"""
from . import _env  # noqa: F401  (must precede every Triton kernel definition)
from . import ops
from .module import FastModel, from_hf, from_pretrained, patch, unpatch
from .runtime import MegakernelTimeout
from .spec import ModelSpec, UnsupportedModelError

__version__ = "0.1.0"
__all__ = ["FastModel", "MegakernelTimeout", "ModelSpec", "UnsupportedModelError", "from_hf", "from_pretrained", "ops",
           "patch", "unpatch"]
