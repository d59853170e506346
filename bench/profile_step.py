"""Where a decode step's time goes, per kernel (torch.profiler over CUDA-graph replays).

    python bench/profile_step.py --model 1b --steps 64
    python bench/profile_step.py --model gpt-oss-20b --mxfp4   # its experts as MXFP4 codes
    python bench/profile_step.py --model olmoe-1b-7b --fp8     # its matrices as FP8 rows

Prints the GPU's busy time a step (the kernels' sum) beside the step's wall time: their
difference is the launch gaps between kernels.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from shapes import (random_fp8_matrices, random_model, random_mxfp4_experts,  # noqa: E402
                    stage_on_host)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--mxfp4", action="store_true",
                   help="a mixture's experts as random MXFP4 codes (shapes.random_mxfp4_experts)")
    p.add_argument("--fp8", action="store_true",
                   help="the layer matrices (a mixture's experts too) as random FP8 rows "
                        "(shapes.random_fp8_matrices)")
    args = p.parse_args()
    name, model = random_model(args.model)
    stage_on_host(model)
    fm = fastdecode.from_hf(model, max_seq_len=512, mode="ops", device="cuda")
    del model
    if args.mxfp4:
        random_mxfp4_experts(fm)
    if args.fp8:
        random_fp8_matrices(fm)
    ids = torch.randint(0, 1000, (1, 32), device="cuda")
    fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])  # compiles, captures
    (agg, wall), (agg1, wall1) = (profiled(fm, ids, n) for n in (args.steps, 1))
    steps = args.steps - 1  # the decode steps alone: a run of 1 token (prefill) subtracted
    agg = {k: (n - agg1.get(k, (0, 0.0))[0], t - agg1.get(k, (0, 0.0))[1])
           for k, (n, t) in agg.items()}
    total = sum(t for _, t in agg.values())
    print(f"{name}: {steps} decode steps (a 1-token run's kernels subtracted: the 32-token "
          f"prefill); GPU busy {total / steps:.1f} us/step, wall {(wall - wall1) / steps:.1f} "
          f"us/step")
    for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
        if n > 0:
            print(f"  {k:58s} {n / steps:6.1f}/step {t / steps:8.1f} us/step "
                  f"{t / n:7.2f} us each")


def profiled(fm, ids, n):
    """generate(n tokens) timed, then under torch.profiler -> ({kernel < the kernel before it:
    (count, us)}, wall us of the unprofiled run): keyed by its predecessor, gemv's roles part
    (o_proj after attn_merge, the experts' after route, ...)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fm.generate(ids, max_new_tokens=n, eos_token_id=[])
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e6
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fm.generate(ids, max_new_tokens=n, eos_token_id=[])
        torch.cuda.synchronize()
    agg, prev = {}, "start"
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    for e in sorted(kernels, key=lambda e: e.time_range.start):
        kname = e.name.split("(")[0][:28]
        k = f"{kname} < {prev}"
        c, t = agg.get(k, (0, 0.0))
        agg[k] = (c + 1, t + e.device_time)
        prev = kname
    return agg, wall


if __name__ == "__main__":
    main()
