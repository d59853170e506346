"""All-reduce latency between the GPUs of one host at the sizes of batch-1 tensor parallelism
(an 8 KB bf16 vector per Llama-3.1-8B residual add, 64 of them per token):
    fastdecode.ops.all_reduce (symmetric memory, peer pointers), eager and replayed from a CUDA
        graph (its invocation counts live on the GPU); with release/acquire flags and with the
        data as its own flag (-0.0 sentinel)
    NCCL all_reduce, eager and replayed from a CUDA graph (NVLS off)
    torch symmetric memory one_shot_all_reduce
Median microseconds per call over --iters back-to-back calls, timed on rank 0 between barriers;
appends rows to bench/RESULTS.md. Run: torchrun --nproc-per-node 2 bench/bench_all_reduce.py
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import append_results, bench_command  # noqa: E402
from fastdecode.distributed import init, peer_buffers  # noqa: E402
from fastdecode.ops import all_reduce  # noqa: E402
from fastdecode.triton_kernels.all_reduce import check_status  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def per_call_us(fn, iters, reps=5):
    """Median over reps of (wall time of iters calls) / iters, all ranks started together."""
    out = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(out)


def graphed(fn, iters):
    """fn replayed from one CUDA graph of `iters` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            fn()
    return g.replay


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kb", default="4,8,16,64")
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args()
    rank, world, dev = init(int(os.environ.get("WORLD_SIZE", "2")))
    import torch.distributed._symmetric_memory as symm_mem
    group = dist.group.WORLD.group_name
    sizes = [int(k) * 1024 // 2 for k in args.kb.split(",")]  # bf16 elements
    bufs = peer_buffers(max(sizes))
    sbufs = peer_buffers(max(sizes), sentinel=True)
    rows = []
    for n in sizes:
        x = torch.randn(n, device=dev).to(torch.bfloat16)
        out = torch.empty(n, device=dev, dtype=torch.float32)
        sx = symm_mem.empty(n, dtype=torch.bfloat16, device=dev)
        symm_mem.rendezvous(sx, group)
        sx.copy_(x)
        nc = x.clone()
        ours = lambda: all_reduce(x, bufs, out, check=False)  # noqa: E731
        ours_s = lambda: all_reduce(x, sbufs, out, check=False)  # noqa: E731
        nccl = lambda: dist.all_reduce(nc)  # noqa: E731
        res = {
            "fastdecode all_reduce, eager": per_call_us(ours, args.iters),
            "fastdecode all_reduce, CUDA graph": per_call_us(graphed(ours, args.iters), 1)
            / args.iters,
            "fastdecode all_reduce -0.0 sentinel, eager": per_call_us(ours_s, args.iters),
            "fastdecode all_reduce -0.0 sentinel, CUDA graph": per_call_us(
                graphed(ours_s, args.iters), 1) / args.iters,
            "NCCL, eager": per_call_us(nccl, args.iters),
            "NCCL, CUDA graph": per_call_us(graphed(nccl, args.iters), 1) / args.iters,
            "symm_mem one_shot_all_reduce": per_call_us(
                lambda: torch.ops.symm_mem.one_shot_all_reduce(sx, "sum", group), args.iters),
        }
        check_status(bufs)
        check_status(sbufs)
        rows += [(n * 2 // 1024, name, us) for name, us in res.items()]
    if rank == 0:
        gpu = torch.cuda.get_device_name()
        print(f"{world} x {gpu}: all-reduce of a bf16 vector, median us per call")
        for kb, name, us in rows:
            print(f"  {kb:4d} KB  {name:32s} {us:8.2f} us")
        append_results(os.path.join(HERE, "RESULTS.md"),
                       [[f"{world} x {gpu}", f"all-reduce {kb} KB bf16", name, "-", "-", "-",
                         f"{us:.2f} us"] for kb, name, us in rows],
                       bench_command("bench_all_reduce.py", f"torchrun --nproc-per-node {world}"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
