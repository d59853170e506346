"""The mixture-of-experts kernels' tiles at T = 1: the routed experts' gate|up (gemv's experts:
the decode tile, TileConfig, or the persistent stream, StreamConfig) and the fused down
(moe.experts_down: down_tile), GB/s of the weights they read. Each config: a CUDA graph of 16
launches over disjoint expert sets (cold: no launch reads rows the one before left in L2),
replayed round-robin with the others (timing.replay_medians).

    python bench/sweep_moe.py                      # the three published shapes below
    python bench/sweep_moe.py --models gpt-oss-20b --down 2x256x8,4x256x8 --gu none,s16384x4x2
    python bench/sweep_moe.py --models gpt-oss-20b --mxfp4 --gu none,16x512x4 --down 4x256x8
    python bench/sweep_moe.py --fp8 --down none,2x256x8,2x512x8,4x512x8,2x1024x8

Tiles: RxKxW (rows a program, K chunk, warps), s<elements>x<warps>x<tiles> a stream, none the
launcher's default. Shapes (d, expert width F, experts E, top_k) as bench/shapes.py has them;
gpt-oss-20b's with its biases and clamped SwiGLU. --mxfp4: the experts as random MXFP4 codes
and E8M0 scales (an MXFP4 checkpoint's packing; 17 / 32 of a byte an element), tiles only (none:
gemv.MXFP4_TILE). --fp8: the experts as random FP8 rows (quant.fp8_rows: a code a byte, an fp32
scale a 128 columns; an FP8 checkpoint's packing); none: the launchers' defaults (the decode
stream's table entry, moe.down_tile's FP8 chunk).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fastdecode import ops  # noqa: E402
from fastdecode.quant import FP8_BYTES, MXFP4_BYTES  # noqa: E402
from fastdecode.triton_kernels.config import StreamConfig, TileConfig  # noqa: E402
from shapes import random_fp8_rows  # noqa: E402
from timing import replay_medians  # noqa: E402

# name: (d_model, expert width, experts, top_k, gpt-oss's biases and activation)
SHAPES = {"olmoe-1b-7b": (2048, 1024, 64, 8, False), "qwen1.5-moe": (2048, 1408, 60, 4, False),
          "gpt-oss-20b": (2880, 2880, 32, 4, True)}


def parse(spec: str):
    """'none' -> None, 'RxKxW' -> TileConfig, 's<E>x<W>x<T>' -> StreamConfig."""
    if spec == "none":
        return None
    if spec.startswith("s"):
        e, w, t = (int(v) for v in spec[1:].split("x"))
        return StreamConfig(tile_elems=e, num_warps=w, tiles=t)
    return TileConfig(*(int(v) for v in spec.split("x")))


def sweep(name, gu, down, launches=16, mxfp4=False, fp8=False):
    d, F, E, k, oai = SHAPES[name]
    dev, bf = "cuda", torch.bfloat16
    sgu = sd = None
    if mxfp4:
        def codes(N, K):
            return torch.randint(0, 256, (E, N, K // 2), device=dev, dtype=torch.uint8), \
                torch.full((E, N, K // 32), 120, device=dev, dtype=torch.uint8)
        (wgu, sgu), (wd, sd) = codes(2 * F, d), codes(d, F)
    elif fp8:
        wgu, wd = (torch.stack([random_fp8_rows(N, K, dev) for _ in range(E)])
                   for N, K in ((2 * F, d), (d, F)))
    else:
        wgu = torch.randn(E, 2 * F, d, device=dev, dtype=bf) / d ** 0.5
        wd = torch.randn(E, d, F, device=dev, dtype=bf) / F ** 0.5
    bgu = torch.randn(E, 2 * F, device=dev, dtype=bf) if oai else None
    bd = torch.randn(E, d, device=dev, dtype=bf) if oai else None
    x = torch.randn(1, d, device=dev, dtype=bf)
    nw = torch.ones(d, device=dev, dtype=bf)
    act = torch.randn(k, F, device=dev, dtype=bf)
    out = torch.empty(k, F, device=dev, dtype=bf)
    wt = torch.rand(k, device=dev)
    n = E // k  # launches cycle over disjoint expert sets
    ids = [torch.arange(i * k, (i + 1) * k, device=dev, dtype=torch.int32) for i in range(n)]
    elt = MXFP4_BYTES if mxfp4 else FP8_BYTES if fp8 else 2
    nbytes = {"gu": 2 * F * d * elt * k, "down": d * F * elt * k}
    graphs = {}
    for op, spec in [("gu", s) for s in gu] + [("down", s) for s in down]:
        cfg = parse(spec)

        def f(i, cfg=cfg, op=op):
            if op == "gu":
                stream = cfg if isinstance(cfg, StreamConfig) else None
                ops.gemv(x, wgu, norm_w=nw, swiglu=True, act="swiglu_oai" if oai else "silu",
                         bias=bgu, experts=ids[i % n], out=out, stream=stream,
                         config=None if stream else cfg, scales=sgu)
            else:
                ops.moe_down(x, act, wd, ids[i % n], wt, config=cfg, bias=bd, scales=sd)
        f(0)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(launches):
                f(i)
        graphs[(op, spec)] = g
    for (op, spec), s in sorted(replay_medians(graphs, launches, rounds=9).items(),
                                key=lambda kv: (kv[0][0], kv[1])):
        print(f"{name:12s} {op:5s} {spec:14s} {s * 1e6:7.2f} us {nbytes[op] / s / 1e9:6.0f} GB/s"
              + (" (MXFP4)" if mxfp4 else " (FP8)" if fp8 else ""))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(SHAPES))
    p.add_argument("--gu", default="none,2x1024x4,1x1024x4,s16384x4x2")
    p.add_argument("--down", default="2x256x8,4x256x8,8x256x8,16x256x8,4x512x8")
    p.add_argument("--mxfp4", action="store_true", help="the experts as MXFP4 codes and scales")
    p.add_argument("--fp8", action="store_true", help="the experts as FP8 rows")
    a = p.parse_args()
    print(torch.cuda.get_device_name())
    for name in a.models.split(","):
        sweep(name, [s for s in a.gu.split(",") if s], [s for s in a.down.split(",") if s],
              mxfp4=a.mxfp4, fp8=a.fp8)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
