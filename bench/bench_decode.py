"""End-to-end batch-1 decode benchmark: HF eager, HF static cache + torch.compile, fastdecode ops
(+ CUDA graph), on random-weight bf16 models of published shapes.

Decode rate = (t(N new) - t(32 new)) / (N - 32): prefill and set-up cancel. Each time is the median
of --repeats runs. Roofline: bytes a step must read (every weight once + the KV cache at the mean
context) over the best read-only streaming bandwidth measured in this run (a GEMV over a 2 GB
matrix, which reads faster than a device copy moves data). Prints a table, writes CSV + PNG under
bench/results/ and appends rows to bench/RESULTS.md.

    python bench/bench_decode.py --models 1b,8b [--gen repetition_penalty=1.1]
"""
from __future__ import annotations

import argparse
import ast
import csv
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from fastdecode.spec import ModelSpec  # noqa: E402
from fastdecode.triton_kernels.config import use_pdl  # noqa: E402
from fastdecode.quant import FP8_BYTES, MXFP4_BYTES  # noqa: E402
from shapes import (random_fp8_matrices, random_model, random_mxfp4_experts,  # noqa: E402
                    stage_on_host)

HERE = os.path.dirname(os.path.abspath(__file__))


def read_bandwidth() -> dict:
    """Read-only stream: our GEMV over a [262144, 4096] bf16 matrix (2.1 GB, 35x the 60 MB L2),
    the faster of ops mode's tile (one launch, do_bench) and the megakernel's stream launched
    persistent (2 programs per SM, each a run of tiles) as a CUDA graph of 4 back-to-back launches
    with programmatic dependent launch, timed as bench_ops times its persist+PDL rows
    (timing.replay_medians); and a device-to-device copy (bytes read + written) for reference.
    Until 2026-12-03 only the tile over [131072, 8192], 4.24 TB/s, while bench_ops' persist+PDL
    rows streamed 4.42-4.50 on the large shapes of the same run: "% of roofline" over 100."""
    import triton
    from fastdecode.triton_kernels.config import StreamConfig
    from timing import pdl, replay_medians
    N, K = 262144, 4096
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(1, N, device="cuda", dtype=torch.bfloat16)
    t_tile = triton.testing.do_bench(lambda: fastdecode.ops.gemv(x, w, out=out), warmup=50,
                                     rep=300, return_mode="median") * 1e-3
    persist = StreamConfig().persistent(N, K, torch.cuda.get_device_properties(0)
                                        .multi_processor_count)
    launch = pdl(lambda x, w, o: fastdecode.ops.gemv(x, w, out=o, stream=persist), True)
    launch(x, w, out)  # compile
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(4):
            launch(x, w, out)
    t_persist = replay_medians({"persist": g}, 4, rounds=7)["persist"]
    gemv_bw = w.numel() * 2 / min(t_tile, t_persist)
    del g
    src = torch.empty(2 * 1024**3, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    t = triton.testing.do_bench(lambda: dst.copy_(src), warmup=20, rep=200,
                                return_mode="median") * 1e-3
    del w, src, dst
    torch.cuda.empty_cache()
    return {"gemv_read": gemv_bw, "copy": 2 * 2 * 1024**3 / t}


def timed(fn, repeats):
    ts = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def decode_rate(gen, n_lo, n_hi, repeats):
    gen(n_lo)  # each length once untimed: HF's static cache recompiles per length
    gen(n_hi)
    t_lo = timed(lambda: gen(n_lo), repeats)
    t_hi = timed(lambda: gen(n_hi), repeats)
    return (n_hi - n_lo) / (t_hi - t_lo)


def add_protocol_args(p):
    """The decode-rate protocol's options, shared by bench_tp.py."""
    p.add_argument("--chunk", type=int, default=16, help="decode steps per host round trip")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=None,
                   help="the KV cache fastdecode allocates (from_hf's max_seq_len; the split-KV "
                        "plan is made for it); default: the prompt + new tokens + 8")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))


def step_bytes(spec, args, n_lo=32, expert_elt=None, matrix_elt=None):
    """Bytes one decode step reads: every weight once + the KV cache at the mean context of the
    timed tokens (decode_rate's n_lo .. --new-tokens); expert_elt / matrix_elt: a routed
    expert's / a dense matrix's bytes an element (MXFP4's / FP8's), where not bf16's."""
    mean_ctx = args.prompt_len + (n_lo + args.new_tokens) / 2
    return spec.weight_bytes_per_token(expert_elt=expert_elt, matrix_elt=matrix_elt) + \
        spec.kv_bytes(int(mean_ctx))


def max_seq_len(args) -> int:
    """fastdecode's KV cache length: --max-seq-len, else just what the run needs."""
    need = args.prompt_len + args.new_tokens + 8
    if args.max_seq_len is not None and args.max_seq_len < need:
        raise SystemExit(f"--max-seq-len {args.max_seq_len} < prompt + new tokens + 8 = {need}")
    return args.max_seq_len or need


def bench_model(key, args, bw):
    name, model = random_model(key)
    spec = ModelSpec.from_hf_config(model.config)
    on_host = stage_on_host(model)  # back for HF's peers after fastdecode's
    ids = torch.randint(0, spec.vocab_size, (1, args.prompt_len), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    n_lo, n_hi = 32, args.new_tokens
    nbytes = step_bytes(spec, args, n_lo)
    roof = bw / nbytes
    rows = []

    def add(peer, rate, first_call=None, peer_roof=None):
        r = peer_roof or roof
        rows.append(dict(model=name, peer=peer, tok_s=rate, roofline_pct=100 * rate / r,
                         first_call_s=first_call, step_gb=bw / r / 1e9, roofline_tok_s=r))
        print(f"  {name:14s} {peer:28s} {rate:8.1f} tok/s  {100 * rate / r:5.1f}% of roofline",
              flush=True)

    gen = args.gen_kwargs  # the same generate() arguments for every peer
    tag = f" ({args.gen})" if args.gen else ""

    def hf_gen(n):
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **{"do_sample": False, **gen})

    # mxfp4 (a mixture): ops mode with the experts as random MXFP4 codes (an MXFP4 checkpoint's
    # packing); fp8 / fp8_mega: ops / mega mode with the layer matrices (a mixture's experts
    # too) as random FP8 rows (an FP8 checkpoint's); each its roofline over the bytes of
    # those codes and scales
    fp8 = (" FP8 matrices", random_fp8_matrices, dict(matrix_elt=FP8_BYTES, expert_elt=FP8_BYTES))
    quant = {"mxfp4": (" MXFP4 experts", random_mxfp4_experts, dict(expert_elt=MXFP4_BYTES)),
             "fp8": fp8, "fp8_mega": fp8}
    for peer, mode in (("fastdecode", "ops"), ("mega", "mega"), ("mxfp4", "ops"), ("fp8", "ops"),
                       ("fp8_mega", "mega")):
        if peer not in args.peers or (peer == "mxfp4" and not spec.moe):
            continue
        try:
            t0 = time.perf_counter()
            fm = fastdecode.from_hf(model, max_seq_len=max_seq_len(args), mode=mode,
                                    device="cuda")
            if peer in quant:
                quant[peer][1](fm)
            fm.runtime.decode_chunk = args.chunk
            fm.generate(ids, max_new_tokens=2, eos_token_id=[], **gen)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            rate = decode_rate(lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[],
                                                     **gen), n_lo, n_hi, args.repeats)
            pdl = "+PDL" if use_pdl(torch.device("cuda")) else ""  # config.use_pdl, ops kernels
            label = f"fastdecode ops+graph{pdl}" if mode == "ops" else "fastdecode mega"
            add(label + (quant[peer][0] if peer in quant else "") + tag, rate, first,
                bw / step_bytes(spec, args, n_lo, **quant[peer][2]) if peer in quant else None)
            del fm
        except Exception as e:  # record the failure, keep the other numbers
            print(f"  fastdecode {mode} failed: {type(e).__name__}: {str(e)[:300]}")
        torch.cuda.empty_cache()
    if on_host and ("hf_eager" in args.peers or "hf_compile" in args.peers):
        model.cuda()
    if "hf_eager" in args.peers:
        add("HF eager" + tag, decode_rate(hf_gen, n_lo, n_hi, args.repeats))
    if "hf_compile" in args.peers:
        # what a notebook user does: a static cache, and generate() compiles the forward itself
        # (transformers' compile_config: torch.compile, fullgraph, CUDA graphs)
        model.generation_config.cache_implementation = "static"
        try:
            t0 = time.perf_counter()
            hf_gen(4)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            add("HF static+torch.compile" + tag, decode_rate(hf_gen, n_lo, n_hi, args.repeats),
                first)
        except Exception as e:  # record the failure, keep the other numbers
            print(f"  HF static+torch.compile failed: {type(e).__name__}: {str(e)[:300]}")
    del model
    torch.cuda.empty_cache()
    base = {r["peer"]: r["tok_s"] for r in rows}
    for r in rows:
        r["vs_compile"] = r["tok_s"] / base["HF static+torch.compile" + tag] \
            if "HF static+torch.compile" + tag in base else None
    return rows


def save_checkpoint(key, path):
    """The random model of shape `key` as a checkpoint folder (config.json + safetensors)."""
    _, model = random_model(key)
    model.save_pretrained(path, safe_serialization=True)
    del model
    torch.cuda.empty_cache()


WARM_RUNS = 3


def first_token_latency(ckpt, cache_dir, mode):
    """bench/first_call.py in a fresh process with TRITON_CACHE_DIR=cache_dir -> (seconds from
    process start, seconds after importing torch + fastdecode, its stage breakdown)."""
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, os.path.join(HERE, "first_call.py"), ckpt, mode],
                         env=env, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("FIRST")]
    if not line:
        print(out.stderr[-2000:])
        return None
    _, total, after_imports, stages = line[0].split(" ", 3)
    return float(total), float(after_imports), stages


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="1b,8b")
    p.add_argument("--peers", default="fastdecode,mega,hf_eager,hf_compile",
                   help="of fastdecode (ops + CUDA graph), mega, mxfp4 (a mixture's experts as "
                        "random MXFP4 codes, ops mode), fp8 (the layer matrices, a mixture's "
                        "experts too, as random FP8 rows, ops mode), fp8_mega (the same in mode "
                        "mega), hf_eager, "
                        "hf_compile")
    p.add_argument("--first-call", action="store_true", help="also time process start -> token")
    p.add_argument("--gen", default="",
                   help="generate() arguments for every peer, k=v,... (repetition_penalty=1.1 or "
                        "do_sample=True,top_p=0.9): what that token choice costs each")
    p.add_argument("--identity-processor", action="store_true",
                   help="also a logits_processor that returns the scores unchanged: the cost of "
                        "the caller's Python in the loop")
    add_protocol_args(p)
    args = p.parse_args()
    args.peers = args.peers.split(",")
    args.gen_kwargs = {k: ast.literal_eval(v) for k, v in (
        kv.split("=") for kv in args.gen.split(",") if kv)}
    if args.identity_processor:  # the host round trip of a caller's processor, for every peer
        args.gen_kwargs["logits_processor"] = [lambda input_ids, scores: scores]
        args.gen = ",".join(filter(None, [args.gen, "logits_processor=[identity]"]))
    gpu = torch.cuda.get_device_name()
    print(f"{gpu} | torch {torch.__version__} | triton "
          f"{__import__('triton').__version__}", flush=True)
    bw = read_bandwidth()
    print(f"read-only GEMV stream {bw['gemv_read'] / 1e12:.2f} TB/s | d2d copy "
          f"{bw['copy'] / 1e12:.2f} TB/s (read+write)", flush=True)
    roof_bw = max(bw.values())
    rows = []
    for key in args.models.split(","):
        rows += bench_model(key, args, roof_bw)
    if not rows:
        raise SystemExit("no peer ran (their failures above): nothing to record")
    # the decode rows are saved before the first-call runs, so a time-boxed run that is cut
    # during those keeps them
    stamp, commit = run_stamp()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    # the models in the name too: two runs at one commit (different models) keep both files
    tag = args.models.replace(",", "-")
    base = os.path.join(HERE, "results", f"decode_{stamp}_{commit}_{tag}")
    csv_path = base + ".csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _plot(rows, base + ".png", gpu)
    print(f"\n{'model':14s} {'peer':26s} {'tok/s':>8s} {'%roof':>6s} {'x compile':>9s} "
          f"{'1st call s':>10s}")
    for r in rows:
        vs = f"{r['vs_compile']:.2f}" if r["vs_compile"] else "-"
        fc = f"{r['first_call_s']:.1f}" if r["first_call_s"] else "-"
        print(f"{r['model']:14s} {r['peer']:26s} {r['tok_s']:8.1f} {r['roofline_pct']:6.1f} "
              f"{vs:>9s} {fc:>10s}", flush=True)
    cmd = bench_command("bench_decode.py")
    append_results(args.results_md, [
        [gpu, r["model"], r["peer"], f"{r['tok_s']:.1f}",
         f"{r['roofline_pct']:.1f}% of {r['roofline_tok_s']:.0f}",
         f"{r['vs_compile']:.2f}x" if r["vs_compile"] else "-",
         f"{r['first_call_s']:.1f}" if r["first_call_s"] else "-"] for r in rows], cmd)
    if args.first_call:
        lat = first_call_latencies()
        for (mode, cache), v in lat.items():
            print(f"first token, {mode}, {cache} Triton cache: {v[0]:.1f} s from process start "
                  f"({v[1]:.1f} s after importing torch + fastdecode: {v[2]})")
        append_results(args.results_md, [
            [gpu, "Llama-3.2-1B", f"first token ({mode}, from_pretrained, {cache} Triton cache)",
             "-", "-", "-", f"{v[0]:.1f} (process start)"] for (mode, cache), v in lat.items()],
            cmd)


def first_call_latencies():
    """{(mode, cold | warm): (s from process start, s after imports, breakdown)} for a
    Llama-3.2-1B-shape checkpoint, ops and mega: a cold Triton cache, then warm."""
    import tempfile
    ckpt = tempfile.mkdtemp()
    save_checkpoint("1b", ckpt)
    lat = {}
    for mode in ("ops", "mega"):
        cache = tempfile.mkdtemp()
        cold = first_token_latency(ckpt, cache, mode)
        if cold:
            lat[(mode, "cold")] = cold
        # a fresh process's import of torch alone varies 2.8-3.9 s on the H200 host (measured
        # 2026-11-30): the warm figure is the median of WARM_RUNS processes, the spread beside it
        warm = [v for v in (first_token_latency(ckpt, cache, mode) for _ in range(WARM_RUNS))
                if v]
        if warm:
            warm.sort(key=lambda v: v[0])
            med = warm[len(warm) // 2]
            lat[(mode, "warm")] = (med[0], med[1], med[2] + f"; median of {len(warm)}, "
                                   f"{warm[0][0]:.1f}-{warm[-1][0]:.1f} s")
    return lat


def _git_commit():
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                       text=True).strip()
    except Exception:
        return "unknown"


def run_stamp():
    """(UTC date, commit) of this run, for result rows and file names: the commit from
    FASTDECODE_COMMIT (the device machine's copy of the tree can carry a stale git history) or
    git."""
    return (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            os.environ.get("FASTDECODE_COMMIT") or _git_commit())


def bench_command(script, launcher="python"):
    """The command as run, for the last column of a result row."""
    return f"{launcher} bench/{script} " + " ".join(sys.argv[1:])


def append_results(path, rows, cmd):
    """Rows of bench/RESULTS.md's table, one per list of cells [GPU, what, peer, value, % of
    roofline, ratio, time]: | date | GPU | commit | what | ... | `cmd` |."""
    stamp, commit = run_stamp()
    with open(path, "a") as f:
        for gpu, *cells in rows:
            f.write("| " + " | ".join([stamp, gpu, commit, *cells, f"`{cmd}`"]) + " |\n")


def _plot(rows, path, gpu):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    models = sorted({r["model"] for r in rows}, key=[r["model"] for r in rows].index)
    peers = sorted({r["peer"] for r in rows}, key=[r["peer"] for r in rows].index)
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        rs = [next((r for r in rows if r["model"] == m and r["peer"] == p), None) for p in peers]
        ax.bar(range(len(peers)), [r["tok_s"] if r else 0 for r in rs],
               color=["C0", "C1", "C2", "C3"][:len(peers)])
        roof = next(r["roofline_tok_s"] for r in rows if r["model"] == m)
        ax.axhline(roof, color="k", ls="--", lw=1, label=f"roofline {roof:.0f}")
        ax.set_xticks(range(len(peers)), peers, rotation=20, ha="right", fontsize=8)
        ax.set_title(f"{m} batch-1 decode, {gpu}", fontsize=9)
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
