"""THE table of megakernel task opcodes: names, values, instruction words and cost model.

The kernel's constexpr opcode values, the graph builder, the scheduler, the VM and the trace all
read this one table; nothing else spells an opcode number.

An instruction is WORDS int32s:
    [opcode, layer, arg0, arg1, arg2, wait_counter, wait_producers, wait_epoch_offset, signal_counter]
(a mixture of experts' layer word: the layer below LAYER_BITS, above them its place in the stacks
of its MLP -- the expert stacks', or its dense layers' own: ModelSpec.expert_index / dense_index)
The task waits until counters[wait_counter] >= (epoch + wait_epoch_offset) * wait_producers (counters
only grow: nothing is reset between steps or launches), runs, then adds 1 to counters[signal_counter]
with release semantics.

Tensor parallelism adds REMOTE counters, encoded as negative numbers c = -1 - x: they live in every
rank's symmetric buffer, one word per (x, source rank). A task signalling c adds 1 (system-scope
release) to word [x, my rank] of EVERY rank; a task waiting on c waits for word [x, q] of its own
buffer to reach the target for every rank q in order (so a timeout names the silent rank).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Op(IntEnum):
    EMBED = 1      # arg0 = first token row, arg1 = last row (exclusive): h[t] = E[ids[t]]
    QKV = 2        # arg0 = KV group g, [arg1, arg2) = tile range in the group: QKV + RoPE + append
    ATTN = 3       # arg0 = KV head, arg1 = split, arg2 = token block: split-KV partial attention
    MERGE = 4      # arg0 = KV head, [arg1, arg2) = its q heads within the group: LSE merge of
                   # their splits, all tokens
    O_PROJ = 5     # arg0 = token block, [arg1, arg2) = row tiles: h += attn @ Wo^T
    GATE_UP = 6    # arg0 = token block, [arg1, arg2) = row tiles: act = silu(g) * u, RMSNorm prologue
    DOWN = 7       # arg0 = token block, [arg1, arg2) = row tiles: h += act @ Wd^T
    LM_HEAD = 8    # arg0 = token block * n_vparts + part, [arg1, arg2) = vocab tiles: logits and
                   # one partial argmax per token row, final RMSNorm prologue
    CHOOSE = 9     # arg0 = n_vparts: merge the partials, write token, advance position / step
                   # (tensor parallelism: every rank's partials, in rank order)
    QKNORM = 11    # arg0 = KV group: q/k RMSNorm + RoPE of its q heads and k head from the raw fp32
                   # QKV outputs (decode with q/k norm: QKV tiles stay small, heads split)
    REDUCE = 10    # arg0 = which (0: o_proj, 1: down_proj), [arg1, arg2) = column blocks: h += the
                   # ranks' partial sums, in rank order in fp32 (tensor parallelism only)
    QKV_ATTN = 12  # QKV's args; the task completing group arg0's tiles (qticket) then norms
                   # (deferred q/k norm) and runs the group's attention over all keys, one split
                   # (short-context decode: no ATTN / MERGE tasks)
    QKN_ATTN = 16  # arg0 = KV group: its q / k norm over all heads (OLMo 2, OLMoE: the layer's
                   # QKV tiles waited for) and RoPE, then its attention over all keys, one split
                   # (short-context decode of such a model: no QKNORM / ATTN / MERGE tasks)
    # a mixture of experts' MLP (decode, one rank): graph.py
    ROUTER = 13       # [arg1, arg2) = row tiles of the router: z = norm(h) @ Wr^T (fp32), its
                      # E logits (and the shared expert's gate logit)
    EXPERT_GU = 14    # arg0 = routed slot j (top_k: the shared expert), [arg1, arg2) = row tiles:
                      # the routing of z (every such task alike), then act_j = act(g) * u through
                      # expert ids[j]'s gate|up rows
    EXPERT_DOWN = 15  # [arg1, arg2) = row tiles of d_model: h += sum_j w_j W_down[ids[j]] act_j
                      # (+ s W_shared act_shared), fp32, rounded once (moe.experts_down_body)


WORDS = 9
F_OP, F_LAYER, F_A0, F_A1, F_A2, F_WAIT, F_WAIT_N, F_WAIT_OFF, F_SIGNAL = range(WORDS)
LAYER_BITS = 16
# a traced task's record (megakernel TRACE, Runtime.trace_decode, trace.events): start, ready
# (wait over), end (published) timestamps, the SM its program ran on; then, a task that takes a
# KV group's ticket (QKV_ATTN, NORM_IN_QKV), its tiles' end (before the ticket) and, the one that
# completes the group, the ticket's return, the group's q / k normed (its attention starts) and
# its attention's output stored (its publish starts; 0: not those)
TRACE_WORDS = 8
T_START, T_READY, T_END, T_SM, T_TILES, T_TICKET, T_NORMED, T_ATTENDED = range(TRACE_WORDS)


@dataclass(frozen=True)
class Cost:
    """Relative cost of a tile: bytes streamed (weights) plus a fixed per-task overhead in bytes
    equivalents (wait + barrier + release, ~1 us at ~4 TB/s ~ 4 MB is pessimistic; 64 KB keeps
    many-tile tasks dominant). Used only to balance queues. Measured (trace.task_costs, Llama-3.2-1B
    on an H200 at b48cad6, bench/RESULTS.md session 13): DOWN tasks' fitted overhead 1.86 us at
    21.8 GB/s per program, ~40 KB of bytes equivalents; O_PROJ's ~0 -- the same order as 64 KB,
    and a per-task constant barely moves the assignment of a phase of near-equal tasks."""
    task_overhead_bytes: int = 64 * 1024
    # a REDUCE task's column block (elements of d_model): W x 1 KB of fp32 partials per task, so
    # an 8B shape's 4096-wide all-reduce spreads its flag waits over 16 programs
    reduce_block: int = 256


COST = Cost()
