"""Tiny random Hugging Face models of every supported family, with odd sizes (head dims, vocab,
GQA ratios, tied and untied heads, biases, sliding windows) that do not divide any tile size."""
import pytest
import torch
import transformers as tf
from hypothesis import strategies as st


def _tf(name):
    """transformers' class `name`, or None where this version lacks it."""
    return getattr(tf, name, None)


# GLM's and GLM-4-0414's tiny models: the same sizes (the latter adds its two post norms)
_GLM = dict(hidden_size=48, intermediate_size=52, num_attention_heads=6, num_key_value_heads=2,
            head_dim=12, attention_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    # llama: Llama-3 rope scaling, GQA 3:1, head_dim 8, untied
    "llama": (_tf("LlamaConfig"), _tf("LlamaForCausalLM"), dict(
        hidden_size=48, intermediate_size=72, num_attention_heads=6, num_key_value_heads=2,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        max_position_embeddings=256)),
    # llama with biases everywhere and tied embeddings, MHA, head_dim 12
    "llama_bias_tied": (_tf("LlamaConfig"), _tf("LlamaForCausalLM"), dict(
        hidden_size=48, intermediate_size=40, num_attention_heads=4, num_key_value_heads=4,
        attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    # mistral: MQA (8 query heads, 1 KV head), sliding window of 5 keys
    "mistral": (_tf("MistralConfig"), _tf("MistralForCausalLM"), dict(
        hidden_size=64, intermediate_size=88, num_attention_heads=8, num_key_value_heads=1,
        sliding_window=5)),
    # ministral: Mistral with per-layer types -- a window of 5 keys on layer 0, none on layer 1
    "ministral": (_tf("MinistralConfig"), _tf("MinistralForCausalLM"), dict(
        hidden_size=40, intermediate_size=56, num_attention_heads=4, num_key_value_heads=2,
        head_dim=10, sliding_window=5, layer_types=["sliding_attention", "full_attention"])),
    # ministral3: Mistral with YaRN (x64) over an original context of 8 positions, the query scale
    # 1 + 0.5 ln(1 + floor(p / 8)) (llama_4_scaling_beta; raised from the released 0.1 so the
    # tests' positions, up to 28, feel it), GQA 2:1, head_dim 10
    "ministral3": (_tf("Ministral3Config"), _tf("Ministral3ForCausalLM"), dict(
        hidden_size=40, intermediate_size=56, num_attention_heads=4, num_key_value_heads=2,
        head_dim=10, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 64.0,
            "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # granite: Llama with four scalar multipliers (embeddings, residual branches, the attention's
    # scale, the logits' divisor), tied embeddings (the scaled lm_head is a tensor of its own;
    # the embedding's multiplier applies at lookup)
    "granite": (_tf("GraniteConfig"), _tf("GraniteForCausalLM"), dict(
        hidden_size=48, intermediate_size=54, num_attention_heads=6, num_key_value_heads=3,
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
        logits_scaling=2.5, tie_word_embeddings=True)),
    # hyperclovax: Granite's multipliers (the logits times logits_scaling) with a norm after the
    # attention and the MLP, the residual multiplier after it (use_post_norm), GQA 3:1, untied
    "hyperclovax": (_tf("HyperCLOVAXConfig"), _tf("HyperCLOVAXForCausalLM"), dict(
        hidden_size=48, intermediate_size=54, num_attention_heads=6, num_key_value_heads=2,
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
        logits_scaling=2.5, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # helium: RoPE on interleaved pairs (2i, 2i + 1), q/k/v biases but none on o_proj
    "helium": (_tf("HeliumConfig"), _tf("HeliumForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, attention_bias=True)),
    # ernie4_5: interleaved RoPE, every linear biased (use_bias), MQA, head_dim 10, tied
    "ernie4_5": (_tf("Ernie4_5Config"), _tf("Ernie4_5ForCausalLM"), dict(
        hidden_size=40, intermediate_size=44, num_attention_heads=4, num_key_value_heads=1,
        head_dim=10, use_bias=True, tie_word_embeddings=True)),
    # seed_oss: q/k/v biases, o_proj's by its own switch (off), MLP biases on
    "seed_oss": (_tf("SeedOssConfig"), _tf("SeedOssForCausalLM"), dict(
        hidden_size=48, intermediate_size=64, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, attention_bias=True, attention_out_bias=False, mlp_bias=True)),
    # smollm3: no RoPE on every second layer (no_rope_layer_interval 2: layers 1, 3, ...), which
    # also take a sliding window of 4 keys (HF's layer types for use_sliding_window); YaRN on the
    # others (its attention factor must not reach the NoPE layers), GQA 3:1, head_dim 8, tied
    "smollm3": (_tf("SmolLM3Config"), _tf("SmolLM3ForCausalLM"), dict(
        hidden_size=48, intermediate_size=50, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, no_rope_layer_interval=2, use_sliding_window=True, sliding_window=4,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # exaone (EXAONE 3.x): HF's Llama under its own checkpoint names (save_pretrained writes
    # them), GQA 4:1, head_dim 6, tied
    "exaone": (_tf("ExaoneConfig"), _tf("LlamaForCausalLM"), dict(
        hidden_size=48, intermediate_size=46, num_attention_heads=8, num_key_value_heads=2,
        head_dim=6, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # glm: gate|up fused in one tensor, RoPE on interleaved pairs of half of each head (its
    # default partial_rotary_factor 0.5, head_dim 12: dims 0-5), q/k/v biases, GQA 3:1
    "glm": (_tf("GlmConfig"), _tf("GlmForCausalLM"), _GLM),
    # internlm3: HF's Llama with biases on q / k / v / o and the MLP (its config's qkv_bias and
    # bias), GQA 4:1, head_dim 10
    "internlm3": (_tf("InternLM3Config"), _tf("LlamaForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=8, num_key_value_heads=2,
        head_dim=10, attention_bias=True, mlp_bias=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # hunyuan_v1_dense: q/k RMSNorm after RoPE, the NTK-alpha rope (a "dynamic" type with a
    # fixed alpha), biases on q / k / v / o, GQA 3:1, head_dim 12, tied
    "hunyuan_v1_dense": (_tf("HunYuanDenseV1Config"), _tf("HunYuanDenseV1ForCausalLM"), dict(
        hidden_size=48, intermediate_size=58, num_attention_heads=6, num_key_value_heads=2,
        head_dim=12, attention_bias=True, tie_word_embeddings=True,
        rope_scaling={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gemma: (1 + w) RMSNorms, sqrt(d)-scaled embeddings (scaled at lookup: the tied lm_head is
    # the embedding's tensor), the tanh GELU gate, MQA, head_dim 16 with hidden 40 (H * hd != d)
    "gemma": (_tf("GemmaConfig"), _tf("GemmaForCausalLM"), dict(
        hidden_size=40, intermediate_size=66, num_attention_heads=4, num_key_value_heads=1,
        head_dim=16, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gemma2: Gemma's norms and GeGLU, norms after the attention and the MLP too, soft-capped
    # attention scores (cap 3: the tiny model's scores reach it) and logits (cap 2), the query
    # scale 20 ** -0.5, layers sliding (a window of 5 keys) and full in turn, GQA 2:1, head_dim
    # 12, tied; HF's eager attention (the one that soft-caps)
    "gemma2": (_tf("Gemma2Config"), _tf("Gemma2ForCausalLM"), dict(
        hidden_size=40, intermediate_size=58, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, query_pre_attn_scalar=20, sliding_window=5, attn_logit_softcapping=3.0,
        final_logit_softcapping=2.0, tie_word_embeddings=True, attn_implementation="eager",
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # vaultgemma: Gemma 2 without the norms after the blocks (soft caps, the query scale, sliding
    # and full layers as gemma2's), MHA, head_dim 10, tied
    "vaultgemma": (_tf("VaultGemmaConfig"), _tf("VaultGemmaForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=4, num_key_value_heads=4,
        head_dim=10, query_pre_attn_scalar=16, sliding_window=5, attn_logit_softcapping=3.0,
        final_logit_softcapping=2.0, tie_word_embeddings=True, attn_implementation="eager",
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gemma3_text: Gemma's norms and GeGLU, norms after the attention and the MLP too, (1 + w)
    # q / k norms, the query scale 24 ** -0.5 (not head_dim's), layers sliding (a window of 5
    # keys, RoPE base 100) and full (linear rope scaling) in turn, GQA 2:1, head_dim 16, tied
    "gemma3_text": (_tf("Gemma3TextConfig"), _tf("Gemma3ForCausalLM"), dict(
        hidden_size=40, intermediate_size=66, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, query_pre_attn_scalar=24, sliding_window=5, sliding_window_pattern=2,
        rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_local_base_freq=100.0,
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # exaone4: norms after the attention and the MLP and none before, q / k RMSNorms, layers
    # sliding (a window of 5 keys, RoPE) and full (no RoPE) in turn, GQA 3:1, head_dim 8, tied
    "exaone4": (_tf("Exaone4Config"), _tf("Exaone4ForCausalLM"), dict(
        hidden_size=48, intermediate_size=62, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, sliding_window=5, sliding_window_pattern=2, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # olmo2: norms after the blocks and none before, q / k RMSNorms over all heads at once, GQA
    # 3:1, head_dim 8; olmo3: the same with a layer sliding (a window of 5 keys, RoPE base 100)
    # and one full (linear rope scaling): its layer_types name two layers
    "olmo2": (_tf("Olmo2Config"), _tf("Olmo2ForCausalLM"), dict(
        hidden_size=48, intermediate_size=58, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    "olmo3": (_tf("Olmo3Config"), _tf("Olmo3ForCausalLM"), dict(
        hidden_size=48, intermediate_size=58, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, sliding_window=5, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 10000.0}},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # glm4: GLM's layout (fused gate|up, interleaved RoPE on half of each head, q/k/v biases)
    # with norms after the attention and the MLP, GQA 3:1
    "glm4": (_tf("Glm4Config"), _tf("Glm4ForCausalLM"), _GLM),
    # arcee: Llama with an MLP without a gate, down(relu(up)^2), MLP biases, GQA 2:1, head_dim 10
    "arcee": (_tf("ArceeConfig"), _tf("ArceeForCausalLM"), dict(
        hidden_size=40, intermediate_size=74, num_attention_heads=4, num_key_value_heads=2,
        head_dim=10, mlp_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # apertus: Llama 3's RoPE scaling (ApertusConfig's default), q / k norms, an MLP without a
    # gate with xIELU (each layer's alpha_p / alpha_n drawn: N(0, 1) before their softplus), q /
    # k / v / o biases, GQA 3:1
    "apertus": (_tf("ApertusConfig"), _tf("ApertusForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=6, num_key_value_heads=2,
        attention_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # nanochat: weightless norms (one more on the embeddings), RoPE by -theta then q / k norms, an
    # MLP without a gate (relu^2), logits soft-capped at 2 (the tiny model's reach it), MHA,
    # head_dim 8
    "nanochat": (_tf("NanoChatConfig"), _tf("NanoChatForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=6, num_key_value_heads=6,
        final_logit_softcapping=2.0)),
    # olmo (OLMo 1): LayerNorms without weight or bias (the residual stream kept centered), GQA
    # 3:1, tied (the head then a tensor of its own: the embedding rows are centered)
    "olmo": (_tf("OlmoConfig"), _tf("OlmoForCausalLM"), dict(
        hidden_size=48, intermediate_size=58, num_attention_heads=6, num_key_value_heads=2,
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # stablelm: LayerNorms with biases (folded into q / k / v, gate / up and the logits), a
    # quarter of each head rotated (head_dim 16: 4 dims), q / k / v biases, GQA 2:1
    "stablelm": (_tf("StableLmConfig"), _tf("StableLmForCausalLM"), dict(
        hidden_size=64, intermediate_size=54, num_attention_heads=4, num_key_value_heads=2,
        use_qkv_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # stablelm_qk: StableLM-2-12B's blocks -- parallel on the one input_layernorm, per-head q / k
    # LayerNorms without biases (each head its own weights), no q / k / v biases, GQA 3:1
    "stablelm_qk": (_tf("StableLmConfig"), _tf("StableLmForCausalLM"), dict(
        hidden_size=48, intermediate_size=54, num_attention_heads=6, num_key_value_heads=2,
        qk_layernorm=True, use_parallel_residual=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # starcoder2: LayerNorms with biases, biases everywhere, an MLP without a gate (tanh GELU), a
    # window of 5 keys, GQA 3:1, tied
    "starcoder2": (_tf("Starcoder2Config"), _tf("Starcoder2ForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=6, num_key_value_heads=2,
        sliding_window=5, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # jais2: LayerNorms with biases, an MLP without a gate (relu^2) nor biases (its down bias
    # read as zeros, the up one the norm's fold alone), q / k / v / o biases, GQA 2:1, head_dim 10
    "jais2": (_tf("Jais2Config"), _tf("Jais2ForCausalLM"), dict(
        hidden_size=40, intermediate_size=66, num_attention_heads=4, num_key_value_heads=2,
        attention_bias=True, mlp_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # nemotron: LayerNorms with biases whose weights scale by (1 + w) (LayerNorm1P), half of each
    # head rotated (head_dim 12: 6 dims), an MLP without a gate (relu^2) with biases, q / k / v /
    # o biases, GQA 2:1
    "nemotron": (_tf("NemotronConfig"), _tf("NemotronForCausalLM"), dict(
        hidden_size=40, intermediate_size=66, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, attention_bias=True, mlp_bias=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # phi (Phi-1 / 1.5 / 2): parallel blocks on one LayerNorm with a bias, biases everywhere
    # (the lm_head's too), half of each head rotated (head_dim 12), an MLP without a gate (tanh
    # GELU), GQA 2:1
    "phi": (_tf("PhiConfig"), _tf("PhiForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=4, num_key_value_heads=2,
        partial_rotary_factor=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # cohere: parallel blocks on one LayerNorm without a bias, RoPE on interleaved pairs, q / k /
    # v / o biases, the logits times 0.5, tied, GQA 3:1
    "cohere": (_tf("CohereConfig"), _tf("CohereForCausalLM"), dict(
        hidden_size=48, intermediate_size=56, num_attention_heads=6, num_key_value_heads=2,
        attention_bias=True, logit_scale=0.5, tie_word_embeddings=True, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # cohere_qk: Command R+'s q / k LayerNorms without biases, weights [heads, head_dim], on
    # Cohere's blocks (q / k / v / o biases: each head's bias centered with its rows)
    "cohere_qk": (_tf("CohereConfig"), _tf("CohereForCausalLM"), dict(
        hidden_size=48, intermediate_size=56, num_attention_heads=6, num_key_value_heads=2,
        attention_bias=True, use_qk_norm=True, logit_scale=0.5, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # cohere2: Cohere's blocks, a window of 5 keys on layer 0, no RoPE on the full layer 1
    "cohere2": (_tf("Cohere2Config"), _tf("Cohere2ForCausalLM"), dict(
        hidden_size=48, intermediate_size=56, num_attention_heads=6, num_key_value_heads=2,
        logit_scale=0.5, sliding_window=5, layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gpt_neox (Pythia): parallel blocks, each branch its own LayerNorm with a bias, q|k|v fused
    # per head, a quarter of each head rotated (head_dim 16), an MLP without a gate (the erf
    # GELU), biases everywhere, MHA, untied
    "gpt_neox": (_tf("GPTNeoXConfig"), _tf("GPTNeoXForCausalLM"), dict(
        hidden_size=64, intermediate_size=70, num_attention_heads=4, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # gpt2: learned absolute positions (no RoPE), LayerNorms with biases, q|k|v fused and every
    # projection [in, out] (Conv1D), an MLP of n_inner without a gate (tanh GELU), MHA, tied
    "gpt2": (_tf("GPT2Config"), _tf("GPT2LMHeadModel"), dict(
        hidden_size=48, n_inner=70, num_attention_heads=6, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gpt_neo: learned positions, LayerNorms with biases, no q / k / v biases, unscaled attention
    # scores, a global layer then a local one of 5 keys, an MLP of 70 without a gate (the tanh
    # GELU), MHA, tied
    "gpt_neo": (_tf("GPTNeoConfig"), _tf("GPTNeoForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=6,
        attention_types=[[["global", "local"], 1]], window_size=5, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gpt_bigcode (SantaCoder / StarCoder): GPT-2's blocks with [out, in] projections,
    # multi-query (c_attn q|k|v concatenated, one KV head of 8 dims), the tanh GELU, tied
    "gpt_bigcode": (_tf("GPTBigCodeConfig"), _tf("GPTBigCodeForCausalLM"), dict(
        hidden_size=48, n_inner=70, num_attention_heads=6, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gpt_bigcode_mha: multi_query off -- c_attn fused per head, as GPT-NeoX's
    "gpt_bigcode_mha": (_tf("GPTBigCodeConfig"), _tf("GPTBigCodeForCausalLM"), dict(
        hidden_size=40, n_inner=52, num_attention_heads=4, multi_query=False,
        activation_function="gelu", pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # falcon (Falcon-7B's layout): multi-query (q|k|v concatenated), parallel blocks on one
    # LayerNorm, an MLP of ffn_hidden_size without a gate (erf GELU), no biases, tied
    "falcon": (_tf("FalconConfig"), _tf("FalconForCausalLM"), dict(
        hidden_size=48, ffn_hidden_size=70, num_attention_heads=6, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # falcon_new (Falcon-40B / 180B's new decoder architecture): q|k|v per KV group (GQA 2:1),
    # parallel blocks with a LayerNorm each (ln_attn, ln_mlp), biases, untied
    "falcon_new": (_tf("FalconConfig"), _tf("FalconForCausalLM"), dict(
        hidden_size=48, ffn_hidden_size=52, num_attention_heads=4, num_kv_heads=2,
        new_decoder_architecture=True, bias=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # falcon_seq: multi-head (q|k|v per head), a sequential block (parallel_attn off: two
    # LayerNorms), biases
    "falcon_seq": (_tf("FalconConfig"), _tf("FalconForCausalLM"), dict(
        hidden_size=40, ffn_hidden_size=66, num_attention_heads=4, multi_query=False,
        parallel_attn=False, bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # falcon_rw (Falcon-RW-1B / 7B's layout): ALiBi (its bias rounded to bf16, then scaled; 9
    # heads: a slope past the power of two 8 that bf16 rounds), multi-head, a sequential block,
    # biases, tied
    "falcon_rw": (_tf("FalconConfig"), _tf("FalconForCausalLM"), dict(
        hidden_size=54, ffn_hidden_size=72, num_attention_heads=9, alibi=True, multi_query=False,
        parallel_attn=False, bias=True, tie_word_embeddings=True, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # mpt: ALiBi with MPT's slopes (6 heads: P = 8, its odd-then-even order), LayerNorms without
    # biases, q|k|v concatenated, no biases, tied
    "mpt": (_tf("MptConfig"), _tf("MptForCausalLM"), dict(
        hidden_size=48, num_attention_heads=6, max_seq_len=512, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # bloom: ALiBi (6 heads: the slopes' odd-power tail past the power of two 4), the embedding
    # LayerNorm, LayerNorms with biases, q|k|v per head, biases everywhere, tied
    "bloom": (_tf("BloomConfig"), _tf("BloomForCausalLM"), dict(
        hidden_size=48, n_head=6, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # opt: learned positions at row p + 2, LayerNorms with biases, an MLP of ffn_dim without a
    # gate (ReLU), biases everywhere, MHA, untied
    "opt": (_tf("OPTConfig"), _tf("OPTForCausalLM"), dict(
        hidden_size=48, ffn_dim=70, num_attention_heads=4, word_embed_proj_dim=48,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # gptj: parallel blocks on one LayerNorm with a bias, 6 of each head's 12 dims rotated on
    # interleaved pairs, an MLP of n_inner without a gate, the lm_head's bias, MHA, untied
    "gptj": (_tf("GPTJConfig"), _tf("GPTJForCausalLM"), dict(
        hidden_size=48, n_inner=70, num_attention_heads=4, rotary_dim=6, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # biogpt: OPT's blocks with the erf GELU, the embedded rows times sqrt(48), tied, MHA
    "biogpt": (_tf("BioGptConfig"), _tf("BioGptForCausalLM"), dict(
        hidden_size=48, intermediate_size=70, num_attention_heads=4, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)),
    # xglm: OPT's blocks with sinusoidal positions from row 2 (computed: the checkpoint has
    # none), the erf GELU, the embedded rows times sqrt(48), tied, MHA
    "xglm": (_tf("XGLMConfig"), _tf("XGLMForCausalLM"), dict(
        hidden_size=48, ffn_dim=70, num_attention_heads=4, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, tie_word_embeddings=True)),
    # codegen: GPT-J's blocks with q|v|k fused in 4 blocks of 2 heads (head_dim 6, 4 dims
    # rotated on interleaved pairs), the lm_head's bias
    "codegen": (_tf("CodeGenConfig"), _tf("CodeGenForCausalLM"), dict(
        hidden_size=48, n_inner=70, num_attention_heads=8, rotary_dim=4, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # iquestcoder: HF's Llama under its own model_type; GQA 4:1, head_dim 6, tied
    "iquestcoder": (_tf("IQuestCoderConfig"), _tf("LlamaForCausalLM"), dict(
        hidden_size=48, intermediate_size=62, num_attention_heads=8, num_key_value_heads=2,
        head_dim=6, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # cwm: a window of 5 keys on the layers the config's default layer_types slide (all but
    # layer 0 of 2), its default llama3 rope scaling, GQA 3:1, head_dim 8
    "cwm": (_tf("CwmConfig"), _tf("CwmForCausalLM"), dict(
        hidden_size=48, intermediate_size=56, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # qwen2: q/k/v bias, tied, head_dim 10 (half 5), GQA 2:1
    "qwen2": (_tf("Qwen2Config"), _tf("Qwen2ForCausalLM"), dict(
        hidden_size=60, intermediate_size=54, num_attention_heads=6, num_key_value_heads=3,
        tie_word_embeddings=True)),
    # qwen3: q/k RMSNorm, explicit head_dim 14 with hidden 40 (H*hd != d), untied
    "qwen3": (_tf("Qwen3Config"), _tf("Qwen3ForCausalLM"), dict(
        hidden_size=40, intermediate_size=68, num_attention_heads=4, num_key_value_heads=2,
        head_dim=14, tie_word_embeddings=False)),
    # phi3: q|k|v and gate|up fused in the checkpoint, half of each head rotated (head_dim 12:
    # dims 0-5), a sliding window of 6 keys, GQA 2:1
    "phi3": (_tf("Phi3Config"), _tf("Phi3ForCausalLM"), dict(
        hidden_size=48, intermediate_size=60, num_attention_heads=4, num_key_value_heads=2,
        partial_rotary_factor=0.5, sliding_window=6, pad_token_id=0, eos_token_id=2)),
    # qwen3_5_text (Qwen3.5): a Gated DeltaNet layer, then an attention layer
    # (full_attention_interval 2) with q / k norms and a sigmoid gate on each head's output, a
    # quarter of each head rotated (3 of 12 dims: HF rotates 4), (1 + w) RMSNorms; the DeltaNet's
    # 2 key heads of 6 dims each serving 3 value heads of 10, a 3-tap convolution; untied
    "qwen3_5_text": (_tf("Qwen3_5TextConfig"), _tf("Qwen3_5ForCausalLM"), dict(
        hidden_size=40, intermediate_size=52, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, full_attention_interval=2, linear_num_key_heads=2, linear_key_head_dim=6,
        linear_num_value_heads=6, linear_value_head_dim=10, linear_conv_kernel_dim=3)),
    # mixtures of experts (MOE): Mixtral's top 2 of 5 experts 36 wide, renormalized, a window
    # of 6 keys
    "mixtral": (_tf("MixtralConfig"), _tf("MixtralForCausalLM"), dict(
        hidden_size=48, intermediate_size=36, num_attention_heads=6, num_key_value_heads=2,
        num_local_experts=5, num_experts_per_tok=2, sliding_window=6)),
    # qwen2_moe: q/k/v biases, top 3 of 6 experts 22 wide (not renormalized), a shared expert 30
    # wide under its sigmoid gate, tied
    "qwen2_moe": (_tf("Qwen2MoeConfig"), _tf("Qwen2MoeForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=4, num_key_value_heads=2,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=22,
        shared_expert_intermediate_size=30, norm_topk_prob=False, tie_word_embeddings=True)),
    # qwen3_moe: q/k RMSNorm, head_dim 12 (H*hd != d), top 2 of 7 experts 26 wide, renormalized
    "qwen3_moe": (_tf("Qwen3MoeConfig"), _tf("Qwen3MoeForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=6, num_key_value_heads=3,
        head_dim=12, num_experts=7, num_experts_per_tok=2, moe_intermediate_size=26,
        norm_topk_prob=True)),
    # dense MLP layers among the expert layers (ModelSpec.dense_layers), their own width:
    # qwen2_moe's layer 1 (mlp_only_layers, after an expert layer), qwen3_moe's layer 0 (every
    # second layer sparse: decoder_sparse_step)
    "qwen2_moe_dense": (_tf("Qwen2MoeConfig"), _tf("Qwen2MoeForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=4, num_key_value_heads=2,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=22,
        shared_expert_intermediate_size=30, norm_topk_prob=False, mlp_only_layers=[1])),
    "qwen3_moe_dense": (_tf("Qwen3MoeConfig"), _tf("Qwen3MoeForCausalLM"), dict(
        hidden_size=40, intermediate_size=46, num_attention_heads=6, num_key_value_heads=3,
        head_dim=12, num_experts=7, num_experts_per_tok=2, moe_intermediate_size=26,
        norm_topk_prob=True, decoder_sparse_step=2)),
    # ernie4_5_moe: interleaved RoPE, layer 0 dense (moe_layer_start_index 1), top 2 of 6
    # experts 18 wide by softmax + the choice bias, renormalized, two ungated shared experts
    # (36 wide), tied
    "ernie4_5_moe": (_tf("Ernie4_5_MoeConfig"), _tf("Ernie4_5_MoeForCausalLM"), dict(
        hidden_size=48, intermediate_size=44, num_attention_heads=6, num_key_value_heads=2,
        head_dim=8, moe_num_experts=6, moe_k=2, moe_intermediate_size=18,
        moe_num_shared_experts=2, tie_word_embeddings=True)),
    # glm4_moe: half of each head rotated, q / k / v biases, q / k norms, layer 0 dense; top 3
    # of 8 experts 20 wide by sigmoid + the choice bias from the best 2 of 4 groups,
    # renormalized, times 2.5; one ungated shared expert
    "glm4_moe": (_tf("Glm4MoeConfig"), _tf("Glm4MoeForCausalLM"), dict(
        hidden_size=48, intermediate_size=40, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=20,
        n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        first_k_dense_replace=1, attention_bias=True, use_qk_norm=True)),
    # dots1: Qwen3's attention (q / k norms), a window of 6 keys on layer 1, layer 0 dense; top
    # 2 of 6 experts 22 wide by sigmoid + the choice bias, not renormalized, times 1.5; two
    # ungated shared experts (44 wide)
    "dots1": (_tf("Dots1Config"), _tf("Dots1ForCausalLM"), dict(
        hidden_size=40, intermediate_size=50, num_attention_heads=4, num_key_value_heads=2,
        head_dim=10, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=22,
        n_shared_experts=2, routed_scaling_factor=1.5, norm_topk_prob=False,
        first_k_dense_replace=1, sliding_window=6, max_window_layers=1)),
    # granitemoe: Granite's four multipliers, top 2 of 5 experts 26 wide, tied
    "granitemoe": (_tf("GraniteMoeConfig"), _tf("GraniteMoeForCausalLM"), dict(
        hidden_size=48, intermediate_size=26, num_attention_heads=6, num_key_value_heads=2,
        num_local_experts=5, num_experts_per_tok=2, embedding_multiplier=3.0,
        residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.5,
        tie_word_embeddings=True)),
    # granitemoeshared: granitemoe's multipliers and top 2 of 5 experts 26 wide, plus a shared
    # expert 34 wide without a gate, untied
    "granitemoeshared": (_tf("GraniteMoeSharedConfig"), _tf("GraniteMoeSharedForCausalLM"), dict(
        hidden_size=48, intermediate_size=26, num_attention_heads=6, num_key_value_heads=2,
        num_local_experts=5, num_experts_per_tok=2, shared_intermediate_size=34,
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
        logits_scaling=2.5, tie_word_embeddings=False)),
    # flex_olmo: olmo2's blocks (norms after them, q / k norms over all heads) over top 2 of 5
    # experts 22 wide, renormalized
    "flex_olmo": (_tf("FlexOlmoConfig"), _tf("FlexOlmoForCausalLM"), dict(
        hidden_size=48, intermediate_size=22, num_attention_heads=6, num_key_value_heads=3,
        num_experts=5, num_experts_per_tok=2, norm_topk_prob=True, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)),
    # hunyuan_v1_moe: hunyuan_v1_dense's attention (q/k RMSNorm after RoPE, the NTK-alpha rope)
    # over top 2 of 5 experts 26 wide, renormalized, and an ungated shared MLP as wide; the
    # routed count as a per-layer list (the released config's form), untied
    "hunyuan_v1_moe": (_tf("HunYuanMoEV1Config"), _tf("HunYuanMoEV1ForCausalLM"), dict(
        hidden_size=48, intermediate_size=26, num_attention_heads=6, num_key_value_heads=2,
        head_dim=12, num_experts=5, moe_topk=[2, 2], tie_word_embeddings=False,
        rope_scaling={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # olmoe: q / k RMSNorms over all heads at once, top 3 of 6 experts 20 wide
    "olmoe": (_tf("OlmoeConfig"), _tf("OlmoeForCausalLM"), dict(
        hidden_size=48, intermediate_size=20, num_attention_heads=4, num_key_value_heads=2,
        num_experts=6, num_experts_per_tok=3, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)),
    # gpt_oss: attention sinks, q / k / v / o biases, head_dim 12 (H*hd != d), a window of 6 keys
    # on layer 0 (every other layer), YaRN; top 2 of 5 experts 26 wide with biases, the clamped
    # SwiGLU, the router's bias
    "gpt_oss": (_tf("GptOssConfig"), _tf("GptOssForCausalLM"), dict(
        hidden_size=40, intermediate_size=26, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, num_local_experts=5, num_experts_per_tok=2, sliding_window=6)),
}
# the mixtures of experts among them (the megakernel and the VM decode them with their expert
# tasks, but for gpt_oss: its attention sinks)
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "granitemoeshared", "gpt_oss",
       "flex_olmo", "hunyuan_v1_moe", "qwen2_moe_dense", "qwen3_moe_dense", "ernie4_5_moe",
       "glm4_moe", "dots1")
# a transformers without a family's classes (an older one, as on the GPU machine): its tests skip
MISSING = {k for k, v in FAMILIES.items() if None in v[:2]}
FAMILIES = {k: v for k, v in FAMILIES.items() if k not in MISSING}

# Phi-3's long-context rope on the tiny phi3 model: an original context of 16 positions, which
# the tests' runs cross
LONGROPE = dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.3, 2.1],
                              "long_factor": [1.5, 3.0, 7.0]},
                original_max_position_embeddings=16, max_position_embeddings=64)


@st.composite
def hf_shapes(draw, families=tuple(FAMILIES)):
    """(family, config overrides, vocab) of model shapes nobody tuned for: any GQA ratio, even
    head dims 2-24 (q_dim != d_model allowed), odd FFN and vocab sizes, tied or untied heads, a
    family's own traits (biases, q/k norm) kept and, Mistral and Phi-3, a random sliding window
    (Phi-3 and GLM: a random rotated part of the head too, odd dim counts among them).
    transformers asks hidden_size to be a multiple of the head count."""
    family = draw(st.sampled_from(families))
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 4))
    cfg = dict(num_key_value_heads=kv, num_attention_heads=heads,
               head_dim=2 * draw(st.integers(1, 12)), hidden_size=heads * draw(st.integers(2, 9)),
               intermediate_size=draw(st.integers(3, 97)), tie_word_embeddings=draw(st.booleans()))
    if family in ("mistral", "phi3", "mixtral", "gpt_oss"):
        cfg["sliding_window"] = draw(st.integers(2, 12))
    if family in MOE:  # any count of experts and of routed ones, their own width; or as many
        # experts as the released mixtures have (60-130: the routing's 128-wide block), 1-9 routed
        n = draw(st.one_of(st.integers(1, 9), st.integers(60, 130)))
        k = draw(st.integers(1, min(n, 9)))
        if family in ("glm4_moe", "dots1"):  # DeepSeek-V3's router: 1, 2 or 4 groups of 2+
            # experts, the best topk_group kept, k of their experts; the first 0-2 layers dense
            # (2: all of them, a dense model)
            groups = draw(st.sampled_from([1, 2, 4]))
            per = draw(st.one_of(st.integers(2, 9), st.integers(15, 32)))
            top = draw(st.integers(1, groups))
            n, k = groups * per, draw(st.integers(1, min(9, top * per)))
            cfg.update(n_group=groups, topk_group=top, n_shared_experts=draw(st.integers(1, 2)),
                       routed_scaling_factor=draw(st.sampled_from([1.0, 2.5])),
                       norm_topk_prob=draw(st.booleans()),
                       first_k_dense_replace=draw(st.integers(0, 2)),
                       moe_intermediate_size=draw(st.integers(3, 61)))
        if family == "ernie4_5_moe":
            cfg.update(moe_num_shared_experts=draw(st.integers(0, 2)),
                       moe_layer_start_index=draw(st.integers(0, 1)),
                       moe_intermediate_size=draw(st.integers(3, 61)))
        cfg.update({{"ernie4_5_moe": "moe_num_experts", "glm4_moe": "n_routed_experts",
                     "dots1": "n_routed_experts"}.get(family, "num_local_experts" if family in (
                         "mixtral", "granitemoe", "granitemoeshared", "gpt_oss") else
                         "num_experts"): n,
                    {"hunyuan_v1_moe": "moe_topk", "ernie4_5_moe": "moe_k"}.get(
                        family, "num_experts_per_tok"): k})
        if family in ("qwen2_moe", "qwen3_moe"):  # a dense layer among the expert ones, or none
            cfg.update(moe_intermediate_size=draw(st.integers(3, 61)),
                       norm_topk_prob=draw(st.booleans()),
                       mlp_only_layers=draw(st.sampled_from([[], [], [0], [1]])))
        if family == "flex_olmo":
            cfg["norm_topk_prob"] = draw(st.booleans())
        if family == "qwen2_moe":
            cfg["shared_expert_intermediate_size"] = draw(st.integers(3, 61))
        if family == "granitemoeshared":  # 0: no shared expert (HF's shared_mlp None)
            cfg["shared_intermediate_size"] = draw(st.integers(0, 61))
        if family == "olmoe":  # its q norm is hidden_size wide: H * hd == d
            cfg["hidden_size"] = heads * cfg["head_dim"]
    if family == "codegen":  # its q|k|v rows in 4 blocks: a multiple of 4 heads
        cfg["num_attention_heads"] = heads = 4 * draw(st.integers(1, 3))
    if family in ("gpt_neox", "gpt2", "gptj", "codegen", "opt", "biogpt", "gpt_bigcode_mha",
                  "falcon_seq", "bloom", "falcon_rw", "mpt", "gpt_neo", "xglm"):
        cfg["num_key_value_heads"] = heads  # multi-head only
    if family in ("gpt_bigcode", "falcon"):  # multi-query, one KV head
        cfg["num_key_value_heads"] = 1
    if family == "falcon_new":  # its KV heads' field
        cfg["num_kv_heads"] = kv
    if family in ("helium", "stablelm", "stablelm_qk", "phi", "gpt_neox", "gpt2", "gptj",
                  "codegen", "opt", "biogpt", "gpt_bigcode", "gpt_bigcode_mha", "falcon",
                  "falcon_new", "falcon_seq", "falcon_rw", "bloom", "mpt",
                  "gpt_neo", "xglm"):  # [hidden, hidden]
        # o_proj (Helium), head_dim always hidden / heads in the attention (StableLM, Phi,
        # GPT-NeoX, GPT-2, GPT-J, OPT, GPT-BigCode, Falcon): HF's needs H * hd == d
        cfg["hidden_size"] = heads * cfg["head_dim"]
    if family == "opt":  # its MLP's width field; embeddings as wide as the blocks
        cfg.update(ffn_dim=cfg["intermediate_size"], word_embed_proj_dim=cfg["hidden_size"])
    if family == "xglm":  # its MLP's width field; its sinusoids need 4 dims (HF divides by
        # d // 2 - 1)
        cfg["ffn_dim"] = cfg["intermediate_size"]
        if cfg["hidden_size"] < 4:
            cfg["head_dim"] *= 2
            cfg["hidden_size"] *= 2
    if family in ("gpt_bigcode", "gpt_bigcode_mha"):
        cfg["n_inner"] = cfg["intermediate_size"]
    if family in ("bloom", "mpt"):  # head_dim, the KV heads and the MLP's width (4 x) derived
        del cfg["head_dim"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    if family == "gpt_neo":  # head_dim and the KV heads derived (the config would keep them as
        # fields nothing reads); a window of any size on the local layer
        del cfg["head_dim"], cfg["num_key_value_heads"]
        cfg["window_size"] = draw(st.integers(1, 12))
    if family.startswith("falcon"):  # its own fields: head_dim and the KV heads are derived
        cfg["ffn_hidden_size"] = cfg["intermediate_size"]
        del cfg["head_dim"], cfg["num_key_value_heads"]
    if family == "biogpt":  # OPT's LayerNorm eps, not its own 1e-12: over a row of a few dims
        # whose values nearly agree, 1e-12 leaves the LayerNorm the normalized fp32 noise of the
        # packing's centered rows (relative to the row, not its deviation) -- hidden 2: 5e-2
        # from fp64, hidden 4: 1.4e-5; the real model's 1024 dims keep its rows' deviations
        # many ulps wide (the family test runs 1e-12 at 48 dims)
        cfg["layer_norm_eps"] = 1e-5
    if family.startswith("hunyuan"):  # its NTK-alpha base divides by head_dim - 2 (HF and ours:
        cfg["head_dim"] = max(4, cfg["head_dim"])  # head_dim 2 raises UnsupportedModelError)
    if family in ("stablelm", "stablelm_qk", "phi", "gpt_neox", "nemotron"):  # HF's fail on an
        # odd rotated part: an even one (GPT-NeoX's config takes it as rotary_pct)
        cfg["rotary_pct" if family == "gpt_neox" else "partial_rotary_factor"] = \
            2 * draw(st.integers(1, cfg["head_dim"] // 2)) / cfg["head_dim"]
    if family in ("gptj", "codegen"):  # a count of dims, even
        cfg["rotary_dim"] = 2 * draw(st.integers(1, cfg["head_dim"] // 2))
    if family == "qwen3_5_text":  # a quarter of the head rotated: 1+ dims; the Gated DeltaNet's
        # own heads (any GQA ratio), dims and convolution, before or after the attention layer
        cfg["head_dim"] = max(4, cfg["head_dim"])
        nk = draw(st.integers(1, 3))
        cfg.update(linear_num_key_heads=nk, linear_num_value_heads=nk * draw(st.integers(1, 3)),
                   linear_key_head_dim=draw(st.integers(1, 17)),
                   linear_value_head_dim=draw(st.integers(1, 17)),
                   linear_conv_kernel_dim=draw(st.integers(2, 4)),
                   layer_types=draw(st.sampled_from([["linear_attention", "full_attention"],
                                                     ["full_attention", "linear_attention"]])))
    if family == "glm4_moe":  # its q / k norms and q / k / v biases either way
        cfg.update(use_qk_norm=draw(st.booleans()), attention_bias=draw(st.booleans()))
    if family in ("phi3", "glm", "glm4", "glm4_moe"):  # rotate any count of the head's dims,
        # odd ones too (HF then rotates one more; the + 0.5: int() of the product cannot round
        # below rot)
        rot = draw(st.integers(1, cfg["head_dim"]))
        cfg["partial_rotary_factor"] = (rot + 0.5) / cfg["head_dim"] if rot < cfg["head_dim"] \
            else 1.0
    return family, cfg, draw(st.integers(5, 211))


def _qwen3_vl(moe: str, family: str, mrope_section: list):
    """A Qwen3-VL (moe "") or Qwen3-VL-MoE ("Moe") entry of VLMS around tiny_model(family):
    one vision block with one deepstack merger, the interleaved multimodal RoPE over the text
    head's frequencies in mrope_section."""
    return (f"Qwen3VL{moe}Config", f"Qwen3VL{moe}ForConditionalGeneration", family, dict(
        depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=40,
        deepstack_visual_indexes=[0], patch_size=16),
        dict(video_token_id=99, vision_start_token_id=98, text=dict(
            model_type=f"qwen3_vl{'_moe' if moe else ''}_text", rope_parameters={
                "rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope_section,
                "mrope_interleaved": True})))


# vision-language models whose language model decodes alone (spec.TEXT_OF): (config class, model
# class, text family of FAMILIES, vision config[, the wrapper config's own fields]) -- Mistral
# Small 3.x, LLaVA, Gemma 3; a one-layer vision tower that nothing here reads
VLMS = {
    "mistral3": ("Mistral3Config", "Mistral3ForConditionalGeneration", "mistral", dict(
        model_type="pixtral", hidden_size=32, intermediate_size=40, num_hidden_layers=1,
        num_attention_heads=2, head_dim=16, image_size=32, patch_size=16)),
    "llava": ("LlavaConfig", "LlavaForConditionalGeneration", "llama", dict(
        model_type="clip_vision_model", hidden_size=32, intermediate_size=40,
        num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16)),
    "llava_onevision": ("LlavaOnevisionConfig", "LlavaOnevisionForConditionalGeneration", "qwen2",
                        dict(model_type="siglip_vision_model", hidden_size=32,
                             intermediate_size=40, num_hidden_layers=1, num_attention_heads=2,
                             image_size=32, patch_size=16)),
    "gemma3": ("Gemma3Config", "Gemma3ForConditionalGeneration", "gemma3_text", dict(
        model_type="siglip_vision_model", hidden_size=32, intermediate_size=40,
        num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16),
        dict(mm_tokens_per_image=4, boi_token_index=97, eoi_token_index=98)),
    # Qwen2.5-VL: its text config's own model_type and multimodal RoPE (3 axes of 1 / 2 / 2 of the
    # head's 5 frequencies: one position on all of them for text)
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", "qwen2", dict(
        depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=60,
        fullatt_block_indexes=[0], patch_size=14),
        dict(video_token_id=99, vision_start_token_id=98, text=dict(
            model_type="qwen2_5_vl_text", rope_parameters={
                "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 2, 2]}))),
    # Idefics3 / SmolVLM: Llama inside, under model.text_model
    **{kind: (cfg, model, "llama", dict(hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                                        num_attention_heads=2, image_size=32, patch_size=16))
       for kind, cfg, model in (
           ("idefics3", "Idefics3Config", "Idefics3ForConditionalGeneration"),
           ("smolvlm", "SmolVLMConfig", "SmolVLMForConditionalGeneration"))},
    # InternVL (HF's format, InternVL3-*-hf): Qwen2 inside
    "internvl": ("InternVLConfig", "InternVLForConditionalGeneration", "qwen2", dict(
        hidden_size=32, intermediate_size=40, num_hidden_layers=1, num_attention_heads=2,
        image_size=[28, 28], patch_size=[14, 14])),
    # GLM-4.1V: GLM-4-0414 inside (its text config's own model_type, q / k / v biases, 6 of each
    # head's 8 dims rotated on interleaved pairs by the multimodal RoPE: 3 axes of 1 / 1 / 1 of
    # the 3 rotated frequencies)
    "glm4v": ("Glm4vConfig", "Glm4vForConditionalGeneration", "glm4", dict(
        depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=48,
        patch_size=14),
        dict(video_token_id=99, image_start_token_id=97, image_end_token_id=98,
             tiny=dict(head_dim=8), text=dict(  # its attention's head_dim: d_model / heads
            model_type="glm4v_text", rope_parameters={
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                "mrope_section": [1, 1, 1]}))),
    # GLM-4.5V: GLM-4.5 inside (glm4_moe without q / k norms: a dense layer, DeepSeek-V3's
    # router), its multimodal RoPE on rotate-half pairs of half of each head (3 axes of 2 / 1 / 1
    # of the 4 rotated frequencies)
    "glm4v_moe": ("Glm4vMoeConfig", "Glm4vMoeForConditionalGeneration", "glm4_moe", dict(
        depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=48,
        patch_size=14),
        dict(video_token_id=99, image_start_token_id=97, image_end_token_id=98,
             tiny=dict(use_qk_norm=False), text=dict(
            model_type="glm4v_moe_text", rope_parameters={
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "mrope_section": [2, 1, 1]}))),
    # Qwen3-VL: Qwen3 inside (q / k norms), its interleaved multimodal RoPE over the head's 7
    # frequencies, one deepstack merger (image tokens only)
    "qwen3_vl": _qwen3_vl("", "qwen3", [3, 2, 2]),
    # Qwen3-VL-MoE: Qwen3-MoE inside (top 2 of 7 experts 26 wide, head_dim 12: the interleaved
    # multimodal RoPE over its 6 frequencies), the routed weights always renormalized
    "qwen3_vl_moe": _qwen3_vl("Moe", "qwen3_moe", [2, 2, 2]),
    # Qwen3.5 (its released checkpoints' form): qwen3_5_text inside, the interleaved multimodal
    # RoPE over the 2 rotated frequencies of its heads (3 of 12 dims: HF rotates 4)
    "qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", "qwen3_5_text", dict(
        depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=40,
        patch_size=16),
        dict(video_token_id=99, vision_start_token_id=98, text=dict(rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [1, 1, 0], "mrope_interleaved": True}))),
}


def tiny_vlm(kind: str, seed: int = 0, **top):
    """A vision-language model around tiny_model(its text family)'s configuration and weights
    (top: the wrapper config's own fields, tie_word_embeddings)."""
    cfg_name, model_name, family, vision, *own = VLMS[kind]
    if _tf(cfg_name) is None or family in MISSING:
        pytest.skip(f"transformers {tf.__version__} has no {cfg_name}")
    own = dict((own or [{}])[0])
    if family in MOE:  # HF's loop over the experts, as tiny_model's
        top.setdefault("experts_implementation", "eager")
    text = tiny_model(family, seed=seed, **own.pop("tiny", {}))  # the text model's own sizes
    text_cfg = dict(text.config.to_dict(), **own.pop("text", {}))  # the text config's own fields
    cfg = _tf(cfg_name)(text_config=text_cfg, vision_config=vision,
                        image_token_index=text.config.vocab_size - 1, **own, **top)
    if hasattr(cfg, "image_token_id"):  # the name Qwen2-VL reads
        cfg.image_token_id = text.config.vocab_size - 1
    model = _tf(model_name)(cfg).eval()
    lm = getattr(model.model, "language_model", None) or model.model.text_model
    with torch.no_grad():
        for name, p in text.model.named_parameters():
            lm.get_parameter(name).copy_(p)
        if model.lm_head.weight is not lm.embed_tokens.weight:
            model.lm_head.weight.copy_(text.lm_head.weight)
    return model


def tiny_model(family: str, vocab: int = 101, layers: int = 2, seed: int = 0,
               dtype=torch.float32, **overrides):
    if family in MISSING:
        pytest.skip(f"transformers {tf.__version__} has no {family} model")
    cfg_cls, model_cls, kw = FAMILIES[family]
    kw = dict(kw, **overrides)
    if family in MOE:  # HF's loop over the experts (its grouped_mm wants 16-byte row strides)
        kw.setdefault("experts_implementation", "eager")
    kw.setdefault("tie_word_embeddings", False)
    kw.setdefault("max_position_embeddings", 512)
    cfg = cfg_cls(vocab_size=vocab, num_hidden_layers=layers, rms_norm_eps=1e-5, **kw)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():  # HF's init is tiny (std 0.02): use weights that exercise the math
        for name, p in model.named_parameters():
            if "norm" in name and not name.endswith("bias"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        for name, b in model.named_buffers():  # a router's choice bias (DeepSeek-V3's buffer)
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.5 * torch.randn_like(b))
    return model.to(dtype)
