"""Peer-to-peer all-reduce over symmetric buffers: tensor parallelism across the GPUs of one host.

Every rank owns the same layout (PeerBuffers; on GPUs, PyTorch symmetric memory mapped into every
peer over NVLink, addressed through a table of peer pointers):
    data  [2 slots, world, capacity] fp32     flags [2 slots, world, chunks] int32
Invocation e = 1, 2, ... of rank r; program c owns elements [c * BLOCK, (c + 1) * BLOCK) and
counts its invocations itself (counts[c], this rank's device memory: nothing on the host, so a
CUDA graph can replay it; every rank calls the same sequence of sizes, so every rank's program c
agrees on e):
    push:   for every rank p: data_p[e % 2, r, chunk c] = x[chunk c] (fp32); block barrier; one
            release store (system scope) flags_p[e % 2, r, c] = e
    wait:   for every rank q: acquire loads (system scope) of its own flags[e % 2, q, c] until
            >= e -- bounded: a rank that never signals makes the others record (rank, invocation)
            and exit; the launcher raises MegakernelTimeout naming them
    sum:    out[chunk c] = data[e % 2, 0, c] + data[e % 2, 1, c] + ... in fp32, in rank order,
            so every rank adds the same numbers in the same order: bit-identical results
Two slots suffice: rank r reaches invocation e + 2 (and overwrites slot e % 2 of its peers) only
after seeing every rank's flag of e + 1, which each rank raises after finishing its sum of e.
SENTINEL (PeerBuffers(sentinel=True)): the data is its own flag. Every data word starts as -0.0
(bits 0x80000000); the push writes the values with -0.0 made +0.0 (x == 0 -> +0.0: the sign of a
zero sum may differ from the flag protocol's, nothing else) and raises no flag; the wait polls
its own rows (volatile loads) until no word of the chunk is -0.0, and after the sum writes -0.0
back for the slot's next use (two invocations on: the same argument as the flags' -- a peer
writes slot e % 2 again only after seeing this rank's data of e + 1, pushed by a later launch
than this reset). One NVLink write per word and no flag round trip, but every poll reads the
whole chunk (4 KB) instead of one word.
Programs never wait on each other: program c waits only for chunk c of every rank.
Bytes (world W, n elements): each rank writes W x 4n over NVLink and reads W x 4n locally; an 8 KB
bf16 vector at W=2 is 16 KB each way -- microseconds are latency (flag round trips), not bandwidth.
PUSH / REDUCE (constexprs) split the phases so that virtual ranks in one process (the CPU tests)
can run every rank's push before any rank's wait (the push counts the invocation); a GPU launch
runs both.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import MegakernelTimeout
from ..ptx_inline.flags import spin_acquire
from ._common import INTERPRET

STATUS_WORDS = 4  # [timed out, rank waited on, invocation, flag value seen / words missing]
NEG_ZERO = tl.constexpr(-2147483648)  # the bits of -0.0 as an int32: "not written yet"


@triton.jit
def unwritten(ptrs, m):
    """(the values at ptrs, volatile: not from L1; how many of the masked ones are still -0.0)."""
    part = tl.load(ptrs, mask=m, other=0.0, volatile=True)
    return part, tl.sum((m & (part.to(tl.int32, bitcast=True) == NEG_ZERO)).to(tl.int32))


@triton.jit
def all_reduce_body(x_ptr, out_ptr, n, data_tab, flag_tab, count_ptr, rank, world, cap,
                    n_chunks, max_spin, status_ptr, c, PUSH: tl.constexpr, REDUCE: tl.constexpr,
                    BLOCK: tl.constexpr, USE_ASM: tl.constexpr, SENTINEL: tl.constexpr):
    """Chunk c of this rank's next all-reduce invocation (module docstring). Returns 1, or 0 if a
    wait timed out (then out is not written)."""
    epoch = tl.load(count_ptr + c)
    if PUSH:
        epoch += 1
        tl.store(count_ptr + c, epoch)
    slot = epoch % 2
    offs = c * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    ok = 1
    if PUSH:
        x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        if SENTINEL:
            x = tl.where(x == 0.0, 0.0, x)  # -0.0 is "not written yet"
        row = (slot * world + rank).to(tl.int64)
        for p in range(0, world):
            data = tl.load(data_tab + p).to(tl.pointer_type(tl.float32))
            tl.store(data + row * cap + offs, x, mask=m)
        if not SENTINEL:
            tl.debug_barrier()  # every thread's data stores precede the flag's release
            for p in range(0, world):
                flags = tl.load(flag_tab + p).to(tl.pointer_type(tl.int32))
                tl.atomic_xchg(flags + row * n_chunks + c, epoch, sem="release", scope="sys")
    if REDUCE:
        flags = tl.load(flag_tab + rank).to(tl.pointer_type(tl.int32))
        data = tl.load(data_tab + rank).to(tl.pointer_type(tl.float32))
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for q in range(0, world):
            row = (slot * world + q).to(tl.int64)
            if SENTINEL:  # v: words of rank q's part still -0.0; waiting while any is
                part, v = unwritten(data + row * cap + offs, m)
                spins = 0
                while (v > 0) & (spins < max_spin):
                    part, v = unwritten(data + row * cap + offs, m)
                    spins += 1
                arrived = v == 0
            else:
                v, _ = spin_acquire(flags + row * n_chunks + c, epoch, max_spin, flags, "sys",
                                    USE_ASM, False)
                arrived = v >= epoch
            if not arrived:
                if ok == 1:
                    zero = (v * 0).to(tl.int64)
                    if tl.atomic_cas(status_ptr, zero, zero + 1) == 0:  # the first to time out
                        tl.store(status_ptr + 1, zero + q)
                        tl.store(status_ptr + 2, zero + epoch)
                        tl.store(status_ptr + 3, zero + v)
                ok = 0
            if SENTINEL:
                acc += part
            else:
                acc += tl.load(data + row * cap + offs, mask=m, other=0.0)
        if ok == 1:
            tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=m)
            if SENTINEL:  # the slot's rows back to "not written yet" for invocation epoch + 2
                unset = tl.full([BLOCK], NEG_ZERO, tl.int32).to(tl.float32, bitcast=True)
                for q in range(0, world):
                    tl.store(data + (slot * world + q).to(tl.int64) * cap + offs, unset, mask=m)
    return ok


@triton.jit
def peer(tab_ptr, p, offset, DTYPE: tl.constexpr):
    """Rank p's symmetric buffer (its address in this rank's table) + offset elements, as a
    DTYPE pointer."""
    return tl.load(tab_ptr + p).to(tl.pointer_type(DTYPE)) + offset


@triton.jit
def push_rows(tab_ptr, rank, offset, stride, t_lo, t_hi, lo, hi, WORLD: tl.constexpr,
              BLOCK: tl.constexpr):
    """Copy rows t_lo..t_hi, columns [lo, hi) of this rank's fp32 buffer region at `offset` (row
    stride `stride`) to the same place in every other rank's buffer: the megakernel's row-parallel
    tasks write their partial sums once, locally, then push them (the caller barriers first, so
    every thread's local stores are visible, and releases a flag after)."""
    src = peer(tab_ptr, rank, offset, tl.float32)
    for t in range(t_lo, t_hi):
        for c in range(lo, hi, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            m = offs < hi
            v = tl.load(src + t * stride + offs, mask=m)
            for p in range(0, WORLD):
                if p != rank:
                    tl.store(peer(tab_ptr, p, offset, tl.float32) + t * stride + offs, v, mask=m)


@triton.jit
def part_sum(part_ptr, part_stride, rows, c, T, D, WORLD: tl.constexpr, BLOCK: tl.constexpr,
             bias_ptr, BIAS: tl.constexpr):
    """(part[0] + part[1] + ... in order (+ bias), fp32 [ROWS, BLOCK], column block c of
    `rows`; its columns; its mask)."""
    cols = c * BLOCK + tl.arange(0, BLOCK)[None, :]
    m = (rows < T) & (cols < D)
    offs = rows * D + cols
    acc = tl.load(part_ptr + offs, mask=m, other=0.0)
    for r in tl.static_range(1, WORLD):
        acc += tl.load(part_ptr + r * part_stride + offs, mask=m, other=0.0)
    if BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
    return acc, cols, m


@triton.jit
def residual_sum_body(h_ptr, part_ptr, part_stride, T, D, c_lo, c_hi, WORLD: tl.constexpr,
                      BLOCK: tl.constexpr, bias_ptr=None, BIAS: tl.constexpr = False,
                      ROWS: tl.constexpr = 1, norm_ptr=None, eps=1e-6,
                      NORM: tl.constexpr = False):
    """h[t, cols] = h + (part[0] + part[1] + ... in rank order, fp32) for column blocks
    [c_lo, c_hi) of BLOCK and every token row: the reduce half of the megakernel's all-reduce.
    part [WORLD, TM, D] fp32 (rank stride part_stride). The same sum, in the same order, as
    distributed.all_reduce_fp32 then the residual add: bit-identical ranks. Also the sum of a
    split tile's K parts on one GPU (WORLD: the parts; graph.Tiling.ksplit), then + bias if
    BIAS (the order of gemv.gemv_epilogue: sum, bias, residual). ROWS token rows a [ROWS,
    BLOCK] tile, the WORLD parts' loads unrolled: one round of loads in flight per tile, not
    one per row and part (a step of 16 rows paid 16 dependent rounds: session 39's trace).
    NORM (a norm after the block, ModelSpec.post_norms): h + rmsnorm(sum) * norm_w instead --
    the row's sum of squares over all D columns first (every task reads the whole row of
    partials: D x WORLD x 4 bytes a row, from L2), then its own columns, fp32 throughout."""
    for t0 in range(0, T, ROWS):
        rows = t0 + tl.arange(0, ROWS)[:, None]
        rstd = tl.zeros([ROWS, 1], dtype=tl.float32)
        if NORM:
            ss = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
            for c in range(0, tl.cdiv(D, BLOCK)):
                acc, _, _ = part_sum(part_ptr, part_stride, rows, c, T, D, WORLD, BLOCK,
                                     bias_ptr, BIAS)
                ss += acc * acc
            rstd = (1.0 / tl.sqrt(tl.sum(ss, axis=1) / D + eps))[:, None]
        for c in range(c_lo, c_hi):
            acc, cols, m = part_sum(part_ptr, part_stride, rows, c, T, D, WORLD, BLOCK,
                                    bias_ptr, BIAS)
            if NORM:
                acc = acc * rstd * tl.load(norm_ptr + cols, mask=cols < D,
                                           other=0.0).to(tl.float32)
            offs = rows * D + cols
            h = tl.load(h_ptr + offs, mask=m, other=0.0).to(tl.float32)
            tl.store(h_ptr + offs, (h + acc).to(h_ptr.dtype.element_ty), mask=m)


@triton.jit
def residual_add_kernel(h_ptr, part_ptr, part_stride, T, D, bias_ptr, norm_ptr, eps,
                        PARTS: tl.constexpr, BLOCK: tl.constexpr, BIAS: tl.constexpr,
                        ROWS: tl.constexpr, NORM: tl.constexpr):
    c = tl.program_id(0)
    residual_sum_body(h_ptr, part_ptr, part_stride, T, D, c, c + 1, PARTS, BLOCK, bias_ptr, BIAS,
                      ROWS, norm_ptr, eps, NORM)


def residual_add(h: torch.Tensor, parts: torch.Tensor, norm_w: torch.Tensor | None = None,
                 eps: float = 1e-6, bias: torch.Tensor | None = None) -> torch.Tensor:
    """h [T, D] += s, s = the sum of parts [P, T, D] (or one [T, D]) fp32 in order, + bias [D]
    -- or, given norm_w [D] (a norm after the block, ModelSpec.post_norms), += rmsnorm(s) *
    norm_w; in fp32, rounded once to h's dtype. In place; returns h. The megakernel's REDUCE
    body (residual_sum_body), one program per 256 columns: a vector of D fp32 read 1 + D / 256
    times (each program reads the whole row for the norm), bytes ~ 4 D P (D / 256 + 1) + 4 D."""
    parts = parts if parts.dim() == 3 else parts[None]
    P, T, D = parts.shape
    if tuple(h.shape) != (T, D) or not (h.is_contiguous() and parts[0].is_contiguous()):
        raise ValueError(f"residual_add: h {tuple(h.shape)} and parts {tuple(parts.shape)} must "
                         "be contiguous [T, D] and [P, T, D]")
    if parts.dtype != torch.float32:
        raise ValueError(f"residual_add: parts must be fp32 partial sums, got {parts.dtype}")
    block = 256  # opcodes.COST.reduce_block: the megakernel's REDUCE column block
    dummy = parts
    residual_add_kernel[(triton.cdiv(D, block),)](
        h, parts, parts.stride(0) if P > 1 else 0, T, D,
        dummy if bias is None else bias, dummy if norm_w is None else norm_w, eps,
        PARTS=P, BLOCK=block, BIAS=bias is not None,
        ROWS=min(16, triton.next_power_of_2(T)), NORM=norm_w is not None)
    return h


@triton.jit(do_not_specialize=["rank", "max_spin"])
def all_reduce_kernel(x_ptr, out_ptr, n, data_tab, flag_tab, count_ptr, rank, world, cap,
                      n_chunks, max_spin, status_ptr, PUSH: tl.constexpr, REDUCE: tl.constexpr,
                      BLOCK: tl.constexpr, USE_ASM: tl.constexpr, SENTINEL: tl.constexpr):
    all_reduce_body(x_ptr, out_ptr, n, data_tab, flag_tab, count_ptr, rank, world, cap, n_chunks,
                    max_spin, status_ptr, tl.program_id(0), PUSH, REDUCE, BLOCK, USE_ASM,
                    SENTINEL)


class PeerBuffers:
    """One rank's view of the all-reduce's symmetric buffers: its own `data` / `flags` tensors
    and the address tables of every rank's (data_tab / flag_tab, int64, on this rank's device),
    plus its programs' invocation counts (local). Capacity: the longest vector it reduces; block:
    elements per program (1024 on a GPU: 4 KB of fp32 per rank and program). sentinel: the
    data-as-flag protocol (module docstring); its data starts as -0.0 -- set here, so with real
    ranks every rank constructs its buffers before any rank pushes (distributed.peer_buffers
    barriers)."""

    def __init__(self, data, flags, data_tab, flag_tab, rank: int, world: int, block: int,
                 sentinel: bool = False):
        self.data, self.flags, self.data_tab, self.flag_tab = data, flags, data_tab, flag_tab
        self.rank, self.world, self.block, self.sentinel = rank, world, block, sentinel
        if sentinel:
            self.data.fill_(-0.0)
        self.capacity, self.n_chunks = data.shape[-1], flags.shape[-1]
        self.counts = torch.zeros(self.n_chunks, device=data.device, dtype=torch.int32)
        self.status = torch.zeros(STATUS_WORDS, device=data.device, dtype=torch.int64)
        on_gpu = data.device.type == "cuda"
        # GPU: ~1 us per system-scope poll -> about a second before a missing rank is reported
        self.max_spin = (1 << 20) if on_gpu else 64

    @staticmethod
    def shapes(world: int, capacity: int, block: int):
        n_chunks = triton.cdiv(capacity, block)
        return (2, world, n_chunks * block), (2, world, n_chunks)

    @classmethod
    def virtual(cls, world: int, capacity: int, device="cpu", block: int | None = None,
                sentinel: bool = False):
        """`world` ranks in one process (one address space): the CPU tests, or one GPU."""
        block = block or (1024 if torch.device(device).type == "cuda" else 256)
        dshape, fshape = cls.shapes(world, capacity, block)
        data = [torch.zeros(dshape, device=device, dtype=torch.float32) for _ in range(world)]
        flags = [torch.zeros(fshape, device=device, dtype=torch.int32) for _ in range(world)]
        dtab = torch.tensor([d.data_ptr() for d in data], device=device, dtype=torch.int64)
        ftab = torch.tensor([f.data_ptr() for f in flags], device=device, dtype=torch.int64)
        return [cls(data[r], flags[r], dtab, ftab, r, world, block, sentinel)
                for r in range(world)]


def all_reduce(x: torch.Tensor, bufs: PeerBuffers, out: torch.Tensor | None = None, *,
               push: bool = True, reduce: bool = True, check: bool = True) -> torch.Tensor:
    """out = the sum over ranks of every rank's x, in fp32 in rank order (out: fp32 unless given;
    the partial sums of tensor parallelism are added to the residual stream in fp32); every rank
    calls it with its own PeerBuffers, with the same sequence of sizes. push / reduce: run only one
    phase (virtual ranks in one process: every rank pushes before any reduces; each phase
    counts as the invocation). check: read the status (a host sync) and raise MegakernelTimeout
    naming a rank that never pushed; CUDA graphs and benchmarks pass False and check_status()."""
    x = x.reshape(-1)
    n = x.numel()
    if n > bufs.capacity:
        raise ValueError(f"all_reduce of {n} elements: the buffers hold {bufs.capacity}")
    if out is None:
        out = torch.empty(n, device=x.device, dtype=torch.float32)
    all_reduce_kernel[(triton.cdiv(n, bufs.block),)](
        x, out, n, bufs.data_tab, bufs.flag_tab, bufs.counts, bufs.rank, bufs.world,
        bufs.capacity, bufs.n_chunks, bufs.max_spin, bufs.status, PUSH=push, REDUCE=reduce,
        BLOCK=bufs.block, USE_ASM=not INTERPRET, SENTINEL=bufs.sentinel)
    if reduce and check:
        check_status(bufs)
    return out


def check_status(bufs: PeerBuffers):
    """Raise MegakernelTimeout if an all-reduce of this rank timed out (syncs)."""
    if int(bufs.status[0]):
        _, q, e, v = bufs.status.tolist()
        bufs.status.zero_()
        seen = f"{v} words still -0.0" if bufs.sentinel else f"its flag read {v}"
        raise MegakernelTimeout(f"all_reduce: rank {bufs.rank} waited for rank {q} at invocation "
                                f"{e} ({seen}); that rank never pushed its part")
