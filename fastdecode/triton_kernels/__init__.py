"""Fused Triton ops. Each module: *_body (@triton.jit device function, shared with the megakernel),
*_kernel (standalone launch) and a Python launcher."""
