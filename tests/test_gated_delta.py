"""Qwen3.5's Gated DeltaNet layers: the kernel against the reference on odd sizes, the model
against Hugging Face's (bf16, its vision-language wrapper), and what a recurrent state cannot
do (modes without its tasks, moving the cache back, tensor parallelism). The fp32 family test
(test_models, torch and ops) and the random shapes (hf_shapes) cover the rest."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdecode
from conftest import DEVICE
from fastdecode import UnsupportedModelError, reference as R
from fastdecode.spec import ModelSpec, TensorParallelError
from helpers import U, hf_logits, rel_err, teacher_forced
from models import tiny_model, tiny_vlm

PROMPT, STEPS = 21, 8


@settings(max_examples=12, deadline=None)
@given(nk=st.integers(1, 3), rep=st.integers(1, 3), dk=st.integers(1, 17),
       dv=st.integers(1, 17), kc=st.integers(1, 4), T=st.integers(1, 5),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 1000))
def test_gated_delta_kernel_matches_reference(nk, rep, dk, dv, kc, T, dtype, seed):
    """ops.gated_delta against reference.gated_delta on one step of T rows from random states:
    the output, the fp32 state and the convolution's state. Both compute in fp32 and differ in
    sum order only (sums of <= 17 terms, ~sqrt(17) 2^-24 each, compounded over <= 5 rows of the
    recurrence): 1e-5 relative; the output stored in bf16 adds its rounding, 2^-8 (the
    interpreter truncates: up to 2u). The convolution's state is a copy of input rows: exact."""
    g = torch.Generator().manual_seed(seed)
    nv = nk * rep
    kd, vd = nk * dk, nv * dv
    conv = 2 * kd + vd
    y = torch.randn(T, conv + vd + 2 * nv, generator=g).to(dtype)
    w = (torch.randn(conv, kc, generator=g) / kc ** 0.5).to(dtype)
    A_log = torch.randn(nv, generator=g)
    dt = torch.randn(nv, generator=g)
    norm_w = (1 + 0.2 * torch.randn(dv, generator=g)).to(dtype)
    cs = torch.randn(kc - 1, conv, generator=g).to(dtype)
    S = torch.randn(nv, dk, dv, generator=g)
    gdn = (nk, nv, dk, dv, kc)
    cs_ref, S_ref = cs.clone(), S.clone()
    want = R.gated_delta(y, w, A_log, dt, norm_w, cs_ref, S_ref, gdn, 1e-6)
    args = [t.to(DEVICE) for t in (y, w, A_log, dt, norm_w, cs, S)]
    got = fastdecode.ops.gated_delta(*args, gdn=gdn, eps=1e-6)
    assert got.dtype == dtype and got.shape == (T, vd)
    assert rel_err(got.float().cpu(), want) < 1e-5 + 2 * U[dtype]
    assert rel_err(args[6].cpu(), S_ref) < 1e-5
    assert torch.equal(args[5].cpu(), cs_ref)


def test_bf16_ops_close_to_fp32_hf():
    """bf16 weights and activations in ops mode against the fp32 HF model holding the same
    rounded weights: activations rounded to bf16 at ~6 points an attention layer, two more for
    its output gate (the gate's rows, the gated output) and ~5 a Gated DeltaNet layer (the
    normed input, in_proj's rows, the mixer's output, the residual; the fp32 state is not
    rounded) -- with the MLPs and the head ~20 points, so sqrt(20) u compounded at worst; 4x that
    (7.0e-2) still far below a wrong kernel's O(1). Then the greedy tokens of a generate."""
    model = tiny_model("qwen3_5_text", dtype=torch.bfloat16).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(4))
    ids = ids.to(DEVICE)
    ref = hf_logits(tiny_model("qwen3_5_text", dtype=torch.bfloat16).float().to(DEVICE), ids)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode="ops")
    assert fm.dtype == torch.bfloat16
    assert rel_err(teacher_forced(fm, ids, PROMPT), ref) < 4 * U[torch.bfloat16] * 20 ** 0.5


@pytest.mark.parametrize("mode", ["torch", "ops"])
def test_generate_matches_hf(mode):
    """Greedy tokens of generate() are HF's (fp32; HF's decode steps run its recurrent form,
    its prompt the chunked one), over a prompt of two prefill chunks and past it."""
    model = tiny_model("qwen3_5_text", layers=3).to(DEVICE)
    ids = torch.randint(0, 101, (1, 19), generator=torch.Generator().manual_seed(8)).to(DEVICE)
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=10, do_sample=False)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert torch.equal(fm.generate(ids, max_new_tokens=10, eos_token_id=[]), want)


@pytest.mark.parametrize("mode", ["torch", "ops"])
def test_vision_language_wrapper_matches_hf(mode):
    """Qwen3.5's released checkpoints are its vision-language model (qwen3_5): its language
    model decodes alone, under the interleaved multimodal RoPE of its config (text positions:
    the plain RoPE) -- HF's logits on text-only input at the family test's 1e-5."""
    pytest.importorskip("transformers.models.qwen3_5")
    model = tiny_vlm("qwen3_5").to(DEVICE)
    ids = torch.randint(0, 99, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(6))
    ids = ids.to(DEVICE)
    ref = hf_logits(model, ids)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert fm.weights.spec.text_of == "qwen3_5" and fm.weights.spec.linear_layers == (0,)
    assert rel_err(teacher_forced(fm, ids, PROMPT), ref) < 1e-5


def test_what_a_recurrent_state_cannot_do():
    """The megakernel and the VM have no tasks for the DeltaNet (UnsupportedModelError before
    any weight is packed); its state cannot move back, so prompt lookup, a rewind short of 0
    and tensor parallelism raise clear errors; the default mode on a GPU is ops."""
    model = tiny_model("qwen3_5_text")
    for mode in ("mega", "vm"):
        with pytest.raises(UnsupportedModelError, match="Gated DeltaNet"):
            fastdecode.from_hf(model, max_seq_len=32, mode=mode)
    spec = ModelSpec.from_hf_config(model.config)
    with pytest.raises(TensorParallelError, match="Gated DeltaNet"):
        spec.check_tp(2)
    from fastdecode.module import _default_mode
    assert _default_mode(torch.device("cuda"), spec) == "ops"
    fm = fastdecode.from_hf(model.to(DEVICE), max_seq_len=32, mode="torch")
    ids = torch.tensor([[3, 14, 15, 92, 65]], device=DEVICE)
    with pytest.raises(ValueError, match="prompt lookup"):
        fm.generate(ids, max_new_tokens=4, prompt_lookup_num_tokens=3)
    fm(ids)
    with pytest.raises(ValueError, match="cannot go back"):
        fm.runtime.rewind(2)
    fm.runtime.rewind(0)  # to 0: an empty state, as a fresh model's
    assert not fm.runtime.state.rec_state.any() and not fm.runtime.state.conv_state.any()


@pytest.mark.parametrize("mode", ["torch", "ops"])
def test_prefix_cache_matches_fresh_calls(mode):
    """prefix_cache=True: a prompt that extends the whole cached sequence prefills only its new
    tokens (the state holds the rest); one that parts from it starts afresh -- either way the
    same tokens and logits as a fresh model's."""
    model = tiny_model("qwen3_5_text").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=48, mode=mode, prefix_cache=True)
    fresh = fastdecode.from_hf(model, max_seq_len=48, mode=mode)
    g = torch.Generator().manual_seed(7)
    first = torch.randint(3, 101, (1, 10), generator=g).to(DEVICE)
    kw = dict(max_new_tokens=6, output_logits=True, return_dict_in_generate=True,
              eos_token_id=[])
    seq = fm.generate(first, **kw).sequences
    more = torch.randint(3, 101, (1, 4), generator=g).to(DEVICE)
    for turn, kept in ((torch.cat([seq, more], 1), seq.shape[1] - 1), (seq[:, :12], 0)):
        fed = []
        inner = fm.runtime.prefill
        fm.runtime.prefill = lambda ids, sampling, start=0: (fed.append(start),
                                                            inner(ids, sampling, start=start))
        got, want = fm.generate(turn, **kw), fresh.generate(turn, **kw)
        fm.runtime.prefill = inner
        assert fed == [kept]
        assert torch.equal(got.sequences, want.sequences)
        assert rel_err(torch.cat(got.logits), torch.cat(want.logits)) < 1e-5


def test_checkpoint_folder_and_dtype_moves(tmp_path):
    """The released form's checkpoint folder (the vision-language wrapper's safetensors: the
    language model under model.language_model., HF's extra mtp.* tensors beside it) packs as
    from_hf does, bit for bit; a move to bf16 rounds A_log and dt_bias as a bf16 model holds
    them (kept fp32 after: FP32_KEPT) and gives that model's tokens in ops mode."""
    from helpers import folder_packs_as_from_hf
    from safetensors.torch import load_file, save_file
    model = tiny_vlm("qwen3_5")
    model.save_pretrained(tmp_path)
    shard = next(tmp_path.glob("*.safetensors"))
    tensors = load_file(shard)
    tensors["mtp.fc.weight"] = torch.zeros(2, 2)  # a multi-token-prediction head: not read
    save_file(tensors, shard, metadata={"format": "pt"})
    folder_packs_as_from_hf(tmp_path, model)
    fm = fastdecode.from_hf(model, max_seq_len=48, mode="ops").to(DEVICE, torch.bfloat16)
    half = model.to(torch.bfloat16)
    want = fastdecode.from_hf(half, max_seq_len=48, mode="ops", device=DEVICE)
    assert fm.weights.lin_alog.dtype == torch.float32
    assert torch.equal(fm.weights.lin_alog.cpu(), want.weights.lin_alog.cpu())
    assert torch.equal(fm.weights.lin_dt.cpu(), want.weights.lin_dt.cpu())
    ids = torch.tensor([[3, 14, 15, 92, 65]], device=DEVICE)
    assert torch.equal(fm.generate(ids, max_new_tokens=6, eos_token_id=[]),
                       want.generate(ids, max_new_tokens=6, eos_token_id=[]))
