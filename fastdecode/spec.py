"""ModelSpec: every size of a decoder read from its Hugging Face config, in one dataclass.

One family table says how Llama, Mistral (Ministral), Qwen2, Qwen3, Phi-3, Granite, SmolLM3, Gemma,
OLMo ... differ (qkv bias, q/k norm, sliding window, fused or renamed checkpoint tensors, partial
rotary, scalar multipliers, layers without RoPE, which rope scalings, norms before / after the
blocks, soft-capping, a RoPE per layer type, LayerNorms on a centered residual stream). Anything the
kernels do not implement raises :class:`UnsupportedModelError` naming the model_type or the field
(and, for model types a user may try, why: UNSUPPORTED), before any weight is touched. A
vision-language model whose language model is a supported family (TEXT_OF) is read from its
text_config.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch


class UnsupportedModelError(ValueError):
    """The model (architecture, activation, rope scaling, ...) is not one fastdecode implements."""


class TensorParallelError(ValueError):
    """A tensor-parallel size the model's dimensions do not allow."""


def vocab_range(vocab_size: int, rank: int, world: int) -> tuple[int, int]:
    """Rank `rank`'s rows [v0, v1) of a vocab-parallel lm_head: ceil(V / world) each (rank 0's
    is the largest), the last rank's shorter or empty."""
    per = -(-vocab_size // world)
    return min(rank * per, vocab_size), min((rank + 1) * per, vocab_size)


@dataclass(frozen=True)
class Experts:
    """Where a family's config keeps its mixture-of-experts MLP (Family.experts): each token's
    MLP is sum_j w_j expert_{e_j}(x) over the top_k experts e_j of the router's softmax(x @ Wr^T)
    (their weights w_j renormalized to sum 1 where `renorm` says), plus -- Qwen2-MoE -- a shared
    expert scaled by sigmoid(x . w_sg), or -- GraniteMoeShared -- one without a gate (scale 1)."""
    # experts a layer: the first of these fields the config has (transformers 5.x writes Qwen3-
    # MoE's as num_local_experts, its released config.json files say num_experts); it and top_k
    # may be per-layer lists (HunYuan), which must hold one value
    count: tuple = ("num_experts", "num_local_experts")
    top_k: str = "num_experts_per_tok"    # experts routed a token
    ffn: str = "moe_intermediate_size"    # an expert's MLP width
    renorm: bool | str = "norm_topk_prob"  # True: always; a str: the config flag that says it
    shared: str | None = None             # the shared expert's width field (None: none)
    # the shared expert has a sigmoid gate (Qwen2-MoE's shared_expert_gate); False: it is added
    # as it is (GraniteMoeShared) -- packed as a zero gate row, sigmoid(0) = 1/2, over its down
    # rows doubled: exact in binary floating point, the kernels unchanged (packing.pack)
    shared_gate: bool = True
    # the checkpoint tensor that holds the shared expert's gate rows, then its up rows (None:
    # HF's shared_expert.gate_proj / up_proj; GraniteMoeShared's shared_mlp.input_linear, which
    # HF's modeling chunks in two; packing.fused_getter reads each part's rows of it)
    shared_fused: str | None = None
    # gpt-oss: the router and every expert's gate|up and down carry biases (ModelSpec.
    # expert_bias); HF keeps gate_up_proj [E, d, 2F] as [in, out] with the gate and up columns
    # interleaved (2i, 2i + 1) and down_proj [E, F, d] (packing.oai_expert_getter); the experts'
    # activation is the clamped SwiGLU (ModelSpec.act "swiglu_oai": OAI_SWIGLU)
    oai: bool = False
    # the shared MLP is this config field's count of experts wide (ffn x n_shared_experts:
    # DeepSeek-V3, GLM-4.5, ERNIE 4.5's moe_num_shared_experts), where `shared` is None
    shared_count: str | None = None
    # the router's scores are sigmoids, not a softmax (DeepSeek-V3, GLM-4.5, dots.llm1)
    sigmoid: bool = False
    # the tensor within the layer of the router's choice bias -- added to the scores to pick the
    # experts, not to weight them (e_score_correction_bias; None: none)
    choice_bias: str | None = None
    # the config reads n_group / topk_group (group-limited picks) and routed_scaling_factor
    deepseek: bool = False
    # HF keeps the router's weight in fp32 (_keep_in_fp32_modules_strict: gate.weight), as the
    # packing does (ModelSpec.router_fp32)
    router_fp32: bool = False


# gpt-oss's clamped SwiGLU, (alpha, limit): (min(g, limit) sigmoid(alpha min(g, limit))) (clamp(u,
# -limit, limit) + 1) of gate g and up u -- HF's GptOssExperts; the kernels' constants
# (triton_kernels.gemv), so a config with other values is refused (Family.require_equal)
OAI_SWIGLU = (1.702, 7.0)


@dataclass(frozen=True)
class Family:
    qkv_bias: bool          # q/k/v projections carry a bias regardless of `attention_bias`
    # a norm over head_dim on each q and k head before RoPE (Qwen3's RMSNorm; a LayerNorm in a
    # layer_norm family: ModelSpec.qk_layer_norm); a str: the config field that switches it on
    # (StableLM's qk_layernorm, Cohere's use_qk_norm)
    qk_norm: bool | str
    window_field: str | None  # config field that switches the sliding window on, None: always on if set
    # the checkpoint stores q|k|v as self_attn.qkv_proj and gate|up as mlp.gate_up_proj (Phi-3;
    # packing.fused_getter reads the parts out of them)
    fused: bool = False
    # HF's rotary embedding of the family rotates the first partial_rotary_factor of each head
    # (Phi-3); elsewhere its default rope ignores the factor
    partial_rotary: bool = False
    # scalar multipliers (Granite): embedding_multiplier on the embeddings, residual_multiplier on
    # each block's output before the residual add, attention_multiplier as the attention's scale,
    # the logits divided by logits_scaling -- folded into the packed weights (packing.pack), but
    # the embeddings' scaled at lookup (PackedWeights.embed_scale)
    multipliers: bool = False
    # logits_scaling multiplies the logits (HyperCLOVAX) rather than divides them (Granite)
    logits_multiplied: bool = False
    # RoPE on interleaved pairs (2i, 2i + 1) instead of (i, i + head_dim / 2) (Helium, ERNIE
    # 4.5): packing reorders the q / k dims (ModelSpec.rope_permutation), the kernels unchanged
    interleaved_rope: bool = False
    # the config fields that switch on the q / k / v, o_proj and MLP biases (None: never; a tuple:
    # the first of its names the config has -- a checkpoint's own name beside HF's)
    bias_fields: tuple = ("attention_bias", "attention_bias", "mlp_bias")
    # layers without RoPE (SmolLM3's NoPE layers): the config's per-layer list, 1 rotary / 0 none
    # (None in the config: every no_rope_layer_interval-th layer, HF's default)
    nope_field: str | None = None
    # (HF name part, the checkpoint's) pairs, in order: a checkpoint that keeps its own tensor
    # names, which HF renames on loading (EXAONE 3.x: Llama's modules under GPT-2-style names;
    # packing.renamed_getter). HF's state_dict and a checkpoint with HF's names read as they are;
    # the name each replacement leaves is tried in turn (Falcon's norms: alternatives in order)
    checkpoint_names: tuple = ()
    # the q / k RMSNorm after RoPE, not before (HunYuan; qkv_rope.qk_norm_mode)
    qk_norm_after_rope: bool = False
    # a "dynamic" rope with a fixed alpha is HF's static NTK-alpha stretch of the base (HunYuan's
    # rotary embedding: rope_type ntk_alpha here)
    alpha_rope: bool = False
    # Gemma: the RMSNorms scale by (1 + weight) (packing adds the 1), and the embeddings are
    # multiplied by sqrt(hidden_size) rounded to the weights' dtype (HF's normalizer; at lookup:
    # ModelSpec.embed_scale, PackedWeights.embed_scale)
    gemma_norms: bool = False
    # the norms scale by (1 + weight) without Gemma's embedding scale (Nemotron's LayerNorm1P;
    # packing.offset_norm_getter)
    norms_plus_one: bool = False
    # the RMSNorms of a layer by name: (before attention, before the MLP, after attention, after
    # the MLP; None: none). A norm after a block normalizes the block's output before the
    # residual add (Gemma 2 / 3, GLM-4-0414, EXAONE 4, OLMo 2 / 3: ModelSpec.post_norms)
    norms: tuple = ("input_layernorm", "post_attention_layernorm", None, None)
    # the config flag that switches the norms after the blocks on (HyperCLOVAX's use_post_norm,
    # on when absent, as HF's default); None: norms[2:] alone decide
    post_norm_field: str | None = None
    # the attention's scale is query_pre_attn_scalar ** -0.5, not head_dim ** -0.5 (Gemma 2 / 3;
    # ModelSpec.attn_scale)
    query_scalar: bool = False
    # the sliding-window layers rotate by a RoPE of their own (Gemma 3: rope_parameters per
    # layer type; transformers 4.x's rope_local_base_freq): ModelSpec.local_rope
    local_rope: bool = False
    # a multimodal RoPE (Qwen2-VL's mrope): text tokens sit at one position on all its axes,
    # which rotates as the default RoPE -- text-only decoding reads it as that
    mrope: bool = False
    # where the config sets a sliding window, the full-attention layers take no RoPE (EXAONE 4's
    # hybrid attention: ModelSpec.nope_layers)
    full_layers_nope: bool = False
    # the q / k norms are one RMSNorm over all q heads' rows at once and one over all k heads'
    # (OLMo 2 / 3: weights [H * hd], [KVH * hd]), not one per head
    qk_norm_full: bool = False
    # the MLP is down(act(gate) * up); False: down(act(up)), no gate (Arcee: relu2)
    gated: bool = True
    # the checkpoint's q / k norm weights as a tensor per head, this name in the layer ({part} q
    # or k, {h} the head: StableLM's q_layernorm.norms.{h}); packing.qk_norm_getter
    qk_norm_heads: str | None = None
    # RMSNorms without weights (NanoChat: the checkpoint has none; packing reads ones)
    weightless_norms: bool = False
    # a weightless RMSNorm on each embedded row before the first layer (NanoChat): ModelSpec.
    # embed_norm, the packed table's rows normalized (a row-wise op: the same as after lookup)
    embed_norm: bool = False
    # rotate_half with its signs flipped, cat(x2, -x1) (NanoChat): a rotation by -theta, the
    # tables' sin negated (ModelSpec.rope_flipped)
    rope_flipped: bool = False
    # LayerNorms, not RMSNorms (OLMo 1, StableLM, StarCoder2, Jais 2, Phi, Cohere, GPT-NeoX), run
    # as RMSNorms over a residual stream kept centered: packing centers everything written into
    # it (ModelSpec.layer_norm)
    layer_norm: bool = False
    # the LayerNorms carry a bias (StableLM, StarCoder2, Jais 2, Phi, GPT-NeoX): folded into the
    # biases of the projections they feed, the final one into a bias on the logits
    # (ModelSpec.head_bias)
    norm_bias: bool = False
    # the norms' epsilon: the config field that holds it, or a constant (OLMo 1: 1e-5)
    eps_field: str | float = "rms_norm_eps"
    # (config field, what it switches on): configs that set one are refused
    refuse: tuple = ()
    # the attention and the MLP both read the layer's input, x + attn(n(x)) + mlp(n'(x)) (Phi,
    # Cohere: ModelSpec.parallel); a str: the config field that switches it (GPT-NeoX's
    # use_parallel_residual, on when absent, as HF's default); a tuple: fields any of which
    # switches it on (Falcon's parallel_attn and new_decoder_architecture)
    parallel: bool | str | tuple = False
    # the checkpoint fuses q|k|v per KV group, [KVH, group + 2, head_dim] rows: each group's q
    # heads, then its k and v (packing.grouped_qkv_getter) -- per head where every q head has its
    # own KV head (GPT-NeoX's query_key_value, GPT-BigCode's c_attn without multi_query, Falcon's
    # without it), q|k|v concatenated where one KV head serves all (multi-query GPT-BigCode and
    # Falcon), Falcon's new decoder architecture's groups between; a tuple (blocks, order): a
    # multi-head attention's rows in that many blocks, each H / blocks heads of every part in
    # that order (CodeGen's 4 model-parallel shards of q, v, k: (4, "qvk"))
    qkv_grouped: bool | tuple = False
    # the config flag that makes the attention multi-query, one KV head, else multi-head
    # (GPT-BigCode's multi_query; num_key_value_heads not read)
    multi_query_field: str | None = None
    # (flag, field): where the flag is set, multi_query_field is ignored and the KV heads are the
    # field's (Falcon's new_decoder_architecture, num_kv_heads) -- the model's own rule: the
    # config's num_key_value_heads says it in some transformers versions only (5.17's
    # FalconConfig maps it to num_kv_heads, 71 on falcon-7b, whose attention is multi-query)
    grouped_field: tuple | None = None
    # the learned position table's row of position p is p + position_offset (OPT's 2)
    position_offset: int = 0
    # (config field, what its value must equal -- another field's name or a constant): configs
    # whose value differs are refused (OPT-350m's word_embed_proj_dim, its projections in / out)
    require_equal: tuple = ()
    # the config flag that multiplies the embedded rows by sqrt(hidden_size) (BioGPT's
    # scale_embedding: ModelSpec.embed_scale, not rounded to the weights' dtype as Gemma's)
    embed_scale_field: str | None = None
    # the config field that multiplies the logits (Cohere's logit_scale; ModelSpec.logits_scale)
    logit_scale_field: str | None = None
    # learned absolute positions, added to the embedded row, and no RoPE (GPT-2: wpe;
    # ModelSpec.learned_positions)
    learned_positions: bool = False
    # the config fields of the MLP's width and activation (GPT-2: n_inner, None meaning 4 x
    # hidden_size -- ffn_default; activation_function)
    ffn_field: str = "intermediate_size"
    ffn_default: int = 0
    act_field: str = "hidden_act"
    act_default: str = "silu"  # where the config has no act_field (BLOOM: the tanh GELU)
    # ALiBi position biases and no RoPE (BLOOM: ModelSpec.alibi); a str: the config field that
    # switches them on (Falcon-RW's alibi)
    alibi: bool | str = False
    # the ALiBi biases as HF's Falcon computes them (ModelSpec.alibi ALIBI_FALCON)
    alibi_falcon: bool = False
    # MPT's ALiBi slopes (ModelSpec.alibi_mpt), not BLOOM's
    alibi_mpt: bool = False
    # a sub-config whose fields read as the config's own where it lacks them (MPT's attn_config:
    # clip_qkv, qk_ln, softmax_scale ...), a dict or a config object
    nested: str | None = None
    # the config field of the attention scores' scale itself, where set (MPT's softmax_scale:
    # ModelSpec.attn_scale)
    softmax_scale_field: str | None = None
    # fixed sinusoidal positions in place of learned ones (XGLM: each row sin | cos of the position
    # times tensor2tensor's frequencies, from row 2 -- position_offset), computed at packing
    # (packing.sinusoidal_getter) and added as learned rows are (ModelSpec.learned_positions)
    sinusoidal_positions: bool = False
    # the attention scores are not divided by sqrt(head_dim) (GPT-Neo: ModelSpec.attn_scale 1)
    unscaled_attention: bool = False
    # the config's attention_layers name each layer "global" or "local", a local one attending to
    # its last window_size keys (GPT-Neo): ModelSpec.layer_windows
    local_layers: bool = False
    # the config field of the longest sequence (MPT's max_seq_len: ModelSpec.max_position)
    max_position_field: str = "max_position_embeddings"
    # the checkpoint stores its projections as [in, out] (GPT-2's Conv1D: packing.conv1d_getter)
    conv1d: bool = False
    # (config field, what it switches off): configs that set one false are refused
    require: tuple = ()
    # the config field of the rotated dims' count (GPT-J's rotary_dim), not a factor of the head
    rotary_dim_field: str | None = None
    # a prefix of the checkpoint's names (checkpoint_names) its files may omit (GPT-2's
    # "transformer.": packing.renamed_getter)
    checkpoint_prefix: str = ""
    # every layer's MLP a mixture of experts (Mixtral, Qwen2 / Qwen3-MoE, OLMoE): ModelSpec.
    # n_experts; packing.expert_getter reads the checkpoint's per-expert or HF's stacked tensors
    experts: Experts | None = None
    # attention sinks (gpt-oss): a learned logit per q head a layer that joins each query's
    # softmax as a key with no value (ModelSpec.attn_sinks; PackedWeights.sinks)
    sinks: bool = False
    # Gated DeltaNet layers where the config's layer_types says "linear_attention" (Qwen3.5:
    # ModelSpec.linear_layers and gdn), and the attention layers' q_proj holding a sigmoid gate
    # on each head's output beside its q rows ([q | gate] per head: ModelSpec.attn_gate)
    linear_attn: bool = False


# GPT-2's tensor names (GPT-BigCode's too), HF's Llama-style names first: the embeddings, layers
# and norms GPT-Neo shares, the attention's own, the MLP GPT-Neo shares
_GPT2_OUTER = (("model.embed_tokens.", "transformer.wte."),
               ("model.embed_positions.", "transformer.wpe."),
               ("model.layers.", "transformer.h."), ("model.norm.", "transformer.ln_f."),
               (".input_layernorm.", ".ln_1."), (".post_attention_layernorm.", ".ln_2."))
_GPT2_MLP = ((".mlp.up_proj.", ".mlp.c_fc."), (".mlp.down_proj.", ".mlp.c_proj."))
_GPT2_NAMES = _GPT2_OUTER + ((".self_attn.qkv_proj.", ".attn.c_attn."),
                             (".self_attn.o_proj.", ".attn.c_proj.")) + _GPT2_MLP
# a fairseq-style block's names (OPT, BioGPT, XGLM): norms before the attention and the MLP,
# out_proj, fc1 / fc2
_FAIRSEQ_BLOCK = ((".input_layernorm.", ".self_attn_layer_norm."),
                  (".post_attention_layernorm.", ".final_layer_norm."),
                  (".self_attn.o_proj.", ".self_attn.out_proj."),
                  (".mlp.up_proj.", ".fc1."), (".mlp.down_proj.", ".fc2."))
_GEMMA_POST = ("input_layernorm", "pre_feedforward_layernorm", "post_attention_layernorm",
               "post_feedforward_layernorm")
_POST_ONLY = (None, None, "post_attention_layernorm", "post_feedforward_layernorm")
_GLM4_NORMS = ("input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm",
               "post_mlp_layernorm")
# HunYuan's q / k norms (FAMILIES' hunyuan_v1_dense / _moe)
_HUNYUAN_NAMES = ((".self_attn.q_norm.", ".self_attn.query_layernorm."),
                  (".self_attn.k_norm.", ".self_attn.key_layernorm."))
# Granite MoE's experts and router under block_sparse_moe (FAMILIES' granitemoe)
_GRANITE_MOE_NAMES = ((".mlp.experts.", ".block_sparse_moe.experts."),
                      (".block_sparse_moe.experts.gate_up_proj",
                       ".block_sparse_moe.input_linear.weight"),
                      (".block_sparse_moe.experts.down_proj",
                       ".block_sparse_moe.output_linear.weight"),
                      (".mlp.gate.weight", ".block_sparse_moe.router.weight"),
                      (".block_sparse_moe.router.weight", ".block_sparse_moe.router.layer.weight"))
# GPT-J: parallel blocks on one LayerNorm with a bias, rotary_dim of each head rotated on
# interleaved pairs, no q / k / v / o biases, an MLP of n_inner without a gate (fc_in / fc_out)
# with biases, an lm_head with a bias (FAMILIES' gptj; CodeGen's but for its fused q|v|k)
_GPTJ = Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
               partial_rotary=True, interleaved_rope=True, rotary_dim_field="rotary_dim",
               layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon", parallel=True,
               bias_fields=(None, None, True), ffn_field="n_inner", ffn_default=4,
               act_field="activation_function",
               norms=("input_layernorm", "input_layernorm", None, None),
               checkpoint_prefix="transformer.", checkpoint_names=(
                   ("model.embed_tokens.", "transformer.wte."), ("model.layers.", "transformer.h."),
                   ("model.norm.", "transformer.ln_f."), (".input_layernorm.", ".ln_1."),
                   (".self_attn.o_proj.", ".attn.out_proj."), (".self_attn.", ".attn."),
                   (".mlp.up_proj.", ".mlp.fc_in."), (".mlp.down_proj.", ".mlp.fc_out.")))
# DeepSeek-V3's shared experts (mlp.shared_experts: packing's mlp.shared_expert) and router
_SHARED_EXPERTS = ((".mlp.shared_expert.", ".mlp.shared_experts."),)
_DEEPSEEK_EXPERTS = Experts(count=("n_routed_experts",), shared_count="n_shared_experts",
                            shared_gate=False, sigmoid=True, router_fp32=True,
                            choice_bias="mlp.gate.e_score_correction_bias", deepseek=True)
FAMILIES: dict[str, Family] = {
    "llama": Family(qkv_bias=False, qk_norm=False, window_field=None),
    "mistral": Family(qkv_bias=False, qk_norm=False, window_field=None),
    "ministral": Family(qkv_bias=False, qk_norm=False, window_field=None),  # + layer_types
    # Ministral 3 (its VLM wrapper mistral3): Mistral with YaRN and a query scale growing with the
    # position past the original context (ModelSpec.q_pos_scale)
    "ministral3": Family(qkv_bias=False, qk_norm=False, window_field=None),
    "qwen2": Family(qkv_bias=True, qk_norm=False, window_field="use_sliding_window"),
    "qwen3": Family(qkv_bias=False, qk_norm=True, window_field="use_sliding_window"),
    # mixtures of experts (Family.experts): Mistral's, Qwen2's (with a shared expert) and
    # Qwen3's attention; OLMoE's q / k norms over all heads at once. Mixtral's checkpoints keep
    # the experts under block_sparse_moe, each as w1 (gate), w3 (up) and w2 (down)
    "mixtral": Family(qkv_bias=False, qk_norm=False, window_field=None, experts=Experts(
        count=("num_local_experts",), ffn="intermediate_size", renorm=True),
        checkpoint_names=((".mlp.", ".block_sparse_moe."), (".gate_proj.", ".w1."),
                          (".up_proj.", ".w3."), (".down_proj.", ".w2."))),
    "qwen2_moe": Family(qkv_bias=True, qk_norm=False, window_field="use_sliding_window",
                        experts=Experts(shared="shared_expert_intermediate_size")),
    "qwen3_moe": Family(qkv_bias=False, qk_norm=True, window_field="use_sliding_window",
                        experts=Experts()),
    "olmoe": Family(qkv_bias=False, qk_norm=True, window_field=None, qk_norm_full=True,
                    experts=Experts(ffn="intermediate_size"),
                    refuse=(("clip_qkv", "q / k / v clipping"),)),
    # FlexOlmo: OLMo 2's blocks (norms after them, q / k norms over all heads) over OLMoE's
    # experts (runtime.lacks_tasks: mode 'ops' / 'torch', the norm after the mixture)
    "flex_olmo": Family(qkv_bias=False, qk_norm=True, window_field=None, norms=_POST_ONLY,
                        qk_norm_full=True, experts=Experts(ffn="intermediate_size")),
    # Granite's multipliers over Mixtral's routing (softmax of the top-k logits: the top-k
    # probabilities renormalized), the experts under block_sparse_moe -- HF 5's experts.* and
    # router.weight, a checkpoint's stacked input_linear / output_linear and router.layer;
    # GraniteMoeShared adds a shared expert without a gate (shared_mlp: input_linear its gate|up
    # rows, output_linear its down; none where shared_intermediate_size is 0)
    "granitemoe": Family(qkv_bias=False, qk_norm=False, window_field=None, multipliers=True,
                         experts=Experts(count=("num_local_experts",), ffn="intermediate_size",
                                         renorm=True),
                         checkpoint_names=_GRANITE_MOE_NAMES),
    "granitemoeshared": Family(
        qkv_bias=False, qk_norm=False, window_field=None, multipliers=True,
        experts=Experts(count=("num_local_experts",), ffn="intermediate_size", renorm=True,
                        shared="shared_intermediate_size", shared_gate=False,
                        shared_fused="shared_mlp.input_linear"),
        checkpoint_names=(*_GRANITE_MOE_NAMES,
                          (".mlp.shared_expert.down_proj.", ".shared_mlp.output_linear."))),
    # gpt-oss: attention sinks, q / k / v / o biases, sliding windows on every other layer
    # (layer_types), YaRN; a router with a bias (softmax of the top-k logits: the top-k
    # probabilities renormalized) over experts with biases and the clamped SwiGLU (Experts.oai)
    "gpt_oss": Family(qkv_bias=False, qk_norm=False, window_field=None, sinks=True,
                      bias_fields=("attention_bias", "attention_bias", None),
                      experts=Experts(count=("num_local_experts",), ffn="intermediate_size",
                                      renorm=True, oai=True),
                      checkpoint_names=((".mlp.gate.", ".mlp.router."),),
                      require_equal=(("swiglu_alpha", OAI_SWIGLU[0], "the clamped SwiGLU's "
                                      "alpha"),
                                     ("swiglu_limit", OAI_SWIGLU[1], "its clamp"))),
    "phi3": Family(qkv_bias=False, qk_norm=False, window_field=None, fused=True,
                   partial_rotary=True),
    "granite": Family(qkv_bias=False, qk_norm=False, window_field=None, multipliers=True),
    # HyperCLOVAX (SEED-Think-14B): Granite's multipliers, the logits times logits_scaling, and
    # ("Peri-LN", use_post_norm) a norm after the attention and the MLP, whose output the
    # residual_multiplier scales after the norm
    "hyperclovax": Family(qkv_bias=False, qk_norm=False, window_field=None, multipliers=True,
                          logits_multiplied=True, post_norm_field="use_post_norm",
                          norms=("input_layernorm", "post_attention_layernorm", "post_norm1",
                                 "post_norm2")),
    "helium": Family(qkv_bias=False, qk_norm=False, window_field=None, interleaved_rope=True,
                     bias_fields=("attention_bias", None, "mlp_bias")),
    "ernie4_5": Family(qkv_bias=False, qk_norm=False, window_field=None, interleaved_rope=True,
                       bias_fields=("use_bias",) * 3),
    "seed_oss": Family(qkv_bias=False, qk_norm=False, window_field=None,
                       bias_fields=("attention_bias", "attention_out_bias", "mlp_bias")),
    # EXAONE 3.0 / 3.5: HF runs it as Llama (LlamaForCausalLM); its checkpoints keep their names
    "exaone": Family(qkv_bias=False, qk_norm=False, window_field=None, checkpoint_names=(
        ("model.embed_tokens.", "transformer.wte."), ("model.layers.", "transformer.h."),
        ("model.norm.", "transformer.ln_f."), (".self_attn.o_proj.", ".attn.attention.out_proj."),
        (".self_attn.", ".attn.attention."), (".input_layernorm.", ".ln_1."),
        (".post_attention_layernorm.", ".ln_2."), (".mlp.gate_proj.", ".mlp.c_fc_0."),
        (".mlp.up_proj.", ".mlp.c_fc_1."), (".mlp.down_proj.", ".mlp.c_proj."))),
    # GLM-4 (glm-4-9b-chat-hf): gate|up fused as Phi-3's, half of each head rotated on
    # interleaved pairs, q / k / v biases only
    "glm": Family(qkv_bias=False, qk_norm=False, window_field=None, fused=True,
                  partial_rotary=True, interleaved_rope=True,
                  bias_fields=("attention_bias", None, None)),
    # InternLM3: HF's Llama; its config.json names the biases qkv_bias (q / k / v / o) and bias
    "internlm3": Family(qkv_bias=False, qk_norm=False, window_field=None, bias_fields=(
        ("attention_bias", "qkv_bias"), ("attention_bias", "qkv_bias"), ("mlp_bias", "bias"))),
    # HunYuan dense (Hunyuan-0.5B ... 7B): q / k RMSNorm after RoPE (query_layernorm /
    # key_layernorm in the checkpoint), biases on q / k / v / o by attention_bias
    "hunyuan_v1_dense": Family(qkv_bias=False, qk_norm=True, window_field=None,
                               qk_norm_after_rope=True, alpha_rope=True,
                               checkpoint_names=_HUNYUAN_NAMES),
    # HunYuan MoE (Hunyuan-A13B): its dense attention over top-k experts (softmax, renormalized;
    # the router mlp.gate.wg, fp32 in HF's modeling, packed in the weights' dtype) plus a shared
    # MLP without a gate (mlp.shared_mlp), both intermediate_size wide as HF's port has them;
    # num_experts / moe_topk per-layer lists of one value
    "hunyuan_v1_moe": Family(qkv_bias=False, qk_norm=True, window_field=None,
                             qk_norm_after_rope=True, alpha_rope=True,
                             experts=Experts(ffn="intermediate_size", top_k="moe_topk",
                                             renorm=True, shared="intermediate_size",
                                             shared_gate=False),
                             checkpoint_names=(*_HUNYUAN_NAMES,
                                               (".mlp.shared_expert.", ".mlp.shared_mlp."),
                                               (".mlp.gate.weight", ".mlp.gate.wg.weight"))),
    # ERNIE 4.5 MoE (ERNIE-4.5-21B-A3B): ERNIE 4.5's attention (interleaved RoPE) over top-k
    # experts picked by softmax + a choice bias (moe_statics), renormalized, plus shared experts
    # without a gate; its first layer dense (moe_layer_start_index)
    "ernie4_5_moe": Family(qkv_bias=False, qk_norm=False, window_field=None,
                           interleaved_rope=True, bias_fields=(None, None, None),
                           refuse=(("use_bias", "biases on every projection"),),
                           experts=Experts(count=("moe_num_experts",), top_k="moe_k",
                                           renorm=True, shared_count="moe_num_shared_experts",
                                           router_fp32=True,
                                           shared_gate=False, choice_bias=(
                                               "mlp.gate.moe_statics.e_score_correction_bias")),
                           checkpoint_names=(*_SHARED_EXPERTS,
                                             (".mlp.gate.moe_statics.", ".mlp.moe_statics."))),
    # GLM-4.5 / 4.6 (glm4_moe) and dots.llm1: DeepSeek-V3's router (sigmoid scores, a choice
    # bias, group-limited picks, a routed scale) and shared experts without a gate, the first
    # first_k_dense_replace layers dense; GLM's attention rotates half of each head (its
    # partial_rotary_factor) with q / k / v biases and optional q / k norms, dots' is Qwen3's
    "glm4_moe": Family(qkv_bias=False, qk_norm="use_qk_norm", window_field=None,
                       partial_rotary=True, bias_fields=("attention_bias", None, None),
                       experts=_DEEPSEEK_EXPERTS, checkpoint_names=_SHARED_EXPERTS),
    "dots1": Family(qkv_bias=False, qk_norm=True, window_field=None,
                    experts=_DEEPSEEK_EXPERTS, checkpoint_names=_SHARED_EXPERTS),
    "smollm3": Family(qkv_bias=False, qk_norm=False, window_field="use_sliding_window",
                      nope_field="no_rope_layers"),
    # IQuest-Coder: HF's Llama under a model_type of its own
    "iquestcoder": Family(qkv_bias=False, qk_norm=False, window_field=None),
    # Arcee (AFM-4.5B): Llama with an MLP without a gate, down(relu(up)^2)
    "arcee": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False),
    # Apertus (Apertus-8B / 70B): Llama 3's RoPE with Qwen3's q / k norms, an MLP without a gate
    # whose xIELU activation has two learned scalars a layer (gemv.XIELU), its own norm names
    "apertus": Family(qkv_bias=False, qk_norm=True, window_field=None, gated=False,
                      bias_fields=("attention_bias", "attention_bias", None),
                      norms=("attention_layernorm", "feedforward_layernorm", None, None)),
    # NanoChat (nanochat-d32 ...): weightless RMSNorms, one more on the embeddings, RoPE by -theta
    # then q / k norms, an MLP without a gate (relu^2, fc1 / fc2), soft-capped logits, untied
    "nanochat": Family(qkv_bias=False, qk_norm=True, window_field=None, gated=False,
                       qk_norm_after_rope=True, weightless_norms=True, embed_norm=True,
                       rope_flipped=True, checkpoint_names=((".mlp.up_proj.", ".mlp.fc1."),
                                                            (".mlp.down_proj.", ".mlp.fc2."))),
    # CWM (Code World Model): Llama with sliding windows on the layers its layer_types name (the
    # config class's default: three of every four)
    "cwm": Family(qkv_bias=False, qk_norm=False, window_field=None),
    # OLMo 1 (OLMo-1B-hf, OLMo-7B-hf): Llama with LayerNorms without weight or bias (eps 1e-5)
    "olmo": Family(qkv_bias=False, qk_norm=False, window_field=None, layer_norm=True,
                   weightless_norms=True, eps_field=1e-5,
                   refuse=(("clip_qkv", "q / k / v clipped at clip_qkv"),)),
    # StableLM (stablelm-2-1_6b, stablelm-3b-4e1t, stablelm-zephyr, stablelm-2-12b): LayerNorms
    # with biases, a quarter of each head rotated, q / k / v biases by use_qkv_bias; parallel
    # blocks on the one input_layernorm by use_parallel_residual, per-head q / k LayerNorms
    # without biases by qk_layernorm (stablelm-2-12b both)
    "stablelm": Family(qkv_bias=False, qk_norm="qk_layernorm", window_field=None,
                       partial_rotary=True, layer_norm=True, norm_bias=True,
                       eps_field="layer_norm_eps", bias_fields=("use_qkv_bias", None, None),
                       parallel="use_parallel_residual",
                       qk_norm_heads="self_attn.{part}_layernorm.norms.{h}.weight",
                       checkpoint_names=((".post_attention_layernorm.", ".input_layernorm."),)),
    # StarCoder2: LayerNorms with biases, biases on every projection (use_bias), an MLP without a
    # gate (the tanh GELU; c_fc / c_proj), a sliding window where the config sets one
    "starcoder2": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                         layer_norm=True, norm_bias=True, eps_field="norm_epsilon",
                         bias_fields=("use_bias",) * 3,
                         checkpoint_names=((".mlp.up_proj.", ".mlp.c_fc."),
                                           (".mlp.down_proj.", ".mlp.c_proj."))),
    # Phi-1 / 1.5 / 2 (`phi`): parallel blocks on one LayerNorm with biases, biases on every
    # projection and the lm_head, part of each head rotated, an MLP without a gate (fc1 / fc2)
    "phi": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False,
                  partial_rotary=True, layer_norm=True, norm_bias=True, eps_field="layer_norm_eps",
                  parallel=True, bias_fields=(True, True, True),
                  norms=("input_layernorm", "input_layernorm", None, None),
                  refuse=(("qk_layernorm", "q / k LayerNorms"),),
                  checkpoint_names=(("model.norm.", "model.final_layernorm."),
                                    (".self_attn.o_proj.", ".self_attn.dense."),
                                    (".mlp.up_proj.", ".mlp.fc1."),
                                    (".mlp.down_proj.", ".mlp.fc2."))),
    # Cohere (Command-R, Aya 23): parallel blocks on one LayerNorm without a bias, RoPE on
    # interleaved pairs, the logits times logit_scale, tied, per-head q / k LayerNorms without
    # biases by use_qk_norm (Command R+: weights [heads, head_dim]); Cohere 2 (Command R7B):
    # sliding-window layers, the full ones without RoPE
    **{mt: Family(qkv_bias=False, qk_norm="use_qk_norm", window_field=None, layer_norm=True,
                  eps_field="layer_norm_eps", parallel=True, interleaved_rope=True,
                  bias_fields=("attention_bias", "attention_bias", None),
                  norms=("input_layernorm", "input_layernorm", None, None),
                  logit_scale_field="logit_scale", full_layers_nope=mt == "cohere2")
       for mt in ("cohere", "cohere2")},
    # Nemotron (Minitron-4B / 8B, Nemotron-Mini-4B-Instruct, Nemotron-4): LayerNorms with biases
    # whose weights scale by (1 + w) (LayerNorm1P), part of each head rotated, an MLP without a
    # gate (relu^2), untied
    "nemotron": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                       partial_rotary=True, layer_norm=True, norm_bias=True,
                       norms_plus_one=True, eps_field="norm_eps"),
    # GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorms with biases, parallel blocks by
    # use_parallel_residual (each branch its own norm), q|k|v fused per head, part of each head
    # rotated, an MLP without a gate (the erf GELU) with biases
    "gpt_neox": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                       partial_rotary=True, layer_norm=True, norm_bias=True,
                       eps_field="layer_norm_eps", parallel="use_parallel_residual",
                       qkv_grouped=True, bias_fields=("attention_bias", "attention_bias", True),
                       checkpoint_names=(
                           ("model.embed_tokens.", "gpt_neox.embed_in."),
                           ("model.layers.", "gpt_neox.layers."),
                           ("model.norm.", "gpt_neox.final_layer_norm."),
                           (".self_attn.o_proj.", ".attention.dense."),
                           (".self_attn.qkv_proj.", ".attention.query_key_value."),
                           (".self_attn.", ".attention."),
                           (".mlp.up_proj.", ".mlp.dense_h_to_4h."),
                           (".mlp.down_proj.", ".mlp.dense_4h_to_h."),
                           ("lm_head.", "embed_out."))),
    # GPT-2: learned absolute positions (no RoPE), LayerNorms with biases, q|k|v fused (c_attn),
    # [in, out] projections (Conv1D), biases everywhere, an MLP of n_inner without a gate, tied
    "gpt2": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False, fused=True,
                   layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon",
                   bias_fields=(True, True, True), learned_positions=True, ffn_field="n_inner",
                   ffn_default=4, act_field="activation_function", conv1d=True,
                   refuse=(("scale_attn_by_inverse_layer_idx", "attention scaled by 1 / layer"),
                           ("add_cross_attention", "cross-attention")),
                   require=(("scale_attn_weights", "unscaled attention scores"),),
                   checkpoint_prefix="transformer.", checkpoint_names=_GPT2_NAMES),
    # GPT-BigCode (SantaCoder, StarCoder(Base), tiny_starcoder): GPT-2's blocks and names with
    # [out, in] projections, multi-query attention by multi_query (c_attn q|k|v concatenated; per
    # head without it)
    "gpt_bigcode": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False,
                          qkv_grouped=True, multi_query_field="multi_query",
                          layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon",
                          bias_fields=(True, True, True), learned_positions=True,
                          ffn_field="n_inner", ffn_default=4, act_field="activation_function",
                          refuse=(("add_cross_attention", "cross-attention"),),
                          require=(("scale_attn_weights", "unscaled attention scores"),),
                          checkpoint_prefix="transformer.", checkpoint_names=_GPT2_NAMES),
    # BLOOM (bloom-560m ... bloom, BLOOMZ): ALiBi instead of RoPE, a LayerNorm with a bias on the
    # embedded rows (folded into the table: Family.embed_norm) and before each block, q|k|v fused
    # per head, biases everywhere, an MLP of 4 x hidden_size without a gate (the tanh GELU), tied
    "bloom": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False, alibi=True,
                    layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon",
                    embed_norm=True, qkv_grouped=True, bias_fields=(True, True, True),
                    ffn_field="", ffn_default=4, act_field="", act_default="gelu_pytorch_tanh",
                    refuse=(("apply_residual_connection_post_layernorm",
                             "the residual taken after the norm"),),
                    checkpoint_prefix="transformer.", checkpoint_names=(
                        ("model.embed_tokens.", "transformer.word_embeddings."),
                        ("model.embed_norm.", "transformer.word_embeddings_layernorm."),
                        ("model.layers.", "transformer.h."), ("model.norm.", "transformer.ln_f."),
                        (".self_attn.qkv_proj.", ".self_attention.query_key_value."),
                        (".self_attn.o_proj.", ".self_attention.dense."),
                        (".mlp.up_proj.", ".mlp.dense_h_to_4h."),
                        (".mlp.down_proj.", ".mlp.dense_4h_to_h."))),
    # MPT (mpt-7b / 30b and their -instruct / -chat / -storywriter): ALiBi with MPT's slopes,
    # LayerNorms without biases, q|k|v concatenated (Wqkv), an MLP of 4 x d_model without a gate
    # (the erf GELU), no biases, tied; its attention's options in attn_config
    "mpt": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False, alibi=True,
                  alibi_mpt=True, layer_norm=True, eps_field="layer_norm_epsilon", fused=True,
                  ffn_field="", ffn_default=4, act_field="", act_default="gelu",
                  nested="attn_config", softmax_scale_field="softmax_scale",
                  max_position_field="max_seq_len",
                  refuse=(("clip_qkv", "clipped q / k / v"), ("qk_ln", "q / k LayerNorms"),
                          ("prefix_lm", "a prefix LM's bidirectional prefix"),
                          ("attn_uses_sequence_id", "attention within sequence ids")),
                  require=(("alibi", "no ALiBi (learned positions)"),),
                  checkpoint_prefix="transformer.", checkpoint_names=(
                      ("model.embed_tokens.", "transformer.wte."),
                      ("model.layers.", "transformer.blocks."),
                      ("model.norm.", "transformer.norm_f."),
                      (".input_layernorm.", ".norm_1."), (".post_attention_layernorm.", ".norm_2."),
                      (".self_attn.qkv_proj.", ".attn.Wqkv."),
                      (".self_attn.o_proj.", ".attn.out_proj."),
                      (".mlp.up_proj.", ".ffn.up_proj."), (".mlp.down_proj.", ".ffn.down_proj."))),
    # Falcon (falcon-7b / 40b / 180b, Falcon2-11B): one LayerNorm shared by parallel blocks
    # (parallel_attn), or one each (the new decoder architecture's ln_attn / ln_mlp), or a
    # sequential block; q|k|v fused per KV group (multi-query: concatenated), an MLP of
    # ffn_hidden_size without a gate (the erf GELU), biases by `bias`, tied. ALiBi refused
    "falcon": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                     layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon",
                     parallel=("parallel_attn", "new_decoder_architecture"), qkv_grouped=True,
                     multi_query_field="multi_query",
                     grouped_field=("new_decoder_architecture", "num_kv_heads"),
                     alibi="alibi", alibi_falcon=True,
                     bias_fields=("bias",) * 3, ffn_field="ffn_hidden_size", act_field="activation",
                     norms=("ln_attn", "ln_mlp", None, None),
                     checkpoint_prefix="transformer.", checkpoint_names=(
                         ("model.embed_tokens.", "transformer.word_embeddings."),
                         ("model.layers.", "transformer.h."), ("model.norm.", "transformer.ln_f."),
                         (".self_attn.qkv_proj.", ".self_attention.query_key_value."),
                         (".self_attn.o_proj.", ".self_attention.dense."),
                         (".mlp.up_proj.", ".mlp.dense_h_to_4h."),
                         (".mlp.down_proj.", ".mlp.dense_4h_to_h."),
                         (".ln_attn.", ".input_layernorm."),
                         (".ln_mlp.", ".post_attention_layernorm."),
                         (".post_attention_layernorm.", ".input_layernorm."))),
    # OPT (opt-125m ... opt-66b): learned positions at row p + 2, LayerNorms (eps 1e-5) with
    # biases before the blocks, biases by enable_bias, an MLP of ffn_dim without a gate (fc1 /
    # fc2, ReLU), tied. OPT-350m's norms after the blocks and 512-wide embeddings are refused
    "opt": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                  layer_norm=True, norm_bias=True, eps_field=1e-5,
                  bias_fields=("enable_bias",) * 3, learned_positions=True, position_offset=2,
                  ffn_field="ffn_dim", act_field="activation_function",
                  refuse=(("_remove_final_layer_norm", "no final LayerNorm"),),
                  require=(("do_layer_norm_before", "LayerNorms after the blocks"),
                           ("layer_norm_elementwise_affine", "LayerNorms without weights")),
                  require_equal=(("word_embed_proj_dim", "hidden_size",
                                  "embeddings of another width, projected in and out"),),
                  checkpoint_prefix="model.", checkpoint_names=(
                      ("model.embed_tokens.", "model.decoder.embed_tokens."),
                      ("model.embed_positions.", "model.decoder.embed_positions."),
                      ("model.layers.", "model.decoder.layers."),
                      ("model.norm.", "model.decoder.final_layer_norm.")) + _FAIRSEQ_BLOCK),
    # GPT-Neo (gpt-neo-125m / 1.3B / 2.7B): learned positions, LayerNorms with biases, no q / k / v
    # biases, unscaled attention scores, "local" layers of window_size keys beside "global" ones
    # (attention_layers), an MLP of 4 x hidden_size without a gate (c_fc / c_proj, the tanh
    # GELU), tied
    "gpt_neo": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                      layer_norm=True, norm_bias=True, eps_field="layer_norm_epsilon",
                      bias_fields=(None, True, True), learned_positions=True, ffn_default=4,
                      act_field="activation_function", unscaled_attention=True,
                      local_layers=True, checkpoint_prefix="transformer.",
                      checkpoint_names=_GPT2_OUTER + (
                          (".self_attn.o_proj.", ".attn.attention.out_proj."),
                          (".self_attn.", ".attn.attention.")) + _GPT2_MLP),
    # XGLM (xglm-564M ... 7.5B): OPT's blocks -- LayerNorms (eps 1e-5) with biases before the
    # blocks, biases everywhere, an MLP of ffn_dim without a gate (fc1 / fc2, the erf GELU) --
    # with fixed sinusoidal positions from row 2, the embedded rows times sqrt(d_model)
    # (scale_embedding), tied
    "xglm": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False,
                   layer_norm=True, norm_bias=True, eps_field=1e-5, bias_fields=(True, True, True),
                   learned_positions=True, sinusoidal_positions=True, position_offset=2,
                   ffn_field="ffn_dim", act_field="activation_function",
                   embed_scale_field="scale_embedding",
                   refuse=(("add_cross_attention", "cross-attention"),),
                   checkpoint_names=(("model.norm.", "model.layer_norm."),) + _FAIRSEQ_BLOCK),
    # BioGPT (biogpt, BioGPT-Large): OPT's blocks -- learned positions at row p + 2, LayerNorms
    # with biases before the blocks, biases everywhere -- with the erf GELU, the embedded rows
    # times sqrt(hidden_size) (scale_embedding), tied (output_projection)
    "biogpt": Family(qkv_bias=True, qk_norm=False, window_field=None, gated=False,
                     layer_norm=True, norm_bias=True, eps_field="layer_norm_eps",
                     bias_fields=(True, True, True), learned_positions=True, position_offset=2,
                     embed_scale_field="scale_embedding", checkpoint_names=(
                         ("model.embed_tokens.", "biogpt.embed_tokens."),
                         ("model.embed_positions.", "biogpt.embed_positions."),
                         ("model.layers.", "biogpt.layers."),
                         ("model.norm.", "biogpt.layer_norm."),
                         ("lm_head.", "output_projection.")) + _FAIRSEQ_BLOCK),
    # GPT-J (gpt-j-6b): _GPTJ above
    "gptj": _GPTJ,
    # CodeGen (codegen-350M / 2B / 6B / 16B, mono / multi / nl): GPT-J's blocks and tensor names,
    # q|v|k fused in the 4 blocks of its model-parallel training (qkv_proj)
    "codegen": dataclasses.replace(_GPTJ, qkv_grouped=(4, "qvk")),
    # Jais 2: LayerNorms with biases, an MLP without a gate (relu^2), biases by attention_bias /
    # mlp_bias
    "jais2": Family(qkv_bias=False, qk_norm=False, window_field=None, gated=False,
                    layer_norm=True, norm_bias=True, eps_field="layer_norm_eps"),
    # Gemma (1): (1 + w) RMSNorms, sqrt(d)-scaled embeddings, the tanh GELU gate (GeGLU),
    # head_dim 256 apart from hidden_size / heads, tied; Gemma 2 / 3's extra norms are another
    # model_type (unsupported)
    "gemma": Family(qkv_bias=False, qk_norm=False, window_field=None, gemma_norms=True),
    # Gemma 2: Gemma's norms and embedding scale, norms after the attention and the MLP too, the
    # query_pre_attn_scalar scale, soft-capped attention scores and logits, sliding-window and
    # full layers in turn
    "gemma2": Family(qkv_bias=False, qk_norm=False, window_field=None, gemma_norms=True,
                     norms=_GEMMA_POST, query_scalar=True),
    # VaultGemma (vaultgemma-1b): Gemma 2 without its norms after the blocks
    "vaultgemma": Family(qkv_bias=False, qk_norm=False, window_field=None, gemma_norms=True,
                         norms=_GEMMA_POST[:2] + (None, None), query_scalar=True),
    # Gemma 3 (its text model: gemma-3-270m / 1b, or a multimodal one's language model): Gemma's
    # norms and embedding scale, norms after the attention and the MLP too, (1 + w) q / k
    # RMSNorms, the query_pre_attn_scalar scale, sliding-window layers with a RoPE of their own
    "gemma3_text": Family(qkv_bias=False, qk_norm=True, window_field=None, gemma_norms=True,
                          norms=_GEMMA_POST, query_scalar=True, local_rope=True),
    # GLM-4-0414 (GLM-4-9B-0414, GLM-Z1): GLM's layout (fused gate|up, interleaved half RoPE,
    # q / k / v biases) with norms after the attention and the MLP
    "glm4": Family(qkv_bias=False, qk_norm=False, window_field=None, fused=True,
                   partial_rotary=True, interleaved_rope=True,
                   bias_fields=("attention_bias", None, None), norms=_GLM4_NORMS),
    # EXAONE 4: norms after the attention and the MLP and none before, q / k RMSNorms, the
    # full-attention layers without RoPE where the config sets a sliding window
    "exaone4": Family(qkv_bias=False, qk_norm=True, window_field=None, norms=_POST_ONLY,
                      full_layers_nope=True),
    # OLMo 2 / 3: norms after the blocks and none before, q / k norms over all heads at once;
    # OLMo 3 adds sliding-window layers with a RoPE of their own
    "olmo2": Family(qkv_bias=False, qk_norm=True, window_field=None, norms=_POST_ONLY,
                    qk_norm_full=True),
    "olmo3": Family(qkv_bias=False, qk_norm=True, window_field=None, norms=_POST_ONLY,
                    qk_norm_full=True, local_rope=True),
    # the language models of vision-language wrappers (TEXT_OF) that have model types of their
    # own -- Qwen2-VL / Qwen2.5-VL's: Qwen2's layout; Qwen3-VL's: Qwen3's (its deepstack adds
    # visual features to image tokens only); GLM-4.1V's: GLM-4-0414's, q / k / v biases always,
    # its mrope on interleaved pairs of the rotated part of each head
    **{mt: Family(qkv_bias=True, qk_norm=False, window_field="use_sliding_window", mrope=True)
       for mt in ("qwen2_vl_text", "qwen2_5_vl_text")},
    "qwen3_vl_text": Family(qkv_bias=False, qk_norm=True, window_field="use_sliding_window",
                            mrope=True),
    # Qwen3-VL-MoE's (Qwen3-VL-30B-A3B, -235B-A22B): Qwen3-MoE's layers under Qwen3-VL's
    # multimodal RoPE, the routed weights always renormalized (its config has no norm_topk_prob)
    "qwen3_vl_moe_text": Family(qkv_bias=False, qk_norm=True, window_field=None, mrope=True,
                                experts=Experts(renorm=True)),
    # GLM-4.5V's: GLM-4.5's layers (glm4_moe) under the multimodal RoPE (rotate-half pairs)
    "glm4v_moe_text": Family(qkv_bias=False, qk_norm="use_qk_norm", window_field=None,
                             partial_rotary=True, mrope=True,
                             bias_fields=("attention_bias", None, None),
                             experts=_DEEPSEEK_EXPERTS, checkpoint_names=_SHARED_EXPERTS),
    # Qwen3.5 (its VLM wrapper qwen3_5): three Gated DeltaNet layers to each attention layer,
    # whose q_proj carries a sigmoid gate on each head's output; q / k norms, a quarter of each
    # head rotated (the multimodal RoPE: text positions), every RMSNorm by (1 + weight) but the
    # DeltaNet's own gated one
    "qwen3_5_text": Family(qkv_bias=False, qk_norm=True, window_field=None, partial_rotary=True,
                           mrope=True, norms_plus_one=True, linear_attn=True),
    "glm4v_text": Family(qkv_bias=True, qk_norm=False, window_field=None, fused=True,
                         partial_rotary=True, interleaved_rope=True, mrope=True,
                         bias_fields=(None, None, None), norms=_GLM4_NORMS),
}

# ModelSpec.alibi's kinds (the attention body's ALIBI constexpr)
ALIBI_BLOOM, ALIBI_FALCON = 1, 2

# the families whose config classes tie the embeddings by default (tie_word_embeddings True):
# a config.json without the key means it (transformers 4 writes only the keys that differ from
# the base class's default, True; a test reads each class's default)
TIED_BY_DEFAULT = frozenset({"ernie4_5", "smollm3", "starcoder2", "cohere", "cohere2", "gpt2",
                             "gpt_bigcode", "falcon", "opt", "gemma", "gemma2", "vaultgemma",
                             "gemma3_text", "bloom", "mpt", "biogpt", "gpt_neo", "xglm",
                             "qwen3_vl_moe_text", "ernie4_5_moe"})

# vision-language models whose language model (text_config) is a supported family: it decodes
# alone (no image is read; Mistral Small 3.x, LLaVA and LLaVA-NeXT / OneVision, Gemma 3 4B and
# up, Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3-VL-MoE, GLM-4.1V / 4.5V, InternVL 3 in HF's format,
# Idefics3 / SmolVLM), packing.text_model_getter finding its tensors. (PaliGemma's prompt
# attends both ways: not among them.)
TEXT_OF = ("mistral3", "llava", "llava_next", "llava_onevision", "gemma3", "qwen2_vl",
           "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe", "internvl", "idefics3",
           "smolvlm", "qwen3_5")
# why some model types a user may try are not supported (UnsupportedModelError says it)
UNSUPPORTED = {
    **{mt: "a mixture of experts whose router or experts differ from those supported"
       for mt in ("llama4_text", "dbrx")},
    **{mt: "multi-head latent attention (MLA)" for mt in ("deepseek_v2", "deepseek_v3")},
    **{mt: "a vision-language model (its text model alone is not read)" for mt in (
        "llama4",)},
    **{mt: "linear-attention (Gated DeltaNet) layers over a mixture of experts" for mt in (
        "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text")},
    **{mt: "state-space (Mamba) layers" for mt in ("jamba", "bamba", "zamba", "zamba2",
                                                    "falcon_h1", "nemotron_h", "falcon_mamba",
                                                    "mamba", "mamba2")},
    **{mt: "per-layer head sizes, KV shared across layers and per-layer input embeddings"
       for mt in ("gemma4", "gemma4_text", "gemma3n", "gemma3n_text")},
    **{mt: "attention sinks" for mt in ("granite_swa",)},
    **{mt: "short convolution layers" for mt in ("lfm2",)},
    **{mt: "q / k LayerNorms with biases" for mt in ("persimmon", "fuyu")},
    **{mt: "LayerNorms after the residual add" for mt in ("openai-gpt",)},
}
# config fields that only a mixture of experts sets: a model type of neither table with one of
# them is named one in the error
MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
# HF's hidden_act names -> ModelSpec.act (the MLP's activation: triton_kernels.gemv.ACT_CODES)
# (gelu_fast is gelu_new's formula, written differently: the tanh GELU)
ACTS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
        "gelu_fast": "gelu_tanh", "relu2": "relu2", "gelu": "gelu", "relu": "relu",
        "xielu": "xielu"}
# freq_factors: llama.cpp's per-frequency divisors (a GGUF's rope_freqs tensor, which Llama-3.x
# files carry in place of their llama3 rope_scaling; loading.gguf_config), rope["factors"]
# longrope: Phi-3's long-context checkpoints (short / long per-frequency factors; "su" in older
# configs), whose factors HF picks per forward: ModelSpec.longrope_orig
# ntk_alpha: HunYuan's base stretch, theta x alpha ^ (head_dim / (head_dim - 2)) (Family.alpha_rope)
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "freq_factors", "longrope", "ntk_alpha")


@dataclass(frozen=True)
class ModelSpec:
    family: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    rms_eps: float
    rope_theta: float
    rope: dict = field(default_factory=lambda: {"rope_type": "default"})
    attn_bias: bool = False   # bias on q, k, v
    o_bias: bool = False      # bias on o_proj
    mlp_bias: bool = False    # bias on gate, up, down
    qk_norm: bool = False
    tied: bool = False
    layer_windows: tuple = ()  # per layer: 0 full attention; W keys in (p - W, p]
    max_position: int = 1 << 30
    # HF's int(head_dim * partial_rotary_factor), the frequencies' denominator (odd allowed: HF
    # then rotates one dim more, rot); 0: the whole head
    rotary_dim: int = 0
    rope_interleaved: bool = False  # HF's RoPE pairs are (2i, 2i + 1) (Family.interleaved_rope)
    nope_layers: tuple = ()  # the layers without RoPE (Family.nope_field; state.RopeTables)
    qk_norm_after: bool = False  # the q / k norm after RoPE (Family.qk_norm_after_rope)
    act: str = "silu"  # the MLP's activation (ACTS' values: triton_kernels.gemv.ACT_CODES)
    gated: bool = True  # the MLP is down(act(gate) * up); False: down(act(up)) (Family.gated)
    text_of: str = ""  # the vision-language model_type (TEXT_OF) whose language model this is
    # RMSNorms after the attention and the MLP, before the residual add (Family.norms): each
    # block's output is normalized whole, so its row-parallel sums go through REDUCE tasks
    post_norms: bool = False
    pre_norms: bool = True  # RMSNorms before the attention and the MLP (EXAONE 4: none)
    qk_norm_full: bool = False  # the q / k norms over all heads at once (Family.qk_norm_full)
    # the sliding-window layers' rope dict ({}: they rotate as the others; Family.local_rope)
    local_rope: dict = field(default_factory=dict)
    # soft-capping, cap tanh(x / cap) (0: none): of the attention scores (after the scale) and
    # of the logits (Gemma 2's attn_logit_softcapping / final_logit_softcapping)
    attn_softcap: float = 0.0
    logit_softcap: float = 0.0
    # (beta, original context): each query scaled by 1 + beta ln(1 + floor(p / orig)) at position
    # p -- exactly 1 below orig (Ministral 3's llama_4_scaling_beta); (): none
    q_pos_scale: tuple = ()
    # NanoChat (Family.embed_norm / rope_flipped): the embedded rows RMS-normalized (no weight),
    # and RoPE rotating by -theta (rope_table's sin negated)
    embed_norm: bool = False
    rope_flipped: bool = False
    # learned absolute positions (Family.learned_positions): a table of max_position rows added
    # to each embedded row (PackedWeights.pos_embed), every layer without RoPE (nope_layers)
    learned_positions: bool = False
    # ALiBi (Family.alibi), every layer without RoPE (nope_layers): 0 none; ALIBI_BLOOM head h's
    # scores plus alibi_slopes()[h] times the key's position j; ALIBI_FALCON (q . k + bf16(
    # slope j)) / sqrt(head_dim), slopes rounded to bf16 -- HF's Falcon rounds its bias so
    # (build_alibi_tensor: slopes.bfloat16() * positions), whatever the model's dtype
    alibi: int = 0
    alibi_mpt: bool = False  # MPT's slopes (Family.alibi_mpt: alibi_slopes)
    # the attention and the MLP both read the layer's input (Family.parallel): the gate|up
    # tasks run before o_proj's (graph.build_step), reading the residual stream before o_proj
    # adds to it; down adds after
    parallel: bool = False
    # LayerNorms (Family.layer_norm): packing centers the embedding rows and the o_proj / down
    # outputs (weights and biases), so the residual stream's mean is 0 and each LayerNorm is the
    # kernels' RMSNorm; its bias folded into the q / k / v and gate|up biases (attn_bias,
    # mlp_bias) and, the final norm's, into a bias on the logits (head_bias: PackedWeights.b_head)
    layer_norm: bool = False
    head_bias: bool = False
    # Granite's multipliers (Family.multipliers): the embedding rows times embed_scale as they are
    # looked up (Gemma's sqrt(d) too); folded into the packed weights, o_proj / down (and
    # biases) times residual_scale -- with norms after the blocks, which it follows (HyperCLOVAX),
    # those norms' weights -- the q rows times attn_scale * sqrt(head_dim) (the kernels'
    # scale is head_dim ** -0.5; 0: no attn_scale), the lm_head times logits_scale
    embed_scale: float = 1.0
    residual_scale: float = 1.0
    attn_scale: float = 0.0
    logits_scale: float = 1.0
    # a mixture of experts (Family.experts): each layer's MLP is the top_k of n_experts experts
    # of expert_ffn width picked per token (their softmax weights renormalized where
    # norm_topk), plus -- where ffn_dim > 0 -- a shared expert of ffn_dim width gated by
    # sigmoid(x . w_sg) (Qwen2-MoE); 0: a dense MLP of ffn_dim
    n_experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    norm_topk: bool = False
    # layers whose MLP is dense among the expert layers (Qwen's mlp_only_layers, DeepSeek's
    # first_k_dense_replace: _dense_layers), each down(act(gate x) * up x) of dense_ffn width
    # (PackedWeights.w_dense_gu / w_dense_down); the expert stacks hold the other layers only
    # (expert_index)
    dense_layers: tuple = ()
    dense_ffn: int = 0
    # the router (reference.route): sigmoid scores (else a softmax), a choice bias
    # (PackedWeights.b_choice), picks limited to the topk_group best of n_group expert groups
    # (expert_groups), the weights times routed_scale
    router_sigmoid: bool = False
    choice_bias: bool = False
    expert_groups: tuple = (1, 1)
    routed_scale: float = 1.0
    router_fp32: bool = False  # w_router packed in fp32 whatever the weights' (Experts')
    expert_bias: bool = False  # the router and the experts carry biases (Experts.oai)
    # attention sinks (Family.sinks): each q head's learned logit s_h joins its softmax as a key
    # without a value, o = sum_j e^(x_j) v_j / (e^(s_h) + sum_j e^(x_j))
    attn_sinks: bool = False
    # Gated DeltaNet layers (Family.linear_attn; reference.gdn_block): each reads x = the
    # normed row through in_proj [q | k | v | z | b | a] rows, a causal depthwise convolution of
    # its last gdn[4] q|k|v rows (SiLU), L2-normed q / k, and a recurrent state S [nv, dk, dv]
    # per layer: S <- e^g S + k (beta (v - S^T k))^T, o = S^T q / sqrt(dk), then o's RMSNorm
    # times SiLU(z), out_proj. gdn = (nk, nv, dk, dv, conv kernel); the attention stacks (w_qkv,
    # w_o, the KV cache) hold the other layers only (attn_index)
    linear_layers: tuple = ()
    gdn: tuple = ()
    # the attention's output times sigmoid(its gate rows' x @ W_gate^T) before o_proj (Qwen3.5's
    # attention layers: PackedWeights.w_gate)
    attn_gate: bool = False

    @property
    def attn_layers(self) -> tuple:
        """The layers with attention (the w_qkv / w_o / KV cache stacks' layers): all but the
        linear-attention ones."""
        return tuple(l for l in range(self.n_layers) if l not in self.linear_layers)

    def attn_index(self, l: int) -> int:
        """Attention layer l's place in the attention stacks (w_qkv, w_o, the KV cache): l but
        for the linear-attention layers before it (theirs: lin_index)."""
        return l - sum(x < l for x in self.linear_layers)

    def lin_index(self, l: int) -> int:
        """Layer l's place in the Gated DeltaNet stacks (linear_layers)."""
        return self.linear_layers.index(l)

    @property
    def gdn_dims(self) -> tuple:
        """(key_dim nk dk, value_dim nv dv, conv_dim 2 key_dim + value_dim, in_proj rows
        conv_dim + value_dim + 2 nv) of a Gated DeltaNet layer."""
        nk, nv, dk, dv, _ = self.gdn
        kd, vd = nk * dk, nv * dv
        return kd, vd, 2 * kd + vd, 2 * kd + 2 * vd + 2 * nv

    @property
    def qk_layer_norm(self) -> bool:
        """The q / k norms are LayerNorms without a bias -- a layer_norm family's (StableLM's
        qk_layernorm, Cohere's use_qk_norm): packing centers each q / k head's rows of the
        projection (packing.head_centered_getter), so the kernels' per-head RMSNorm is the
        LayerNorm."""
        return self.qk_norm and self.layer_norm

    @property
    def q_scale(self) -> float:
        """What the packed q rows are multiplied by (attn_scale folded in)."""
        return self.attn_scale * math.sqrt(self.head_dim) if self.attn_scale else 1.0

    @property
    def shares_head(self) -> bool:
        """The lm_head is the embedding's tensor: tied, and the logits unscaled (an embedding
        scale applies at lookup: PackedWeights.embed_scale; normalized or centered rows do
        not)."""
        return self.tied and self.logits_scale == 1.0 and not (self.embed_norm or self.layer_norm)

    @property
    def rot(self) -> int:
        """Rotated dims of a head: HF rotates pairs (i, i + rot/2) -- or, interleaved, (2i,
        2i + 1) -- for i < rot/2 and passes [rot, head_dim) through. The kernels rotate pairs
        (i, i + head_dim/2): packing.pack permutes q / k rows (rope_permutation) so those pairs
        are HF's and the rest sit where rope_inv_freq is 0 (cos 1, sin 0: passed through
        exactly). An odd rotary_dim d rotates d + 1 dims, as HF's (ceil(d / 2) frequencies)."""
        return 2 * -(-self.rotary_dim // 2) if self.rotary_dim else self.head_dim

    def rope_permutation(self) -> torch.Tensor | None:
        """perm [head_dim]: packed q / k dim j holds HF's dim perm[j] (None: the identity).
        Kernel pair (i, i + hd/2) is HF's i-th rotated pair for i < rot/2, and two of the
        passed-through dims [rot, hd) otherwise."""
        hd, r = self.head_dim, self.rot
        if r == hd and not self.rope_interleaved:
            return None
        half, i = hd // 2, torch.arange(r // 2)
        a, b = (2 * i, 2 * i + 1) if self.rope_interleaved else (i, i + r // 2)
        pas = torch.arange(r, hd).view(2, half - r // 2)  # passed through: half into each half
        return torch.cat([a, pas[0], b, pas[1]])

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA ratio)."""
        return self.n_heads // self.n_kv_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def qkv_dim(self) -> int:
        return self.q_dim + 2 * self.kv_dim

    @property
    def moe(self) -> bool:
        """The MLPs are mixtures of experts (n_experts of them), but dense_layers'."""
        return self.n_experts > 0

    @property
    def expert_layers(self) -> tuple:
        """The layers whose MLP is a mixture of experts, in order (the expert stacks' layers)."""
        return tuple(l for l in range(self.n_layers) if l not in self.dense_layers) \
            if self.moe else ()

    @property
    def mlp_layers(self) -> tuple:
        """The layers of the w_gu / w_down stacks: a mixture's expert layers (its shared
        expert's), else every layer."""
        return self.expert_layers if self.moe else tuple(range(self.n_layers))

    def expert_index(self, l: int) -> int:
        """Layer l's place in the expert stacks (router, experts, shared expert); -1: a dense
        layer (dense_index)."""
        return -1 if l in self.dense_layers else l - sum(d < l for d in self.dense_layers)

    def dense_index(self, l: int) -> int:
        """Layer l's place in the dense MLP stacks of a mixture (dense_layers)."""
        return self.dense_layers.index(l)

    def mlp_index(self, l: int) -> int:
        """Layer l's place in the stacks of its MLP: a mixture's dense layer's in the dense
        stacks (dense_index), an expert layer's in the expert stacks (expert_index); a dense
        model's, l."""
        return self.dense_index(l) if l in self.dense_layers else self.expert_index(l) \
            if self.moe else l

    def weight_bytes_per_token(self, elt: int = 2, all_experts: bool = False,
                               expert_elt: float | None = None,
                               matrix_elt: float | None = None) -> int:
        """Bytes a decode step must stream: every layer matrix, the lm_head, norms (embedding row
        ignored); of a mixture of experts, the router, the top_k experts and the shared one
        (all_experts: every expert -- the packed weights' size). expert_elt: bytes a routed
        expert's weight element where they differ from elt (quant.MXFP4_BYTES); matrix_elt:
        bytes a dense layer matrix's element takes where they differ (FP8 rows: quant.FP8_BYTES)."""
        norms = 2 * self.post_norms + 2 * self.pre_norms
        picked = self.n_experts if all_experts else self.top_k
        moe = len(self.expert_layers)  # the layers with experts (all of them, but dense_layers)
        routed = 3 * picked * self.expert_ffn * self.d_model * moe
        mlp = (2 + self.gated) * self.d_model  # an MLP's bytes a unit of its width
        attn = (self.qkv_dim + self.attn_gate * self.q_dim) * self.d_model \
            + self.d_model * self.q_dim
        matrices = len(self.attn_layers) * attn \
            + mlp * (self.ffn_dim * len(self.mlp_layers) + self.dense_ffn * len(self.dense_layers))
        if self.linear_layers:  # in_proj, out_proj; the convolution's taps, the norm's weights
            _, vd, conv, rows = self.gdn_dims
            matrices += len(self.linear_layers) * (
                (rows + vd) * self.d_model + conv * self.gdn[4] + self.gdn[3])
        routers = (self.n_experts + (self.ffn_dim > 0)) * self.d_model * moe
        return elt * (self.n_layers * norms * self.d_model + routers
                      + self.vocab_size * self.d_model + self.d_model) \
            + round(matrices * (elt if matrix_elt is None else matrix_elt)) \
            + round(routed * (elt if expert_elt is None else expert_elt))

    def kv_bytes(self, seq_len: int, elt: int = 2) -> int:
        """Bytes of KV cache attention reads at context length seq_len."""
        return elt * 2 * len(self.attn_layers) * self.kv_dim * seq_len

    # ---- tensor parallelism: the sizes of one rank's shard (distributed.py says how it shards)
    def check_tp(self, world: int):
        """tp must divide the heads and the FFN (a mixture's: every expert's width, and its
        shared expert's), and divide the KV heads or be a multiple of them (then each KV head is
        replicated on tp / num_key_value_heads ranks)."""
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise TensorParallelError(f"tensor-parallel size must be a positive integer, got "
                                      f"{world!r}")
        if world > 1 and self.linear_layers:
            raise TensorParallelError(f"{self.family}: tensor parallelism over Gated DeltaNet "
                                      "layers is not supported (tp=1)")
        widths = (("the experts' intermediate size", self.expert_ffn),
                  ("the shared expert's intermediate size", self.ffn_dim),
                  ("the dense layers' intermediate_size", self.dense_ffn)) if self.moe else \
            (("intermediate_size", self.ffn_dim),)
        for what, n in (("num_attention_heads", self.n_heads), *widths):
            if n % world:
                raise TensorParallelError(f"tp={world} does not divide {what}={n}")
        if self.qk_norm_full and world > 1:
            raise TensorParallelError(f"{self.family}: its q / k norms span every head, which "
                                      f"tp={world} splits over ranks (tensor parallelism is not "
                                      "supported for it)")
        kvh = self.n_kv_heads
        if kvh % world and world % kvh:
            raise TensorParallelError(
                f"tp={world} neither divides num_key_value_heads={kvh} nor is a multiple of it "
                f"(KV heads are split over ranks, or each replicated on tp / {kvh} ranks)")

    def kv_heads_of(self, rank: int, world: int) -> tuple[int, int]:
        """Rank `rank`'s KV heads [k0, k1): its share when tp divides the KV heads, else the one
        KV head its q heads read (replicated on world / num_key_value_heads ranks)."""
        k0 = rank * self.n_kv_heads // world
        return k0, k0 + max(1, self.n_kv_heads // world)

    def vocab_range(self, rank: int, world: int) -> tuple[int, int]:
        return vocab_range(self.vocab_size, rank, world)

    def shard(self, rank: int, world: int) -> "ModelSpec":
        self.check_tp(world)
        v0, v1 = self.vocab_range(rank, world)
        return dataclasses.replace(self, n_heads=self.n_heads // world,
                                   n_kv_heads=max(1, self.n_kv_heads // world),
                                   ffn_dim=self.ffn_dim // world,
                                   expert_ffn=self.expert_ffn // world,
                                   dense_ffn=self.dense_ffn // world, vocab_size=v1 - v0)

    @property
    def longrope_orig(self) -> int | None:
        """longrope: the original context (original_max_position_embeddings). HF's rotary
        embedding uses the long factors in a forward whose last position is >= it, the short ones
        otherwise, and its generate re-encodes the whole cache with the long factors when a
        sequence first grows past it (Phi3ForCausalLM.prepare_inputs_for_generation):
        Runtime.rope_call does the same. None: any other rope."""
        if self.rope.get("rope_type") != "longrope":
            return None
        return int(self.rope["original_max_position_embeddings"])

    def alibi_slopes(self) -> torch.Tensor:
        """ALiBi's slope of each q head, fp32 [n_heads] (this spec's: a shard's are the first
        ones; packing slices the whole model's): with p the largest power of two <= n_heads, head
        i < p has 2^(-8 (i + 1) / p), the rest every second power of 2^(-4 / p) -- BLOOM's
        (transformers' _get_alibi_slopes, op for op in fp32); rounded to bf16 for
        ALIBI_FALCON. alibi_mpt: MPT's, 2^(-8 i / P) for i = 1..P (P the power of two >= n_heads;
        its alibi_bias_max 8, which transformers' MPT always takes), the odd i then the even
        ones, the first n_heads (build_mpt_alibi_tensor)."""
        n = self.n_heads
        if self.alibi_mpt:
            P = 2 ** math.ceil(math.log2(n))
            slopes = 1.0 / torch.pow(2, torch.arange(1, P + 1, dtype=torch.int64).float() * (8 / P))
            return torch.cat([slopes[1::2], slopes[::2]])[:n] if P != n else slopes
        p = 2 ** math.floor(math.log2(n))
        base = torch.tensor(2 ** (-(2 ** -(math.log2(p) - 3))), dtype=torch.float32)
        slopes = torch.pow(base, torch.arange(1, 1 + p, dtype=torch.int32))
        if p != n:
            extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * p) - 3))), dtype=torch.float32)
            odd = torch.arange(1, 1 + 2 * min(p, n - p), 2, dtype=torch.int32)
            slopes = torch.cat([slopes, torch.pow(extra, odd)])
        return slopes.bfloat16().float() if self.alibi == ALIBI_FALCON else slopes

    def rope_inv_freq(self, long: bool = False) -> torch.Tensor:
        """Inverse frequencies [head_dim/2] fp32, with the config's scaling; over the rotated
        dims (rot) only, as HF's -- the rest 0 (rope_permutation). long: a longrope's long
        factors (else its short ones). Computed as transformers computes them, op for op in fp32
        (the same bits on a CPU): where attention logits are large, their last-ulp differences
        (an fp64 computation's) became 1e-4 of the logits (a 2-wide hidden state, hypothesis)."""
        hd = self.rotary_dim or self.head_dim  # HF's dim: the frequencies' denominator
        kind = self.rope.get("rope_type", "default")
        theta = self.rope_theta
        if kind == "ntk_alpha":
            theta = theta * float(self.rope["alpha"]) ** (hd / (hd - 2))
        base = theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)
        inv = 1.0 / base
        if kind == "linear":
            inv = inv / float(self.rope["factor"])
        elif kind == "llama3":
            factor = float(self.rope["factor"])
            lo, hi = float(self.rope["low_freq_factor"]), float(self.rope["high_freq_factor"])
            old = float(self.rope["original_max_position_embeddings"])
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > old / lo, inv / factor, inv)
            smooth = (old / wavelen - lo) / (hi - lo)
            mid = (1 - smooth) * scaled / factor + smooth * scaled
            is_mid = (wavelen >= old / hi) & (wavelen <= old / lo)
            inv = torch.where(is_mid, mid, scaled)
        elif kind == "freq_factors":
            inv = inv / torch.tensor(self.rope["factors"], dtype=torch.float32)
        elif kind == "longrope":
            ext = self.rope["long_factor" if long else "short_factor"]
            inv = 1.0 / (torch.tensor(ext, dtype=torch.float32) * base)
        elif kind == "yarn":
            # YaRN (arXiv 2309.00071), as transformers' _compute_yarn_parameters: frequencies
            # that turn fewer than beta_slow times over the original context are interpolated
            # (/ factor), more than beta_fast times kept, a linear ramp between
            old = self._yarn_original()
            betas = (float(self.rope.get("beta_fast") or 32), float(self.rope.get("beta_slow") or 1))
            lo, hi = (hd * math.log(old / (b * 2 * math.pi)) / (2 * math.log(self.rope_theta))
                      for b in betas)
            if self.rope.get("truncate", True):
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, hd - 1)
            ramp = ((torch.arange(hd // 2, dtype=torch.float32) - lo)
                    / (hi - lo if hi != lo else 0.001)).clamp(0, 1)
            keep = 1 - ramp  # HF's extrapolation factor
            inv = 1.0 / (self._yarn_factor() * base) * (1 - keep) + inv * keep
        return torch.cat([inv, torch.zeros((self.head_dim - self.rot) // 2)])

    def _yarn_original(self) -> float:
        return float(self.rope.get("original_max_position_embeddings") or self.max_position)

    def _yarn_factor(self) -> float:
        return float(self.rope.get("factor") or self.max_position / self._yarn_original())

    def rope_attention_factor(self) -> float:
        """The factor HF multiplies cos and sin by (its attention_scaling): 1 but for YaRN, whose
        attention_factor defaults to 0.1 ln(factor) + 1 (or the mscale / mscale_all_dim ratio),
        and longrope: sqrt(1 + ln(factor) / ln(original context)), factor the config's or
        max_position_embeddings / the original context."""
        kind = self.rope.get("rope_type")
        if kind not in ("yarn", "longrope"):
            return 1.0
        if self.rope.get("attention_factor") is not None:
            return float(self.rope["attention_factor"])
        if kind == "longrope":
            orig = self.longrope_orig
            factor = float(self.rope.get("factor") or self.max_position / orig)
            return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
        factor = self._yarn_factor()
        g = lambda m: 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0  # noqa: E731
        ms, ms_all = self.rope.get("mscale"), self.rope.get("mscale_all_dim")
        return g(float(ms)) / g(float(ms_all)) if ms and ms_all else g(1.0)

    def sliding_rope(self) -> "ModelSpec | None":
        """The spec whose rope_table is the sliding-window layers' (local_rope; None: they
        rotate as the others)."""
        if not self.local_rope:
            return None
        return dataclasses.replace(self, rope=self.local_rope, local_rope={},
                                   rope_theta=float(self.local_rope.get("rope_theta") or 1e4))

    def rope_table(self, max_seq_len: int, long: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin tables [max_seq_len, head_dim/2] fp32, computed as HF does (fp32 outer product,
        times rope_attention_factor). longrope: the long factors' at every position if long, else
        the short factors' below the original context and the long ones from it on (a forward
        that reaches a position past it uses the long ones)."""
        pos = torch.arange(max_seq_len, dtype=torch.float32)
        freqs = torch.outer(pos, self.rope_inv_freq(long))
        orig = self.longrope_orig
        if orig is not None and not long:
            freqs[orig:] = torch.outer(pos[orig:], self.rope_inv_freq(True))
        cos, sin = freqs.cos(), freqs.sin()
        if self.rope_flipped:  # a rotation by -theta (NanoChat's rotate_half)
            sin = -sin
        att = self.rope_attention_factor()  # 1.0 (exact) but for YaRN and longrope
        if att != 1.0:  # on the rotated pairs: the passed-through dims keep cos 1, sin 0
            cos[:, :self.rot // 2] *= att
            sin[:, :self.rot // 2] *= att
        return cos, sin

    @classmethod
    def from_hf_config(cls, cfg) -> "ModelSpec":
        mt = getattr(cfg, "model_type", None)
        text = getattr(cfg, "text_config", None)
        if mt in TEXT_OF and text is not None:
            try:
                spec = cls.from_hf_config(SimpleNamespace(**text) if isinstance(text, dict)
                                          else text)
            except UnsupportedModelError as e:
                raise UnsupportedModelError(f"{mt}'s language model: {e}") from None
            tied = getattr(cfg, "tie_word_embeddings", None)  # the wrapper's, as HF ties it
            return dataclasses.replace(spec, text_of=mt,
                                       tied=spec.tied if tied is None else bool(tied))
        if mt not in FAMILIES:
            why = f" ({UNSUPPORTED[mt]})" if mt in UNSUPPORTED else \
                " (a mixture of experts)" if any(getattr(cfg, f, None) for f in MOE_FIELDS) else ""
            raise UnsupportedModelError(f"model_type {mt!r} is not supported{why}; fastdecode "
                                        f"supports {sorted(FAMILIES)}")
        fam = FAMILIES[mt]
        moe = [f for f in MOE_FIELDS if getattr(cfg, f, None)]
        if moe and not fam.experts:  # (a Mixtral GGUF file reads as a llama config with them)
            raise UnsupportedModelError(f"{mt}: its config sets {moe[0]}={getattr(cfg, moe[0])!r}"
                                        f" -- a mixture of experts, which fastdecode reads from "
                                        f"{sorted(m for m, f in FAMILIES.items() if f.experts)} "
                                        "configs only")
        if fam.nested:
            cfg = _Nested(cfg, fam.nested)
        act = getattr(cfg, fam.act_field, None) or fam.act_default
        if fam.gemma_norms:  # the released config.json files say "gelu" and mean the tanh GELU
            # (HF's GemmaConfig rewrites it; transformers 4.x read hidden_activation first)
            act = getattr(cfg, "hidden_activation", None) or \
                ("gelu_pytorch_tanh" if act == "gelu" else act)
        if act not in ACTS:
            raise UnsupportedModelError(f"{mt}: hidden_act={act!r} is not supported "
                                        f"({sorted(ACTS)})")
        if ACTS[act] == "xielu" and (fam.gated or fam.norm_bias or
                                     _config_flag(cfg, fam.bias_fields[2])):
            raise UnsupportedModelError(f"{mt}: xIELU in an MLP with a gate or biases is not "
                                        "supported (its parameters take the bias operand)")
        rope, local = _rope_params(cfg, fam)
        rope = _rope_kind(mt, fam, rope)
        kind = rope["rope_type"]
        if local:
            local = _rope_kind(mt, fam, local)
            if local["rope_type"] == "longrope":
                raise UnsupportedModelError(f"{mt}: a longrope on the sliding-window layers is "
                                            "not supported")
        caps = [float(getattr(cfg, f, None) or 0.0) for f in ("attn_logit_softcapping",
                                                              "final_logit_softcapping")]
        if min(caps) < 0:
            raise UnsupportedModelError(f"{mt}: a negative soft-capping {caps}")
        for flag, what in fam.refuse:
            if getattr(cfg, flag, None):
                raise UnsupportedModelError(f"{mt}: {flag}={getattr(cfg, flag)!r} ({what}) is "
                                            "not supported")
        for flag, what in fam.require:
            if not getattr(cfg, flag, True):
                raise UnsupportedModelError(f"{mt}: {flag}={getattr(cfg, flag)!r} ({what}) is "
                                            "not supported")
        pad = getattr(cfg, "pad_token_id", None)
        if fam.sinusoidal_positions and isinstance(pad, int) and pad >= fam.position_offset:
            raise UnsupportedModelError(f"{mt}: pad_token_id={pad} zeroes position "
                                        f"{pad - fam.position_offset}'s sinusoidal row (HF's "
                                        "padding_idx) -- not supported")
        for flag, other, what in fam.require_equal:
            want = getattr(cfg, other) if isinstance(other, str) else other
            if getattr(cfg, flag, None) not in (None, want):
                raise UnsupportedModelError(f"{mt}: {flag}={getattr(cfg, flag)!r} != {want!r} "
                                            f"({what}) is not supported")
        if getattr(cfg, "use_bidirectional_attention", False):
            raise UnsupportedModelError(f"{mt}: use_bidirectional_attention (an encoder's "
                                        "attention) is not supported")
        n_heads = int(cfg.num_attention_heads)
        n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
        if fam.multi_query_field:  # (its config's num_key_value_heads, which the model does
            # not read, can hold the default head count's: GPTBigCodeConfig(n_head=4) says 12)
            n_kv = 1 if getattr(cfg, fam.multi_query_field, False) else n_heads
            if fam.grouped_field and getattr(cfg, fam.grouped_field[0], False):
                n_kv = int(getattr(cfg, fam.grouped_field[1], None) or n_heads)
        d = int(cfg.hidden_size)
        hd = int(getattr(cfg, "head_dim", None) or d // n_heads)
        if n_heads % n_kv:
            raise UnsupportedModelError(f"{mt}: num_attention_heads={n_heads} is not a multiple of "
                                        f"num_key_value_heads={n_kv}")
        blocks = fam.qkv_grouped[0] if isinstance(fam.qkv_grouped, tuple) else 1
        if n_heads % blocks or n_kv != n_heads and blocks > 1:
            raise UnsupportedModelError(f"{mt}: its q|k|v rows come in {blocks} blocks of "
                                        f"multi-head attention; {n_heads} heads ({n_kv} KV) do "
                                        "not divide into them")
        if hd % 2:
            raise UnsupportedModelError(f"{mt}: head_dim={hd} is odd; RoPE needs an even head_dim")
        rot = _rotary_dim(mt, fam, cfg, rope, hd)
        if kind == "longrope":
            rope = _longrope_params(mt, cfg, rope, rot)
        if kind == "ntk_alpha" and hd <= 2:
            raise UnsupportedModelError(f"{mt}: an NTK-alpha rope needs head_dim > 2, got {hd}")
        if kind == "freq_factors" and len(rope.get("factors", ())) != hd // 2:
            raise UnsupportedModelError(f"{mt}: {len(rope.get('factors', ()))} rope frequency "
                                        f"factors for head_dim {hd} (expected {hd // 2})")
        n_layers = int(cfg.num_hidden_layers)
        window = int(getattr(cfg, "sliding_window", None) or 0)
        if fam.window_field is not None and not getattr(cfg, fam.window_field, False):
            window = 0
        types = getattr(cfg, "layer_types", None) or ["sliding_attention" if window else
                                                      "full_attention"] * n_layers
        if fam.local_layers:
            window = int(cfg.window_size)
            types = [{"local": "sliding_attention", "global": "full_attention"}.get(t, t)
                     for t in cfg.attention_layers]
        for t in set(types) - {"full_attention", "sliding_attention"} - \
                ({"linear_attention"} if fam.linear_attn else set()):
            raise UnsupportedModelError(f"{mt}: layer type {t!r} is not supported")
        if len(types) < n_layers:
            raise UnsupportedModelError(f"{mt}: layer_types has {len(types)} entries for "
                                        f"{n_layers} layers")
        # a longer list (a config whose num_hidden_layers was cut): its first n_layers, as HF
        windows = tuple(window if t == "sliding_attention" else 0 for t in types[:n_layers])
        linear = tuple(l for l, t in enumerate(types[:n_layers]) if t == "linear_attention")
        if len(linear) == n_layers:
            raise UnsupportedModelError(f"{mt}: every layer a Gated DeltaNet, none attending, "
                                        "is not supported")
        gdn = _gdn_sizes(mt, cfg, ACTS[act]) if fam.linear_attn else ()
        qkv_b, o_b, mlp_b = (_config_flag(cfg, f) for f in fam.bias_fields)
        qk_norm = _config_flag(cfg, fam.qk_norm)
        nope = _nope_layers(mt, fam, cfg, n_layers)
        if fam.full_layers_nope and getattr(cfg, "sliding_window", None) is not None:
            nope = tuple(l for l, t in enumerate(types[:n_layers]) if t != "sliding_attention")
        alibi = _config_flag(cfg, fam.alibi) * (ALIBI_FALCON if fam.alibi_falcon else
                                                ALIBI_BLOOM)
        if fam.learned_positions or alibi:  # positions come with the embedding or as ALiBi's
            # biases: no RoPE anywhere
            nope = tuple(range(n_layers))
        scales = _multipliers(cfg, hd, fam.logits_multiplied) if fam.multipliers else {}
        mlp = _experts(mt, fam.experts, cfg, n_layers) if fam.experts else \
            dict(ffn_dim=_ffn_dim(fam, cfg, d))
        act = mlp.pop("act", ACTS[act])  # the experts' own (Experts.oai), else the config's
        if fam.gemma_norms or fam.embed_scale_field and getattr(cfg, fam.embed_scale_field,
                                                                    False):
            scales = dict(embed_scale=math.sqrt(d))
        if fam.logit_scale_field:
            scales["logits_scale"] = float(getattr(cfg, fam.logit_scale_field, None) or 1.0)
        if fam.query_scalar:
            scales["attn_scale"] = float(getattr(cfg, "query_pre_attn_scalar", None) or hd) ** -0.5
        if fam.softmax_scale_field and getattr(cfg, fam.softmax_scale_field, None):
            scales["attn_scale"] = float(getattr(cfg, fam.softmax_scale_field))
        if fam.unscaled_attention:
            scales["attn_scale"] = 1.0
        return cls(**scales, **mlp,
            family=mt, n_layers=n_layers, d_model=d, n_heads=n_heads,
            n_kv_heads=n_kv, head_dim=hd,
            vocab_size=int(cfg.vocab_size), rms_eps=_norm_eps(mt, fam, cfg),
            rope_theta=float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0) or 10000.0)),
            rope=rope, attn_bias=qkv_b or fam.qkv_bias or fam.norm_bias, o_bias=o_b,
            mlp_bias=mlp_b or fam.norm_bias, layer_norm=fam.layer_norm, head_bias=fam.norm_bias,
            parallel=_parallel(fam, cfg), learned_positions=fam.learned_positions,
            qk_norm=qk_norm, qk_norm_after=fam.qk_norm_after_rope,
            tied=bool(getattr(cfg, "tie_word_embeddings", mt in TIED_BY_DEFAULT)),
            layer_windows=windows,
            max_position=int(getattr(cfg, fam.max_position_field, 1 << 30) or (1 << 30)),
            rotary_dim=0 if rot == hd else rot, rope_interleaved=fam.interleaved_rope,
            nope_layers=nope, act=act, gated=fam.gated,
            post_norms=fam.norms[2] is not None and (
                fam.post_norm_field is None or bool(getattr(cfg, fam.post_norm_field, True))),
            pre_norms=fam.norms[0] is not None, qk_norm_full=fam.qk_norm_full,
            local_rope=local if any(windows) else {}, attn_softcap=caps[0],
            logit_softcap=caps[1], q_pos_scale=_q_pos_scale(mt, rope),
            embed_norm=fam.embed_norm, rope_flipped=fam.rope_flipped, alibi=alibi,
            alibi_mpt=fam.alibi_mpt, attn_sinks=fam.sinks, linear_layers=linear, gdn=gdn,
            attn_gate=fam.linear_attn)


def _gdn_sizes(mt: str, cfg, act: str) -> tuple:
    """ModelSpec.gdn of a Gated DeltaNet config (Qwen3.5's linear_* fields): (key heads, value
    heads, key head dim, value head dim, conv kernel) -- value heads a multiple of the key
    heads (each key head serves nv / nk consecutive value heads), the convolution's SiLU."""
    nk, nv, dk, dv, kc = (int(getattr(cfg, f"linear_{n}")) for n in (
        "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim",
        "conv_kernel_dim"))
    if nv % nk:
        raise UnsupportedModelError(f"{mt}: linear_num_value_heads={nv} is not a multiple of "
                                    f"linear_num_key_heads={nk}")
    if act != "silu" or kc < 1:
        raise UnsupportedModelError(f"{mt}: a Gated DeltaNet with hidden_act {act!r} or a "
                                    f"convolution of {kc} taps is not supported (SiLU, >= 1)")
    return nk, nv, dk, dv, kc


class _Nested:
    """A config whose missing attributes read from its sub-config `name` (a dict or a config
    object; Family.nested)."""

    def __init__(self, cfg, name: str):
        self._cfg, self._sub = cfg, getattr(cfg, name, None) or {}

    def __getattr__(self, key):
        if hasattr(self._cfg, key):
            return getattr(self._cfg, key)
        if isinstance(self._sub, dict):
            if key in self._sub:
                return self._sub[key]
            raise AttributeError(key)
        return getattr(self._sub, key)


def _parallel(fam: Family, cfg) -> bool:
    """Family.parallel for this config."""
    if isinstance(fam.parallel, bool):
        return fam.parallel
    if isinstance(fam.parallel, str):
        return bool(getattr(cfg, fam.parallel, True))
    return any(getattr(cfg, f, False) for f in fam.parallel)


def _dense_layers(cfg, n_layers: int) -> tuple:
    """A mixture's layers whose MLP is dense, by whichever of HF's rules its config carries:
    mlp_only_layers and every decoder_sparse_step-th layer sparse (Qwen2 / Qwen3-MoE),
    first_k_dense_replace (DeepSeek-V3, GLM-4.5, dots.llm1), moe_layer_start_index /
    moe_layer_end_index (-1: the last) / moe_layer_interval (ERNIE 4.5)."""
    sparse = set(range(n_layers))
    step = int(getattr(cfg, "decoder_sparse_step", 1) or 1)
    sparse -= {l for l in range(n_layers) if (l + 1) % step
               or l in (getattr(cfg, "mlp_only_layers", None) or ())}
    sparse -= set(range(int(getattr(cfg, "first_k_dense_replace", 0) or 0)))
    if getattr(cfg, "moe_layer_start_index", None) is not None:
        start, end = int(cfg.moe_layer_start_index), int(getattr(cfg, "moe_layer_end_index", -1))
        every = int(getattr(cfg, "moe_layer_interval", 1) or 1)
        end = n_layers - 1 if end == -1 else end
        sparse -= {l for l in range(n_layers) if (l + 1) % every or not start <= l <= end}
    return tuple(l for l in range(n_layers) if l not in sparse)


def expert_groups_ok(n_experts: int, n_group: int, topk_group: int) -> bool:
    """Group-limited routing the router takes (moe.route_body): n_group equal runs of the
    experts, 1 <= topk_group <= n_group of them kept -- where that limits the picks
    (topk_group < n_group), a power-of-two count of groups of two experts or more (each scored
    by its two best)."""
    if n_experts % n_group or not 1 <= topk_group <= n_group:
        return False
    return topk_group == n_group or not (n_group & (n_group - 1) or n_experts // n_group < 2)


def _experts(mt: str, ex: Experts, cfg, n_layers: int) -> dict:
    """ModelSpec's mixture-of-experts fields, ffn_dim the shared expert's width (0: none), the
    dense layers' (_dense_layers) dense_ffn; a model whose every layer is dense (a config cut to
    its first layers): a dense model's ffn_dim."""
    field = next((f for f in ex.count if getattr(cfg, f, None) is not None), ex.count[0])

    def one(name):  # a config value, or a per-layer list of one value
        v = getattr(cfg, name, 0) or 0
        if isinstance(v, (list, tuple)):
            if len(set(v[:n_layers])) > 1:
                raise UnsupportedModelError(f"{mt}: {name}={list(v)} differs among the layers")
            v = v[0] if v else 0
        return int(v)
    n, k = one(field), one(ex.top_k)
    if not 1 <= k <= n:
        raise UnsupportedModelError(f"{mt}: {ex.top_k}={k} of {field}={n} experts")
    dense = _dense_layers(cfg, n_layers)
    if len(dense) == n_layers:
        return dict(ffn_dim=int(cfg.intermediate_size))
    renorm = ex.renorm if isinstance(ex.renorm, bool) else bool(getattr(cfg, ex.renorm, False))
    shared = one(ex.shared) if ex.shared else one(ex.ffn) * one(ex.shared_count) \
        if ex.shared_count else 0
    router = {}
    if ex.deepseek:
        groups = (int(getattr(cfg, "n_group", 1) or 1), int(getattr(cfg, "topk_group", 1) or 1))
        if not expert_groups_ok(n, *groups):
            raise UnsupportedModelError(f"{mt}: n_group={groups[0]}, topk_group={groups[1]} of "
                                        f"{n} experts (a power of two of groups, each of two "
                                        "experts or more, is supported)")
        if k > groups[1] * (n // groups[0]):
            raise UnsupportedModelError(f"{mt}: {ex.top_k}={k} is more than the "
                                        f"{groups[1]} groups' experts")
        router = dict(expert_groups=groups,
                      routed_scale=float(getattr(cfg, "routed_scaling_factor", 1.0) or 1.0))
    return dict(n_experts=n, top_k=k, expert_ffn=one(ex.ffn), norm_topk=renorm, ffn_dim=shared,
                router_sigmoid=ex.sigmoid, choice_bias=ex.choice_bias is not None,
                router_fp32=ex.router_fp32, expert_bias=ex.oai, dense_layers=dense,
                dense_ffn=int(cfg.intermediate_size) if dense else 0, **router,
                **({"act": "swiglu_oai"} if ex.oai else {}))


def _ffn_dim(fam: Family, cfg, d: int) -> int:
    """The MLP's width: Family.ffn_field's config value (None: ffn_default x hidden_size, where
    the family has one)."""
    ffn = getattr(cfg, fam.ffn_field, None)
    if ffn is None and fam.ffn_default:
        return fam.ffn_default * d
    return int(ffn if ffn is not None else cfg.intermediate_size)


def _norm_eps(mt: str, fam: Family, cfg) -> float:
    """The norms' epsilon: Family.eps_field's config value, or its constant."""
    if not isinstance(fam.eps_field, str):
        return float(fam.eps_field)
    eps = getattr(cfg, fam.eps_field, None)
    if eps is None:
        raise UnsupportedModelError(f"{mt}: the config has no {fam.eps_field}")
    return float(eps)


def _q_pos_scale(mt: str, rope: dict) -> tuple:
    """ModelSpec.q_pos_scale from the rope dict's llama_4_scaling_beta (Ministral 3), with the
    original context it divides the position by."""
    beta = float(rope.get("llama_4_scaling_beta") or 0.0)
    if not beta:
        return ()
    orig = rope.get("original_max_position_embeddings")
    if not orig:
        raise UnsupportedModelError(f"{mt}: llama_4_scaling_beta without "
                                    "original_max_position_embeddings")
    return (beta, int(orig))


def _config_flag(cfg, names) -> bool:
    """The first of `names` (one name, a tuple of them, or None: False; True: always) the
    config has."""
    if names is True:
        return True
    for name in (names,) if isinstance(names, str) else names or ():
        if hasattr(cfg, name):
            return bool(getattr(cfg, name))
    return False


def _nope_layers(mt: str, fam: Family, cfg, n_layers: int) -> tuple:
    """The indices of the layers whose attention takes no RoPE (Family.nope_field). A list
    longer than the layers (a config whose num_hidden_layers was cut) is read as HF reads it: its
    first n_layers entries."""
    if fam.nope_field is None:
        return ()
    flags = getattr(cfg, fam.nope_field, None)
    if flags is None:  # HF's default: every interval-th layer without RoPE
        every = int(getattr(cfg, "no_rope_layer_interval", 4))
        flags = [int((l + 1) % every != 0) for l in range(n_layers)]
    if len(flags) < n_layers:
        raise UnsupportedModelError(f"{mt}: {fam.nope_field} has {len(flags)} entries for "
                                    f"{n_layers} layers")
    return tuple(l for l, f in enumerate(flags[:n_layers]) if not f)


def _multipliers(cfg, head_dim: int, logits_multiplied: bool = False) -> dict:
    """Granite's four scalars as ModelSpec fields (the config class's defaults: 1.0); the
    logits divided by logits_scaling, or multiplied (Family.logits_multiplied: HyperCLOVAX, whose
    config class defaults the attention's multiplier to head_dim ** -0.5)."""
    get = lambda name: float(getattr(cfg, name, 1.0) or 1.0)  # noqa: E731
    logits = get("logits_scaling")
    attn = get("attention_multiplier") if not logits_multiplied else \
        float(getattr(cfg, "attention_multiplier", None) or head_dim ** -0.5)
    return dict(embed_scale=get("embedding_multiplier"), residual_scale=get("residual_multiplier"),
                attn_scale=attn, logits_scale=logits if logits_multiplied else 1.0 / logits)


def _longrope_params(mt: str, cfg, rope: dict, rot: int) -> dict:
    """The rope dict with original_max_position_embeddings (transformers 4.x kept it on the
    config) and its short / long factors checked: one per rotated pair."""
    orig = rope.get("original_max_position_embeddings") or \
        getattr(cfg, "original_max_position_embeddings", None)
    if not orig:
        raise UnsupportedModelError(f"{mt}: longrope without original_max_position_embeddings")
    pairs = -(-rot // 2)  # an odd rot: HF's ceil(rot / 2) frequencies
    for k in ("short_factor", "long_factor"):
        if len(rope.get(k) or ()) != pairs:
            raise UnsupportedModelError(f"{mt}: longrope {k} has {len(rope.get(k) or ())} "
                                        f"entries for {pairs} rotated pairs")
    return dict(rope, original_max_position_embeddings=int(orig))


def _rotary_dim(mt: str, fam: Family, cfg, rope: dict, hd: int) -> int:
    """The rotated dims of a head: int(head_dim * partial_rotary_factor), as HF computes them,
    where the family's rotary embedding applies the factor (Phi-3). Llama / Mistral / Qwen's
    default rope ignores it, as here; their scaled ropes would rotate fewer dims than their
    attention applies (HF fails on such a config): raised. Family.rotary_dim_field: the count
    itself (GPT-J's rotary_dim; None: the whole head)."""
    if fam.rotary_dim_field:
        rot = getattr(cfg, fam.rotary_dim_field, None) or hd
        if not 0 < rot <= hd or rot % 2:
            raise UnsupportedModelError(f"{mt}: {fam.rotary_dim_field}={rot} for head_dim {hd} "
                                        "(an even count of its dims, at least 2)")
        return int(rot)
    f = rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", None))
    f = 1.0 if f is None else float(f)
    if f == 1.0 or (not fam.partial_rotary and rope["rope_type"] == "default"):
        return hd
    if not fam.partial_rotary:
        raise UnsupportedModelError(f"{mt}: partial_rotary_factor={f} with rope_type="
                                    f"{rope['rope_type']!r} is not supported")
    rot = int(hd * f)
    if not 0 < f <= 1 or rot < 1:
        raise UnsupportedModelError(f"{mt}: partial_rotary_factor={f} rotates {rot} of head_dim "
                                    f"{hd}; RoPE needs at least one dim")
    if rot % 2 and rope["rope_type"] == "yarn":  # HF's YaRN ramp has rot // 2 entries: fails
        raise UnsupportedModelError(f"{mt}: YaRN with an odd rotary dim ({rot}) is not supported")
    return rot


def _rope_kind(mt: str, fam: Family, rope: dict) -> dict:
    """The rope dict with its rope_type named as ROPE_TYPES does, or UnsupportedModelError."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    kind = "longrope" if kind == "su" else kind  # Phi-3's first configs' name for it
    if kind == "mrope" and fam.mrope:  # transformers 4.x's name of Qwen2-VL's (Family.mrope)
        kind = "default"
    if kind == "dynamic" and fam.alpha_rope and rope.get("alpha"):
        kind = "ntk_alpha"
    if kind not in ROPE_TYPES:
        raise UnsupportedModelError(f"{mt}: rope_type={kind!r} is not supported ({ROPE_TYPES})")
    out = {k: v for k, v in rope.items() if k != "type"}  # transformers 4.x's name of rope_type
    out["rope_type"] = kind
    return out


def _rope_params(cfg, fam: Family) -> tuple[dict, dict]:
    """(the rope dict, the sliding-window layers' own: {} unless Family.local_rope), each with
    its rope_theta. transformers >= 5 keeps rope_parameters (with rope_theta inside; per layer
    type, a dict of them); 4.x kept rope_scaling, and Gemma 3's local base in
    rope_local_base_freq."""
    params = getattr(cfg, "rope_parameters", None)
    if params:
        if isinstance(params, dict) and "rope_type" not in params and "type" not in params \
                and all(isinstance(v, dict) for v in params.values()):
            if not fam.local_rope or "full_attention" not in params:
                raise UnsupportedModelError("per-layer-type rope_parameters are not supported")
            full = dict(params["full_attention"])
            return full, dict(params.get("sliding_attention") or full)
        return dict(params), {}
    scaling = getattr(cfg, "rope_scaling", None) or {}
    out = dict(scaling)
    out.setdefault("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    local = {}
    if fam.local_rope:
        local = {"rope_type": "default",
                 "rope_theta": float(getattr(cfg, "rope_local_base_freq", None) or 10000.0)}
    return out, local
