"""Tile sweep of the Triton attention kernel on a long prompt's pass (runtime._prefill_long: one
split per KV head, T query tokens at positions pos..pos+T-1 over keys [0, pos+T)), against torch
SDPA (FlashAttention, lower-right causal, K/V expanded to every query head) on the same data.

Variants: "block_s/block_m/warps[/stages]" -- keys per iteration, score-tile rows (query tokens x
the padded group: block_tok = block_m // next_pow2(group)), warps and software-pipeline stages of
the key loop (Triton's default 3). The 4-token tile first is the
decode default (attention_config). FLOPs: 4 x q_dim x the (query, key) pairs the causal mask
keeps. Prints ms, TFLOPS and the max error against SDPA per variant, best first; the winner
feeds config.prefill_attention_config.

    python bench/sweep_attention.py --shapes 1b,8b --T 2048 --pos 0,6144
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention.bias import causal_lower_right

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastdecode.triton_kernels.attention import attention  # noqa: E402

# (query heads, KV heads, head_dim) of published models
SHAPES = {"1b": (32, 8, 64), "8b": (32, 8, 128), "qwen2.5-7b": (28, 4, 128),
          "qwen3-0.6b": (16, 8, 128)}
VARIANTS = ("32/64/4,64/64/4,64/64/8,64/128/8,128/128/8,32/128/4,64/128/4,128/64/4,16/64/4,"
            "32/64/8,32/32/4,16/32/4,16/128/8,32/128/8,32/64/2")  # session 25's 16 with 64/16/4


def time_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def sweep(name, T, pos, variants):
    H, KVH, hd = SHAPES[name]
    G = H // KVH
    n = pos + T
    g = torch.Generator("cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
    q, k, v = rnd(T, H, hd), rnd(KVH, n, hd), rnd(KVH, n, hd)
    pos_t = torch.tensor([pos], device="cuda", dtype=torch.int32)
    pairs = T * pos + T * (T + 1) / 2
    flops = 4 * H * hd * pairs
    qs = q.transpose(0, 1)[None]
    ks, vs = (x.repeat_interleave(G, 0)[None] for x in (k, v))
    bias = causal_lower_right(T, n)
    ref = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=bias)[0].transpose(0, 1)
    ref = ref.reshape(T, H * hd).float()
    rows = [("torch SDPA (flash)", time_ms(lambda: F.scaled_dot_product_attention(
        qs, ks, vs, attn_mask=bias)), 0.0)]
    for var in variants:
        bs, bm, nw, ns = ([int(x) for x in var.split("/")] + [3])[:4]
        bt = max(1, bm // triton.next_power_of_2(G))
        run = lambda: attention(q, k, v, pos_t, n_splits=1, block_s=bs,  # noqa: E731
                                block_tok=bt, num_warps=nw, num_stages=ns)
        try:
            err = (run().float() - ref).abs().max().item()
            rows.append((f"triton {var} (tok {bt})", time_ms(run), err))
        except Exception as e:  # out of shared memory / registers: say so, go on
            print(f"{name} {var}: {type(e).__name__}: {str(e)[:120]}")
    print(f"\n{name} (H {H}, KVH {KVH}, hd {hd}), T {T} at pos {pos}: best first")
    for label, ms, err in sorted(rows, key=lambda r: r[1]):
        print(f"  {label:28s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOPS  max err {err:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--pos", default="0,6144")
    ap.add_argument("--variants", default=VARIANTS)
    args = ap.parse_args()
    variants = ["64/16/4"] + [v for v in args.variants.split(",") if v != "64/16/4"]
    for name in args.shapes.split(","):
        for pos in (int(p) for p in args.pos.split(",")):
            sweep(name, args.T, pos, variants)


if __name__ == "__main__":
    main()
