"""Compile the megakernel (and the ops-mode kernels) for an H200 (sm_90a) on a machine without a
GPU: Triton's front end, its NVIDIA backend and the bundled ptxas all run on the CPU. Reports
registers, spill bytes and compile time per kernel -- catches compile errors and register spills
before device time is spent. Kernels are compiled, never launched (outputs are garbage).
--family compiles the tiny test models instead (tests/models.py; tests/test_compile.py runs it in
CI, where the interpreter would not notice code that only the compiler rejects): the megakernel
for a decode step (T=1) and a prefill chunk (T=3, the GPU's tiles of several rows:
config.rows_tile), and the ops-mode kernels of both; --dtype float32 / float16 the weights of
either kind of model (bfloat16 by default: fp32 decode kernels outgrow two programs an SM -- the
8B's 197 KB, Gemma-2B's 150 KB -- where the runtime falls back to one). --ptx compiles the inline-PTX wrappers' test kernels (tests/test_ptx.py)
and the all-reduce with their asm paths on, so ptxas checks every wrapper's PTX.

    python bench/compile_check.py --model 8b [--elems 8192 --warps 4 --max-k 4096] [--tp 2] [--fp8]
                                  [--stages N] [--set ptx=1 l2_prefetch_kb=64 ...]
                                  [--trace] [--dump DIR]
    python bench/compile_check.py --model 8b --rows-tile 32x256x4,64x64x4   (a step of 4
        rows' megakernel with that multi-row tile, config.MULTI_ROW_TILE: rows x K x warps;
        two programs per SM need <= 113 KB of shared memory and <= 255 registers at 4 warps)
    python bench/compile_check.py --family qwen3
    python bench/compile_check.py --ptx
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"  # compile, do not interpret (read at kernel definition)
os.environ.setdefault("FASTDECODE_PDL", "1")  # ops-mode kernels as an H200 launches them
import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

COMPILED = {}


class CompileOnlyDriver:
    """Just enough of Triton's driver for JITFunction.run(warmup=True) to compile for sm_90a."""
    def __init__(self, arch=90):
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


def _compile_only(run):
    def wrapped(self, *args, grid, warmup, **kwargs):
        kwargs.pop("launch_cooperative_grid", None)
        t0 = time.perf_counter()
        k = run(self, *args, grid=grid, warmup=True, **kwargs)
        name = self.fn.__name__
        if k is not None:
            COMPILED.setdefault(name, (k, time.perf_counter() - t0))
        return k
    return wrapped


def ptxas_report(ptx: str, arch: str = "sm_90a") -> str:
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    out = subprocess.run([get_ptxas(90).path, "-v", f"--gpu-name={arch}", f.name, "-o", os.devnull],
                         capture_output=True, text=True)
    regs = re.search(r"Used (\d+) registers", out.stderr)
    # the kernel's, then each out-of-line function's (a noinline body: its own line) -- summed
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out.stderr)
    st, ld = (sum(int(s[i]) for s in spills) for i in (0, 1))
    funcs = f" ({len(spills) - 1} out-of-line functions)" if len(spills) > 1 else ""
    return (f"{regs.group(1) if regs else '?':>4s} regs, spill st/ld "
            f"{st if spills else '?'}/{ld if spills else '?'} B{funcs}")


def compile_ptx_tests():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tests"))
    import test_ptx as t
    i32, i64 = torch.zeros(64, dtype=torch.int32), torch.zeros(8, dtype=torch.int64)
    bf16 = torch.zeros(64, dtype=torch.bfloat16)
    for scope in ("gpu", "sys"):
        t._acquire_kernel[(1,)](i32, i32, 64, SCOPE=scope, USE_ASM=True)
    t._prefetch_copy_kernel[(1,)](bf16, bf16, 64, BLOCK=512, USE_ASM=True)
    t._bulk_prefetch_copy_kernel[(1,)](bf16, bf16, 64, 3, BLOCK=512, USE_ASM=True)
    t._timer_kernel[(1,)](i64, i64, 100, USE_ASM=True)
    t._sm_id_kernel[(1,)](i32, 50, USE_ASM=True)
    t._stream_copy_kernel[(1,)](i32, i32, 4, BLOCK=64, USE_ASM=True)
    t._fp8_dot_kernel[(1,)](i32, i32, i32, torch.zeros(64), 64, BLOCK=64, USE_ASM=True)
    for scope in ("gpu", "sys"):
        t._release_kernel[(1,)](i32, i32, SCOPE=scope, USE_ASM=True)
    for cta in (False, True):
        t._message_kernel[(2,)](i32, i32, i32, 64, 100, BLOCK=256, USE_ASM=True, CTA_BARRIER=cta)
    for abort in (True, False):
        t._spin_kernel[(1,)](i32, i32, i64, i32, 20, ABORT=abort, USE_ASM=True)
        t._spin_cta_kernel[(1,)](i32, i32, i64, i32, 20, ABORT=abort, USE_ASM=True)
    t._pdl_producer_kernel[(1,)](i32, 63, 100, BLOCK=64, USE_ASM=True)
    t._pdl_consumer_kernel[(1,)](i32, i32, 63, BLOCK=64, USE_ASM=True, launch_pdl=True)
    from fastdecode.ops import PeerBuffers, all_reduce  # system-scope flags, peer pointers
    all_reduce(torch.zeros(100), PeerBuffers.virtual(2, 100)[0])
    COMPILED["all_reduce_kernel (flags)"] = COMPILED.pop("all_reduce_kernel")
    all_reduce(torch.zeros(100), PeerBuffers.virtual(2, 100, sentinel=True)[0])
    COMPILED["all_reduce_kernel (-0.0)"] = COMPILED.pop("all_reduce_kernel")
    print("PTX wrapper test kernels and the all-reduce, asm paths, sm_90a:")
    for kname, (k, secs) in COMPILED.items():
        print(f"  {kname:28s} {ptxas_report(k.asm['ptx'])}")


class CompileOnlyTP:
    """Rank 0 of `world` tensor-parallel ranks, for compiling only: its symmetric buffer stands
    in for every rank's (nothing runs)."""
    rank, peer_to_peer = 0, True

    def __init__(self, spec, world):
        self.spec, self.world = spec, world

    def symmetric(self, n_words):
        buf = torch.zeros(n_words, dtype=torch.int32)
        buf[-self.world:] = 1 << 30  # the launch barrier's words: every rank always there
        return buf, torch.tensor([buf.data_ptr()] * self.world, dtype=torch.int64), \
            [buf] * self.world

    def all_reduce(self, x):
        return x


    def gather_vocab(self, x):
        out = torch.zeros(*x.shape[:-1], self.spec.vocab_size, dtype=x.dtype)
        out[..., :x.shape[-1]] = x
        return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--family", default=None, help="a tiny test model family instead")
    p.add_argument("--dtype", default="bfloat16", help="the model's weights")
    p.add_argument("--fp8", action="store_true",
                   help="the layer matrices as FP8 rows (shapes.random_fp8_matrices)")
    p.add_argument("--elems", type=int, default=None)
    p.add_argument("--warps", type=int, default=None)
    p.add_argument("--max-k", type=int, default=None)
    p.add_argument("--programs", type=int, default=132, help="SMs (an H100 / H200: 132)")
    p.add_argument("--ptx", action="store_true", help="the PTX wrappers' test kernels instead")
    p.add_argument("--tp", type=int, default=1, help="rank 0 of a tensor-parallel megakernel")
    p.add_argument("--stages", default="0",
                   help="StreamConfig.stages: a digit, or four (QKV, o, gate|up, down); a comma "
                        "list compiles the decode megakernel once per entry and prints each")
    p.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                   help="any other StreamConfig field, integer values (ptx=1, merge_in_attn=1, "
                        "norm_in_qkv=1, l2_prefetch_kb=64, attn_block_s=32, ...)")
    p.add_argument("--rows-tile", default=None, metavar="NxKxW[/kP]",
                   help="compile a 4-row step's megakernel with this multi-row tile instead")
    p.add_argument("--trace", action="store_true",
                   help="also the traced decode megakernel (Runtime.trace_decode: timers, %%smid)")
    p.add_argument("--dump", default=None,
                   help="write each kernel's TTGIR, PTX and cubin to this folder")
    args = p.parse_args()
    driver.set_active(CompileOnlyDriver())
    JITFunction.run = _compile_only(JITFunction.run)
    if args.ptx:
        return compile_ptx_tests()
    import fastdecode
    from fastdecode.triton_kernels.launch import CachedLauncher
    # the megakernel through JITFunction.run too (compiled, not loaded: no GPU to load it on)
    CachedLauncher.kernel = lambda self, grid, args, kw: None
    from fastdecode.triton_kernels.config import StreamConfig
    from shapes import _stages, random_model, stream_fields
    if args.family:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "tests"))
        from models import tiny_model
        name = f"tiny {args.family}"
        model = tiny_model(args.family, dtype=getattr(torch, args.dtype))
        name += f" ({args.dtype})"
    else:
        name, model = random_model(args.model, device="cpu", n_layers=2)
        model = model.to(getattr(torch, args.dtype))
        name += f" (2 layers; sizes as the real model; {args.dtype})"
    d = StreamConfig()
    streams = [StreamConfig(args.elems or d.tile_elems, args.warps or d.num_warps,
                            max_k=args.max_k or d.max_k, stages=_stages(int(v)),
                            **stream_fields(args.set))
               for v in args.stages.split(",")]
    ids = torch.randint(0, 100, (4,))
    # tiny models: room for several attention splits, so ops mode launches its merge kernel too
    # (one split is written by attention_kernel directly); the real shapes keep 64, as their
    # register reports in bench/RESULTS.md and config.py did
    seq = 256 if args.family else 64
    if len(streams) > 1:  # the decode megakernel per stages entry (pipelined loads per op)
        print(f"{name}, sm_90a, decode megakernel by stages (QKV, o_proj, gate|up, down):")
        for v, stream in zip(args.stages.split(","), streams):
            COMPILED.clear()
            fm = fastdecode.from_hf(model, max_seq_len=seq, mode="mega")
            fm.runtime.n_programs = args.programs * stream.per_sm  # the GPU's schedule
            fm.runtime.mega_stream = stream
            fm.runtime.forward(ids[:1].clone())
            print(f"  stages {v:6s} {kernel_report(*COMPILED['megakernel'])}")
        return
    if args.rows_tile:
        return compile_rows(model, name, args.rows_tile, args.programs * 2, args.dump)
    gpu_rows_tiles()
    stream = streams[0]
    from fastdecode.runtime import lacks_tasks
    from fastdecode.spec import ModelSpec
    # a model the megakernel has no tasks for (Qwen3.5's Gated DeltaNet): its ops kernels -- at
    # the tiles config.gemv_config picks on a CPU device (1024 x 1024: the interpreter's), not
    # the GPU's, so the GEMV's registers and spills say nothing of the GPU's; of --model
    # qwen3.5-9b ~27 min of compiling on 2 cores (the gated_delta kernel's report holds)
    modes = ("ops",) if lacks_tasks(ModelSpec.from_hf_config(model.config)) else \
        ("mega",) + (("ops",) if args.family else ())
    for mode in modes:
        if args.tp > 1:
            from fastdecode.module import FastModel
            from fastdecode.packing import pack
            spec = ModelSpec.from_hf_config(model.config)
            sd = model.state_dict()
            pw = pack(spec, lambda n, ix=None: sd.get(n) if ix is None or n not in sd
                      else sd[n][ix], device="cpu", dtype=torch.bfloat16, world=args.tp)
            fm = FastModel(pw, model.config, max_seq_len=seq, mode=mode,
                           collectives=CompileOnlyTP(spec, args.tp))
            name += f", rank 0 of tp={args.tp}"
        else:
            fm = fastdecode.from_hf(model, max_seq_len=seq, mode=mode)
        if args.fp8:
            from shapes import random_fp8_matrices
            fm = random_fp8_matrices(fm)
            name += ", FP8 matrices"
        # SMs x programs per SM, as the GPU's schedule (graph.few_tiles_rows reads it)
        fm.runtime.n_programs = args.programs * stream.per_sm
        fm.runtime.mega_stream = stream
        fm.runtime.forward(ids[:1].clone())  # T=1: the decode megakernel / ops decode tiles
        if args.family:
            if mode == "mega":  # the step of several rows compiles its own megakernel
                COMPILED["megakernel (decode)"] = COMPILED.pop("megakernel")
        if args.family or mode == "ops":
            fm.runtime.forward(ids[1:].clone())  # T=3: prefill tiles
            if mode == "mega" and "megakernel" in COMPILED:  # (a mixture's: ops kernels)
                COMPILED["megakernel (3 rows)"] = COMPILED.pop("megakernel")
            if mode == "ops":  # a long prompt's pass (runtime._prefill_long): cuBLAS matmuls
                fm.runtime.prefill_min = 2  # and the attention kernel's direct T > 1 form
                fm.runtime.forward(ids[1:3].clone())
        if args.trace and mode == "mega":
            COMPILED["megakernel (decode)"] = COMPILED.pop("megakernel")
            fm.runtime.trace_decode(1)
            COMPILED["megakernel (trace)"] = COMPILED.pop("megakernel")
    print(f"{name}, sm_90a:")
    for kname, (k, secs) in COMPILED.items():
        print(f"  {kname:24s} {kernel_report(k, secs)}")
        dump(k, kname, args.dump)


def dump(k, kname, folder):
    """Kernel k's TTGIR, PTX and cubin into folder (None: nothing)."""
    if folder:
        os.makedirs(folder, exist_ok=True)
        for ext in ("ttgir", "ptx"):
            with open(os.path.join(folder, f"{kname}.{ext}"), "w") as f:
                f.write(k.asm[ext])
        with open(os.path.join(folder, f"{kname}.cubin"), "wb") as f:
            f.write(k.asm["cubin"])  # SASS: triton/backends/nvidia/bin/nvdisasm -c


def gpu_rows_tiles(tile=None):
    """Every T > 1 GEMV and QKV tile as a GPU takes it -- config.rows_tile of the weights'
    width, or `tile` -- where this machine's device ("cpu") would give the interpreter's
    whole-row tiles (config.gemv_config)."""
    from fastdecode import graph
    from fastdecode.triton_kernels import config, gemv, lm_head, qkv_rope
    real = config.gemv_config

    def gpu_config(N, K, T, device, rows=None, elem_bytes=2):
        return (tile or config.rows_tile(elem_bytes)) if T > 1 else real(N, K, T, device, rows)
    graph.gemv_config = gemv.gemv_config = qkv_rope.gemv_config = lm_head.gemv_config = gpu_config


def compile_rows(model, name, tiles, programs, folder=None):
    """The megakernel of a step of 4 rows per multi-row tile (comma-separated NxKxW): the
    tile the GPU's config.gemv_config gives every T > 1 GEMV (here the CPU's would be taken)."""
    import fastdecode
    from shapes import set_rows_tile
    print(f"{name}, sm_90a, a step of 4 rows by multi-row tile (rows x K x warps[/K parts]):")
    for spec in tiles.split(","):
        gpu_rows_tiles(set_rows_tile(spec))
        COMPILED.clear()
        fm = fastdecode.from_hf(model, max_seq_len=64, mode="mega")
        fm.runtime.n_programs = programs
        fm.runtime.forward(torch.randint(0, 100, (4,)))
        print(f"  {spec:12s} {kernel_report(*COMPILED['megakernel'])}")
        dump(COMPILED["megakernel"][0], f"megakernel (4 rows, {spec})", folder)


def code_bytes(cubin: bytes) -> int:
    """Machine code in a cubin: the sizes of its .text.* sections (ELF64 section headers).
    The megakernel's whole step is one loop body, so this bounds what each step fetches through
    the SM's instruction caches (bench/RESULTS.md session 29)."""
    import struct
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sec = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = sec[shstrndx][4]
    def name(off):
        return cubin[names_at + off:cubin.index(b"\0", names_at + off)].decode()
    return sum(s[5] for s in sec if name(s[0]).startswith(".text."))


def kernel_report(k, secs):
    """registers / spills, shared memory, the loads Triton's pipeliner made cp.async copies to
    shared memory (StreamConfig.stages), the layout conversions in its TTGIR (each may go through
    shared memory and a barrier), machine code, compile time; ', PDL' if launched with
    launch_pdl."""
    piped = k.asm["ttgir"].count("ttg.async_copy_global_to_local")
    conv = k.asm["ttgir"].count("ttg.convert_layout")
    return (f"{ptxas_report(k.asm['ptx'])}, smem {k.metadata.shared} B, {piped} pipelined loads, "
            f"{conv} layout conversions, code {code_bytes(k.asm['cubin']) / 1024:.1f} KB"
            f"  compiled in {secs:5.1f} s" + (", PDL" if k.metadata.launch_pdl else ""))


if __name__ == "__main__":
    main()
