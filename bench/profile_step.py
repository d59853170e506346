"""Where a decode step's time goes, per kernel (torch.profiler over CUDA-graph replays).

    python bench/profile_step.py --model 1b --steps 64
    python bench/profile_step.py --model gpt-oss-20b --mxfp4   # its experts as MXFP4 codes

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
from shapes import random_model, random_mxfp4_experts, stage_on_host  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--mxfp4", action="store_true",
                   help="a mixture's experts as random MXFP4 codes (shapes.random_mxfp4_experts)")
    args = p.parse_args()
    name, model = random_model(args.model)
    stage_on_host(model)
    fm = fastdecode.from_hf(model, max_seq_len=512, mode="ops", device="cuda")
    del model
    if args.mxfp4:
        random_mxfp4_experts(fm)
    ids = torch.randint(0, 1000, (1, 32), device="cuda")
    fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e6 / args.steps
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])
        torch.cuda.synchronize()
    agg, prev = {}, "start"  # a kernel keyed by the one before it: gemv's o_proj, experts, ...
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    for e in sorted(kernels, key=lambda e: e.time_range.start):
        name = e.name.split("(")[0][:28]
        k = f"{name} < {prev}"
        n, t = agg.get(k, (0, 0.0))
        agg[k] = (n + 1, t + e.device_time)
        prev = name
    total = sum(t for _, t in agg.values())
    print(f"{name}: {args.steps} decode steps (with the 32-token prefill); GPU busy "
          f"{total / args.steps:.1f} us/step, wall {wall:.1f} us/step")
    for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
        print(f"  {k:58s} {n / args.steps:6.1f}/step {t / args.steps:8.1f} us/step "
              f"{t / n:7.2f} us each")


if __name__ == "__main__":
    main()
