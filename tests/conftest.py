import os

# pytest-xdist workers share the machine's cores: each takes its share of the CPU threads (by
# default every worker takes them all, and the oversubscribed cores thrash -- test_smollm2.py on 2
# workers of a 2-core machine: 162 s, against 70 s at one thread a worker). Set before numpy's
# BLAS (the interpreter's) and torch load.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, _share)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings

import fastdecode  # noqa: F401  (sets TRITON_INTERPRET on CPU-only machines before kernels load)

settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # (torch imported earlier would miss the env)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # the caller's, where set
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
