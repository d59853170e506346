"""Megakernel decode rate for a grid of decode stream tiles (config.StreamConfig: elements per
weight tile, warps per program, longest K chunk, programs per SM), in one run. One program per SM needs ~32-40 KB of loads in
flight (4.8 TB/s x ~1 us / 132 SMs); the stream keeps two tiles in flight. Each variant is checked
against ops mode before it is timed: teacher-forced decode logits (rel. error; the tiles reduce in
another order than ops mode's, so greedy tokens may part at a near-tie) and the greedy tokens.

    python bench/sweep_mega.py --model 8b --elems 8192,16384 --warps 4,8 --max-k 2048,4096 --per-sm 1,2
    python bench/sweep_mega.py --model 8b --configs 8192/4/4096/2,16384/4/4096/2/1   (a list of
        elements/warps/max K/per SM[/ptx[/merge in attn[/norm in qkv[/attn keys[/stages]]]]]
        instead of the grid; a config may repeat, for the run-to-run spread)
    --ptx 0,1: the plain-Triton and the PTX weight pieces (config.StreamConfig.ptx)
    --merge-in-attn 0,1: MERGE tasks, or the last ATTN task of a group merging it
    --norm-in-qkv 0,1 (q/k norm models): QKNORM tasks, or the last QKV task of a group norming it
    --attn-keys 0,384: decode steps with up to that many keys run the short-context schedule
        (the last QKV task of a group runs its attention; config.StreamConfig.attn_in_qkv_keys;
        -1: the default, config.StreamConfig.short_context_keys)
    --prompt-len: the prompt (the context then grows by --new-tokens)
    --record: write the best config of the run into fastdecode/triton_kernels/tile_table.json
        for this GPU and model shape (config.stream_config then uses it for that shape)
    --fp8: the layer matrices as random FP8 rows (shapes.random_fp8_matrices, the same in ops
        mode's reference and every variant); not with --record (the table's tiles are bf16's)
"""
import argparse
import dataclasses
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastdecode  # noqa: E402
from bench_decode import bench_command, decode_rate  # noqa: E402
from fastdecode.triton_kernels.config import TILE_TABLE, StreamConfig  # noqa: E402
from shapes import random_fp8_matrices, random_model, stream_configs  # noqa: E402
from tile_table import record  # noqa: E402


def teacher_forced(fm, ids, n):
    """fp32 logits of n single-token decode steps after the prompt (the T=1 tiles)."""
    fm.reset()
    fm(ids)
    steps = torch.randint(0, 1000, (1, n), device=ids.device,
                          generator=torch.Generator(ids.device).manual_seed(1))
    return torch.cat([fm(steps[:, t:t + 1])[0] for t in range(n)]).float()


LABELLED = ("tile_elems", "num_warps", "max_k", "per_sm", "ptx", "merge_in_attn", "norm_in_qkv",
            "stages", "attn_in_qkv_keys", "l2_prefetch_kb")  # the tag's own labels


def named_fields(cfg):
    """cfg's other fields that differ from the defaults, as --configs names them (name=value)."""
    d = StreamConfig()
    def text(v):
        if isinstance(v, tuple):
            return ":".join(str(x) for x in v)
        return int(v) if isinstance(v, bool) else v
    return {k: text(v) for k, v in dataclasses.asdict(cfg).items()
            if k not in LABELLED and v != getattr(d, k)}


def stream_entry(cfg, d_model, model_name, rate):
    """A tile table stream entry for cfg (a StreamConfig): its fields that differ from the
    defaults, the four tile sizes always, and its stages resolved for d_model."""
    d = StreamConfig()
    keep = {k: v for k, v in dataclasses.asdict(cfg).items()
            if k in ("tile_elems", "num_warps", "per_sm", "max_k") or v != getattr(d, k)}
    keep["stages"] = list(cfg.op_stages(d_model))
    return dict(model=model_name, config=keep, tok_s=round(rate, 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--elems", default="8192,16384")
    p.add_argument("--warps", default="8")
    p.add_argument("--max-k", default="4096")
    p.add_argument("--per-sm", default="1")
    p.add_argument("--ptx", default="0")
    p.add_argument("--merge-in-attn", default="0")
    p.add_argument("--norm-in-qkv", default="0")
    p.add_argument("--attn-keys", default="-1")
    p.add_argument("--configs", default=None, help="e/w/k/p,... instead of the grid")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=160)
    p.add_argument("--record", action="store_true", help="the best config into the stream table")
    p.add_argument("--fp8", action="store_true", help="the layer matrices as random FP8 rows")
    args = p.parse_args()
    if args.fp8 and args.record:
        p.error("--record writes the bf16 stream table: not with --fp8")
    quant = random_fp8_matrices if args.fp8 else (lambda fm: fm)
    name, model = random_model(args.model)
    ids = torch.randint(0, 1000, (1, args.prompt_len), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    max_seq = args.prompt_len + args.new_tokens + 32  # decode_rate's longest run, and slack
    ref = quant(fastdecode.from_hf(model, max_seq_len=max_seq, mode="ops"))
    want = ref.generate(ids, max_new_tokens=24, eos_token_id=[])
    want_logits = teacher_forced(ref, ids, 24)
    base = decode_rate(lambda n: ref.generate(ids, max_new_tokens=n, eos_token_id=[]),
                       32, args.new_tokens, 3)
    del ref
    name += " (FP8 matrices)" if args.fp8 else ""
    print(f"{name}: ops + CUDA graph {base:.1f} tok/s", flush=True)
    rows = []
    if args.configs:
        grid = stream_configs(args.configs)
    else:
        grid = [StreamConfig(e, w, per_sm=p, max_k=k, ptx=bool(x), merge_in_attn=bool(m),
                             norm_in_qkv=bool(n), attn_in_qkv_keys=None if a < 0 else a)
                for e, w, k, p, x, m, n, a in itertools.product(*(map(int, v.split(",")) for v in (
                    args.elems, args.warps, args.max_k, args.per_sm, args.ptx, args.merge_in_attn,
                    args.norm_in_qkv, args.attn_keys)))]
    for c in grid:
        fm = quant(fastdecode.from_hf(model, max_seq_len=max_seq, mode="mega"))
        fm.runtime.mega_stream = c
        stages = "".join(map(str, c.op_stages(model.config.hidden_size)))
        tag = f"{c.tile_elems}/{c.num_warps}w/{c.max_k}/{c.per_sm}" + ("/PTX" if c.ptx else "") \
            + ("/merge-in-attn" if c.merge_in_attn else "") + \
            ("/norm-in-qkv" if c.norm_in_qkv else "") + f"/stages {stages}" + \
            f"/attn-keys {c.short_context_keys(fm.spec.head_dim)}" + \
            (f"/l2-prefetch {c.l2_prefetch_kb} KB" if c.l2_prefetch_kb else "") + \
            "".join(f"/{k}={v}" for k, v in named_fields(c).items())
        try:
            err = float((teacher_forced(fm, ids, 24) - want_logits).norm() / want_logits.norm())
            same = fm.generate(ids, max_new_tokens=24, eos_token_id=[]) == want
            agree = int(same.long().cumprod(1).sum()) - ids.shape[1]
            ok = f"logits rel err {err:.1e}, greedy tokens agree {agree}/24"
            rate = decode_rate(lambda n: fm.generate(ids, max_new_tokens=n, eos_token_id=[]),
                               32, args.new_tokens, 3)
        except Exception as e:
            print(f"  {tag} failed: {type(e).__name__}: "
                  f"{str(e)[:200]}", flush=True)
            continue
        rows.append((rate, tag, ok, c))
        print(f"  {tag:36s} {rate:8.1f} tok/s  {ok}", flush=True)
        del fm
        torch.cuda.empty_cache()
    print(f"\n{name} megakernel tiles, best first (ops + CUDA graph: {base:.1f} tok/s)")
    rows.sort(key=lambda r: -r[0])
    for rate, tag, ok, _ in rows:
        print(f"  {tag:36s} {rate:8.1f} tok/s  {rate / base:5.2f}x ops  {ok}")
    if args.record and rows:
        cfg = model.config
        record(TILE_TABLE, "stream", torch.cuda.get_device_name(),
               dict(d_model=cfg.hidden_size, ffn_dim=cfg.intermediate_size),
               stream_entry(rows[0][3], cfg.hidden_size, name, rows[0][0]),
               bench_command("sweep_mega.py"))
        print(f"recorded {rows[0][1]} for {name} in {TILE_TABLE}")


if __name__ == "__main__":
    main()
