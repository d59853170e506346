import os

import pytest
import torch
from hypothesis import HealthCheck, settings

import fastdecode  # noqa: F401  (sets TRITON_INTERPRET on CPU-only machines before kernels load)

settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (compiled Triton)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not item.keywords: a "gpu" param id
            item.add_marker(skip)

# on the GPU every new shape / flag combination is a Triton compile (~1 s): fewer examples there
settings.register_profile("gpu", deadline=None, max_examples=8, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
if HAS_CUDA and "HYPOTHESIS_PROFILE" not in os.environ:
    settings.load_profile("gpu")
