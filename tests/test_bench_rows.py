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
