"""GPU only: published model shapes that no other test runs, as a new user would bring them --
Llama-3.2-3B (d_model 3072, GQA 3:1, tied), Qwen2.5-0.5B (GQA 7:1, d_model 896, FFN 4864, tied, QKV
bias), Qwen2.5-7B (GQA 7:1, d_model 3584 = 7 x 512, FFN 18944 = 37 x 512), Qwen2.5-14B (d_model 5120
past the stream's 4096-element rows, GQA 5:1), Qwen3-4B and Qwen3-0.6B (q/k norm, 32 / 16 heads of
128 on a d_model of 2560 / 1024, tied), Mistral-7B (a sliding window, 32K vocabulary; the window cut
to 24 keys so a short prompt crosses it), SmolLM2-135M (9 heads, 3 KV heads), Mistral-Nemo-12B (32
heads of an explicit 128 on a d_model of 5120, 131K vocabulary), Qwen3-32B (64 heads of 128 on 5120,
GQA 8:1), Phi-3-mini (MHA, head_dim 96, fused checkpoint tensors), Phi-4-mini (partial rotary,
longrope, 200K tied vocabulary), Granite-3.1-8B (multipliers folded into the weights, a scaled copy
of the tied head), Seed-OSS-36B (GQA 10:1, q_dim 10240 on a d_model of 5120), SmolLM3-3B (layers
without RoPE, GQA 4:1, tied 128K vocabulary), GLM-4-9B (GQA 16:1, interleaved partial rotary),
Gemma-2B / 7B (GeGLU, head_dim 256), Gemma-2-2B (norms after the blocks, soft-capped attention and
logits), Gemma-3-1B / 4B (norms after the blocks, q / k norms, a RoPE per layer type), OLMo-2-1B (q
/ k norms over all heads, no norms before the blocks), GLM-4-9B-0414 (norms after the blocks), the
LayerNorm families (OLMo-1B, StableLM-2-1.6B, StarCoder2, Phi-2, Pythia-1B, GPT-2 XL, GPT-J-6B,
OPT-1.3B, StarCoderBase-1B, Falcon-7B: learned positions, parallel blocks, multi-query, 71 heads;
BLOOM-560M, Falcon-RW-1B, MPT-7B: ALiBi) -- at their real matrix sizes (random bf16 weights, biases
and norm weights perturbed so those paths carry signal), two layers each, against the Hugging Face
model; OLMoE-1B-7B, Qwen1.5-MoE-A2.7B, ERNIE-4.5-21B-A3B and gpt-oss-20b (mixtures of experts,
64 / 60 / 64 / 32 of them, a shared expert; ERNIE's dense first layer; attention sinks) in ops
mode.

The reference is the HF model itself in fp32 on the same (bf16-valued) weights. fastdecode keeps
fp32 accumulators and rounds activations to bf16 at about six points a layer (the normed input
of QKV and of gate|up, q / k / v, the attention output, the residual after o_proj and after
down) plus the final normed row: each rounding is a relative error of at most u = 2^-8, as good
as independent between points, so over L layers the logits' relative L2 error is expected near
sqrt(6 L + 1) u (0.014 at L = 2). The bound allows twice that, or twice the error of HF's own
bf16 run of the model (the accuracy a user would otherwise get), whichever is larger. Greedy
choices must agree where HF fp32's top two logits are further apart than three times the
allowed error per logit (rms of the logits x the bound), on either side."""
import copy
import math
import os
import sys

import pytest
import torch

import fastdecode
from fastdecode.runtime import lacks_tasks
from helpers import hf_logits, rel_err, teacher_forced

pytestmark = pytest.mark.gpu
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from shapes import longrope  # noqa: E402

LAYERS = 2
PROMPT, STEPS = 40, 8
SHAPES = [("3b", {}), ("qwen2.5-0.5b", {}), ("qwen2.5-7b", {}), ("qwen2.5-14b", {}),
          ("qwen3-4b", {}), ("qwen3-0.6b", {}), ("mistral-7b", {"sliding_window": 24}),
          ("smollm2", {}), ("mistral-nemo", {}), ("qwen3-32b", {}),
          ("phi3-mini", {"sliding_window": 24}),
          # the original context cut to 32: the 40-token prompt takes the long factors, as HF's
          # one forward over the whole sequence does
          ("phi4-mini", {"rope_parameters": longrope(48, 0.75, orig=32),
                         "original_max_position_embeddings": 32}),
          ("granite-8b", {}), ("seed-oss-36b", {}),
          # the second of the two layers without RoPE, as every fourth one of the real model
          ("smollm3-3b", {"no_rope_layers": [1, 0]}), ("glm4-9b", {}), ("gemma-2b", {}),
          ("gemma-7b", {}),
          # a sliding layer (window cut to 24) and a full one, each with its own RoPE table
          *[(k, {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 24})
            for k in ("gemma2-2b", "gemma3-1b", "gemma3-4b")], ("glm4-9b-0414", {}),
          ("olmo2-1b", {}), ("arcee-cfg", {}), ("nanochat-d32", {}),
          # LayerNorm families: random norm biases, folded into the projections and the logits
          ("olmo-1b", {}), ("stablelm2-1.6b", {}), ("starcoder2-cfg", {"sliding_window": 24}),
          ("phi-2", {}), ("pythia-1b", {}), ("gpt2-xl", {}), ("gptj-6b", {}), ("opt-1.3b", {}),
          ("starcoderbase-1b", {}), ("falcon-7b", {}), ("bloom-560m", {}), ("codegen-350m", {}),
          ("biogpt", {}),
          ("falcon-rw-1b", {}), ("mpt-7b", {}),
          # per-head q / k LayerNorms (Command R+: two of its layers, 6.3B parameters)
          ("stablelm2-12b", {}), ("command-r-plus", {}),
          # xIELU (its alpha_p / alpha_n drawn as the norm weights: 1 + 0.2 N(0, 1))
          ("apertus-8b", {}),
          # (1 + w) LayerNorms with biases (LayerNorm1P)
          ("nemotron-mini-4b", {}),
          # unscaled attention scores; a global layer, then a local one (window cut to 24)
          ("gpt-neo-1.3b", {"window_size": 24}),
          # sinusoidal positions computed at packing
          ("xglm-564m", {}),
          # mixtures of experts (ops mode), every expert routed: a top-k choice is discrete,
          # and bf16 moves the router's logits enough to swap near-tied experts (an O(1) change
          # of a row) -- all of them routed keeps the published matrices and a continuous sum
          ("olmoe-1b-7b", {"num_experts_per_tok": 64}),
          ("qwen1.5-moe", {"num_experts_per_tok": 60}),
          # a dense first layer (12288 wide) before the expert layer, the choice bias, two
          # ungated shared experts, the fp32 router
          ("ernie-4.5-21b-a3b", {"moe_k": 64}),
          # attention sinks, biased experts and router, the clamped SwiGLU; layer 0's window cut
          # to 24 keys
          ("gpt-oss-20b", {"num_experts_per_tok": 32, "sliding_window": 24}),
          # a Gated DeltaNet layer, then an attention layer with its output gate (ops mode)
          ("qwen3.5-9b", {"layer_types": ["linear_attention", "full_attention"]})]


def _model(key, overrides):
    import transformers

    from shapes import SHAPES as ALL, random_model
    try:
        ALL[key][1]()
    except AttributeError as e:  # a config class this transformers lacks
        pytest.skip(f"transformers {transformers.__version__}: {e}")
    name, model = random_model(key, n_layers=LAYERS, **overrides)
    gen = torch.Generator("cuda").manual_seed(1)
    with torch.no_grad():  # random_model leaves biases at 0 and norm weights at 1
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, device=p.device, generator=gen))
            elif p.dim() == 1 or "norm" in n:  # (Cohere's q / k norms: [heads, head_dim])
                p.copy_(1 + 0.2 * torch.randn(p.shape, device=p.device, generator=gen))
    return name, model


@pytest.mark.parametrize("key,overrides", SHAPES, ids=[k for k, _ in SHAPES])
def test_published_shape_matches_hf(key, overrides):
    name, model = _model(key, overrides)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, PROMPT + STEPS), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    hf16 = hf_logits(model, ids)
    ref = hf_logits(copy.deepcopy(model).float(), ids)
    bound = 2 * max(math.sqrt(6 * LAYERS + 1) * 2.0 ** -8, rel_err(hf16, ref))
    top2 = torch.topk(ref, 2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 3 * bound * ref.pow(2).mean().sqrt()
    spec = fastdecode.ModelSpec.from_hf_config(model.config)
    for mode in ("ops",) if spec.moe or lacks_tasks(spec) else ("mega", "ops"):
        fm = fastdecode.from_hf(model, max_seq_len=128, mode=mode)
        got = teacher_forced(fm, ids, PROMPT)
        del fm
        assert torch.isfinite(got).all(), (name, mode)
        for part, sl in (("prefill", slice(0, PROMPT)), ("decode", slice(PROMPT, None))):
            err = rel_err(got[sl], ref[sl])
            print(f"{name} {mode} {part}: rel err {err:.4f} (HF bf16 "
                  f"{rel_err(hf16[sl], ref[sl]):.4f}, bound {bound:.4f})")
            assert err <= bound, (name, mode, part, err, bound)
        assert torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear]), (name, mode)
