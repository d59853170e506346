"""Public per-op API: the standalone launchers of the fused Triton ops (fastdecode.ops.*)."""
from . import _env  # noqa: F401  (interpreter on CPU-only machines, before any kernel is defined)
from .triton_kernels.all_reduce import PeerBuffers, all_reduce, residual_add
from .triton_kernels.attention import attention, split_plan
from .triton_kernels.embedding import embedding
from .triton_kernels.gated_delta import gated_delta
from .triton_kernels.gemv import gemv, swiglu
from .triton_kernels.lm_head import choose_merge, lm_head, sample_logits
from .triton_kernels.moe import experts_down as moe_down, route as moe_route
from .triton_kernels.qkv_rope import qkv_rope
from .triton_kernels.rmsnorm import rmsnorm

__all__ = ["PeerBuffers", "all_reduce", "attention", "choose_merge", "embedding", "gated_delta",
           "gemv", "lm_head", "moe_down", "moe_route", "qkv_rope", "residual_add", "rmsnorm",
           "sample_logits", "split_plan", "swiglu"]
