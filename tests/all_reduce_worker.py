"""Run under torchrun by tests/test_all_reduce.py on 2+ GPUs: ops.all_reduce over symmetric
memory (distributed.peer_buffers) against the rank-order fp32 sum of every rank's input (all-
gathered by NCCL), for sizes 1 to 64K elements, bf16 and fp32, every rank bit-identical; with
the flag protocol, then the data-as-flag (-0.0 sentinel) one."""
import os
import sys

import torch
import torch.distributed as dist

from fastdecode.distributed import all_reduce_fp32, init, peer_buffers
from fastdecode.ops import all_reduce

world = int(sys.argv[1])
rank, world, dev = init(world)
flag_bufs, sentinel_bufs = peer_buffers(65536), peer_buffers(65536, sentinel=True)
bad = 0
for i, n in enumerate([1, 7, 1000, 1024, 4099, 65536] * 4):
    dtype = torch.bfloat16 if i % 2 else torch.float32
    g = torch.Generator(device=dev).manual_seed(1000 * i + rank)
    x = torch.randn(n, device=dev, generator=g).to(dtype)
    got = all_reduce(x, sentinel_bufs if i >= 12 else flag_bufs)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x)
    want = all_reduce_fp32(parts)
    same = [torch.empty_like(got) for _ in range(world)]
    dist.all_gather(same, got)
    bad += int(not torch.equal(got, want)) + int(not all(torch.equal(s, got) for s in same))
with open(f"{sys.argv[2]}.{rank}", "w") as f:
    f.write(str(bad))
dist.destroy_process_group()
os._exit(0)
