"""Tile-size tables. No autotuning at first call: every constant here says where it came from.

GPU decode GEMV (T=1): bench/sweep_gemv.py on an H200 (2026-11-30, cold L2, CUDA-graph timed, grid
BLOCK_N {4,8,16,32} x BLOCK_K {256,512,1024} x {4,8} warps) picked BLOCK_N=4, BLOCK_K=1024 for all
eight Llama-3.2-1B / Llama-3.1-8B shapes (4.37 TB/s on 2048x128256, 3.95 on 4096x28672, 3.03 on
14336x4096, 1.54 on 2048x2048); 8 warps won where N <= 2048 (1B o_proj and down_proj, +10-25%),
4 warps at N >= 4096 -- and on an H100 at N = 2880 (gpt-oss's o_proj, 4096x2880: 2.29 against
1.86 TB/s, bench/RESULTS.md session 62), so 8 warps below N = 4096 (a reading, not measured
between 2880 and 4096: N / 4 programs over 132 SMs are ~5.5 an SM at 2880, 44 of its 64 warps at
8 warps each; ~7.8 at 4096 would need all 64).
Many narrow programs keep more independent loads in flight per SM than wide ones.
QKV + RoPE uses the same tile as pairs of rows (lo, hi halves of a head): 4 pairs = 8 rows.
Prefill (T>1): tl.dot tiles need M, N, K >= 16; 64x64 keeps the bf16 operand tiles in registers.
Interpreter (CPU CI): each program instance is a Python loop, so use few, large tiles.
Per GPU and shape, tile_table.json overrides these rules where a sweep measured it: the
megakernel's decode stream (StreamConfig) per model shape, written by bench/sweep_mega.py
--record, and the ops-mode decode GEMV per matrix shape -- a tile, or the persistent stream
(gemv_stream) -- by bench/sweep_gemv.py --record, timing the op as ops mode fuses it (each the best
config of its run: on an H200, 2026-12-01, streams won 9 of 11 shapes and took ops + CUDA graph
from 218 to 240 tok/s on Llama-3.1-8B, 1005 to 1120 on Llama-3.2-1B, 208 to 228 on Qwen3-8B);
shapes and GPUs not in it get the rules, whose constants say which sweeps chose them.
"""
import dataclasses
import functools
import json
import os
from dataclasses import dataclass

import torch
import triton

from ._common import FP8_GROUP, FP8_PIECES, FP8_WORDS, INTERPRET

GPU_SMS = 132  # H200 (KNOWLEDGE.md); only used to size grids, never for correctness


@dataclass(frozen=True)
class TileConfig:
    block_n: int
    block_k: int
    num_warps: int


@dataclass(frozen=True)
class StreamConfig:
    """Decode (T=1) tiles of the megakernel's weight stream (gemv_body STREAM): each piece is
    rows x block_k weights, about tile_elems elements (gate|up: two matrices of half as many),
    block_k = the row padded to a power of two up to max_k (longer rows stream in chunks, so the
    activation chunk costs max_k / (32 x warps) registers); num_warps and per_sm programs per SM
    (all resident: cooperative launch); tiles: tiles per program when the stream is launched
    standalone (ops.gemv(stream=...)).
    Default 16384 elements (32 KB bf16) at 4 warps, 2 programs per SM, max K 4096:
    bench/sweep_mega.py on an H200 (2026-11-30, 7f52662): Llama-3.1-8B 16384/4w/2 225.2 tok/s >
    32768/8w/1 206.7 > 8192/4w/2 198.5; Llama-3.2-1B 16384/4w/2 1128.6 > 8192/4w/2 1091.4
    (ops + CUDA graph 213.9 / 997.3). Bigger pieces keep more bytes in flight per SM (two
    programs x two pieces = 128 KB, Little's law at ~4.5 TB/s and ~3 us loaded latency) and
    amortize each piece's cross-warp reduction; compile_check: 255 registers, 40-72 B spills.
    Two programs per SM overlap one's reductions with the other's loads. Whole rows of 14336
    (Llama-3.1-8B down_proj) at 4 warps held 128 registers of activations and ran that op at
    1.9 TB/s (trace at 7cc6fae): hence max_k (2048 instead measured slower: 199.8 vs 218.0 at
    7721f60). Earlier (a808606, whole rows, gate|up pieces of two full tiles): 1B 8192/4w/2 1098
    > 16384/8w/1 998 > 8192/8w/1 938 > 8192/4w/1 868 > 16384/4w/2 732 (772 B of spills).
    One program per SM again with the 1B's table fields (kv_prefetch, attn_outline, 64-key
    blocks; H200, 2026-12-04, 27e5351, one process per config, interleaved, tok/s): 16384/4w/2
    1274.9 / 1268.7, 16384/8w/1 1137.1 / 1136.7, 32768/8w/1 1213.4 / 1214.0 -- 132 programs'
    cheaper hand-off (bench/probe_hop.py: 1.70 vs 2.09 us) does not pay for their streams.
    L2 prefetches measured slower: the tile after next (fa53434, 16384/8w: 1002 tok/s without,
    934 with) and each task's first 32-128 KB before its dependency wait (ddb7ef0 8B 197.3 /
    197.3 / 195.4 at 0 / 32 / 128 KB; 7721f60: 218.0 without, 207.1 with 128 KB), and the next
    queued task's first weights sent to L2 by a program whose wait was unmet at its first poll
    (e8747a3, reverted: 1B 1097.6 / 1074.7 / 1036.4 / 1010.1 tok/s at 0 / 64 / 128 / 256 KB, 8B
    223.4 / 216.6 / 204.2 / 190.6 at 0 / 128 / 256 / 512 KB, Qwen3-8B 202.8 / 181.5 at 0 / 256 KB):
    most waits are phase tails, where the prefetches compete with the programs still streaming
    the phase that the waiters need. Even only in the O_PROJ wait (the attention chain, HBM
    idle; 2026-11-30 on top of 970ce3a) it was slower: 1B 1139.0 / 1109.8 / 1104.0 at 0 / 64 /
    128 KB, 8B 225.3 / 222.3 / 220.3 at 0 / 96 / 160 KB. The megakernel instead holds each
    task's first piece in registers across the wait (gemv.stream_start).
    Work stealing, measured and dropped (a steal_frac field at 69859da, reverted): each o /
    gate|up / down phase's last 12% / 25% of tiles in a pool taken by atomic ticket after a
    task's own range -- 1B 889.2 / 899.0 vs 1123.7 tok/s, 8B 192.4 / 196.8 vs 223.3: its
    registers (1B spills 40 -> 244 B) and ticket round trips cost more than the phase tails
    (~3.5 us on 8B) it evens out."""
    tile_elems: int = 16384
    num_warps: int = 4
    tiles: int = 1
    # on every SM. Measured and removed (H200, 2026-12-02, sweep_mega 256 tokens, one run): 128
    # of the 132 SMs (256 programs: every weight op of the 1B / 8B / Qwen3-8B shapes then divides
    # evenly -- the 1B's 2048 gate|up tiles 8 each, not 8 on 200 programs and 7 on 64): 1B
    # 1235.9 / 1207.1 vs 1220.1 / 1209.4 tok/s, Qwen3-8B 241.5 / 241.0 vs 242.7 / 242.2,
    # Llama-3.1-8B 249.3 / 249.8 vs 250.4 / 249.1 -- the phases' tails are not the tiles'
    # quantization. They are partly the SM's second program, which lags the first on the same
    # work (trace.sm_pair_gap: +0.5 us on the 1B's gate|up, with the queues swapped too).
    per_sm: int = 2
    max_k: int = 4096
    # weight pieces by inline PTX (_common.weight_chunk) where ptx_stream_ok. Off: on an H200
    # (2026-11-30, 49fd481, sweep_mega 16384/4w/4096/2) Llama-3.2-1B 1150.6 tok/s plain vs
    # 1056.8 PTX, Llama-3.1-8B 223.5 vs 227.7 (within the 8B's run-to-run 219-226); standalone
    # (bench_ops, cold L2) PTX pieces streamed 1-12% faster one tile per program, but 0.97-1.12x
    # in the megakernel's persistent form (lm_head 2048x128256: 4328 plain vs 4129 GB/s). Again
    # with one poller (2026-12-02, 253fd6c, sweep_mega 256 tokens): 1B 1195.0 vs 1224.7 plain; the
    # PTX pieces' 168 registers do not fit 3 programs per SM in a cooperative launch. The 1B's
    # QKV tasks alone by PTX pieces (2026-12-04, 27e5351 + an ad hoc constant, table config, one
    # process per variant): 1249.9 / 1250.6 vs 1278.9 / 1269.2 tok/s plain. All pieces by PTX with
    # QKV's second piece requested with the activations (qkv_rope_body's PTX 1 path since then):
    # 1258.8 / 1257.4 against 1235.3 / 1235.1 without, and the plain stream's 1277.6 / 1278.8.
    ptx: bool = False
    # weight pieces as the PTX pieces' int32 words (two bf16 each, unpacked where they are used)
    # but read by plain loads (_common.weight_chunk's PTX 2), where ptx_stream_ok: the register
    # stream's next piece then stays in flight across its loop's back edge, where a bf16 piece
    # is split into one register an element as it lands (sm_90a SASS of the 1B's megakernel,
    # 2026-12-04: 128 PRMT at each stream loop's end, reading the loads just issued). The PTX
    # pieces carry theirs in flight too (their SASS: all but gate|up's loop) and were slower: their
    # cache operators cost that, not the deeper stream. H200, 2026-12-04, 5f24480, sweep_mega
    # --new-tokens 256 (EXP_PARTS=words bash bench/gpu_session.sh exp), one run, tok/s: 1B table
    # entry 1291.0 / 1290.6 with words vs 1277.6 / 1277.1 without, 1255.6 by PTX pieces -- the
    # 1B's entry takes it (tile_table.json); 8B 231.5 / 230.9 vs 257.3 / 257.0 on its shared-
    # memory stages (words streams in registers: stages 1). Tried on top, each in its own
    # process, against 1289.5 / 1294.5: a two-piece (ping-pong) gemv stream loop, no back-edge
    # moves left in its SASS, 255 regs: 1239.3 / 1237.0; QKV's second piece requested with the
    # activations (as qkv_rope_body's PTX 1): 1291.2 / 1288.5 -- neither kept (RESULTS session 47).
    words: bool = False
    # FP8 rows (quant.fp8_rows) with bf16 / fp16 activations: the codes as int32 words, each
    # word's four products by ptx_inline.fp8x4_dot_f16 (f16 math) where FP8_PIECES converts
    # every code to fp32 -- the 1B megakernel's stream loops ~4.4 instead of ~6.9 sm_90a SASS
    # instructions a code (a bf16 element's: ~5.4). None: on for the register stream (every
    # op's stages 1), off for the shared-memory stages. H100, 2026-12-07, f80b65a, sweep_mega
    # --fp8 --new-tokens 128, one run (bench/RESULTS.md session 65), tok/s: Llama-3.2-1B table
    # entry (register stream) 1390.4 with words vs 1265.2 without (ops mode's FP8 tiles
    # 1213.3); Llama-3.1-8B on its stages 3 263.8 / 263.7 vs 273.2 / 273.2. fp32 activations
    # keep FP8_PIECES (no rounding of a product).
    fp8_words: bool | None = None
    # decode: the last ATTN task of a KV group merges its splits (graph.py, Tiling.merge_in_attn)
    # instead of a MERGE task one dependency hop later. Off: on an H200 (2026-11-30, 009b042,
    # sweep_mega 16384/4w/4096/2) 1B 1118.8 vs 1129.3 tok/s, 8B 219.5 vs 222.1 -- the saved hop
    # is paid back by one task merging all splits where a MERGE task ran beside the others.
    # With norm_in_qkv on Qwen3-8B (2026-11-30, 69859da): 205.4 vs 204.3, within noise. Where
    # the split-KV schedule runs today, past the short-context reach (2026-12-02, 8e33a4a,
    # sweep_mega --prompt-len 2048 --new-tokens 128, one run): 8B 228.0 / 222.6 vs 244.9 /
    # 238.5, 1B 1094.0 / 988.0 vs 1276.9 / 1106.7 tok/s. Measured and removed (H200, 2026-12-04,
    # 803c2ee + a merge_in_o field): no MERGE tasks, each o_proj task merging every split as it
    # read the attention row (the ATTN tasks signalling o_proj; bit-identical logits) -- 1B
    # split-KV schedule 1117.8 / 1118.8 vs MERGE tasks 1282.3, short schedule 1278.5 / 1273.1
    # tok/s: o_proj tasks of 6.6-9.0 us instead of 1.3-2.0 (trace_step, 163 keys), 256 programs
    # each reading every split's partials and lse.
    merge_in_attn: bool = False
    # the split-KV schedule: query heads per MERGE task (config.merge_heads; 0: the whole KV
    # group, one task per group). Traced on an H200 (2026-12-03, 043ab43, trace_step
    # --prompt-len 2048, one task per group): each MERGE task took 5.4-5.9 us on the 1B and
    # 8.7-10.1 on the 8B (33 splits in rounds of 16: one program's L2 round trips), ~7.6 us of
    # every 1B layer's O_PROJ wait -- the attention chain on the critical path of every layer.
    # One head per task (the group's heads merged by `group` programs at once, 33 splits in one
    # round): the 1B's MERGE tasks 1.9-2.8 us (trace, the same prompt). sweep_mega --prompt-len
    # 2048 --new-tokens 128 (2026-12-03, one run per model): Llama-3.1-8B 243.8 / 243.5 vs
    # 234.4 tok/s per group (+4%); Llama-3.2-1B 1156.7 / 1154.9 / 1154.2 vs 1160.0 / 1152.3
    # (and a first 1295.2: the 1B's spread at 2K) -- level; 2 heads per task 1099.7 (1B).
    merge_heads: int = 1
    # decode with q/k norm: the QKV task that completes a KV group's tiles normalizes and rotates
    # it (graph.py, Tiling.norm_in_qkv) instead of a QKNORM task. Off: on an H200 (2026-11-30,
    # 69859da, sweep_mega 16384/4w/4096/2, 128 tokens) Qwen3-8B 199.1 vs 204.3 tok/s without.
    norm_in_qkv: bool = False
    # decode steps whose keys (position + 1) fit run the short-context schedule (graph.py,
    # Tiling.attn_in_qkv): the QKV task completing a KV group runs the group's attention, one
    # split over every key -- no ATTN / MERGE (/ QKNORM) tasks, three hops fewer per layer; past
    # it, the split-KV schedule. attn_in_qkv_keys: that many keys (0: never); None: as many as
    # fit attn_in_qkv_bytes of K + V per KV group (short_context_keys). From a trace (2026-11-30,
    # 0648e33, Llama-3.2-1B at 35 keys) the split chain from the last QKV task to the first
    # O_PROJ ready is ~6.2 us (hops 0.8 + 0.5 + 0.3, ATTN 3.0, MERGE 1.6), while one program's
    # attention costs ~one memory round trip per 64 keys. Measured on an H200 (a44b7f3,
    # sweep_mega, prompt 32, the same run; short vs split-KV schedule): Llama-3.2-1B (head_dim
    # 64) 1207.1 vs 1193.3 tok/s at <= 192 keys (48 KB), 1211.4 vs 1186.1 at <= 288 (72 KB);
    # Llama-3.1-8B (128) 222.6 vs 219.6 at <= 192 (96 KB), 215.8 vs 216.4 at <= 288 (144 KB);
    # Qwen3-8B (128, q/k norm: its QKNORM hop goes too) 204.6 vs 200.5 at <= 288. Hence 96 KB.
    # Again for the 1B with kv_prefetch and the split schedule's group merged by its last ATTN
    # task (2026-12-03, c37bccf, sweep_mega 256 tokens: 32-288 keys, one run): the rule (384
    # keys) 1250.7 / 1257.9, split past 160 keys 1247.6, past 96 1242.3, always 1236.5 tok/s.
    attn_in_qkv_keys: int | None = None
    attn_in_qkv_bytes: int = 96 * 1024
    # QKV / o_proj / gate|up / down tasks: 1 -- the piece in flight and the next one in
    # registers, the first requested before the task's wait (gemv.stream_start; megakernel.py's
    # OP_GU branch: gate|up's order, measured both ways); > 1 -- that many
    # stages of Triton's loop pipeline, the pieces in flight in shared memory (cp.async, stages x
    # 32 KB per program), the first stages - 1 of a task requested before its wait
    # (gemv.gemv_body / qkv_rope.qkv_rope_body STAGES). One number for the four ops, or (QKV,
    # o_proj, gate|up, down); None: op_stages' rule.
    stages: int | tuple | None = None
    # where the rule switches to shared-memory stages (d_model); measured on an H200
    # (2026-11-30, sweep_mega 16384/4w/4096/2, 160 tokens, each variant in one run against the
    # register stream, stages o/gate|up/down): Llama-3.1-8B (d_model 4096) 111 220.4 / 219.5,
    # 311 228.1, 131 227.1, 113 221.4, 133 232.3, 222 237.8, 333 237.9 tok/s (an earlier run: 111
    # 221.9 / 220.7, 222 240.4 / 239.8, 333 240.3 / 240.3); Qwen3-8B 111 205.1, 222 225.3, 333
    # 228.1; but Llama-3.2-1B (2048) 111 1195.6 / 1186.6, 133 1128.2, 222 1125.1, 333 1115.5, 113
    # 1102.5, 131 1070.9, 311 1052.0 -- slower in every form, for a reason not yet isolated (its
    # tasks stream 1-8 pieces each, the 8B's 4-14). QKV too (2026-12-01, stages qkv/o/gu/down,
    # 160 tokens, one run): Llama-3.1-8B 1333 237.4 / 237.5, 3333 248.1 / 247.4, 2333 247.0;
    # Qwen3-8B 1333 225.8, 3333 235.1; Llama-3.2-1B 1111 1192.0 / 1189.0, 3111 1067.8 / 1103.9,
    # 2111 1098.4.
    # 3072 since 2026-12-03 (H200, ebb6ad4's kernels, sweep_mega 160 tokens, 1111 / 3333 / 2222,
    # tok/s): Llama-3.2-3B (3072) 462.0 / 511.6 / 504.4, Qwen2.5-7B (3584) 237.7 / 266.3 / 265.6,
    # Qwen2.5-0.5B (896) 1498.5 / 1397.6 / 1460.7 -- the switch lies between 2048 and 3072.
    # 2560 since 2026-12-03 (H200, 94c6992, sweep_mega 160 tokens, 1111 / 3333 / 2222 / 1111):
    # Qwen3-4B (2560) 346.1 / 378.8 / 376.8 / 344.2 tok/s -- between 2048 and 2560.
    stages_min_d_model: int = 2560
    # decode: an o_proj task asks L2 for the next gate|up task's first l2_prefetch_kb KB of gate
    # rows and of up rows by one bulk (TMA) prefetch each before its dependency wait -- the
    # attention chain's, HBM's one idle window in a layer (megakernel.residual_task). 0: off.
    # The fifth prefetch form (the four per-line ones, above, put an instruction per 128-byte
    # line into the SM's load pipeline; this is one instruction from one thread) and, like them,
    # slower (2026-12-01, b48cad6's tree, sweep_mega 160 tokens, one run): Llama-3.2-1B off
    # 1213.5 / 1185.1, 64 KB 1124.8, 128 KB 1068.9; Llama-3.1-8B off 251.2 / 250.2, 64 KB 238.2,
    # 128 KB 232.7 tok/s. Measured in the same runs and removed: each o / gate|up / down task
    # bulk-prefetching its own first 64 / 128 KB (1B 1102.4 / 1018.3 vs 1180.4 / 1178.7), and
    # the staged tasks waiting before their stream (1B stages 1333 1037.9 / 1027.1 vs 1125.7
    # without; 8B 3333 232.8 / 231.7 vs 251.2 / 250.2). Kept as the L2-prefetch lever,
    # off, so the A/B stays one config field away. Measured and removed (2026-12-02, 253fd6c's
    # tree, sweep_mega 256 tokens, one run): the same prefetch after the o_proj task's wait (16
    # KB of gate and of up rows: the gate|up task's first piece) -- 1B 1188.1 vs 1220.1 /
    # 1209.4; the attention runner (the QKV_ATTN task completing a KV group) asking L2 for its
    # next o_proj task's weights before its attention (the runners' o_proj tasks ended last in
    # 13 of 16 layers of a 1B trace, ~0.5 us after the others) -- 1B 1213.0, Qwen3-8B 239.7 vs
    # 242.7 / 242.2. And sized to the attention chain's idle HBM (~2 us x 4.46 TB/s, less
    # o_proj's 8.4 MB already requested), before the wait (2026-12-02, e63a457, the same sweep,
    # each twice): 1B 8 KB 1203.1 / 1200.9, 16 KB 1226.1 / 1197.9, 32 KB 1203.0 / 1181.6 vs
    # off 1252.0 / 1218.5 tok/s. Again with the chain's K / V already in L2 (kv_prefetch, H200,
    # 2026-12-03, ccebb63, sweep_mega 256 tokens): 1B 16 / 32 / 64 KB 1240.0 / 1245.4 / 1229.7 vs
    # 1262.4 / 1259.4; a trace at 163 keys (64 KB) has the attention 6.35 us instead of 4.48 and
    # the gate|up tasks no faster (RESULTS.md session 31): the prefetch traffic slows the one
    # program per KV group that every o_proj task waits for. Paced instead of one burst
    # (2026-12-04, 21a091f, reverted: each unmet poll of the one poller asking L2 for the next
    # N KB of gate and of up rows, one bulk prefetch each -- at most ~2 x N KB a poll round trip
    # per program; sweep_mega 256 tokens, one run): 1B o_proj waits N = 2 / 4 / 8 / 16 KB
    # 1259.8 / 1213.6 / 1218.3 / 1215.2, the same on every wait 1214.7, gate|up and down waits
    # asking for their own rows 1264.6, against 1268.3 / 1269.4 tok/s -- any L2 traffic during
    # the attention chain beyond a trickle costs the chain more than the streams gain.
    l2_prefetch_kb: int = 0
    # Measured and removed (H200, 2026-12-04, 7108731's tree + a qkv_prefetch field, sweep_mega
    # --model 1b --new-tokens 256, one run, interleaved): a QKV task of two tiles (the 1B's 384
    # tiles over 264 programs give 120 of them two; its second piece is requested only after the
    # wait, and a KV group's ticket waits for its slowest tile task) asking L2 for its second
    # tile before its wait, a bulk prefetch each of the tile's lo and hi rotation rows -- 1263.1 /
    # 1268.9 / 1268.8 vs 1272.7 / 1267.8 / 1276.3 tok/s. trace_step at 163 keys: two-tile tasks'
    # ready -> tiles stored 3.26 -> 3.04 us, one-tile tasks' 1.92 -> 2.02, the layer's first
    # QKV_ATTN ready -> a group's last tiles 3.78 -> 3.95 (trace.attention_chain's tiles stage).
    # Measured and removed again (H200, 2026-12-04, 7108731's tree + a runner_o_prefetch field,
    # sweep_mega --model 1b --new-tokens 256, one run, interleaved): the attention runner (the
    # QKV_ATTN task whose ticket completes its KV group) asking L2 for its next queue entry's
    # o_proj rows before the group's attention -- every other o_proj task requested its first
    # piece before its wait, the whole chain earlier, so in a trace the runners' o_proj tasks end
    # last in 14 of 16 layers, 0.88 us (median) after the others. With it they end last in 1 of
    # 16 and the layer's last o_proj end comes 0.9 us sooner (3.65 -> 2.77 us after the last
    # runner), yet gate|up ends no sooner (21.09 -> 21.39 us) and the step is slower: 1238.5 /
    # 1251.7 / 1251.9 vs 1273.4 / 1276.1 / 1279.6 tok/s (reading the next queue entry's words
    # put ~0.35 us between the ticket and the attention).
    # decode: a KV group's keys and values that attention will read asked into L2 (one bulk
    # prefetch each, attention.kv_prefetch) before a wait: by the group's first QKV tile task of
    # the short-context schedule, before its wait on the previous layer, and by each ATTN task
    # of the split-KV one (its split's keys), before its wait on the QKV tasks. Older keys sit in
    # HBM by the time a step reaches them (~2.4 GB of weights stream through L2 in a 1B step):
    # one program's attention at 163 keys 4.79 us with K / V cold, 4.16 warm, 4.77 in the
    # megakernel's trace (RESULTS.md session 29). Measured on an H200 (2026-12-03, 924e524,
    # sweep_mega 256 tokens, interleaved, EXP_PARTS=kvpf bash bench/gpu_session.sh exp):
    # Llama-3.2-1B 1277.4 / 1273.3 vs 1261.4 / 1260.5 tok/s -> its tile_table.json entry (the
    # attention stage 4.51 us at 163 keys in a trace, 4.77 without); Llama-3.1-8B 252.2 / 252.1
    # vs 251.4 / 251.1 (within noise, and compile_check spills 88 / 116 -> 196 / 312 B at its
    # stages 3333: off). Earlier, on the 8B at 35 keys (exp/kv-prefetch, 2026-12-01): 250.7 /
    # 249.9 vs 249.2 / 249.8.
    kv_prefetch: bool = False
    # decode: the megakernel's preferred shared-memory carveout, percent of the SM's maximum
    # (228 KB on an H200; cuFuncSetAttribute PREFERRED_SHARED_MEMORY_CARVEOUT, runtime.py; the
    # rest of the SM's 256 KB is L1; -1: the driver's default); None: not set. Why the 1B lost
    # with shared-memory stages (stages_min_d_model above): ncu (H200, 2026-12-02, one launch of
    # 16 decode steps) shows the driver picking a 102 KB carveout for its register stream (19.5
    # KB per program) but 233 KB for stages 2222 (66 KB per program: ~23 KB of L1 left) -- long
    # scoreboard stalls 1.91 -> 2.40 and short scoreboard 0.47 -> 0.78 per issued instruction,
    # 12.41 -> 13.29 ms. With 72% (164 KB: ~92 KB of L1) the loss is gone (sweep_mega 256
    # tokens, one run, bd5f632's tree + this field): stages 2222 1128.2 / 1143.7 tok/s at the
    # driver's carveout, 1198.6 / 1198.5 at 72%, the register stream 1212.2 / 1209.8 (25%: two
    # programs no longer fit an SM). Deeper stages with L1 left (2026-12-02, 2bda05e,
    # EXP_PARTS=carve bash bench/gpu_session.sh exp: sweep_mega 256 tokens, tok/s): 1B default
    # 1238.8 / 1233.1, stages 2222 at 72% 1178.2, 1144 with 8192-element gate|up / down pieces
    # (65.6 KB per program) 1102.0 at the driver's carveout, 1171.7 at 72%, 1155 (82 KB) at 86%
    # 1066.9 -- the 1B stays on the register stream. 8192-element pieces on the 8B shapes
    # (stages 3333 at 16384 elements need 98.4 KB per program, so the driver's 228 KB):
    # Llama-3.1-8B 3333 253.7 / 252.6, 4444 at 72% (71.7 KB) 253.1, 5555 (82 KB) 242.1, at 86%
    # 242.4; Qwen3-8B 3333 245.2 / 245.1, 4444 at 72% 247.3, 5555 231.7, at 86% 232.1 -- again,
    # interleaved, 244.4 / 243.8 vs 243.2 / 241.1: Qwen3-8B's tile table entry (4444 at 72%).
    # The 1B's register stream needs that L1 by itself (2026-12-04, 9dc58de, sweep_mega 256
    # tokens, two runs): 1260.5 / 1252.2 tok/s at the driver's carveout, 1205.9 / 1212.3 at 72%
    # (QKV stages 2111 there 1180.1 / 1187.4); its weight loads as ld.global.cg (L2 only, instead
    # of Triton's L1::evict_first; measured, not kept) 1256.6 / 1259.8 and 1191.5 / 1189.7 at
    # 72%: the loads in flight hold L1 space whether or not their lines are cached there.
    carveout: int | None = None
    # decode: keys per iteration of the megakernel's attention loop (each a tl.dot of the group's
    # q rows padded to 16 against BLOCK_S keys, then one against the values); None:
    # attention_block's rule, 32 at head_dim <= 64, else attention_config's 64. Measured on an H200
    # (2026-12-01, dd555bf's tree + this field, sweep_mega 256 tokens, default first, two runs):
    # Llama-3.2-1B (head_dim 64) 64 keys 1152.2 / 1148.6, 32 keys 1188.2 / 1175.5, 128 keys
    # 1057.9 / 1081.0 tok/s (another run); Qwen3-8B (128) 64 keys 242.2 / 242.1, 32 keys 241.7 /
    # 241.8 -- no gain at head_dim 128, so 64 there. Again (2026-12-01, c4a771b, one run each,
    # default first and last): 1B rule 1156.1 / 1133.9, 64 keys 1152.4, 32 keys 1131.9; 8B rule
    # 250.6 / 249.7, 32 keys 249.9 (the split-KV path past 192 keys; tokens agree), 64 keys 250.9
    # -- the 1B's 32-key gain is within its run-to-run spread; the rule stays, it costs nothing.
    # Again (H200, 2026-12-03, dfb5db7): trace_step --prompt-len 160 puts the 1B chain's
    # attention at 4.77 us a layer at 163 keys (2.29 at 35: ~0.6 us per 32-key block, with the
    # HBM idle), and one program's attention alone (an ad-hoc probe: 400 dependent calls of
    # attention_body as the QKV_ATTN completer runs it, K / V cold; us a call at 35 / 163 / 288
    # keys) takes 2.44 / 4.79 / 6.56 with 32-key blocks, 2.01 / 3.46 / 4.85 with 64 (163 keys:
    # 32 x 5 stages 4.76, 64 x 2 stages 4.50, 128 x 3 3.48, 256 x 2 3.29) -- each iteration
    # costs ~0.55 us whatever its keys, the same inside the megakernel as alone. Yet in the
    # megakernel (sweep_mega 256 tokens, each twice in one run) 64-key blocks ran the 1B at
    # 1215.7 / 1215.4 vs 1264.4 / 1264.3 tok/s, 64 keys at 2 stages (one slot: the default's
    # shared memory) 1243.3, 32 keys at 2 stages (11 KB a program) 1209.8, the default at a 44%
    # carveout 1261.3 vs 1266.9 / 1258.0: the faster attention does not carry into the step.
    # Measured and removed the same day: each iteration's keys split over the warps (a batched
    # tl.dot [4 runs, 16 rows, 16 keys] with the runs over the warps, each warp's max, sum and P
    # in its registers, the runs merged after the loop; 2 barriers a 64-key iteration against
    # 11 a 32-key one, compile_check) -- probe 3.62 / 4.81 / 5.96 us, trace 5.74 us at 163 keys,
    # 1B 1238.6 / 1238.3 tok/s against 1271.2 / 1266.8 (spills 60 -> 124 B). And (3f55adc,
    # reverted): the softmax denominators kept per (row, key lane) and reduced once after the
    # loop -- one cross-warp reduction fewer per block (9 barriers a block instead of 12, code
    # size unchanged at 128.1 KB, spills 56 B) -- 1B 1229.3 / 1228.3 vs 1260.6 / 1255.0 tok/s.
    # Three attention loops that are faster alone or leaner in their SASS each made the 1B's step
    # slower: what else the attention code changes is not known (RESULTS.md session 29); not
    # instruction fetch (ncu, session 30: "no instruction" 0.06 of 6.7 stall cycles per issued
    # instruction for both tiles). With kv_prefetch (2026-12-03, 8f08ad8, sweep_mega 256
    # tokens, interleaved): 64-key blocks 1254.4 / 1254.0 vs 1260.1 / 1254.3 -- level.
    # The loop's pipeline depth, measured and removed (2026-12-01, 2f7d09b, sweep_mega 256
    # tokens, default first and last; Triton's num_stages 3 by default): Qwen3-8B 4 stages
    # 243.6, 32 keys x 6 stages 242.9 vs 243.1 / 241.5; 1B 4 stages 1137.7, 8 stages 1029.2 vs
    # 1141.5 / 1124.4; 8B 4 stages 249.6 vs 250.2 / 249.7 tok/s -- more K / V blocks in flight
    # do not shorten the chain's attention stage. Again with kv_prefetch (2026-12-04, 162f934's
    # tree + an ad hoc stages constant, sweep_mega 256 tokens, 1B): 32 keys at 1 / 3 / 4 / 5
    # stages 1205.5-1213.2 (any carveout) / 1259.1-1264.2 / 1256.8 / 1253.8; 64 keys at 3 / 4 /
    # 5 stages 1252.2-1255.9 / 1128.5 / 1127.2; 128 keys at 2 / 3 stages (39 / 72 KB a program)
    # 1249.3 / 1121.2, 32 keys at 2 stages 1233.5 / 1225.2, against the default's 1253.8 /
    # 1251.3 in that run -- the loop must be pipelined (its L2 round trips are the chain's), and
    # more stages than fit beside the register stream's L1 (64 KB a program at 64 x 4: the
    # carveout note) lose. The default's smem at smaller carveouts (20 / 28%, more
    # L1 than the driver's ~102 KB leaves) 1259.3 / 1259.5: L1 past ~150 KB buys nothing.
    # Measured and removed (H200, 2026-12-02, d6e7378, sweep_mega 256 tokens, one run, default
    # first and last): the short-context attention as fp32 products summed in registers over the
    # group's unpadded rows instead of tl.dot tiles of 16 padded rows (its stage took 1.86 us
    # even with code and K / V warm, session 18: instruction latency) -- 1B 815.4 / 808.8 (32-key
    # blocks), 777.6 (16) vs 1212.3 / 1204.1 tok/s; 8B 216.0 (16) vs 252.3 / 249.7
    # (compile_check: 9 more layout conversions, half the pipelined loads, spills 44 -> 64 B).
    # Measured (H200, 2026-12-04, e07538a, sweep_mega 256 tokens, one run, tok/s; removed then,
    # back since session 44 as attn_outline, below, for the 1B): the attention body called out
    # of line (triton.jit(noinline=True): a .func that ptxas
    # allocates apart from the weight streams -- compile_check spills 1B 60 -> 4 B, 8B 88/116 ->
    # 12/12, Qwen3-8B 48/56 -> 8/8) -- 1B 1269.2 / 1263.7 vs 1261.7 / 1259.2, 8B 254.1 / 253.9
    # vs 253.5 / 252.7, Qwen3-8B 244.2 / 244.1 vs 246.2 / 245.9 (bit-identical on the GPU):
    # the spills were not what the steps wait on. With it, larger key blocks loaded straight
    # into registers (the loop unpipelined: 22 / 43 KB of shared memory at 128 / 256 keys
    # instead of 72 / 141 KB) -- 1B 128 keys 1267.3 (1249.6 inlined), 256 keys 1259.3, and 64
    # keys pipelined 1275.2. Traced at 163 keys (trace_step --prompt-len 160, the same run): the
    # chain's attention 4.90 us in two 128-key iterations against 4.51 in six of 32 (one
    # program alone, session 29's probe: 3.48 vs 4.76) -- in the step it costs what its L2
    # round trips cost, not what its iterations compute.
    attn_block_s: int | None = None
    # decode: the attention body called out of line (megakernel.attend: a .func of the PTX, not
    # inlined), so ptxas allocates the weight streams' registers apart from the attention's.
    # compile_check (sm_90a, 2026-12-04, spill st/ld B, kernel + function): 1B 60/60 -> 4/4 + 0,
    # Llama-3.1-8B 88/116 -> 12/12, Qwen3-8B 48/56 -> 8/8; with 64-key blocks (1B) 24/24 B,
    # 36.9 KB of shared memory a program. Session 43 (above) measured it alone within the
    # spread and removed it; measured again interleaved (H200, 2026-12-04, 383521d's tree + this
    # field, sweep_mega --model 1b --new-tokens 256, one run, tok/s): the 1B table config
    # 1258.4 / 1260.0 / 1254.1, out of line with 64-key blocks 1272.4 / 1263.2 / 1274.4 (+1.0%),
    # out of line alone 1269.6, 64-key blocks inlined 1251.2; out of line with 64 keys x 4
    # stages 1153.3 (49 KB a program: the L1 squeeze), 128 keys x 2 stages 1266.2 -- hence the
    # 1B's table entry (out of line, 64-key blocks; after a 2048-token prompt, the split-KV
    # schedule, 1223.1 / 1212.5 vs 1206.9 / 1200.6). The 8B shapes, session 43: Llama-3.1-8B
    # 254.1 / 253.9 vs 253.5 / 252.7, Qwen3-8B 244.2 / 244.1 vs 246.2 / 245.9 -- off there.
    attn_outline: bool = False
    # decode: elements per weight piece of the (QKV, o_proj, gate|up, down) tasks; None:
    # tile_elems for all (the lm_head always streams tile_elems). Warps and programs per SM are
    # one per megakernel launch, a piece's elements are not: ops mode's per-shape sweep
    # (bench/sweep_gemv.py, H200, 2026-12-01) found different bests per op on Llama-3.2-1B
    # (o_proj 8192 / gate|up 8192 at 4 warps, down 16384 at 8), and ops + CUDA graph then came
    # within 0.6% of the megakernel there. In the megakernel no better (H200, 2026-12-01,
    # 1a8d9c3, EXP_PARTS=opelems bash bench/gpu_session.sh exp: sweep_mega 256 tokens, default
    # first and last, tok/s): 1B default 1155.3 / 1124.3, 16384:8192:16384:16384 1170.7,
    # 16384:8192:8192:16384 1150.5, 16384:16384:8192:16384 1150.0 (within the default's spread);
    # 8B default 249.9 / 249.8, 16384:8192:16384:16384 248.5, down 8192 245.7, down 32768 233.6;
    # Qwen3-8B default 242.8 / 241.5, 240.9, 235.0, 221.3 (the same variants) -- off. QKV pieces
    # of 8192 (2026-12-02, 253fd6c: ~2.9 QKV tiles per program instead of 1 or 2): 1B 1162.5 vs
    # 1220.1 / 1209.4; again with kv_prefetch (2026-12-03, ccebb63) 1243.8 vs 1262.4 / 1259.4.
    # QKV pieces of 32768 (2026-12-04, 8b6948e + an ad hoc constant: the QKV stream then holds
    # no second piece, which spilled 852 B; 0 B with it): 192 tasks of one 64 KB tile, all of it
    # requested before the wait, 72 programs idle in the phase -- 1B 1256.0 / 1257.6 / 1251.9 vs
    # 1271.0 / 1283.1 / 1268.8 tok/s (bit-identical logits).
    # compile_check (sm_90a, 2026-12-01), spill store/load bytes: 1B default 44/48,
    # 16384:8192:8192:16384 32/32, 16384:8192:16384:16384 24/24, 16384:16384:8192:16384 40/40,
    # 16384:16384:32768:16384 904/928; 8B default 64/72, down 8192 60/68, down 32768 64/88,
    # gate|up 32768 104/156; Qwen3-8B default 36/40, down 8192 48/48, gate|up 32768 52/64.
    op_elems: tuple | None = None
    # decode: every dependency wait polled by one thread of the program, the verdict handed to
    # the others by a barrier reduction (ptx_inline.spin_acquire_cta), instead of a poll per
    # warp (4-8 requests per poll per program, all consumers of a phase on one counter word, one
    # L2 slice; a barrier of 264 programs cost 1.94 us against 1.06 with 132, KNOWLEDGE.md).
    # Measured on an H200 (2026-12-02, 59c43b8, sweep_mega 256 tokens, each variant
    # twice in one run, tok/s): Llama-3.2-1B 1191.7 / 1161.1 vs 1140.1 / 1122.7, again 1200.3 /
    # 1189.6 vs 1160.8 / 1154.2 (+3%; trace_step's step span 760.8 us vs 799.8 at cdaee78, the
    # waits per program: QKV 34.8 vs 42.1 us, GATE_UP 15.8 vs 24.3, DOWN 33.4 vs 40.3);
    # Llama-3.1-8B 250.7 / 250.7 vs 250.0 / 250.0; Qwen3-8B 242.1 / 241.3 vs 242.3 / 242.2 (within
    # its spread). Hence on. Measured and removed with it on (2026-12-02, 04cbbc4, the same
    # sweep): the local counters 32 words apart, each on its own 128-byte L2 line instead of
    # packed (polls of a phase's counter and atomics on its neighbours share lines when packed) --
    # 1B 1154.1 / 1141.9 vs 1139.4 / 1144.3, Qwen3-8B 237.7 / 238.3 vs 241.6 / 241.5 tok/s.
    # And (2026-12-02, 253fd6c's tree, the same sweep): the poll a relaxed load, with one
    # fence.acq_rel once met, instead of an acquire load per poll -- 1B 1181.3 / 1182.3 vs
    # 1224.7 / 1221.6, Qwen3-8B 243.1 / 242.6 vs 245.2 / 245.3, Llama-3.1-8B 249.9 / 251.9 vs
    # 253.5 / 253.7. And (2026-12-04, 383521d's tree + an ad hoc constant, reverted; sweep_mega
    # 256 tokens, one process per variant, each config twice): a nanosleep backoff between the
    # one poller's polls (ptx_inline.nanosleep) -- 1B 100 / 300 / 1000 ns 1258.9 / 1266.5,
    # 1244.4 / 1234.4, 1204.4 / 1206.1 vs none 1264.6 / 1253.4 and 1260.0 / 1252.2 tok/s: the
    # polls' traffic costs nothing measurable, and every hop's detection delay costs the step
    # (~65 hops a 1B step: 1000 ns of sleep, ~1 us more a hop, -55 us).
    one_poller: bool = True
    # decode, one_poller: the abort word (raised by a program that timed out, so the others stop)
    # read at every abort_every-th poll only -- every waiting program polls that one word, the
    # whole grid's polls during a phase's tail and the lm_head's (the next step's wait). The
    # one_poller trace (59c43b8) had the lm_head's work 20 us shorter than the per-warp poll's
    # while the hops themselves barely moved: the polls slow the programs still streaming. An
    # abort is then noticed up to abort_every polls (~1 us each) later (test_gpu's
    # test_mega_timeout_is_fast: still well under a second). Measured on an H200 (2026-12-02,
    # c1a1b1c's tree, sweep_mega 256 tokens, 16 vs 1, each twice in one run, tok/s): Qwen3-8B
    # 243.0 / 243.4 vs 242.1 / 242.9, Llama-3.1-8B 250.3 / 250.6 vs 248.3 / 249.9, Llama-3.2-1B
    # 1156.7 / 1175.0 vs 1172.3 / 1153.2 (within its spread) -- a small gain on the 8B shapes.
    abort_every: int = 16
    # a mixture's EXPERT_DOWN tasks (moe.experts_down_body a tile at a time): rows per tile and K
    # chunk; 0: moe_down_tile's rule -- bf16 / fp16 / fp32 experts 8 x 128, where ops mode's kernel
    # (moe.down_tile, many programs an SM) takes 16 / top_k x 256; FP8 experts 8 rows x ops mode's
    # FP8 K chunk (256 at top_k >= 8, else 512). FP8: H100, 2026-12-07, e632a2f, sweep_mega --fp8
    # --new-tokens 96 (bench/RESULTS.md session 72), tok/s -- OLMoE-1B-7B 8 x 256 1161.3 / 1183.1 /
    # 1156.0 vs ops' 4 x 256 1133.9 / 1145.5 (and 963.1 first in its run), 8 x 128 1105.7;
    # Qwen1.5-MoE-A2.7B (top 4: 8 x 512 either way) 662.3 (and 581.3) vs 8 x 256 654.0 / 644.6,
    # 8 x 128 621.2. bf16: H100, 2026-12-07, 6c2c9a0, sweep_mega --new-tokens
    # 128, one run per line (bench/RESULTS.md session 68), tok/s -- OLMoE-1B-7B (top 8 of 64 x 1024)
    # 2 x 256 (ops' tile) 810.9, 8 x 128 856.8 / 856.3, 8 x 256 844.2 / 845.5, 2 x 1024 826.5, 4 x
    # 128 825.2, 8 x 64 816.1, 16 x 128 816.2, 4 x 512 808.7, 8 x 512 808.2, 16 x 256 770.2;
    # Qwen1.5-MoE (top 4 of 60 x 1408, a shared expert) 4 x 256 446.2, 8 x 128 458.7, 16 x 128
    # 429.7, 16 x 64 415.2. The traced down phase of OLMoE's layer 8 spans 16.7 us at 8 x 256
    # against 20.7 at 2 x 256 (its weights 33.6 MB: 10.8 us at the read roofline). Measured and not
    # kept: each chunk requested before the one before is reduced (two chunks in flight): 2 x 256
    # 802.4, 4 x 256 829.6, 8 x 256 824.7, 8 x 128 852.1, 4 x 512 780.4 tok/s.
    moe_down_rows: int = 0
    moe_down_bk: int = 0
    # a mixture's shared expert (float weights) streamed in EXPERT_DOWN's chunks as
    # ceil(FS / expert_ffn) more experts (moe.experts_down_body's VS), where the chunk's experts
    # stay <= 16 (BLOCK_J); off: its own loop after the routed experts' (gemv_tile, up to 1024
    # columns a chunk: Qwen1.5-MoE's 5632 in six more dependent round trips a tile). And the
    # ROUTER's rows per tile (K = d_model, the lm_head's chunks); 0: graph.few_tiles_rows of the
    # lm_head's rows over the router's E (+ 1) rows -- one row a tile at 264 programs, ~61-65
    # tasks of 4 KB, against 8 of 32 KB at the lm_head's 8 rows. H100, 2026-12-07, 5d89d86,
    # sweep_mega --new-tokens 128, in run order (bench/RESULTS.md session 69), tok/s --
    # Qwen1.5-MoE-A2.7B: both old (shared loop, 8 rows) 450.9 / 457.5, both new 475.1 / 475.0
    # (+4.6%), the shared expert in the chunks alone 459.2 / 468.1, the router tiles alone 466.0 /
    # 440.8; OLMoE-1B-7B (no shared expert): router 1 row 861.4 / 861.6 / 861.8 vs 8 rows 859.7 /
    # 860.3 / 861.4. compile_check (sm_90a): Qwen1.5-MoE 255 registers, 92 B of spills either
    # way, code 195 vs 211 KB.
    moe_shared_in_chunks: bool = True
    router_rows: int = 0
    # Measured and removed (H200, 2026-12-02, d685df3, sweep_mega 256 tokens): the gate|up ->
    # down pipeline -- each gate|up task streamed its range of every block of gate|up tiles that
    # writes one K chunk of act (down's max_k piece) block by block and published each block on
    # its own counter mid-stream; down tasks streamed K chunk by K chunk, waiting for chunk c at
    # its first piece, each tile's sum in registers across chunks (graph, validator and VM knew
    # the per-block counters; compile_check 1B spills 44/48 -> 184/216 B: the wait's spin inside
    # the register stream). Llama-3.2-1B 970.1 / 1042.6 vs 1181.4 / 1167.8 tok/s (968.4 with the
    # chunk wait inlined instead of a call). Traced (trace_step, the same run): the step 797.4 vs
    # 760.5 us, layer 8's DOWN phase 16.7 vs 10.3 us from its first ready with its starts spread
    # over 8.2 us: the programs done with gate|up early stream down's first chunk and then wait
    # for the last block, but the last gate|up finishers still stream their whole down share after
    # it, at one program's latency-bound rate (~25 GB/s) -- the phase ends no earlier, and the
    # next layer's QKV waited 26 us more per program over the step.
    # Measured and removed (H200, 2026-12-02, 4a672a6, sweep_mega 256 tokens, one run): a
    # register-stream o_proj / gate|up / down task requesting its first two weight pieces before
    # its wait (the loop reducing a piece before requesting the one after next: two pieces in
    # flight in two register sets; compile_check 1B spills 52/56 -> 212/244 B) -- Llama-3.2-1B
    # 1119.4 / 1089.5 vs 1196.0 / 1199.6 tok/s.
    # Measured and removed (H200, 2026-12-01, 739ccee, sweep_mega 256 tokens): Qwen3-8B's q/k
    # norm inside the short-context attention (the completer's attention normed and rotated q
    # and the new key in registers from the raw fp32 rows, its softmax started at the new key;
    # compile_check spills 36/40 -> 76/80 B): 237.6 / 237.3 vs 241.9 / 241.1 tok/s. Traced
    # (trace_step, the same commit), the chain's norm + attention took 6.34 us vs 1.34 + 3.28:
    # the attention loop's first K / V loads (Triton's pipeline prologue) still go out only after
    # q is computed, so the round trip it was to save stays, and the norm's work joins it.
    # Measured and removed (H200, 2026-12-01, 2c6dd93, sweep_mega 256 tokens, default first and
    # last): tile pools, session 15's dynamic assignment in the form that leaves the stream loop
    # alone -- each o / gate|up / down phase's last pool_frac of tiles claimed one at a time by
    # relaxed atomic ticket after a task's own range, each claimed tile one more pass of the
    # task's stream call, the task signalling 1 + its pool tiles (bit-identical outputs on the
    # GPU; compile_check spills 1B 44/48 -> 60/76 B, 8B 64/72 -> 92/116). tok/s at pool_frac 0 /
    # 0.05 / 0.1 / 0.2: 1B 1151.0 and 1117.7 / 1019.1 / 983.9 / 973.2, 8B 250.8 and 248.8 /
    # 226.8 / 216.7 / 198.8, Qwen3-8B 242.5 and 242.4 / 217.7 / 212.2 / 200.4 -- slower with
    # every pool tile: a claimed tile pays a ticket round trip and its stream's fill and drain
    # (one 32 KB piece, latency-bound) where the phase tails it evens out are ~2-4 us a layer.
    # Measured and removed (2026-12-01, c4a771b, sweep_mega 256 tokens, two runs each): the
    # hypothesis that the attention chain's loads (q, K, V: ~100 KB) queue in HBM behind every
    # o_proj task's first pieces (8 MB on the 1B, 17 MB on the 8B at o_proj stages 3), requested
    # as the chain starts. o_proj's first piece after its wait (the register stream): 1B 1154.3 /
    # 1132.9 vs 1158.7 / 1140.3; o_proj stages 2 (one piece less ahead): 8B 250.9 / 249.5 vs
    # 251.6 / 250.7, Qwen3-8B 242.1 / 240.8 vs 242.4 / 242.0; o_proj's pieces only after every
    # QKV_ATTN task but the KV groups' completers had published (a first wait on merge[l] at its
    # target - KVH): 1B 1152.7 / 1150.4, 8B 250.5 / 249.8, Qwen3-8B 241.0 / 239.5 tok/s. None
    # beats the default beyond the spread: the chain does not wait on o_proj's queued loads.
    # The short-context attention (one program per KV group after the group's ticket) costs 2.2 /
    # 4.4 / 3.5 us per layer at 35 keys on the 1B / 8B / Qwen3-8B shapes (trace_step's attention
    # chain, 2026-12-01), after a ~1 us ticket round trip. Measured and removed (2026-12-01,
    # dd555bf's tree, sweep_mega 256 tokens, two runs each, default first): each QKV_ATTN / ATTN
    # task bulk-prefetching its share of the group's cached K / V into L2 before its wait -- 1B
    # 1146.1 / 1136.2 vs 1148.4 / 1151.3, 8B 248.7 / 249.0 vs 245.2 / 244.8, Qwen3-8B 241.7 / 242.2
    # vs 242.5 / 242.7 tok/s (the attention's K / V round trip is not what it waits on); 128 keys
    # per attention block at head_dim 64 (1B 1057.9 / 1081.0); the attention key loop without
    # Triton's cp.async pipeline (num_stages 1: 1B 1124.3 / 1133.4 vs 1159.0 / 1134.8, 8B 245.0 /
    # 245.1 vs 248.5 / 248.7, Qwen3-8B 237.2 / 235.9 vs 242.6 / 241.4; its 35-key attention stage
    # unchanged at 4.4 us on 8B). The same K / V prefetch again where the split-KV schedule
    # runs, each ATTN task asking L2 for its split's keys and values (700f9d8, a StreamConfig
    # flag, sweep_mega --prompt-len 2048 --new-tokens 128, one run, off / on interleaved):
    # Llama-3.1-8B 243.6 / 242.6 vs 245.7 / 245.6 tok/s (+0.9%), Llama-3.2-1B 1269.3 / 1224.0
    # vs 1176.1 / 1052.5 -- removed.
    # Measured and removed (H200, 2026-12-02, 4e435b4's tree + a tma field, sweep_mega 256
    # tokens, one run): the staged o_proj / gate|up / down pieces by TMA -- a host tensor
    # descriptor per stacked matrix, desc.load in the pipelined stream loop, which Triton 3.6
    # lowers to cp.async.bulk.tensor copies (boxes of [rows, 256] bf16 unswizzled at 4 rows,
    # [8, 64] with the 128-byte swizzle at 8) completing on an mbarrier, instead of cp.async;
    # bit-identical on the GPU (test_gpu, the 1B at stages 2). Session 22's probe had TMA pieces
    # streaming the 1B's chain at 81.8% of the read roofline without waits against 72-74% for
    # register pieces -- but from a warp-specialized loader. In the megakernel's own loop (no
    # loader warp: Triton's automatic warp specialization, tl.range(warp_specialize=True),
    # partitions nothing here on sm_90a -- no MMA) it is slower: Llama-3.2-1B register stream
    # 1220.7 / 1214.5, stages 1222 at 72% 1144.4, with TMA 1080.9, 2222 with TMA 1097.4;
    # Llama-3.1-8B 3333 253.6 / 252.4 vs TMA 231.4 / 231.1; Qwen3-8B (its table entry, 4444 of
    # 8192 elements at 72%) 247.1 vs TMA 239.9 tok/s. compile_check spills: 1B 1222 36/40 ->
    # 84/96 B, 8B 3333 56/72 -> 172/200 B.

    def moe_down_tile(self, top_k: int, fp8: bool = False) -> TileConfig:
        """The megakernel's EXPERT_DOWN tile at this stream's warps: moe_down_rows x
        moe_down_bk where set, else 8 x 128 (FP8 experts: 8 x moe.down_tile's K chunk)."""
        from .moe import down_tile
        t = TileConfig(8, down_tile(top_k, fp8=True).block_k if fp8 else 128, self.num_warps)
        rows, bk = self.moe_down_rows or t.block_n, self.moe_down_bk or t.block_k
        if rows & (rows - 1) or bk & (bk - 1) or bk < 16 or (fp8 and bk % FP8_GROUP.value):
            fp8_rule = f" and a multiple of {FP8_GROUP.value} (FP8)" if fp8 else ""
            raise ValueError(f"moe_down_rows={rows} / moe_down_bk={bk}: powers of two, the K "
                             f"chunk >= 16{fp8_rule}")
        return TileConfig(rows, bk, self.num_warps)

    def attention_block(self, head_dim: int) -> int:
        """Keys per iteration of the decode megakernel's attention loop (attn_block_s's rule):
        32 at head_dim <= 64, wide_head_keys' past 128."""
        if self.attn_block_s:
            return self.attn_block_s
        if head_dim <= 64:
            return 32
        return wide_head_keys(head_dim, attention_config(head_dim, 1, 1)[0])

    def op_stages(self, d_model: int | None = None) -> tuple:
        """(QKV, o_proj, gate|up, down) stream stages: stages as given, else 3 for models of
        d_model >= stages_min_d_model (QKV, gate|up: up to max_k) and 1 (the register stream)
        below it, with the PTX pieces (inline asm: not pipelined) and for a standalone launch
        (d_model None)."""
        if self.stages is not None:
            if isinstance(self.stages, tuple):
                if len(self.stages) != 4:
                    raise ValueError(f"StreamConfig.stages: one int or (QKV, o_proj, gate|up, "
                                     f"down), got {self.stages}")
                return tuple(self.stages)
            return (self.stages,) * 4
        big = d_model is not None and d_model >= self.stages_min_d_model \
            and not self.piece_mode()
        # QKV / gate|up rows chunked (longer than max_k) too: the megakernel
        # unrolls the RMSNorm statistics' chunk loop (gemv_body K_CONST), which would otherwise
        # nest in the stream loop, and the pipeliner skips a loop with a nested one (they took
        # the register stream before: Qwen2.5-14B, d_model 5120, 3333 120.1 / 120.0 vs 1313 117.6
        # / 117.6 tok/s, H200, 2026-12-03, aa954df, sweep_mega 160 tokens, one run)
        return (3, 3, 3, 3) if big else (1, 1, 1, 1)

    def piece_mode(self) -> int:
        """The kernels' PTX constexpr for these pieces (_common.weight_chunk): 0 bf16 tiles,
        1 inline-PTX words, 2 words by plain loads."""
        return 2 if self.words else int(self.ptx)

    def fp8_word_pieces(self, act_dtype, d_model: int | None = None) -> bool:
        """FP8 rows stream as words (fp8_words; None: where every op's stream is the register
        stream, op_stages) -- never with fp32 activations (act_dtype: no product rounded)."""
        if act_dtype == torch.float32:
            return False
        if self.fp8_words is not None:
            return bool(self.fp8_words)
        return max(self.op_stages(d_model)) == 1

    def elems(self, op: int) -> int:
        """Elements per weight piece of op 0-3 (QKV, o_proj, gate|up, down): op_elems[op], else
        tile_elems."""
        return self.op_elems[op] if self.op_elems is not None else self.tile_elems

    def __post_init__(self):
        if self.op_elems is not None and (len(self.op_elems) != 4 or min(self.op_elems) < 1):
            raise ValueError(f"StreamConfig.op_elems: (QKV, o_proj, gate|up, down) elements per "
                             f"piece, each >= 1, got {self.op_elems}")
        if min(self.op_stages()) < 1 or (max(self.op_stages()) > 1 and self.piece_mode()):
            raise ValueError(f"StreamConfig.stages is >= 1, and 1 with the PTX or word weight "
                             f"pieces (got stages={self.stages}, ptx={self.ptx}, "
                             f"words={self.words})")
        if self.ptx and self.words:
            raise ValueError("StreamConfig: ptx and words are two forms of the weight pieces; "
                             "set one")
        if self.carveout is not None and not -1 <= self.carveout <= 100:
            raise ValueError(f"StreamConfig.carveout: percent of the SM's shared memory, 0-100, "
                             f"or -1 (the driver's default); got {self.carveout}")

    def short_context_keys(self, head_dim: int, elt: int = 2) -> int:
        """Keys up to which a decode step runs the short-context schedule."""
        if self.attn_in_qkv_keys is not None:
            return self.attn_in_qkv_keys
        return self.attn_in_qkv_bytes // (2 * head_dim * elt)

    def persistent(self, N: int, K: int, sms: int, parts: int = 1) -> "StreamConfig":
        """This stream launched standalone over N output rows of K as the megakernel runs it:
        per_sm programs per SM, each a run of `tiles` whole tiles."""
        n_tiles = triton.cdiv(N, self.tile(K, parts).block_n)
        return dataclasses.replace(self, tiles=triton.cdiv(n_tiles, self.per_sm * sms))

    def tile(self, K: int, parts: int = 1, elems: int | None = None) -> TileConfig:
        """rows (a power of two, 1 to 128) x block_k of a tile over rows of K elements, of
        elems (default tile_elems) / parts elements (parts=2: gate|up streams two matrices per
        piece, so every op keeps the same bytes -- and registers -- in flight per piece): whole
        rows up to max_k, else the largest power-of-two chunk <= max_k that pads the row by <= 1/16:
        14336 = 7 x 2048 streams in 2048-chunks, not in 4 x 4096 with a half-masked last one
        (masked lanes cost no bandwidth, but registers and FMAs). Rows up to max_k stay whole
        even where the power of two pads them by a third: measured and removed (H200,
        2026-12-03, aa954df + a short_chunk field, sweep_mega 160 tokens, each twice in one run),
        such rows in chunks of >= 256 that pad <= 1/16 (2560 = 5 x 512, 3072 = 3 x 1024, the
        pieces full of weights, stages 3333 with the statistics' loop unrolled) -- Qwen3-4B 308.2
        / 307.0 vs 380.0 / 377.4 tok/s (306.0 at stages 1313), Llama-3.2-3B 449.7 / 449.4 vs
        512.6 / 509.3, Qwen3-0.6B (its down_proj, 3072) 1232.6 vs 1361.7 / 1356.5: a piece's
        activation chunk and per-chunk partials cost more than the masked lanes."""
        bk = triton.next_power_of_2(K)
        if bk > self.max_k:
            bk = self.max_k
            while bk > 16 and (triton.cdiv(K, bk) * bk - K) * 16 > K:
                bk //= 2
        r = max(1, (elems or self.tile_elems) // parts // bk)
        return TileConfig(min(128, 1 << (r.bit_length() - 1)), bk, self.num_warps)


def ptx_stream_ok(dtype, *ks) -> bool:
    """The PTX weight pieces read 16-byte chunks of bf16 rows: rows of K % 8 == 0 elements."""
    return dtype == torch.bfloat16 and all(k % 8 == 0 for k in ks)


def row_elems(K: int, dtype) -> int:
    """_common.row_elems on the host: elements from one packed row of a [N, K] matrix to the
    next -- K, or an FP8 row's codes, fp32 scales (one per FP8_GROUP columns) and padding to 16
    bytes."""
    if dtype != torch.float8_e4m3fn:
        return K
    return -(-(K + 4 * -(-K // FP8_GROUP.value)) // 16) * 16


def fp8_tile(cfg: TileConfig, elem_bytes: int, T: int) -> TileConfig:
    """An FP8 matrix's (elem_bytes 1) tl.dot tiles (T > 1) take one scale a row a K chunk
    (_common.gemv_acc): block_k at most FP8_GROUP."""
    if elem_bytes == 1 and T > 1 and cfg.block_k > FP8_GROUP.value:
        return dataclasses.replace(cfg, block_k=FP8_GROUP.value)
    return cfg


def stream_ptx(stream: StreamConfig | None, dtype, K: int, x_dtype=None) -> int:
    """A standalone launch's PTX constexpr (StreamConfig.piece_mode), refused (ValueError) where
    word pieces cannot be read (ptx_stream_ok); the megakernel's tiling instead falls back to
    the plain pieces. FP8 weights (quant.fp8_rows): FP8_PIECES (the tile loop's constexpr too),
    or FP8_WORDS for a stream of fp8_words where the activations (x_dtype) are not fp32."""
    if dtype == torch.float8_e4m3fn:
        words = stream is not None and stream.fp8_word_pieces(x_dtype)
        return (FP8_WORDS if words else FP8_PIECES).value
    if stream is None or not stream.piece_mode():
        return 0
    if not ptx_stream_ok(dtype, K):
        raise ValueError(f"the PTX / word weight stream needs bf16 weights with K % 8 == 0 "
                         f"(got {dtype}, K={K})")
    return stream.piece_mode()


# Programmatic dependent launch of the ops-mode kernels (use_pdl): off, measured slower in decode
# (use_pdl's docstring); FASTDECODE_PDL=1 turns it on (bench/compile_check.py sets it)
_PDL_ENV = os.environ.get("FASTDECODE_PDL", "0")


@functools.lru_cache(maxsize=None)
def _pdl_gpu(index) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def use_pdl(device) -> bool:
    """Programmatic dependent launch for the standalone (ops-mode) kernels: each launches with
    launch_pdl and starts with _common.pdl_start / pdl_wait, so it starts while the kernel before
    it drains -- its launch latency and first weight loads hidden behind that kernel's tail.
    FASTDECODE_PDL=1 and, on CUDA, sm_90+ (griddepcontrol); on the CPU the flag compiles the PDL
    code (compile_check) or runs its no-op fallbacks (the interpreter). Off: on an H200
    (2026-11-30, 0160aae, bench/gpu_session.sh pdl) ops + CUDA graph decode ran slower with it
    (Llama-3.2-1B 907.0 vs 991.7 tok/s, Llama-3.1-8B 197.6 vs 211.1); only a persistent stream
    GEMV launched back to back gained (bench_ops persist+PDL 3740 vs 3408 GB/s on 2048x16384).
    Again with the stream GEMV table (2026-12-01, 566d73c): 1B 1022.0 vs 1122.3, 8B 195.1 vs
    241.3 tok/s."""
    if _PDL_ENV != "1":
        return False
    device = torch.device(device)
    return device.type != "cuda" or _pdl_gpu(device.index)


TILE_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tile_table.json")


@functools.lru_cache(maxsize=None)
def _tile_table(path: str = TILE_TABLE) -> dict:
    """{section: {gpu: [entry, ...]}} of tile_table.json (sections: stream, gemv)."""
    with open(path) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


@functools.lru_cache(maxsize=None)
def _gpu_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def _cuda_gpu(device):
    """The GPU name whose table entries apply, or None (CPU, the interpreter)."""
    if device is None or INTERPRET:
        return None
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return _gpu_name(device.index if device.index is not None else torch.cuda.current_device())


def table_stream(entry: dict) -> StreamConfig:
    """A stream entry's config as a StreamConfig (JSON lists back to tuples)."""
    cfg = dict(entry["config"])
    for k in ("stages", "op_elems"):
        if isinstance(cfg.get(k), list):
            cfg[k] = tuple(cfg[k])
    return StreamConfig(**cfg)


def lookup_stream(gpu: str, d_model: int, ffn_dim: int, path: str = TILE_TABLE):
    """tile_table.json's StreamConfig for (gpu, d_model, ffn_dim), or None."""
    for entry in _tile_table(path).get("stream", {}).get(gpu, ()):
        if (entry["d_model"], entry["ffn_dim"]) == (d_model, ffn_dim):
            return table_stream(entry)
    return None


def lookup_gemv(gpu: str, N: int, K: int, path: str = TILE_TABLE):
    """tile_table.json's decode GEMV for (gpu, N, K): its TileConfig (one tile per program), or
    the StreamConfig of a "stream" entry (bench/sweep_gemv.py found the persistent stream
    fastest for that shape), or None."""
    for entry in _tile_table(path).get("gemv", {}).get(gpu, ()):
        if (entry["N"], entry["K"]) == (N, K):
            if "stream" in entry:
                return StreamConfig(**entry["stream"])
            return TileConfig(**entry["config"])
    return None


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device) -> int:
    """The device's streaming multiprocessors (GPU_SMS off CUDA: grid sizing only)."""
    device = torch.device(device)
    if device.type != "cuda":
        return GPU_SMS
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def gemv_stream(N: int, K: int, device, rows: int | None = None,
                parts: int = 1, dtype=None) -> StreamConfig | None:
    """The ops-mode decode GEMV as a persistent stream (StreamConfig.persistent over N rows,
    parts=2 for gate|up) where tile_table.json's gemv entry for this GPU and exact (rows, K) is a
    stream entry; else None (the tile of gemv_config). FP8 weights take the tile (dtype: the
    weights'; the table's streams were timed on bf16 ones, and their pieces' elements as FP8
    codes spill: sm_90a, 8B gate|up at 16384 elements 255 registers, 376 B of spills)."""
    if dtype == torch.float8_e4m3fn:
        return None
    gpu = _cuda_gpu(device)
    hit = lookup_gemv(gpu, rows or N, K) if gpu is not None else None
    if not isinstance(hit, StreamConfig):
        return None
    return hit.persistent(N, K, sm_count(device), parts)


# Wide models with no table entry, on Hopper (228 KB of shared memory an SM): d_model at least
# WIDE_MIN_D_MODEL streams WIDE_STREAM -- 4 shared-memory stages of 8192-element pieces (71.7
# KB a program) with a 72% carveout (~92 KB of L1 left), the entries of the two 5120-wide
# shapes measured, instead of the default 3 stages of 16384 (98.4 KB: the driver's 228 KB).
# sweep_mega, H200, tok/s, WIDE_STREAM against the default: Qwen2.5-14B (5120) 126.1 vs 120.1
# / 120.0 (2026-12-03, 160 tokens), Mistral-Nemo-12B (5120) 157.4 / 157.2 vs 148.1 / 147.5
# (2026-12-04, 9e12af0, 256 tokens, interleaved); at 4096 level or near (Llama-3.1-8B 253.1 vs
# 253.7 / 252.6, Qwen3-8B 247.3 vs 245.2 / 245.1: its table entry), below it slower
# (2026-12-04, 9e12af0, 256 tokens, interleaved: Qwen2.5-7B (3584) 253.8 / 253.6 vs 270.9 /
# 268.6, Llama-3.2-3B (3072) 469.1 / 469.0 vs 518.3 / 517.7; Qwen3-4B (2560) 340.3 vs 377.2).
# bench/RESULTS.md sessions 21, 32, 40. Other GPUs keep the default (unmeasured; a carveout
# sized for Hopper could refuse two programs an SM elsewhere).
WIDE_MIN_D_MODEL = 5120
WIDE_STREAM = StreamConfig(stages=4, op_elems=(8192,) * 4, carveout=72)


def stream_config(device, spec=None, path: str = TILE_TABLE) -> StreamConfig:
    """The megakernel's decode stream for this GPU and model: tile_table.json's entry (written by
    bench/sweep_mega.py --record: its best config by tok/s on that GPU) for the model's exact
    (d_model, ffn_dim), else on Hopper WIDE_STREAM for d_model >= WIDE_MIN_D_MODEL, else
    StreamConfig's defaults (their rules: tile, op_stages) -- a shipped table and rules, no
    autotuning at first call."""
    gpu = _cuda_gpu(device)
    if spec is None or gpu is None:
        return StreamConfig()
    hit = lookup_stream(gpu, spec.d_model, spec.ffn_dim, path)
    if hit is not None:
        return hit
    if spec.d_model >= WIDE_MIN_D_MODEL and torch.cuda.get_device_capability(device)[0] == 9:
        return WIDE_STREAM
    return StreamConfig()


# the tl.dot tile of every T > 1 step on a GPU (a prefill chunk, prompt lookup's check of k + 1
# rows), ops and megakernel. bench/sweep_rows.py, H200, 2026-12-03 (RESULTS.md session 35), the
# megakernel's step of 2 / 16 rows: 1B 1.83 / 2.02 ms at 32 x 256 (4 warps) against 2.97 / 3.26
# at the 64 x 64 before; 64 x 128 2.03 / 2.30, 32 x 128 2.07 / 2.33, 64 x 256 2.24 / 2.30,
# 32 x 256 at 8 warps 2.05 / 2.39, 16 x 512 4.34 / 4.39, 32 x 512 3.12 / 3.27; 8B (4 / 16 rows)
# 7.21 / 7.36 against 9.15 / 9.64 (64 x 128: 7.60 / 8.00). Still 2.3x / 1.8x a decode step: the
# tile loops over K on its own, a few KB in flight per program. Its pieces pipelined through
# shared memory across a task's tiles (3 stages; compile_check --rows-tile: 91 / 78 KB on the
# 1B / 8B, two programs an SM) timed slower: 1B 2 / 16 rows 2209 / 2509 us against 1846 / 1998,
# 8B 7595 / 8427 against 6668 / 7211 (sweep_rows, bench/RESULTS.md session 36): removed.
# compile_check --rows-tile, sm_90a: 32 x 256 x 4 255 registers, 91 KB of shared memory on the
# 1B and 8B shapes (64 x 64: 38 / 70 KB). Timed on 2-byte weights; rows_tile keeps its pieces'
# bytes for other widths.
MULTI_ROW_TILE = TileConfig(block_n=32, block_k=256, num_warps=4)
# (its pieces streamed across each task's tiles as decode's are, a tl.dot per piece, measured
# 1.16-1.66x slower than each tile's own K loop: bench/sweep_rows.py, 1B / 8B at 2 and 16 rows,
# RESULTS.md session 38 -- removed)
ROWS_KSPLIT_MAX = 8  # at most this many K parts per o_proj / down_proj tile (rows_ksplit)
# K parts per o_proj / down_proj tile of a step of several rows: None, rows_ksplit's rule; an int,
# that many (bench/sweep_rows.py's /kN tiles). The rule, H200 (bench/RESULTS.md session 39):
# bench_lookup's kernel time of a 2 / 4 / 8 / 11 / 16-row step against session 38's whole tiles,
# 1B (4 parts) 1280 / 1346 / 1475 / 1562 / 1705 us against 1429 / 1464 / 1565 / 1603 / 1670, 8B
# (2 parts) 5944 / 6116 / 6468 / 6736 / 7156 against 6356 / 6443 / 6662 / 6750 / 7009; sweep_rows
# in one run, 1B 2 / 16 rows 1446 / 1858 us with 4 parts against 1611 / 1828 whole, 8B 6331 /
# 7243 (2 parts) against 6498 / 7097 -- the 16 rows lost while the REDUCE tasks summed one row
# at a time; with their [16, 256] tiles (all_reduce.residual_sum_body ROWS) the 1B's kernel at
# 12 / 16 rows 1470 / 1553 and 1472 / 1547 us with 4 parts against 1623 / 1681 and 1621 / 1678
# whole (sweep_rows' kernel column, interleaved, aefc32f). With the norm statistics once per
# task (gemv.tile_rstd; 9e12af0, interleaved, kernel us): 1B 2 / 4 / 16 rows 1226 / 1268 / 1481
# and 1222 / 1265 / 1489 against 1360 / 1404 / 1598 and 1368 / 1409 / 1596 whole; 8B 5752 /
# 5846 / 6238 and 5602 / 5701 / 6309 (2 parts) against 6046 / 6131 / 6602 and 6080 / 6185 /
# 6568 (RESULTS.md session 40)
ROWS_KSPLIT = None


def rows_ksplit(n_tiles: int, n_chunks: int, n_programs: int) -> int:
    """K parts of each o_proj / down_proj tile in a megakernel step of several rows (one rank;
    graph.Tiling.ksplit): n_tiles such tiles per op (the larger op's, every token block) get
    about one task per program, each part at least one K chunk of its tile (n_chunks: the
    fewer of the two ops'). Why: a 4-row step of the Llama-3.2-1B shape had 64 down tiles of K
    8192 for 264 programs -- three quarters idle through a 25 us phase at 29% of the read
    roofline, its 64 o_proj tiles alike (bench/trace_step.py --rows 4, RESULTS.md session 38).
    1B: 4 parts; 8B (128 tiles): 2; d_model 5120 (160 tiles): 1, no split."""
    if ROWS_KSPLIT is not None:
        return ROWS_KSPLIT
    return max(1, min(n_programs // max(1, n_tiles), n_chunks, ROWS_KSPLIT_MAX))


def rows_tile(elem_bytes: int = 2) -> TileConfig:
    """MULTI_ROW_TILE for weights of elem_bytes bytes an element: the same bytes a piece (K
    elements scaled), since the pipelined K loop keeps ~3 pieces of each weight matrix in shared
    memory. fp32 weights at 32 x 256 (compile_check, the tiny llama in fp32, sm_90a): 182 KB a
    program -- two never fit an H200 SM, so CUDA refused the cooperative launch and the steps of
    several rows fell back to one program an SM (bench/RESULTS.md session 41) -- and 4.3 / 6.0
    KB of spill stores / loads; at 32 x 128: 91 KB (bf16's at 32 x 256), 0.9 / 1.0 KB."""
    t = MULTI_ROW_TILE
    return TileConfig(block_n=t.block_n, block_k=max(16, t.block_k * 2 // elem_bytes),
                      num_warps=t.num_warps)


# FP8 rows' decode tile (quant.fp8_rows; the table's entries were timed on bf16): 2 rows x 2048
# codes at 4 warps, the best of seven tiles over the 8B's gate|up / down / o and the 1B's gate|up
# together (H100, cold L2, 2026-12-06, devtmp sweep: 44.1 / 24.3 / 8.7 / 15.3 us against 46.2 /
# 23.3 / 8.7 / 16.8 for 4 x 1024 at 4 warps; streams of FP8 pieces 1.5-2.3x slower)
FP8_DECODE_TILE = TileConfig(block_n=2, block_k=2048, num_warps=4)


def gemv_config(N: int, K: int, T: int, device, rows: int | None = None,
                elem_bytes: int = 2) -> TileConfig:
    """The ops-mode GEMV tile: decode (T=1) from tile_table.json's gemv entry for this GPU and
    exact (rows, K) -- rows: the weight rows streamed, N unless given (gate|up: 2N, as
    bench/sweep_gemv.py --record times it) -- else the rule the module docstring derives; a
    step of several rows (T > 1, ops and megakernel) rows_tile(elem_bytes: the weights'); FP8
    rows (elem_bytes 1) decode at FP8_DECODE_TILE."""
    if INTERPRET or getattr(device, "type", str(device)) == "cpu":
        return TileConfig(block_n=min(1024, triton.next_power_of_2(N)),
                          block_k=min(1024, triton.next_power_of_2(K)), num_warps=4)
    if T > 1:
        return rows_tile(elem_bytes)
    if elem_bytes == 1:
        return FP8_DECODE_TILE
    gpu = _cuda_gpu(device)
    hit = lookup_gemv(gpu, rows or N, K) if gpu is not None else None
    if isinstance(hit, TileConfig):
        return hit
    return TileConfig(block_n=4, block_k=1024, num_warps=8 if N < 4096 else 4)


def attention_config(head_dim: int, group: int, T: int):
    """(BLOCK_S keys per iteration, BLOCK_TOK tokens per program). M = group * BLOCK_TOK rows are
    padded to >= 16 for tl.dot; BLOCK_S=64 keys x head_dim<=256 bf16 stays in registers."""
    block_tok = 1 if T == 1 else max(1, 16 // triton.next_power_of_2(group))
    return 64, block_tok


def wide_head_keys(head_dim: int, keys: int) -> int:
    """Keys per attention block of a megakernel (decode, or a step of several rows) whose
    blocks are `keys` keys at head_dim <= 128: past 128 the largest power of two <= keys * 128 /
    head_dim (tl.dot: >= 16), so a block holds no more elements than at head_dim 128 -- chosen
    by shared memory, not timed. compile_check (sm_90a): gemma-2b's decode kernel (head_dim
    256) 75 KB a program at 32 keys instead of 141 KB at 64; StableLM-2-12B's 4-row kernel
    (head_dim 160, padded to 256) 141 KB at 64 keys (its K / V blocks' two pipeline stages: 4
    x 64 KB live) -- past the ~113 KB two programs an SM can have, so CUDA refused the
    cooperative launch and the runtime fell back to one program an SM (bench/RESULTS.md
    session 57)."""
    if head_dim <= 128:
        return keys
    return max(16, 1 << ((keys * 128 // head_dim).bit_length() - 1))


def prefill_attention_config(head_dim: int, group: int):
    """(BLOCK_S, BLOCK_TOK, num_warps) of a long prompt's pass (runtime._prefill_long: thousands
    of query tokens, one split per KV head): 64-row score tiles (tokens x padded group) over
    32-key blocks at 4 warps; 32 rows past head_dim 128 (not measured: halves the fp32
    accumulator's registers). bench/sweep_attention.py, H200, 2026-12-02 (bench/RESULTS.md
    session 25): best of 16 tiles on the 1B (head_dim 64), 8B and Qwen2.5-7B (128) shapes, 2048
    tokens at 0 and 6144 keys before them -- 8B at 6144: 0.88 ms (274 TFLOPS, SDPA's
    FlashAttention 0.75 ms) against the decode tile's 16 rows x 64 keys 1.98 ms; 1B 0.65 vs
    1.13 ms."""
    rows = 64 if head_dim <= 128 else 32
    return 32, max(1, rows // triton.next_power_of_2(group)), 4


def qkv_pairs(head_dim: int, qk_norm: bool, T: int, block_n: int) -> int:
    """Rotation pairs per QKV + RoPE tile (BLOCK_H): the decode GEMV tile's rows, except that q/k
    RMSNorm needs the whole head in one program and T>1 tl.dot tiles need >= 16 rows. T>1
    keeps whole heads: a step of several rows with 16 pairs per tile (the 1B's QKV phase, 48
    whole-head tasks of 12.9-16.3 us on 264 programs at 4 rows, over twice as many tasks) timed
    slower -- 1B 4 / 16 rows 1346 / 1560 and 1334 / 1566 us of kernel against 1270 / 1479 and
    1275 / 1489 (H200, 2026-12-04, b9fce65, sweep_rows, interleaved; RESULTS.md session 40)."""
    half = triton.next_power_of_2(head_dim // 2)
    if T > 1:
        return max(16, half)
    return half if qk_norm else min(half, block_n)


def attention_blocks(head_dim: int, group: int, block_tok: int):
    """(BLOCK_G, BLOCK_M, BLOCK_D): group padded to a power of two, the score tile's rows
    (tokens x group members, >= 16 for tl.dot) and head_dim padded (>= 16)."""
    block_g = triton.next_power_of_2(group)
    return block_g, max(16, block_g * block_tok), max(16, triton.next_power_of_2(head_dim))


def merge_splits(n_splits: int, block_g: int, block_d: int, num_warps: int = 4) -> int:
    """Splits per round of the attention merge of block_g heads (a power of two) of block_d
    elements: all of them while one round's partials fit 64 fp32 registers per thread (one round
    trip to L2), else rounds of as many as fit: one head of head_dim 128 merges 64 splits (32 KB)
    in one round at 4 warps, a group of 4 such heads 16 a round."""
    fit = max(1, 64 * 32 * num_warps // (block_g * block_d))
    return min(triton.next_power_of_2(n_splits), 1 << (fit.bit_length() - 1))


def merge_heads(group: int, heads: int | None = 1) -> int:
    """Query heads per attention-merge program (MERGE task): `heads` (StreamConfig.merge_heads;
    0 or None: the whole group) as a power of two <= the group's: one head each by default, so a
    group's merge is `group` programs' loads in flight at once, not one program's rounds."""
    whole = triton.next_power_of_2(group)
    return whole if not heads else min(whole, triton.next_power_of_2(heads))


def merge_block(n_tiles: int) -> int:
    """Lanes of the one-program token-choice merge: 8192 lanes take the 32K partials of a 128K
    vocabulary at BLOCK_N=4 in 4 iterations instead of 32."""
    return min(8192, triton.next_power_of_2(n_tiles))
