"""What a prompt lookup step costs (generate(prompt_lookup_num_tokens=k), fastdecode/lookup.py):
one step of T rows -- the last token and T - 1 candidates, its logits read back by the host,
the cache moved back -- against a plain decode step, on random-weight bf16 models of published
shapes, in the same run.

A step of T rows streams every weight once, as a one-row step does (the extra rows are T x
d_model activations beside megabytes of weights), so it costs little more than one: tok/s with
a accepted tokens a step is a / t(T). Printed per T: the step's time, its ratio to the plain
decode step (the megakernel's chunked decode, no host round trip a token), the rate if every
candidate is accepted, the % of the read roofline (every weight once at the read-only stream's
bandwidth measured in this run, bench_decode.read_bandwidth), and the break-even -- the tokens a
step must add to beat plain decoding. In mega mode also the step's kernel alone (back-to-back
launches, no host round trip) and the host's launch call: the rest of a step is the host's work
around the kernel -- serial with it, as the step's tokens decide the next step's rows.
How many a step adds depends on the text (copying, quoting, loops); random weights say nothing
about it, so no end-to-end rate is claimed here. Steps that find no candidate (plain greedy)
decode a chunk of n tokens a launch (lookup.decode_chunk, n growing by one per such step in a
row): --idle times those per token against the plain decode rate.

    python bench/bench_lookup.py --models 1b,8b [--rows 1,2,4,8,11,16] [--idle 1,4,8]
                                 [--mode mega]
    python bench/bench_lookup.py --models 8b --draft 1b   (assisted decoding's step: the draft's
                                                            k candidates + the 8B's k + 1 rows)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import (append_results, bench_command, decode_rate, read_bandwidth,  # noqa: E402
                          timed)
from fastdecode.generate import Sampling  # noqa: E402
from fastdecode.triton_kernels import launch  # noqa: E402
from shapes import random_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def step_time(fm, T: int, steps: int, repeats: int) -> float:
    """Median seconds of one lookup step of T rows: forward, the rows' argmax read by the host
    (lookup.generate's one sync a step), the cache moved back to where the step began."""
    rt = fm.runtime
    rows = torch.randint(0, fm.spec.vocab_size, (T,), generator=torch.Generator().manual_seed(T))
    rows = rows.to(fm.device)
    start = rt.position

    def run():
        for _ in range(steps):
            rt.forward(rows).argmax(-1).tolist()
            rt.rewind(start)
    run()  # compiles this row count's kernels
    return timed(run, repeats) / steps


def kernel_time(fm, T: int, n: int = 50) -> tuple[float, float]:
    """(host seconds per megakernel launch call, GPU seconds per step) of back-to-back one-step
    launches of T rows (mega mode; at most n, as many as the cache has room for)."""
    rt = fm.runtime
    sched, start = rt.schedule(T), rt.position
    n = max(1, min(n, (rt.max_seq_len - start) // T - 1))
    rt.state.step.zero_()  # each launch's choice goes to the next history entry
    rt._launch_mega(sched, 1, Sampling())  # compiled
    rt.rewind(start)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        rt._launch_mega(sched, 1, Sampling())
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    gpu = time.perf_counter() - t0
    rt.check_status()
    rt.rewind(start)
    return host / n, gpu / n


def idle_time(fm, n: int, steps: int, repeats: int) -> float:
    """Median seconds per token of lookup steps that found no candidate: lookup.decode_chunk's n
    greedy decode steps in one launch and their tokens read back, the cache then moved back."""
    from fastdecode.lookup import decode_chunk
    rt = fm.runtime
    start = rt.position
    seq = (rt.fed or [0] * start) + [7]  # the cache's tokens (as far as the host knows), then 7

    def run():
        for _ in range(steps):
            decode_chunk(rt, 7, n, seq)
            rt.rewind(start)
    run()  # compiled
    return timed(run, repeats) / (steps * n)


def draft_time(draft, ids, k: int, repeats: int) -> float:
    """Median seconds of a draft model's k candidates (lookup.DraftModel, HF's assistant_model):
    the target's correction prefilled over the draft's kept cache, k - 1 decode steps, the
    tokens read back."""
    from fastdecode.lookup import DraftModel
    seq = ids[0].tolist()

    def run():
        src = DraftModel(draft, seq, k, "constant")
        src.append(seq[-1])  # one token past what the draft holds, as after a step
        src.candidates(k, ())
    run()  # compiles; fills the draft's cache with the prompt
    return timed(run, repeats)


def bench_model(key, args, bw) -> list:
    """[(model, rows T (0: the plain step), s/step, x plain step, tok/s, break-even, % of the
    read roofline, (host s per launch call, kernel s per step) or None)]."""
    name, model = random_model(key)
    fm = fastdecode.from_hf(model, max_seq_len=args.prompt_len + 300, mode=args.mode)
    roof = fm.spec.weight_bytes_per_token() / bw  # seconds: every weight once
    ids = torch.randint(0, fm.spec.vocab_size, (1, args.prompt_len), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    plain = decode_rate(lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[]),
                        32, 256, args.repeats)
    fm.reset()
    fm(ids)
    out = []
    for T in (int(t) for t in args.rows.split(",")):
        t = step_time(fm, T, args.steps, args.repeats)
        kt = kernel_time(fm, T) if args.mode == "mega" else None
        out.append((name, T, t, t * plain, T / t, t * plain, roof / t, kt))
        print(f"  {name:14s} T={T:2d}  {t * 1e6:8.1f} us/step  {t * plain:5.2f}x a plain "
              f"step  {T / t:8.1f} tok/s all accepted  {100 * roof / t:5.1f}% of roofline  "
              f"break-even {t * plain:4.2f} tokens/step" + (
                  f"  (kernel {kt[1] * 1e6:.0f} us, launch call {kt[0] * 1e6:.0f} us)" if kt
                  else ""), flush=True)
    for n in (int(v) for v in args.idle.split(",") if v):  # steps without candidates
        t = idle_time(fm, n, max(1, args.steps // n), args.repeats)
        out.append((name, -n, t, t * plain, 1 / t, None, roof / t, None))
        print(f"  {name:14s} no candidate, chunks of {n}: {t * 1e6:8.1f} us/token  "
              f"{t * plain:5.2f}x a plain step", flush=True)
    if args.draft:  # assisted decoding: the draft's k candidates, then a step of k + 1 rows
        dname, dmodel = random_model(args.draft)
        draft = fastdecode.from_hf(dmodel, max_seq_len=args.prompt_len + 300, mode=args.mode)
        for k in (int(t) - 1 for t in args.rows.split(",") if int(t) > 1):
            t = draft_time(draft, ids, k, args.repeats) + step_time(fm, k + 1, args.steps,
                                                                    args.repeats)
            droof = roof + draft.spec.weight_bytes_per_token() / bw * k
            out.append((f"{name} + {dname} draft", k + 1, t, t * plain, (k + 1) / t, t * plain,
                        droof / t, None))
            print(f"  {name} + {dname} draft, k={k:2d}: {t * 1e6:8.1f} us/step  "
                  f"{t * plain:5.2f}x a plain step  break-even {t * plain:4.2f} tokens/step",
                  flush=True)
    return out + [(name, 0, 1 / plain, 1.0, plain, 1.0, roof * plain, None)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="1b,8b")
    p.add_argument("--rows", default="1,2,4,8,11,16")
    p.add_argument("--idle", default="1,4,8", help="chunk lengths of steps without candidates")
    p.add_argument("--mode", default="mega", choices=["mega", "ops"])
    p.add_argument("--draft", default="", help="a shape key: also time assisted decoding's "
                   "step with that model as the draft (e.g. 1b for the 8b)")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=50, help="lookup steps per timed run")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args()
    gpu = torch.cuda.get_device_name()
    cmd = bench_command("bench_lookup.py")
    bw = read_bandwidth()["gemv_read"]
    print(f"read-only GEMV stream {bw / 1e12:.2f} TB/s", flush=True)
    table = []
    for key in args.models.split(","):
        table += bench_model(key, args, bw)
        torch.cuda.empty_cache()
    print(f"\n{'model':14s} {'rows':>4s} {'us/step':>8s} {'x plain':>7s} {'tok/s all':>9s} "
          f"{'% roof':>6s} {'break-even':>10s} {'kernel us':>9s} {'launch us':>9s}")
    for name, T, t, ratio, rate, even, pct, kt in table:
        rows = str(T) if T > 0 else "plain" if T == 0 else f"idle{-T}"  # idle: us/token
        k = f"{kt[1] * 1e6:9.1f} {kt[0] * 1e6:9.1f}" if kt else ""
        ev = f"{even:10.2f}" if even is not None else f"{'-':>10s}"
        print(f"{name:14s} {rows:>4s} {t * 1e6:8.1f} {ratio:7.2f} {rate:9.1f} {100 * pct:6.1f} "
              f"{ev} {k}")
    # the megakernel's launch: direct (triton_kernels/launch.py) unless FASTDECODE_TRITON_LAUNCH=1
    how = f"fastdecode {args.mode}" + ("" if launch.DIRECT else " (Triton's own launch)")
    append_results(args.results_md, [
        [gpu, name, f"{how} prompt lookup step, {T} rows (tok/s: all "
         f"accepted)" if T > 0 else f"{how} plain decode step" if T == 0 else
         f"{how} prompt lookup without candidates, chunks of {-T} decode steps", f"{rate:.1f}",
         f"{100 * pct:.1f}%", f"{ratio:.2f}x", f"{t * 1e6:.1f} us/" + (
             "step" if T >= 0 else "token") + (
             f" (kernel {kt[1] * 1e6:.0f} us, launch call {kt[0] * 1e6:.0f} us)" if kt else "")]
        for name, T, t, ratio, rate, _, pct, kt in table],
        cmd)


if __name__ == "__main__":
    main()
