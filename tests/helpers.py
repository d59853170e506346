"""Shared test helpers: tolerances derived from dtype and reduction length, tiny HF models."""
import contextlib
import math

import pytest
import torch

import fastdecode


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set to dtype inside the block, restored after it."""
    was = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(was)


# Unit roundoff u = 2^-(mantissa bits + 1) of each dtype.
U = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def rel_tol(dtype, K: int = 1, gain: float = 1.0) -> float:
    """Relative L2 tolerance for an op whose output is stored in `dtype` after an fp32 reduction of
    length K, compared with an fp32 reference on the same inputs.
    - storing: the interpreter truncates instead of rounding, so up to 2u relative per element;
    - the T>1 tl.dot path rounds the normalised input to `dtype` (another u, relative rms),
      times `gain`: what the epilogue multiplies an input's relative error by (an MLP
      activation's, ACT_GAIN);
    - the fp32 reduction: random-walk error ~ sqrt(K) * 2^-24, kept with a 16x margin.
    For fp32 outputs the first two terms are fp32's own."""
    return 2 * U[dtype] + gain * U[dtype] + 16 * math.sqrt(K) * U[torch.float32]


# An MLP epilogue's gain on a relative error e of its input row (both GEMV outputs carry the same
# e: one rounded input): act(g) * up moves by (1 + g act'(g) / act(g)) e -- at most 3 for relu^2
# (2 + 1), 2.28 for silu over |g| <= 3 (the tests' pre-activations are ~N(0, 1)); the tanh GELU's
# factor grows only where its output is under 1% of the row's scale (|g| > 2.5 on the negative
# side), which the L2 norm does not see. Without a gate: act(up) alone, relu^2's 2.
ACT_GAIN = 3.0


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def assert_close(out, ref, dtype, K=1, what="", gain=1.0):
    assert torch.isfinite(out.float()).all(), f"{what}: non-finite output"
    err, tol = rel_err(out, ref), rel_tol(dtype, K, gain)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > tolerance {tol:.3g} ({dtype}, K={K})"


def close(out, ref, dtype, K=1) -> bool:
    return rel_err(out, ref) <= rel_tol(dtype, K)


def teacher_forced(fm, ids, prompt: int):
    """A FastModel's fp32 logits [T, V] at every position of ids [1, T]: ids[:, :prompt] as one
    prompt, then one token a step (its decode path)."""
    return torch.cat([fm(ids[:, :prompt])[0]] +
                     [fm(ids[:, t:t + 1])[0] for t in range(prompt, ids.shape[1])]).float()


def hf_logits(model, ids):
    """The Hugging Face model's fp32 logits [T, V] for ids [1, T]."""
    with torch.no_grad():
        return model(ids).logits[0].float()


def drop_encoded_task(runtime, T: int, op_name: str):
    """Remove the first `op_name` task from the encoded queues of the T-token schedule (its
    counter still expects it: a forced missing producer), and make the runtime re-upload them."""
    sched = runtime.schedule(T)
    for p, q in enumerate(sched.queues):
        ks = [k for k, i in enumerate(q) if sched.graph.tasks[i].op.name == op_name]
        if ks:
            w = sched.words[p]
            sched.words[p] = torch.cat([w[:ks[0]], w[ks[0] + 1:], w[-1:]])
            sched.lengths[p] -= 1
            runtime._counters.clear()
            return
    raise ValueError(f"no {op_name} task")


def run_ranks(world: int, fn):
    """fn(rank) for virtual tensor-parallel ranks, one thread each (distributed.ThreadGroup);
    returns the results in rank order, re-raising the first rank's exception. Under Triton's CPU
    interpreter each launch patches triton.language for its duration and restores it when it
    returns -- with concurrent launches, the first to return would unpatch the others'. One
    outer patch held across all threads makes every inner restore a no-op."""
    import threading

    from fastdecode.triton_kernels._common import INTERPRET
    from fastdecode.triton_kernels.megakernel import megakernel
    out, errs = [None] * world, [None] * world

    def main(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001  (re-raised in the main thread)
            errs[r] = e
    scope = None
    if INTERPRET:
        from triton.runtime.interpreter import _patch_lang
        scope = _patch_lang(megakernel.fn)
    try:
        threads = [threading.Thread(target=main, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if scope is not None:
            scope.restore()
    for e in errs:
        if e is not None:
            raise e
    return out


def needs_gpus(n: int):
    """Skip marker for a test of n real GPUs (2: the x2 machines; 4 / 8 where such are lent)."""
    import pytest
    return pytest.mark.skipif(torch.cuda.device_count() < n, reason=f"needs {n} GPU" + "s" * (n > 1))


def record_calls(obj, name: str, what) -> list:
    """Wrap obj.<name> so each call appends what(*args, **kwargs) to the returned list, then runs
    as before (how many rows a runtime's forward got, where a prefill started)."""
    calls, real = [], getattr(obj, name)

    def spy(*args, **kwargs):
        calls.append(what(*args, **kwargs))
        return real(*args, **kwargs)
    setattr(obj, name, spy)
    return calls


def skip_unless_hf_reencodes(model, out, n):
    """The reference is HF's generate: once the sequence is past the original context, its
    steps run on a cache re-encoded with the long factors, so they must equal a forward of the
    whole sequence (which takes them). transformers 5.17's re-encode keeps the old cache (its
    prepare_inputs_for_generation drops past_key_values but not the cache it came from): its
    tokens go astray there, and this test has no reference in that version."""
    orig = model.config.rope_parameters.get("original_max_position_embeddings") or \
        model.config.original_max_position_embeddings
    first = max(0, orig + 1 - n)  # the first step whose input is past the context
    full = hf_logits(model, out.sequences[:, :-1])[n - 1 + first:]
    if rel_err(torch.cat(out.logits)[first:].float(), full) > 1e-5:
        pytest.skip("this transformers version's generate does not re-encode the longrope cache")


def assert_same_weights(fm, ref):
    """fm's packed tensors are ref's, bit for bit (the same ones present; compared on the CPU)."""
    for name, t in ref.weights.tensors().items():
        got = fm.weights.tensors()[name]
        assert (t is None) == (got is None), name
        if t is not None:
            assert torch.equal(got.cpu(), t.cpu()), name


def folder_packs_as_from_hf(path, model):
    """from_pretrained(path) packs the tensors from_hf(model) packs, bit for bit, and gives its
    logits; -> the FastModel read from path."""
    fm = fastdecode.from_pretrained(str(path), max_seq_len=32, device="cpu",
                                    dtype=torch.float32, mode="torch")
    ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    assert_same_weights(fm, ref)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    assert torch.equal(fm(ids), ref(ids))
    assert fm.weights.spec == ref.weights.spec
    return fm


def checkpoint_ranks(path, world: int, device="cpu", **kw):
    """(its ModelSpec, each rank's PackedWeights of `world`) of a checkpoint folder, read as
    from_pretrained reads it (quant's dequantizing getter: FP8 / MXFP4 kept where pack's keep_fp8
    or the MXFP4 rules say), fp32 activations; kw: pack's (keep_fp8)."""
    from fastdecode.loading import open_checkpoint
    from fastdecode.packing import pack
    from fastdecode.quant import dequantizing_getter
    from fastdecode.spec import ModelSpec
    config, get, _ = open_checkpoint(str(path), device)
    spec, get = ModelSpec.from_hf_config(config), dequantizing_getter(config, get, device)
    return spec, [pack(spec, get, device=device, dtype=torch.float32, rank=r, world=world, **kw)
                  for r in range(world)]
