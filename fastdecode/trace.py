"""Megakernel traces: per-task [start, ready, end] timestamps -> Chrome trace JSON, a PNG timeline
and a per-op breakdown of time working vs waiting (how we see bubbles)."""
from __future__ import annotations

import json
import statistics

from .opcodes import (F_A0, F_A1, F_A2, F_LAYER, F_OP, LAYER_BITS, T_ATTENDED, T_END, T_NORMED,
                      T_READY, T_SM, T_START, T_TICKET, T_TILES, Op)

CHAIN_KEYS = ("tiles_end", "ticket", "normed", "attended")  # a ticket-taking task's extra timestamps


def events(sched, trace):
    """-> list of dicts (program, step, op, layer, arg0, tiles (arg2 - arg1: a weight task's row
    tiles), start, ready, end, sm: the SM the program ran on; a task that took its KV group's
    ticket also tiles_end and, the group's completer, ticket, normed and attended:
    opcodes.T_TILES..),
    times relative to the first start. trace: [P, steps, max_len, opcodes.TRACE_WORDS] from
    Runtime.trace_decode."""
    P, steps = trace.shape[:2]
    rows = trace.tolist()
    out = []
    for p in range(P):
        n = int(sched.lengths[p])
        for s in range(steps):
            for i in range(n):
                rec = rows[p][s][i]
                start, ready, end = rec[T_START], rec[T_READY], rec[T_END]
                if end == 0:  # not executed (stopped early)
                    continue
                w = sched.words[p, i]
                out.append(dict(program=p, step=s, op=Op(int(w[F_OP])).name,
                                layer=int(w[F_LAYER]) & ((1 << LAYER_BITS) - 1), arg0=int(w[F_A0]),
                                tiles=int(w[F_A2]) - int(w[F_A1]), start=start, ready=ready,
                                end=end, sm=rec[T_SM]))
                for k, f in zip(CHAIN_KEYS, (T_TILES, T_TICKET, T_NORMED, T_ATTENDED)):
                    if rec[f]:
                        out[-1][k] = rec[f]
    t0 = min(e["start"] for e in out)
    for e in out:
        for k in ("start", "ready", "end") + CHAIN_KEYS:
            if k in e:
                e[k] -= t0
    return out


def attention_chain(evs, step: int = 0):
    """Where the short-context schedule's attention chain spends its time: per (layer, KV group)
    of QKV_ATTN tasks, from the layer's first QKV_ATTN ready to the group's last tiles' end (the
    tiles: its slowest tile task's stream), to its completer's ticket (the acq_rel
    ticket round trip; and any later tile), to its q / k normed, to its attention stored, to its
    end (the publish: barrier, release add), then from the layer's last completer to its first
    O_PROJ ready (the hop). -> dict of those six stages' medians over layers and groups (ns or
    ticks), the spread (median over layers of the last group's end less the first's: what an
    o_proj started per KV group could gain at most) and the chains counted, or None without
    QKV_ATTN completers. The same stages where q / k norms span all heads (QKN_ATTN tasks, each
    after all of the layer's QKV tasks): from the layer's first QKV ready to its last QKV end
    (tiles), to the group's QKN_ATTN ready (ticket: the counter's hop), normed, attended, end."""
    groups, o_ready, q_ready, qkv_end = {}, {}, {}, {}
    for e in evs:
        if e["step"] != step:
            continue
        if e["op"] in ("QKV_ATTN", "QKV"):
            q_ready[e["layer"]] = min(q_ready.get(e["layer"], e["ready"]), e["ready"])
        if e["op"] == "QKV":
            qkv_end[e["layer"]] = max(qkv_end.get(e["layer"], 0), e["end"])
        if e["op"] == "QKV_ATTN" and "tiles_end" in e:
            g = groups.setdefault((e["layer"], e["arg0"]), dict(last=0, done=None))
            g["last"] = max(g["last"], e["tiles_end"])
            if "ticket" in e:
                g["done"] = e
        elif e["op"] == "QKN_ATTN":  # its wait's end stands for the ticket
            groups[(e["layer"], e["arg0"])] = dict(last=None, done=dict(e, ticket=e["ready"]))
        elif e["op"] == "O_PROJ":
            o_ready[e["layer"]] = min(o_ready.get(e["layer"], e["ready"]), e["ready"])
    for (layer, _), g in groups.items():
        if g["last"] is None:
            g["last"] = qkv_end[layer]
    done = {k: g for k, g in groups.items() if g["done"] is not None and "attended" in g["done"]}
    if not done:
        return None
    med = statistics.median
    ends, firsts = {}, {}
    for (layer, _), g in done.items():
        ends[layer] = max(ends.get(layer, 0), g["done"]["end"])
        firsts[layer] = min(firsts.get(layer, g["done"]["end"]), g["done"]["end"])
    return dict(
        tiles=med([g["last"] - q_ready[layer] for (layer, _), g in done.items()]),
        ticket=med([g["done"]["ticket"] - g["last"] for g in done.values()]),
        norm=med([g["done"]["normed"] - g["done"]["ticket"] for g in done.values()]),
        attention=med([g["done"]["attended"] - g["done"]["normed"] for g in done.values()]),
        publish=med([g["done"]["end"] - g["done"]["attended"] for g in done.values()]),
        hop=med([o_ready[la] - t for la, t in ends.items() if la in o_ready]),
        spread=med([t - firsts[la] for la, t in ends.items()]),
        chains=len(done))


def breakdown(evs):
    """Per op: total time waiting (start -> ready) and working (ready -> end), summed over tasks."""
    rows = {}
    for e in evs:
        r = rows.setdefault(e["op"], dict(tasks=0, wait=0, work=0))
        r["tasks"] += 1
        r["wait"] += e["ready"] - e["start"]
        r["work"] += e["end"] - e["ready"]
    return rows


def phases(evs, layer: int, step: int = 0):
    """Per op of one layer: how its tasks overlap in time -- (op, tasks, span from the first start
    to the last end, spread of the start times, min / median / max task duration). A phase whose
    span exceeds its bytes / bandwidth while its durations spread widely loses time to its
    slowest program (the next phase waits for all of them)."""
    rows = []
    for op in [o.name for o in Op]:
        es = [e for e in evs if e["op"] == op and e["layer"] == layer and e["step"] == step]
        if not es or op in ("EMBED", "LM_HEAD", "CHOOSE") and layer != 0:
            continue
        d = sorted(e["end"] - e["ready"] for e in es)
        st = [e["ready"] for e in es]
        rows.append((op, len(es), max(e["end"] for e in es) - min(st), max(st) - min(st),
                     d[0], d[len(d) // 2], d[-1]))
    return rows


def layer_weight_bytes(spec, itemsize: int = 2) -> dict:
    """Bytes of weights each decode op of one layer streams (the phase_rates numerators); a
    mixture's: its router's rows, the routed experts' and the shared expert's gate|up and down
    (graph.moe_tasks)."""
    d, q, f = spec.d_model, spec.q_dim, spec.ffn_dim
    qkv = spec.qkv_dim * d * itemsize
    out = {"QKV": qkv, "QKV_ATTN": qkv, "O_PROJ": q * d * itemsize}
    if spec.moe:
        routed = spec.top_k * spec.expert_ffn + f
        return {**out, "ROUTER": (spec.n_experts + (f > 0)) * d * itemsize,
                "EXPERT_GU": 2 * routed * d * itemsize, "EXPERT_DOWN": routed * d * itemsize}
    return {**out, "GATE_UP": (1 + spec.gated) * f * d * itemsize, "DOWN": f * d * itemsize}


def phase_rates(evs, layer: int, op_bytes: dict, step: int = 0) -> dict:
    """Per weight op of one layer: (bytes, span from its first task's ready to its last task's
    end, bytes / span) -- how fast the phase streamed its weights, for comparison with the read
    roofline (issue 4: >= 85%). QKV and QKV_ATTN tasks (the short-context schedule) stream one
    matrix: counted as one phase."""
    spans = {}
    for e in evs:
        if e["layer"] != layer or e["step"] != step or e["op"] not in op_bytes:
            continue
        op = "QKV" if e["op"] == "QKV_ATTN" else e["op"]
        lo, hi = spans.get(op, (e["ready"], e["end"]))
        spans[op] = (min(lo, e["ready"]), max(hi, e["end"]))
    return {op: (op_bytes[op], hi - lo, op_bytes[op] / (hi - lo))
            for op, (lo, hi) in spans.items() if hi > lo}


def task_costs(evs, op_bytes: dict, step: int = 0) -> dict:
    """Per weight op, a least-squares fit of its tasks' working time (ready -> end) against the
    bytes each streams: duration = overhead + bytes / rate, over every layer of the step. A
    task's bytes are its tiles times the op's bytes per tile (op_bytes[op], one layer's bytes,
    over the tiles its tasks cover in a layer; QKV's tiles include QKV_ATTN tasks', which are
    left out of the fit: their time includes an attention). -> {op: (tasks, overhead ns, rate bytes / ns
    per program, rms residual ns)} -- measured costs for the queue balancing's model
    (opcodes.Cost: bytes plus a fixed per-task overhead)."""
    out = {}
    for op in op_bytes:
        if op == "QKV_ATTN":  # QKV tiles whose task then runs an attention: not a stream's cost
            continue
        kin = ("QKV", "QKV_ATTN") if op == "QKV" else (op,)
        tiles = sum(e.get("tiles", 0) for e in evs if e["op"] in kin and e["step"] == step)
        es = [e for e in evs if e["op"] == op and e["step"] == step and e.get("tiles", 0) > 0]
        layers = {e["layer"] for e in es}
        if len(es) < 3 or not layers:
            continue
        per_tile = op_bytes[op] * len(layers) / tiles
        xs = [e["tiles"] * per_tile for e in es]
        ys = [e["end"] - e["ready"] for e in es]
        if len(set(xs)) > 1:
            slope, a = statistics.linear_regression(xs, ys)
        else:  # every task streams the same bytes: no overhead to separate out
            slope, a = statistics.fmean(ys) / xs[0], 0.0
        res = statistics.fmean((y - a - slope * x) ** 2 for x, y in zip(xs, ys)) ** 0.5
        out[op] = (len(xs), a, 1 / slope if slope > 0 else float("inf"), res)
    return out


def _relative_rates(evs, op: str, step: int, parity=None, by: str = "program") -> dict:
    """{program (or the by field's value: "sm", the mean of its programs): mean over the layers
    (of that parity, if given) of its rate (tiles / working time) relative to the layer's median
    rate} for op's tasks."""
    by_layer = {}
    for e in evs:
        if (e["op"] == op and e["step"] == step and e.get("tiles", 0) > 0
                and e["end"] > e["ready"] and (parity is None or e["layer"] % 2 == parity)):
            by_layer.setdefault(e["layer"], {}).setdefault(e[by], []).append(
                e["tiles"] / (e["end"] - e["ready"]))
    out = {}
    for rates in by_layer.values():
        rates = {k: sum(v) / len(v) for k, v in rates.items()}
        med = sorted(rates.values())[len(rates) // 2]
        for k, r in rates.items():
            out.setdefault(k, []).append(r / med)
    return {k: sum(v) / len(v) for k, v in out.items()}


def program_skew(evs, op: str, step: int = 0, other=None, by: str = "program"):
    """Is a phase's slowest program slow by chance or every time? For the tasks of op (one per
    program and layer), each program's rate (tiles / working time) relative to the layer's median
    rate; then per program the mean over the even layers and over the odd ones, and the Pearson
    correlation of the two halves across programs: near 1, the same programs are slow in every
    layer (a per-program cost table would rebalance the static queues, issue 4); near 0, it is
    noise that only dynamic scheduling evens out. other: the events of another launch -- the
    halves are then this launch's layers and that one's, which says whether a program's speed
    stays with its index from launch to launch (what a static per-program table needs) or goes
    with whichever SM the program lands on; by="sm": the same per SM (trace events' sm), whose
    correlation across launches says whether the speed is the SM's. -> (programs (or SMs), p10
    and p90 of their mean relative rate, correlation), or None when a half has no task of op
    (one layer, no such op)."""
    halves = ((_relative_rates(evs, op, step, 0, by), _relative_rates(evs, op, step, 1, by))
              if other is None else
              (_relative_rates(evs, op, step, by=by), _relative_rates(other, op, step, by=by)))
    progs = sorted(set(halves[0]) & set(halves[1]))
    if not progs:
        return None
    a = [halves[0][p] for p in progs]
    b = [halves[1][p] for p in progs]
    both = sorted((x + y) / 2 for x, y in zip(a, b))
    corr = statistics.correlation(a, b) if len(set(a)) > 1 and len(set(b)) > 1 else 0.0
    return len(progs), both[len(both) // 10], both[(9 * len(both)) // 10], corr


def sm_pairs(evs) -> dict:
    """{program: the other program on its SM} for the SMs that ran exactly two (trace events'
    sm; programs stay on their SMs from launch to launch on an H200, trace_step checks it)."""
    on = {}
    for e in evs:
        on.setdefault(e["sm"], set()).add(e["program"])
    out = {}
    for progs in on.values():
        if len(progs) == 2:
            a, b = sorted(progs)
            out[a], out[b] = b, a
    return out


def sm_pair_gap(evs, op: str, step: int = 0, pairs=None):
    """Within each SM running two programs, the later program's task end minus the earlier
    one's (the higher program index minus the lower: the block launched later) for the op's
    tasks of one layer that stream equal tiles -- how far apart two programs sharing an SM's
    load pipeline finish the same work. pairs: sm_pairs of another launch (default: these
    events'). -> (pairs counted, median, p10, p90) in ns, or None."""
    pairs = pairs if pairs is not None else sm_pairs(evs)
    ends = {(e["program"], e["layer"]): e for e in evs
            if e["op"] == op and e["step"] == step and e.get("tiles", 0) > 0}
    gaps = []
    for (a, layer), first in ends.items():
        later = ends.get((pairs.get(a, -1), layer))
        if later is not None and later["program"] > a and later["tiles"] == first["tiles"]:
            gaps.append(later["end"] - first["end"])
    gaps.sort()
    if not gaps:
        return None
    n = len(gaps)
    return n, gaps[n // 2], gaps[n // 10], gaps[(9 * n) // 10]


def chrome_json(evs, path, scale_us=1e-3):
    """Chrome trace (chrome://tracing, Perfetto): one row per program; waits and work as slices."""
    out = []
    for e in evs:
        name = f"{e['op']} L{e['layer']}"
        if e["ready"] > e["start"]:
            out.append(dict(name="wait", cat="wait", ph="X", pid=0, tid=e["program"],
                            ts=e["start"] * scale_us, dur=(e["ready"] - e["start"]) * scale_us))
        out.append(dict(name=name, cat=e["op"], ph="X", pid=0, tid=e["program"],
                        ts=e["ready"] * scale_us, dur=(e["end"] - e["ready"]) * scale_us,
                        args=dict(step=e["step"], arg0=e["arg0"], tiles=e.get("tiles", 0),
                                  sm=e.get("sm", -1),
                                  **{k: e[k] for k in CHAIN_KEYS if k in e})))
    with open(path, "w") as f:
        json.dump({"traceEvents": out, "displayTimeUnit": "ns"}, f)


def load_chrome_json(path, scale_us=1e-3):
    """The events of a trace written by chrome_json (for analysis away from the GPU)."""
    with open(path) as f:
        out = json.load(f)["traceEvents"]
    waits = {(e["tid"], round(e["ts"] + e["dur"], 6)): e for e in out if e["name"] == "wait"}
    evs = []
    for e in out:
        if e["name"] == "wait":
            continue
        op, layer = e["name"].split(" L")
        w = waits.get((e["tid"], round(e["ts"], 6)))
        ready = round(e["ts"] / scale_us)
        evs.append(dict(program=e["tid"], step=e["args"]["step"], op=op, layer=int(layer),
                        arg0=e["args"].get("arg0", 0), tiles=e["args"].get("tiles", 0),
                        start=round(w["ts"] / scale_us) if w else ready, ready=ready,
                        end=ready + round(e["dur"] / scale_us), sm=e["args"].get("sm", -1),
                        **{k: e["args"][k] for k in CHAIN_KEYS if k in e["args"]}))
    return evs


def compare(named):
    """Per op, per trace: (wait, work) per program over the trace -- breakdown divided by the
    trace's programs -- plus the step span, for traces of the same model before and after a
    change. named: [(label, events), ...] -> ({op: [(wait, work), ...]}, [span, ...])."""
    ops, spans = {}, []
    for i, (_, evs) in enumerate(named):
        P = 1 + max(e["program"] for e in evs)
        spans.append(max(e["end"] for e in evs) - min(e["start"] for e in evs))
        for op, r in breakdown(evs).items():
            ops.setdefault(op, [(0.0, 0.0)] * len(named))[i] = (r["wait"] / P, r["work"] / P)
    order = [o.name for o in Op if o.name in ops]
    return {op: ops[op] for op in order}, spans


def compare_png(named, path, title="", scale=1e-3, unit="us"):
    """compare() as grouped bars: per op, each trace's wait (hatched) stacked under its work."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows, spans = compare(named)
    n = len(named)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, (label, _) in enumerate(named):
        xs = [k + (i - (n - 1) / 2) * width for k in range(len(rows))]
        wait = [v[i][0] * scale for v in rows.values()]
        work = [v[i][1] * scale for v in rows.values()]
        ax.bar(xs, wait, width, color=f"C{i}", alpha=0.45, hatch="//",
               label=f"{label}: wait (step {spans[i] * scale:.0f} {unit})")
        ax.bar(xs, work, width, bottom=wait, color=f"C{i}", label=f"{label}: work")
    ax.set_xticks(range(len(rows)), list(rows), fontsize=8)
    ax.set_ylabel(f"per program over the step ({unit})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def timeline_png(evs, path, title=""):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    seen = {e["op"] for e in evs}
    ops = [o.name for o in Op if o.name in seen]
    # a colour per op in the trace: tab20 less its two greys (the waits' light grey)
    palette = [plt.get_cmap("tab20")(j) for j in range(20) if j not in (14, 15)]
    colors = {o: palette[i % len(palette)] for i, o in enumerate(ops)}
    P = 1 + max(e["program"] for e in evs)
    fig, ax = plt.subplots(figsize=(14, max(3, P * 0.06 + 1)))
    bars = {}  # (program, colour) -> spans: one draw call per row and colour
    for e in evs:
        bars.setdefault((e["program"], "lightgrey"), []).append(
            (e["start"], e["ready"] - e["start"]))
        bars.setdefault((e["program"], colors[e["op"]]), []).append(
            (e["ready"], max(e["end"] - e["ready"], 1)))
    for (p, c), spans in bars.items():
        ax.broken_barh(spans, (p, 0.9), color=c)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[o]) for o in ops] + \
        [plt.Rectangle((0, 0), 1, 1, color="lightgrey")]
    ax.legend(handles, ops + ["wait"], fontsize=6, ncol=5, loc="upper right")
    ax.set_xlabel("time (ns on the GPU; logical ticks in the interpreter)")
    ax.set_ylabel("program")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def all_reduce_gaps(evs, step: int = 0):
    """Tensor parallelism: per all-reduce (layer, 0 = o_proj / 1 = down_proj), the time from this
    rank's last partial-sum task end to its first REDUCE task ready -- the push over NVLink, the
    flag round trip and any wait for the slower rank -- and the REDUCE phase's span. Returns
    {(layer, which): (gap, span)} in the trace's units."""
    out = {}
    prod = {0: "O_PROJ", 1: "DOWN"}
    for e in evs:
        if e["op"] != "REDUCE" or e["step"] != step:
            continue
        key = (e["layer"], e["arg0"])
        out.setdefault(key, []).append(e)
    res = {}
    for (layer, which), reds in out.items():
        last = max(e["end"] for e in evs if e["op"] == prod[which] and e["layer"] == layer
                   and e["step"] == step)
        first = min(e["ready"] for e in reds)
        res[(layer, which)] = (first - last, max(e["end"] for e in reds) - first)
    return res
