"""Acquire / release flags for dependency counters and cross-GPU signals, and a spin backoff.

ld_acquire(ptr, SCOPE, USE_ASM): `ld.global.acquire.<SCOPE>.b32` -- a load that no later load or
    store of this thread may be reordered before, and that makes visible every write released
    (at that scope) by the producer before its flag update; it also keeps the following reads of
    this SM from being served by a stale L1. SCOPE "gpu": the megakernel's counters (producers on
    other SMs); "sys": the all-reduce's flags, released by another GPU writing this GPU's memory
    over NVLink. Fallback (interpreter): an atomic add of 0 with acquire semantics at that scope.
st_release(ptr, val, SCOPE, USE_ASM) / red_release_add(ptr, val, SCOPE, USE_ASM): for a scalar
    pointer, thread 0 of the program issues `st.global.release.<SCOPE>.b32 [ptr], val` /
    `red.global.release.<SCOPE>.add.s32 [ptr], val`: every write this thread made (and, after a
    block barrier, every write of the program: release is cumulative over what the barrier
    ordered before it) is visible to a thread that acquires the flag and sees the new value.
    `red` returns nothing, so the thread does not wait for the round trip (over NVLink for a
    peer's flag). Inline asm on a scalar runs in every thread that holds a copy of it
    (KNOWLEDGE.md): the %tid.x == 0 predicate makes it one store / one add per program. Call
    after tl.debug_barrier(). Fallback (interpreter): tl.atomic_xchg / tl.atomic_add with
    sem="release" at that scope (one program instance is one thread there).
    The megakernel publishes with tl.atomic_add(sem="release"), which Triton already issues once
    per program; these wrappers are the explicit forms, for kernels that need a bare store.
spin_acquire(ptr, target, max_spin, abort_ptr, SCOPE, USE_ASM, ABORT, EVERY=1) -> (value, polls):
    ld_acquire
    of *ptr until it reads >= target, at most max_spin polls after the first load -- and, if
    ABORT, until the word at abort_ptr is nonzero (the megakernel's abort flag: another program
    timed out). Returns the last value read (>= target: met; the acquire orders this thread's
    later loads after it) and the polls made. ABORT: each poll requests the abort word (a plain
    volatile load) BEFORE the acquire load: no later load may pass an acquire, so after it the
    two would be two L2 round trips in series; before it they are one; with EVERY > 1 only
    every EVERY-th poll reads it. Bounded whatever the flag does: the caller reports a timeout
    instead of hanging the GPU.
spin_acquire_cta(ptr, target, max_spin, abort_ptr, SCOPE, USE_ASM, ABORT, EVERY=1) -> (met,
    polls): the same bounded wait for a whole program, polled by one thread: each poll, thread 0
    issues the acquire load of *ptr (and, if ABORT, threads 1 and 2 the volatile load of the
    abort word -- two, so their vote outweighs thread 0's) and every thread meets in
    `bar.red.popc.u32`, which counts the threads whose vote is yes and hands the count to all of
    them: 1 -- met; 2 or 3 -- aborted (an abort wins over a met counter, as a program told to
    stop should). One request per poll per program where spin_acquire's scalar code makes every
    warp issue its own (4-8 per program), on the counter's one L2 slice that every consumer of a
    phase polls at once. The barrier makes thread 0's acquire cover the others: the producer's
    release synchronizes with thread 0's acquire, and the barrier orders thread 0's side before
    every thread's later accesses (the CUDA idiom: one thread spins, then __syncthreads).
    EVERY: the abort word is read only at every EVERY-th poll after the first (the one word
    every waiting program polls). Returns met (1 / 0: timed out or aborted) and the polls after
    the first. Every thread of the program must call it (a barrier). Fallback (interpreter):
    spin_acquire with the same EVERY.
cta_barrier(USE_ASM): `bar.sync 0` -- every thread of the program waits there for the others,
    and their shared and global memory accesses before it are ordered before (and visible to)
    the accesses after it of every thread of the program: tl.debug_barrier as an opaque asm
    statement. Triton's loop pipeliner refuses any loop that holds a gpu.barrier (the op
    tl.debug_barrier emits), nested branches included; the megakernel's dependency wait, inside
    the weight stream's first iteration (gemv.gemv_body STAGES > 1), ends with this one, so the
    stream stays pipelined. The pipeliner moves only its loads' address math and copies, never
    this statement. Fallback (interpreter): tl.debug_barrier().
nanosleep(ns, USE_ASM): `nanosleep.u32 ns` -- suspends the thread for about ns nanoseconds
    (0 to 1 ms; the hardware may wake it earlier): a backoff in a spin that should leave issue
    slots and memory bandwidth to the other programs of its SM. Fallback: nothing.
"""
import triton
import triton.language as tl


@triton.jit
def ld_acquire(ptr, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise("ld.global.acquire." + SCOPE + ".b32 $0, [$1];", "=r,l",
                                         [ptr], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)


@triton.jit
def spin_acquire(ptr, target, max_spin, abort_ptr, SCOPE: tl.constexpr, USE_ASM: tl.constexpr,
                 ABORT: tl.constexpr, EVERY: tl.constexpr = 1):
    v = ld_acquire(ptr, SCOPE, USE_ASM)
    n = 0
    aborted = 0
    while (v < target) & (n < max_spin) & (aborted == 0):
        n += 1
        if ABORT:
            if n % EVERY == 0:
                aborted = tl.load(abort_ptr, volatile=True).to(tl.int32)
        v = ld_acquire(ptr, SCOPE, USE_ASM)
    return v, n


# _poll_cta's PTX: thread 0's acquire load (at the scope between _POLL and _MET), its vote met;
# the abort vote (ABORT): threads 1 and 2 load the abort word, a nonzero one is their vote; then
# every thread's vote counted, the count to all
_POLL = tl.constexpr("{ .reg .pred p, q; .reg .b32 t, v, a; mov.u32 t, %tid.x; mov.u32 v, 0; "
                     "mov.u32 a, 0; setp.eq.u32 p, t, 0; @p ld.global.acquire.")
_MET = tl.constexpr(".b32 v, [$1]; setp.ge.and.s32 p, v, $2, p; ")
_ABORT_VOTE = tl.constexpr("setp.eq.u32 q, t, 1; setp.eq.or.u32 q, t, 2, q; "
                           "@q ld.volatile.global.b32 a, [$3]; setp.ne.and.u32 q, a, 0, q; "
                           "or.pred p, p, q; ")
_POPC = tl.constexpr("bar.red.popc.u32 $0, 0, p; }")


@triton.jit
def _poll_cta(ptr, target, abort_ptr, SCOPE: tl.constexpr, ABORT: tl.constexpr):
    """One poll of spin_acquire_cta: thread 0's acquire load against target, threads 1 and 2's
    load of the abort word (ABORT), the votes counted by bar.red.popc -> met + 2 x aborted."""
    # the abort word's low 32 bits (little-endian; any nonzero abort word has them nonzero here:
    # the megakernel's is 0 or 1)
    args = [ptr, tl.cast(target, tl.int32), abort_ptr.to(tl.pointer_type(tl.int32))]
    if ABORT:
        c = tl.inline_asm_elementwise(_POLL + SCOPE + _MET + _ABORT_VOTE + _POPC, "=r,l,r,l",
                                      args, dtype=tl.int32, is_pure=False, pack=1)
    else:
        c = tl.inline_asm_elementwise(_POLL + SCOPE + _MET + _POPC, "=r,l,r,l", args,
                                      dtype=tl.int32, is_pure=False, pack=1)
    return c


@triton.jit
def spin_acquire_cta(ptr, target, max_spin, abort_ptr, SCOPE: tl.constexpr,
                     USE_ASM: tl.constexpr, ABORT: tl.constexpr, EVERY: tl.constexpr = 1):
    if USE_ASM:  # the first poll without the abort word, as spin_acquire
        c = _poll_cta(ptr, target, abort_ptr, SCOPE, False)
        n = 0
        while (c == 0) & (n < max_spin):
            n += 1
            if n % EVERY == 0:
                c = _poll_cta(ptr, target, abort_ptr, SCOPE, ABORT)
            else:
                c = _poll_cta(ptr, target, abort_ptr, SCOPE, False)
        met = c == 1
    else:  # one program instance is one thread: spin_acquire's polls
        v, n = spin_acquire(ptr, target, max_spin, abort_ptr, SCOPE, USE_ASM, ABORT, EVERY)
        met = v >= target
    return met.to(tl.int32), n


@triton.jit
def _thread0(ptr, val, INSTR: tl.constexpr):
    """`INSTR [ptr], val;` in thread 0 of the program only (INSTR: a store or reduction)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; @p " + INSTR +
        " [$1], $2; mov.u32 $0, 0; }", "=r,l,r", [ptr, tl.cast(val, tl.int32)], dtype=tl.int32,
        is_pure=False, pack=1)


@triton.jit
def st_release(ptr, val, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    if USE_ASM:
        _thread0(ptr, val, "st.global.release." + SCOPE + ".b32")
    else:
        tl.atomic_xchg(ptr, tl.cast(val, tl.int32), sem="release", scope=SCOPE)


@triton.jit
def red_release_add(ptr, val, SCOPE: tl.constexpr, USE_ASM: tl.constexpr):
    if USE_ASM:
        _thread0(ptr, val, "red.global.release." + SCOPE + ".add.s32")
    else:
        tl.atomic_add(ptr, tl.cast(val, tl.int32), sem="release", scope=SCOPE)


@triton.jit
def cta_barrier(USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("bar.sync 0; mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)
    else:
        tl.debug_barrier()


@triton.jit
def nanosleep(ns, USE_ASM: tl.constexpr):
    if USE_ASM:
        tl.inline_asm_elementwise("nanosleep.u32 $1; mov.u32 $0, 0;", "=r,r",
                                  [tl.cast(ns, tl.int32)], dtype=tl.int32, is_pure=False, pack=1)
