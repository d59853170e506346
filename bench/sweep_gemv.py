"""Sweep the ops-mode decode GEMV per matrix shape, cold L2: the tile (BLOCK_N, BLOCK_K,
num_warps; one tile per program) against the persistent stream (--streams: StreamConfigs, each
per_sm programs per SM streaming a run of tiles, as the megakernel does), each timed as the op
ops mode runs on that shape (fused_op: gate|up with RMSNorm + SwiGLU, o / down with the residual).

Each config is timed as a CUDA graph of R launches over R distinct weight copies (> 4x the 60 MB
L2 in total), every config of a shape over the same copies, the graphs replayed round-robin
(bench_ops.cold_l2_times), so neither launch overhead, L2 hits nor a clock drift over the run
flatter one. Launches as the process's ops mode does (FASTDECODE_PDL, config.use_pdl: off by
default). Prints GB/s per config and the best per shape; --record writes each shape's winner --
a tile or a stream -- into fastdecode/triton_kernels/tile_table.json for this GPU (gemv() then
uses it: config.gemv_config / gemv_stream).

    python bench/sweep_gemv.py [--shapes "8b down,1b gate|up"] [--streams 16384/4/4096/2,...]
                               [--record]
"""
import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import bench_command  # noqa: E402
from bench_ops import cold_l2_times  # noqa: E402
from fastdecode import reference as R  # noqa: E402
from fastdecode.ops import gemv  # noqa: E402
from fastdecode.triton_kernels.config import (TILE_TABLE, StreamConfig, TileConfig,  # noqa: E402
                                              gemv_config, gemv_stream, sm_count)
from shapes import stream_configs  # noqa: E402
from tile_table import record  # noqa: E402

# [K, N] of the decode GEMVs of Llama-3.2-1B, Llama-3.1-8B, Qwen3-8B (its o_proj is the 8B's
# shape; gate|up counted as 2N rows) and gpt-oss (20b and 120b alike: widths off the powers of two)
SHAPES = {"1b o": (2048, 2048), "1b gate|up": (2048, 2 * 8192), "1b down": (8192, 2048),
          "1b lm_head": (2048, 128256), "8b o": (4096, 4096), "8b gate|up": (4096, 2 * 14336),
          "8b down": (14336, 4096), "8b lm_head": (4096, 128256),
          "qwen3-8b gate|up": (4096, 2 * 12288), "qwen3-8b down": (12288, 4096),
          "qwen3-8b lm_head": (4096, 151936), "gpt-oss o": (4096, 2880),
          "gpt-oss lm_head": (2880, 201088)}
GRID = list(itertools.product([4, 8, 16, 32], [256, 512, 1024], [4, 8]))
# persistent streams: the megakernel's default (16384 elements / 4 warps / max K 4096 / 2 per
# SM) and the best of bench_ops --configs on an H200 (2026-12-01, session 16, persist+PDL rows):
# 8192/4/4096/4 on 2048x16384 and 14336x4096, 16384/8/4096/2 and 8192/4/4096/3 on 4096x28672
STREAMS = "16384/4/4096/2,8192/4/4096/4,16384/8/4096/2,8192/4/4096/3,32768/8/4096/2"
STREAM_FIELDS = ("tile_elems", "num_warps", "max_k", "per_sm")


def swept(s):
    """{field: value} of the StreamConfig fields this sweep varies (the table's stream entry)."""
    return {f: getattr(s, f) for f in STREAM_FIELDS}


def tag(cfg):
    """A config's row name: BLOCK_NxBLOCK_K/warps for a tile, stream elements/warps/max K/per SM."""
    if isinstance(cfg, TileConfig):
        return f"{cfg.block_n}x{cfg.block_k}/{cfg.num_warps}w"
    return "stream " + "/".join(str(getattr(cfg, f)) for f in STREAM_FIELDS)


def gemv_entry(name, cfg, bw):
    """A tile table gemv entry: the tile ("config") or the persistent stream ("stream": the
    StreamConfig fields sweep_gemv varies) and what it streamed."""
    if isinstance(cfg, TileConfig):
        chosen = dict(config=dict(block_n=cfg.block_n, block_k=cfg.block_k,
                                  num_warps=cfg.num_warps))
    else:
        chosen = dict(stream=swept(cfg))
    return dict(shape=name, **chosen, gb_s=round(bw / 1e9))


def fused_op(name, K, N, device="cuda"):
    """The op as ops mode launches it on this shape (runtime.py): gate|up with its RMSNorm and
    SwiGLU (N = 2 x ffn rows in, ffn out), o / down with the residual added, lm_head plain ->
    (extra gemv keywords, output rows, fp32 reference(x, w)). Timing the plain GEMV instead picked
    the stream for the 8B's gate|up, which ops mode then ran 10% slower end to end (234.8 vs
    213.4 tok/s; H200, 2026-12-01, RESULTS.md session 16)."""
    g = torch.Generator(device).manual_seed(0)
    if name.endswith("gate|up"):
        nw = (1 + 0.1 * torch.randn(K, device=device, generator=g)).to(torch.bfloat16)
        return (dict(norm_w=nw, eps=1e-5, swiglu=True), N // 2,
                lambda x, w: R.gemv(x, w, norm_w=nw, eps=1e-5, swiglu=True))
    if name.endswith((" o", " down")):
        res = torch.randn(1, N, device=device, generator=g).to(torch.bfloat16)
        return dict(residual=res), N, lambda x, w: R.gemv(x, w, residual=res)
    return {}, N, None


def launcher(cfg, K, N, kw, n_out, sms):
    if isinstance(cfg, TileConfig):
        return lambda x, w, out: gemv(x, w, out=out[:, :n_out], config=cfg, **kw)
    s = cfg.persistent(n_out, K, sms, 2 if kw.get("swiglu") else 1)
    return lambda x, w, out: gemv(x, w, out=out[:, :n_out], stream=s, **kw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=",".join(SHAPES), help="names of SHAPES, comma-separated")
    p.add_argument("--streams", default=STREAMS, help="persistent StreamConfigs (shapes.py syntax)")
    p.add_argument("--record", action="store_true", help="each shape's best into the tile table")
    args = p.parse_args()
    dev = torch.device("cuda")
    sms = sm_count(dev)
    configs = [TileConfig(*g) for g in GRID]
    configs += [StreamConfig(**swept(s)) for s in stream_configs(args.streams)] \
        if args.streams else []
    best = {}
    for name in args.shapes.split(","):
        K, N = SHAPES[name]
        kw, n_out, ref = fused_op(name, K, N)
        parts = 2 if kw.get("swiglu") else 1
        cur = gemv_stream(n_out, K, dev, rows=N, parts=parts) or gemv_config(n_out, K, 1, dev,
                                                                               rows=N)
        if isinstance(cur, StreamConfig):
            cur = StreamConfig(**swept(cur))  # its tiles per program aside
        ts = cold_l2_times(K, N, {c: launcher(c, K, N, kw, n_out, sms) for c in configs},
                           ref=ref)
        rows = sorted(((N * K * 2 / t, t, c) for c, t in ts.items()), key=lambda r: -r[0])
        t_cur = ts.get(cur, float("nan"))
        best[name] = rows[0]
        top = ", ".join(f"{tag(c)} {bw / 1e12:.2f}" for bw, _, c in rows[:4])
        print(f"{name:12s} K={K:6d} N={N:6d} | current {tag(cur)} "
              f"{N * K * 2 / t_cur / 1e12:.2f} TB/s | best {top}", flush=True)
    print(f"\n{'shape':14s} {'best':28s} TB/s     us")
    for name, (bw, t, cfg) in best.items():
        print(f"{name:14s} {tag(cfg):28s} {bw / 1e12:5.2f}  {t * 1e6:7.1f}")
        if args.record:
            K, N = SHAPES[name]
            record(TILE_TABLE, "gemv", torch.cuda.get_device_name(), dict(N=N, K=K),
                   gemv_entry(name, cfg, bw), bench_command("sweep_gemv.py"))
    if args.record:
        print(f"recorded in {TILE_TABLE}")


if __name__ == "__main__":
    main()
