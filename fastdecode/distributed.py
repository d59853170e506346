"""Tensor parallelism: how weights shard over ranks, and the decode step as phases separated by
all-reduces, run here over N virtual ranks in one process (the reference the in-kernel NVLink
all-reduce will be tested against).

Sharding (Megatron-style, sizes from ModelSpec.shard; packing.pack reads a rank's slices):
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

import torch

from . import reference as R
from .packing import PackedWeights, pack
from .spec import ModelSpec, TensorParallelError  # noqa: F401  (re-exported)


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
        return R.attention_block(self.pw, l, h, pos, self.k_cache[l], self.v_cache[l], self.cos,
                                 self.sin)

    def mlp_partial(self, l, h):
        return R.mlp_block(self.pw, l, h)

    def logits_shard(self, h):
        return R.gemv(h, self.pw.lm_head, norm_w=self.pw.final_norm, eps=self.spec.rms_eps)


class VirtualTP:
    """N ranks in one process, run in lockstep: every phase on every rank, then the all-reduce.
    Each rank packs only its own shard from get(hf_name, index) (packing.pack)."""

    def __init__(self, spec: ModelSpec, get, world: int, *, device="cpu", dtype=torch.float32,
                 max_seq_len: int = 256):
        spec.check_tp(world)
        self.world, self.spec, self.dtype = world, spec, dtype
        shards = [pack(spec, get, device=device, dtype=dtype, rank=r, world=world)
                  for r in range(world)]
        self.ranks = [RankModel(pw, max_seq_len) for pw in shards]
        self.embed = shards[0].embed
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


# ---- real processes (torchrun): one rank per process ------------------------------------------

class TorchCollectives:
    """all_reduce / gather_vocab over torch.distributed (gloo on CPU, NCCL on GPU). The all-reduce
    gathers every rank's partial and sums in rank order in fp32 (bit-identical on every rank),
    the reference for the in-kernel NVLink all-reduce."""

    def __init__(self, spec: ModelSpec, group=None):
        import torch.distributed as dist
        self.dist, self.group = dist, group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.spec = spec

    def all_reduce(self, x):
        parts = [torch.empty_like(x) for _ in range(self.world)]
        self.dist.all_gather(parts, x.contiguous(), group=self.group)
        return all_reduce_fp32(parts)

    def gather_vocab(self, x):
        per = -(-self.spec.vocab_size // self.world)
        pad = torch.full((*x.shape[:-1], per), float("-inf"), device=x.device, dtype=x.dtype)
        pad[..., :x.shape[-1]] = x
        parts = [torch.empty_like(pad) for _ in range(self.world)]
        self.dist.all_gather(parts, pad, group=self.group)
        return torch.cat(parts, -1)[..., :self.spec.vocab_size]


def init(tp: int):
    """Join (or start) the torchrun process group; -> (rank, world, device). NVLink multicast is
    kept off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1)."""
    import os

    import torch.distributed as dist
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            raise TensorParallelError(f"tp={tp} needs one process per rank: start it with "
                                      f"torchrun --nproc-per-node {tp} ...")
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    world = dist.get_world_size()
    if world != tp:
        raise TensorParallelError(f"tp={tp} but {world} processes were started")
    rank = dist.get_rank()
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def peer_buffers(capacity: int, group=None, block: int = 1024):
    """This rank's PeerBuffers for ops.all_reduce in PyTorch symmetric memory (CUDA, NVLink
    peer-to-peer; multicast kept off): one symmetric allocation per rank -- fp32 data slots, then
    the int32 flags -- and tables of every rank's mapped address of it. Collective: every rank of
    `group` calls it with the same arguments. capacity: the longest vector reduced."""
    import math
    import os

    import torch.distributed as dist
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch.distributed._symmetric_memory as symm_mem

    from .triton_kernels.all_reduce import PeerBuffers
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    dshape, fshape = PeerBuffers.shapes(world, capacity, block)
    n_data, n_flags = math.prod(dshape), math.prod(fshape)
    dev = torch.device("cuda", torch.cuda.current_device())
    buf = symm_mem.empty(n_data + n_flags, dtype=torch.float32, device=dev)
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before rendezvous in torch < 2.8
        symm_mem.enable_symm_mem_for_group(group.group_name)
    handle = symm_mem.rendezvous(buf, group.group_name)
    buf.zero_()  # flags start at 0: invocation 1 is the first a rank waits for
    torch.cuda.synchronize()
    dist.barrier(group)  # no rank pushes before every rank has zeroed its buffer
    data = buf[:n_data].view(dshape)
    flags = buf[n_data:].view(torch.int32).view(fshape)
    ptrs = [int(p) for p in handle.buffer_ptrs]
    data_tab = torch.tensor(ptrs, device=dev, dtype=torch.int64)
    flag_tab = torch.tensor([p + 4 * n_data for p in ptrs], device=dev, dtype=torch.int64)
    return PeerBuffers(data, flags, data_tab, flag_tab, dist.get_rank(group), world, block)
