"""Probe for issue 4's next lever: what one grid-wide hand-off of an activation vector costs in the
megakernel's counter protocol, against readiness carried in the data itself.

Every phase each of P programs (all resident: a cooperative launch) writes its share of an
N-element fp32 vector and then reads the whole vector back -- a decode step's hop between two
ops (o_proj's rows -> every gate|up task's normed input, ...) with no work around it. x[i] =
(i + phase) % 64, and each program adds up what it read (exactly: small integers), so a stale
element (the phase two back, the same buffer) shows in the host's check.
    counter (the megakernel's): store the share; block barrier; one release add on a counter;
        the one poller's wait (ptx_inline.spin_acquire_cta: thread 0's acquire load per poll,
        bar.red.popc hands the verdict to all) until the counter holds every program's adds;
        then load the vector.
    tagged: store the share as 8-byte words, the phase's tag in the high half and the value's
        fp32 bits in the low half -- one store each, single-copy atomic, no barrier, no fence,
        no counter; every program polls the words (volatile loads, each poll only the words
        not yet seen with the phase's tag) until all carry it (a block-wide minimum of the
        verdicts), and has read the vector with that.
Buffers alternate by phase parity: a program writes phase p + 2's share only after it has read
all of p + 1, which every program wrote only after reading p. --work E: each program also streams
E bf16 weights a phase from a 2 GB buffer (HBM, not L2), requested before its wait and summed
after it, as a megakernel task's first piece -- whether the tagged polls slow the streams.
    counter xC (--copies): the counter protocol with the vector stored C times, program p reading
        copy p % C -- fewer programs reading each L2 line at once.
    K counters (--counters): the counter in K copies on their own L2 lines, every program adding
        to each (K lanes of one release add), program p polling copy p % K -- fewer pollers on
        each counter's line.
Prints us per phase per variant, and per --work the time with the waits off (the streams alone),
so hop = with - without. Every wait is bounded (max_spin polls, then an error word; the host
raises): never a hang.
Measured (H200, 2026-12-04, us per phase, counter / tagged; bench/RESULTS.md session 45): 264
programs (the megakernel's two an SM) N 128 1.47 / 1.91, 512 1.56 / 2.49, 1024 1.74 / 2.47, 2048
2.09 / 2.54, 4096 2.98 / 4.16; 132 programs level (N 2048 1.70 / 1.67); with 32 KB of weights a
phase (streams alone 3.51 us) N 2048 4.00 / 5.22 -- the tagged words never win: every program
re-reading the vector costs more than the fence, the counter and the vector's round trip they
spare, and slows the streams. The vector stored 2 / 4 / 8 times, each program reading one copy
(counter xC; is it the hot L2 lines every program reads at once?): N 128 1.48 / 1.47 / 1.54
against 1.47, 2048 2.31 / 2.34 / 2.63 against 1.95, 4096 2.36 / 2.87 / 3.90 against 2.95; with
the 32 KB streams 3.96 / 3.96 / 4.16 against 3.93 (N 2048) -- no. The counter in 2 / 4 / 8
copies (is it the 264 pollers on one counter's line?): 264 programs N 128 1.73 / 1.61 / 1.99
against 1.49, N 2048 2.20 / 2.04 / 2.33 against 2.01, with the streams 4.09 / 3.98 / 4.01
against 3.98 -- no: the hand-off's ~1.5 us at 264 programs is its chain of barrier, fence,
release add, poll and load, not a queue at one L2 line. --reduce (us per round,
264 / 132 programs): N 2048 red.u64 3.43 / 1.53, red.f32 3.39 / 1.70, stores 0.78 / 0.46; N 4096
3.48 / 1.83, 3.49 / 1.87, 1.28 / 0.73; N 8192 5.31 / 2.72, 5.07 / 2.87, 2.33 / 1.17 -- the 1B's
fused layer would spend ~3.4 us of L2 atomics a layer at its 264 programs, more than the
hand-off (~2 us of wait) it spares.

    python bench/probe_hop.py [--n 2048,4096] [--programs-per-sm 2,1] [--work 0,16384]
        [--phases 2000]
    python bench/probe_hop.py --reduce [--n 2048,4096]
--reduce: the other way to spare a hand-off -- gate|up and down fused, each program adding its
down partial sums straight into the output (fewer hand-offs a layer, RESULTS.md session 43):
us per round of every program adding an N-element vector into one accumulator, by flavour --
red.global.add.u64 of int64 fixed point (order-independent, so runs stay bit-identical),
red.global.add.f32 (not), and plain stores of each program's partials (the cost of writing them
for a separate reduction).
(N up to 4096: the tagged poll keeps N / 128 words a thread in registers -- 8192 spills at 4
warps, compile_check; a megakernel would hand the 1B's 8192-element gate|up output on in
chunks.)
tests/test_probe.py runs both protocols (and the copies) in the interpreter, one program,
against the host's sums, and --reduce's three flavours with three programs.
"""
import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastdecode.ptx_inline.flags import spin_acquire_cta  # noqa: E402

REDUCE = ("red.u64 fixed point", "red.f32", "store partials")
SCALE = 2.0 ** 24  # --reduce's int64 fixed point: 2^-24 steps
FIXED = tl.constexpr(SCALE)
MAX_COPIES = 8  # the counter protocol's vector stored up to this many times (--copies)
W_BYTES = 2 << 30  # the weight buffer a --work phase streams from: past the 50 MB L2


@triton.jit
def hop_kernel(buf_ptr, word_ptr, cnt_ptr, sum_ptr, err_ptr, w_ptr, P, N, n_phases, w_rows,
               max_spin, TAGGED: tl.constexpr, WAIT: tl.constexpr, BLOCK: tl.constexpr,
               WORK: tl.constexpr, USE_ASM: tl.constexpr, COPIES: tl.constexpr = 1,
               COUNTERS: tl.constexpr = 1):
    """n_phases hand-offs of an N-element vector among P programs (module docstring). buf_ptr:
    fp32 [2, COPIES, BLOCK] (counter: each share stored to every copy, program p reading copy
    p % COPIES), word_ptr: int64 [2, BLOCK] (tagged), both zero at launch;
    cnt_ptr: the counter (0 at launch; COUNTERS > 1: that many copies, 32 words apart -- each
    on its own L2 line -- every program adding 1 to each, one lane a copy, and program p polling
    copy p % COUNTERS); sum_ptr[p]: what program p read, summed over phases
    (int64);
    err_ptr: > 0 if a wait timed out; w_ptr: bf16 [w_rows, WORK] (WORK > 0). WAIT False: no
    hand-off at all -- each program writes and reads only its own share (the streams alone)."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    mine = (offs >= N * pid // P) & (offs < N * (pid + 1) // P)
    if not WAIT:
        m = mine
    total = tl.zeros([BLOCK], dtype=tl.float32)  # <= 63 x phases a lane: exact in fp32
    acc = 0.0
    for ph in range(n_phases):
        par = (ph % 2) * BLOCK
        if WORK > 0:  # this phase's weights: requested before the wait, summed after
            row = ((ph * P + pid) % w_rows).to(tl.int64)
            w = tl.load(w_ptr + row * WORK + tl.arange(0, WORK), eviction_policy="evict_first")
        val = ((offs + ph) % 64).to(tl.float32)
        if TAGGED:
            tag = ph + 1
            bits = val.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
            tl.store(word_ptr + par + offs, (tag.to(tl.int64) << 32) | bits, mask=mine)
            x = tl.zeros([BLOCK], dtype=tl.float32)
            got = (m == 0).to(tl.int32)  # lanes past N count as seen
            done = 0
            n = 0
            while (done == 0) & (n <= max_spin):
                wd = tl.load(word_ptr + par + offs, mask=m & (got == 0), other=0, volatile=True)
                good = (wd >> 32) == tag
                x = tl.where(good, (wd & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), x)
                got = got | good.to(tl.int32)
                done = tl.min(got, axis=0)
                n += 1
            if done == 0:
                tl.atomic_max(err_ptr, ph + 1)
        else:
            for r in tl.static_range(COPIES):
                tl.store(buf_ptr + ((ph % 2) * COPIES + r) * BLOCK + offs, val, mask=mine)
            if WAIT:
                tl.debug_barrier()  # every thread's share stored before the release add
                if COUNTERS == 1:
                    tl.atomic_add(cnt_ptr, 1, sem="release", scope="gpu")
                else:
                    tl.atomic_add(cnt_ptr + tl.arange(0, COUNTERS) * 32, 1, sem="release",
                                  scope="gpu")
                mine_ctr = cnt_ptr + (pid % COUNTERS) * 32
                met, _ = spin_acquire_cta(mine_ctr, (ph + 1) * P, max_spin, err_ptr + 1, "gpu",
                                          USE_ASM, True, 16)
                if met == 0:
                    tl.atomic_max(err_ptr, ph + 1)
            x = tl.load(buf_ptr + ((ph % 2) * COPIES + pid % COPIES) * BLOCK + offs, mask=m,
                        other=0.0)
        total += x
        if WORK > 0:
            acc += tl.sum(w.to(tl.float32), axis=0)
    tl.store(sum_ptr + pid, tl.sum(total.to(tl.int64), axis=0))
    tl.store(sum_ptr + P + pid, acc.to(tl.int64))  # the streams' sums: kept, not checked


@triton.jit
def reduce_kernel(acc_ptr, part_ptr, rounds, N, MODE: tl.constexpr, BLOCK: tl.constexpr,
                  USE_ASM: tl.constexpr):
    """--reduce: `rounds` times, every program adds x[i] = (i + pid + round) % 64 / 8 for i < N
    into acc_ptr (int64 [2, BLOCK], round parity alternating; MODE 0: int64 fixed point by
    red.global.add.u64, 1: fp32 by red.global.add.f32 into acc_ptr's words as fp32) or (MODE
    2) stores it to its own row of part_ptr (fp32 [P, BLOCK]). Interpreter: tl.atomic_add."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    for r in range(rounds):
        x = ((offs + pid + r) % 64).to(tl.float32) / 8.0
        at = acc_ptr + (r % 2) * BLOCK + offs
        if MODE == 0:
            v = (x * FIXED).to(tl.int64)
            if USE_ASM:
                tl.inline_asm_elementwise("@$3 red.global.add.u64 [$1], $2; mov.u32 $0, 0;",
                                          "=r,l,l,b", [at, v, m], dtype=tl.int32,
                                          is_pure=False, pack=1)
            else:
                tl.atomic_add(at, v, mask=m, sem="relaxed")
        elif MODE == 1:
            at32 = at.to(tl.pointer_type(tl.float32), bitcast=True)
            if USE_ASM:  # pointer and float operands do not mix in inline asm: the bits
                tl.inline_asm_elementwise(
                    "{ .reg .f32 f; mov.b32 f, $2; @$3 red.global.add.f32 [$1], f; }"
                    " mov.u32 $0, 0;", "=r,l,r,b", [at32, x.to(tl.int32, bitcast=True), m],
                    dtype=tl.int32, is_pure=False, pack=1)
            else:
                tl.atomic_add(at32, x, mask=m, sem="relaxed")
        else:
            tl.store(part_ptr + pid * BLOCK + offs, x, mask=m)


class Reduce:
    """--reduce's buffers for P programs adding N values a round."""

    def __init__(self, P: int, N: int, device="cuda"):
        self.P, self.N, self.BLOCK = P, N, triton.next_power_of_2(N)
        self.acc = torch.zeros(2, self.BLOCK, dtype=torch.int64, device=device)
        self.part = torch.zeros(P, self.BLOCK, device=device)
        self.asm = torch.device(device).type == "cuda"

    def run(self, mode: int, rounds: int):
        self.acc.zero_()
        reduce_kernel[(self.P,)](self.acc, self.part, rounds, self.N, MODE=mode,
                                 BLOCK=self.BLOCK, USE_ASM=self.asm, num_warps=4)

    def check(self, mode: int, rounds: int):
        """A launch's sums against the host's (exact: multiples of 1/8 far inside fp32 and
        the fixed point); mode 2: the last round's partials."""
        self.run(mode, rounds)
        i, p = torch.arange(self.BLOCK)[:, None], torch.arange(self.P)[None, :]
        x = lambda r: ((i + p + r) % 64).double() / 8 * (i < self.N)  # noqa: E731
        if mode == 2:
            got, want = self.part.double().cpu(), x(rounds - 1).T
        else:
            got = self.acc.double() / SCALE if mode == 0 else \
                self.acc.view(torch.float32)[:, ::2].double()
            got, want = got.cpu(), torch.zeros(2, self.BLOCK, dtype=torch.float64)
            for r in range(rounds):
                want[r % 2] += x(r).sum(1)
        if not torch.equal(got, want):
            raise AssertionError(f"{REDUCE[mode]}: off by {float((got - want).abs().max())}")


class Hop:
    """Buffers of one (N, work) probe on a device; run() launches one variant."""

    def __init__(self, N: int, work: int = 0, device="cuda"):
        self.N, self.work, self.device = N, work, torch.device(device)
        self.BLOCK = triton.next_power_of_2(N)
        self.buf = torch.zeros(2, MAX_COPIES, self.BLOCK, device=device)
        self.words = torch.zeros(2, self.BLOCK, dtype=torch.int64, device=device)
        self.cnt = torch.zeros(32 * MAX_COPIES, dtype=torch.int32, device=device)
        self.err = torch.zeros(2, dtype=torch.int32, device=device)  # timed out; abort word
        rows = W_BYTES // (2 * work) if work and self.device.type == "cuda" else 1
        self.w = torch.ones(rows, max(work, 1), dtype=torch.bfloat16, device=device)

    def run(self, P: int, tagged: bool, phases: int, wait: bool = True,
            max_spin: int = 1 << 20, copies: int = 1, counters: int = 1) -> torch.Tensor:
        """One launch of `phases` hand-offs -> each program's sum (checked: expected())."""
        for t in (self.buf, self.words, self.cnt, self.err):
            t.zero_()
        sums = torch.zeros(2 * P, dtype=torch.int64, device=self.device)
        kw = dict(launch_cooperative_grid=True) if self.device.type == "cuda" else {}
        hop_kernel[(P,)](self.buf, self.words, self.cnt, sums, self.err, self.w, P, self.N,
                         phases, self.w.shape[0], max_spin, TAGGED=tagged, WAIT=wait,
                         BLOCK=self.BLOCK, WORK=self.work, USE_ASM=self.device.type == "cuda",
                         COPIES=copies, COUNTERS=counters, num_warps=4, **kw)
        return sums[:P]

    def expected(self, P: int, phases: int, wait: bool = True) -> torch.Tensor:
        """Each program's sum: over phases of x[i] = (i + phase) % 64, all N elements (its own
        share without the waits)."""
        i, ph = torch.arange(self.N), torch.arange(phases)
        per_i = ((i[:, None] + ph[None, :]) % 64).sum(1)
        out = []
        for p in range(P):
            lo, hi = (0, self.N) if wait else (self.N * p // P, self.N * (p + 1) // P)
            out.append(int(per_i[lo:hi].sum()))
        return torch.tensor(out, dtype=torch.int64)

    def check(self, sums, P, phases, wait=True):
        if int(self.err[0]):
            raise RuntimeError(f"a wait timed out at phase {int(self.err[0]) - 1}")
        want = self.expected(P, phases, wait)
        if not torch.equal(sums.cpu(), want):
            raise AssertionError(f"stale or missing elements: {sums[:4].tolist()} vs "
                                 f"{want[:4].tolist()}")


def median_us(launch, per: int, reps: int = 5, after=None) -> float:
    """Median over reps calls of launch() (one kernel launch) of its GPU time in us over per
    (its phases or rounds); after(what launch returned), if given, once each launch is done."""
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = launch()
        b.record()
        torch.cuda.synchronize()
        if after is not None:
            after(out)
        times.append(a.elapsed_time(b) * 1e3 / per)
    return sorted(times)[len(times) // 2]


def measure(hop: Hop, P: int, tagged: bool, phases: int, wait: bool, copies: int = 1,
            counters: int = 1) -> float:
    """Median us per phase over 5 launches, each checked, after a checked launch."""
    kw = dict(copies=copies, counters=counters)
    hop.check(hop.run(P, tagged, phases, wait, **kw), P, phases, wait)
    return median_us(lambda: hop.run(P, tagged, phases, wait, **kw), phases,
                     after=lambda sums: hop.check(sums, P, phases, wait))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", default="2048,4096", help="vector elements (the 1B's d_model: 2048)")
    p.add_argument("--programs-per-sm", default="2,1")
    p.add_argument("--work", default="0,16384", help="bf16 weights a program streams a phase")
    p.add_argument("--copies", default="4", help="counter protocol: the vector also stored this "
                   f"many times (<= {MAX_COPIES}), program p reading copy p %% copies")
    p.add_argument("--counters", default="8", help="counter protocol: the counter in this many "
                   f"copies (<= {MAX_COPIES}), program p polling copy p %% counters")
    p.add_argument("--phases", type=int, default=2000)
    p.add_argument("--reduce", action="store_true", help="the fused layer's atomic reduction "
                   "instead (module docstring)")
    args = p.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if args.reduce:
        return reduce_main(args, sms)
    variants = [("counter", False, 1, 1)] + \
        [(f"counter x{c}", False, int(c), 1) for c in args.copies.split(",") if int(c) > 1] + \
        [(f"{c} counters", False, 1, int(c)) for c in args.counters.split(",") if int(c) > 1] + \
        [("tagged", True, 1, 1)]
    print(f"{torch.cuda.get_device_name()}: us per phase (median of 5 launches of "
          f"{args.phases} phases)")
    rows = []
    for work in map(int, args.work.split(",")):
        for N in map(int, args.n.split(",")):
            hop = Hop(N, work)
            for per_sm in map(int, args.programs_per_sm.split(",")):
                P = sms * per_sm
                alone = measure(hop, P, False, args.phases, False) if work else 0.0
                t = [measure(hop, P, tagged, args.phases, True, c, k)
                     for _, tagged, c, k in variants]
                rows.append((N, P, work, alone, t))
                print(f"  N {N:6d}  P {P:4d}  work {work * 2 // 1024:3d} KB: " +
                      "  ".join(f"{v[0]} {x:6.2f}" for v, x in zip(variants, t)) +
                      f"  (streams alone {alone:5.2f})", flush=True)
    print("\n| N | programs | weights a phase | streams alone us | " +
          " | ".join(f"{v[0]} us" for v in variants) + " |\n|---|---|---|---|" +
          "---|" * len(variants))
    for N, P, work, alone, t in rows:
        print(f"| {N} | {P} | {work * 2 // 1024} KB | {alone:.2f} | " +
              " | ".join(f"{x:.2f}" for x in t) + " |")


def reduce_main(args, sms: int, rounds: int = 200):
    print(f"{torch.cuda.get_device_name()}: us per round of every program adding N values "
          f"(median of 5 launches of {rounds} rounds, after a checked launch of 8)")
    print("| N | programs | " + " | ".join(f"{name} us" for name in REDUCE) + " |\n|---|---|" +
          "---|" * len(REDUCE))
    for N in map(int, args.n.split(",")):
        for per_sm in map(int, args.programs_per_sm.split(",")):
            red, t = Reduce(sms * per_sm, N), []
            for mode in range(len(REDUCE)):
                red.check(mode, 8)
                t.append(median_us(lambda: red.run(mode, rounds), rounds))
            print(f"| {N} | {red.P} | " + " | ".join(f"{x:.2f}" for x in t) + " |", flush=True)


if __name__ == "__main__":
    main()
