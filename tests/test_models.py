"""Every family, every mode: teacher-forced logits against the Hugging Face model itself, over a
prompt (several prefill chunks) and 8 more single-token steps."""
import copy
import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdecode
from conftest import DEVICE
from helpers import (U, default_dtype, hf_logits, rel_err, skip_unless_hf_reencodes,
                     teacher_forced)
from models import FAMILIES, LONGROPE, hf_shapes, tiny_model, tiny_vlm

# 21 > the 16-token CPU prefill chunk: two chunks, then 8 decode steps (16 until session 59:
# the kernel modes' interpreter steps are most of CI's time, and 8 already run the decode path
# past every tiny model's window and the prompt's second chunk)
PROMPT, STEPS = 21, 8
# the families whose decode has no megakernel / VM tasks (runtime.lacks_tasks): gpt-oss's
# attention sinks and biased experts, FlexOlmo's norms after its blocks, Qwen3.5's Gated DeltaNet
NO_TASKS = {"gpt_oss", "flex_olmo", "qwen3_5_text"}


@pytest.mark.parametrize("family,mode", [
    (f, m) for f in sorted(FAMILIES) for m in ("torch", "vm", "ops", "mega")
    if f not in NO_TASKS or m in ("torch", "ops")])
def test_family_fp32_matches_hf(family, mode):
    """mega on CPU: the persistent kernel in serial mode (one program, topological queue).
    The mixtures of experts decode through the expert tasks in vm and mega (their prompt
    chunks run ops) -- their dense layers (qwen*_moe_dense, ernie4_5_moe, glm4_moe, dots1)
    through GATE_UP / DOWN tasks on their own stacks, DeepSeek-V3's router (glm4_moe, dots1;
    ERNIE's choice bias) in the expert tasks' routing; gpt-oss (attention sinks) and FlexOlmo
    run torch and ops only (test_moe)."""
    model = tiny_model(family).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(3))
    ids = ids.to(DEVICE)
    ref = hf_logits(model, ids)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    got = teacher_forced(fm, ids, PROMPT)
    # fp32 end to end: per-op error ~ sqrt(K) 2^-24 (K <= 88) compounded over 2 layers and the
    # head; 1e-5 is 20x above what we observe (~5e-7) and far below any indexing bug (>1e-2).
    assert got.shape == ref.shape
    assert rel_err(got, ref) < 1e-5, (family, mode, rel_err(got, ref))
    assert fm.position == PROMPT + STEPS


def test_packing_leaves_the_hf_model_alone():
    """NanoChat's embedding norm is applied to the packed table: from_hf's fp32 model on the CPU
    hands packing its own tensors (no copy), which must stay as they were."""
    model = tiny_model("nanochat")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_gpt_neox_sequential_blocks_match_hf(mode):
    """GPT-NeoX with use_parallel_residual off: the MLP after the attention's residual add, as
    Llama's (the family test runs it on: parallel blocks), at the family test's 1e-5."""
    model = tiny_model("gpt_neox", use_parallel_residual=False).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(4))
    ids = ids.to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert not fm.weights.spec.parallel
    assert rel_err(teacher_forced(fm, ids, PROMPT), hf_logits(model, ids)) < 1e-5


def test_xielu_constants_checked():
    """Apertus's xIELU: its alpha_p / alpha_n per layer are packed (the family test holds them
    to HF), its beta and eps are the kernels' constants -- a checkpoint with others raises."""
    for buf, value in (("beta", 0.7), ("eps", -1e-3)):
        model = tiny_model("apertus")
        getattr(model.model.layers[1].mlp.act_fn, buf).fill_(value)
        with pytest.raises(ValueError, match=f"layers.1.mlp.act_fn.{buf}"):
            fastdecode.from_hf(model, max_seq_len=32, mode="torch")


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_mpt_softmax_scale_matches_hf(mode):
    """MPT's attn_config.softmax_scale, the scores' scale itself (ModelSpec.attn_scale, folded
    into the q rows), at the family test's 1e-5; the default scale is off by far more."""
    model = tiny_model("mpt", attn_config={"softmax_scale": 0.6}).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(4))
    ids = ids.to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert fm.weights.spec.attn_scale == 0.6
    ref = hf_logits(model, ids)
    assert rel_err(teacher_forced(fm, ids, PROMPT), ref) < 1e-5
    plain = fastdecode.from_hf(tiny_model("mpt").to(DEVICE), max_seq_len=64, mode="torch")
    assert rel_err(teacher_forced(plain, ids, PROMPT), ref) > 1e-3


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_hyperclovax_without_post_norms_matches_hf(mode):
    """HyperCLOVAX with use_post_norm off: Granite's layout, the residual multiplier back on
    o_proj / down (the family test runs it on: on its norms' weights), at the family test's
    1e-5."""
    model = tiny_model("hyperclovax", use_post_norm=False).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(4))
    ids = ids.to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert not fm.weights.spec.post_norms
    assert rel_err(teacher_forced(fm, ids, PROMPT), hf_logits(model, ids.to(DEVICE))) < 1e-5


@pytest.mark.parametrize("mode", ["torch", "ops", "mega"])
@pytest.mark.parametrize("kind,tied", [("mistral3", False), ("mistral3", True), ("llava", False),
                                       ("llava_onevision", True), ("gemma3", True),
                                       ("qwen2_5_vl", True), ("qwen3_vl", False),
                                       ("qwen3_vl_moe", False), ("glm4v", False),
                                       ("glm4v_moe", False), ("internvl", True),
                                       ("smolvlm", True)])
def test_vision_language_text_model_matches_hf(kind, tied, mode):
    """A vision-language model (Mistral Small 3.x, LLaVA, LLaVA-OneVision: Qwen2 inside, Gemma 3,
    Qwen2.5-VL / Qwen3-VL / GLM-4.1V: their multimodal RoPE one position on every axis for text,
    SmolVLM: Llama under model.text_model, as Idefics3's, whose subclass it is; Qwen3-VL-MoE:
    Qwen3-MoE inside, its decode steps on the megakernel's expert tasks; GLM-4.5V: GLM-4.5
    inside, its dense layer and DeepSeek-V3's router) decodes with its language
    model alone: the HF model's logits on text-only input, at the family test's 1e-5; tied as
    the wrapper's config says (HF ties by it, not by the text config's)."""
    model = tiny_vlm(kind, tie_word_embeddings=tied).to(DEVICE)
    ids = torch.randint(0, 99, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(6))
    ids = ids.to(DEVICE)
    ref = hf_logits(model, ids)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert fm.weights.spec.text_of == kind and fm.weights.spec.tied == tied
    assert rel_err(teacher_forced(fm, ids, PROMPT), ref) < 1e-5


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_yarn_rope_fp32_matches_hf(mode):
    """A YaRN-scaled RoPE (Qwen3's long-context recipe; original context 16 < the 29 positions
    run) through the scaled cos / sin tables, q/k norm included: the same 1e-5 as above. (ops
    reads the same tables as mega; test_spec checks them against HF's rotary embedding.)"""
    model = tiny_model("qwen3", rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 16}).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(5))
    ids = ids.to(DEVICE)
    ref = hf_logits(model, ids)
    got = teacher_forced(fastdecode.from_hf(model, max_seq_len=64, mode=mode), ids, PROMPT)
    assert rel_err(got, ref) < 1e-5, (mode, rel_err(got, ref))




@pytest.mark.parametrize("mode,prompts", [("torch", (10, 16, 17, 20)), ("vm", (16,)),
                                          ("ops", (10,)), ("mega", (10, 20))])
def test_longrope_generate_matches_hf(mode, prompts):
    """longrope (Phi-3 128k checkpoints): HF takes the short factors while the sequence is at
    most the original context long, and its generate re-encodes the whole cache with the long
    ones when the sequence grows past it (a prompt past it: long from the start). Greedy tokens
    and every step's logits against HF's generate -- prompts ending short of, at, and past the
    original context -- with the re-encode landing inside a decode chunk of 5 steps too. The
    same 1e-5 as above: a cache left on the short factors is off by O(1)."""
    _longrope_generate_check(tiny_model("phi3", **LONGROPE).to(DEVICE), mode, prompts, 40)


def test_longrope_long_reencode_matches_hf():
    """The re-encode of an original context of 70 positions takes the long-prompt pass (ops
    mode, 64 positions or more: runtime._prefill_long) -- prompt 66, the switch at step 5."""
    model = tiny_model("phi3", **dict(LONGROPE, original_max_position_embeddings=70,
                                      max_position_embeddings=256)).to(DEVICE)
    assert fastdecode.from_hf(model, max_seq_len=96, mode="ops").runtime._long_prompt(70)
    _longrope_generate_check(model, "ops", (66,), 96)


def _longrope_generate_check(model, mode, prompts, max_seq_len):
    fm = fastdecode.from_hf(model, max_seq_len=max_seq_len, mode=mode)
    for n in prompts:
        ids = torch.randint(3, 101, (1, n), generator=torch.Generator().manual_seed(n))
        ids = ids.to(DEVICE)
        kw = dict(max_new_tokens=14, output_logits=True, return_dict_in_generate=True)
        with torch.no_grad():
            want = model.generate(ids, do_sample=False, **kw)
        skip_unless_hf_reencodes(model, want, n)
        got = fm.generate(ids, **kw)   # one step a call (the host reads each step's logits)
        assert torch.equal(got.sequences, want.sequences), (mode, n)
        assert rel_err(torch.cat(got.logits), torch.cat(want.logits)) < 1e-5, (mode, n)
        fm.runtime.decode_chunk = 5    # steps per launch (mega) / per host round trip
        assert torch.equal(fm.generate(ids, max_new_tokens=14), want.sequences), (mode, n)
        fm.runtime.decode_chunk = 1


def test_longrope_forward_and_lookup_match_hf():
    """A caller's own forward calls, as HF's model forward with its cache: each call takes the
    long factors iff it reaches past the original context, the cached keys keep theirs (no
    re-encode); and prompt lookup gives plain greedy decoding's tokens across the switch (no
    step of several rows straddles it)."""
    from transformers import DynamicCache
    model = tiny_model("phi3", sliding_window=None, **LONGROPE).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=40, mode="torch")
    ids = torch.randint(3, 101, (1, 24), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    cache = DynamicCache(config=model.config)
    # the cache argument's name: `cache` since transformers 5.2x, past_key_values before
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else \
        "past_key_values"
    cuts = [0, 10, 14, 20, 21, 24]
    for a, b in zip(cuts, cuts[1:]):
        with torch.no_grad():
            want = model(ids[:, a:b], use_cache=True, **{name: cache}).logits[0]
        assert rel_err(fm(ids[:, a:b])[0], want) < 1e-5, (a, b)
    rep = torch.tensor([[5, 6, 7, 8, 9] * 2 + [5, 6]]).to(DEVICE)
    with torch.no_grad():
        want = model.generate(rep, max_new_tokens=16, do_sample=False)
    assert torch.equal(fm.generate(rep, max_new_tokens=16, prompt_lookup_num_tokens=3), want)


def test_longrope_prefix_cache_matches_fresh_calls():
    """prefix_cache with longrope: a turn after one that crossed the original context reuses
    the cache only where its keys carry the factors a fresh call's would (a short prompt: not the
    long-factor keys; a long one: re-encoded anyway) -- each turn's logits are a fresh model's."""
    model = tiny_model("phi3", sliding_window=None, **LONGROPE).to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=48, mode="torch", prefix_cache=True)
    fresh = fastdecode.from_hf(model, max_seq_len=48, mode="torch")
    g = torch.Generator().manual_seed(7)
    first = torch.randint(3, 101, (1, 10), generator=g).to(DEVICE)
    kw = dict(max_new_tokens=10, output_logits=True, return_dict_in_generate=True)
    seq = fm.generate(first, **kw).sequences  # 20 positions: crossed 16
    for turn in (seq[:, :12], torch.cat([seq, torch.randint(3, 101, (1, 4), generator=g)
                                         .to(DEVICE)], 1)):
        got, want = fm.generate(turn, **kw), fresh.generate(turn, **kw)
        assert torch.equal(got.sequences, want.sequences)
        assert rel_err(torch.cat(got.logits), torch.cat(want.logits)) < 1e-5


HALF_FAMILIES = ["llama", "qwen3", "gemma", "gemma2", "gemma3_text", "glm4", "exaone4", "olmo2",
                 "arcee", "hyperclovax", "nanochat", "stablelm", "phi", "opt", "falcon_new",
                 "bloom", "mpt", "nemotron"]


# every family in bf16 ops and fp16 mega (the same op bodies: the family's fp16 numerics); fp16
# ops -- those bodies again, only the launchers' dtype new -- on three (CI's time: ~100 s less)
@pytest.mark.parametrize("family,dtype,mode", [
    (f, d, m) for f in HALF_FAMILIES for d, m in ((torch.bfloat16, "ops"), (torch.float16, "mega"))]
    + [(f, torch.float16, "ops") for f in ("llama", "gemma2", "phi")])
def test_half_close_to_fp32_hf(family, dtype, mode):
    """bf16 / fp16 weights and activations vs the fp32 HF model holding the same rounded weights
    (fp16: a model loaded with dtype=torch.float16, which the kernels take as they take bf16).
    Activations are rounded to the half type at ~6 points per layer (u = 2^-8 bf16, 2^-11 fp16,
    relative); with 2 layers and the head the logits' relative error is ~ sqrt(13) * u in the
    worst case; we allow 4u * sqrt(13) (5.6e-2 bf16, 7e-3 fp16; observed 1.1-2.5e-2 / 0.9-1.8e-3),
    and a wrong kernel is off by O(1). Gemma's (1 + w) norm weights are rounded once more, at
    packing (HF multiplies by them in fp32): two more points a layer, sqrt(17) * u, still inside
    the bound (observed 3.2e-2 / 2.7e-3, HF's own half run 2.2e-2 / 2.6e-3). (mega bf16 runs on
    GPUs only: the interpreter's bf16 arithmetic, KNOWLEDGE.md.)"""
    model = tiny_model(family, dtype=dtype).to(DEVICE)
    ids = torch.randint(0, 101, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(4))
    ids = ids.to(DEVICE)
    ref = hf_logits(tiny_model(family, dtype=dtype).float().to(DEVICE), ids)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode=mode)
    assert fm.dtype == dtype
    got = teacher_forced(fm, ids, PROMPT)
    assert rel_err(got, ref) < 4 * U[dtype] * 13 ** 0.5, rel_err(got, ref)


def test_modes_agree_on_generate():
    """torch and ops modes pick the same greedy tokens on a real-shaped run (fp32)."""
    model = tiny_model("qwen2").to(DEVICE)
    ids = torch.randint(0, 101, (1, 7), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    outs = [fastdecode.from_hf(model, max_seq_len=64, mode=m).generate(ids, max_new_tokens=12)
            for m in ("torch", "ops")]
    assert torch.equal(outs[0], outs[1])
    with torch.no_grad():
        hf = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(outs[0], hf)


@settings(max_examples=40, deadline=None)
@given(shape=hf_shapes(), seed=st.integers(0, 1000))
def test_random_shapes_match_hf(shape, seed):
    """Property: on random shapes of every family (tests/models.hf_shapes), the reference ops
    (torch mode: the packed weights, the decode path's cache and rotary tables) give the HF
    model's own logits over a two-chunk prompt and decode steps, in fp64 (K <= 216 here): the
    same 1e-5 as above, or 4x the HF fp32 run's own distance from it where that is larger --
    some draws amplify fp32 rounding (a hidden state 4 wide, one head: HF fp32 5e-6 from fp64),
    and a second fp32 sum order lands within a few times of it -- or 4x the distance of the fp64
    model with every weight moved by a random fp32 rounding (relative 2^-24 N(0, 1)): packing's
    folds round the weights once more in fp32 (a LayerNorm family's centered o_proj / down /
    embedding, Gemma's 1 + w), which such a draw amplifies as much (OLMo, a hidden state 3
    wide: HF fp32 2.3e-6 from fp64, the perturbed weights 3-8e-6, ours 2.0e-5); a wrong kernel
    is off by O(1).
    The kernels are held to torch mode on random shapes by
    test_megakernel.test_mega_random_shapes_match_torch."""
    family, cfg, vocab = shape
    model = tiny_model(family, vocab=vocab, seed=seed, **cfg).to(DEVICE)
    ids = torch.randint(0, vocab, (1, PROMPT + 4), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(DEVICE)
    ref32 = hf_logits(model, ids).double()
    g = torch.Generator().manual_seed(seed)
    # XGLM's attention clamps its scores with torch.full((), finfo(scores' dtype).min), a tensor
    # of the default dtype: fp64's min overflows fp32, so its fp64 runs take fp64 as the default
    f64 = torch.float64 if family == "xglm" else torch.get_default_dtype()
    with torch.no_grad(), default_dtype(f64):
        ref = copy.deepcopy(model).double()(ids).logits[0]
        moved = copy.deepcopy(model).double()
        for p in moved.parameters():
            p.mul_(1 + 2.0 ** -24 * torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device))
        ref_moved = moved(ids).logits[0]
    got = teacher_forced(fastdecode.from_hf(model, max_seq_len=32, mode="torch"), ids, PROMPT)
    bound = max(1e-5, 4 * rel_err(ref32, ref), 4 * rel_err(ref_moved, ref))
    assert rel_err(got.double(), ref) < bound, (family, cfg, vocab, rel_err(got.double(), ref))
