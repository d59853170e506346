"""Nsight Compute's target: one megakernel launch of --steps decode steps of a random model shape
with a decode stream config, between cudaProfilerStart and Stop (compiled and warmed first), so
ncu profiles that launch alone. ncu works on the H200 machines (KINDS.md: Firecracker runtime);
leave the clocks alone:

    ncu --clock-control none --profile-from-start off -k regex:megakernel --launch-count 1 \\
        --section SpeedOfLight --section LaunchStats --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis --print-details all \\
        python3 bench/ncu_mega.py --model 1b --config 16384/4/4096/2/0/0/0/-1/2222

(--config: one sweep_mega config, shapes.stream_configs; default: the shipped table's.) The
launch's DRAM throughput, stall reasons and shared-memory carveout (LaunchStats' "Shared Memory
Configuration Size") are what bench/RESULTS.md session 20 compares.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from fastdecode.runtime import Sampling  # noqa: E402
from shapes import random_model, stream_configs  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--config", default=None)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=32)
    args = p.parse_args()
    name, model = random_model(args.model)
    fm = fastdecode.from_hf(model, max_seq_len=max(256, args.prompt_len + 5 * args.steps),
                            mode="mega")
    if args.config:
        fm.runtime.mega_stream = stream_configs(args.config)[0]
    fm(torch.randint(0, 1000, (1, args.prompt_len), device="cuda"))
    for _ in range(3):  # compile and warm: the profiled launch is the fourth of its kind
        fm.runtime.decode(args.steps, Sampling())
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fm.runtime.decode(args.steps, Sampling())
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    fm.runtime.check_status()
    print(f"{name} {fm.runtime.stream}: one launch of {args.steps} decode steps profiled")


if __name__ == "__main__":
    main()
