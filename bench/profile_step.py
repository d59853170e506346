"""Where a decode step's time goes, per kernel (torch.profiler over CUDA-graph replays).

    python bench/profile_step.py --model 1b --steps 64
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from shapes import random_model, stage_on_host  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--steps", type=int, default=64)
    args = p.parse_args()
    name, model = random_model(args.model)
    stage_on_host(model)
    fm = fastdecode.from_hf(model, max_seq_len=512, mode="ops", device="cuda")
    del model
    ids = torch.randint(0, 1000, (1, 32), device="cuda")
    fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fm.generate(ids, max_new_tokens=args.steps, eos_token_id=[])
        torch.cuda.synchronize()
    agg = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            k = e.name.split("(")[0][:40]
            n, t = agg.get(k, (0, 0.0))
            agg[k] = (n + 1, t + e.device_time)
    total = sum(t for _, t in agg.values())
    print(f"{name}: {args.steps} decode steps; GPU busy {total / args.steps:.1f} us/step")
    for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"  {k:40s} {n / args.steps:6.1f}/step {t / args.steps:8.1f} us/step "
              f"{t / n:7.2f} us each")


if __name__ == "__main__":
    main()
