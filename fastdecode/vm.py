"""The task stream executed with torch ops: the same encoded queues the megakernel runs, in queue
order or in a random legal interleaving of the per-program queues. Each task computes exactly its
tiles from what the buffers hold when it runs, so a missing or mis-ordered dependency shows up as a
wrong result (DESIGN.md: the `vm` rung of the debugging ladder)."""
from __future__ import annotations

import random

import torch
import triton

from . import reference as R
from .opcodes import COST, Op
from .schedule import Schedule, interleave
from .triton_kernels.attention import split_range_host
from .triton_kernels.gemv import act_operand_rows


def qkv_slot(spec, tiling, g, u):
    """Group-local QKV tile index u -> (head slot j, pair chunk c, token block tb)."""
    tb = u % tiling.n_t()
    rest = u // tiling.n_t()
    c = rest % tiling.qkv_chunks
    sg = rest // tiling.qkv_chunks
    H, KVH, G = spec.n_heads, spec.n_kv_heads, spec.group
    j = g * G + sg if sg < G else (H + g if sg == G else H + KVH + g)
    return j, c, tb


class VM:
    def __init__(self, runtime):
        self.rt = runtime
        self.pw, self.st, self.spec = runtime.pw, runtime.state, runtime.spec

    def run_step(self, sched: Schedule, sampling, rng: random.Random | None = None):
        tasks = sched.graph.tasks
        self.tiling = sched.graph.tiling
        self.n_vparts = sched.graph.n_vparts
        self.pos = int(self.st.pos)
        # ("a" | "q", layer, KV group) -> ATTN tasks / QKV tiles done this step (merge_in_attn,
        # norm_in_qkv)
        self.tickets = {}
        for p, k, _ in interleave(sched, 1, rng):
            self.execute(tasks[sched.queues[p][k]], sampling)

    def _tokens(self, tb, block):
        T = self.tiling.T
        return torch.arange(tb * block, min(T, (tb + 1) * block), device=self.st.h.device)

    def execute(self, task, sampling):
        s, pw, st, tg = self.spec, self.pw, self.st, self.tiling
        l, (a0, a1, a2) = task.layer, task.args
        dt = pw.dtype
        pick = lambda t: None if t is None else t[l]  # noqa: E731
        if task.op == Op.EMBED:
            for t in range(a0, a1):
                st.h[t] = pw.embed_rows(int(st.ids[t]), self.pos + t)
        elif task.op in (Op.QKV, Op.QKV_ATTN):
            HD, half = s.head_dim, s.head_dim // 2
            for u in range(a1, a2):
                j, c, tb = qkv_slot(s, tg, a0, u)
                toks = self._tokens(tb, tg.block_t)
                rows = slice(j * HD, (j + 1) * HD)
                b = pick(pw.b_qkv)
                y = R.gemv(st.h[toks], pw.matrix("qkv", l)[rows], norm_w=pw.pre_norm(0, l),
                           eps=s.rms_eps, bias=None if b is None else b[rows])[:, None]
                is_q, is_k = j < s.n_heads, s.n_heads <= j < s.n_heads + s.n_kv_heads
                sel = torch.arange(c * tg.qkv_pairs, min(half, (c + 1) * tg.qkv_pairs),
                                   device=st.h.device)
                cols = torch.cat([sel, sel + half])
                if tg.qk_defer and (is_q or is_k):  # raw rows; QKNORM finishes the heads
                    st.qk_raw[toks[:, None], j, cols[None]] = y[:, 0][:, cols].float()
                    continue
                if is_q or is_k:
                    p = self.pos + toks
                    cos, sin = st.rope.layer(l)
                    w = None if pw.qk_norm is None else pw.qk_norm[l, j:j + 1]
                    y = R.norm_rope(y, w, cos[p], sin[p], s.rms_eps, s.qk_norm_after)
                y = y[:, 0]
                if is_q:
                    st.q[toks[:, None], j, cols[None]] = y[:, cols].to(dt)
                else:
                    cache = st.k_cache if is_k else st.v_cache
                    kv = j - s.n_heads - (0 if is_k else s.n_kv_heads)
                    cache[l, kv, (self.pos + toks)[:, None], cols[None]] = y[:, cols].to(dt)
            # the task that completes the group's tiles norms it (deferred q/k norm) and, in a
            # short-context decode step, runs its attention
            if tg.norm_in_qkv or task.op == Op.QKV_ATTN:
                n = self.tickets[("q", l, a0)] = self.tickets.get(("q", l, a0), 0) + a2 - a1
                if n == tg.qkv_group_tiles(s.group):
                    if tg.qk_defer:
                        self._qknorm(l, a0)
                    if task.op == Op.QKV_ATTN:
                        self._attend(l, a0)
        elif task.op == Op.QKNORM:
            self._qknorm(l, a0)
        elif task.op == Op.QKN_ATTN:  # norms over all heads: the layer's QKV tasks waited for
            self._qknorm(l, a0)
            self._attend(l, a0)
        elif task.op == Op.ATTN:
            kv, split, tb = a0, a1, a2
            toks = self._tokens(tb, tg.attn_block_tok)
            heads = slice(kv * s.group, (kv + 1) * s.group)
            if len(toks):
                first, chunk = split_range_host(self.pos, tg.T, s.layer_windows[l], tg.n_splits,
                                                tg.attn_block_s)
                k0 = first + split * chunk
                k1 = min(k0 + chunk, self.pos + int(toks[-1]) + 1)
                o, lse = R.attention_partial(st.q[toks, heads], st.k_cache[l, kv],
                                             st.v_cache[l, kv], self.pos + toks, k0, k1,
                                             s.layer_windows[l], softcap=s.attn_softcap,
                                             qscale=s.q_pos_scale,
                                             alibi=self._slopes(heads), alibi_kind=s.alibi)
                st.o_part[split, toks, heads] = o
                st.lse[split, toks, heads] = lse
            if tg.merge_in_attn:  # the group's last ATTN task merges it
                n = self.tickets[("a", l, kv)] = self.tickets.get(("a", l, kv), 0) + 1
                if n == tg.attn_group_tasks():
                    self._merge(l, kv)
        elif task.op == Op.MERGE:
            self._merge(l, a0, a1, a2)
        elif task.op in (Op.O_PROJ, Op.GATE_UP, Op.DOWN, Op.LM_HEAD):
            N = {Op.O_PROJ: s.d_model, Op.GATE_UP: st.mlp_act(l).shape[1], Op.DOWN: s.d_model,
                 Op.LM_HEAD: s.vocab_size}[task.op]
            tb = a0 // self.n_vparts if task.op == Op.LM_HEAD else a0
            r = tg.gemv_rows(task.op)
            rows = torch.arange(a1 * r, min(N, a2 * r), device=st.h.device)
            if tg.parted and task.op in (Op.O_PROJ, Op.DOWN):
                self._k_part(task.op, l, *divmod(a0, tg.ksplit), rows)
            else:
                self._gemv_tile(task.op, l, self._tokens(tb, tg.block_t), rows)
        elif task.op in (Op.ROUTER, Op.EXPERT_GU, Op.EXPERT_DOWN):
            self._moe_task(task.op, l, a0, a1, a2)
        elif task.op == Op.REDUCE:  # one rank (the VM's): the K parts of a0's tiles
            cols = torch.arange(a1 * COST.reduce_block, min(s.d_model, a2 * COST.reduce_block),
                                device=st.h.device)
            parts = self._parts()[a0, :, :tg.T]  # every column: a post norm's sum of squares
            b = pick((pw.b_o, pw.b_down)[a0])
            acc = parts.sum(0) if b is None else parts.sum(0) + b.float()
            acc = R.block_out(acc, pw.post_norm(a0, l), s.rms_eps)[:, cols]
            st.h[:tg.T, cols] = (st.h[:tg.T, cols].float() + acc).to(dt)
        elif task.op == Op.CHOOSE:
            T = tg.T
            last = st.logits[T - 1:T]
            if sampling.do_sample:
                last = R.filter_logits(last / sampling.temperature, sampling.top_k, sampling.top_p)
            tok = R.choose(last, sample=sampling.do_sample, generator=self.rt._gen)
            st.ids[0] = tok
            st.hist[int(st.step)] = tok
            st.step += 1
            st.pos += T

    def _qknorm(self, l, kv):
        """q/k RMSNorm + RoPE of KV group kv's q heads and k head from the raw QKV rows."""
        s, pw, st, tg = self.spec, self.pw, self.st, self.tiling
        p = self.pos + torch.arange(tg.T, device=st.h.device)
        cos, sin = st.rope.layer(l)
        raw = st.qk_raw[:tg.T]
        if s.qk_norm_full:  # over every group's heads (all QKV tasks of the layer waited for)
            H = s.n_heads
            raw = torch.cat([R.heads_norm(raw[:, :H], pw.qk_norm[l, :H], s.rms_eps),
                             R.heads_norm(raw[:, H:], pw.qk_norm[l, H:], s.rms_eps)], 1)
        for j in [kv * s.group + i for i in range(s.group)] + [s.n_heads + kv]:
            is_q = j < s.n_heads
            w = None if s.qk_norm_full else pw.qk_norm[l, j:j + 1]
            y = R.norm_rope(raw[:, j][:, None], w, cos[p], sin[p], s.rms_eps,
                            s.qk_norm_after)[:, 0].to(pw.dtype)
            if is_q:
                st.q[:tg.T, j] = y
            else:
                st.k_cache[l, j - s.n_heads, p] = y

    def _attend(self, l, kv):
        """KV group kv's attention over every key, one split, every token: the output itself."""
        s, st, T = self.spec, self.st, self.tiling.T
        heads = slice(kv * s.group, (kv + 1) * s.group)
        toks = self._tokens(0, T)
        o, _ = R.attention_partial(st.q[toks, heads], st.k_cache[l, kv], st.v_cache[l, kv],
                                   self.pos + toks, 0, self.pos + T, s.layer_windows[l],
                                   softcap=s.attn_softcap, qscale=s.q_pos_scale,
                                   alibi=self._slopes(heads), alibi_kind=s.alibi)
        st.attn[:T].view(T, s.n_heads, s.head_dim)[:, heads] = o.to(self.pw.dtype)

    def _moe_task(self, op, l, j, a1, a2):
        """A mixture's decode tasks (graph.moe_tasks) on the step's row: the router's logit rows
        [a1, a2) tiles; slot j's gate|up rows through its routed expert (the routing recomputed
        from the logits, as every EXPERT_GU task does; j = top_k: the shared expert's); the
        residual's rows plus every routed expert's down rows times its weight (and the shared
        expert's times its scale)."""
        s, pw, st, tg = self.spec, self.pw, self.st, self.tiling
        dev, x = st.h.device, st.h[:1]

        def tile(r, n):
            return torch.arange(a1 * r, min(n, a2 * r), device=dev)
        if op == Op.ROUTER:
            rows = tile(tg.gemv_rows(Op.ROUTER), st.router.shape[1])
            st.router[:1, rows] = R.gemv(x, pw.w_router[s.expert_index(l)][rows],
                                         norm_w=pw.pre_norm(1, l), eps=s.rms_eps).float()
            return
        ids, w, scale = R.route(st.router[:1], s.top_k, s.norm_topk, s.ffn_dim > 0,
                                **R.router_args(pw, l))
        if op == Op.EXPERT_GU:
            shared = j == s.top_k
            F = s.ffn_dim if shared else s.expert_ffn
            rows = tile(tg.rows_e, F)
            m = pw.matrix("gu", l) if shared else pw.expert_matrix(0, l, int(ids[0, j]))
            out = st.act if shared else st.moe_act[j:]
            out[:1, rows] = R.gemv(x, m[torch.cat([rows, rows + F])], norm_w=pw.pre_norm(1, l),
                                   eps=s.rms_eps, swiglu=True, act=s.act).to(pw.dtype)
            return
        rows = tile(tg.moe_rows, s.d_model)
        y = sum(w[0, i] * R.gemv(st.moe_act[i:i + 1], pw.expert_matrix(1, l, int(e))[rows])
                .float()[0] for i, e in enumerate(ids[0].tolist()))
        if s.ffn_dim:
            y = y + scale[0] * R.gemv(st.act[:1], pw.matrix("down", l)[rows]).float()[0]
        st.h[0, rows] = (st.h[0, rows].float() + y).to(pw.dtype)

    def _slopes(self, heads):
        """The ALiBi slopes of this rank's q heads `heads` (None: no ALiBi)."""
        return None if self.pw.alibi is None else self.pw.alibi[heads]

    def _merge(self, l, kv, g0=0, g1=None):
        """The LSE merge of layer l's KV group kv's splits, for its q heads [g0, g1) (all by
        default) and every token."""
        s, st, tg = self.spec, self.st, self.tiling
        heads = slice(kv * s.group + g0, kv * s.group + (s.group if g1 is None else g1))
        T = tg.T
        k0, chunk = split_range_host(self.pos, T, s.layer_windows[l], tg.n_splits,
                                     tg.attn_block_s)
        n_act = min(tg.n_splits, triton.cdiv(self.pos + T - k0, chunk))
        o = R.merge_partials(st.o_part[:n_act, :T, heads], st.lse[:n_act, :T, heads])
        st.attn[:T].view(T, s.n_heads, s.head_dim)[:, heads] = o.to(self.pw.dtype)

    def _parts(self):
        """The o / down tiles' K parts' partial sums [2, ksplit, TM, d_model] (State.kpart)."""
        st = self.st
        return st.kpart[:2 * self.tiling.ksplit * st.h.numel()].view(
            2, self.tiling.ksplit, *st.h.shape)

    def _k_part(self, op, l, tb, kp, rows):
        """K part kp of an o / down task's tiles (graph.Tiling.ksplit): the partial sums of its
        whole K chunks (gemv.gemv_tile's split), fp32, no bias or residual."""
        pw, tg = self.pw, self.tiling
        x, w, bk = ((self.st.attn, "o", tg.bk_q) if op == Op.O_PROJ else
                    (self.st.act, "down", tg.bk_f))
        K = x.shape[1]
        per = triton.cdiv(triton.cdiv(K, bk), tg.ksplit) * bk
        k = slice(min(K, kp * per), min(K, (kp + 1) * per))
        toks = self._tokens(tb, tg.block_t)
        self._parts()[int(op == Op.DOWN), kp, toks[:, None], rows[None]] = R.gemv(
            x[toks, k], pw.matrix(w, l)[rows][:, k])

    def _gemv_tile(self, op, l, toks, rows):
        s, pw, st = self.spec, self.pw, self.st
        dt = pw.dtype
        pick = lambda t: None if t is None else t[l]  # noqa: E731
        ix = (toks[:, None], rows[None])
        if op == Op.O_PROJ:
            b = pick(pw.b_o)
            st.h[ix] = R.gemv(st.attn[toks], pw.matrix("o", l)[rows],
                              bias=None if b is None else b[rows], residual=st.h[ix]).to(dt)
        elif op == Op.GATE_UP:
            act = st.mlp_act(l)  # (its width: the layer's MLP's)
            both = torch.cat([rows, rows + act.shape[1]])
            b = pick(pw.b_gu)  # (gate's and up's rows, or xIELU's parameters': two of them)
            b_rows = both if act_operand_rows(s.act, s.gated) == 2 else rows
            act[ix] = R.gemv(st.h[toks], pw.matrix("gu", l)[both if s.gated else rows],
                             norm_w=pw.pre_norm(1, l), eps=s.rms_eps,
                             bias=None if b is None else b[b_rows],
                             swiglu=True, act=s.act, gated=s.gated).to(dt)
        elif op == Op.DOWN:
            b = pick(pw.b_down)
            st.h[ix] = R.gemv(st.mlp_act(l)[toks], pw.matrix("down", l)[rows],
                              bias=None if b is None else b[rows], residual=st.h[ix]).to(dt)
        else:
            st.logits[ix] = R.head_logits(pw, st.h[toks], rows)
