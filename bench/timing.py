"""GPU timing shared by the benchmarks: CUDA graphs of back-to-back launches over cold weight
copies, replayed round-robin, each replay timed from its first kernel's start; launches with
programmatic dependent launch on or off.
"""
import torch

from fastdecode.triton_kernels import config


def cold_copies(nbytes: int) -> int:
    """Distinct weight copies a cold-L2 graph cycles through: > 256 MB in all (4x the H200's
    60 MB L2, so no launch reads from L2 what the one before left there), 4 to 64."""
    return max(4, min(64, (256 * 2**20) // nbytes + 1))


# GPU cycles of busy wait queued before each timed replay (~100 us at the H200's ~1.98 GHz):
# longer than the host's submission of a graph of up to 64 launches, so the start event fires
# only when the graph's first kernel can start -- without it the host's latency to submit the
# graph (the GPU idle after the event) was timed as part of the launches: ~6 us a replay, 1.6 us
# a launch of the 4-launch graphs of 2048x16384 (persist+PDL 18.0 -> 16.4 us, H200, session 32).
HOST_COVER_CYCLES = 200_000
# launches per timed graph at least: the cold copies cycled as often as it takes
MIN_LAUNCHES = 16


def laps(copies: int) -> int:
    """Times a timed graph cycles over its `copies` cold copies: MIN_LAUNCHES launches or more."""
    return -(-MIN_LAUNCHES // copies)


def replay_medians(graphs: dict, per: int, rounds: int = 15) -> dict:
    """{name: median seconds per launch} of graphs ({name: CUDA graph of `per` launches}),
    replayed round-robin, `rounds` times each, so a drift of the GPU's clocks over the run
    (+-5% between two runs of one config, session 16) lands on every variant alike instead of
    on whichever ran last. Each replay is timed from its first kernel's start: the GPU is kept
    busy (HOST_COVER_CYCLES) while the host submits it."""
    ts = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(HOST_COVER_CYCLES)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts[name].append(a.elapsed_time(b) / 1e3 / per)
    return {name: sorted(v)[len(v) // 2] for name, v in ts.items()}


def pdl(fn, on):
    """fn launched with programmatic dependent launch on or off (config.use_pdl): on, each launch
    of the graph starts while the one before it drains."""
    def run(x, w, o):
        old, config._PDL_ENV = config._PDL_ENV, "1" if on else "0"
        try:
            fn(x, w, o)
        finally:
            config._PDL_ENV = old
    return run
