"""bench/probe_ws_stream.py (the warp-specialized TMA loader probe, GPU-only in its kernel): its op
table read the kernel's way reproduces the chain of GEMVs, and the kernel compiles for sm_90a into
TMA copies in warp-specialized partitions -- so its one GPU run is spent measuring."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


@pytest.mark.parametrize("model", ["1b", "8b", "qwen3-8b"])
def test_probe_pieces_reproduce_the_chain(model):
    """fp32 sums of <= 14336 products of O(1) terms in two orders: rel err ~1e-6, bound 1e-4."""
    import probe_ws_stream as p
    cfg = p.SHAPES[model][1]()
    ch = p.Chain(p.chain(cfg, n_layers=2, vocab=4096), device="cpu")
    want = ch.reference()
    assert want.norm() > 1  # the chain keeps its scale (weights of std 1/sqrt(K))
    assert float((ch.emulate() - want).norm() / want.norm()) < 1e-4


def test_probe_rejects_shapes_it_cannot_tile():
    import probe_ws_stream as p
    with pytest.raises(ValueError, match="multiple of"):
        p.Chain([("a", 8, 2048), ("b", 8, 1000)], device="cpu")
    with pytest.raises(ValueError, match="K <= its rows"):
        p.Chain([("a", 1024, 2048), ("b", 8, 2048)], device="cpu")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's run")
def test_probe_register_stream_matches_reference():
    """The plain-Triton baseline (slots 0) in the interpreter, one program: both descriptors'
    K (2048, 4096), an attention stand-in between (no rows: b reads a's outputs; held 5 ticks
    of the interpreter's logical clock), every program's add on every op's counter, no wait
    timed out. fp32 sums of 4096 O(1) products in two orders: rel err ~1e-6, bound 1e-4."""
    import probe_ws_stream as p
    ch = p.Chain([("a", 4096, 2048), ("attn", 0, 0), ("b", 64, 4096)], device="cpu", attn_ns=5)
    ch.run(1, 0, 4)
    want = ch.reference()
    assert int(ch.err[0]) == 0 and ch.cnt.tolist() == [1, 1, 1] and int(ch.err[1]) >= 6
    assert float((ch.last() - want).norm() / want.norm()) < 1e-4
    ch.run(3, 0, 4, wait=False)  # a variant of another P: the waits' target is the sum of P's
    ch.run(1, 0, 4)
    assert int(ch.err[0]) == 0 and ch.cnt.tolist() == [5, 5, 5] == [ch.target] * 3


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's run")
def test_probe_wait_gives_up():
    """Two programs run one after the other in the interpreter, so program 0's wait on op 0 can
    never see program 1's add: it must give up after max_polls, name the op and run on (the
    GPU's guard against programs that are not all resident), not hang."""
    import probe_ws_stream as p
    ch = p.Chain([("a", 2048, 2048), ("b", 16, 2048)], device="cpu")
    ch.run(2, 0, 4, max_polls=20)
    assert int(ch.err[0]) == 1 and ch.cnt.tolist() == [2, 2]


def test_probe_compiles_to_tma_in_partitions():
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "probe_ws_stream.py"),
                          "--compile-only", "--configs", "0/2/4,2/2/4"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if "wait=" in ln]
    assert len(lines) == 4, out.stdout
    for ln in lines:  # ptxas accepted each; the ring: one TMA copy site, registers moved
        assert " ? regs" not in ln, ln  # between partitions; the plain baseline neither
        ring = not ln.strip().startswith("0/")
        assert ("1 TMA copy" in ln and " 0 setmaxnreg" not in ln) == ring, ln


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's run")
@pytest.mark.parametrize("tagged", [False, True])
def test_probe_hop_hands_every_phase_on(tagged):
    """bench/probe_hop.py's two hand-off protocols in the interpreter (one program: each wait is
    met by its own share): 70 phases, past the 64-phase period of x[i] = (i + phase) % 64 and
    over both buffer parities, N not a power of two (lanes past N masked), with and without
    the streamed weights and the waits, the counter protocol's vector stored once and 4 times
    and its counter in 8 copies -- every phase's values read back, summed exactly as the host
    sums them; a word read with another phase's tag or a stale buffer would change the sum."""
    import probe_hop as p
    for work, copies, counters in ((0, 1, 1), (64, 1, 1), (0, 4, 1), (0, 1, 8)):
        hop = p.Hop(40, work, device="cpu")
        for wait in (True, False):
            sums = hop.run(1, tagged, 70, wait, copies=copies, counters=counters)
            hop.check(sums, 1, 70, wait)
            assert int(sums[0]) == int(hop.expected(1, 70)[0]) > 0
    with pytest.raises(AssertionError, match="stale"):  # the check itself can fail
        hop.check(sums + 1, 1, 70)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's run")
def test_probe_reduce_sums_every_round():
    """bench/probe_hop.py --reduce in the interpreter (three programs, the atomics by
    tl.atomic_add there): the int64 fixed-point and fp32 accumulators hold every program's
    adds of every round, by round parity, and the stored partials the last round's -- exact
    (multiples of 1/8); a dropped or doubled add would show."""
    import probe_hop as p
    red = p.Reduce(3, 40, device="cpu")
    for mode in range(len(p.REDUCE)):
        red.check(mode, 5)
    red.run(0, 5)
    red.acc[0, 3] += 1  # one fixed-point step too many: the check itself can fail
    red.run = lambda mode, rounds: None
    with pytest.raises(AssertionError, match="off by"):
        red.check(0, 5)
