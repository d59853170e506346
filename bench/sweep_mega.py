"""Megakernel decode rate for a grid of decode stream tiles (config.StreamConfig: elements per
weight tile, warps per program, L2 prefetch distance in tiles), in one run. One program per SM needs ~32-40 KB of loads in
flight (4.8 TB/s x ~1 us / 132 SMs); the stream keeps two tiles in flight. Each variant is checked
against ops mode (same greedy tokens) before it is timed.

    python bench/sweep_mega.py --model 1b --elems 8192,16384 --warps 8 --ahead 0,1,2
"""
import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import decode_rate  # noqa: E402
from fastdecode.triton_kernels.config import StreamConfig  # noqa: E402
from shapes import random_model  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--elems", default="8192,16384")
    p.add_argument("--warps", default="8")
    p.add_argument("--ahead", default="0,1,2")
    p.add_argument("--new-tokens", type=int, default=160)
    args = p.parse_args()
    name, model = random_model(args.model)
    ids = torch.randint(0, 1000, (1, 32), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    ref = fastdecode.from_hf(model, max_seq_len=256, mode="ops")
    want = ref.generate(ids, max_new_tokens=24, eos_token_id=[])
    base = decode_rate(lambda n: ref.generate(ids, max_new_tokens=n, eos_token_id=[]), 32,
                       args.new_tokens, 3)
    del ref
    print(f"{name}: ops + CUDA graph {base:.1f} tok/s", flush=True)
    rows = []
    grid = itertools.product(*(map(int, a.split(",")) for a in (args.elems, args.warps,
                                                                 args.ahead)))
    for elems, nw, ahead in grid:
        fm = fastdecode.from_hf(model, max_seq_len=256, mode="mega")
        fm.runtime.mega_stream = StreamConfig(elems, nw, ahead=ahead)
        try:
            ok = torch.equal(fm.generate(ids, max_new_tokens=24, eos_token_id=[]), want)
            rate = decode_rate(lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[]), 32,
                               args.new_tokens, 3)
        except Exception as e:
            print(f"  {elems}/{nw}w/{ahead} failed: {type(e).__name__}: {str(e)[:200]}",
                  flush=True)
            continue
        rows.append((rate, elems, nw, ahead, ok))
        print(f"  {elems:6d} elements / {nw:2d} warps / L2 ahead {ahead}: {rate:8.1f} tok/s  "
              f"tokens == ops: {ok}", flush=True)
        del fm
        torch.cuda.empty_cache()
    print(f"\n{name} megakernel tiles, best first (ops + CUDA graph: {base:.1f} tok/s)")
    for rate, elems, nw, ahead, ok in sorted(rows, reverse=True):
        print(f"  {elems:6d} el / {nw:2d}w / ahead {ahead}  {rate:8.1f} tok/s  {rate / base:5.2f}x ops  "
              f"{'ok' if ok else 'TOKENS DIFFER'}")


if __name__ == "__main__":
    main()
