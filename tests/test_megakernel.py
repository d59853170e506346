"""The task stream: schedule properties, the VM under random legal interleavings, and the
megakernel (serial mode on CPU, all SMs on GPU): multi-step launches, in-kernel EOS, watchdog."""
import random

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdecode
from conftest import DEVICE
from fastdecode.graph import build_step, make_tiling
from fastdecode.schedule import ScheduleError, build_schedule, permuted, validate
from fastdecode.spec import ModelSpec
from fastdecode.opcodes import WORDS, Op
from fastdecode.triton_kernels.config import StreamConfig
from fastdecode.triton_kernels.attention import kv_prefetch, split_plan, split_range_host
from fastdecode.triton_kernels.megakernel import next_gate_up, rows_prefetch
from helpers import drop_encoded_task
from models import hf_shapes, tiny_model


@st.composite
def specs(draw):
    kv = draw(st.integers(1, 3))
    group = draw(st.integers(1, 4))
    hd = 2 * draw(st.integers(1, 12))
    L = draw(st.integers(1, 3))
    qk_norm = draw(st.booleans())
    return ModelSpec(family="llama", n_layers=L, d_model=draw(st.integers(4, 96)),
                     n_heads=kv * group, n_kv_heads=kv, head_dim=hd,
                     ffn_dim=draw(st.integers(3, 120)), vocab_size=draw(st.integers(5, 300)),
                     rms_eps=1e-5, rope_theta=1e4, qk_norm=qk_norm,
                     layer_windows=(0,) * L, post_norms=draw(st.booleans()),
                     qk_norm_full=qk_norm and draw(st.booleans()))


@given(spec=specs(), T=st.sampled_from([1, 3, 16]), P=st.integers(1, 17),
       max_seq=st.integers(20, 300), seed=st.integers(0, 1000), fused=st.booleans(),
       short=st.booleans(), parts=st.integers(1, 4))
def test_schedule_properties(spec, T, P, max_seq, seed, fused, short, parts):
    """fused: merge_in_attn and norm_in_qkv (no MERGE / QKNORM tasks in decode steps); short: the
    short-context decode step (QKV_ATTN tasks, no ATTN / MERGE / QKNORM tasks); parts: K parts
    per o / down tile of a step of several rows (config.ROWS_KSPLIT; REDUCE tasks sum them).
    Norms after the blocks (post_norms): REDUCE tasks at every T; q / k norms over all heads
    (qk_norm_full): no norm_in_qkv; QKNORM tasks at every T but the short decode step's, whose
    QKN_ATTN tasks (a KV group's norm and attention) replace them; either waits for all of its
    layer's QKV tasks."""
    from fastdecode.triton_kernels import config
    short = short and T == 1
    was, config.ROWS_KSPLIT = config.ROWS_KSPLIT, parts
    try:
        graph = build_step(spec, make_tiling(spec, T, max_seq, DEVICE, StreamConfig(
            merge_in_attn=fused, norm_in_qkv=fused), attn_in_qkv=short, n_programs=P), P)
    finally:
        config.ROWS_KSPLIT = was
    ops = {t.op.name for t in graph.tasks}
    in_qkv = short and not spec.qk_norm_full  # QKV_ATTN tasks run the groups' attention
    assert ("QKV_ATTN" in ops) == in_qkv and ("QKV" in ops) != in_qkv
    assert ("QKN_ATTN" in ops) == (short and spec.qk_norm_full)
    assert graph.tiling.ksplit == (parts if T > 1 else 1)
    assert ("REDUCE" in ops) == (graph.tiling.ksplit > 1 or spec.post_norms)
    assert not short or not ops & {"ATTN", "MERGE", "QKNORM"}
    if spec.qk_norm_full:
        qkv = [t for t in graph.tasks if t.op.name == "QKV"]
        norms = "QKN_ATTN" if short else "QKNORM"
        assert norms in ops and {t.signal for t in qkv} == {
            ("qkv", l, 0) for l in range(spec.n_layers)}
        assert all(graph.producers[t.wait] == sum(q.layer == t.layer for q in qkv)
                   for t in graph.tasks if t.op.name == norms)
        assert sum(t.op.name == norms for t in graph.tasks) == spec.n_layers * spec.n_kv_heads
    sched = build_schedule(graph, P)
    assert sorted(i for q in sched.queues for i in q) == list(range(len(graph.tasks)))
    assert sched.words.shape[0] == P and int(sched.lengths.sum()) == len(graph.tasks)
    order = validate(sched, steps=2, rng=random.Random(seed))  # a random legal interleaving
    assert len(order) == 2 * len(graph.tasks)
    perm = list(range(P))
    random.Random(seed).shuffle(perm)
    moved = permuted(sched, perm)  # the queues dealt to other programs: as legal
    assert [moved.queues[p] for p in range(P)] == [sched.queues[perm[p]] for p in range(P)]
    assert torch.equal(moved.words[0], sched.words[perm[0]])
    assert len(validate(moved, steps=2, rng=random.Random(seed + 1))) == 2 * len(graph.tasks)
    with pytest.raises(ScheduleError, match="permutation"):
        permuted(sched, perm + [P])
    for key, n in graph.producers.items():
        assert n == sum(1 for t in graph.tasks if t.signal == key)


def test_short_context_reach():
    """The short-context decode schedule's reach: 96 KB of K + V per KV group by default (384 keys
    at head_dim 64 in bf16, 192 at 128, half as many in fp32), or the keys asked for (0: never)."""
    assert StreamConfig().short_context_keys(64) == 384
    assert StreamConfig().short_context_keys(128) == 192
    assert StreamConfig().short_context_keys(128, 4) == 96
    assert StreamConfig(attn_in_qkv_keys=0).short_context_keys(64) == 0
    assert StreamConfig(attn_in_qkv_keys=21).short_context_keys(128) == 21


def test_decode_attention_block():
    """The decode megakernel's attention loop block (StreamConfig.attention_block): 32 keys at
    head_dim <= 64, 64 up to 128, past it at most 64 x 128 elements (Gemma's 256: 32 keys), or as
    asked; a step of several rows' 64 keys, past head_dim 128 at most 64 x 128 elements too
    (wide_head_keys: StableLM-2-12B's 160 -> 32); the split plan (chunk, splits: the runtime's
    partials buffer) stays attention_config's whatever the loop block."""
    assert StreamConfig().attention_block(64) == 32 and StreamConfig().attention_block(32) == 32
    assert StreamConfig().attention_block(128) == 64
    assert [StreamConfig().attention_block(hd) for hd in (160, 256, 512)] == [32, 32, 16]
    assert StreamConfig(attn_block_s=16).attention_block(128) == 16
    for hd, stream in ((64, None), (128, None), (160, None), (256, None),
                       (64, StreamConfig(attn_block_s=16))):
        spec = ModelSpec(family="llama", n_layers=1, d_model=256, n_heads=4, n_kv_heads=2,
                         head_dim=hd, ffn_dim=512, vocab_size=100, rms_eps=1e-5, rope_theta=1e4,
                         qk_norm=False, layer_windows=(0,))
        decode = make_tiling(spec, 1, 4096, DEVICE, stream)
        prefill = make_tiling(spec, 8, 4096, DEVICE, stream)
        assert decode.attn_block_s == (stream or StreamConfig()).attention_block(hd)
        assert prefill.attn_block_s == (64 if hd <= 128 else 32)
        assert (decode.attn_chunk, decode.n_splits) == (prefill.attn_chunk, prefill.n_splits) \
            == split_plan(4096, 2, 64)


def test_rows_ksplit_rule(monkeypatch):
    """config.rows_ksplit (config.ROWS_KSPLIT None): about one o / down task per program, a part
    at least one K chunk, at most ROWS_KSPLIT_MAX parts; an int ROWS_KSPLIT overrides it."""
    from fastdecode.triton_kernels import config
    monkeypatch.setattr(config, "ROWS_KSPLIT", None)
    rule = config.rows_ksplit
    assert rule(64, 8, 264) == 4    # Llama-3.2-1B: 2048 rows / 32, o's K 2048 in 8 chunks of 256
    assert rule(128, 16, 264) == 2  # Llama-3.1-8B
    assert rule(160, 20, 264) == 1  # d_model 5120: no split
    assert rule(300, 8, 264) == 1   # more tiles than programs
    assert rule(64, 2, 264) == 2    # two chunks, two parts
    assert rule(4, 64, 264) == config.ROWS_KSPLIT_MAX
    monkeypatch.setattr(config, "ROWS_KSPLIT", 3)
    assert rule(64, 8, 264) == 3


def test_stream_stages_rule():
    """Shared-memory stream stages (QKV, o_proj, gate|up, down): 3 from stages_min_d_model on,
    the register stream below it, with the PTX pieces and for a standalone launch; explicit
    stages as given; PTX pieces with explicit stages, and a tuple not of four, are refused."""
    assert StreamConfig().op_stages(2048) == (1, 1, 1, 1)
    assert StreamConfig().op_stages(2560) == (3, 3, 3, 3)  # Qwen3-4B
    assert StreamConfig().op_stages(3072) == (3, 3, 3, 3)  # Llama-3.2-3B, Qwen2.5-7B (3584)
    assert StreamConfig().op_stages(4096) == (3, 3, 3, 3)
    # QKV / gate|up rows chunked (> max_k): staged too (their row_rstd unrolled, K_CONST)
    assert StreamConfig().op_stages(5120) == (3, 3, 3, 3)
    assert StreamConfig().op_stages() == (1, 1, 1, 1)
    assert StreamConfig(ptx=True).op_stages(8192) == (1, 1, 1, 1)
    assert StreamConfig(stages=2).op_stages(2048) == (2, 2, 2, 2)
    assert StreamConfig(stages=(2, 1, 3, 2)).op_stages(4096) == (2, 1, 3, 2)
    with pytest.raises(ValueError, match="stages"):
        StreamConfig(ptx=True, stages=2)
    with pytest.raises(ValueError, match="stages"):
        StreamConfig(stages=(1, 3, 2))
    # the shared-memory carveout: a percent, or -1 (the driver's default)
    assert StreamConfig(carveout=-1).carveout == -1 and StreamConfig(carveout=72).carveout == 72
    for bad in (-2, 101):
        with pytest.raises(ValueError, match="carveout"):
            StreamConfig(carveout=bad)


def test_op_elems_set_each_ops_tile():
    """StreamConfig.op_elems: each decode op's piece elements (QKV, o_proj, gate|up, down) set its
    own tile rows (gate|up: two matrices a piece, half the rows), the lm_head keeps tile_elems;
    None is tile_elems everywhere; a tuple not of four is refused."""
    from fastdecode.spec import ModelSpec
    spec = ModelSpec(family="llama", n_layers=1, d_model=2048, n_heads=32, n_kv_heads=8,
                     head_dim=64, ffn_dim=8192, vocab_size=1000, rms_eps=1e-5, rope_theta=1e4,
                     qk_norm=False, layer_windows=(0,))
    base = StreamConfig(16384, 4)
    per_op = StreamConfig(16384, 4, op_elems=(4096, 8192, 32768, 65536))
    a, b = (make_tiling(spec, 1, 256, DEVICE, s) for s in (base, per_op))
    assert (a.rows_q, a.rows_g, a.rows_f, a.rows_d) == (8, 4, 4, 8)  # 16384 / K (/ 2 gate|up)
    assert (b.rows_q, b.rows_g, b.rows_f, b.rows_d) == (4, 8, 16, 8)
    assert (b.bk_q, b.bk_g, b.bk_f) == (a.bk_q, a.bk_g, a.bk_f)  # whole rows up to max_k
    assert b.qkv_pairs * 2 * b.qkv_bk <= 4096 < a.qkv_pairs * 2 * a.qkv_bk
    assert base.elems(2) == 16384 and per_op.elems(2) == 32768
    with pytest.raises(ValueError, match="op_elems"):
        StreamConfig(op_elems=(8192, 8192))


def test_few_tiles_rows_rule():
    """graph.few_tiles_rows: a decode op whose output rows make fewer tiles than a third of the
    programs gets fewer rows per tile, until they make half -- Gemma-3-1B's o_proj / down_proj
    (1152 rows, 16 a tile: 72 tiles) at 264 programs take 8 (144 tiles), StableLM-2-1.6B's down
    (2048 rows, 32 a tile) 8 (256 tiles); Qwen3-0.6B's o_proj (1024 rows, 8 a tile: 128 tiles,
    about half of 264), the Llama-3.2-1B shape (256 / 512 / 1024 tiles) and an unknown program
    count keep the stream's rows; the lm_head never changes."""
    from fastdecode.graph import few_tiles_rows
    assert [few_tiles_rows(16, 1152, P) for P in (1, 144, 216, 217, 264, 10 ** 6)] == \
        [16, 16, 16, 8, 8, 1]
    assert (few_tiles_rows(32, 2048, 264), few_tiles_rows(8, 1024, 264)) == (8, 8)
    gemma = ModelSpec(family="gemma3_text", n_layers=1, d_model=1152, n_heads=4, n_kv_heads=1,
                      head_dim=256, ffn_dim=6912, vocab_size=262144, rms_eps=1e-6,
                      rope_theta=1e4, qk_norm=True, layer_windows=(0,))
    llama = ModelSpec(family="llama", n_layers=1, d_model=2048, n_heads=32, n_kv_heads=8,
                      head_dim=64, ffn_dim=8192, vocab_size=128256, rms_eps=1e-5,
                      rope_theta=1e4, qk_norm=False, layer_windows=(0,))
    rows = lambda t: (t.rows_q, t.rows_f, t.rows_g, t.rows_d)  # noqa: E731
    for spec, before, after in ((gemma, (16, 16, 4, 8), (8, 8, 4, 8)),
                                (llama, (8, 4, 4, 8), (8, 4, 4, 8))):
        assert rows(make_tiling(spec, 1, 256, DEVICE, StreamConfig())) == before
        assert rows(make_tiling(spec, 1, 256, DEVICE, StreamConfig(), n_programs=264)) == after
    rows4 = make_tiling(gemma, 4, 256, DEVICE, StreamConfig(), n_programs=264)  # T > 1: its own
    assert rows4 == make_tiling(gemma, 4, 256, DEVICE, StreamConfig())


def test_validator_rejects_missing_producer():
    spec = ModelSpec.from_hf_config(tiny_model("qwen2").config)
    graph = build_step(spec, make_tiling(spec, 1, 64, DEVICE), 5)
    victim = next(i for i, t in enumerate(graph.tasks) if t.op.name == "DOWN")
    graph.tasks.pop(victim)  # its counter still expects it
    with pytest.raises(ScheduleError, match="stuck"):
        build_schedule(graph, 5)


@pytest.mark.parametrize("family,fused,keys,parts", [
    ("llama", False, 0, 1), ("mistral", False, 0, 1), ("qwen3", False, 0, 1),
    ("qwen3", True, 0, 1), ("mistral", False, 21, 1), ("qwen3", False, 21, 1),
    ("llama_bias_tied", False, 0, 3), ("gemma3_text", True, 21, 3), ("olmo3", True, 21, 3),
    ("gemma2", False, 0, 1)])
def test_vm_random_interleavings_match_torch(family, fused, keys, parts, monkeypatch):
    """fused (merge_in_attn, norm_in_qkv): whichever ATTN task of a group runs last in the
    interleaving merges it, whichever QKV task completes a group's tiles norms it. keys 21: the
    decode steps at positions 19, 20 run the short-context schedule (the QKV task completing a
    group runs its attention), the later ones the split-KV schedule. parts 3: the prompt's
    o / down tiles in 3 K parts (config.ROWS_KSPLIT; whole rows on the CPU: one K chunk, so
    parts 1 and 2 are empty), REDUCE tasks adding them and the biases. gemma3_text, olmo3,
    gemma2: norms after the blocks (REDUCE tasks normalizing the sums, K parts or not); olmo3's
    q / k norms over all heads (its QKNORM tasks after every QKV task of the layer, whatever
    fused and keys ask)."""
    from fastdecode.triton_kernels import config
    monkeypatch.setattr(config, "ROWS_KSPLIT", parts)
    model = tiny_model(family)
    ids = torch.randint(0, 101, (1, 24), generator=torch.Generator().manual_seed(9))
    ref = fastdecode.from_hf(model, max_seq_len=48, mode="torch")
    want = torch.cat([ref(ids[:, :19])[0]] + [ref(ids[:, t:t + 1])[0] for t in range(19, 24)])
    for seed in range(3):
        fm = fastdecode.from_hf(model, max_seq_len=48, mode="vm")
        fm.runtime.n_programs = 3 + seed
        fm.runtime.vm_rng = random.Random(seed)
        fm.runtime.mega_stream = StreamConfig(merge_in_attn=fused, norm_in_qkv=fused,
                                              attn_in_qkv_keys=keys)
        got = torch.cat([fm(ids[:, :19])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(19, 24)])
        assert float((got - want).norm() / want.norm()) < 1e-6
        assert ((1, True) in fm.runtime._schedules) == (keys > 0)
        assert {(T > 1, s.graph.tiling.ksplit) for (T, _), s in fm.runtime._schedules.items()} \
            == {(True, parts), (False, 1)}


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_split_kv_follows_the_context_not_the_cache(family):
    """A short context in a long cache: the split-KV decode steps (attn_in_qkv_keys 0) deal their
    35-37 keys over a 256-key cache's 4 splits per KV head, 16-key blocks, so 3 of them hold keys
    (a chunk fixed at max_seq_len / n_splits = 64 keys left one) -- megakernel and VM against
    torch. Mistral's 5-key window: the splits start at the window (split_range's k0 > 0)."""
    model = tiny_model(family).to(DEVICE)
    ids = torch.randint(0, 101, (1, 37), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    ref = fastdecode.from_hf(model, max_seq_len=256, mode="torch")
    want = torch.cat([ref(ids[:, :34])[0]] + [ref(ids[:, t:t + 1])[0] for t in range(34, 37)])
    for mode in ("mega", "vm"):
        fm = fastdecode.from_hf(model, max_seq_len=256, mode=mode)
        fm.runtime.mega_stream = StreamConfig(attn_in_qkv_keys=0, attn_block_s=16)
        got = torch.cat([fm(ids[:, :34])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(34, 37)])
        assert float((got - want).norm() / want.norm()) < 1e-5, mode
    tg = fm.runtime.schedule(1, short=False).graph.tiling
    window = 5 if family == "mistral" else 0
    k0, chunk = split_range_host(34, 1, window, tg.n_splits, tg.attn_block_s)
    assert (tg.n_splits, tg.attn_block_s, k0) == (4, 16, max(0, 34 - window + 1) if window else 0)
    assert triton.cdiv(35 - k0, chunk) == (1 if window else 3)


STAGED = StreamConfig(64, 4, max_k=16, attn_in_qkv_keys=10, stages=3, l2_prefetch_kb=1,
                      attn_block_s=16, merge_heads=0, kv_prefetch=True, attn_outline=True)
WHOLE_ROWS = StreamConfig(2048, 4, merge_in_attn=True, norm_in_qkv=True, attn_in_qkv_keys=0,
                          l2_prefetch_kb=64, op_elems=(512, 4096, 1024, 2048), kv_prefetch=True)
# a mixture's EXPERT_DOWN tiles: 16 rows (of d_model 40: a partial last tile) x K chunks of 16
# (experts 22 wide: a masked half chunk last)
MOE_DOWN = StreamConfig(64, 4, max_k=16, moe_down_rows=16, moe_down_bk=16, merge_heads=0,
                        attn_in_qkv_keys=10)


@pytest.mark.parametrize("family,stream", [("qwen2", STAGED), ("qwen3", STAGED),
                                           ("qwen2", WHOLE_ROWS), ("qwen3", WHOLE_ROWS),
                                           ("gemma3_text", STAGED), ("olmo3", WHOLE_ROWS),
                                           ("qwen2_moe", MOE_DOWN), ("olmoe", MOE_DOWN)])
def test_decode_stream_tiles_match_torch(family, stream):
    """The decode tasks' stream tiles: K chunked (max_k=16 < every K of the tiny models: several
    pieces per tile, odd K ends mid-chunk; QKV / o / gate|up / down streamed through shared
    memory, stages 3, their waits inside the stream) and whole rows with many rows per tile (the
    register stream); qkv bias and q/k norm epilogues. fp32 weights: only the summation order differs from torch mode.
    attn_in_qkv_keys 10: the steps at positions 8, 9 run the short-context schedule (QKV_ATTN),
    10, 11 the split-KV one; 0: only the split-KV one, with its fused-group variants.
    l2_prefetch_kb: o_proj tasks ask L2 for the next gate|up task's weights (a hint: results
    unchanged; the interpreter runs the range arithmetic, a GPU the bulk prefetches); so does
    kv_prefetch (the K / V a group's attention reads, before the QKV / ATTN tasks' waits).
    attn_block_s 16: the attention loops' key blocks smaller than the split plan's (its chunk, and
    the partials' buffer, stay those of attention_config's block). op_elems: each op's own piece
    elements, so QKV / o / gate|up / down tiles differ in rows (WHOLE_ROWS). merge_heads 0: one
    MERGE task per KV group (the default: one per q head; merge_in_attn: the group's heads one at
    a time in its last ATTN task). attn_outline (STAGED): attention through megakernel.attend's
    out-of-line call (the interpreter runs the same function; a GPU compiles it as a .func).
    gemma3_text, olmo3: norms after the blocks (o / down through REDUCE tasks, the staged stream's
    sums to the K-part buffer), olmo3's q / k norms over all heads (QKNORM tasks whatever
    norm_in_qkv says). qwen2_moe, olmoe (MOE_DOWN): EXPERT_DOWN's own tile
    (StreamConfig.moe_down_rows / moe_down_bk); olmoe's short steps: QKN_ATTN tasks (its q / k
    norms over all heads: a group's norm and attention after all of the layer's QKV tasks)."""
    model = tiny_model(family).to(DEVICE)
    ids = torch.randint(0, 101, (1, 12), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    want = torch.cat([ref(ids[:, :8])[0]] + [ref(ids[:, t:t + 1])[0] for t in range(8, 12)])
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="mega")
    fm.runtime.mega_stream = stream
    got = torch.cat([fm(ids[:, :8])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(8, 12)])
    assert float((got - want).norm() / want.norm()) < 1e-5
    ops = [t.op.name for t in fm.runtime.schedule(1, short=False).graph.tasks]
    assert ("MERGE" not in ops) == stream.merge_in_attn  # the last ATTN task of a group merged
    assert ops.count("MERGE") in (0, model.config.num_hidden_layers
                                  * model.config.num_key_value_heads)  # merge_heads 0
    s = fm.weights.spec
    assert ("QKNORM" in ops) == (s.qk_norm and (not stream.norm_in_qkv or s.qk_norm_full))
    assert ((1, True) in fm.runtime._schedules) == (stream.attn_in_qkv_keys > 0)
    if stream.attn_in_qkv_keys:
        short = {t.op.name for t in fm.runtime.schedule(1, short=True).graph.tasks}
        assert ("QKN_ATTN" in short) == s.qk_norm_full != ("QKV_ATTN" in short)
    tg = fm.runtime.schedule(1, short=False).graph.tiling
    assert (tg.moe_rows, tg.moe_bk) == ((16, 16) if s.moe else (0, 0))


@pytest.mark.parametrize("ksplit", [1, 3])
@pytest.mark.parametrize("family,tile", [("llama_bias_tied", "16x16x4"), ("qwen3", "16x16x4"),
                                         ("qwen2", "shipped"), ("mistral", "shipped"),
                                         ("gemma3_text", "16x16x4")])
@pytest.mark.filterwarnings("error:megakernel:UserWarning")  # no fallback to one program an SM
def test_multi_row_tiles_match_torch(family, tile, ksplit, monkeypatch):
    """Steps of several rows with the GPU's multi-row tile (the CPU otherwise takes whole rows:
    config.gemv_config), masked at the tiny models' odd sizes; 16 x 16 tiles, so a task streams
    several tiles of K chunks and odd N / K end mid-tile and mid-chunk; biases (o, gate|up,
    down), the RMSNorm prologue and the residual epilogue. The o / down tiles whole, or in 3 K
    parts summed by REDUCE tasks (graph.Tiling.ksplit; 16-wide chunks: o's K 48 one chunk a
    part, down's 72 two, two and one; the shipped tile's one 128-wide chunk: two empty parts).
    A step of 16 rows, then one of 4 (the REDUCE tasks' 16-row tiles full, then masked). The
    megakernel and the VM running its queues. fp32 weights: the logits of torch mode up to
    summation order. "shipped": the tile a GPU takes for fp32 weights, config.rows_tile(4) --
    bf16's 32 x 256 forced on them had CUDA refuse two programs an SM (a fallback, warned,
    that this test now fails on; bench/RESULTS.md session 42)."""
    from fastdecode import graph
    from fastdecode.opcodes import Op
    from fastdecode.triton_kernels.config import TileConfig, rows_tile
    tile = rows_tile(4) if tile == "shipped" else TileConfig(*map(int, tile.split("x")))
    real = graph.gemv_config
    monkeypatch.setattr(graph, "gemv_config",
                        lambda N, K, T, device, **kw: tile if T > 1 else real(N, K, T, device, **kw))
    monkeypatch.setattr(graph, "rows_ksplit", lambda *args: ksplit)  # any config.ROWS_KSPLIT
    model = tiny_model(family).to(DEVICE)
    ids = torch.randint(0, 101, (1, 20), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    want = torch.cat([ref(ids[:, :16])[0], ref(ids[:, 16:])[0]])
    for mode in ("mega", "vm"):
        fm = fastdecode.from_hf(model, max_seq_len=32, mode=mode)
        got = torch.cat([fm(ids[:, :16])[0], fm(ids[:, 16:])[0]])
        assert float((got - want).norm() / want.norm()) < 1e-5, mode
        g = fm.runtime.schedule(4).graph
        assert g.tiling.ksplit == ksplit
        n_red = sum(t.op == Op.REDUCE for t in g.tasks)
        assert (n_red > 0) == (ksplit > 1 or g.spec.post_norms)  # gemma3_text: post norms
        assert fm.runtime.schedule(1).graph.tiling.ksplit == 1  # decode: never


def test_ptx_stream_gives_the_plain_streams_tokens():
    """bf16 weights, every K % 8 == 0: the decode stream with its weight pieces loaded as
    16-byte words -- by inline PTX (the interpreter runs the wrappers' plain loads and the same
    unpacking) or by plain loads (StreamConfig.words) -- against the plain stream (run once for
    both: one test, as the interpreter's runs are CI's longest): teacher-forced logits of four
    decode steps within bf16 rounding of each other (the pieces' sums run in another order, so a bf16 store may round
    the other way: 2^-8 relative, then through 2 layers), and the same greedy tokens.
    Llama's tiny model: K = 48 (q_dim, d_model) and 72. A one-token prompt: every step a
    decode step (a prompt of several rows would run the multi-row tiles, which take no
    word pieces, at CI's cost)."""
    model = tiny_model("llama", dtype=torch.bfloat16).to(DEVICE)
    ids = torch.randint(0, 101, (1, 4), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    out = {}
    for form, ptx in (("plain", 0), ("ptx", 1), ("words", 2)):
        fm = fastdecode.from_hf(model, max_seq_len=16, mode="mega")
        fm.runtime.mega_stream = StreamConfig(256, 4, max_k=16, **({form: True} if ptx else {}))
        out[form] = torch.cat([fm(ids[:, t:t + 1])[0] for t in range(4)]).float()
        assert fm.runtime.schedule(1).graph.tiling.ptx == ptx
    for form in ("ptx", "words"):
        assert float((out[form] - out["plain"]).norm() / out["plain"].norm()) < 1e-2
        assert torch.equal(out[form].argmax(-1), out["plain"].argmax(-1))


@pytest.mark.parametrize("keys", [None, 0, 10])
def test_multi_step_launch_and_eos_inside_chunk(keys):
    """keys: the short-context schedule's reach (None: config.py's, every step here; 0: never;
    10: the second launch runs 2 short-context steps -- the EOS token's among them -- then a
    split-KV launch that must stop at once on the done flag)."""
    model = tiny_model("llama").to(DEVICE)
    ids = torch.tensor([[5, 17, 33]], device=DEVICE)
    ref = fastdecode.from_hf(model, max_seq_len=48, mode="torch").generate(ids, max_new_tokens=12,
                                                                          eos_token_id=[])
    fm = fastdecode.from_hf(model, max_seq_len=48, mode="mega")
    fm.runtime.mega_stream = StreamConfig(attn_in_qkv_keys=keys)
    fm.runtime.decode_chunk = 5  # 1 token from the prefill, then launches of 5, 5 and 1 steps
    out = fm.generate(ids, max_new_tokens=12, eos_token_id=[])
    assert torch.equal(out, ref)
    assert int(fm.runtime.state.step) == 12
    eos = int(ref[0, 3 + 7])  # the 8th new token: in the middle of the second 5-step launch
    first = int((ref[0, 3:] == eos).nonzero()[0])
    out = fm.generate(ids, max_new_tokens=12, eos_token_id=eos)
    assert torch.equal(out, ref[:, :3 + first + 1])
    # the kernel itself stopped at the EOS: no step ran past it
    assert int(fm.runtime.state.step) == first + 1
    assert ((1, True) in fm.runtime._schedules) == (keys != 0)
    assert ((1, False) in fm.runtime._schedules) == (keys == 0 or keys == 10)


def test_forced_missing_producer_times_out():
    """Serial mode (one program, also on a GPU): its first blocked wait is on the dropped task's
    counter. (With many programs, one that has no task before it may time out first elsewhere.)"""
    model = tiny_model("qwen3").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="mega")
    fm.runtime.n_programs = 1
    drop_encoded_task(fm.runtime, 1, "DOWN")
    with pytest.raises(fastdecode.MegakernelTimeout, match="down"):
        fm(torch.tensor([[1]], device=DEVICE))


@pytest.mark.parametrize("refusals", [1, 2])
def test_refused_rows_launch_falls_back_for_rows_only(refusals, monkeypatch):
    """A step of several rows whose cooperative launch is refused (its own kernel: larger tiles
    than decode's) is retried with the most shared memory (carveout 100) for the steps of
    several rows, then, refused again, with one program per SM for them; decode keeps its
    per_sm programs and carveout; a refusal after that raises. The tokens are HF's. (The
    refusals are simulated; on the GPU test_gpu.py makes CUDA refuse them. The launches after
    them must fit: an H200 refused the carveout retry of this fp32 model's multi-row kernel
    itself while its pieces took 182 KB a program, before config.rows_tile -- RESULTS session
    41.)"""
    model = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=48, mode="mega")
    rt = fm.runtime
    per_sm = rt.stream.per_sm
    refused, launch = [], rt._launch_mega_once

    def refuse_rows(sched, *args):
        if sched.graph.tiling.T > 1 and len(refused) < refusals:
            refused.append(sched)
            raise RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch")
        return launch(sched, *args)
    monkeypatch.setattr(rt, "_launch_mega_once", refuse_rows)
    ids = torch.tensor([[5, 17, 33, 8]], device=DEVICE)
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    if refusals == 1:  # the carveout's retry launched it: no fallback
        got = fm.generate(ids, max_new_tokens=6, eos_token_id=[])
        assert rt._rows_carveout == 100 and not rt._rows_one_per_sm
        assert torch.equal(got, want) and rt.schedule(4) is refused[0]
        return
    with pytest.warns(UserWarning, match="several rows fall back"):
        got = fm.generate(ids, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(got, want)
    assert rt._rows_carveout == 100 and rt._rows_one_per_sm and rt.stream.per_sm == per_sm > 1
    assert rt.stream.carveout is None  # decode's
    assert rt.schedule(4) is not refused[0]  # rebuilt for one program per SM
    refused.clear()
    with pytest.raises(RuntimeError, match="cooperative"):
        fm.generate(ids, max_new_tokens=2, eos_token_id=[])


def test_generate_raises_a_decode_launch_timeout():
    """generate() reads each chunk's watchdog word from a copy queued with its tokens (not the
    live word: that would wait for the next chunk's launch): a decode launch that times out --
    the prefill's T=3 schedule intact, the T=1 decode schedule missing a task -- still raises,
    naming the counter, and leaves the counters reset."""
    model = tiny_model("llama").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=48, mode="mega")
    fm.runtime.n_programs = 1
    fm.runtime.decode_chunk = 5  # the prefill's token, then launches of 5 steps
    drop_encoded_task(fm.runtime, 1, "GATE_UP")
    ids = torch.tensor([[5, 17, 33]], device=DEVICE)
    with pytest.raises(fastdecode.MegakernelTimeout, match="gu"):
        fm.generate(ids, max_new_tokens=12, eos_token_id=[])
    assert int(fm.runtime.state.status[0]) == 0
    assert all(int(c.abs().sum()) == 0 for c, _, _ in fm.runtime._counters.values())


def test_trace_compare_per_program_waits():
    """trace.compare: per op and trace, the summed waits / work over the trace's programs, in
    opcode order, and each trace's span (first start to last end)."""
    from fastdecode import trace as tr

    def ev(p, op, start, ready, end):
        return dict(program=p, step=0, op=op, layer=0, arg0=0, start=start, ready=ready, end=end)
    a = [ev(0, "GATE_UP", 0, 4, 10), ev(1, "GATE_UP", 0, 2, 12), ev(1, "QKV", 12, 13, 20)]
    b = [ev(0, "QKV", 5, 5, 9), ev(1, "GATE_UP", 0, 1, 3), ev(2, "GATE_UP", 1, 2, 6),
         ev(2, "DOWN", 6, 9, 11)]
    rows, spans = tr.compare([("a", a), ("b", b)])
    assert list(rows) == ["QKV", "GATE_UP", "DOWN"]  # opcodes.Op order
    assert rows["GATE_UP"] == [((4 + 2) / 2, (6 + 10) / 2), ((1 + 1) / 3, (2 + 4) / 3)]
    assert rows["QKV"] == [(1 / 2, 7 / 2), (0.0, 4 / 3)]
    assert rows["DOWN"] == [(0.0, 0.0), (3 / 3, 2 / 3)]  # absent from a
    assert spans == [20, 11]


def test_trace_program_skew_tells_systematic_from_random():
    """trace.program_skew: programs that are slower in every layer give a split-half correlation
    near 1; per-layer noise near 0; the p10 / p90 of the relative rates bracket the slow ones.
    other=: the correlation between two launches' programs instead of between layer halves;
    by="sm": per SM (the mean of its programs), which finds the speed that moved with the SM."""
    import random
    from fastdecode import trace as tr
    rng = random.Random(0)

    def evs(speed, sm=lambda p: p // 2):  # two programs per SM
        return [dict(program=p, step=0, op="DOWN", layer=layer, arg0=0, tiles=2, start=0,
                     ready=0, end=round(1000 * 2 / speed(p, layer)), sm=sm(p))
                for p in range(64) for layer in range(16)]
    fixed = {p: 1 + 0.2 * rng.random() for p in range(64)}
    n, lo, hi, corr = tr.program_skew(evs(lambda p, layer: fixed[p]), "DOWN")
    assert n == 64 and corr > 0.95 and lo < 0.97 and hi > 1.03
    noise = {(p, layer): 1 + 0.2 * rng.random() for p in range(64) for layer in range(16)}
    assert abs(tr.program_skew(evs(lambda p, layer: noise[p, layer]), "DOWN")[3]) < 0.4
    assert tr.program_skew(evs(lambda p, layer: 1.0), "O_PROJ") is None  # no such tasks
    # across launches: the same slow programs in both (fixed), or a program's speed reshuffled
    # between launches (it went with the SM, not the index)
    assert tr.program_skew(evs(lambda p, layer: fixed[p]), "DOWN",
                           other=evs(lambda p, layer: fixed[p]))[3] > 0.99
    moved = {p: fixed[(p * 37 + 11) % 64] for p in range(64)}
    assert abs(tr.program_skew(evs(lambda p, layer: fixed[p]), "DOWN",
                               other=evs(lambda p, layer: moved[p]))[3]) < 0.4
    # the speed is the SM's (32 SMs), and the second launch puts the programs on other SMs
    sm_speed = {m: 1 + 0.2 * rng.random() for m in range(32)}
    perm = lambda p: (p * 37 + 11) % 64 // 2  # noqa: E731
    first = evs(lambda p, layer: sm_speed[p // 2])
    second = evs(lambda p, layer: sm_speed[perm(p)], sm=perm)
    assert abs(tr.program_skew(first, "DOWN", other=second)[3]) < 0.4
    n, lo, hi, corr = tr.program_skew(first, "DOWN", other=second, by="sm")
    assert n == 32 and corr > 0.99


def test_trace_sm_pair_gap_tells_program_from_queue():
    """trace.sm_pairs finds the two programs of each SM; sm_pair_gap (the later-launched
    program's task end minus the earlier's, equal tiles only) keeps its sign when each SM's two
    queues are swapped if the lag is the program's, and flips it if it is the queue's."""
    from fastdecode import trace as tr

    def evs(lag, tiles=lambda p: 2):  # programs p and p + 8 share SM p % 8
        return [dict(program=p, step=0, op="DOWN", layer=layer, arg0=0, tiles=tiles(p),
                     start=0, ready=0, end=1000 + lag(p) + layer, sm=p % 8)
                for p in range(16) for layer in range(4)]
    assert tr.sm_pairs(evs(lambda p: 0)) == {p: (p + 8) % 16 for p in range(16)}
    later = lambda p: 300 * (p >= 8)  # noqa: E731 -- the program's: the later one lags
    n, med, lo, hi = tr.sm_pair_gap(evs(later), "DOWN")
    assert (n, med, lo, hi) == (32, 300, 300, 300)
    queue_lag = {p: 100 * (p % 3) for p in range(16)}  # the queue's, dealt to the partner
    pairs = tr.sm_pairs(evs(later))
    first = tr.sm_pair_gap(evs(lambda p: queue_lag[p]), "DOWN")
    swapped = tr.sm_pair_gap(evs(lambda p: queue_lag[pairs[p]]), "DOWN", pairs=pairs)
    assert swapped[1:] == (-first[1], -first[3], -first[2])
    # unequal tiles are not compared; no such op: None
    assert tr.sm_pair_gap(evs(later, tiles=lambda p: 1 + (p >= 8)), "DOWN") is None
    assert tr.sm_pair_gap(evs(later), "O_PROJ") is None


def test_trace_phase_rates_bytes_over_span():
    """trace.phase_rates: a phase's bytes over its first ready to last end; QKV_ATTN tasks join
    the QKV phase; other layers, steps and ops without bytes are left out."""
    from fastdecode import trace as tr
    from fastdecode.spec import ModelSpec

    def ev(op, layer, ready, end, step=0):
        return dict(program=0, step=step, op=op, layer=layer, arg0=0, tiles=1, start=0,
                    ready=ready, end=end)
    evs = [ev("QKV", 1, 10, 30), ev("QKV_ATTN", 1, 12, 50), ev("O_PROJ", 1, 60, 70),
           ev("O_PROJ", 1, 65, 80), ev("ATTN", 1, 40, 55), ev("O_PROJ", 2, 0, 999),
           ev("O_PROJ", 1, 0, 999, step=1)]
    spec = ModelSpec.from_hf_config(tiny_model("llama").config)
    b = tr.layer_weight_bytes(spec)
    assert b["O_PROJ"] == spec.q_dim * spec.d_model * 2 and b["DOWN"] * 2 == b["GATE_UP"]
    moe = ModelSpec.from_hf_config(tiny_model("qwen2_moe").config)  # routed + shared experts
    m = tr.layer_weight_bytes(moe)
    assert "DOWN" not in m and m["EXPERT_GU"] == 2 * m["EXPERT_DOWN"] and \
        m["EXPERT_DOWN"] == (3 * 22 + 30) * 40 * 2 and m["ROUTER"] == (6 + 1) * 40 * 2
    got = tr.phase_rates(evs, 1, b)
    assert set(got) == {"QKV", "O_PROJ"}
    assert got["QKV"] == (b["QKV"], 40, b["QKV"] / 40)
    assert got["O_PROJ"] == (b["O_PROJ"], 20, b["O_PROJ"] / 20)


def test_trace_task_costs_recover_overhead_and_rate():
    """trace.task_costs: tasks of 1-3 tiles built as 500 ns + bytes / 20 B/ns give back those two
    numbers; equal-sized tasks give a rate with no overhead."""
    from fastdecode import trace as tr
    tiles = [1, 2, 3, 2, 1, 3, 2, 2]  # one layer: 16 tiles; two layers below
    b = {"DOWN": 16 * 4096, "O_PROJ": 8 * 1000}
    evs = [dict(program=i, step=0, op="DOWN", layer=layer, arg0=0, tiles=t, start=0, ready=100,
                end=100 + 500 + t * 4096 / 20) for layer in (0, 1) for i, t in enumerate(tiles)]
    evs += [dict(program=i, step=0, op="O_PROJ", layer=0, arg0=0, tiles=1, start=0, ready=0,
                 end=100) for i in range(8)]
    got = tr.task_costs(evs, b)
    n, a, r, res = got["DOWN"]
    assert n == 16 and abs(a - 500) < 1e-6 and abs(r - 20) < 1e-9 and res < 1e-6
    assert got["O_PROJ"][1:3] == (0.0, 10.0)


@pytest.mark.parametrize("family", ["mistral", "qwen2_moe", "olmoe"])
def test_trace_records_every_task_in_order(tmp_path, family):
    """qwen2_moe: a mixture's ROUTER / EXPERT_GU / EXPERT_DOWN tasks traced as the others;
    olmoe: its q / k norms over all heads, the short step's chain through QKN_ATTN tasks."""
    from fastdecode import trace as tr
    model = tiny_model(family).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=32, mode="mega")
    fm(torch.tensor([[3, 4, 5]], device=DEVICE))
    sched, trace = fm.runtime.trace_decode(2)
    evs = tr.events(sched, trace)
    assert len(evs) == 2 * len(sched.graph.tasks)
    for e in evs:
        assert e["start"] <= e["ready"] <= e["end"]
        assert e["sm"] == e["program"] if DEVICE.type == "cpu" else e["sm"] >= 0  # %smid
    if DEVICE.type == "cpu":  # serial: the logical clock orders tasks exactly as the queue
        assert [e["end"] for e in evs] == sorted(e["end"] for e in evs)
    # the short-context step's attention chain: one completer per (layer, KV group), its stages
    # in order. Serial: the logical clock counts every stamp, so each stage is > 0; a GPU's
    # %globaltimer can give two back-to-back stamps the same tick (no q/k norm here: ticket and
    # normed are stamped one after the other; an H200 run gave a 0), while the attention itself
    # spans ticks.
    chain = tr.attention_chain(evs, step=1)
    spec = fm.spec
    assert chain["chains"] == spec.n_layers * spec.n_kv_heads
    stages = [chain[k] for k in ("tiles", "ticket", "norm", "attention", "publish", "hop")]
    assert min(stages) > 0 if DEVICE.type == "cpu" else (min(stages) >= 0 and
                                                          chain["attention"] > 0)
    # serial: the groups' completers publish one after another (one KV group: spread 0)
    assert (chain["spread"] > 0) == (spec.n_kv_heads > 1) if DEVICE.type == "cpu" else \
        chain["spread"] >= 0
    rows = tr.breakdown(evs)
    assert rows["CHOOSE"]["tasks"] == 2 and sum(r["tasks"] for r in rows.values()) == len(evs)
    # one layer's phases: every task of the layer's ops, spans no shorter than their tasks
    phases = {op: (n, span, spread, d0, dm, d1) for op, n, span, spread, d0, dm, d1 in
              tr.phases(evs, 1, step=1)}
    per_layer = {}
    for t in sched.graph.tasks:
        if t.layer == 1 and t.op.name not in ("EMBED", "LM_HEAD", "CHOOSE"):
            per_layer[t.op.name] = per_layer.get(t.op.name, 0) + 1
    assert {op: v[0] for op, v in phases.items()} == per_layer
    for n, span, spread, d0, dm, d1 in phases.values():
        assert 0 <= spread <= span and d0 <= dm <= d1 <= span
    tr.chrome_json(evs, tmp_path / "t.json")
    back = tr.load_chrome_json(tmp_path / "t.json")  # the JSON holds every task and its wait
    key = lambda e: (e["program"], e["start"], e["op"])  # noqa: E731
    assert sorted(back, key=key) == sorted(evs, key=key)
    # a launch with the queues dealt to other programs: program p runs queue order[p] in order
    P = sched.n_programs
    order = [(p + 3) % P for p in range(P)]
    moved, trace = fm.runtime.trace_decode(1, order=order)
    for p in range(P):
        ran = [(e["op"], e["layer"], e["arg0"]) for e in tr.events(moved, trace)
               if e["program"] == p]
        want = [(t.op.name, t.layer, t.args[0]) for t in
                (sched.graph.tasks[i] for i in sched.queues[order[p]])]
        assert ran == want
    # tracing ran real steps: the sequence continues correctly afterwards
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    ref(torch.tensor([[3, 4, 5]], device=DEVICE))
    ref.runtime.decode(3, fastdecode.runtime.Sampling())
    assert torch.equal(fm.runtime.tokens(0, 4), ref.runtime.tokens(0, 4))


def test_trace_a_step_of_several_rows():
    """trace_decode(ids=...) runs one step of those rows (prompt lookup's check) with the
    timestamps: every task of the T-row schedule once, and the step is a real one -- the logits
    of its rows are those of an untraced forward of the same rows (the same kernel), and the
    sequence goes on from it."""
    from fastdecode import trace as tr
    model = tiny_model("qwen3").to(DEVICE)
    rows = torch.tensor([7, 8, 9], device=DEVICE)
    fm, ref = (fastdecode.from_hf(model, max_seq_len=32, mode="mega") for _ in range(2))
    for m in (fm, ref):
        m(torch.tensor([[3, 4, 5]], device=DEVICE))
    sched, trace = fm.runtime.trace_decode(ids=rows)
    assert sched.graph.tiling.T == 3
    evs = tr.events(sched, trace)
    assert len(evs) == len(sched.graph.tasks)
    assert torch.equal(fm.runtime.state.logits[:3], ref.runtime.forward(rows))
    assert fm.runtime.position == ref.runtime.position == 6
    with pytest.raises(ValueError, match="one step"):
        fm.runtime.trace_decode(2, ids=rows)
    assert torch.equal(fm(torch.tensor([[11]], device=DEVICE)),
                       ref(torch.tensor([[11]], device=DEVICE)))


@settings(max_examples=4)
@given(shape=hf_shapes(("llama", "qwen3", "gemma")), seed=st.integers(0, 1000))
def test_mega_random_shapes_match_torch(shape, seed):
    """The megakernel (model sizes are its constexprs, compiled per model) on random shapes:
    prefill chunk (its tiles' K loops) + decode steps
    against torch mode, fp32 weights (only summation order differs: 1e-5 as test_models
    explains)."""
    _mega_matches_torch(shape, seed)


@settings(max_examples=10)
@given(shape=hf_shapes(("qwen2_moe", "qwen3_moe", "mixtral", "olmoe", "granitemoe",
                         "granitemoeshared", "hunyuan_v1_moe", "ernie4_5_moe", "glm4_moe",
                         "dots1")),
       seed=st.integers(0, 1000))
def test_mega_random_mixtures_match_torch(shape, seed):
    """The same for mixtures of experts (their prompt chunk by ops, their decode steps by the
    ROUTER / EXPERT_GU / EXPERT_DOWN tasks): 1-9 experts or 60-130 (the routing's 128-wide
    block), up to 9 routed (all of them where fewer), experts of odd widths, with or without
    Qwen2-MoE's shared expert or GraniteMoeShared's / HunYuan's / ERNIE's / GLM's ungated one
    (in EXPERT_DOWN's chunks where they stay <= 16 experts), dense layers among the expert ones
    (their GATE_UP / DOWN tasks), DeepSeek-V3's router (sigmoid, choice bias, groups, scale) --
    EXPERT_DOWN's 8-row tiles over d_model's odd sizes, its 128-wide K chunk masked past the
    expert's width."""
    _mega_matches_torch(shape, seed)


def _mega_matches_torch(shape, seed):
    family, cfg, vocab = shape
    model = tiny_model(family, vocab=vocab, seed=seed, **cfg).to(DEVICE)
    ids = torch.randint(0, vocab, (1, 9), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(DEVICE)
    outs = []
    for mode in ("torch", "mega"):
        fm = fastdecode.from_hf(model, max_seq_len=24, mode=mode)
        outs.append(torch.cat([fm(ids[:, :6])[0]] +
                              [fm(ids[:, t:t + 1])[0] for t in range(6, 9)]))
    want, got = outs
    assert float((got - want).norm() / want.norm()) < 1e-5


@triton.jit
def _gate_up_prefetch_kernel(entry, has_next, wgu, out, FFN, D, RG: tl.constexpr,
                             KB: tl.constexpr):
    wl, lo, hi = next_gate_up(entry, has_next != 0, wgu, FFN, D)
    n = rows_prefetch(wl, FFN, D, lo, hi, RG, KB, False)
    tl.store(out, (wl.to(tl.int64, bitcast=True) - wgu.to(tl.int64, bitcast=True)) // 2)  # bf16
    tl.store(out + 1, (lo * RG).to(tl.int64))
    tl.store(out + 2, n.to(tl.int64))


@triton.jit
def _kv_prefetch_kernel(k, v, out, pos, T, S, HD, window, n_splits, ALIGN: tl.constexpr):
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    start, n = kv_prefetch(k, v, pos, T, S, HD, window, n_splits, kvh, split, ALIGN, False)
    tl.store(out + (kvh * n_splits + split) * 2, start.to(tl.int64))
    tl.store(out + (kvh * n_splits + split) * 2 + 1, n.to(tl.int64))


@settings(max_examples=20, deadline=None)
@given(pos=st.integers(0, 200), T=st.integers(1, 9), window=st.sampled_from([0, 5, 64]),
       n_splits=st.integers(1, 5), align=st.sampled_from([16, 32]))
def test_kv_prefetch_covers_the_keys_attention_reads(pos, T, window, n_splits, align):
    """StreamConfig.kv_prefetch's ranges: each split asks for the keys split_range gives it, and
    together the splits cover every key of the step, [k0, pos + T) (k0 > 0 under a sliding
    window), once -- bf16 rows of HD elements, the byte counts the bulk prefetches get."""
    HD, KVH, S = 24, 2, 256
    k = torch.zeros(KVH, S, HD, dtype=torch.bfloat16, device=DEVICE)
    out = torch.full((KVH, n_splits, 2), -1, dtype=torch.int64, device=DEVICE)
    _kv_prefetch_kernel[(KVH, n_splits)](k, k, out, pos, T, S, HD, window, n_splits, ALIGN=align)
    k0, chunk = split_range_host(pos, T, window, n_splits, align)
    for kvh in range(KVH):
        keys = []
        for sp, (start, n) in enumerate(out[kvh].tolist()):
            assert start == k0 + sp * chunk and n % (HD * 2) == 0
            keys += range(start, start + n // (HD * 2))
        assert keys == list(range(k0, pos + T))


@pytest.mark.parametrize("op,has_next,lo,hi,kb", [
    (Op.GATE_UP, 1, 3, 5, 64),   # two tiles of 4 rows x 48 x 2 B = 768 B, under the cap
    (Op.GATE_UP, 1, 2, 9, 1),    # capped at 1 KB
    (Op.GATE_UP, 1, 8, 10, 64),  # the last tile ends at FFN = 34 rows, not 40
    (Op.DOWN, 1, 0, 2, 64),      # not a gate|up task: nothing
    (Op.GATE_UP, 0, 0, 2, 64)])  # no next entry: nothing
def test_next_gate_up_prefetch_range(op, has_next, lo, hi, kb):
    """The o_proj task's L2 prefetch of the next task (StreamConfig.l2_prefetch_kb): the next
    queue entry's gate rows [lo * RG, min(hi * RG, FFN)) of its layer in w_gu [L, 2 FFN, D],
    capped at kb KB (rows_prefetch asks as much of its up rows, FFN * D elements on)."""
    FFN, D, RG, layer = 34, 48, 4, 2
    entry = torch.zeros(WORDS, dtype=torch.int32, device=DEVICE)
    entry[:5] = torch.tensor([int(op), layer, 0, lo, hi], dtype=torch.int32)
    wgu = torch.zeros(3, 2 * FFN, D, dtype=torch.bfloat16, device=DEVICE)
    out = torch.full((3,), -1, dtype=torch.int64, device=DEVICE)
    _gate_up_prefetch_kernel[(1,)](entry, has_next, wgu, out, FFN, D, RG=RG, KB=kb)
    base, row0, n = out.tolist()
    want = min((min(hi * RG, FFN) - lo * RG) * D * 2, kb * 1024)
    if op == Op.GATE_UP and has_next:
        assert (base, row0, n) == (layer * 2 * FFN * D, lo * RG, want)
    else:
        assert n == 0


def test_wide_heads_match_torch():
    """head_dim 160 (StableLM-2-12B's; padded to 256 in the kernels): the key blocks of a step of
    several rows and of decode are 32 keys (wide_head_keys, attention_block), so a 50-token
    prompt (steps of 16 rows: Runtime.max_chunk) and decode run two blocks, the last partial,
    against torch mode (fp32 weights: 1e-5 as test_models explains)."""
    model = tiny_model("llama", hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=160, intermediate_size=96).to(DEVICE)
    ids = torch.randint(0, 101, (1, 53), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    outs = []
    for mode in ("torch", "mega"):
        fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
        if mode == "mega":
            assert fm.runtime.max_chunk == 16 and fm.runtime.prefill_min > 50
            assert [make_tiling(fm.runtime.spec, T, 64, DEVICE).attn_block_s
                    for T in (1, 16)] == [32, 32]
        outs.append(torch.cat([fm(ids[:, :50])[0]] +
                              [fm(ids[:, t:t + 1])[0] for t in range(50, 53)]))
    want, got = outs
    assert float((got - want).norm() / want.norm()) < 1e-5
