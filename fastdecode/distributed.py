"""Tensor parallelism: how weights shard over ranks, and the decode step as phases separated by
all-reduces, run here over N virtual ranks in one process (the reference the in-kernel NVLink
all-reduce will be tested against).

Sharding (Megatron-style, sized from the config):
    QKV      column-parallel by KV-head groups: rank r holds KV heads [r*KVH/W, (r+1)*KVH/W) and
             their q heads (GQA groups never split), so attention needs no communication
    gate|up  column-parallel: rows [r*F/W, (r+1)*F/W) of gate and of up (SwiGLU stays local)
    O, down  row-parallel: the matching input columns; each rank's output is a partial sum
    lm_head  vocab-parallel: rows [r*ceil(V/W), ...); the token choice is a cross-rank argmax
    norms, embedding: replicated. Biases of O and down live on rank 0 (added once).
Each partial sum is all-reduced in fp32, summed in rank order, so every rank holds bit-identical
activations (DESIGN.md). KV heads are not replicated: tp must divide num_key_value_heads.
"""
from __future__ import annotations

import dataclasses

import torch

from . import reference as R
from .packing import PackedWeights
from .spec import ModelSpec


class TensorParallelError(ValueError):
    """A tensor-parallel size the model's dimensions do not allow."""


def check_tp(spec: ModelSpec, world: int):
    if not isinstance(world, int) or world < 1:
        raise TensorParallelError(f"tensor-parallel size must be a positive integer, got {world!r}")
    for what, n in (("num_key_value_heads", spec.n_kv_heads), ("num_attention_heads", spec.n_heads),
                    ("intermediate_size", spec.ffn_dim)):
        if n % world:
            raise TensorParallelError(
                f"tp={world} does not divide {what}={n}"
                + (" (KV heads are not replicated across ranks)" if "key_value" in what else ""))


def vocab_range(spec: ModelSpec, rank: int, world: int) -> tuple[int, int]:
    per = -(-spec.vocab_size // world)
    return min(rank * per, spec.vocab_size), min((rank + 1) * per, spec.vocab_size)


def shard_spec(spec: ModelSpec, rank: int, world: int) -> ModelSpec:
    v0, v1 = vocab_range(spec, rank, world)
    return dataclasses.replace(spec, n_heads=spec.n_heads // world,
                               n_kv_heads=spec.n_kv_heads // world,
                               ffn_dim=spec.ffn_dim // world, vocab_size=v1 - v0)


def shard(pw: PackedWeights, rank: int, world: int) -> PackedWeights:
    """Rank `rank`'s slice of every weight (copies, contiguous)."""
    s = pw.spec
    check_tp(s, world)
    hd, kvh, h = s.head_dim, s.n_kv_heads // world, s.n_heads // world
    q_rows = torch.arange(rank * h * hd, (rank + 1) * h * hd)
    k_rows = s.q_dim + torch.arange(rank * kvh * hd, (rank + 1) * kvh * hd)
    qkv_rows = torch.cat([q_rows, k_rows, k_rows + s.kv_dim]).to(pw.device)
    f = s.ffn_dim // world
    gu_rows = torch.cat([torch.arange(rank * f, (rank + 1) * f),
                         s.ffn_dim + torch.arange(rank * f, (rank + 1) * f)]).to(pw.device)
    v0, v1 = vocab_range(s, rank, world)
    c = lambda t: None if t is None else t.contiguous()  # noqa: E731
    first = lambda b: None if b is None else (b if rank == 0 else torch.zeros_like(b))  # noqa
    return PackedWeights(
        spec=shard_spec(s, rank, world), embed=pw.embed, lm_head=c(pw.lm_head[v0:v1]),
        final_norm=pw.final_norm, attn_norm=pw.attn_norm, mlp_norm=pw.mlp_norm,
        w_qkv=c(pw.w_qkv[:, qkv_rows]), w_o=c(pw.w_o[:, :, rank * h * hd:(rank + 1) * h * hd]),
        w_gu=c(pw.w_gu[:, gu_rows]), w_down=c(pw.w_down[:, :, rank * f:(rank + 1) * f]),
        b_qkv=c(None if pw.b_qkv is None else pw.b_qkv[:, qkv_rows]), b_o=first(pw.b_o),
        b_gu=c(None if pw.b_gu is None else pw.b_gu[:, gu_rows]), b_down=first(pw.b_down),
        qk_norm=pw.qk_norm)


def all_reduce_fp32(parts):
    """Sum of the ranks' partial vectors in fp32, in rank order: the same bits on every rank."""
    out = parts[0].float().clone()
    for p in parts[1:]:
        out += p.float()
    return out


class RankModel:
    """One rank's shard, KV cache and the step's phases (reference ops, fp32 math)."""

    def __init__(self, pw: PackedWeights, max_seq_len: int):
        self.pw, self.spec = pw, pw.spec
        s = self.spec
        shape = (s.n_layers, s.n_kv_heads, max_seq_len, s.head_dim)
        self.k_cache = torch.zeros(shape, device=pw.device, dtype=pw.dtype)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.cos, self.sin = (t.to(pw.device) for t in s.rope_table(max_seq_len))

    def attn_partial(self, l, h, pos):
        s, pw = self.spec, self.pw
        pick = lambda t: None if t is None else t[l]  # noqa: E731
        q = R.qkv_rope(h, pw.w_qkv[l], pw.attn_norm[l], self.cos, self.sin, pos, self.k_cache[l],
                       self.v_cache[l], n_heads=s.n_heads, eps=s.rms_eps, bias=pick(pw.b_qkv),
                       qk_norm=pick(pw.qk_norm))
        o = R.attention(q.to(pw.dtype), self.k_cache[l], self.v_cache[l], pos,
                        window=s.layer_windows[l])
        return R.gemv(o.to(pw.dtype), pw.w_o[l], bias=pick(pw.b_o))

    def mlp_partial(self, l, h):
        s, pw = self.spec, self.pw
        pick = lambda t: None if t is None else t[l]  # noqa: E731
        act = R.gemv(h, pw.w_gu[l], norm_w=pw.mlp_norm[l], eps=s.rms_eps, bias=pick(pw.b_gu),
                     swiglu=True).to(pw.dtype)
        return R.gemv(act, pw.w_down[l], bias=pick(pw.b_down))

    def logits_shard(self, h):
        return R.gemv(h, self.pw.lm_head, norm_w=self.pw.final_norm, eps=self.spec.rms_eps)


class VirtualTP:
    """N ranks in one process, run in lockstep: every phase on every rank, then the all-reduce."""

    def __init__(self, pw: PackedWeights, world: int, max_seq_len: int = 256):
        check_tp(pw.spec, world)
        self.world, self.spec, self.dtype = world, pw.spec, pw.dtype
        self.ranks = [RankModel(shard(pw, r, world), max_seq_len) for r in range(world)]
        self.embed = pw.embed
        self.pos = 0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] -> fp32 logits [T, V] (the vocab shards gathered in rank order)."""
        T = ids.shape[0]
        h = self.embed[ids.long()].clone()
        for l in range(self.spec.n_layers):
            o = all_reduce_fp32([r.attn_partial(l, h, self.pos) for r in self.ranks])
            h = (h.float() + o).to(self.dtype)
            d = all_reduce_fp32([r.mlp_partial(l, h) for r in self.ranks])
            h = (h.float() + d).to(self.dtype)
        self.pos += T
        return torch.cat([r.logits_shard(h) for r in self.ranks], dim=-1)

    @staticmethod
    def choose(logit_shards):
        """Cross-rank argmax: each rank's (max, global id), merged in rank order, lowest id on
        ties -- the token every rank agrees on."""
        best, tok, base = None, None, 0
        for lg in logit_shards:
            v, i = lg.max(-1)
            if best is None or v > best:
                best, tok = v, int(i) + base
            base += lg.shape[-1]
        return tok
