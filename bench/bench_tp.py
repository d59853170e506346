"""Tensor-parallel batch-1 decode on the GPUs of one host, against one GPU in the same run.

    torchrun --nproc-per-node 2 bench/bench_tp.py --models 1b,8b

Every rank builds the same random-weight bf16 model (bench/shapes.py, same seed), packs its shard
(distributed.py) and decodes with
    fastdecode mega tp=W   the megakernel, row-parallel partial sums pushed to every rank over
                           NVLink and summed in rank order inside the kernel (remote flags)
    fastdecode ops tp=W    one launch per op, all-reduces over NCCL (all_gather, rank-order sum)
then rank 0 alone runs mode="mega" on the whole model (tp=1). A mixture of experts (qwen3-30b-a3b,
...) has no megakernel: its ops mode runs at tp=W and tp=1. Decode rate as bench_decode.py:
(t(N new) - t(32 new)) / (N - 32), median of --repeats. Roofline at tp=W: each GPU reads 1/W of
the step's bytes at the read bandwidth measured here. Checks (printed): tp=W logits of the prompt
vs tp=1 (relative L2; bf16 weights, fp32 sums in another order), greedy tokens agreeing, and the
in-kernel all-reduce from a trace of one step (trace.all_reduce_gaps: last partial-sum task end ->
first REDUCE ready, per all-reduce). Rank 0 appends rows to bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import (add_protocol_args, append_results, bench_command,  # noqa: E402
                          decode_rate, max_seq_len, read_bandwidth, step_bytes)
from fastdecode.distributed import TorchCollectives, init  # noqa: E402
from fastdecode.module import FastModel  # noqa: E402
from fastdecode.packing import dict_getter, pack  # noqa: E402
from fastdecode.spec import ModelSpec  # noqa: E402
from fastdecode.trace import all_reduce_gaps, events  # noqa: E402
from shapes import random_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def bench_model(key, args, bw, rank, world, device):
    torch.manual_seed(0)  # the same random weights on every rank
    name, model = random_model(key)
    spec = ModelSpec.from_hf_config(model.config)
    ids = torch.randint(0, spec.vocab_size, (1, args.prompt_len), device=device,
                        generator=torch.Generator(device).manual_seed(0))
    n_lo, n_hi = 32, args.new_tokens
    max_seq = max_seq_len(args)
    nbytes = step_bytes(spec, args, n_lo)
    pw = pack(spec, dict_getter(dict(model.state_dict())), device=device, dtype=torch.bfloat16,
              rank=rank, world=world)
    rows, logits, tokens = [], {}, {}

    def add(peer, tp, rate):
        roof = tp * bw / nbytes
        rows.append(dict(model=name, peer=peer, tp=tp, tok_s=rate, roof=roof))
        if rank == 0:
            print(f"  {name:14s} {peer:28s} {rate:8.1f} tok/s  {100 * rate / roof:5.1f}% of "
                  f"{roof:.0f}", flush=True)

    gaps = None
    one_mode = "ops" if spec.moe else "mega"  # a mixture of experts: no expert tasks in mega
    for mode in [m for m in args.modes.split(",") if not (spec.moe and m == "mega")]:
        fm = FastModel(pw, model.config, max_seq_len=max_seq, mode=mode,
                       collectives=TorchCollectives(spec))
        fm.runtime.decode_chunk = args.chunk
        logits[mode] = fm(ids)[0, -1].float()
        fm.reset()
        tokens[mode] = fm.generate(ids, max_new_tokens=64, eos_token_id=[])[0, ids.shape[1]:]
        gen = lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[])  # noqa: E731
        dist.barrier()
        add(f"fastdecode {mode} tp={world}", world, decode_rate(gen, n_lo, n_hi, args.repeats))
        if mode == "mega":
            fm.reset()
            fm(ids)
            sched, trace = fm.runtime.trace_decode(1)
            gaps = all_reduce_gaps(events(sched, trace))
        del fm
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        fm = fastdecode.from_hf(model, max_seq_len=max_seq, mode=one_mode)
        fm.runtime.decode_chunk = args.chunk
        one = fm(ids)[0, -1].float()
        fm.reset()
        one_tokens = fm.generate(ids, max_new_tokens=64, eos_token_id=[])[0, ids.shape[1]:]
        add(f"fastdecode {one_mode} tp=1", 1, decode_rate(
            lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[]), n_lo, n_hi,
            args.repeats))
        for mode in logits:
            agree = int((tokens[mode] == one_tokens).cumprod(0).sum())
            print(f"  {name} {mode} tp={world} vs {one_mode} tp=1: last-token logits rel. L2 "
                  f"{rel_err(logits[mode], one):.2e}, greedy tokens agree for {agree} of 64")
        if gaps:
            us = sorted(g / 1e3 for g, _ in gaps.values())
            span = statistics.median(s / 1e3 for _, s in gaps.values())
            print(f"  {name} in-kernel all-reduce (trace, rank 0, {len(us)} per step): last "
                  f"partial sum -> REDUCE ready median {statistics.median(us):.2f} us (min "
                  f"{us[0]:.2f}, max {us[-1]:.2f}); REDUCE span median {span:.2f} us")
        del fm
    dist.barrier()
    del model, pw
    torch.cuda.empty_cache()
    base = {r["peer"]: r["tok_s"] for r in rows}.get(f"fastdecode {one_mode} tp=1")
    for r in rows:
        r["vs_tp1"] = r["tok_s"] / base if base else None
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="1b,8b")
    p.add_argument("--modes", default="mega,ops")
    add_protocol_args(p)
    args = p.parse_args()
    rank, world, device = init(int(os.environ.get("WORLD_SIZE", "1")))
    gpu = torch.cuda.get_device_name()
    bw = max(read_bandwidth().values())
    if rank == 0:
        print(f"{world} x {gpu} | read-only stream {bw / 1e12:.2f} TB/s per GPU", flush=True)
    rows = []
    for key in args.models.split(","):
        rows += bench_model(key, args, bw, rank, world, device)
    if rank == 0:
        print(f"\n{'model':14s} {'peer':26s} {'tok/s':>8s} {'%roof':>6s} {'x tp=1':>7s}")
        table = []
        for r in rows:
            vs = f"{r['vs_tp1']:.2f}x" if r["vs_tp1"] else "-"
            pct = 100 * r["tok_s"] / r["roof"]
            print(f"{r['model']:14s} {r['peer']:26s} {r['tok_s']:8.1f} {pct:6.1f} {vs:>7s}")
            table.append([f"{r['tp']} x {gpu}", r["model"], r["peer"], f"{r['tok_s']:.1f}",
                          f"{pct:.1f}% of {r['roof']:.0f}", f"{vs} vs tp=1", "-"])
        append_results(args.results_md, table,
                       bench_command("bench_tp.py", f"torchrun --nproc-per-node {world}"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
