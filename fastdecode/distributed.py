"""Tensor parallelism: how weights shard over ranks, and the decode step as phases separated by
all-reduces, run here over N virtual ranks in one process (the reference the in-kernel NVLink
all-reduce will be tested against).

Sharding (Megatron-style, sizes from ModelSpec.shard; packing.pack reads a rank's slices):
    QKV      column-parallel by KV-head groups: rank r holds KV heads [r*KVH/W, (r+1)*KVH/W) and
             their q heads (GQA groups never split), so attention needs no communication; when
             W is a multiple of KVH, rank r holds q heads [r*H/W, (r+1)*H/W) and the one KV head
             they read, KV head r*KVH/W, replicated on W/KVH ranks (its K / V rows and cache on
             each: W/KVH times the KV bytes, as vLLM does), so again no communication
    gate|up  column-parallel: rows [r*F/W, (r+1)*F/W) of gate and of up (SwiGLU stays local)
    O, down  row-parallel: the matching input columns; each rank's output is a partial sum
    experts  a mixture's: each expert as a dense MLP (its gate / up rows and down columns of
             [r*Fe/W, (r+1)*Fe/W)), the router replicated, so every rank routes alike; their
             down biases on rank 0 (packing.pack's expert_shard)
    lm_head  vocab-parallel: rows [r*ceil(V/W), ...); the token choice is a cross-rank argmax
    norms, embedding: replicated. Biases of O and down live on rank 0 (added once).
Each partial sum is all-reduced in fp32, summed in rank order, so every rank holds bit-identical
activations (DESIGN.md). tp must divide the heads and the FFN, and divide the KV heads or be a
multiple of them (ModelSpec.check_tp).
"""
from __future__ import annotations

import torch

from . import reference as R
from .packing import PackedWeights, pack
from .spec import ModelSpec, TensorParallelError  # noqa: F401  (re-exported)
from .state import RopeTables


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
        self.rope = RopeTables(s, max_seq_len, pw.device)

    def attn_partial(self, l, h, pos):
        return R.attention_block(self.pw, l, h, pos, self.k_cache[l], self.v_cache[l],
                                 *self.rope.layer(l))

    def mlp_partial(self, l, h):
        return R.mlp_block(self.pw, l, h)

    def logits_shard(self, h):
        return R.head_logits(self.pw, h)


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
        self.embed = shards[0].embed_rows
        self.pos = 0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] -> fp32 logits [T, V] (the vocab shards gathered in rank order)."""
        T = ids.shape[0]
        pos = torch.arange(self.pos, self.pos + T, device=ids.device)
        h = self.embed(ids.long(), pos).clone()
        pw, eps = self.ranks[0].pw, self.spec.rms_eps  # the post norms: replicated
        for l in range(self.spec.n_layers):
            o = all_reduce_fp32([r.attn_partial(l, h, self.pos) for r in self.ranks])
            x = h  # parallel blocks (ModelSpec.parallel): the MLP reads the layer's input
            h = (h.float() + R.block_out(o, pw.post_norm(0, l), eps)).to(self.dtype)
            d = all_reduce_fp32([r.mlp_partial(l, x if self.spec.parallel else h)
                                 for r in self.ranks])
            h = (h.float() + R.block_out(d, pw.post_norm(1, l), eps)).to(self.dtype)
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
    the reference for the in-kernel NVLink all-reduce. symmetric(): the megakernel's buffer."""

    def __init__(self, spec: ModelSpec, group=None):
        import torch.distributed as dist
        self.dist, self.group = dist, group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.spec = spec
        # the megakernel's all-reduce maps the peers' GPU memory (symmetric memory over NVLink)
        self.peer_to_peer = dist.get_backend(group) == "nccl"

    def all_reduce(self, x):
        parts = [torch.empty_like(x) for _ in range(self.world)]
        self.dist.all_gather(parts, x.contiguous(), group=self.group)
        return all_reduce_fp32(parts)

    def symmetric(self, n_words: int):
        """(this rank's int32 [n_words] buffer, int64 table of every rank's address of its own,
        every rank's buffer as a tensor mapped here) in PyTorch symmetric memory (NVLink
        peer-to-peer, multicast off), zeroed on every rank before any rank returns. Collective."""
        return symmetric_alloc(n_words, self.group)

    def gather_vocab(self, x):
        per = self.spec.vocab_range(0, self.world)[1]  # rank 0's shard: the largest
        pad = torch.full((*x.shape[:-1], per), float("-inf"), device=x.device, dtype=x.dtype)
        pad[..., :x.shape[-1]] = x
        parts = [torch.empty_like(pad) for _ in range(self.world)]
        self.dist.all_gather(parts, pad, group=self.group)
        return torch.cat(parts, -1)[..., :self.spec.vocab_size]


def _destroy_group():
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def init(tp: int, device=None):
    """Join (or start) the torchrun process group; -> (rank, world, device): this rank's GPU, or
    the CPU (gloo) when there is none or device="cpu" is asked. NVLink multicast is kept off
    (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1). A group started here is destroyed
    at interpreter exit (a gloo group left to the interpreter's teardown can abort the process,
    "terminate called without an active exception", and fail the rank's exit code); one the
    caller started is the caller's."""
    import atexit
    import os

    import torch.distributed as dist
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            raise TensorParallelError(f"tp={tp} needs one process per rank: start it with "
                                      f"torchrun --nproc-per-node {tp} ...")
        on_cpu = not torch.cuda.is_available() or \
            (device is not None and torch.device(device).type == "cpu")
        dist.init_process_group("gloo" if on_cpu else "nccl")
        atexit.register(_destroy_group)
    world = dist.get_world_size()
    if world != tp:
        raise TensorParallelError(f"tp={tp} but {world} processes were started")
    rank = dist.get_rank()
    if dist.get_backend() == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


class ThreadGroup:
    """What `world` virtual ranks, one Python thread each, share in one process: a barrier and
    the exchange slots of ThreadCollectives. Triton's CPU interpreter runs one kernel per thread
    (its atomics are real), so the megakernels of all ranks can run concurrently and wait on
    each other's flags: the CPU tests of tensor-parallel mode="mega"."""

    def __init__(self, world: int):
        import threading
        self.world = world
        self.barrier = threading.Barrier(world, timeout=600)  # a missing rank: an error
        self.slots = [None] * world

    def exchange(self, rank: int, x):
        """Every rank's x, in rank order (collective)."""
        self.barrier.wait()
        self.slots[rank] = x
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class ThreadCollectives:
    """TorchCollectives' interface for virtual ranks in threads of one process (ThreadGroup). On
    one GPU each thread runs on its own CUDA stream (the ranks' megakernels then run side by
    side): a tensor is handed to the other ranks only once this rank's stream has written it."""

    def __init__(self, spec: ModelSpec, group: ThreadGroup, rank: int, device="cpu"):
        self.spec, self.group, self.rank, self.world = spec, group, rank, group.world
        self.device = device
        self.peer_to_peer = True  # one address space

    @staticmethod
    def _written(t):
        """t once this rank's stream has finished writing it (a CPU tensor at once): before it
        is handed to the other ranks, and for a result computed from theirs, before their
        memory may be reused (the caching allocator reuses a block on its owner's stream once
        its last reference goes)."""
        if t.is_cuda:
            torch.cuda.current_stream(t.device).synchronize()
        return t

    def _exchange(self, x):
        return self.group.exchange(self.rank, self._written(x))

    def all_reduce(self, x):
        return self._written(all_reduce_fp32(self._exchange(x.clone())))

    def gather_vocab(self, x):
        return self._written(torch.cat(self._exchange(x.clone()), -1)[..., :self.spec.vocab_size])

    def symmetric(self, n_words: int):
        own = torch.zeros(n_words, dtype=torch.int32, device=self.device)
        bufs = self._exchange(own)
        return own, torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64,
                                 device=self.device), bufs


def symmetric_alloc(n_words: int, group=None):
    """(this rank's int32 [n_words] tensor, int64 tensor of every rank's mapped address of its
    own, on this rank's GPU, and those buffers as tensors) in PyTorch symmetric memory, multicast
    kept off; zeroed on every rank before any rank returns. Collective over `group`."""
    import os

    import torch.distributed as dist
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch.distributed._symmetric_memory as symm_mem
    group = group or dist.group.WORLD
    dev = torch.device("cuda", torch.cuda.current_device())
    buf = symm_mem.empty(n_words, dtype=torch.int32, device=dev)
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before rendezvous in torch < 2.8
        symm_mem.enable_symm_mem_for_group(group.group_name)
    handle = symm_mem.rendezvous(buf, group.group_name)
    buf.zero_()
    torch.cuda.synchronize()
    dist.barrier(group)  # no rank writes a peer's buffer before every rank has zeroed its own
    table = torch.tensor([int(p) for p in handle.buffer_ptrs], device=dev, dtype=torch.int64)
    peers = [handle.get_buffer(p, (n_words,), torch.int32) for p in range(len(table))]
    return buf, table, peers


def peer_buffers(capacity: int, group=None, block: int = 1024, sentinel: bool = False):
    """This rank's PeerBuffers for ops.all_reduce in PyTorch symmetric memory (CUDA, NVLink
    peer-to-peer; multicast kept off): one symmetric allocation per rank -- fp32 data slots, then
    the int32 flags -- and tables of every rank's mapped address of it. Collective: every rank of
    `group` calls it with the same arguments. capacity: the longest vector reduced; sentinel:
    the data-as-flag protocol (all_reduce.py)."""
    import math

    import torch.distributed as dist

    from .triton_kernels.all_reduce import PeerBuffers
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    dshape, fshape = PeerBuffers.shapes(world, capacity, block)
    n_data, n_flags = math.prod(dshape), math.prod(fshape)
    buf, table, _ = symmetric_alloc(n_data + n_flags, group)
    data = buf[:n_data].view(torch.float32).view(dshape)
    flags = buf[n_data:].view(fshape)
    bufs = PeerBuffers(data, flags, table, table + 4 * n_data, dist.get_rank(group), world, block,
                       sentinel)
    if sentinel:  # every rank's data is -0.0 before any rank pushes
        torch.cuda.synchronize()
        dist.barrier(group)
    return bufs
