"""fastdecode.ops.all_reduce: the peer-to-peer all-reduce of tensor parallelism, on virtual ranks
that share one address space (PeerBuffers.virtual): each rank's push writes every peer's buffer
through the pointer tables, each rank's reduce waits for every rank's flag and sums in rank order.
Exact: fp32 sums in rank order are what every rank must compute bit for bit."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdecode
from conftest import DEVICE
from fastdecode.distributed import all_reduce_fp32 as rank_order_sum
from fastdecode.ops import PeerBuffers, all_reduce
from helpers import needs_gpus


@given(world=st.integers(2, 4), ns=st.lists(st.sampled_from([1, 7, 255, 1000, 4099]),
                                            min_size=3, max_size=3),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**16),
       sentinel=st.booleans())
def test_all_reduce_matches_a_rank_order_sum(world, ns, dtype, seed, sentinel):
    """Three invocations in a row, of different sizes (the slots rotate; each program counts the
    invocations that cover its chunk): every rank ends with the rank-order fp32 sum of the bf16 /
    fp32 parts, bit-identical on all ranks; odd sizes end mid-chunk. sentinel: the data-as-flag
    protocol (slot 1 is used again by the third invocation: its -0.0 reset)."""
    bufs = PeerBuffers.virtual(world, 4099, DEVICE, sentinel=sentinel)
    g = torch.Generator().manual_seed(seed)
    for n in ns:
        xs = [torch.randn(n, generator=g).to(DEVICE, dtype) for _ in range(world)]
        for r in range(world):
            all_reduce(xs[r], bufs[r], push=True, reduce=False)
        outs = [all_reduce(xs[r], bufs[r], push=False, reduce=True) for r in range(world)]
        want = rank_order_sum(xs)
        for out in outs:
            assert torch.equal(out, want)


@pytest.mark.parametrize("sentinel", [False, True])
def test_push_and_reduce_in_one_launch(sentinel):
    """The GPU path (push then wait in one kernel): the last rank runs both phases once the
    others have pushed; the others then reduce."""
    world, n = 3, 600
    bufs = PeerBuffers.virtual(world, n, DEVICE, sentinel=sentinel)
    xs = [torch.randn(n, device=DEVICE) for _ in range(world)]
    for r in range(world - 1):
        all_reduce(xs[r], bufs[r], reduce=False)
    last = all_reduce(xs[-1], bufs[-1])
    outs = [all_reduce(xs[r], bufs[r], push=False) for r in range(world - 1)] + [last]
    for out in outs:
        assert torch.equal(out, rank_order_sum(xs))


@pytest.mark.parametrize("sentinel", [False, True])
def test_missing_rank_times_out_naming_it(sentinel):
    bufs = PeerBuffers.virtual(3, 64, DEVICE, sentinel=sentinel)
    x = torch.ones(64, device=DEVICE)
    all_reduce(x, bufs[0], reduce=False)
    all_reduce(x, bufs[2], reduce=False)  # rank 1 never pushes
    with pytest.raises(fastdecode.MegakernelTimeout, match="waited for rank 1 at invocation 1"):
        all_reduce(x, bufs[0], push=False)


def test_sentinel_takes_zeros_of_either_sign():
    """-0.0 is the sentinel's "not written yet": parts that hold +-0.0 (a ReLU'd or zeroed
    vector) must still arrive -- pushed as +0.0 -- and sum to 0; the second round reuses the
    slots after their reset."""
    world, n = 2, 300
    bufs = PeerBuffers.virtual(world, n, DEVICE, sentinel=True)
    xs = [torch.full((n,), -0.0, device=DEVICE), torch.zeros(n, device=DEVICE)]
    xs[1][::3] = 2.5
    for _ in range(3):
        for r in range(world):
            all_reduce(xs[r], bufs[r], reduce=False)
        for r in range(world):
            assert torch.equal(all_reduce(xs[r], bufs[r], push=False), xs[0] + xs[1])
        assert (bufs[0].data.view(torch.int32) == -2**31).all()  # every slot back to -0.0


def test_too_long_a_vector_is_refused():
    bufs = PeerBuffers.virtual(2, 16, DEVICE)  # capacity rounds up to whole chunks (per device)
    with pytest.raises(ValueError, match="buffers hold"):
        all_reduce(torch.ones(bufs[0].capacity + 1, device=DEVICE), bufs[0])


@pytest.mark.gpu
@pytest.mark.parametrize("world", [pytest.param(n, marks=needs_gpus(n)) for n in (2, 4, 8)])
def test_gpus_over_symmetric_memory(tmp_path, world):
    """Real ranks: torchrun, one GPU each (2, 4, 8 as the machine has them), PyTorch symmetric
    memory (NVLink peer-to-peer, no multicast); each rank's result equals the rank-order fp32 sum
    and every rank's bits agree."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                          str(world), os.path.join(root, "tests", "all_reduce_worker.py"),
                          str(world), str(tmp_path / "bad")], env=env, capture_output=True,
                         text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [(tmp_path / f"bad.{r}").read_text() for r in range(world)] == ["0"] * world
