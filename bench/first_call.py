"""Time what a user waits for in a fresh process: start -> first generated token of
fastdecode.from_pretrained(CKPT) -- imports, reading the safetensors, packing, compiling or loading
the kernels from the Triton cache, prefill, one token -- split by stage; --profile adds the top
cProfile entries. bench_decode.py --first-call runs it with a cold, then a warm Triton cache.

    python bench/first_call.py CKPT_DIR MODE [--profile]
"""
import time

t0 = time.time()
import sys  # noqa: E402

import torch  # noqa: E402

import fastdecode  # noqa: E402

t1 = time.time()


def main():
    ckpt, mode = sys.argv[1], sys.argv[2]
    prof = None
    if "--profile" in sys.argv:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t2 = time.time()
    fm = fastdecode.from_pretrained(ckpt, max_seq_len=64, mode=mode)
    torch.cuda.synchronize()
    t3 = time.time()
    fm.generate(torch.tensor([[1, 2, 3]], device="cuda"), max_new_tokens=1)
    torch.cuda.synchronize()
    t4 = time.time()
    print(f"FIRST {t4 - t0:.3f} {t4 - t1:.3f} imports {t1 - t0:.2f} s, from_pretrained "
          f"{t3 - t2:.2f} s, prefill + first token {t4 - t3:.2f} s")
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(
            "fastdecode|safetensors|cuda/__init__|triton/runtime", 30)


if __name__ == "__main__":
    main()
