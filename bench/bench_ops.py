"""Standalone decode GEMV, cold L2: the plain-Triton tiles and the PTX weight pieces side by side.

For each [K, N] (y = W x, W [N, K] bf16, T=1) it times, as a CUDA graph of >= 16 launches cycling
over R distinct weight copies (> 256 MB in all, 4x the H200's 60 MB L2, so no launch reads from L2
what the one before left there), the variants' graphs replayed round-robin, each replay timed
from its first kernel's start (cold_l2_times, replay_medians):
  ops (table)  ops mode's decode GEMV, gemv() without a config: tile_table.json's choice for this
               GPU and shape (bench/sweep_gemv.py --record: a tile, one per program, or the
               persistent stream), else config.gemv_config's rule (4 rows x 1024)
  stream       the megakernel's decode stream (config.StreamConfig), one tile per program
  stream+PTX   the same stream, its weight pieces loaded by ptx_inline.ld_stream_b128
  persistent   the stream as the megakernel runs it: 2 programs per SM, each a run of tiles
  persist+PTX  the same with the PTX pieces
  persist+smem the persistent stream through shared memory (StreamConfig.stages 3: Triton's loop
               pipeline, cp.async, two pieces ahead), as the megakernel's 8B-class tasks run
  ops+PDL, persist+PDL, persist+smem+PDL  ops (table) / persistent / persist+smem, each launch
               with programmatic dependent launch (config.use_pdl): it starts while the launch
               before it drains (its first pieces requested before the wait), as the kernels of
               an ops-mode decode step do (the rows above have it off)
and prints GB/s and % of the read roofline (bench_decode.read_bandwidth, measured in this run);
appends the rows to bench/RESULTS.md. --configs (bench/shapes.stream_configs: elements/warps/max
K/per SM[/...]) adds a persist+PDL row per StreamConfig -- its tile, its programs per SM -- to find
a large shape's best persistent stream.

    python bench/bench_ops.py [--shapes 2048x16384,...] [--configs 8192/4/4096/2,32768/8/4096/1]
"""
import argparse
import dataclasses
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_decode import append_results, bench_command, read_bandwidth  # noqa: E402
from fastdecode.ops import gemv  # noqa: E402
from fastdecode.triton_kernels.config import StreamConfig  # noqa: E402
from shapes import stream_configs  # noqa: E402
from timing import cold_copies, laps, pdl, replay_medians  # noqa: E402

# [K, N]: the large shapes (1B gate|up, 8B gate|up, 8B down, 1B lm_head) and small ones
# (1B QKV, 1B down, 8B QKV)
SHAPES = ("2048x16384,4096x28672,14336x4096,2048x128256,2048x3072,8192x2048,4096x6144")


def cold_l2_times(K, N, launches, rounds=15, check=True, ref=None):
    """{name: median seconds per launch(x, w, out)} for each of launches ({name: launch}): each
    launch a CUDA graph of back-to-back launches cycling over the same R distinct [N, K] bf16
    weight copies (cold_copies: between two reads of a copy > 192 MB of others pass through L2),
    timing.MIN_LAUNCHES or more (timing.laps); the graphs replayed round-robin (replay_medians).
    ref(x, w): the fp32 [1, n] each launch must write into out[:, :n] (default x @ w.T, n = N)."""
    R = cold_copies(N * K * 2)
    n = laps(R)
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(R)]
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(1, N, device="cuda", dtype=torch.bfloat16)
    want = ref(x, ws[0]) if ref is not None else x.float() @ ws[0].float().t()
    graphs = {}
    for name, launch in launches.items():
        launch(x, ws[0], out)  # compile
        if check:
            err = float((out[:, :want.shape[1]].float() - want).norm() / want.norm())
            assert err < 1e-2, f"[{K}, {N}] {name}: rel. error {err:.2e}"
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                for w in ws:
                    launch(x, w, out)
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    times = replay_medians(graphs, R * n, rounds)
    del ws, graphs
    torch.cuda.empty_cache()
    return times


def config_tag(c):
    """A --configs entry's row name: its tile elements / warps / max K / programs per SM."""
    return f"persist+PDL {c.tile_elems}/{c.num_warps}/{c.max_k}/{c.per_sm}"


def variants(K, N, sms, configs=()):
    base = StreamConfig()
    persist = base.persistent(N, K, sms)
    smem = dataclasses.replace(persist, stages=3)
    out = {
        "ops (table)": lambda x, w, o: gemv(x, w, out=o),
        "stream": lambda x, w, o: gemv(x, w, out=o, stream=base),
        "stream+PTX": lambda x, w, o: gemv(x, w, out=o, stream=dataclasses.replace(base, ptx=True)),
        "persistent": lambda x, w, o: gemv(x, w, out=o, stream=persist),
        "persist+PTX": lambda x, w, o: gemv(x, w, out=o, stream=dataclasses.replace(
            persist, ptx=True)),
        "persist+smem": lambda x, w, o: gemv(x, w, out=o, stream=smem),
    }
    out = {k: pdl(fn, False) for k, fn in out.items()}
    out["ops+PDL"] = pdl(out["ops (table)"], True)
    out["persist+PDL"] = pdl(lambda x, w, o: gemv(x, w, out=o, stream=persist), True)
    out["persist+smem+PDL"] = pdl(lambda x, w, o: gemv(x, w, out=o, stream=smem), True)
    for c in configs:
        out[config_tag(c)] = pdl(lambda x, w, o, s=c.persistent(N, K, sms): gemv(
            x, w, out=o, stream=s), True)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--configs", default=None,
                   help="persist+PDL rows of these StreamConfigs too (shapes.stream_configs)")
    p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args()
    configs = stream_configs(args.configs) if args.configs else []
    gpu = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    roof = max(read_bandwidth().values())
    print(f"{gpu}: read roofline {roof / 1e12:.2f} TB/s (best read-only stream in this run)",
          flush=True)
    rows = []
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        for name, t in cold_l2_times(K, N, variants(K, N, sms, configs)).items():
            bw = N * K * 2 / t
            rows.append((shape, name, t, bw))
            print(f"  [{K:6d}, {N:6d}] {name:16s} {t * 1e6:8.1f} us {bw / 1e9:7.0f} GB/s "
                  f"{100 * bw / roof:5.1f}%", flush=True)
    names = list(variants(1, 1, 1, configs))
    w = max(17, *(len(v) + 2 for v in names))
    print(f"\n{'[K, N]':14s}" + "".join(f"{v:>{w}s}" for v in names) + "   (GB/s)")
    for shape in args.shapes.split(","):
        print(f"{shape:14s}" + "".join(f"{bw / 1e9:{w}.0f}" for s, _, _, bw in rows if s == shape))
    append_results(args.results_md, [
        [gpu, f"GEMV [K, N] = [{shape.replace('x', ', ')}] bf16, cold L2", name,
         f"{bw / 1e9:.0f} GB/s", f"{100 * bw / roof:.1f}% of {roof / 1e12:.2f} TB/s", "-",
         f"{t * 1e6:.1f} us"] for shape, name, t, bw in rows], bench_command("bench_ops.py"))


if __name__ == "__main__":
    main()
