"""Trace one megakernel decode step of a random model shape and print where the time goes: per op
the wait / work time per program over the step, then one layer's phases (span, start spread,
task durations: see trace.phases). Saves the Chrome JSON and PNG timeline to --out. The
per-program rates' correlation with a second launch's says whether a static per-program cost
table could rebalance the queues (a program's speed stays with its index) or not (it goes with
the SM the program lands on: the same correlation per SM). A third launch swaps the queues of
the two programs on each SM (schedule.permuted): each SM runs the same pair of queues, but the
earlier-launched program (the lower index) now runs the other's -- trace.sm_pair_gap, the later
program's task end minus the earlier's on equal tiles, keeps its sign if the lag is the
program's (its place on the SM) and flips it if it is the queue's. (A rotation of the queues by
a few programs, this script's earlier third launch, keeps the SM pairs of queues together on an
H200, where programs p and p + 124 share an SM: its "per queue" correlation included them.)

    python bench/trace_step.py --model 8b --layer 10 [--configs 8192/4/4096/2,16384/4/4096/2]
        [--prompt-len 200]
    python bench/trace_step.py --model 1b --rows 4 --rows-tiles 32x256x4,32x256x4s
        (a step of 4 rows -- prompt lookup's check -- per multi-row tile, s: streamed)
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from fastdecode import trace as tr  # noqa: E402
from bench_decode import read_bandwidth  # noqa: E402
from shapes import random_model, set_rows_tile, stream_configs  # noqa: E402


def _gap(g):
    """trace.sm_pair_gap's (n, median, p10, p90) in us."""
    return f"{g[1] / 1e3:+.2f} ({g[2] / 1e3:+.2f} / {g[3] / 1e3:+.2f})" if g else "nan"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--layer", type=int, default=None, help="layer of the phase table (middle)")
    p.add_argument("--configs", default=None,
                   help="elements/warps/max K/per SM,... (default: config.py's)")
    p.add_argument("--prompt-len", type=int, default=32,
                   help="the traced steps attend over this many keys + 3 (then 4, 5)")
    p.add_argument("--rows", type=int, default=1,
                   help="trace a step of this many rows (>1: prompt lookup's check) instead")
    p.add_argument("--rows-tiles", default=None,
                   help="NxKxW[/kP],... multi-row tiles of --rows > 1 (config.MULTI_ROW_TILE; /kP: "
                        "P K parts per o / down tile, config.ROWS_KSPLIT; default config.py's)")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name, model = random_model(args.model)
    roof = max(read_bandwidth().values())  # bytes / s
    streams = stream_configs(args.configs) if args.configs else [None]
    T = args.rows
    tiles = args.rows_tiles.split(",") if args.rows_tiles and T > 1 else [None]
    for stream, tile in [(s, t) for s in streams for t in tiles]:
        if tile:
            set_rows_tile(tile)
        fm = fastdecode.from_hf(model, max_seq_len=max(256, args.prompt_len + 16 + 5 * T),
                                mode="mega")
        fm.runtime.mega_stream = stream
        fm(torch.randint(0, 1000, (1, args.prompt_len), device="cuda"))
        rows = torch.arange(T, device="cuda") + 7 if T > 1 else None

        def traced(n=1, order=None, rt=fm.runtime, rows=rows):  # the next step(s), a launch
            return rt.trace_decode(n, order=order, ids=rows)
        traced(1 if T > 1 else 2)  # compile and warm
        sched, trace = traced()
        evs = tr.events(sched, trace)
        again = tr.events(*traced())
        # and one with the two queues of each SM swapped (schedule.permuted)
        pairs = tr.sm_pairs(evs)
        swap = [pairs.get(p, p) for p in range(sched.n_programs)]
        swapped = tr.events(*traced(order=swap))
        tag = args.model + (f"_{stream.tile_elems}_{stream.num_warps}w" if stream else "") + \
            (f"_rows{T}" + (f"_{tile.replace('/', '_')}" if tile else "") if T > 1 else "")
        tr.chrome_json(evs, f"{args.out}/trace_{tag}.json")
        what = f"step of {T} rows" + (f", tile {tile}" if tile else "") if T > 1 else \
            "decode step"
        try:
            tr.timeline_png(evs, f"{args.out}/trace_{tag}.png", f"{name} {what}")
        except ImportError:
            pass
        span = max(e["end"] for e in evs) - min(e["start"] for e in evs)
        P = sched.n_programs
        print(f"{name} {stream or 'default stream'} {what}: step span {span / 1e3:.1f} us, "
              f"{P} programs")
        print("  per program over the step (us):")
        for op, r in tr.breakdown(evs).items():
            print(f"    {op:8s} tasks {r['tasks']:5d}  wait {r['wait'] / 1e3 / P:7.1f}  "
                  f"work {r['work'] / 1e3 / P:7.1f}")
        layer = args.layer if args.layer is not None else fm.spec.n_layers // 2
        print(f"  layer {layer} phases (us): span, start spread, task duration min/median/max")
        for op, n, sp, spread, d0, dm, d1 in tr.phases(evs, layer):
            print(f"    {op:8s} tasks {n:4d}  span {sp / 1e3:6.1f}  spread {spread / 1e3:5.1f}  "
                  f"dur {d0 / 1e3:5.1f} / {dm / 1e3:5.1f} / {d1 / 1e3:5.1f}")
        op_bytes = tr.layer_weight_bytes(fm.spec, model.dtype.itemsize)
        rates = tr.phase_rates(evs, layer, op_bytes)
        print(f"  layer {layer} weight streams (trace.phase_rates; read roofline "
              f"{roof / 1e12:.2f} TB/s measured in this run)")
        for op, (nbytes, sp, rate) in rates.items():
            print(f"    {op:8s} {nbytes / 1e6:7.1f} MB in {sp / 1e3:6.1f} us  {rate / 1e3:5.2f} TB/s  "
                  f"{100 * rate * 1e9 / roof:5.1f}% of the roofline")
        print("  task costs over the step (trace.task_costs: work = overhead + bytes / rate)")
        for op, (n, a, r, res) in tr.task_costs(evs, op_bytes).items():
            print(f"    {op:8s} tasks {n:5d}  overhead {a / 1e3:5.2f} us  rate {r:5.1f} GB/s per "
                  f"program  rms residual {res / 1e3:5.2f} us")
        print("  per-program rates over the layers (trace.program_skew): p10 / p90 of the relative "
              "rate, split-half correlation, correlation with the next launch's programs and "
              "SMs (trace events' sm: %smid); the later-launched program of each SM pair minus "
              "the earlier on equal tiles (trace.sm_pair_gap, us: median, p10 / p90), and with "
              "each SM's two queues swapped")
        for op in ("QKV", "QKV_ATTN", "O_PROJ", "GATE_UP", "DOWN"):
            r, n = tr.program_skew(evs, op), tr.program_skew(evs, op, other=again)
            m = tr.program_skew(evs, op, other=again, by="sm")
            g, gs = tr.sm_pair_gap(evs, op), tr.sm_pair_gap(swapped, op, pairs=pairs)
            if r:
                c = lambda x: f"{x[3]:+.2f}" if x else "  nan"  # noqa: E731
                print(f"    {op:8s} programs {r[0]:4d}  rate {r[1]:.3f} / {r[2]:.3f}  "
                      f"corr {r[3]:+.2f}  next launch {c(n)}  SMs {m[0] if m else 0:4d} next "
                      f"launch {c(m)}  pair gap {_gap(g)}, queues swapped {_gap(gs)}")
        chain = tr.attention_chain(evs)
        if chain:
            print(f"  attention chain, median over {chain['chains']} (layer, KV group)s (us): "
                  f"layer's first QKV(_ATTN) ready -> group's last tiles "
                  f"{chain['tiles'] / 1e3:.2f}, "
                  f"-> ticket {chain['ticket'] / 1e3:.2f}, -> q/k normed "
                  f"{chain['norm'] / 1e3:.2f}, -> attention stored {chain['attention'] / 1e3:.2f}, "
                  f"-> published {chain['publish'] / 1e3:.2f}; "
                  f"layer's last -> first O_PROJ ready {chain['hop'] / 1e3:.2f}; the layer's "
                  f"first group published -> its last {chain['spread'] / 1e3:.2f}")
            for n in sorted({e["tiles"] for e in evs if e["op"] == "QKV_ATTN"}):
                d = sorted(e["tiles_end"] - e["ready"] for e in evs
                           if e["op"] == "QKV_ATTN" and e["tiles"] == n and "tiles_end" in e)
                if d:
                    print(f"    QKV_ATTN tasks of {n} tiles: {len(d)}, ready -> tiles stored "
                          f"median {d[len(d) // 2] / 1e3:.2f} us, "
                          f"p90 {d[9 * len(d) // 10] / 1e3:.2f}")
        sm_of, sm_next = ({e["program"]: e["sm"] for e in x} for x in (evs, again))
        same = sum(sm == sm_next.get(p) for p, sm in sm_of.items())
        print(f"  programs on the same SM in the next launch: {same} of {len(sm_of)}")
        del fm
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
