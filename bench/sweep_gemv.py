"""Sweep the decode GEMV tile (BLOCK_N, BLOCK_K, num_warps) per matrix shape, cold L2.

Each config is timed as a CUDA graph of R launches over R distinct weight copies (> 4x the 60 MB
L2 in total; bench_ops.cold_l2_time), so neither launch overhead nor L2 hits flatter it. Prints
GB/s per config and the best per shape; --record writes each shape's winner into
fastdecode/triton_kernels/tile_table.json for this GPU (config.gemv_config then uses it).

    python bench/sweep_gemv.py [--record]
"""
import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import bench_command  # noqa: E402
from bench_ops import cold_l2_time  # noqa: E402
from fastdecode.ops import gemv  # noqa: E402
from fastdecode.triton_kernels.config import TILE_TABLE, TileConfig, gemv_config  # noqa: E402
from tile_table import record  # noqa: E402

# [K, N] of the decode GEMVs of Llama-3.2-1B and Llama-3.1-8B (gate|up counted as 2N rows)
SHAPES = {"1b o": (2048, 2048), "1b gate|up": (2048, 2 * 8192), "1b down": (8192, 2048),
          "1b lm_head": (2048, 128256), "8b o": (4096, 4096), "8b gate|up": (4096, 2 * 14336),
          "8b down": (14336, 4096), "8b lm_head": (4096, 128256)}
GRID = list(itertools.product([4, 8, 16, 32], [256, 512, 1024], [4, 8]))


def time_config(K, N, cfg):
    t = cold_l2_time(K, N, lambda x, w, out: gemv(x, w, out=out, config=cfg))
    return N * K * 2 / t, t


def gemv_entry(name, bn, bk, nw, bw):
    """A tile table gemv entry: the tile and what it streamed."""
    return dict(shape=name, config=dict(block_n=bn, block_k=bk, num_warps=nw),
                gb_s=round(bw / 1e9))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--record", action="store_true", help="each shape's best into the tile table")
    args = p.parse_args()
    best = {}
    for name, (K, N) in SHAPES.items():
        cur = gemv_config(N, K, 1, torch.device("cuda"))
        rows = []
        for bn, bk, nw in GRID:
            bw, t = time_config(K, N, TileConfig(bn, bk, nw))
            rows.append((bw, t, bn, bk, nw))
        rows.sort(reverse=True)
        bw_cur = next(r[0] for r in rows if (r[2], r[3], r[4]) == (cur.block_n, cur.block_k,
                                                                   cur.num_warps)) \
            if cur.block_k in (256, 512, 1024) else float("nan")
        best[name] = rows[0]
        top = ", ".join(f"{bn}x{bk}/{nw}w {bw / 1e12:.2f}" for bw, _, bn, bk, nw in rows[:4])
        print(f"{name:12s} K={K:6d} N={N:6d} | current {cur.block_n}x{cur.block_k}/"
              f"{cur.num_warps}w {bw_cur / 1e12:.2f} TB/s | best {top}", flush=True)
    print("\nshape          best BLOCK_N x BLOCK_K / warps    TB/s     us")
    for name, (bw, t, bn, bk, nw) in best.items():
        print(f"{name:14s} {bn:3d} x {bk:5d} / {nw}          {bw / 1e12:5.2f}  {t * 1e6:7.1f}")
        if args.record:
            K, N = SHAPES[name]
            record(TILE_TABLE, "gemv", torch.cuda.get_device_name(), dict(N=N, K=K),
                   gemv_entry(name, bn, bk, nw, bw), bench_command("sweep_gemv.py"))
    if args.record:
        print(f"recorded in {TILE_TABLE}")


if __name__ == "__main__":
    main()
