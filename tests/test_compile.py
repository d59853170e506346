"""Every kernel compiles for an H200 (sm_90a) -- also on this CPU-only machine: Triton's front end,
its NVIDIA backend and the bundled ptxas run without a GPU (bench/compile_check.py). The
interpreter that runs the other CPU tests accepts code the compiler rejects (types of loop-carried
values, tuples, constexpr misuse); this catches it before device time is spent."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("family,tp", [("llama_bias_tied", 1), ("mistral", 1), ("qwen2", 1),
                                       ("qwen3", 1), ("qwen3", 2), ("smollm3", 1),
                                       ("hunyuan_v1_dense", 1), ("gemma", 1), ("gemma2", 2),
                                       ("gemma3_text", 1), ("exaone4", 1), ("olmo3", 1),
                                       ("ministral3", 1), ("qwen2_moe", 1), ("qwen3_5_text", 1)])
def test_kernels_compile_for_sm90(family, tp):
    """tp=2: rank 0's megakernel with the in-kernel all-reduce (remote counters, pushes, REDUCE).
    gemma2 (tp 2): the post norms over the ranks' partials, soft-capped attention and logits;
    gemma3_text: the post norms' one-rank REDUCE tasks, two RoPE tables; exaone4: no norm
    prologue in the QKV and gate|up tasks; olmo3: q / k norms over all heads (QK_NORM_FULL);
    ministral3: the position-dependent query scale (QSCALE); qwen2_moe: a mixture's decode tasks
    (ROUTER, EXPERT_GU, EXPERT_DOWN with the shared expert in its chunks) and the routing and
    experts' down kernels; qwen3_5_text: the Gated DeltaNet kernel (ops mode only: no
    megakernel tasks for it)."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compile_check.py"),
                          "--family", family, "--tp", str(tp)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    compiled = {line.split()[0] for line in out.stdout.splitlines()[1:]}
    assert {"gemv_kernel", "qkv_rope_kernel", "attention_kernel", "attn_merge_kernel",
            "lm_head_kernel", "choose_merge_kernel"} <= compiled, out.stdout
    assert ("megakernel" in compiled) == (family != "qwen3_5_text"), out.stdout
    if family == "qwen3_5_text":
        assert "gated_delta_kernel" in compiled, out.stdout
    if family == "qwen2_moe":
        assert {"route_kernel", "experts_down_kernel"} <= compiled, out.stdout
    # the ops-mode kernels as an H200 launches them: programmatic dependent launch (use_pdl)
    pdl = {line.split()[0] for line in out.stdout.splitlines()[1:] if line.endswith(", PDL")}
    assert {"gemv_kernel", "qkv_rope_kernel", "attention_kernel", "attn_merge_kernel",
            "lm_head_kernel"} <= pdl, out.stdout


def test_ptx_wrappers_compile_for_sm90():
    """The asm path of every inline-PTX wrapper (interpreted CPU runs take the fallback), through
    ptxas: a typo in a PTX string fails here, not on the GPU."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compile_check.py"),
                          "--ptx"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    compiled = {line.split()[0] for line in out.stdout.splitlines()[1:]}
    assert {"_acquire_kernel", "_prefetch_copy_kernel", "_timer_kernel", "_spin_kernel",
            "_pdl_producer_kernel", "_pdl_consumer_kernel", "all_reduce_kernel"} <= compiled, \
        out.stdout
    assert " ? regs" not in out.stdout, out.stdout  # ptxas accepted each one



def test_each_stream_op_is_pipelined():
    """StreamConfig.stages > 1 must turn each decode op's weight stream (QKV, o_proj, gate|up,
    down) into a cp.async pipeline: a gpu.barrier or a nested loop inside a stream loop makes
    Triton's pipeliner skip it without a word (gemv.gemv_body), and the only symptom would be a
    slower GPU run. Each op's stages alone adds pipelined loads to the register-stream kernel."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    variants = ["1", "3111", "1311", "1131", "1113"]
    # one program: the stream's own tiles (at a GPU's 264 programs graph.few_tiles_rows cuts the
    # tiny model's 40 rows to one a tile, pieces too small to stage)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compile_check.py"),
                          "--family", "qwen3", "--stages", ",".join(variants), "--programs", "1"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    piped = {line.split()[1]: int(line.split(" pipelined loads")[0].split()[-1])
             for line in out.stdout.splitlines() if line.strip().startswith("stages ")}
    assert set(piped) == set(variants), out.stdout
    for v in variants[1:]:
        assert piped[v] > piped["1"], out.stdout
