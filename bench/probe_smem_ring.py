"""Probe (GPU only): can a shared-memory ring keep HBM streaming through a program's waits?

The megakernel loses ~2.5 us at every dependency hand-off (bench/RESULTS.md traces): a program
can hold only its next task's first weight piece in registers (32 KB; 264 programs x 32 KB =
8.4 MB GPU-wide, ~2 us of HBM time) while it waits. A ring of cp.async copies into shared memory
(Triton's Gluon: triton.experimental.gluon) holds STAGES tiles in flight without registers, across
the wait. This probe streams a [N, K] bf16 GEMV y = W x as the megakernel does -- 2 persistent
programs per SM, each running n_tasks tasks of `tiles` consecutive R-row tiles -- with a simulated
dependency wait of --waits ns (a spin on %globaltimer) at the start of every task, two ways:
    regs        plain Triton: the task's first tile requested, then the wait, then the stream with
                the next tile loading while the current one is reduced (gemv.stream_step's shape)
    ring S      Gluon: an S-stage shared-memory ring issued S-1 tiles ahead over the whole run, so
                the next task's first S-1 tiles load during the wait
W is >= 4x the 60 MB L2 (cold). Prints GB/s, % of the read roofline (bench_decode.read_bandwidth),
and how much of the waits each way hides; appends rows to bench/RESULTS.md.

    python bench/probe_smem_ring.py [--waits 0,2500] [--stages 4,6] [--ring-rows 4]
    python bench/probe_smem_ring.py --compile-only   (sm_90a compile + ptxas on a CPU machine)
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if "--compile-only" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "0"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))
from fastdecode.ptx_inline.timers import globaltimer_ns  # noqa: E402

K_DIM = 2048  # the Llama-3.2-1B gate|up rows: the phase that waits longest per layer


@triton.jit
def _spin_ns(wait_ns, dummy):
    """A simulated dependency wait: polls %globaltimer (no memory traffic) for wait_ns. dummy: an
    int32 scalar for the timer's asm (ptx_inline.timers; the asm path, so no clock pointer)."""
    if wait_ns > 0:
        end = globaltimer_ns(dummy, None, True) + wait_ns
        while globaltimer_ns(dummy, None, True) < end:
            pass


@triton.jit
def regs_kernel(w_ptr, x_ptr, out_ptr, tiles, n_tasks, wait_ns, K: tl.constexpr,
                R: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    cols = tl.arange(0, K)
    x = tl.load(x_ptr + cols).to(tl.float32)
    r = tl.arange(0, R)
    for j in range(0, n_tasks):
        t0 = (j * P + pid) * tiles
        w = tl.load(w_ptr + ((t0 * R + r)[:, None] * K + cols[None, :]).to(tl.int64),
                    eviction_policy="evict_first")
        _spin_ns(wait_ns, pid)
        for i in range(0, tiles):
            nxt = ((t0 + i + 1) * R + r)[:, None] * K + cols[None, :]
            w_n = tl.load(w_ptr + nxt.to(tl.int64), mask=(i + 1 < tiles) & (r >= 0)[:, None],
                          other=0.0, eviction_policy="evict_first")
            acc = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
            tl.store(out_ptr + (t0 + i) * R + r, acc)
            w = w_n


@gluon.jit
def _issue(ring, w_ptr, g, total, tiles, pid, P, rows, cols, K: gl.constexpr, R: gl.constexpr,
           STAGES: gl.constexpr):
    """cp.async of this program's g-th tile (task g // tiles, tile g % tiles) into ring slot
    g % STAGES; one commit group per tile, empty past the end so the group count stays exact."""
    task = g // tiles
    tile = (task * P + pid) * tiles + g % tiles
    ptrs = w_ptr + ((tile * R + rows)[:, None] * K + cols[None, :]).to(gl.int64)
    cp.async_copy_global_to_shared(ring.index(g % STAGES), ptrs,
                                   mask=(g < total) & (rows >= 0)[:, None])
    cp.commit_group()


@gluon.jit
def ring_kernel(w_ptr, x_ptr, out_ptr, tiles, n_tasks, wait_ns, K: gl.constexpr, R: gl.constexpr,
                STAGES: gl.constexpr, WARPS: gl.constexpr):
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    L: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [1, WARPS], [1, 0])
    S: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])  # 16-byte cp.async chunks
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, R, K], S)
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, K, layout=gl.SliceLayout(0, L))
    x = gl.load(x_ptr + cols).to(gl.float32)
    total = n_tasks * tiles
    for s in gl.static_range(STAGES - 1):
        _issue(ring, w_ptr, s, total, tiles, pid, P, rows, cols, K, R, STAGES)
    for g in range(0, total):
        if g % tiles == 0:  # a task's start: its first STAGES - 1 tiles are already loading
            _spin_ns(wait_ns, pid)
        _issue(ring, w_ptr, g + STAGES - 1, total, tiles, pid, P, rows, cols, K, R, STAGES)
        cp.wait_group(STAGES - 1)  # tile g has landed (one group per tile, in order)
        gl.thread_barrier()
        w = ring.index(g % STAGES).load(L)
        acc = gl.sum(w.to(gl.float32) * x[None, :], axis=1)
        tile = ((g // tiles) * P + pid) * tiles + g % tiles
        gl.store(out_ptr + tile * R + rows, acc)
        gl.thread_barrier()  # every warp has read slot g % STAGES before it is refilled


SMEM_PER_SM = 227 * 1024  # H100 / H200: two ring programs per SM must fit


def run(kind, w, x, out, programs, tiles, n_tasks, wait_ns, R, stages, warps=4):
    """kind "regs": tiles of R rows; "ring": the same rows as R / ring_rows tiles of ring_rows."""
    if kind == "regs":
        regs_kernel[(programs,)](w, x, out, tiles, n_tasks, wait_ns, K=K_DIM, R=R,
                                 num_warps=warps)
    else:
        rr, st = stages
        ring_kernel[(programs,)](w, x, out, tiles * (R // rr), n_tasks, wait_ns, K=K_DIM, R=rr,
                                 STAGES=st, WARPS=warps, num_warps=warps)


def compile_only(R, ring_rows, stages):
    """Both kernels for sm_90a on a machine without a GPU, through ptxas (registers, spills,
    shared memory)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from compile_check import ptxas_report
    div = {(i,): [["tt.divisibility", 16]] for i in range(3)}
    sig = {"w_ptr": "*bf16", "x_ptr": "*bf16", "out_ptr": "*fp32", "tiles": "i32",
           "n_tasks": "i32", "wait_ns": "i64"}
    target = GPUTarget("cuda", 90, 32)
    k = triton.compile(triton.compiler.ASTSource(
        regs_kernel, dict(sig, K="constexpr", R="constexpr"), {"K": K_DIM, "R": R}, div),
        target=target, options={"num_warps": 4})
    print(f"  regs_kernel          {ptxas_report(k.asm['ptx'])}")
    for s in stages:
        k = triton.compile(GluonASTSource(
            ring_kernel, dict(sig, K="constexpr", R="constexpr", STAGES="constexpr",
                              WARPS="constexpr"), {"K": K_DIM, "R": ring_rows, "STAGES": s,
                                                   "WARPS": 4},
            div), target=target, options={"num_warps": 4})
        n_cp = k.asm["ptx"].count("cp.async.cg") + k.asm["ptx"].count("cp.async.ca")
        print(f"  ring_kernel {s} stages {ptxas_report(k.asm['ptx'])}, {k.metadata.shared} B "
              f"shared, {n_cp} cp.async")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--waits", default="0,2500", help="simulated wait per task, ns")
    p.add_argument("--stages", default="4,6")
    p.add_argument("--rows", type=int, default=8,
                   help="rows per regs tile (8 x 2048 bf16 = 32 KB, the megakernel's piece)")
    p.add_argument("--ring-rows", type=int, default=4,
                   help="rows per ring tile (4: 16 KB; 6 stages = 96 KB, two programs per SM)")
    p.add_argument("--tasks", type=int, default=8, help="tasks per program")
    p.add_argument("--tiles", type=int, default=4, help="tiles per task")
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args()
    rr = args.ring_rows
    assert args.rows % rr == 0, "--rows must be a multiple of --ring-rows (the same tasks)"
    stages = [int(s) for s in args.stages.split(",")
              if 2 * int(s) * rr * K_DIM * 2 <= SMEM_PER_SM or print(
                  f"skipping {s} stages: two programs' rings exceed an SM's shared memory")]
    if args.compile_only:
        sys.path.insert(0, HERE)
        return compile_only(args.rows, rr, stages)
    sys.path.insert(0, HERE)
    from bench_decode import append_results, bench_command, read_bandwidth
    gpu = torch.cuda.get_device_name()
    programs = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    n = programs * args.tasks * args.tiles * args.rows
    w = torch.randn(n, K_DIM, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(K_DIM, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, device="cuda", dtype=torch.float32)
    ref = (w.float() @ x.float())
    roof = max(read_bandwidth().values())
    print(f"{gpu}: W [{n}, {K_DIM}] bf16 = {w.numel() * 2 / 1e6:.0f} MB, {programs} programs x "
          f"{args.tasks} tasks x {args.tiles} tiles of {args.rows} rows; read roofline "
          f"{roof / 1e12:.2f} TB/s", flush=True)
    rows = []
    for kind in ["regs"] + [f"ring {s}" for s in stages]:
        s = (rr, int(kind.split()[1])) if kind != "regs" else None
        for wait in (int(v) for v in args.waits.split(",")):
            out.zero_()
            run(kind.split()[0], w, x, out, programs, args.tiles, args.tasks, wait, args.rows, s)
            err = float((out - ref).norm() / ref.norm())
            assert err < 1e-3, f"{kind}: rel. error {err:.1e}"  # fp32 sums of 2048 bf16 products
            t = triton.testing.do_bench(lambda: run(kind.split()[0], w, x, out, programs,
                                                    args.tiles, args.tasks, wait, args.rows, s),
                                        warmup=10, rep=100, return_mode="median") * 1e-3
            bw = w.numel() * 2 / t
            rows.append((kind, wait, t, bw))
            print(f"  {kind:8s} wait {wait:5d} ns: {t * 1e6:7.1f} us {bw / 1e9:6.0f} GB/s "
                  f"{100 * bw / roof:5.1f}%", flush=True)
    base = {(k, wt): t for k, wt, t, _ in rows}
    print("\nwait cost per task (us; the wait itself is the second column):")
    for kind, wait, t, _ in rows:
        if wait:
            extra = (t - base[(kind, 0)]) / args.tasks * 1e6
            print(f"  {kind:8s} {wait / 1e3:5.2f} us wait -> {extra:5.2f} us lost per task")
    append_results(args.results_md, [
        [gpu, f"smem-ring probe [{n}, {K_DIM}], {args.tasks} tasks x {args.tiles} tiles / program",
         f"{kind}, wait {wait} ns", f"{bw / 1e9:.0f} GB/s",
         f"{100 * bw / roof:.1f}% of {roof / 1e12:.2f} TB/s", "-", f"{t * 1e6:.1f} us"]
        for kind, wait, t, bw in rows], bench_command("probe_smem_ring.py"))


if __name__ == "__main__":
    main()
