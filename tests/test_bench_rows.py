"""The benchmarks' shared row writer (bench/bench_decode.append_results): every GPU benchmark
appends its bench/RESULTS.md rows through it, so its format is checked here, on the CPU."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))


def test_append_results_writes_table_rows(tmp_path, monkeypatch):
    import bench_decode
    monkeypatch.setenv("FASTDECODE_COMMIT", "abc1234")
    monkeypatch.setattr(sys, "argv", ["bench_ops.py", "--shapes", "2048x16384"])
    path = tmp_path / "RESULTS.md"
    path.write_text("| date | GPU | commit | what | peer | value | % | ratio | time | command |\n")
    cmd = bench_decode.bench_command("bench_tp.py", "torchrun --nproc-per-node 2")
    assert cmd == "torchrun --nproc-per-node 2 bench/bench_tp.py --shapes 2048x16384"
    bench_decode.append_results(str(path), [["H200", "GEMV", "ops tile", "4000 GB/s", "93.7%",
                                             "-", "16.8 us"], ["2 x H200", "8B", "mega", "341.6",
                                                               "60.6%", "1.54x", "-"]], cmd)
    lines = path.read_text().splitlines()
    stamp, commit = bench_decode.run_stamp()
    assert commit == "abc1234" and len(stamp) == 10
    assert lines[1] == (f"| {stamp} | H200 | abc1234 | GEMV | ops tile | 4000 GB/s | 93.7% | - | "
                        f"16.8 us | `{cmd}` |")
    assert lines[2].startswith(f"| {stamp} | 2 x H200 | abc1234 | 8B | mega | 341.6 |")
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_tile_table_entries_are_valid_configs():
    """Every shipped entry builds its config (a stream entry's stages rule gives back its recorded
    stages), is found by its key, and says where it came from."""
    import json
    from fastdecode.triton_kernels.config import (TILE_TABLE, StreamConfig, TileConfig,
                                                  lookup_gemv, lookup_stream, table_stream)
    with open(TILE_TABLE) as f:
        table = json.load(f)
    assert set(table) == {"_doc", "stream", "gemv"} and table["stream"]
    for gpu, rows in table["stream"].items():
        assert len({(e["d_model"], e["ffn_dim"]) for e in rows}) == len(rows)
        for e in rows:
            cfg = table_stream(e)
            assert list(cfg.op_stages(e["d_model"])) == e["config"]["stages"]
            assert e["tok_s"] > 0 and e["commit"] and e["date"] and e["command"]
            assert lookup_stream(gpu, e["d_model"], e["ffn_dim"]) == cfg
    for gpu, rows in table["gemv"].items():
        assert len({(e["N"], e["K"]) for e in rows}) == len(rows)
        for e in rows:
            want = StreamConfig(**e["stream"]) if "stream" in e else TileConfig(**e["config"])
            assert lookup_gemv(gpu, e["N"], e["K"]) == want
            assert e["gb_s"] > 0 and e["commit"] and e["date"] and e["command"]
    assert lookup_stream("NVIDIA H200", 3072, 8192) is None  # unmeasured shape: the defaults
    assert lookup_gemv("No such GPU", 2048, 2048) is None


def test_stream_config_takes_the_table_then_the_wide_rule(monkeypatch):
    """stream_config on a GPU: the table's entry for the exact (d_model, ffn_dim); else, on
    Hopper, WIDE_STREAM from WIDE_MIN_D_MODEL up and the defaults below it; elsewhere (another
    GPU generation, the CPU) the defaults."""
    from types import SimpleNamespace
    import torch
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import StreamConfig, WIDE_MIN_D_MODEL, WIDE_STREAM

    def spec(d_model, ffn):  # stream_config reads these two
        return SimpleNamespace(d_model=d_model, ffn_dim=ffn)
    entry = StreamConfig(8192, 8, per_sm=1)
    table = {("NVIDIA H200", 5120, 13824): entry}
    monkeypatch.setattr(config, "lookup_stream",
                        lambda gpu, d, f, path=None: table.get((gpu, d, f)))
    assert config.stream_config("cpu", spec(WIDE_MIN_D_MODEL, 13824)) == StreamConfig()
    monkeypatch.setattr(config, "_cuda_gpu", lambda device: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert config.stream_config("cuda", spec(5120, 13824)) == entry
    assert config.stream_config("cuda", spec(WIDE_MIN_D_MODEL, 25600)) == WIDE_STREAM
    assert config.stream_config("cuda", spec(WIDE_MIN_D_MODEL + 1024, 25600)) == WIDE_STREAM
    assert config.stream_config("cuda", spec(4096, 14336)) == StreamConfig()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert config.stream_config("cuda", spec(WIDE_MIN_D_MODEL, 25600)) == StreamConfig()
    assert WIDE_STREAM.op_stages(WIDE_MIN_D_MODEL) == (4, 4, 4, 4)
    assert [WIDE_STREAM.elems(i) for i in range(4)] == [8192] * 4


def test_sweeps_record_adds_and_replaces_entries(tmp_path, monkeypatch):
    """sweep_mega / sweep_gemv --record: an entry per GPU and shape, replaced when measured
    again, the other entries kept; the lookups then return what was recorded."""
    import shutil
    import sweep_gemv
    import sweep_mega
    from tile_table import record
    from fastdecode.triton_kernels.config import (TILE_TABLE, StreamConfig, TileConfig,
                                                  _tile_table, lookup_gemv, lookup_stream)
    monkeypatch.setenv("FASTDECODE_COMMIT", "abc1234")
    path = str(tmp_path / "table.json")
    shutil.copy(TILE_TABLE, path)
    key = dict(d_model=3072, ffn_dim=8192)
    a = StreamConfig(8192, 8, per_sm=1, stages=(1, 3, 1, 3), attn_in_qkv_keys=64,
                     op_elems=(8192, 4096, 8192, 16384))
    record(path, "stream", "Some GPU", key, sweep_mega.stream_entry(a, 3072, "m", 123.45), "c")
    _tile_table.cache_clear()
    assert lookup_stream("Some GPU", 3072, 8192, path) == a
    b = StreamConfig(per_sm=2)  # default stages: recorded as resolved for d_model 3072
    record(path, "stream", "Some GPU", key, sweep_mega.stream_entry(b, 3072, "m", 130.0), "c")
    _tile_table.cache_clear()
    got = lookup_stream("Some GPU", 3072, 8192, path)
    assert got.op_stages(3072) == b.op_stages(3072) and got.tile_elems == b.tile_elems
    assert len(_tile_table(path)["stream"]["Some GPU"]) == 1  # replaced, not added
    assert lookup_stream("NVIDIA H200", 2048, 8192, path) is not None  # the others kept
    for bn in (8, 16):
        record(path, "gemv", "Some GPU", dict(N=4096, K=14336),
               sweep_gemv.gemv_entry("8b down", TileConfig(bn, 1024, 4), 3.9e12), "c")
    record(path, "gemv", "Some GPU", dict(N=2048, K=2048),
           sweep_gemv.gemv_entry("1b o", TileConfig(4, 512, 8), 2.5e12), "c")
    s = StreamConfig(8192, 4, per_sm=4)
    record(path, "gemv", "Some GPU", dict(N=16384, K=2048),
           sweep_gemv.gemv_entry("1b gate|up", s, 4.0e12), "c")
    _tile_table.cache_clear()
    assert lookup_gemv("Some GPU", 4096, 14336, path) == TileConfig(16, 1024, 4)
    assert lookup_gemv("Some GPU", 2048, 2048, path) == TileConfig(4, 512, 8)
    assert lookup_gemv("Some GPU", 16384, 2048, path) == s
    assert len(_tile_table(path)["gemv"]["Some GPU"]) == 3
    _tile_table.cache_clear()


def test_stream_config_strings_parse_and_round_trip():
    """The benches' --configs / --set syntax (bench/shapes.py): positional fields, then any
    StreamConfig field by name; sweep_mega's tag names the non-positional fields the same way, so
    a printed row's config can be pasted back; an unknown field is an error, not a silent
    default."""
    import shapes
    import sweep_mega
    from fastdecode.triton_kernels.config import StreamConfig
    a, b, c = shapes.stream_configs("8192/8/2048/1/0/1/0/96/1133/32,16384/4/4096/2/attn_block_s=32,"
                                    "16384/4/4096/2/op_elems=8192:8192:8192:16384/attn_block_s=16")
    assert (a.tile_elems, a.num_warps, a.max_k, a.per_sm) == (8192, 8, 2048, 1)
    assert a.merge_in_attn and not a.ptx and not a.norm_in_qkv
    assert (a.attn_in_qkv_keys, a.stages, a.l2_prefetch_kb) == (96, (1, 1, 3, 3), 32)
    assert b == StreamConfig(16384, 4, max_k=4096, per_sm=2, attn_block_s=32)
    assert sweep_mega.named_fields(b) == {"attn_block_s": 32}
    text = "16384/4/4096/2/" + "/".join(f"{k}={v}" for k, v in sweep_mega.named_fields(b).items())
    assert shapes.stream_configs(text) == [b]
    assert c.op_elems == (8192, 8192, 8192, 16384) and c.attn_block_s == 16
    assert sweep_mega.named_fields(c) == {"op_elems": "8192:8192:8192:16384", "attn_block_s": 16}
    text = "16384/4/4096/2/" + "/".join(f"{k}={v}" for k, v in sweep_mega.named_fields(c).items())
    assert shapes.stream_configs(text) == [c]
    with pytest.raises(ValueError, match="op_elems"):
        shapes.stream_configs("16384/4/4096/2/op_elems=8192:8192")
    # a positional flag by name (the benches' commands name them: exp's l2 prefetch with
    # kv_prefetch), and twice: an error, not a silent choice
    d, = shapes.stream_configs("16384/4/4096/2/l2_prefetch_kb=32/kv_prefetch=1")
    assert d == StreamConfig(16384, 4, max_k=4096, per_sm=2, l2_prefetch_kb=32, kv_prefetch=True)
    with pytest.raises(ValueError, match="by position and by name"):
        shapes.stream_configs("16384/4/4096/2/0/0/0/-1/0/16/l2_prefetch_kb=32")
    assert shapes.stream_fields(["ptx=1", "l2_prefetch_kb=64"]) == dict(ptx=True,
                                                                         l2_prefetch_kb=64)
    with pytest.raises(ValueError, match="no field"):
        shapes.stream_fields(["o_first_after_wait=1"])


def test_rows_tile_strings_parse(monkeypatch):
    """sweep_rows / trace_step / compile_check --rows-tile(s): rows x K x warps, then /kP for P K
    parts per o / down tile (config.ROWS_KSPLIT; without it config.py's default, also after a
    /kP); three numbers or an error."""
    import shapes
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import TileConfig
    assert shapes.rows_tile("32x256x4") == TileConfig(32, 256, 4)
    assert shapes.rows_tile("64x64x8") == TileConfig(64, 64, 8)
    for bad in ("32x256", "32x256x4x3", "32x256x4s"):
        with pytest.raises(ValueError):
            shapes.rows_tile(bad)
    for name in ("MULTI_ROW_TILE", "ROWS_KSPLIT"):
        monkeypatch.setattr(config, name, getattr(config, name))  # restored after the test
    default = config.ROWS_KSPLIT
    assert shapes.set_rows_tile("16x128x8/k3") == TileConfig(16, 128, 8)
    assert config.MULTI_ROW_TILE == TileConfig(16, 128, 8) and config.ROWS_KSPLIT == 3
    shapes.set_rows_tile("32x256x4")
    assert config.MULTI_ROW_TILE == TileConfig(32, 256, 4) and config.ROWS_KSPLIT == default
    with pytest.raises(ValueError):
        shapes.set_rows_tile("32x256x4/kx")


def test_persistent_stream_runs_cover_every_tile():
    """StreamConfig.persistent (bench_ops' persistent rows, the table's stream GEMVs): per_sm
    programs per SM, each a run of whole tiles, together covering the matrix's row tiles with no run more than one SM-round too many."""
    import itertools
    import math
    import bench_ops
    import shapes
    for cfg in shapes.stream_configs("16384/4/4096/2,8192/4/4096/2,32768/8/4096/1"):
        for (K, N), parts in itertools.product(
                [(2048, 16384), (14336, 4096), (2048, 128256), (4096, 6144), (4096, 14336)],
                (1, 2)):
            p = cfg.persistent(N, K, 132, parts)
            n_tiles = math.ceil(N / cfg.tile(K, parts).block_n)
            programs = math.ceil(n_tiles / p.tiles)
            assert programs <= cfg.per_sm * 132 and programs * p.tiles >= n_tiles
            assert bench_ops.config_tag(cfg).endswith(
                f"{cfg.tile_elems}/{cfg.num_warps}/{cfg.max_k}/{cfg.per_sm}")


def test_gemv_table_entry_picks_tile_or_stream(monkeypatch):
    """gemv()'s decode choice per shape on a GPU: a table stream entry gives config.gemv_stream
    (persistent over the op's own rows: gate|up streams half the table's rows per tile, parts=2)
    and leaves gemv_config at its rule; a tile entry gives that tile and no stream; the CPU (the
    interpreter's device) never takes a table entry."""
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import StreamConfig, TileConfig
    s, t = StreamConfig(8192, 4, per_sm=4), TileConfig(8, 512, 4)
    table = {(16384, 2048): s, (4096, 14336): t}
    monkeypatch.setattr(config, "lookup_gemv", lambda gpu, N, K, path=None: table.get((N, K)))
    assert config.gemv_stream(8192, 2048, "cpu", rows=16384, parts=2) is None
    monkeypatch.setattr(config, "_cuda_gpu", lambda device: "Some GPU")
    got = config.gemv_stream(8192, 2048, "cpu", rows=16384, parts=2)
    assert got == s.persistent(8192, 2048, config.GPU_SMS, 2) and got.tiles >= 1
    assert got.tile(2048, 2).block_n == s.tile(2048).block_n // 2
    assert config.gemv_stream(4096, 14336, "cpu") is None
    monkeypatch.setattr(config, "INTERPRET", False)
    assert config.gemv_config(4096, 14336, 1, "cuda") == t
    assert config.gemv_config(8192, 2048, 1, "cuda", rows=16384) == TileConfig(4, 1024, 4)


@pytest.mark.parametrize("name", ["x gate|up", "x down", "x o", "x lm_head"])
def test_sweep_gemv_times_the_fused_op(name):
    """sweep_gemv's launches are ops mode's fused ops on the swept shape -- gate|up with RMSNorm
    and SwiGLU (2N rows in, N out), o / down with the residual -- as a tile and as a persistent
    stream, each equal to the fp32 reference it is checked against before timing (bf16 output:
    2^-9 relative rounding dominates; fp32 sums over K <= 96 add ~1e-7)."""
    import sweep_gemv
    from fastdecode.triton_kernels.config import StreamConfig, TileConfig
    from conftest import DEVICE
    K, N = 40, 96
    kw, n_out, ref = sweep_gemv.fused_op(name, K, N, device=DEVICE)
    assert n_out == (N // 2 if "gate|up" in name else N)
    assert (ref is None) == (name == "x lm_head")
    g = torch.Generator(DEVICE).manual_seed(1)
    x = torch.randn(1, K, device=DEVICE, generator=g).to(torch.bfloat16)
    w = (torch.randn(N, K, device=DEVICE, generator=g) * K ** -0.5).to(torch.bfloat16)
    want = ref(x, w) if ref is not None else x.float() @ w.float().t()
    for cfg in (TileConfig(16, 32, 4), StreamConfig(256, 4, per_sm=2)):
        out = torch.zeros(1, N, device=DEVICE, dtype=torch.bfloat16)
        sweep_gemv.launcher(cfg, K, N, kw, n_out, 3)(x, w, out)
        err = float((out[:, :n_out].float() - want).norm() / want.norm())
        assert err < 1e-2, (name, cfg, err)


def test_prefill_flops_count_the_models_matmuls():
    """bench_prefill's compute roofline: 2 FLOPs per weight of every layer's linear layers per
    prompt token, the lm_head once, and the causal attention's T^2 / 2 query-key pairs."""
    import bench_prefill
    from fastdecode.spec import ModelSpec
    from models import tiny_model
    for family in ("llama", "qwen3"):
        model = tiny_model(family)
        spec = ModelSpec.from_hf_config(model.config)
        linear = sum(m.weight.numel() for m in model.model.layers.modules()
                     if isinstance(m, torch.nn.Linear))
        T = 7
        attn = 2 * 2 * spec.n_layers * spec.q_dim * T * T / 2
        assert bench_prefill.prefill_flops(spec, T) == \
            2 * T * linear + 2 * model.lm_head.weight.numel() + attn


@pytest.mark.parametrize("dtype,block_k", [(torch.bfloat16, 256), (torch.float16, 256),
                                           (torch.float32, 128)])
def test_rows_tile_keeps_its_bytes_per_weight_width(monkeypatch, dtype, block_k):
    """A step of several rows on a GPU tiles every GEMV and the QKV by config.rows_tile: the
    shipped 32 x 256 pieces of 2-byte weights, K halved for fp32 (the same 16 KB a piece; at
    256 an fp32 model's multi-row kernel needed 182 KB of shared memory a program and CUDA
    refused its two programs an SM) -- in ops mode's launches and the megakernel's tiling
    alike; decode (T=1) keeps its own tiles."""
    from fastdecode.graph import make_tiling
    from fastdecode.spec import ModelSpec
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import TileConfig
    from fastdecode.triton_kernels.qkv_rope import qkv_tile
    from models import tiny_model
    monkeypatch.setattr(config, "INTERPRET", False)
    eb = dtype.itemsize
    assert config.gemv_config(2048, 2048, 4, "cuda", elem_bytes=eb) == TileConfig(32, block_k, 4)
    spec = ModelSpec.from_hf_config(tiny_model("llama").config)
    t = make_tiling(spec, 4, 64, "cuda", dtype=dtype)
    assert (t.bk_q, t.bk_d, t.bk_f, t.bk_g) == (block_k,) * 4 and t.rows_q == 32
    assert t.qkv_bk == qkv_tile(spec.head_dim, spec.qk_norm, 4, spec.d_model, "cuda",
                                elem_bytes=eb)[1]
    assert make_tiling(spec, 4, 64, "cuda").bk_q == 256  # dtype unknown: 2-byte weights
