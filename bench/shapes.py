"""Model shapes the benchmarks use (random bf16 weights): sizes of the published configs."""
import math

import transformers as tf


def llama3(hidden, ffn, layers, heads, tied, rope_factor, head_dim=None):
    """A Llama-3.x config (8 KV heads, 128K vocabulary, Llama-3 RoPE scaling of rope_factor)."""
    return tf.LlamaConfig(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=8, vocab_size=128256,
        tie_word_embeddings=tied, head_dim=head_dim or hidden // heads,
        rope_scaling={"rope_type": "llama3", "factor": rope_factor, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5)


def qwen2(hidden, ffn, layers, heads, kv_heads, vocab, tied):
    """A Qwen2.5 config (QKV bias, RoPE base 1e6, 32K positions)."""
    return tf.Qwen2Config(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
        tie_word_embeddings=tied, rope_theta=1000000.0, max_position_embeddings=32768,
        rms_norm_eps=1e-6)


def qwen3(hidden, ffn, layers, heads, tied):
    """A Qwen3 config (q/k norm, 8 KV heads of 128, 152K vocabulary, RoPE base 1e6)."""
    return tf.Qwen3Config(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        tie_word_embeddings=tied, rope_theta=1000000.0, max_position_embeddings=40960,
        rms_norm_eps=1e-6)


def gemma(hidden, ffn, layers, heads, kv_heads):
    """A Gemma (1) config (head_dim 256, a tied 256K vocabulary, RoPE base 1e4)."""
    return tf.GemmaConfig(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=256, vocab_size=256000,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=8192,
        hidden_act="gelu_pytorch_tanh", pad_token_id=0, eos_token_id=1, bos_token_id=2)


def gemma2(hidden, ffn, layers, heads, kv_heads):
    """A Gemma 2 config (norms after the blocks too, soft-capped attention scores (50) and
    logits (30), head_dim 256, sliding-window (4096) and full layers in turn, a tied 256K
    vocabulary)."""
    return tf.Gemma2Config(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=256,
        vocab_size=256000, sliding_window=4096, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True,
        rms_norm_eps=1e-6, max_position_embeddings=8192, attn_implementation="eager",
        pad_token_id=0, eos_token_id=1, bos_token_id=2)


def gemma3(hidden, ffn, layers, heads, kv_heads, window, **kw):
    """A Gemma 3 text config (norms after the blocks too, q / k norms, head_dim 256, five
    sliding-window layers (RoPE base 1e4) to one full (1e6), a tied 262K vocabulary); kw: the
    full layers' rope scaling."""
    return tf.Gemma3TextConfig(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=256,
        vocab_size=262144, sliding_window=window, query_pre_attn_scalar=256,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=32768,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, **kw)


def phi3(hidden, ffn, layers, heads, kv_heads, vocab, tied, head_dim, **kw):
    """A Phi-3 config (fused qkv_proj / gate_up_proj, RoPE base 1e4); kw: its rope, window."""
    return tf.Phi3Config(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        vocab_size=vocab, tie_word_embeddings=tied, rms_norm_eps=1e-5,
        pad_token_id=vocab - 1, eos_token_id=vocab - 2, bos_token_id=1, **kw)


def longrope(pairs: int, partial: float, orig: int = 4096) -> dict:
    """Phi-3.5 / Phi-4-mini's rope (transformers 5's rope_parameters): per-pair short factors
    near 1, long ones rising to ~50 (synthetic values of the published checkpoints' scale), an
    original context of orig positions."""
    return {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": partial,
            "original_max_position_embeddings": orig,
            "short_factor": [1.0 + 0.02 * i for i in range(pairs)],
            "long_factor": [1.0 + 49.0 * (i / pairs) ** 2 for i in range(pairs)]}


SHAPES = {
    "1b": ("Llama-3.2-1B", lambda: llama3(2048, 8192, 16, 32, True, 32.0, head_dim=64)),
    "8b": ("Llama-3.1-8B", lambda: llama3(4096, 14336, 32, 32, False, 8.0)),
    # the quickstart's model (python -m fastdecode generate --model smollm2): 9 heads, 3 KV heads
    "smollm2": ("SmolLM2-135M", lambda: tf.LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
        max_position_embeddings=8192, rms_norm_eps=1e-5)),
    "qwen3-8b": ("Qwen3-8B", lambda: qwen3(4096, 12288, 36, 32, False)),
    # shapes first met by tests/test_published_shapes.py (GPU) and compile_check: a d_model between
    # the stages rule's sizes; one above max_k with biased QKV; GQA 7:1 with d_model and FFN
    # sizes that are no power of two (3584 = 7 x 512, 18944 = 37 x 512; 896, 4864); a sliding
    # window with a 32K vocabulary
    "3b": ("Llama-3.2-3B", lambda: llama3(3072, 8192, 28, 24, True, 32.0)),
    "qwen2.5-0.5b": ("Qwen2.5-0.5B", lambda: qwen2(896, 4864, 24, 14, 2, 151936, True)),
    "qwen2.5-7b": ("Qwen2.5-7B", lambda: qwen2(3584, 18944, 28, 28, 4, 152064, False)),
    # q/k norm with H x head_dim != d_model (4096 vs 2560, 2048 vs 1024) and a tied head
    "qwen3-4b": ("Qwen3-4B", lambda: qwen3(2560, 9728, 36, 32, True)),
    "qwen3-0.6b": ("Qwen3-0.6B", lambda: qwen3(1024, 3072, 28, 16, True)),
    "mistral-7b": ("Mistral-7B-v0.1", lambda: tf.MistralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32000, sliding_window=4096, tie_word_embeddings=False,
        rope_theta=10000.0, max_position_embeddings=32768, rms_norm_eps=1e-5)),
    "qwen2.5-14b": ("Qwen2.5-14B", lambda: qwen2(5120, 13824, 48, 40, 8, 152064, False)),
    # an explicit head_dim with H x head_dim < d_model (4096 vs 5120: o_proj's K below d_model)
    # and a 131K vocabulary
    "mistral-nemo": ("Mistral-Nemo-12B", lambda: tf.MistralConfig(
        hidden_size=5120, intermediate_size=14336, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=131072, sliding_window=None,
        tie_word_embeddings=False, rope_theta=1000000.0, max_position_embeddings=131072,
        rms_norm_eps=1e-5)),
    # q/k norm with q_dim 8192 over a d_model of 5120 (o_proj's K 8192 past the stream's max K),
    # GQA 8:1
    "qwen3-32b": ("Qwen3-32B", lambda: qwen3(5120, 25600, 64, 64, False)),
    # Phi-3: MHA with head_dim 96 (48 rotation pairs, no power of two), a 2047-key window, 32K
    # vocabulary; Phi-4-mini: GQA 3:1 with 96 of each head's 128 dims rotated (partial rotary),
    # longrope past 4096 positions, a tied 200K vocabulary
    "phi3-mini": ("Phi-3-mini-4k", lambda: phi3(3072, 8192, 32, 32, 32, 32064, False, 96,
                                                sliding_window=2047, max_position_embeddings=4096,
                                                rope_parameters={"rope_type": "default",
                                                                 "rope_theta": 10000.0})),
    "phi4-mini": ("Phi-4-mini", lambda: phi3(3072, 8192, 32, 24, 8, 200064, True, 128,
                                             rope_parameters=longrope(48, 0.75),
                                             original_max_position_embeddings=4096,
                                             max_position_embeddings=131072)),
    # Granite-3.x-8B: Llama with its four multipliers folded into the weights, a 49K vocabulary
    # (odd: 49155) tied to a scaled lm_head of its own
    "granite-8b": ("Granite-3.1-8B", lambda: tf.GraniteConfig(
        hidden_size=4096, intermediate_size=12800, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=49155, tie_word_embeddings=True,
        rope_theta=10000000.0, max_position_embeddings=131072, rms_norm_eps=1e-5,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
        logits_scaling=16.0)),
    # Seed-OSS-36B: GQA 10:1 (80 heads of 128 over 8 KV heads), q_dim 10240 on a d_model of 5120,
    # q/k/v biases without an o_proj one
    "seed-oss-36b": ("Seed-OSS-36B", lambda: tf.SeedOssConfig(
        hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=80,
        num_key_value_heads=8, head_dim=128, vocab_size=155136, tie_word_embeddings=False,
        attention_bias=True, attention_out_bias=False, mlp_bias=False, rms_norm_eps=1e-6,
        max_position_embeddings=524288, rope_parameters={"rope_type": "default",
                                                         "rope_theta": 10000000.0})),
    # GLM-4-9B: GQA 16:1 (32 heads over 2 KV heads), half of each head rotated on interleaved
    # pairs, q / k / v biases, gate|up fused in the checkpoint, a 151K vocabulary
    "glm4-9b": ("GLM-4-9B", lambda: tf.GlmConfig(
        hidden_size=4096, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=2, head_dim=128, vocab_size=151552, tie_word_embeddings=False,
        attention_bias=True, rms_norm_eps=1.5625e-07, max_position_embeddings=131072,
        pad_token_id=151329, eos_token_id=[151329, 151336, 151338])),
    # SmolLM3-3B: every fourth layer without RoPE (no_rope_layers), GQA 4:1, a tied 128K vocabulary
    "smollm3-3b": ("SmolLM3-3B", lambda: tf.SmolLM3Config(
        hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True, rms_norm_eps=1e-6,
        max_position_embeddings=65536, no_rope_layer_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0})),
    # Gemma-2B / 7B: (1 + w) RMSNorms, sqrt(d)-scaled embeddings, the tanh GELU gate, head_dim
    # 256 (2B: MQA, 8 heads over 1 KV head; 7B: 16 heads, q_dim 4096 on a d_model of 3072), a
    # tied 256K vocabulary
    "gemma-2b": ("Gemma-2B", lambda: gemma(2048, 16384, 18, 8, 1)),
    "gemma-7b": ("Gemma-7B", lambda: gemma(3072, 24576, 28, 16, 16)),
    # Gemma 2 2B / 9B: norms after the attention and the MLP, soft-capped attention and logits
    # (2B: GQA 2:1, 8 heads of 256 on a d_model of 2304; 9B: 16 heads on 3584)
    "gemma2-2b": ("Gemma-2-2B", lambda: gemma2(2304, 9216, 26, 8, 4)),
    "gemma2-9b": ("Gemma-2-9B", lambda: gemma2(3584, 14336, 42, 16, 8)),
    # Gemma 3 1B / 4B (the 4B's text model): norms after the attention and the MLP, (1 + w) q / k
    # norms, sliding-window layers with a RoPE of their own (1B: MQA, 4 heads of 256 on a
    # d_model of 1152; 4B: GQA 2:1, the full layers' linear rope scaling 8)
    "gemma3-1b": ("Gemma-3-1B", lambda: gemma3(1152, 6912, 26, 4, 1, 512)),
    "gemma3-4b": ("Gemma-3-4B", lambda: gemma3(2560, 10240, 34, 8, 4, 1024, rope_scaling={
        "rope_type": "linear", "factor": 8.0})),
    # OLMo-2-0425-1B: norms after the blocks and none before, q / k norms over all 16 heads of 128
    # at once (MHA), a 100K vocabulary
    "olmo2-1b": ("OLMo-2-1B", lambda: tf.Olmo2Config(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=100352, tie_word_embeddings=False, rms_norm_eps=1e-6,
        max_position_embeddings=4096, rope_parameters={"rope_type": "default",
                                                       "rope_theta": 500000.0},
        pad_token_id=100277, eos_token_id=100257, bos_token_id=None)),
    # Arcee: transformers' ArceeConfig defaults ("AFM-4.5B-Base style": 32 layers of 32 heads of
    # 80 on 2560, MHA, an MLP of 18432 without a gate, relu^2; the released checkpoint's own
    # sizes are not checked here), a 128K vocabulary
    "arcee-cfg": ("ArceeConfig()", lambda: tf.ArceeConfig(vocab_size=128256)),
    # nanochat d32 (karpathy/nanochat's depth 32: model dim 64 x depth, heads of 128, MHA, an MLP
    # of 4 x without a gate, relu^2, a 64K vocabulary, untied, logits soft-capped at 15)
    "nanochat-d32": ("nanochat-d32", lambda: tf.NanoChatConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=65536, max_position_embeddings=2048)),
    # LayerNorm families (their residual stream kept centered: ModelSpec.layer_norm). OLMo-1B-hf
    # (16 layers of 16 heads of 128, MLP 8192, tied), stablelm-2-1_6b (24 layers of 32 heads of
    # 64, a quarter rotated, q / k / v biases, MLP 5632, untied) as their config.json files read;
    # StarCoder2: Starcoder2Config's defaults (starcoder2-3b's sizes: 30 layers of 24 heads of 128,
    # GQA 12:1, MLP 12288 without a gate, biases everywhere, tied; the window of 4096 keys)
    "olmo-1b": ("OLMo-1B", lambda: tf.OlmoConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=50304, tie_word_embeddings=True,
        max_position_embeddings=2048, pad_token_id=1, eos_token_id=50279)),
    "stablelm2-1.6b": ("StableLM-2-1.6B", lambda: tf.StableLmConfig(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=100352, use_qkv_bias=True, partial_rotary_factor=0.25,
        tie_word_embeddings=False, max_position_embeddings=4096, bos_token_id=100257,
        eos_token_id=100257)),
    "starcoder2-cfg": ("Starcoder2Config()", lambda: tf.Starcoder2Config(sliding_window=4096)),
    # per-head q / k LayerNorms (ModelSpec.qk_layer_norm), as the config.json files read:
    # stablelm-2-12b (40 layers of 32 heads of 160, GQA 4:1, a quarter of each head rotated,
    # parallel blocks, MLP 13824, untied) and c4ai-command-r-plus (Cohere: 64 layers of 96 heads
    # of 128 on 12288, GQA 12:1, MLP 33792, a tied 256K vocabulary, logits times 0.833)
    # Apertus-8B (32 layers of 32 heads of 128 on 4096, GQA 4:1, an MLP of 21504 without a gate,
    # xIELU; ApertusConfig's llama3 RoPE, theta 12M, and 131072-token vocabulary, untied)
    # Nemotron-Mini-4B-Instruct / Minitron-4B (its config.json): LayerNorms with biases whose
    # weights scale by (1 + w), half of each head rotated, an MLP of 9216 without a gate (relu^2),
    # 32 layers of 24 heads of 128, GQA 3:1, an untied 256K vocabulary
    "nemotron-mini-4b": ("Nemotron-Mini-4B", lambda: tf.NemotronConfig(
        hidden_size=3072, intermediate_size=9216, num_hidden_layers=32, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, vocab_size=256000, norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
        max_position_embeddings=4096, bos_token_id=2, eos_token_id=3)),
    "apertus-8b": ("Apertus-8B", lambda: tf.ApertusConfig(
        hidden_size=4096, intermediate_size=21504, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=65536)),
    "stablelm2-12b": ("StableLM-2-12B", lambda: tf.StableLmConfig(
        hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=100352, partial_rotary_factor=0.25, qk_layernorm=True,
        use_parallel_residual=True, use_qkv_bias=False, tie_word_embeddings=False,
        max_position_embeddings=4096, bos_token_id=100257, eos_token_id=100257)),
    "command-r-plus": ("Command R+", lambda: tf.CohereConfig(
        hidden_size=12288, intermediate_size=33792, num_hidden_layers=64, num_attention_heads=96,
        num_key_value_heads=8, vocab_size=256000, logit_scale=0.8333333333333334,
        use_qk_norm=True, rope_theta=75000000.0, layer_norm_eps=1e-5,
        max_position_embeddings=131072, tie_word_embeddings=True, pad_token_id=0,
        bos_token_id=5, eos_token_id=255001)),
    # gpt2 (124M: learned positions over 1024, 12 layers of 12 heads of 64, MLP 3072 without a
    # gate, biases everywhere, tied, a 50257 vocabulary) and gpt2-xl (1.5B: 48 layers of 25
    # heads of 64 on 1600), GPT2Config's fields as their config.json files read
    "gpt2": ("GPT-2", lambda: tf.GPT2Config()),
    "gpt2-xl": ("GPT-2 XL", lambda: tf.GPT2Config(n_embd=1600, n_layer=48, n_head=25)),
    # GPT-Neo 1.3B (its config.json: 24 layers of 16 heads of 128 on 2048, global and local layers
    # in turn, the local ones' window 256 keys, an MLP of 8192, the tanh GELU, a tied 50257
    # vocabulary, unscaled attention)
    "gpt-neo-1.3b": ("GPT-Neo-1.3B", lambda: tf.GPTNeoConfig(
        hidden_size=2048, num_layers=24, num_heads=16, attention_types=[[["global", "local"], 12]],
        window_size=256, vocab_size=50257, max_position_embeddings=2048)),
    # facebook/xglm-564M (XGLMConfig's defaults: 24 layers of 16 heads of 64, MLP 4096, the erf
    # GELU, sinusoidal positions, scaled embeddings, a tied 256008 vocabulary)
    "xglm-564m": ("XGLM-564M", lambda: tf.XGLMConfig()),
    # GPT-J-6B (GPTJConfig's defaults: 28 layers of 16 heads of 256, 64 dims of each rotated,
    # an MLP of 16384, a 50400 vocabulary, untied)
    "gptj-6b": ("GPT-J-6B", lambda: tf.GPTJConfig()),
    # microsoft/biogpt (BioGptConfig's defaults: 24 layers of 16 heads of 64, MLP 4096, the erf
    # GELU, a tied 42384 vocabulary, learned positions over 1024, scaled embeddings)
    "biogpt": ("BioGPT", lambda: tf.BioGptConfig()),
    # codegen-350M-mono (20 layers of 16 heads of 64, 32 dims of each rotated, q|v|k in 4 blocks,
    # an MLP of 4096, a 51200 vocabulary, untied), its config.json's fields
    "codegen-350m": ("CodeGen-350M", lambda: tf.CodeGenConfig(
        n_embd=1024, n_layer=20, n_head=16, rotary_dim=32, n_positions=2048, n_ctx=2048,
        vocab_size=51200, tie_word_embeddings=False, bos_token_id=1, eos_token_id=50256)),
    # pythia-1b (GPT-NeoX: parallel blocks, 16 layers of 8 heads of 256, a quarter rotated, an
    # MLP of 8192 without a gate, the erf GELU, biases everywhere, untied), as its config.json
    "pythia-1b": ("Pythia-1B", lambda: tf.GPTNeoXConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=8,
        vocab_size=50304, rotary_pct=0.25, max_position_embeddings=2048,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)),
    # phi-2 (parallel blocks on one LayerNorm: 32 layers of 32 heads of 80, 40% of each rotated,
    # an MLP of 10240 without a gate, biases everywhere, untied), as its config.json reads
    "phi-2": ("Phi-2", lambda: tf.PhiConfig(
        hidden_size=2560, intermediate_size=10240, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=51200, partial_rotary_factor=0.4,
        tie_word_embeddings=False, max_position_embeddings=2048, bos_token_id=50256,
        eos_token_id=50256)),
    # falcon-7b (71 heads of 64 on 4544, multi-query, parallel blocks on one LayerNorm, an MLP of
    # 18176 without a gate, the erf GELU, no biases, tied, a 65024 vocabulary): FalconConfig's
    # defaults, as its config.json
    "falcon-7b": ("Falcon-7B", lambda: tf.FalconConfig()),
    # falcon-rw-1b (ALiBi, 24 sequential layers of 32 heads of 64 on 2048, multi-head, biases,
    # tied, a 50304 vocabulary), as its config.json reads
    "falcon-rw-1b": ("Falcon-RW-1B", lambda: tf.FalconConfig(
        hidden_size=2048, num_attention_heads=32, num_hidden_layers=24, vocab_size=50304,
        alibi=True, multi_query=False, parallel_attn=False, bias=True, bos_token_id=1,
        eos_token_id=2)),
    # bloom-560m / bloom-7b1 (ALiBi, the embedding LayerNorm, q|k|v per head, an MLP of 4 x
    # hidden without a gate, the tanh GELU, biases everywhere, tied, a 250880 vocabulary), as
    # their config.json files read
    "bloom-560m": ("BLOOM-560M", lambda: tf.BloomConfig(
        hidden_size=1024, n_head=16, n_layer=24, vocab_size=250880, pad_token_id=3,
        bos_token_id=1, eos_token_id=2)),
    "bloom-7b1": ("BLOOM-7B1", lambda: tf.BloomConfig(
        hidden_size=4096, n_head=32, n_layer=30, vocab_size=250880, pad_token_id=3,
        bos_token_id=1, eos_token_id=2)),
    # mpt-7b (ALiBi with MPT's slopes, 32 layers of 32 heads of 128, LayerNorms without biases,
    # q|k|v concatenated, an MLP of 16384 without a gate, the erf GELU, no biases, tied, a 50432
    # vocabulary), as its config.json reads
    "mpt-7b": ("MPT-7B", lambda: tf.MptConfig(
        d_model=4096, n_heads=32, n_layers=32, vocab_size=50432, max_seq_len=2048)),
    # opt-1.3b (learned positions at row p + 2, 24 layers of 32 heads of 64, an MLP of 8192
    # without a gate, ReLU, biases everywhere, tied), as its config.json reads
    "opt-1.3b": ("OPT-1.3B", lambda: tf.OPTConfig(
        hidden_size=2048, ffn_dim=8192, num_hidden_layers=24, num_attention_heads=32,
        word_embed_proj_dim=2048, vocab_size=50272, max_position_embeddings=2048,
        pad_token_id=1, bos_token_id=2, eos_token_id=2)),
    # starcoderbase-1b (GPT-BigCode: multi-query, 24 layers of 16 heads of 128, an MLP of 8192
    # without a gate, the tanh GELU, learned positions over 8192, biases everywhere, tied)
    "starcoderbase-1b": ("StarCoderBase-1B", lambda: tf.GPTBigCodeConfig(
        n_embd=2048, n_head=16, n_layer=24, n_inner=8192, n_positions=8192, vocab_size=49152,
        multi_query=True, activation_function="gelu_pytorch_tanh", bos_token_id=0,
        eos_token_id=0)),
    # GLM-4-9B-0414: GLM-4-9B's layout with norms after the attention and the MLP
    "glm4-9b-0414": ("GLM-4-9B-0414", lambda: tf.Glm4Config(
        hidden_size=4096, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=2, head_dim=128, vocab_size=151552, tie_word_embeddings=False,
        attention_bias=True, rms_norm_eps=1e-5, max_position_embeddings=32768,
        pad_token_id=151329, eos_token_id=[151329, 151336, 151338])),
    # mixtures of experts (ops mode): OLMoE-1B-7B-0924 (16 layers of 16 heads of 128, q / k
    # norms over all heads, 64 experts of 1024 of which 8 a token, not renormalized, a 50304
    # vocabulary, untied: 6.9B parameters, 1.3B read a token) and Qwen1.5-MoE-A2.7B
    # (Qwen2MoeConfig's defaults: 24 layers of 16 heads of 128, q/k/v biases, 60 experts of 1408
    # of which 4, a shared expert of 5632 under its sigmoid gate, a 151936 vocabulary: 14.3B,
    # 2.7B a token), as their config.json files read
    "olmoe-1b-7b": ("OLMoE-1B-7B", lambda: tf.OlmoeConfig(
        intermediate_size=1024, pad_token_id=1, eos_token_id=50279)),
    "qwen1.5-moe": ("Qwen1.5-MoE-A2.7B", lambda: tf.Qwen2MoeConfig()),
    # Qwen3-30B-A3B (48 layers of 32 heads of 128 on a d_model of 2048, GQA 8:1, q / k norms;
    # 128 experts of 768 of which 8, renormalized; a 151936 vocabulary, untied: 30.5B
    # parameters, 3.35B a token with the embedding row), as its config.json reads
    "qwen3-30b-a3b": ("Qwen3-30B-A3B", lambda: tf.Qwen3MoeConfig(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        moe_intermediate_size=768, vocab_size=151936, tie_word_embeddings=False,
        norm_topk_prob=True, rope_theta=1e6, max_position_embeddings=40960,
        bos_token_id=151643, eos_token_id=151645)),
    # ERNIE-4.5-21B-A3B (28 layers of 20 heads of 128 on a d_model of 2560, GQA 5:1, interleaved
    # RoPE; layer 0 a dense MLP of 12288, the others top 6 of 64 experts of 1536 by softmax + a
    # choice bias, renormalized, plus two shared experts; a 103424 vocabulary, tied: 21.8B
    # parameters, 3.35B a token with the tied table read once as the lm_head), after its
    # published config.json
    "ernie-4.5-21b-a3b": ("ERNIE-4.5-21B-A3B", lambda: tf.Ernie4_5_MoeConfig(
        hidden_size=2560, intermediate_size=12288, num_hidden_layers=28, num_attention_heads=20,
        num_key_value_heads=4, head_dim=128, moe_num_experts=64, moe_k=6,
        moe_intermediate_size=1536, moe_num_shared_experts=2, moe_layer_start_index=1,
        vocab_size=103424, tie_word_embeddings=True, rope_theta=500000.0,
        max_position_embeddings=131072, bos_token_id=1, eos_token_id=2)),
    # Qwen3.5-9B's language model (32 layers of 4096: every fourth an attention layer of 16
    # heads of 256, GQA 4:1, q / k norms, an output gate, a quarter of each head rotated by the
    # multimodal RoPE's sections; the other 24 Gated DeltaNet layers, 16 key heads serving 32
    # value heads of 128, a 4-tap convolution; an MLP of 12288, a 248320 vocabulary, untied)
    "qwen3.5-9b": ("Qwen3.5-9B", lambda: tf.Qwen3_5TextConfig(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
        num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        vocab_size=248320, tie_word_embeddings=False, max_position_embeddings=262144,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        rms_norm_eps=1e-6)),
    # gpt-oss-20b (24 layers of 64 heads of 64 on a d_model of 2880, GQA 8:1, attention sinks,
    # q / k / v / o biases, a 128-key window on every other layer, YaRN x32 over 4096; 32
    # experts of 2880 of which 4, with biases, the clamped SwiGLU; a 201088 vocabulary, untied:
    # 20.9B parameters, 3.6B read a token), as its config.json reads (the checkpoint's MXFP4
    # experts dequantized: bf16 here)
    "gpt-oss-20b": ("gpt-oss-20b", lambda: tf.GptOssConfig(
        num_hidden_layers=24, num_local_experts=32, experts_per_token=4, num_experts_per_tok=4,
        rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "original_max_position_embeddings": 4096, "truncate": False,
                         "rope_theta": 150000.0},
        pad_token_id=199999, eos_token_id=200002)),
}


def random_model(key, device="cuda", n_layers=None, **overrides):
    """n_layers: fewer layers than the published model (same matrix sizes), e.g. to compile --
    of a config that types its layers, the last n_layers' types (each kind of layer where the
    pattern ends with one of each: Qwen3.5's DeltaNet then attention layer, Gemma 3's sliding
    then full one); overrides: config fields set after that (sliding_window=24)."""
    import torch
    from transformers import AutoModelForCausalLM
    name, make = SHAPES[key]
    cfg = make()
    if n_layers:
        cfg.num_hidden_layers = n_layers
        if isinstance(getattr(cfg, "layer_types", None), list):
            cfg.layer_types = cfg.layer_types[-n_layers:]
    for k, v in overrides.items():
        setattr(cfg, k, v)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    gen = torch.Generator(device).manual_seed(0)  # the same weights in every process (A/B runs)
    with torch.no_grad():  # weights of realistic scale (HF's init is std 0.02; fine for speed too)
        for n, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, p.shape[-1] ** -0.5, generator=gen)
    return name, model


def random_mxfp4_experts(fm, seed=0):
    """fm (a mixture's FastModel) with its experts swapped for random MXFP4 codes of their shape,
    as an MXFP4 checkpoint packs them (PackedWeights.s_experts_*; gpt-oss ships its experts so):
    uniform codes under an E8M0 scale of 2^-7 (rms 2.9 x 2^-7 = 0.023, random_model's d^-0.5
    0.019 at gpt-oss's 2880), the bf16 experts freed first, the runtime rebuilt on them."""
    import torch
    from fastdecode.runtime import Runtime
    pw = fm.weights
    shapes = [getattr(pw, f"w_experts_{n}").shape for n in ("gu", "down")]
    fm.runtime = pw.w_experts_gu = pw.w_experts_down = None
    torch.cuda.empty_cache()
    gen = torch.Generator(pw.device).manual_seed(seed)
    for n, (L, E, N, K) in zip(("gu", "down"), shapes):
        setattr(pw, f"w_experts_{n}", torch.randint(0, 256, (L, E, N, K // 2), generator=gen,
                                                    device=pw.device, dtype=torch.uint8))
        setattr(pw, f"s_experts_{n}", torch.full((L, E, N, K // 32), 127 - 7, device=pw.device,
                                                 dtype=torch.uint8))
    fm.runtime = Runtime(pw, fm.max_seq_len, fm.mode, cuda_graph=fm._cuda_graph,
                         vocab_size=fm.spec.vocab_size)
    return fm


def random_fp8_rows(N, K, device, generator=None):
    """Random FP8 rows of an [N, K] matrix, as quant.fp8_rows packs an FP8 checkpoint's: N(0, 1)
    * 16 codes in e4m3, a scale of K^-0.5 / 16 for each 128 columns of a row (random_model's
    d^-0.5 weights)."""
    import torch
    from fastdecode.quant import fp8_rows
    s = torch.full((N, -(-K // 128)), K ** -0.5 / 16, device=device)
    codes = torch.randn(N, K, generator=generator, device=device) * 16
    return fp8_rows(codes.to(torch.float8_e4m3fn), s, (1, 128))


def random_fp8_matrices(fm, seed=0):
    """fm (a FastModel, mode 'ops' or 'mega') with its q / k / v / o / gate / up / down matrices
    -- a mixture's shared expert's and every routed expert's -- swapped for random FP8 rows of
    their shape (random_fp8_rows; Qwen3-*-FP8 ship so), the float matrices freed first (a
    mixture without a shared expert keeps its empty w_gu / w_down), the runtime rebuilt on
    them."""
    import torch
    from fastdecode.runtime import Runtime
    pw = fm.weights
    dev = pw.device
    names = ("qkv", "o", "gu", "down", *(("experts_gu", "experts_down") if pw.spec.moe else ()))
    shapes = {n: getattr(pw, f"w_{n}").shape for n in names
              if getattr(pw, f"w_{n}").numel()}
    fm.runtime = None
    for n in shapes:
        setattr(pw, f"w_{n}", None)
    torch.cuda.empty_cache()
    gen = torch.Generator(dev).manual_seed(seed)
    for n, (*lead, N, K) in shapes.items():
        out = None
        for i in range(math.prod(lead)):  # a layer's (an expert's) matrix at a time
            t = random_fp8_rows(N, K, dev, gen)
            if out is None:
                out = torch.empty((*lead, *t.shape), device=dev, dtype=t.dtype)
            out.view(-1, *t.shape)[i] = t
        setattr(pw, f"w_{n}", out)
    fm.runtime = Runtime(pw, fm.max_seq_len, fm.mode, cuda_graph=fm._cuda_graph,
                         vocab_size=fm.spec.vocab_size)
    return fm


def stage_on_host(model) -> bool:
    """Moves HF's model to the host when fastdecode's packed copy would not fit beside it on
    its GPU (gpt-oss-20b: 2 x 42 GB on an 80 GB card), so from_hf(model, device="cuda") packs
    straight onto the GPU; -> whether it moved (model.cuda() brings it back for HF's peers)."""
    import torch
    from fastdecode import ModelSpec
    spec = ModelSpec.from_hf_config(model.config)
    packed = spec.weight_bytes_per_token(all_experts=True) + 2 * spec.vocab_size * spec.d_model
    if packed <= 0.9 * torch.cuda.mem_get_info()[0]:  # (HF's model already there)
        return False
    model.cpu()
    torch.cuda.empty_cache()  # its blocks back to the driver, for the peers after fastdecode's
    return True


def _stages(v):
    """a config's stages field: 0 the default, a digit for QKV / o / gate|up / down alike, four
    digits one each (e.g. 1133: QKV 1, o_proj 1, gate|up 3, down 3)."""
    from fastdecode.triton_kernels.config import StreamConfig
    if v >= 10:
        if len(str(v)) != 4:
            raise ValueError(f"stages field {v}: one digit, or four (QKV, o, gate|up, down)")
        return tuple(int(c) for c in str(v))
    return v or StreamConfig.stages


def stream_fields(pairs):
    """'name=value' strings -> {StreamConfig field: value}, integer values (1 / 0 for flags), a
    tuple's as a:b:c:d (op_elems=8192:8192:8192:16384)."""
    import dataclasses
    from fastdecode.triton_kernels.config import StreamConfig
    types = {f.name: type(f.default) for f in dataclasses.fields(StreamConfig)}
    named = dict(f.split("=") for f in pairs)
    if set(named) - set(types):
        raise ValueError(f"StreamConfig has no field {sorted(set(named) - set(types))}")

    def value(n, v):
        if ":" in v:
            return tuple(int(x) for x in v.split(":"))
        return int(v) if types[n] is type(None) else types[n](int(v))
    return {n: value(n, v) for n, v in named.items()}


# the flags after elements/warps/max K/per SM, in their order
POSITIONAL = ("ptx", "merge_in_attn", "norm_in_qkv", "attn_in_qkv_keys", "stages",
              "l2_prefetch_kb")


def stream_configs(text):
    """'elements/warps/max K/per SM[/ptx[/merge in attn[/norm in qkv[/attn keys[/stages
    [/l2 prefetch KB]]]]]]],...' (bench --configs; ptx 1: the weight pieces by inline PTX; merge in
    attn / norm in qkv 1: no MERGE / QKNORM tasks; attn keys: StreamConfig.attn_in_qkv_keys, the
    short-context decode schedule's reach, 0 = never, -1 or absent = config.py's default; stages:
    StreamConfig.stages, 0 or absent = the default, _stages; l2 prefetch KB:
    StreamConfig.l2_prefetch_kb, absent = 0), then any StreamConfig field by name (`/attn_block_s=32`,
    `/l2_prefetch_kb=32`; a field given both ways is an error) -> [StreamConfig, ...]."""
    from fastdecode.triton_kernels.config import StreamConfig
    out = []
    for c in text.split(","):
        try:
            named = stream_fields(f for f in c.split("/") if "=" in f)
        except ValueError as e:
            raise ValueError(f"{c}: {e}") from None
        e, w, k, p, *flags = (int(f) for f in c.split("/") if "=" not in f)
        if len(flags) > 6:
            raise ValueError(f"{c}: at most 10 fields (elements/warps/max K/per SM, then 6 flags)")
        given = dict(zip(POSITIONAL, flags))
        if set(given) & set(named):
            raise ValueError(f"{c}: {sorted(set(given) & set(named))} given by position and "
                             f"by name")
        flags += [0, 0, 0, -1, 0, 0][len(flags):]
        kw = dict(ptx=bool(flags[0]), merge_in_attn=bool(flags[1]), norm_in_qkv=bool(flags[2]),
                  attn_in_qkv_keys=None if flags[3] < 0 else flags[3], stages=_stages(flags[4]),
                  l2_prefetch_kb=flags[5])
        out.append(StreamConfig(e, w, per_sm=p, max_k=k, **{**kw, **named}))
    return out


_KSPLIT_DEFAULT = []  # config.py's ROWS_KSPLIT, kept by the first set_rows_tile


def set_rows_tile(text):
    """Make 'NxKxW[/kP]' the multi-row tile (config.MULTI_ROW_TILE) and, with /kP, P K parts per
    o / down tile (config.ROWS_KSPLIT; without, config.py's default). -> the TileConfig."""
    from fastdecode.triton_kernels import config
    if not _KSPLIT_DEFAULT:
        _KSPLIT_DEFAULT.append(config.ROWS_KSPLIT)
    spec, _, parts = text.partition("/k")
    config.MULTI_ROW_TILE = rows_tile(spec)
    config.ROWS_KSPLIT = int(parts) if parts else _KSPLIT_DEFAULT[0]
    return config.MULTI_ROW_TILE


def rows_tile(text):
    """A multi-row tile 'NxKxW' (rows x K x warps, config.MULTI_ROW_TILE) -> TileConfig."""
    from fastdecode.triton_kernels.config import TileConfig
    n, k, w = (int(v) for v in text.split("x"))
    return TileConfig(block_n=n, block_k=k, num_warps=w)
