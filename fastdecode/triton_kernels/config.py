"""Tile-size tables. No autotuning at first call: every constant here says where it came from.

GPU decode GEMV (T=1): KNOWLEDGE.md's plain-Triton sweep (BLOCK_N 4..32, BLOCK_K 256..1024, 4/8
warps) found streaming within 10% of the best at small BLOCK_N with long BLOCK_K; we pick BLOCK_N so
that the grid holds >= 2 programs per SM (132 SMs on an H200) -- small matrices lose most to
fill/drain, so more programs in flight matter more than wide tiles -- and BLOCK_K=512 (16 KB of bf16
per program per iteration at BLOCK_N=16). bench/sweep_gemv.py re-measures this table.
Prefill (T>1): tl.dot tiles need M, N, K >= 16; 64x64 keeps the bf16 operand tiles in registers.
Interpreter (CPU CI): each program instance is a Python loop, so use few, large tiles.
"""
from dataclasses import dataclass

import triton

from ._common import INTERPRET

GPU_SMS = 132  # H200 (KNOWLEDGE.md); only used to size grids, never for correctness


@dataclass(frozen=True)
class TileConfig:
    block_n: int
    block_k: int
    num_warps: int


def _pow2_floor(v: int) -> int:
    return 1 << (max(int(v), 1).bit_length() - 1)


def gemv_config(N: int, K: int, T: int, device) -> TileConfig:
    if INTERPRET or getattr(device, "type", str(device)) == "cpu":
        return TileConfig(block_n=min(1024, triton.next_power_of_2(N)),
                          block_k=min(1024, triton.next_power_of_2(K)), num_warps=4)
    if T > 1:
        return TileConfig(block_n=64, block_k=64, num_warps=4)
    block_n = min(32, max(4, _pow2_floor(N // (2 * GPU_SMS))))
    return TileConfig(block_n=block_n, block_k=512, num_warps=4)


def attention_config(head_dim: int, group: int, T: int):
    """(BLOCK_S keys per iteration, BLOCK_TOK tokens per program). M = group * BLOCK_TOK rows are
    padded to >= 16 for tl.dot; BLOCK_S=64 keys x head_dim<=256 bf16 stays in registers."""
    block_tok = 1 if T == 1 else max(1, 16 // triton.next_power_of_2(group))
    return 64, block_tok
