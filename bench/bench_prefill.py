"""Time to first token by prompt length: fastdecode `ops` and `mega` against HF eager (bf16, SDPA)
on random-weight bf16 models of published shapes.

TTFT = generate(ids, max_new_tokens=1): the prompt's prefill (fastdecode: runtime._prefill_long's
passes of up to prefill_chunk tokens from prefill_min tokens on, else the step kernels' chunks)
and the first token's choice; HF: one forward over the prompt. Median of --repeats after an
untimed call (compiles, allocations). Roofline (compute-bound): 2 x matmul params x T FLOPs + the
causal attention's 2 x 2 x layers x q_dim x T^2 / 2, at the dense bf16 rate --tflops (H200 spec:
989). Prints prompt tok/s, ms, % of that
roofline and the ratio to HF; appends rows to bench/RESULTS.md.

    python bench/bench_prefill.py --models 1b,8b --prompt-lens 512,2048,8192
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import HERE, append_results, bench_command, timed  # noqa: E402
from fastdecode.spec import ModelSpec  # noqa: E402
from shapes import random_model  # noqa: E402


def prefill_flops(spec: ModelSpec, T: int) -> float:
    """Matmul FLOPs of a T-token prompt (the lm_head once: only the last token's logits) and its
    causal attention (scores and values: 2 x 2 x q_dim per query-key pair, T^2 / 2 pairs)."""
    per_layer = spec.d_model * (spec.qkv_dim + spec.q_dim) + 3 * spec.d_model * spec.ffn_dim
    return (2 * T * spec.n_layers * per_layer + 2 * spec.d_model * spec.vocab_size
            + 2 * 2 * spec.n_layers * spec.q_dim * T * T / 2)


def bench_model(key, args):
    name, model = random_model(key)
    spec = ModelSpec.from_hf_config(model.config)
    lens = [int(x) for x in args.prompt_lens.split(",")]
    gen = torch.Generator("cuda").manual_seed(0)
    prompts = {T: torch.randint(0, spec.vocab_size, (1, T), device="cuda", generator=gen)
               for T in lens}
    times = {}
    for mode in [m for m in ("ops", "mega") if m in args.peers]:
        fm = fastdecode.from_hf(model, max_seq_len=max(lens) + 8, mode=mode)
        for T, ids in prompts.items():
            def run():
                fm.generate(ids, max_new_tokens=1, eos_token_id=[])
            run()
            times[(f"fastdecode {mode}", T)] = timed(run, args.repeats)
        fm = None
        torch.cuda.empty_cache()
    if "hf" in args.peers:
        for T, ids in prompts.items():
            def run():
                with torch.no_grad():
                    model.generate(ids, max_new_tokens=1, do_sample=False)
            run()
            times[("HF eager", T)] = timed(run, args.repeats)
    model = None
    torch.cuda.empty_cache()
    rows = []
    for (peer, T), t in times.items():
        hf = times.get(("HF eager", T))
        rows.append(dict(model=name, peer=peer, T=T, ms=1e3 * t, tok_s=T / t,
                         roof_pct=100 * prefill_flops(spec, T) / t / (args.tflops * 1e12),
                         vs_hf=hf / t if hf else None))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="1b,8b")
    p.add_argument("--prompt-lens", default="512,2048,8192")
    p.add_argument("--peers", default="ops,mega,hf")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tflops", type=float, default=989.0, help="dense bf16 peak of the GPU")
    p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args()
    gpu = torch.cuda.get_device_name()
    rows = []
    for key in args.models.split(","):
        rows += bench_model(key, args)
    print(f"\n{'model':14s} {'peer':16s} {'prompt':>6s} {'ms':>8s} {'tok/s':>9s} {'%roof':>6s} "
          f"{'x HF':>6s}")
    for r in rows:
        vs = f"{r['vs_hf']:.2f}" if r["vs_hf"] else "-"
        print(f"{r['model']:14s} {r['peer']:16s} {r['T']:6d} {r['ms']:8.1f} {r['tok_s']:9.0f} "
              f"{r['roof_pct']:6.1f} {vs:>6s}", flush=True)
    append_results(args.results_md, [
        [gpu, f"{r['model']}, {r['T']}-token prompt, to first token", r["peer"],
         f"{r['tok_s']:.0f} prompt tok/s", f"{r['roof_pct']:.1f}% of {args.tflops:.0f} TFLOPS",
         f"{r['vs_hf']:.2f}x" if r["vs_hf"] else "-", f"{r['ms']:.1f} ms"] for r in rows],
        bench_command("bench_prefill.py"))


if __name__ == "__main__":
    main()
