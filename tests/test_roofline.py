"""The bytes a decode step must read (the roofline's numerator) for the benchmark shapes, against
the figures in the workspace's KNOWLEDGE.md: Llama-3.2-1B ~2.47 GB (tied head read once),
Llama-3.1-8B ~15.0 GB (embedding table not streamed, lm_head is)."""
import os
import sys

import pytest

from fastdecode.spec import ModelSpec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))


@pytest.mark.parametrize("key,gb", [("1b", 2.47), ("8b", 15.0)])
def test_step_bytes(key, gb):
    from shapes import SHAPES
    spec = ModelSpec.from_hf_config(SHAPES[key][1]())
    assert abs(spec.weight_bytes_per_token() / 1e9 - gb) < 0.01 * gb
    # the KV cache read at 4096 tokens: 2 (k, v) x layers x kv_dim x 4096 x 2 bytes
    assert spec.kv_bytes(4096) == 2 * spec.n_layers * spec.kv_dim * 4096 * 2
