"""The benchmarks' shared row writer (bench/bench_decode.append_results): every GPU benchmark
appends its bench/RESULTS.md rows through it, so its format is checked here, on the CPU."""
import os
import sys

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


def test_stream_table_entries_are_valid_configs():
    """Every shipped entry builds a StreamConfig whose stages rule gives back its recorded stages,
    and says where it came from."""
    import json
    from fastdecode.triton_kernels.config import STREAM_TABLE, lookup_stream, table_stream
    with open(STREAM_TABLE) as f:
        table = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    assert table
    for gpu, rows in table.items():
        assert len({(e["d_model"], e["ffn_dim"]) for e in rows}) == len(rows)
        for e in rows:
            cfg = table_stream(e)
            assert list(cfg.op_stages(e["d_model"])) == e["config"]["stages"]
            assert e["tok_s"] > 0 and e["commit"] and e["date"] and e["command"]
            assert lookup_stream(gpu, e["d_model"], e["ffn_dim"]) == cfg
    assert lookup_stream("NVIDIA H200", 3072, 8192) is None  # unmeasured shape: the defaults


def test_sweep_record_adds_and_replaces_an_entry(tmp_path, monkeypatch):
    import shutil
    import sweep_mega
    from fastdecode.triton_kernels.config import (STREAM_TABLE, StreamConfig, _stream_table,
                                                  lookup_stream)
    monkeypatch.setenv("FASTDECODE_COMMIT", "abc1234")
    path = str(tmp_path / "table.json")
    shutil.copy(STREAM_TABLE, path)
    a = StreamConfig(8192, 8, per_sm=1, stages=(1, 3, 1, 3), attn_in_qkv_keys=64)
    sweep_mega.record(path, "Some GPU", "m", 3072, 8192, a, 123.45, "python bench/sweep_mega.py")
    _stream_table.cache_clear()
    assert lookup_stream("Some GPU", 3072, 8192, path) == a
    b = StreamConfig(per_sm=2)  # default stages: recorded as resolved for d_model 3072
    sweep_mega.record(path, "Some GPU", "m", 3072, 8192, b, 130.0, "python bench/sweep_mega.py")
    _stream_table.cache_clear()
    got = lookup_stream("Some GPU", 3072, 8192, path)
    assert got.op_stages(3072) == b.op_stages(3072) and got.tile_elems == b.tile_elems
    assert len(_stream_table(path)["Some GPU"]) == 1  # replaced, not added
    assert lookup_stream("NVIDIA H200", 2048, 8192, path) is not None  # the others kept
    _stream_table.cache_clear()
