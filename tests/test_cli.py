"""The README's main command: the CLI streams a completion from the model shipped on PyPI."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cli_generate_smollm2():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "fastdecode", "generate", "--model", "smollm2",
                          "--prompt", "What is the capital of France?", "--max-new-tokens", "8",
                          "--device", "cpu"], capture_output=True, text=True, env=env,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Paris" in out.stdout          # greedy SmolLM2-135M-Instruct answers this one
    assert "tokens/s" in out.stderr


def test_cli_rejects_missing_model():
    out = subprocess.run([sys.executable, "-m", "fastdecode", "generate", "--model", "/nope",
                          "--prompt", "x"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode != 0 and "no such checkpoint" in out.stderr
