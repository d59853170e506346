"""Probe for issue 4's next lever: does a warp-specialized weight loader keep HBM busy across the
megakernel's dependency waits? (Triton 3.6's Gluon: TMA copies into a shared-memory ring,
completing on mbarriers, issued by a loader warp that never waits on a dependency counter.)

The chain of one decode step's GEMVs of a model shape (bench/shapes.py): per layer QKV, O,
gate|up, down, then the lm_head -- every op's weights streamed once, y = W x in fp32, each op
reading the previous op's output (its first K elements) after a grid-wide wait: every program
adds 1 to the op's counter (release) when its rows are stored, and waits for all programs' adds
on the op before (acquire) -- the megakernel's dependency pattern without its norms or token
choice, its attention stood in for by a wait of --attn-us that 8 programs (the KV groups'
attention runners) hold between QKV and O while the others go on to O's wait. Weights stream
as [RB rows x CB*256] pieces (RB x CB x 256 TMA boxes of a [rows, K/256, 256] view; RB=8, CB=8:
32 KB, the megakernel's 16384-element pieces); program p of P takes op rows [p*nrb/P,
(p+1)*nrb/P) of 8-row blocks. The loader runs at most `slots` pieces ahead of the compute warps
-- across op boundaries and their waits -- so `slots` 1 is close to the megakernel's register
stream (one piece requested before each wait), 2-6 the run-ahead ring; `slots` 0 runs the
register stream itself, in plain Triton (rs_chain_kernel: each piece loaded one ahead of its
reduction, an op's first piece before its wait), as the baseline.

Prints the step time, GB/s and % of the read roofline (bytes / 4.46 TB/s, KNOWLEDGE.md's large
plain-Triton GEMV rate) per variant, and the same chain without waits (the streams alone). Checks
the last op's output against torch (fp32 math on the same bf16 weights: sums of <= 14336
products of O(1) terms in another order, rel err < 1e-4). The launch is cooperative (refused if
the programs cannot all be resident), and a wait that does not complete within 2 M polls (~1 s)
sets an error word and the kernel runs on without waits (the probe raises): never a hang.
Measured (RESULTS.md, session 22): with the waits the best ring draws level with the megakernel
(not better), and alone it streams the large GEMVs below the product's plain-Triton tiles -- so
no Gluon megakernel was built on it.
tests/test_probe.py checks the op table on the CPU and compiles the kernel for sm_90a.

    python bench/probe_ws_stream.py --model 1b [--configs slots/per_sm/warps,...] [--steps 20]
    python bench/probe_ws_stream.py --gemv 2048x16384,14336x4096   # single GEMVs [K, N], cold L2
                                                    # (graph-timed as bench/bench_ops.py)
    python bench/probe_ws_stream.py --compile-only      # sm_90a compile on a machine without GPU
"""
import argparse
import os
import sys

if "--compile-only" in sys.argv:  # compile, do not interpret (fastdecode sets it without a GPU)
    os.environ["TRITON_INTERPRET"] = "0"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shapes import SHAPES  # noqa: E402
from fastdecode.ptx_inline.timers import globaltimer_ns  # noqa: E402

OPW = gl.constexpr(8)  # words per op in the op table: row0, row blocks, chunk blocks, which
#                       descriptor, y offset, x offset, rows, hold ns (an "attn" op)
CHUNK = gl.constexpr(256)  # elements per TMA box row (the box's inner dimension limit)
HOLDERS = gl.constexpr(8)  # programs that hold an "attn" op: the 8 KV groups' attention runners
READ_TBS = 4.46  # TB/s: KNOWLEDGE.md's large plain-Triton GEMV read rate on an H200


@triton.jit
def _wait_op(cnt_ptr, o, target, err_ptr, max_polls, dead):
    """Both kernels' wait before op o: one acquire poll per iteration on the op before's
    counter until every program's add is there or max_polls polls went by (then err_ptr[0]
    names the op and the program waits no more). Returns the new `dead`. Scalar code only, so
    the Gluon kernel calls it too."""
    if (o > 0) & (dead == 0):
        polls = 0
        seen = tl.atomic_add(cnt_ptr + o - 1, 0, sem="acquire", scope="gpu")
        while (seen < target) & (polls < max_polls):
            seen = tl.atomic_add(cnt_ptr + o - 1, 0, sem="acquire", scope="gpu")
            polls += 1
        if seen < target:
            tl.atomic_max(err_ptr, o)  # never completed: the host raises
            dead = 1
    return dead


@triton.jit
def _hold(hold, pid, o, clock_ptr, USE_ASM: tl.constexpr):
    """The attention's stand-in, after op o's rows: HOLDERS programs spin `hold` ns
    (interpreter: ticks of a logical clock at clock_ptr)."""
    if (hold > 0) & (pid < HOLDERS):
        t0 = globaltimer_ns(o, clock_ptr, USE_ASM)
        while globaltimer_ns(o, clock_ptr, USE_ASM) - t0 < hold:
            pass


@gluon.jit
def _loader(desc_a, desc_b, ring, full, empty, ops_ptr, n_ops, P,
            RB: gl.constexpr, CB: gl.constexpr, SLOTS: gl.constexpr):
    """One warp: every piece of this program's rows of every op, in order, into the ring --
    waiting only for a free slot, never on a dependency counter."""
    pid = gl.program_id(0)
    i = 0
    for o in range(n_ops):
        row0 = gl.load(ops_ptr + o * OPW)
        nrb = gl.load(ops_ptr + o * OPW + 1)
        ncb = gl.load(ops_ptr + o * OPW + 2)
        which = gl.load(ops_ptr + o * OPW + 3)
        for rb in range(nrb * pid // P, nrb * (pid + 1) // P):
            for cb in range(ncb):
                slot = i % SLOTS
                mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
                mbarrier.expect(full.index(slot), RB * CB * CHUNK * 2)
                if which == 0:
                    tma.async_copy_global_to_shared(desc_a, [row0 + rb * RB, cb * CB, 0],
                                                    full.index(slot), ring.index(slot))
                else:
                    tma.async_copy_global_to_shared(desc_b, [row0 + rb * RB, cb * CB, 0],
                                                    full.index(slot), ring.index(slot))
                i += 1


@gluon.jit
def _compute(ring, full, empty, ops_ptr, n_ops, P, y_ptr, cnt_ptr, target, err_ptr, max_polls,
             RB: gl.constexpr, CB: gl.constexpr, SLOTS: gl.constexpr, WAIT: gl.constexpr,
             L3: gl.constexpr):
    """The default partition: per op, wait for every program's rows of the op before (one
    acquire poll per iteration, bounded), then y rows = pieces x the op's input, stored, then
    this program's release add on the op's counter."""
    pid = gl.program_id(0)
    LX: gl.constexpr = gl.SliceLayout(0, L3)
    LY: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    xc = gl.arange(0, CB, layout=gl.SliceLayout(1, LX))
    xj = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, LX))
    x_offs = xc[:, None] * CHUNK + xj[None, :]
    rows = gl.arange(0, RB, layout=LY)
    i = 0
    dead = 0  # a wait timed out: the rest run without waits (the pieces still drain the ring)
    for o in range(n_ops):
        nrb = gl.load(ops_ptr + o * OPW + 1)
        ncb = gl.load(ops_ptr + o * OPW + 2)
        y_off = gl.load(ops_ptr + o * OPW + 4)
        x_off = gl.load(ops_ptr + o * OPW + 5)
        if WAIT:
            dead = _wait_op(cnt_ptr, o, target, err_ptr, max_polls, dead)
        for rb in range(nrb * pid // P, nrb * (pid + 1) // P):
            acc = gl.zeros([RB], gl.float32, LY)
            for cb in range(ncb):
                slot = i % SLOTS
                mbarrier.wait(full.index(slot), (i // SLOTS) & 1)
                w = ring.index(slot).load(L3).to(gl.float32)
                fence_async_shared()
                mbarrier.arrive(empty.index(slot), count=1)
                x = gl.load(y_ptr + x_off + cb * CB * CHUNK + x_offs)
                acc += gl.sum(gl.sum(w * x[None, :, :], axis=2), axis=1)
                i += 1
            gl.store(y_ptr + y_off + rb * RB + rows, acc)
        _hold(gl.load(ops_ptr + o * OPW + 7), pid, o, err_ptr + 1, True)
        gl.thread_barrier()  # every warp's rows stored before the release add
        gl.atomic_add(cnt_ptr + o, 1, sem="release", scope="gpu")


@gluon.jit
def ws_chain_kernel(desc_a, desc_b, ops_ptr, n_ops, P, y_ptr, cnt_ptr, target, err_ptr, max_polls,
                    RB: gl.constexpr, CB: gl.constexpr, SLOTS: gl.constexpr, WAIT: gl.constexpr,
                    num_warps: gl.constexpr):
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 1, 32], [1, num_warps, 1], [2, 1, 0])
    ring = gl.allocate_shared_memory(gl.bfloat16, [SLOTS, RB, CB, CHUNK], desc_a.layout)
    full = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(SLOTS):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_compute, (ring, full, empty, ops_ptr, n_ops, P, y_ptr, cnt_ptr, target, err_ptr,
                    max_polls, RB, CB, SLOTS, WAIT, L3)),
        (_loader, (desc_a, desc_b, ring, full, empty, ops_ptr, n_ops, P, RB, CB, SLOTS)),
    ], [1], [40])


@triton.jit
def rs_chain_kernel(w_a, w_b, ops_ptr, n_ops, P, y_ptr, cnt_ptr, target, err_ptr, max_polls,
                    RB: tl.constexpr, CB: tl.constexpr, WAIT: tl.constexpr,
                    USE_ASM: tl.constexpr):
    """The baseline in plain Triton, the megakernel's register stream: each piece loaded into
    registers one piece ahead of its reduction, an op's first piece before its wait."""
    pid = tl.program_id(0)
    BK: tl.constexpr = CB * 256
    r = tl.arange(0, RB)[:, None]
    c = tl.arange(0, BK)[None, :]
    dead = 0
    for o in range(n_ops):
        row0 = tl.load(ops_ptr + o * OPW)
        nrb = tl.load(ops_ptr + o * OPW + 1)
        ncb = tl.load(ops_ptr + o * OPW + 2)
        which = tl.load(ops_ptr + o * OPW + 3)
        y_off = tl.load(ops_ptr + o * OPW + 4)
        x_off = tl.load(ops_ptr + o * OPW + 5)
        base = w_a
        if which != 0:
            base = w_b
        K = ncb * BK
        lo = nrb * pid // P
        n_pieces = (nrb * (pid + 1) // P - lo) * ncb
        ptrs = base + (row0 + lo * RB + r).to(tl.int64) * K + c
        w = tl.load(ptrs, mask=n_pieces > 0, eviction_policy="evict_first")
        if WAIT:
            dead = _wait_op(cnt_ptr, o, target, err_ptr, max_polls, dead)
        acc = tl.zeros([RB], tl.float32)
        for q in range(n_pieces):
            rb = lo + q // ncb
            cb = q % ncb
            nq = q + 1
            nxt = base + (row0 + (lo + nq // ncb) * RB + r).to(tl.int64) * K + (nq % ncb) * BK + c
            w_next = tl.load(nxt, mask=nq < n_pieces, eviction_policy="evict_first")
            x = tl.load(y_ptr + x_off + cb * BK + c)
            acc += tl.sum(w.to(tl.float32) * x, axis=1)
            if cb == ncb - 1:
                tl.store(y_ptr + y_off + rb * RB + tl.arange(0, RB), acc)
                acc = tl.zeros([RB], tl.float32)
            w = w_next
        _hold(tl.load(ops_ptr + o * OPW + 7), pid, o, err_ptr + 1, USE_ASM)
        tl.debug_barrier()  # every warp's rows stored before the release add
        tl.atomic_add(cnt_ptr + o, 1, sem="release", scope="gpu")


def chain(cfg, n_layers=None, vocab=None):
    """The ops of one step of an HF config's shape: (name, N, K) in order; each reads the first
    K outputs of the last op before it with rows. ("attn", 0, 0): no rows -- the attention's
    place between QKV and O, held by HOLDERS programs for Chain's attn_ns."""
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd
    ops = []
    for _ in range(n_layers or cfg.num_hidden_layers):
        ops += [("qkv", qkv, d), ("attn", 0, 0), ("o", d, cfg.num_attention_heads * hd),
                ("gate_up", 2 * f, d), ("down", d, f)]
    return ops + [("lm_head", vocab or cfg.vocab_size, d)]


class Chain:
    """The weights (two [rows, K/256, 256] bf16 tensors: the ops of each K, stacked), the op
    table, the output buffer and counters of one model shape's GEMV chain."""

    def __init__(self, ops: list, RB: int = 8, CB: int = 8, device="cuda", attn_ns: int = 0):
        self.ops = ops
        real = [op for op in ops if op[1] > 0]
        ks = sorted({k for _, _, k in real})
        if len(ks) > 2 or any(k % (CB * 256) for k in ks) or any(n % RB for _, n, _ in real):
            raise ValueError(f"probe needs <= 2 distinct K, each a multiple of {CB * 256}, and "
                             f"rows a multiple of {RB}: {sorted(set(real))}")
        if any(k > n for (_, n, _), (_, _, k) in zip(real, real[1:])):
            raise ValueError("each op reads the op before's first K outputs: K <= its rows")
        self.RB, self.CB, self.ks = RB, CB, ks
        rows = {k: sum(n for _, n, kk in real if kk == k) for k in ks}
        g = torch.Generator(device=device).manual_seed(0)
        self.w = {k: (torch.randn(rows[k], k // 256, 256, device=device, generator=g)
                      / k ** 0.5).to(torch.bfloat16) for k in ks}
        x0 = max(ks)
        table, at, y_at, x_off = [], {k: 0 for k in ks}, x0, 0
        for name, n, k in self.ops:
            if n == 0:  # rows, chunk blocks 0; hold attn_ns
                table.append([0, 0, 0, 0, y_at, x_off, 0, attn_ns if name == "attn" else 0])
                continue
            table.append([at[k], n // RB, k // (CB * 256), ks.index(k), y_at, x_off, n, 0])
            x_off = y_at
            at[k] += n
            y_at += n
        self.table = torch.tensor(table, dtype=torch.int32, device=device)
        self.y = torch.zeros(y_at, device=device)
        self.y[:x0] = torch.randn(x0, device=device, generator=g)
        self.cnt = torch.zeros(len(self.ops), dtype=torch.int32, device=device)
        self.err = torch.zeros(2, dtype=torch.int32, device=device)  # error; interpreter clock
        self.bytes = sum(n * k * 2 for _, n, k in real)
        self.target = 0  # every program of every launch so far adds 1 to each op's counter
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count \
            if torch.device(device).type == "cuda" else 132
        layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=3)
        self.desc = [TensorDescriptor.from_tensor(self.w[k], [RB, CB, 256], layout) for k in ks]
        if len(self.desc) == 1:
            self.desc.append(self.desc[0])

    def reference(self) -> torch.Tensor:
        """The last op's output, fp32 math on the same weights."""
        x = self.y[:max(self.ks)].clone()
        for (name, n, k), row in zip(self.ops, self.table.tolist()):
            if n:
                x = self.w[k][row[0]:row[0] + n].reshape(n, k).float() @ x[:k]
        return x

    def emulate(self) -> torch.Tensor:
        """The last op's output computed the kernel's way, with torch: piece by piece from the
        op table (the table's offsets checked without a GPU; tests/test_probe.py)."""
        y, RB, CB = self.y.clone(), self.RB, self.CB
        for row0, nrb, ncb, which, y_off, x_off, n, _ in self.table.tolist():
            if n == 0:
                continue
            w = self.w[self.ks[which]][row0:row0 + nrb * RB].float()
            x = y[x_off:x_off + ncb * CB * 256].reshape(ncb * CB, 256)
            acc = torch.zeros(nrb, RB, device=y.device)
            for cb in range(ncb):
                piece = w[:, cb * CB:(cb + 1) * CB].reshape(nrb, RB, CB, 256)
                acc += (piece * x[cb * CB:(cb + 1) * CB]).sum((2, 3))
            y[y_off:y_off + n] = acc.reshape(n)
        return self.last(y)

    def run(self, P: int, slots: int, warps: int, wait: bool = True, max_polls: int = 1 << 21,
            coop: bool = True):
        """One step: P programs, all resident (coop: a cooperative launch, refused if they do
        not fit; a wait gives up after max_polls polls, ~1 s). slots 0: the plain-Triton
        register stream (rs_chain_kernel)."""
        self.target += P  # a sum, not P x launches: the variants differ in P
        coop = dict(launch_cooperative_grid=True) if self.y.is_cuda and coop else {}
        if slots == 0:
            rs_chain_kernel[(P,)](self.w[self.ks[0]], self.w[self.ks[-1]], self.table,
                                  len(self.ops), P, self.y, self.cnt, self.target,
                                  self.err, max_polls, RB=self.RB, CB=self.CB, WAIT=wait,
                                  USE_ASM=self.y.is_cuda, num_warps=warps, **coop)
            return
        ws_chain_kernel[(P,)](self.desc[0], self.desc[1], self.table, len(self.ops), P, self.y,
                              self.cnt, self.target, self.err, max_polls, RB=self.RB,
                              CB=self.CB, SLOTS=slots, WAIT=wait, num_warps=warps,
                              maxnreg=maxnreg(warps, P // self.sms), **coop)

    def last(self, y=None) -> torch.Tensor:
        """The last op's rows of y (default: the kernel's output buffer)."""
        t = self.table[-1].tolist()
        return (self.y if y is None else y)[t[4]:t[4] + t[6]]


def maxnreg(warps: int, per_sm: int) -> int:
    """Registers per thread that let per_sm programs share an SM's 64 K: the compute warps and
    the loader's warp group (warps are allocated by groups of 4), a multiple of 8 within the
    hardware's 255 (8 compute warps, 1 per SM: 12 warps, 168)."""
    threads = (-(-warps // 4) * 4 + 4) * 32
    return min(248, 65536 // (per_sm * threads) // 8 * 8)


def check(ch: Chain, P: int, slots: int, warps: int, wait: bool, coop: bool = True):
    """One launch, then its error word and (with the waits) its output against torch."""
    ch.err.zero_()  # a variant's timed-out wait must not fail the variants after it
    ch.run(P, slots, warps, wait, coop=coop)
    torch.cuda.synchronize()
    if int(ch.err[0]):
        raise RuntimeError(f"a wait on op {int(ch.err[0]) - 1}'s counter timed out "
                           f"(P={P}, slots={slots})")
    if wait:
        want = ch.reference()
        err = float((ch.last() - want).norm() / want.norm())
        if not err < 1e-4:
            raise AssertionError(f"chain output rel err {err:.2e} (P={P}, slots={slots})")


def measure(ch: Chain, P: int, slots: int, warps: int, wait: bool, steps: int) -> float:
    """Median launch time over `steps` launches (us; each launch one step, its launch cost
    included), after check()."""
    check(ch, P, slots, warps, wait)
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        ch.run(P, slots, warps, wait)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    if int(ch.err[0]):
        raise RuntimeError(f"a wait timed out while timing (P={P}, slots={slots})")
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="1b")
    p.add_argument("--gemv", default=None, help="KxN,...: single GEMVs (cold L2) instead")
    p.add_argument("--configs", default="0/2/4,0/1/8,1/1/8,2/1/8,4/1/8,6/1/8,2/2/4,3/2/4",
                   help="slots/programs per SM/compute warps,... (slots 0: the plain-Triton "
                   "register stream, the megakernel's 1B form at 0/2/4)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--attn-us", type=float, default=None,
                   help="the attention's stand-in between QKV and O: 8 programs hold it this long "
                   "(default: the attention body in RESULTS.md's traces -- 2.3 us at head_dim "
                   "64, the 1B at 35 keys, session 19; 3.3 at 128, Qwen3-8B, session 17)")
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args()
    cfg = SHAPES[args.model][1]()
    if args.attn_us is None:
        args.attn_us = 2.3 if cfg.head_dim <= 64 else 3.3
    if args.compile_only:
        return compile_only(cfg, args.configs)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = [tuple(map(int, c.split("/"))) for c in args.configs.split(",")]
    if args.gemv:  # issue 4's standalone GEMV bar: >= 4.0 TB/s on the large shapes, cold L2
        for s in args.gemv.split(","):
            K, N = map(int, s.split("x"))
            report(f"GEMV [K, N] = [{s}]", N * K * 2, gemv_graph_times(K, N, configs, sms))
        return
    ch = Chain(chain(cfg), attn_ns=int(args.attn_us * 1000))
    label = f"{args.model} GEMV chain, attention held {args.attn_us} us"
    print(f"{label}: {sum(n > 0 for _, n, _ in ch.ops)} GEMVs, {ch.bytes / 1e6:.1f} MB a launch")
    rows = []
    for slots, per_sm, warps in configs:
        for wait in (True, False):
            tag = f"{slots}/{per_sm}/{warps} waits {'on ' if wait else 'off'}"
            try:
                rows.append((tag, measure(ch, sms * per_sm, slots, warps, wait, args.steps)))
            except Exception as e:  # report and go on: one variant must not end the sweep
                print(f"  {tag} failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            print(f"  {tag} {rows[-1][1]:8.1f} us", flush=True)
    report(label, ch.bytes, rows)


def report(label: str, nbytes: int, rows: list):
    """rows (tag, us), best first, with GB/s and % of the read roofline."""
    roof = nbytes / (READ_TBS * 1e12) * 1e6
    print(f"\n{label}, best first (slots/per SM/warps; {nbytes / 1e6:.1f} MB, read roofline "
          f"{roof:.1f} us at {READ_TBS} TB/s):")
    for tag, us in sorted(rows, key=lambda r: r[1]):
        print(f"  {tag:18s} {us:8.2f} us  {nbytes / us / 1e3:6.0f} GB/s  {100 * roof / us:5.1f}%")


def gemv_graph_times(K: int, N: int, configs: list, sms: int, rounds: int = 15) -> list:
    """(tag, us per GEMV) per config, timed as bench_ops.cold_l2_times times the product's
    tiles: a CUDA graph of back-to-back launches cycling over R distinct weight copies
    (timing.cold_copies, timing.laps), the graphs replayed round-robin `rounds` times
    (timing.replay_medians); each config checked
    against torch first. One op, so no wait and no cooperative launch (capturable); launch gaps
    inside the graph are counted, as in bench_ops."""
    from timing import cold_copies, laps, replay_medians
    R = cold_copies(N * K * 2)
    n = laps(R)
    chs = [Chain([("gemv", N, K)]) for _ in range(R)]
    graphs = {}
    for slots, per_sm, warps in configs:
        tag = f"{slots}/{per_sm}/{warps}"
        try:
            check(chs[0], sms * per_sm, slots, warps, True, coop=False)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(n):
                    for ch in chs:
                        ch.run(sms * per_sm, slots, warps, coop=False)
            g.replay()
            torch.cuda.synchronize()
            graphs[tag] = g
        except Exception as e:  # report and go on: one variant must not end the sweep
            print(f"  {tag} failed: {type(e).__name__}: {str(e)[:300]}")
    return [(tag, s * 1e6) for tag, s in replay_medians(graphs, R * n, rounds).items()]


def compile_only(cfg, configs: str):
    """Compile every variant for sm_90a without a GPU (compile_check's driver): catches what
    only the compiler rejects before device time is spent."""
    import compile_check as cc
    from triton.runtime import driver
    driver.set_active(cc.CompileOnlyDriver())
    ch = Chain(chain(cfg, n_layers=1, vocab=4096), device="cpu")
    for c in configs.split(","):
        slots, per_sm, warps = map(int, c.split("/"))
        P = 132 * per_sm
        for wait in (True, False):
            args = (ch.table, len(ch.ops), P, ch.y, ch.cnt, P, ch.err, 1 << 21)
            if slots == 0:
                k = rs_chain_kernel.warmup(ch.w[ch.ks[0]], ch.w[ch.ks[-1]], *args, RB=ch.RB,
                                           CB=ch.CB, WAIT=wait, USE_ASM=True, num_warps=warps,
                                           grid=(P,))
            else:
                k = ws_chain_kernel.warmup(ch.desc[0], ch.desc[1], *args, RB=ch.RB, CB=ch.CB,
                                           SLOTS=slots, WAIT=wait, num_warps=warps,
                                           maxnreg=maxnreg(warps, per_sm), grid=(P,))
            ptx = k.asm["ptx"]
            print(f"  {c} wait={int(wait)}: {cc.ptxas_report(ptx)}, smem {k.metadata.shared} B, "
                  f"{ptx.count('cp.async.bulk.tensor')} TMA copy, "
                  f"{ptx.count('setmaxnreg')} setmaxnreg", flush=True)


if __name__ == "__main__":
    main()
