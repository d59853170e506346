"""The tile of multi-row steps (config.MULTI_ROW_TILE): a step of T = 2..16 rows -- prompt
lookup's check of k + 1 rows, a short prompt's prefill chunk -- streams every weight once, as a
decode step does, so it should cost little more than one. Each candidate tile [block_n rows x
block_k] at num_warps (a /kN suffix: its o / down tiles in N K parts, config.ROWS_KSPLIT), on
random-weight bf16 models of published shapes: the step's time (forward, argmax read, rewind,
as bench_lookup.py times it), in mega mode the kernel's own (back-to-back launches,
bench_lookup.kernel_time: what a tile changes, without the host's round trip -- session 39 saw
the host-inclusive time of one configuration differ by up to 15% across a run), the weights'
GB/s over the kernel (else the step) and its % of the read roofline
(bench_decode.read_bandwidth, measured in this run), and the logits' largest difference from
the first tile's (bf16 rows, fp32 sums in another order: ~1e-2 of the logits' scale).
Then what the host adds to a one-launch step: a megakernel launch's Python time (no sync)
against the GPU's time for the step.

    python bench/sweep_rows.py --models 1b,8b --rows 2,4,16 --tiles 32x256x4,32x256x4/k1
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import append_results, bench_command, read_bandwidth  # noqa: E402
from bench_lookup import kernel_time, step_time  # noqa: E402
from shapes import random_model, set_rows_tile  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="1b,8b")
    p.add_argument("--rows", default="2,4,16")
    p.add_argument("--tiles", default="64x64x4,16x512x4,16x256x4,32x256x4,16x512x8")
    p.add_argument("--mode", default="mega", choices=["mega", "ops"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--results-md", default=os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "RESULTS.md"))
    args = p.parse_args()
    rows = [int(t) for t in args.rows.split(",")]
    bw = read_bandwidth()["gemv_read"] / 1e9
    print(f"read-only GEMV stream {bw:.0f} GB/s", flush=True)
    table = []
    for key in args.models.split(","):
        name, model = random_model(key)
        ids = torch.randint(0, model.config.vocab_size, (32,), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(0))
        ref = {}
        for tile in args.tiles.split(","):
            set_rows_tile(tile)
            fm = fastdecode.from_hf(model, max_seq_len=400, mode=args.mode)
            wbytes = fm.spec.weight_bytes_per_token()
            fm.runtime.forward(ids)
            for T in rows:
                x = torch.arange(T, device="cuda") + 7
                start = fm.runtime.position
                logits = fm.runtime.forward(x)
                fm.runtime.rewind(start)
                err = (logits - ref.setdefault(T, logits)).abs().max().item() / \
                    ref[T].abs().max().item()
                t = step_time(fm, T, args.steps, args.repeats)
                k = kernel_time(fm, T)[1] if args.mode == "mega" else t
                table.append((name, tile, T, t * 1e6, k * 1e6, wbytes / k / 1e9, err))
                print(f"  {name:14s} {tile:10s} T={T:2d} {t * 1e6:8.1f} us (kernel {k * 1e6:7.1f})"
                      f" {wbytes / k / 1e9:7.0f} GB/s ({100 * wbytes / k / 1e9 / bw:4.1f}% of "
                      f"roofline)  logits diff {err:.1e}", flush=True)
            if args.mode == "mega":  # a refused launch's retries (runtime._launch_mega)
                rt = fm.runtime
                print(f"  {name:14s} {tile:10s} rows' kernel: {rt.schedule(rows[0]).n_programs} "
                      f"programs (decode {rt.schedule(1).n_programs}), carveout "
                      f"{rt._rows_carveout or 'the driver default'}", flush=True)
                for T in (1, rows[0]):
                    host, gpu = kernel_time(fm, T)
                    print(f"  {name:14s} {tile:10s} T={T:2d} launch: host {host * 1e6:7.1f} "
                          f"us, step {gpu * 1e6:7.1f} us", flush=True)
            del fm
            torch.cuda.empty_cache()
    print(f"\n{'model':14s} {'tile':11s} {'T':>3s} {'us/step':>8s} {'kernel':>8s} {'GB/s':>6s} "
          f"{'% roof':>6s} {'diff':>8s}")
    for name, tile, T, us, kus, gbs, err in table:
        print(f"{name:14s} {tile:11s} {T:3d} {us:8.1f} {kus:8.1f} {gbs:6.0f} {100 * gbs / bw:6.1f} "
              f"{err:8.1e}")
    gpu = torch.cuda.get_device_name()
    over = "the kernel" if args.mode == "mega" else "the step"
    append_results(args.results_md, [
        [gpu, name, f"fastdecode {args.mode} step of {T} rows, multi-row tile {tile} (tok/s: "
         f"all rows kept; weights {gbs:.0f} GB/s over {over})", f"{T / us * 1e6:.1f}",
         f"{100 * gbs / bw:.1f}%", "-", f"{us:.1f} us/step (kernel {kus:.1f} us)"]
        for name, tile, T, us, kus, gbs, _ in table], bench_command("sweep_rows.py"))


if __name__ == "__main__":
    main()
