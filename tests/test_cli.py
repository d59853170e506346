"""The README's main command: the CLI streams a completion from the model shipped on PyPI."""
import os
import re
import subprocess
import sys

import numpy
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cli_generate_smollm2():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "fastdecode", "generate", "--model", "smollm2",
                          "--prompt", "What is the capital of France?", "--max-new-tokens", "8",
                          "--device", "cpu", "--dtype", "bfloat16"], capture_output=True,
                         text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Paris" in out.stdout          # greedy SmolLM2-135M-Instruct answers this one
    assert "tokens/s" in out.stderr
    assert "on cpu, bfloat16]" in out.stderr  # --dtype's weights (the CPU's default: float32)


def test_cli_chat_keeps_the_conversation():
    """python -m fastdecode chat: one message a line, each reply streamed; the second turn
    prefills only its new tokens (the first turn's prompt and reply stay cached) and knows the
    first (a follow-up question that needs it)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "fastdecode", "chat", "--model", "smollm2",
                          "--max-new-tokens", "16", "--device", "cpu"],
                         input="What is the capital of France?\nAnd of Italy?\n\n",
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Paris" in out.stdout and "Rome" in out.stdout
    (new1, total1), (new2, total2) = (
        (int(a), int(b)) for a, b in re.findall(r"(\d+) of the (\d+) prompt tokens", out.stderr))
    assert new1 == total1            # the first turn: all of it
    assert 0 < new2 < total2 - total1  # the first turn and part of its reply stayed cached


def test_cli_rejects_missing_model():
    out = subprocess.run([sys.executable, "-m", "fastdecode", "generate", "--model", "/nope",
                          "--prompt", "x"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode != 0 and "no such checkpoint" in out.stderr


@pytest.mark.skipif(tuple(int(x) for x in numpy.__version__.split(".")[:2]) >= (2, 4),
                    reason="Triton 3.6's interpreter needs numpy < 2.4 (setup.py pins it; a GPU "
                           "image's own numpy may be newer)")
def test_cli_trace_tiny_checkpoint(tmp_path):
    """python -m fastdecode trace: the megakernel's per-task timeline (serial on the CPU), the wait
    / work table and one layer's phases, from a checkpoint folder. --device cpu runs the kernels
    in Triton's interpreter, which a machine with a GPU turns on only when asked."""
    from models import tiny_model
    tiny_model("qwen3").save_pretrained(tmp_path / "ck")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-m", "fastdecode", "trace", "--model",
                          str(tmp_path / "ck"), "--steps", "2", "--prompt-len", "5", "--device",
                          "cpu", "--out", str(tmp_path / "trace")], capture_output=True,
                         text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    table, phases = out.stdout.split("layer 1")
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:] if line.strip()}
    assert rows["CHOOSE"][1] == "2"                       # one token choice per traced step
    assert rows["GATE_UP"][1] == "4"                      # 2 layers x 2 steps, one program
    layer = {line.split()[0]: line.split() for line in phases.splitlines()[1:] if line.strip()}
    assert layer["GATE_UP"][1] == "1"  # the layer's tasks in step 0
    # 6-7 keys: the short-context decode schedule (QKV tasks that run the attention)
    assert "QKV_ATTN" in layer and not {"QKV", "ATTN", "MERGE"} & set(layer)
    assert (tmp_path / "trace.json").exists()
