"""StepGraph -> static per-program queues, encoded as one int32 tensor, and a validator.

Assignment is list scheduling on the cost model: tasks are taken in the graph's order (a
topological order: every producer precedes its consumers); a task is ready when the last producer
of the counter it waits on finishes, and goes to the program on which it would start earliest
(ties: the program that became free first). The tasks of one phase -- one (op, layer) -- so land
on distinct programs, which run them side by side; a program never gets a second task of a phase
while another program idles (the cumulative-cost rule did that, and every consumer then waited
for the doubled program). Every queue is a subsequence of one global topological order, which is
what makes the schedule deadlock-free when all programs are resident: the earliest unfinished task
is at the head of its queue and all of its producers come before it. validate() does not trust
that argument: it simulates the counters.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

import torch

from .graph import StepGraph
from .opcodes import LAYER_BITS, WORDS, F_OP, F_SIGNAL, F_WAIT, F_WAIT_N, F_WAIT_OFF


class ScheduleError(ValueError):
    """A schedule with a task missing or repeated, a wait no producer can satisfy, or a cycle."""


@dataclass
class Schedule:
    graph: StepGraph
    queues: list            # per program: list of task indices into graph.tasks
    words: torch.Tensor     # [P, max_len, WORDS] int32
    lengths: torch.Tensor   # [P] int32

    @property
    def n_programs(self) -> int:
        return len(self.queues)

    @property
    def n_counters(self) -> int:
        """Local counters (remote ones live in the ranks' symmetric buffers)."""
        return self.graph.n_local


def assign(graph: StepGraph, n_programs: int) -> list:
    free = [(0, p) for p in range(n_programs)]  # heap of (time the program becomes free, p)
    done: dict = {}                             # counter key -> finish time of its last producer
    queues = [[] for _ in range(n_programs)]
    for i, t in enumerate(graph.tasks):
        ready = done.get(t.wait, 0) if t.wait_off == 0 else 0  # previous-step waits: at 0
        # earliest start = max(free, ready): among programs free by `ready` any starts at
        # `ready` (take the one free longest); otherwise the one that frees first
        at, p = heapq.heappop(free)
        start = max(at, ready)
        queues[p].append(i)
        heapq.heappush(free, (start + t.cost, p))
        done[t.signal] = max(done.get(t.signal, 0), start + t.cost)
    return queues


def encode(graph: StepGraph, queues: list) -> tuple:
    P = len(queues)
    L = max(1, max(len(q) for q in queues))
    words = torch.zeros(P, L, WORDS, dtype=torch.int32)
    s = graph.spec
    # a mixture's layer word: its MLP stack's layer above LAYER_BITS (the kernel's MOE weights)
    stack = s.mlp_index if s.moe else (lambda l: 0)
    for p, q in enumerate(queues):
        for k, i in enumerate(q):
            t = graph.tasks[i]
            words[p, k] = torch.tensor(
                [int(t.op), t.layer | stack(t.layer) << LAYER_BITS, *t.args, graph.counters[t.wait],
                 graph.producers.get(t.wait, 0), t.wait_off, graph.counters[t.signal]],
                dtype=torch.int32)
    return words, torch.tensor([len(q) for q in queues], dtype=torch.int32)


def build_schedule(graph: StepGraph, n_programs: int, validate_it: bool = True) -> Schedule:
    queues = assign(graph, n_programs)
    words, lengths = encode(graph, queues)
    sched = Schedule(graph, queues, words, lengths)
    if validate_it:
        validate(sched)
    return sched


def permuted(sched: Schedule, order) -> Schedule:
    """The same queues dealt to other programs: program p runs the queue of program order[p]
    (a permutation). Any assignment of the queues to programs is as deadlock-free as the
    original (all programs are resident; the counters are global); trace_step runs one to tell
    a queue's speed (its tasks) from its program's (the program index stays on its SM from
    launch to launch, and so does its place among the SM's programs)."""
    order = list(order)
    if sorted(order) != list(range(sched.n_programs)):
        raise ScheduleError(f"not a permutation of the {sched.n_programs} programs")
    return Schedule(sched.graph, [sched.queues[q] for q in order], sched.words[order],
                    sched.lengths[order])


def _sim(c: int, n_local: int) -> int:
    """A counter's index in the simulation: remote counters (-1 - x) after the local ones."""
    return c if c >= 0 else n_local - 1 - c


def validate(sched: Schedule, steps: int = 2, rng: random.Random | None = None):
    """Prove every wait satisfiable for `steps` consecutive steps by simulating the counters on the
    encoded words: repeatedly run a queue head whose wait is met (in program order, or a random
    legal interleaving with rng). Raises ScheduleError on a stuck state (a wait with too few
    producers, or a cycle of waits across queues) and checks each task appears exactly once."""
    g = sched.graph
    seen = sorted(i for q in sched.queues for i in q)
    if seen != list(range(len(g.tasks))):
        raise ScheduleError("every task must appear exactly once in the queues")
    return list(interleave(sched, steps, rng))


def interleave(sched: Schedule, steps: int = 1, rng: random.Random | None = None):
    """Yield (program, queue position, step) in a legal execution order of the encoded queues,
    advancing simulated counters; ScheduleError if no queue head can run. Tensor parallelism: every
    rank runs the same queues, so one rank is simulated and a remote counter (index -1 - x) counts
    as this rank's word of it: a wait met here is met on every rank in the same legal order."""
    n_local = sched.graph.n_local
    words = [[w[:F_WAIT] + [_sim(w[F_WAIT], n_local)] + w[F_WAIT + 1:F_SIGNAL]
              + [_sim(w[F_SIGNAL], n_local)] for w in q] for q in sched.words.tolist()]
    lengths = sched.lengths.tolist()
    counters = [0] * (n_local + sched.graph.n_remote)
    P = len(lengths)
    for s in range(steps):
        epoch = s + 1
        head = [0] * P
        while True:
            ready, pending = [], False
            for p in range(P):
                if head[p] < lengths[p]:
                    pending = True
                    w = words[p][head[p]]
                    if counters[w[F_WAIT]] >= (epoch + w[F_WAIT_OFF]) * w[F_WAIT_N]:
                        ready.append(p)
            if not pending:
                break
            if not ready:
                p = next(p for p in range(P) if head[p] < lengths[p])
                w = words[p][head[p]]
                raise ScheduleError(
                    f"stuck at step {s}: program {p} task {head[p]} (op {w[F_OP]}) waits on "
                    f"counter {w[F_WAIT]} = {counters[w[F_WAIT]]} < "
                    f"{(epoch + w[F_WAIT_OFF]) * w[F_WAIT_N]}")
            for p in ([rng.choice(ready)] if rng else ready):
                w = words[p][head[p]]
                yield p, head[p], s
                counters[w[F_SIGNAL]] += 1
                head[p] += 1
