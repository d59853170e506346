"""HF weights -> PackedWeights: per-layer matrices fused and stacked over layers, laid out for the
GEMV tiles (row-major [N, K], K contiguous, so a tile streams whole 16-byte-aligned rows).

    w_qkv  [L, (H + 2 KVH) * hd, d]   q rows, then k rows, then v rows (head-major)
    w_o    [L, d, H * hd]
    w_gu   [L, 2 * ffn, d]            gate rows, then up rows (the SWIGLU epilogue reads row n and
                                      row ffn + n in the same tile); an MLP without a gate
                                      (ModelSpec.gated False): [L, ffn, d], up rows alone
    w_down [L, d, ffn]
    a mixture of experts (ModelSpec.n_experts E, expert_ffn F): w_router [L, E (+ 1), d] (the
           router's rows, then the shared expert's gate row where there is one), w_experts_gu
           [L, E, 2F, d] and w_experts_down [L, E, d, F] (HF's stacked layout; the router in
           fp32 where HF keeps it so: ModelSpec.router_fp32); w_gu / w_down hold the shared
           expert (ffn_dim wide, 0: none); L counts the expert layers only
           (ModelSpec.expert_layers), the dense ones' MLPs (ModelSpec.dense_layers, dense_ffn
           wide) in w_dense_gu [Ld, 2 dense_ffn, d] / w_dense_down [Ld, d, dense_ffn]; with
           biases (gpt-oss: ModelSpec.expert_bias) b_router [L, E], b_experts_gu [L, E, 2F],
           b_experts_down [L, E, d]; the router's choice bias b_choice [L, E] fp32
           (ModelSpec.choice_bias);
           an MXFP4 checkpoint's experts (quant's "mxfp4": gpt-oss) stay MXFP4, w_experts_gu
           [L, E, 2F, d / 2] and w_experts_down [L, E, d, F / 2] uint8 codes (gate|up's rows in
           the same order) with their E8M0 scales s_experts_gu [L, E, 2F, d / 32] and
           s_experts_down [L, E, d, F / 32] -- a quarter of the bf16 bytes (and 1/32 for the
           scales): the experts stream 4-bit, gpt-oss-120b's 117 B parameters fit one 80 GB GPU;
           so do float experts that are exactly MXFP4 (a model transformers dequantized from
           such a checkpoint: quant.encode_mxfp4), losslessly
    FP8    pack(keep_fp8=True) of an FP8 checkpoint (quant.fp8_rows): w_qkv / w_o / w_gu /
           w_down float8_e4m3fn [L, N, row_elems(K)], each row its codes then its scales;
           PackedWeights.matrix dequantizes them for the reference paths
    sinks  [L, H] fp32: the attention sinks' logits (ModelSpec.attn_sinks)
    norms  [L, d] (before attention / the MLP; after them too where the family has them:
           ModelSpec.post_norms); qk_norm [L, H + KVH, hd], a row per head slot (Qwen3's one
           row repeated: qk_norm_getter); biases where the family has them
    embed  [V, d]; lm_head [V, d] (the same tensor when the embeddings are tied); b_head [V]
           (a LayerNorm family's final norm bias through the head: ModelSpec.head_bias)
Stacking over layers gives every op one base pointer plus a layer stride (what the megakernel needs).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields

import torch

from .quant import (FP8_BYTES, MXFP4_BYTES, dequantize_mxfp4, encode_mxfp4, fp8_rows_scaled,
                    fp8_values)
from .spec import FAMILIES, ModelSpec
from .triton_kernels.config import row_elems

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# PackedWeights fields held in fp32 whatever the weights' dtype (FastModel.to: the ALiBi slopes
# moved, never cast; a parameter among them cast as the weights, then held in fp32 again)
FP32_KEPT = ("alibi", "sinks", "b_choice", "lin_alog", "lin_dt")


@dataclass
class PackedWeights:
    spec: ModelSpec
    embed: torch.Tensor
    lm_head: torch.Tensor
    final_norm: torch.Tensor
    attn_norm: torch.Tensor | None  # [L, d]; None: no norm before the blocks (ModelSpec.pre_norms)
    mlp_norm: torch.Tensor | None
    w_qkv: torch.Tensor
    w_o: torch.Tensor
    w_gu: torch.Tensor
    w_down: torch.Tensor
    b_qkv: torch.Tensor | None = None
    b_o: torch.Tensor | None = None
    b_gu: torch.Tensor | None = None
    b_down: torch.Tensor | None = None
    qk_norm: torch.Tensor | None = None
    post_attn_norm: torch.Tensor | None = None  # [L, d] (ModelSpec.post_norms)
    post_mlp_norm: torch.Tensor | None = None
    b_head: torch.Tensor | None = None  # [V] added to the logits (ModelSpec.head_bias)
    # [max_position, d] learned absolute positions, added to each embedded row (GPT-2's wpe:
    # ModelSpec.learned_positions)
    pos_embed: torch.Tensor | None = None
    # [this rank's q heads] fp32: ALiBi's slopes (ModelSpec.alibi_slopes), kept in fp32 when the
    # weights change dtype (FastDecodeModel.to)
    alibi: torch.Tensor | None = None
    # a mixture of experts (ModelSpec.n_experts; the layout in this module's docstring)
    w_router: torch.Tensor | None = None
    w_experts_gu: torch.Tensor | None = None
    w_experts_down: torch.Tensor | None = None
    w_dense_gu: torch.Tensor | None = None   # the dense layers' MLPs (ModelSpec.dense_layers)
    w_dense_down: torch.Tensor | None = None
    b_router: torch.Tensor | None = None
    # [L, E] fp32: the router's choice bias (ModelSpec.choice_bias; FP32_KEPT)
    b_choice: torch.Tensor | None = None
    b_experts_gu: torch.Tensor | None = None
    b_experts_down: torch.Tensor | None = None
    # the experts' E8M0 scales where they stay MXFP4 (this module's docstring); None: float experts
    s_experts_gu: torch.Tensor | None = None
    s_experts_down: torch.Tensor | None = None
    # [L, this rank's q heads] fp32: the attention sinks (ModelSpec.attn_sinks; FP32_KEPT)
    sinks: torch.Tensor | None = None
    # [La, H * hd, d]: the attention layers' output gate rows (ModelSpec.attn_gate)
    w_gate: torch.Tensor | None = None
    # Gated DeltaNet layers (ModelSpec.linear_layers, Ll of them; reference.gdn_block): in_proj
    # [Ll, conv_dim + value_dim + 2 nv, d] (q | k | v | z | b | a rows), out_proj [Ll, d,
    # value_dim], the convolution's taps [Ll, conv_dim, kernel], A_log and dt_bias [Ll, nv]
    # (fp32: FP32_KEPT), the gated RMSNorm's weights [Ll, dv]
    w_lin_in: torch.Tensor | None = None
    w_lin_out: torch.Tensor | None = None
    lin_conv: torch.Tensor | None = None
    lin_alog: torch.Tensor | None = None
    lin_dt: torch.Tensor | None = None
    lin_norm: torch.Tensor | None = None

    def pre_norm(self, which: int, l: int) -> torch.Tensor | None:
        """Layer l's norm before its attention (which 0) or MLP (1); None: none."""
        t = (self.attn_norm, self.mlp_norm)[which]
        return None if t is None else t[l]

    def post_norm(self, which: int, l: int) -> torch.Tensor | None:
        """Layer l's norm after its attention (which 0) or MLP (1); None: none."""
        t = (self.post_attn_norm, self.post_mlp_norm)[which]
        return None if t is None else t[l]

    def expert_matrix(self, which: int, l: int, e: int) -> torch.Tensor:
        """Layer l's expert e's gate|up (which 0) or down (1) matrix in the weights' dtype: the
        packed one, or its MXFP4 codes dequantized (exact: a 2-bit significand and a power-of-two
        scale), or its FP8 codes times their scales rounded once (as matrix) -- for the reference
        paths (torch mode, a long prompt's pass)."""
        i = self.spec.expert_index(l)
        w = (self.w_experts_gu, self.w_experts_down)[which][i, e]
        s = (self.s_experts_gu, self.s_experts_down)[which]
        if w.dtype == torch.float8_e4m3fn:
            return fp8_values(w, (self.spec.d_model, self.spec.expert_ffn)[which]).to(self.dtype)
        if s is None:
            return w
        return dequantize_mxfp4(w.view(*w.shape[:-1], -1, 16), s[i, e]).to(self.dtype)

    def mlp_weights(self, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer l's packed (gate|up, down) of its MLP: a dense model's, a mixture's dense
        layer's (w_dense_*), or a mixture's shared expert's (w_gu / w_down over the expert
        layers)."""
        s = self.spec
        i = s.mlp_index(l)
        if l in s.dense_layers:
            return self.w_dense_gu[i], self.w_dense_down[i]
        return self.w_gu[i], self.w_down[i]

    @property
    def dtype(self):
        """The activations' and float weights' dtype (FP8 matrices: their codes' differ)."""
        return self.embed.dtype

    @property
    def fp8(self) -> bool:
        """The dense matrices are kept FP8 (module docstring)."""
        return self.w_qkv.dtype == torch.float8_e4m3fn

    def matrix(self, which: str, l: int) -> torch.Tensor:
        """Layer l's w_{which} (qkv, o, gu, down) [N, K] in the weights' dtype: the packed one,
        or its FP8 codes times their scales rounded once (quant.dequantize_fp8's values) -- the
        reference paths' (torch mode, a long prompt's pass)."""
        w = getattr(self, f"w_{which}")[self.spec.attn_index(l)] if which in ("qkv", "o") \
            else self.mlp_weights(l)[which == "down"]
        if w.dtype != torch.float8_e4m3fn:
            return w
        s = self.spec
        K = {"qkv": s.d_model, "o": s.q_dim, "gu": s.d_model,
             "down": s.dense_ffn if l in s.dense_layers else s.ffn_dim}[which]
        return fp8_values(w, K).to(self.dtype)

    @property
    def device(self):
        return self.w_qkv.device

    @functools.cached_property
    def embed_scale(self) -> float:
        """What an embedding row is multiplied by as it is looked up: ModelSpec.embed_scale
        (Granite's multiplier; Gemma's sqrt(d_model), rounded to the weights' dtype as HF's
        normalizer is), 1.0 elsewhere. Applied at lookup (embed_rows, the embedding kernels), not
        folded into the rows, so a tied lm_head stays the embedding's tensor. Computed once per
        PackedWeights (a move to another dtype builds a new one: FastModel.to), not per step."""
        s = self.spec.embed_scale
        if FAMILIES[self.spec.family].gemma_norms:
            s = float(torch.tensor(s).to(self.dtype))
        return s

    def embed_rows(self, ids, positions=None) -> torch.Tensor:
        """The embedding rows of ids times embed_scale, in the weights' dtype (one rounding of
        the fp32 product, as the kernels and HF's bf16 / fp16 multiply); plus the learned rows of
        positions (pos_embed; the same shape as ids), the fp32 sum rounded once."""
        rows, s = self.embed[ids], self.embed_scale
        if self.pos_embed is not None:
            return (rows.float() * s + self.pos_embed[positions].float()).to(rows.dtype)
        return rows if s == 1.0 else (rows.float() * s).to(rows.dtype)

    def tensors(self):
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "spec"}


def pack(spec: ModelSpec, get, *, device, dtype, rank: int = 0, world: int = 1,
         keep_fp8: bool = False) -> PackedWeights:
    """Build PackedWeights (of tensor-parallel rank `rank` of `world`) from
    get(hf_name, index=None) -> tensor | None, HF state-dict names; `index` is a tuple of slices,
    so a rank reads only its shard (safetensors slices lazily). Sharding: distributed.py.
    keep_fp8 (modes ops / mega / vm): an FP8 checkpoint's dense matrices stay 8-bit
    (fp8_matrices)."""
    sp = spec.shard(rank, world)
    fam = FAMILIES[spec.family]
    every = slice(None)
    moe_layers = spec.expert_layers  # a mixture's expert stacks' layers (ModelSpec.dense_layers)

    def rows(n):
        return (slice(rank * n, (rank + 1) * n),)

    def cols(n):
        return (every, slice(rank * n, (rank + 1) * n))
    q, f = rows(sp.q_dim), rows(sp.ffn_dim)
    k0, k1 = spec.kv_heads_of(rank, world)  # replicated when world > KV heads
    kv = (slice(k0 * spec.head_dim, k1 * spec.head_dim),)
    # each matrix's shard (a column-parallel one's rows, a row-parallel one's columns)
    # (a mixture's: its shared expert's, and every routed expert's -- fp8_matrices' names)
    mlp = "mlp.shared_expert." if spec.moe else "mlp."
    mlp_layers = spec.mlp_layers  # w_gu / w_down's layers
    shards = {**dict(zip((f"self_attn.{n}_proj.weight" for n in "qkv"), (q, kv, kv))),
              "self_attn.o_proj.weight": cols(sp.q_dim), f"{mlp}gate_proj.weight": f,
              f"{mlp}up_proj.weight": f, f"{mlp}down_proj.weight": cols(sp.ffn_dim)}
    if spec.moe:
        fd = rows(sp.dense_ffn)  # the dense layers' MLPs (ModelSpec.dense_layers)
        shards.update({"mlp.gate_proj.weight": fd, "mlp.up_proj.weight": fd,
                       "mlp.down_proj.weight": cols(sp.dense_ffn),
                       "mlp.experts.gate_proj.weight": rows(sp.expert_ffn),
                       "mlp.experts.up_proj.weight": rows(sp.expert_ffn),
                       "mlp.experts.down_proj.weight": cols(sp.expert_ffn)})
    if fam.checkpoint_names:
        get = renamed_getter(get, fam.checkpoint_names, fam.checkpoint_prefix)
    fp8 = fp8_matrices(spec, get, fam, shards, world) if keep_fp8 else None
    if fam.conv1d:
        get = conv1d_getter(get)
    parts = fused_parts(spec, fam)
    if parts:
        get = fused_getter(get, parts)
    ungated = ungated_shared(spec, fam)
    if ungated:
        get = zero_gate_getter(get, spec.d_model)
    if fam.qkv_grouped:
        get = grouped_qkv_getter(get, spec, fam.qkv_grouped)
    if spec.text_of:
        get = text_model_getter(get)
    if spec.attn_gate:
        get = gated_q_getter(get, spec)
    plain = get  # the Gated DeltaNet's norm weights: as stored (no 1 + w)
    if fam.gemma_norms or fam.norms_plus_one:
        get = offset_norm_getter(get)
    if fam.weightless_norms:
        get = ones_norm_getter(get, spec)
    if fam.sinusoidal_positions:
        get = sinusoidal_getter(get, spec, fam.position_offset)
    if spec.qk_norm:
        get = qk_norm_getter(get, spec, fam.qk_norm_heads)
    if spec.qk_layer_norm:
        get = head_centered_getter(get, spec)
    # the query scale on the q rows -- or, where q is RMS-normalized, on its norm's weight; the
    # residual scale on o_proj / down -- or, where a norm follows them, on that norm's weight
    # (which the scale follows: HyperCLOVAX; a norm of scaled rows would cancel it)
    blocks = [f".{n}." for n in fam.norms[2:]] if spec.post_norms else \
        ["self_attn.o_proj.", "mlp.down_proj.", "mlp.experts.down_proj",
         "mlp.shared_expert.down_proj."]
    scales = {"self_attn.q_norm." if spec.qk_norm else "self_attn.q_proj.": spec.q_scale,
              **dict.fromkeys(blocks, spec.residual_scale)}
    if ungated:  # its zero gate row's sigmoid(0) = 1/2, undone exactly (Experts.shared_gate)
        down = "mlp.shared_expert.down_proj."
        scales[down] = 2 * scales.get(down, 1.0)
    get = scaled_getter(get, scales)
    if spec.layer_norm:  # last: it reads the weights as packed to fold the norms' biases
        get = centered_getter(get, spec, fam.norms[:2])
    if spec.moe:
        get = oai_expert_getter(get) if fam.experts.oai else \
            expert_getter(get, spec.d_model, spec.expert_ffn)
    # an MXFP4 checkpoint's experts packed as they are (the module docstring) where no scale
    # multiplies them and a rank's down columns hold whole blocks of 32; otherwise quant's getter
    # dequantizes them
    mxfp4 = spec.moe and spec.residual_scale == 1.0 and sp.expert_ffn % 32 == 0 and \
        get(f"model.layers.{moe_layers[0]}.mlp.experts.down_proj_blocks") is not None
    # float experts that are exactly MXFP4 (gpt-oss dequantized by transformers) pack as MXFP4
    # too (encoded_mxfp4): decided by layer 0's first expert before the room check, so it counts
    # the 4-bit bytes they will take (gpt-oss-20b held in bf16 on an 80 GB GPU: 14 GB, not 42)
    first = get(f"model.layers.{moe_layers[0]}.mlp.experts.gate_up_proj", (slice(0, 1),)) \
        if spec.moe and not mxfp4 and fam.experts.oai and spec.residual_scale == 1.0 else None
    encode = first is not None and encode_mxfp4(first[0]) is not None

    def check_fit(four_bit: bool, fp8_experts: bool = False):
        if torch.device(device).type == "cuda":
            separate_head = not spec.shares_head or world > 1  # else the embedding's tensor
            check_weights_fit(sp, spec.vocab_size, separate_head, dtype,
                              device_free_bytes(device), MXFP4_BYTES if four_bit else
                              FP8_BYTES if fp8_experts else None,
                              FP8_BYTES if fp8 is not None else None)
    check_fit(mxfp4 or encode, fp8 is not None and spec.moe)

    def fetch(name, index=None):
        t = get(name, index)
        if t is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        if not t.is_floating_point() or t.element_size() < 2:  # float8: quant's scales lost
            raise TypeError(f"{name} has dtype {t.dtype}; fastdecode needs float weights "
                            "(dequantize first)")
        return t

    def need(name, index=None, scale=1.0):
        return scaled(fetch(name, index), scale).to(device=device, dtype=dtype)

    def stack(*parts, codes=False, layers=range(spec.n_layers), out_dtype=None):
        """parts: (name within the layer, index); concatenated along dim 0, stacked over layers
        (those of `layers`: a mixture's expert or dense layers), in out_dtype (None: the
        weights' dtype). Each tensor is copied (and converted) straight into its slice of the
        one packed tensor: no per-layer intermediates, so loading peaks at the packed size plus
        one tensor. FP8 matrices (codes, where fp8_matrices kept them): their rows as
        quant.fp8_rows lays them out (the rank's shard, by the same index)."""
        out = None
        for j, i in enumerate(layers):
            names = [f"model.layers.{i}.{f}" for f, _ in parts]
            keep = codes and fp8 is not None
            ts = [fp8(n, f) for n, (f, _) in zip(names, parts)] if keep else \
                [fetch(n, ix) for n, (_, ix) in zip(names, parts)]
            if out is None:  # sized from the first layer's tensors
                out = torch.empty((len(layers), sum(t.shape[0] for t in ts), *ts[0].shape[1:]),
                                  device=device, dtype=ts[0].dtype if keep else
                                  out_dtype or dtype)
            row = 0
            for (f, _), t in zip(parts, ts):
                if row + t.shape[0] > out.shape[1] or t.shape[1:] != out.shape[2:]:
                    raise ValueError(f"model.layers.{i}.{f}: shape {tuple(t.shape)} does not "
                                     f"match layer {layers[0]}'s")
                out[j, row:row + t.shape[0]].copy_(t)
                row += t.shape[0]
        return out

    def expert_shard(name, t, per=1):
        """This rank's part of expert tensors t [E, ...] of mlp.experts.{name}: gate|up's (and
        its bias's) gate rows of the rank's slice of each expert's F, then its up rows; down's
        columns of that slice (per: elements a stored column holds, MXFP4's codes 2 and scales
        32); down's bias on rank 0 (added once)."""
        if world == 1:
            return t
        F, g = spec.expert_ffn, sp.expert_ffn
        if name.startswith("gate_up_proj"):
            return torch.cat([t[:, rank * g:(rank + 1) * g], t[:, F + rank * g:F + (rank + 1) * g]],
                             1)
        if name == "down_proj":
            return t[..., rank * g // per:(rank + 1) * g // per]
        return on_first_rank(t)

    def stack_experts(name):
        """[L, E, rows, cols] of layer i's model.layers.{i}.mlp.experts.{name}, an expert at
        a time (expert_getter reads a checkpoint's per-expert tensors one by one); the rank's
        part of each (expert_shard)."""
        out = None
        for j, i in enumerate(moe_layers):
            for e in range(spec.n_experts):
                t = expert_shard(name, fetch(f"model.layers.{i}.mlp.experts.{name}",
                                             (slice(e, e + 1),)))
                if out is None:
                    out = torch.empty((len(moe_layers), spec.n_experts, *t.shape[1:]),
                                      device=device, dtype=dtype)
                out[j, e].copy_(t[0])
        return out

    def stack_fp8_experts(parts):
        """[L, E, rows, row_elems] FP8 rows (fp8_matrices) of every layer's experts: each
        expert's mlp.experts.{e}.{part}.weight rows, in parts' order (gate|up: the rank's gate
        rows, then its up rows -- expert_shard's order; down: the rank's columns)."""
        out = None
        for j, i in enumerate(moe_layers):
            for e in range(spec.n_experts):
                t = torch.cat([fp8(f"model.layers.{i}.mlp.experts.{e}.{n}.weight",
                                   f"mlp.experts.{n}.weight") for n in parts])
                if out is None:
                    out = torch.empty((len(moe_layers), spec.n_experts, *t.shape), device=device,
                                      dtype=t.dtype)
                out[j, e].copy_(t)
        return out

    def stack_mxfp4(name):
        """(codes [L, E, rows, cols / 2], scales [L, E, rows, cols / 32]) of layer i's
        mlp.experts.{name}_blocks / _scales, a layer at a time; gate|up's interleaved gate and
        up rows (2i, 2i + 1) in oai_expert_getter's order, the gate rows then the up rows."""
        out = None
        for j, i in enumerate(moe_layers):
            ts = [get(f"model.layers.{i}.mlp.experts.{name}_{part}")
                  for part in ("blocks", "scales")]
            if any(t is None or t.dtype != torch.uint8 for t in ts):
                raise TypeError(f"model.layers.{i}.mlp.experts.{name}: MXFP4 blocks and scales "
                                "(uint8) expected")
            ts[0] = ts[0].reshape(*ts[1].shape[:2], -1)
            if name == "gate_up_proj":
                ts = [deinterleave_gate_up(t) for t in ts]
            ts = [expert_shard(name, t, per) for t, per in zip(ts, (2, 32))]
            if out is None:
                out = [torch.empty((len(moe_layers), *t.shape), device=device, dtype=torch.uint8)
                       for t in ts]
            for o, t in zip(out, ts):
                if t.shape != o.shape[1:]:
                    raise ValueError(f"model.layers.{i}.mlp.experts.{name}: MXFP4 shape "
                                     f"{tuple(t.shape)} does not match layer {moe_layers[0]}'s")
                o[j].copy_(t)
        return out

    def encoded_mxfp4():
        """[codes, scales] of gate|up, then of down, for every layer and expert, where every
        expert matrix is exactly MXFP4 (quant.encode_mxfp4: a model transformers dequantized
        from an MXFP4 checkpoint) -- lossless, the same values in a quarter of the bytes; None
        at the first one that is not (layer 0's first expert decides most models at once)."""
        out = []
        for name in ("gate_up_proj", "down_proj"):
            codes = scales = None
            for j, i in enumerate(moe_layers):
                for e in range(spec.n_experts):
                    t = expert_shard(name, fetch(f"model.layers.{i}.mlp.experts.{name}",
                                                 (slice(e, e + 1),)))
                    enc = encode_mxfp4(t[0].to(device))
                    if enc is None:
                        return None
                    if codes is None:
                        codes, scales = (torch.empty((len(moe_layers), spec.n_experts, *x.shape),
                                                     device=device, dtype=torch.uint8)
                                         for x in enc)
                    codes[j, e], scales[j, e] = enc
            out += [codes, scales]
        return out

    def on_first_rank(t):  # a bias added after a row-parallel sum is added once
        return t if rank == 0 or t is None else torch.zeros_like(t)

    attn = "self_attn.{}_proj.{}"

    def gated(name, index):  # the gate's rows before the up rows, where the MLP has a gate
        return ((name, index),) if spec.gated else ()
    norms = [n and (f"{n}.weight", None) for n in fam.norms]
    if spec.embed_norm and spec.layer_norm:  # BLOOM's LayerNorm of the embedded rows, with its
        # weight and bias: row-wise, so applied to the table once (a new tensor), then centered
        w, b = (need(f"model.embed_norm.{n}").to(device).float() for n in ("weight", "bias"))
        embed = rows_through(fetch("model.embed_tokens.weight"), lambda x: centered(
            torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, spec.rms_eps)), device, dtype)
    elif spec.embed_norm:  # the embedding norm, row-wise: applied to the table once, into a new
        # tensor (never the caller's own: from_hf's model's parameter)
        table = fetch("model.embed_tokens.weight")
        embed = rows_through(table, lambda x: x * torch.rsqrt(
            x.pow(2).mean(-1, keepdim=True) + spec.rms_eps), device, dtype)
    elif spec.layer_norm:  # centered rows: the residual stream starts at mean 0
        embed = rows_through(fetch("model.embed_tokens.weight"), centered, device, dtype)
    else:
        embed = need("model.embed_tokens.weight").contiguous()
    v0, v1 = spec.vocab_range(rank, world)
    head = "model.embed_tokens.weight" if spec.tied or get("lm_head.weight") is None \
        else "lm_head.weight"
    lm_head = embed if (world == 1 and spec.shares_head) else \
        need(head, (slice(v0, v1),), spec.logits_scale).contiguous()
    al = spec.attn_layers  # the attention stacks' layers (ModelSpec.linear_layers: not theirs)
    pw = PackedWeights(
        spec=sp, embed=embed, lm_head=lm_head, final_norm=need("model.norm.weight"),
        attn_norm=stack(norms[0]) if spec.pre_norms else None,
        mlp_norm=stack(norms[1]) if spec.pre_norms else None,
        post_attn_norm=stack(norms[2]) if spec.post_norms else None,
        post_mlp_norm=stack(norms[3]) if spec.post_norms else None,
        w_qkv=stack((attn.format("q", "weight"), q), (attn.format("k", "weight"), kv),
                    (attn.format("v", "weight"), kv), codes=True, layers=al),
        w_o=stack((attn.format("o", "weight"), cols(sp.q_dim)), codes=True, layers=al),
        w_gu=stack(*gated(f"{mlp}gate_proj.weight", f), (f"{mlp}up_proj.weight", f), codes=True,
                   layers=mlp_layers)
        if sp.ffn_dim else torch.zeros(len(mlp_layers), 0, spec.d_model, device=device,
                                       dtype=dtype),
        w_down=stack((f"{mlp}down_proj.weight", cols(sp.ffn_dim)), codes=True, layers=mlp_layers)
        if sp.ffn_dim else torch.zeros(len(mlp_layers), spec.d_model, 0, device=device,
                                       dtype=dtype),
        b_qkv=stack((attn.format("q", "bias"), q), (attn.format("k", "bias"), kv),
                    (attn.format("v", "bias"), kv), layers=al) if spec.attn_bias else None,
        b_o=on_first_rank(stack((attn.format("o", "bias"), None), layers=al)
                          if spec.o_bias else None),
        b_gu=stack(*gated("mlp.gate_proj.bias", f), ("mlp.up_proj.bias", f))
        if spec.mlp_bias else None,
        b_down=on_first_rank(stack(("mlp.down_proj.bias", None)) if spec.mlp_bias else None),
        # [L, H + KVH, hd]: the rank's q heads' rows, then its k heads'
        qk_norm=stack(("self_attn.q_norm.weight", q), ("self_attn.k_norm.weight", kv), layers=al)
        .view(len(al), sp.n_heads + sp.n_kv_heads, spec.head_dim)
        if spec.qk_norm else None,
        w_gate=stack(("self_attn.q_gate.weight", q), layers=al) if spec.attn_gate else None,
    )
    if spec.linear_layers:  # the Gated DeltaNet layers' own stacks (ModelSpec.gdn)
        ll, lin = spec.linear_layers, "linear_attn.{}.weight"
        pw.w_lin_in = stack(*((lin.format(f"in_proj_{n}"), None) for n in ("qkv", "z", "b", "a")),
                            layers=ll)
        pw.w_lin_out = stack((lin.format("out_proj"), None), layers=ll)
        conv = spec.gdn_dims[2]
        pw.lin_conv = stack((lin.format("conv1d"), None), layers=ll).view(len(ll), conv, -1)

        def per_layer(n):  # fp32 [Ll, nv]: the checkpoint's values
            return torch.stack([fetch(f"model.layers.{i}.linear_attn.{n}").float()
                                for i in ll]).to(device)
        pw.lin_alog, pw.lin_dt = per_layer("A_log"), per_layer("dt_bias")
        pw.lin_norm = torch.stack([plain(f"model.layers.{i}.{lin.format('norm')}")
                                   for i in ll]).to(device=device, dtype=dtype)
    if spec.moe:
        pw.w_router = stack(("mlp.gate.weight", None),
                            *((("mlp.shared_expert_gate.weight", None),) if spec.ffn_dim else ()),
                            layers=moe_layers,
                            out_dtype=torch.float32 if spec.router_fp32 else None)
        if spec.choice_bias:  # fp32, the checkpoint's values exactly (ERNIE's [1, E] each)
            pw.b_choice = torch.stack([fetch(f"model.layers.{i}.{fam.experts.choice_bias}")
                                       .float().reshape(-1) for i in moe_layers]).to(device)
        if spec.dense_layers:  # the dense layers' MLPs, as a dense model's (their own width)
            fd, dl = rows(sp.dense_ffn), spec.dense_layers
            pw.w_dense_gu = stack(*gated("mlp.gate_proj.weight", fd), ("mlp.up_proj.weight", fd),
                                  codes=True, layers=dl)
            pw.w_dense_down = stack(("mlp.down_proj.weight", cols(sp.dense_ffn)), codes=True,
                                    layers=dl)
        enc = encoded_mxfp4() if encode else None
        if mxfp4:
            pw.w_experts_gu, pw.s_experts_gu = stack_mxfp4("gate_up_proj")
            pw.w_experts_down, pw.s_experts_down = stack_mxfp4("down_proj")
        elif enc is not None:
            pw.w_experts_gu, pw.s_experts_gu, pw.w_experts_down, pw.s_experts_down = enc
        elif fp8 is not None:  # FP8 rows, as the dense matrices (fp8_matrices)
            pw.w_experts_gu = stack_fp8_experts(("gate_proj", "up_proj"))
            pw.w_experts_down = stack_fp8_experts(("down_proj",))
        else:
            if encode:  # an expert past layer 0's first off the grid: float experts after all
                check_fit(False)
            pw.w_experts_gu = stack_experts("gate_up_proj")
            pw.w_experts_down = stack_experts("down_proj")
        if spec.expert_bias:
            pw.b_router = stack(("mlp.gate.bias", None), layers=moe_layers)
            pw.b_experts_gu = stack_experts("gate_up_proj_bias")
            pw.b_experts_down = stack_experts("down_proj_bias")
    if spec.attn_sinks:  # this rank's q heads' logits, fp32 (the checkpoint's values exactly)
        pw.sinks = torch.stack([fetch(f"model.layers.{i}.self_attn.sinks",
                                      rows(sp.n_heads)).float()
                                for i in range(spec.n_layers)]).to(device)
    if spec.learned_positions:  # replicated on every rank; centered as the embedding rows
        pw.pos_embed = rows_through(fetch("model.embed_positions.weight",
                                          (slice(fam.position_offset, None),)),
                                    centered if spec.layer_norm else (lambda x: x), device, dtype)
    if spec.act == "xielu":  # its parameters as the MLP's bias operand (down has no bias)
        pw.b_gu = xielu_params(get, spec.n_layers, sp.ffn_dim, device, dtype)
    if spec.alibi:  # this rank's q heads' slopes
        pw.alibi = spec.alibi_slopes()[rank * sp.n_heads:(rank + 1) * sp.n_heads].to(device)
    if spec.head_bias:  # the final LayerNorm's bias through the head, W_head @ b per row, plus
        # the head's own bias where it has one (Phi)
        b = fetch("model.norm.bias").to(device).double()[:, None]
        fold = rows_through(pw.lm_head, lambda w: w.double() @ b, device, torch.float64)
        own = get("lm_head.bias", (slice(v0, v1),))
        if own is not None:
            fold += scaled(own, spec.logits_scale).to(device).double()[:, None]
        pw.b_head = fold.view(-1).to(dtype)
    _check_shapes(pw, spec.vocab_size)
    _permute_rope_dims(pw)
    return pw


def gated_q_getter(get, spec: ModelSpec):
    """get(name, index) where a layer's self_attn.q_proj weight / bias read as its q rows and
    self_attn.q_gate's as its output gate's rows: Qwen3.5's q_proj keeps [q | gate] per head,
    [H, 2, hd] rows (ModelSpec.attn_gate; index: of the rows read)."""

    def gget(name, index=None):
        for part, j in (("q_proj", 0), ("q_gate", 1)):
            for kind in ("weight", "bias"):
                end = f"self_attn.{part}.{kind}"
                if name.startswith("model.layers.") and name.endswith(end):
                    t = get(name[:-len(end)] + f"self_attn.q_proj.{kind}")
                    if t is None:
                        return None
                    t = t.reshape(spec.n_heads, 2, spec.head_dim, *t.shape[1:])[:, j]
                    t = t.reshape(spec.q_dim, *t.shape[2:])
                    return t if index is None else t[index]
        return get(name, index)
    return gget


def fp8_matrices(spec: ModelSpec, get, fam, shards: dict, world: int):
    """pack's keep_fp8: (name, layer's name) -> quant.fp8_rows of that weight's shard, where
    every layer matrix of the model can stay FP8 as it is stored; else None (the dequantized
    weights pack as before): a model whose packing changes no weight value or row (no fused
    / grouped / Conv1D checkpoint tensors -- renamed ones read through renamed_getter's
    fp8_rows --, no scales folded in, no LayerNorm centering; rotary rows permuted as whole
    rows after: _permute_rope_dims) and a checkpoint whose every q / k / v / o / gate / up /
    down weight quant.fp8_rows can lay out -- for tensor parallelism, the rank's shard of it
    (shards: a layer's name -> its index), a row-parallel matrix's (o, down) for every rank's
    columns, so that all ranks decide alike (read here: the first layer's decides the rest as
    they pack, and one that cannot raises; its rows are handed to the packing once, not read
    again). A
    mixture of experts (Qwen2 / Qwen3-MoE, OLMoE: per-expert checkpoint tensors
    mlp.experts.{e}.{gate,up,down}_proj, Qwen3-30B-A3B-FP8's layout; Mixtral's own names for
    them, block_sparse_moe.experts.{e}.w1 / w3 / w2) -- a shared expert without a gate its down
    rows' scales doubled (zero_gate_getter's 1/2 undone, exactly) -- keeps its routed experts
    and its shared expert FP8 too (the first expert layer's expert 0 decides with the dense
    matrices, a dense layer's MLP among them with the first such layer's; its layer name
    mlp.experts.{part}_proj.weight); its router stays float (dequantized where it is FP8)."""
    rows = getattr(get, "fp8_rows", None)
    plain = not (fam.conv1d or fam.fused or fam.qkv_grouped
                 or spec.text_of or spec.layer_norm or spec.qk_layer_norm
                 or (fam.experts is not None and (fam.experts.oai or fam.experts.shared_fused))
                 or spec.q_scale != 1.0 or spec.attn_gate
                 or spec.residual_scale != 1.0)
    if rows is None or not plain:
        return None
    mlp = "mlp.shared_expert." if spec.moe else "mlp."
    gu = ("gate", "up", "down")[1 - spec.gated:]
    e0 = spec.expert_layers[0] if spec.moe else 0  # the first layer of each kind decides
    names = [(0, f"self_attn.{n}_proj.weight", f"self_attn.{n}_proj.weight") for n in "qkvo"] + \
        [(e0, f"{mlp}{n}_proj.weight", f"{mlp}{n}_proj.weight") for n in gu if spec.ffn_dim] + \
        [(e0, f"mlp.experts.0.{n}_proj.weight", f"mlp.experts.{n}_proj.weight")
         for n in ("gate", "up", "down") if spec.moe] + \
        [(spec.dense_layers[0], f"mlp.{n}_proj.weight", f"mlp.{n}_proj.weight")
         for n in gu if spec.dense_layers]

    def shard(name, layer_name):
        by_cols = shards[layer_name][0] == slice(None)  # row-parallel: its columns cut
        return rows(name, shards[layer_name], world if by_cols else 1)
    first = {}
    for l, n, layer_name in names:
        first[f"model.layers.{l}.{n}"] = t = shard(f"model.layers.{l}.{n}", layer_name)
        if t is None:
            return None

    # a shared expert without a gate (Experts.shared_gate False): its down rows doubled, as the
    # float packing's (zero_gate_getter), by their scales -- exact
    ungated = ungated_shared(spec, fam)
    down = f"{mlp}down_proj.weight"

    def read(name, layer_name):
        t = first.pop(name) if name in first else shard(name, layer_name)
        if t is None:
            raise ValueError(f"{name}: not FP8 as the first layer's matrices are "
                             "(quant.fp8_rows)")
        if ungated and layer_name == down:
            t = fp8_rows_scaled(t, spec.ffn_dim // world, 2.0)
        return t
    return read


def xielu_params(get, n_layers: int, n: int, device, dtype) -> torch.Tensor:
    """[L, 2n]: each layer's xIELU alpha_p = softplus(a_p) and alpha_n = beta + softplus(a_n)
    (HF's XIELUActivation: mlp.act_fn.alpha_p / alpha_n, computed in their own dtype as HF does),
    each repeated over the layer's n MLP rows -- the bias operand the kernels' xIELU epilogue
    reads (gemv.XIELU). Its beta and eps buffers, where the checkpoint has them, must be HF's
    0.5 and -1e-6 (the kernels' constants)."""
    import torch.nn.functional as F
    out = torch.empty(n_layers, 2, n, device=device, dtype=dtype)
    for i in range(n_layers):
        p = f"model.layers.{i}.mlp.act_fn."
        ap, an = get(p + "alpha_p"), get(p + "alpha_n")
        if ap is None or an is None:
            raise KeyError(f"checkpoint has no xIELU parameters {p}alpha_p / alpha_n")
        beta, eps = get(p + "beta"), get(p + "eps")
        for name, t, want in (("beta", beta, 0.5), ("eps", eps, -1e-6)):
            if t is not None and abs(float(t) - want) > 1e-2 * abs(want):
                raise ValueError(f"{p}{name} = {float(t)}: fastdecode's xIELU takes HF's "
                                 f"{name} {want}")
        beta = torch.tensor(0.5, dtype=an.dtype) if beta is None else beta.to(an.dtype)
        out[i, 0] = F.softplus(ap.reshape(()).cpu()).to(dtype)
        out[i, 1] = (beta.reshape(()).cpu() + F.softplus(an.reshape(()).cpu())).to(dtype)
    return out.view(n_layers, 2 * n)


def scaled(t: torch.Tensor, s: float) -> torch.Tensor:
    """t times s, in fp32 (one rounding when the packing converts it), or t itself if s is 1."""
    return t if s == 1.0 else t.float() * s


def scaled_getter(get, scales: dict):
    """get(name, index) with the tensors whose names hold a key of scales multiplied by its
    value (Granite's multipliers folded into the weights: ModelSpec.q_scale, residual_scale)."""
    scales = {k: s for k, s in scales.items() if s != 1.0}
    if not scales:
        return get

    def sget(name, index=None):
        t = get(name, index)
        s = next((s for k, s in scales.items() if k in name), 1.0)
        return t if t is None else scaled(t, s)
    return sget


def text_model_getter(get):
    """get(name, index) of a vision-language model's language model (ModelSpec.text_of): HF's
    names read under model.language_model. (the model's state dict) or language_model.model.
    (its checkpoint files), the head under language_model.lm_head. there -- or, Idefics3 /
    SmolVLM, under model.text_model.; the vision tower's tensors are never read."""
    alts = (("model.", ("model.language_model.", "language_model.model.", "model.text_model.")),
            ("lm_head.", ("language_model.lm_head.",)))

    def tget(name, index=None):
        t = get(name, index)
        for head, prefixes in alts:
            if t is None and name.startswith(head):
                for p in prefixes:
                    t = get(p + name[len(head):], index)
                    if t is not None:
                        break
        return t
    return tget


def sinusoidal_table(rows: int, dim: int) -> torch.Tensor:
    """[rows, dim] fp32 sinusoidal positions as XGLM's (tensor2tensor's): row p is sin(p f) |
    cos(p f) over dim // 2 frequencies f_i = 10000^(-i / (dim // 2 - 1)), a zero column when dim is
    odd -- computed in fp32 as HF's is, so the rounded table matches its buffer bit for bit."""
    half = dim // 2
    f = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    ang = torch.arange(rows, dtype=torch.int64).float()[:, None] * f[None, :]
    t = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)
    return torch.cat([t, torch.zeros(rows, dim - 2 * half)], dim=1)


def sinusoidal_getter(get, spec: ModelSpec, offset: int):
    """get(name, index) with the position table a checkpoint does not store (Family.
    sinusoidal_positions): sinusoidal_table's rows, offset of them before position 0 (XGLM's
    2), through max_position."""

    def sget(name, index=None):
        if name != "model.embed_positions.weight":
            return get(name, index)
        t = sinusoidal_table(spec.max_position + offset, spec.d_model)
        return t if index is None else t[index]
    return sget


def ones_norm_getter(get, spec: ModelSpec):
    """get(name, index) with the RMSNorm weights a checkpoint lacks (Family.weightless_norms)
    read as ones: head_dim long for q / k norms, d_model for the others."""

    def oget(name, index=None):
        t = get(name, index)
        if t is None and name.endswith("norm.weight"):
            n = spec.head_dim if name.endswith(("q_norm.weight", "k_norm.weight")) else \
                spec.d_model
            t = torch.ones(n)
        return t
    return oget


def rows_through(table: torch.Tensor, fn, device, dtype, chunk: int = 8192) -> torch.Tensor:
    """A new tensor of fn(rows) over table's rows (fn of fp32 rows [n, d] -> [n, d'] fp32),
    rounded once to dtype on device: NanoChat's embedding norm (ModelSpec.embed_norm: a
    weightless RMSNorm, row-wise, so applied to the table once at packing), a LayerNorm family's
    centered embedding rows and its head's bias (ModelSpec.layer_norm). In chunks of rows: no
    fp32 copy of a whole vocabulary, and never the caller's tensor (from_hf's fp32 CPU model
    hands over its own parameters)."""
    out = None
    for r in range(0, table.shape[0], chunk):
        y = fn(table[r:r + chunk].to(device).float())
        if out is None:
            out = torch.empty((table.shape[0], y.shape[1]), device=device, dtype=dtype)
        out[r:r + chunk] = y
    return out


def centered(rows: torch.Tensor) -> torch.Tensor:
    """Each row minus its mean (a LayerNorm family's embedding and position rows)."""
    return rows - rows.mean(-1, keepdim=True)


def qk_norm_getter(get, spec: ModelSpec, per_head: str | None = None):
    """get(name, index) where a layer's self_attn.q_norm.weight / k_norm.weight read as a row
    per head, [H * hd] / [KVH * hd] (index: a rank's heads), whatever the checkpoint keeps: one
    row every head shares (Qwen3: repeated), a row per head (Cohere's [H, hd]; per_head, the
    name of one head's own tensor, {part} q or k and {h} the head: StableLM's
    self_attn.{part}_layernorm.norms.{h}.weight, Family.qk_norm_heads), or one norm's weights
    over all heads (OLMo 2's [H * hd]). PackedWeights.qk_norm stacks them."""

    def qget(name, index=None):
        part = next((p for p in "qk" if name.endswith(f"self_attn.{p}_norm.weight")), None)
        if part is None or not name.startswith("model.layers."):
            return get(name, index)
        n = spec.n_heads if part == "q" else spec.n_kv_heads
        t = get(name)
        if t is None and per_head:
            layer = name[:-len(f"self_attn.{part}_norm.weight")]
            heads = [get(layer + per_head.format(part=part, h=h)) for h in range(n)]
            t = None if any(w is None for w in heads) else torch.stack(heads)
        if t is None:
            return None
        t = t.reshape(-1)
        if t.numel() == spec.head_dim:
            t = t.repeat(n)
        if t.numel() != n * spec.head_dim:
            raise ValueError(f"{name}: {t.numel()} weights for {n} heads of {spec.head_dim}")
        return t if index is None else t[index]
    return qget


def head_centered_getter(get, spec: ModelSpec):
    """get(name, index) for q / k LayerNorms without a bias (ModelSpec.qk_layer_norm): each q /
    k head's rows of the projection, weights and bias, minus their mean over the head -- C W x
    + C b = y - mean(y) per head (C = I - 11^T / hd), so the kernels' per-head RMSNorm of the
    GEMV's output is the LayerNorm. A row permutation within a head (rope_permutation) keeps it
    centered; index: whole heads. In fp64, rounded once where pack converts."""
    parts = tuple(f"self_attn.{p}_proj.{w}" for p in "qk" for w in ("weight", "bias"))

    def hget(name, index=None):
        t = get(name, index)
        if t is None or not name.startswith("model.layers.") or not name.endswith(parts):
            return t
        h = t.double().reshape(-1, spec.head_dim, *t.shape[1:])
        return (h - h.mean(1, keepdim=True)).reshape(t.shape)
    return hget


def centered_getter(get, spec: ModelSpec, norms: tuple):
    """get(name, index) for a LayerNorm family (ModelSpec.layer_norm). The residual stream is
    the embedding row plus every o_proj and down output; centering each of them (C = I - 11^T / d
    on their output rows: the weights' columns and the biases minus their means) keeps it at
    mean 0, where LayerNorm(x) = x * rsqrt(mean(x^2) + eps) * w + b: the kernels' RMSNorm, then
    the bias. A norm's bias b before a projection W (q / k / v, gate / up) becomes that
    projection's bias: W (n w + b) + c = W (n w) + (W b + c) (norms: the names of the norms
    before the attention and the MLP, Family.norms) -- a missing c read as zeros, as is a down
    bias the model lacks (ModelSpec.mlp_bias is on: gate|up's bias needs it). The embedding rows
    (pack: rows_through) and the final norm's bias (PackedWeights.b_head) are pack's. In fp64,
    rounded once where pack converts: the same bits whatever the source's layout or a shard's
    slice (an fp32 sum's order follows them)."""
    feeds = {f"{p}.bias": (f"{p}.weight", norms[i]) for p, i in (
        ("self_attn.q_proj", 0), ("self_attn.k_proj", 0), ("self_attn.v_proj", 0),
        ("mlp.gate_proj", 1), ("mlp.up_proj", 1))}
    out = ("self_attn.o_proj.", "mlp.down_proj.")

    def cget(name, index=None):
        t = get(name, index)
        part = name.split(".", 3)[-1]  # model.layers.{i}.<part>
        if name.startswith("model.layers.") and part.startswith(out):
            if t is None and part == "mlp.down_proj.bias":
                t = torch.zeros(spec.d_model)
            # whole output rows: a tensor-parallel shard slices the columns alone. In fp64: a
            # shard's columns then round to the whole matrix's bits (fp32's sum order follows
            # the slice's width)
            return t if t is None else t.double() - t.double().mean(0, keepdim=True)
        if name.startswith("model.layers.") and part in feeds and spec.head_bias:
            layer = name[:-len(part)]
            w = get(layer + feeds[part][0], index)
            b = get(f"{layer}{feeds[part][1]}.bias")
            if w is None or b is None:
                return t
            fold = w.double() @ b.to(w.device).double()
            return fold if t is None else t.double() + fold
        return t
    return cget


def offset_norm_getter(get):
    """get(name, index) with every norm weight (a name ending in "norm.weight") plus 1, in fp32
    (one rounding when the packing converts it): Gemma's RMSNorms and Nemotron's LayerNorms
    scale by (1 + w) (Family.gemma_norms, norms_plus_one), the kernels' by w."""

    def nget(name, index=None):
        t = get(name, index)
        return t if t is None or not name.endswith("norm.weight") else t.float() + 1.0
    return nget


def renamed_getter(get, names: tuple, prefix: str = ""):
    """get(name, index) over a checkpoint that keeps its own tensor names
    (Family.checkpoint_names: (HF part, checkpoint part) pairs, replaced in order): the HF name
    first, then the name as each pair that changes it leaves it, the first one the checkpoint
    has (Falcon's norm before the MLP: ln_mlp, else post_attention_layernorm, else the shared
    input_layernorm) -- and, where the last starts with prefix (Family.checkpoint_prefix), it
    without the prefix (GPT-2's files name transformer.h.0 ... h.0 ...). Where get lays out
    FP8 rows (quant.dequantizing_getter's fp8_rows), so does the renamed getter, by the same
    names (Mixtral's FP8 experts block_sparse_moe.experts.{e}.w1 / w3 / w2 kept 8-bit)."""

    def first(read, name, *args):
        t = read(name, *args)
        for hf, own in names:
            if t is not None:
                break
            if hf in name:
                name = name.replace(hf, own)
                t = read(name, *args)
        if t is None and prefix and name.startswith(prefix):
            t = read(name[len(prefix):], *args)
        return t

    def rget(name, index=None):
        return first(get, name, index)
    rows = getattr(get, "fp8_rows", None)
    if rows is not None:
        rget.fp8_rows = lambda name, index=None, col_parts=1: first(rows, name, index,
                                                                    col_parts)
    return rget


def fused_parts(spec: ModelSpec, fam) -> dict:
    """fused_getter's parts (a part's name -> (the fused tensor's name, its first row, its rows))
    of a checkpoint that fuses q|k|v into self_attn.qkv_proj and gate|up into mlp.gate_up_proj
    (Phi-3: Family.fused, in that order, as HF's modeling splits them), or its shared expert's
    gate|up (GraniteMoeShared's shared_mlp.input_linear: Experts.shared_fused); {} where none."""
    q, kv, f = spec.q_dim, spec.kv_dim, spec.ffn_dim
    parts = {"self_attn.q_proj": ("self_attn.qkv_proj", 0, q),
             "self_attn.k_proj": ("self_attn.qkv_proj", q, kv),
             "self_attn.v_proj": ("self_attn.qkv_proj", q + kv, kv),
             "mlp.gate_proj": ("mlp.gate_up_proj", 0, f),
             "mlp.up_proj": ("mlp.gate_up_proj", f, f)} if fam.fused else {}
    shared = fam.experts.shared_fused if fam.experts is not None else None
    if shared and f:
        parts.update({"mlp.shared_expert.gate_proj": (shared, 0, f),
                      "mlp.shared_expert.up_proj": (shared, f, f)})
    return parts


def fused_getter(get, parts: dict):
    """get(name, index) over a checkpoint that fuses matrices (fused_parts): a part's name
    reads its rows of the fused tensor (index's row slice shifted; safetensors still reads only
    the slice). Any other name, or a checkpoint that has the part itself, reads through."""

    def fget(name, index=None):
        for part, (whole, off, n) in parts.items():
            if f".{part}." in name:
                index = index or (slice(None),)
                a, b, step = index[0].indices(n)
                assert step == 1, "row slices only"
                t = get(name.replace(part, whole), (slice(off + a, off + b), *index[1:]))
                return get(name, index) if t is None else t
        return get(name, index)
    return fget


def ungated_shared(spec: ModelSpec, fam) -> bool:
    """The mixture has a shared expert without a gate (Experts.shared_gate False): packed as a
    zero gate row (zero_gate_getter) over its down rows doubled -- the float packing's
    scaled_getter, an FP8 checkpoint's scales (fp8_matrices)."""
    return spec.moe and spec.ffn_dim > 0 and not fam.experts.shared_gate


def zero_gate_getter(get, d: int):
    """get(name, index) with a shared expert's gate row, mlp.shared_expert_gate.weight, zeros
    [1, d] where the model has none (Experts.shared_gate False: x . 0 = 0 exactly, so the
    kernels' sigmoid scale is 1/2 for every token, which its doubled down rows undo)."""

    def zget(name, index=None):
        if name.endswith(".mlp.shared_expert_gate.weight"):
            return torch.zeros(1, d)
        return get(name, index)
    return zget


def conv1d_getter(get):
    """get(name, index) over a checkpoint that stores its layer projections as [in, out]
    (GPT-2's Conv1D: c_attn, c_proj, c_fc): a 2-D projection weight read whole, transposed to
    the packing's [out, in], then index applied."""

    def cget(name, index=None):
        if name.startswith("model.layers.") and name.endswith("proj.weight"):
            t = get(name)
            if t is not None and t.dim() == 2:
                t = t.t()
                return t if index is None else t[index]
        return get(name, index)
    return cget


def grouped_qkv_getter(get, spec: ModelSpec, layout: bool | tuple = True):
    """get(name, index) over a checkpoint that fuses q|k|v in blocks as self_attn.qkv_proj rows
    (Family.qkv_grouped): per KV group (layout True), [KVH, group + 2, head_dim] -- the group's q
    heads, then its k and v (GPT-NeoX's [H, 3, head_dim] per head, a multi-query q|k|v
    concatenated, Falcon's groups); or layout (blocks, order), [blocks, 3, H / blocks, head_dim]
    with the parts in that order (CodeGen's (4, "qvk")). A part's name reads its rows of every
    block. The whole fused tensor is read (its parts interleave), then index applied."""
    hd = spec.head_dim
    if layout is True:
        order, heads = "qkv", {"q": spec.group, "k": 1, "v": 1}
    else:
        order, heads = layout[1], dict.fromkeys("qkv", spec.n_heads // layout[0])
    per_block, parts = sum(heads.values()), {}
    for p in order:
        at = sum(heads[o] for o in order[:order.index(p)])
        parts[f"self_attn.{p}_proj."] = slice(at, at + heads[p])

    def gget(name, index=None):
        for part, rows in parts.items():
            if f".{part}" in name:
                t = get(name.replace(part, "self_attn.qkv_proj."))
                if t is None:
                    break
                t = t.reshape(-1, per_block, hd, *t.shape[1:])[:, rows].reshape(-1, *t.shape[1:])
                return t if index is None else t[index]
        return get(name, index)
    return gget


def _permute_rope_dims(pw: PackedWeights):
    """Partial rotary (spec.rot < head_dim) or interleaved RoPE pairs: each q / k head's rows
    (weights, biases, q/k-norm weights) in ModelSpec.rope_permutation's order, one layer at a
    time (a layer's copy at most beside the packed weights). q . k is the same sum in any common
    order of the dims; the packed tensors are the packing's own (the caller's are not touched).
    FP8 rows (quant.fp8_rows) move whole, their scales with them: by their bytes."""
    s = pw.spec
    perm = s.rope_permutation()
    if perm is None:
        return
    perm = perm.to(pw.device)
    qk = (s.n_heads + s.n_kv_heads) * s.head_dim  # q rows, then k rows
    for t in (pw.w_qkv.view(torch.uint8) if pw.fp8 else pw.w_qkv, pw.b_qkv):
        for layer in [] if t is None else t:
            heads = layer[:qk].view(-1, s.head_dim, *layer.shape[1:])
            heads.copy_(heads[:, perm])
    if pw.qk_norm is not None:
        pw.qk_norm.copy_(pw.qk_norm[:, :, perm])


def device_free_bytes(device) -> int:
    """Memory on CUDA `device` that new tensors can take: the driver's free bytes plus the blocks
    torch's caching allocator holds unused -- a model just moved off the GPU (from_hf(model.cpu(),
    device="cuda")) leaves its memory in that cache, which the driver counts as used."""
    dev = torch.device(device)
    return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) \
        - torch.cuda.memory_allocated(dev)


def check_weights_fit(sp: ModelSpec, full_vocab: int, separate_head: bool, dtype,
                      free_bytes: int, expert_elt: float | None = None,
                      matrix_elt: float | None = None):
    """The packed weights of shard sp (every layer matrix and norm, the lm_head rows, the whole
    embedding beside them unless it is the lm_head) must fit the device's free memory: else a
    ValueError before any copy, not an out-of-memory error halfway through the packing.
    expert_elt / matrix_elt: bytes a routed expert's / a dense matrix's element takes (MXFP4's
    / FP8's), where not dtype's."""
    elt = torch.finfo(dtype).bits // 8
    need = sp.weight_bytes_per_token(elt, all_experts=True, expert_elt=expert_elt,
                                     matrix_elt=matrix_elt) + \
        (full_vocab * sp.d_model * elt if separate_head else 0)
    if need > free_bytes:
        gib = 1 << 30
        raise ValueError(f"the packed weights need {need / gib:.1f} GiB in {dtype} and "
                         f"{free_bytes / gib:.1f} GiB are free on the device (a Hugging Face "
                         f"model on that GPU holds its own copy: fastdecode.from_pretrained(path) "
                         f"loads without one, and from_hf(model_on_cpu, device='cuda') packs "
                         f"straight onto the GPU)")


# the per-expert tensors of HF's stacked ones (its state dict's [E, 2F, d] gate|up and [E, d, F]
# down), in a checkpoint's mlp.experts.{e}.<name>.weight (a family's own names: its
# checkpoint_names, Mixtral's w1 / w3 / w2)
_EXPERT_PARTS = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}


def expert_getter(get, d: int, f: int):
    """Serves model.layers.{i}.mlp.experts.gate_up_proj / down_proj from HF's stacked tensors
    or a checkpoint's per-expert mlp.experts.{e}.gate_proj / up_proj / down_proj (Qwen2 /
    Qwen3-MoE, OLMoE), read one expert at a time; index: a slice of the experts. Stacked
    tensors stored [E, in, out] -- Qwen3-VL-MoE's released files: gate_up_proj [E, d, 2F],
    down_proj [E, F, d], which transformers transposes as it loads them -- are transposed to
    HF's [E, out, in] (d and f: the model width and an expert's; told apart by their shape, as
    transformers' own check does, so a square one is read as stored)."""
    def eget(name, index=None):
        t = get(name, index)
        head, _, part = name.rpartition(".experts.")
        if part not in _EXPERT_PARTS:
            return t
        if t is not None:
            out, inp = (2 * f, d) if part == "gate_up_proj" else (d, f)
            return t.transpose(1, 2) if tuple(t.shape[1:]) == (inp, out) != (out, inp) else t
        e0, e1 = (0, None) if index is None else (index[0].start, index[0].stop)
        ts, e = [], e0
        while e1 is None or e < e1:
            rows = [get(f"{head}.experts.{e}.{n}.weight") for n in _EXPERT_PARTS[part]]
            if any(r is None for r in rows):
                break
            ts.append(torch.cat(rows))
            e += 1
        return torch.stack(ts) if ts else None
    return eget


def oai_expert_getter(get):
    """Serves gpt-oss's experts (Experts.oai) in the packed layout: HF's gate_up_proj [E, d, 2F]
    -- [in, out], the gate and up columns interleaved (2i, 2i + 1) -- as [E, 2F, d], the gate
    rows then the up rows; down_proj [E, F, d] as [E, d, F]; gate_up_proj_bias [E, 2F] de-
    interleaved the same way. index: a slice of the experts (read before the reordering)."""
    def oget(name, index=None):
        t = get(name, index)
        part = name.rpartition(".mlp.experts.")[2]
        if t is None or part not in ("gate_up_proj", "down_proj", "gate_up_proj_bias"):
            return t
        if part != "gate_up_proj_bias":
            t = t.transpose(-1, -2)
        return deinterleave_gate_up(t) if part.startswith("gate_up") else t
    return oget


def deinterleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """gpt-oss's gate|up rows [E, 2F, ...], gate and up interleaved (2i, 2i + 1) -> the gate
    rows, then the up rows (the packed layout)."""
    return torch.cat([t[:, 0::2], t[:, 1::2]], 1)


def dict_getter(state: dict):
    """get(name, index=None) over an in-memory state dict."""
    def get(name, index=None):
        t = state.get(name)
        return t if t is None or index is None else t[index]
    return get


def _check_shapes(pw: PackedWeights, full_vocab: int):
    s = pw.spec  # a rank's shard sizes; the embedding is replicated (full vocabulary)
    L = len(s.mlp_layers)
    want = {
        "embed": (full_vocab, s.d_model), "lm_head": (s.vocab_size, s.d_model),
        "w_qkv": (len(s.attn_layers), s.qkv_dim, s.d_model),
        "w_o": (len(s.attn_layers), s.d_model, s.q_dim),
        "w_gu": (L, (1 + s.gated) * s.ffn_dim, s.d_model), "w_down": (L, s.d_model, s.ffn_dim),
    }
    if s.moe:
        E, F, d, Ld, Fd = s.n_experts, s.expert_ffn, s.d_model, len(s.dense_layers), s.dense_ffn
        want.update(w_router=(L, E + (s.ffn_dim > 0), d), w_experts_gu=(L, E, 2 * F, d),
                    w_experts_down=(L, E, d, F))
        if Ld:
            want.update(w_dense_gu=(Ld, (1 + s.gated) * Fd, d), w_dense_down=(Ld, d, Fd))
    for name in ("w_qkv", "w_o", "w_gu", "w_down", "w_experts_gu", "w_experts_down",
                 "w_dense_gu", "w_dense_down"):
        if name in want and getattr(pw, name).dtype == torch.float8_e4m3fn:  # FP8 rows: codes,
            *lead, K = want[name]  # scales, padding (quant.fp8_rows)
            want[name] = (*lead, row_elems(K, torch.float8_e4m3fn))
    if s.moe and pw.s_experts_gu is not None:  # MXFP4: two codes a byte, a scale a 32 elements
        if d % 32 or F % 32:
            raise ValueError(f"MXFP4 experts need d_model {d} and expert_ffn {F} to be "
                             "multiples of 32")
        want.update(w_experts_gu=(L, E, 2 * F, d // 2), w_experts_down=(L, E, d, F // 2),
                    s_experts_gu=(L, E, 2 * F, d // 32), s_experts_down=(L, E, d, F // 32))
    if s.attn_gate:
        want["w_gate"] = (len(s.attn_layers), s.q_dim, s.d_model)
    if s.linear_layers:
        Ll, (_, vd, conv, rows) = len(s.linear_layers), s.gdn_dims
        want.update(w_lin_in=(Ll, rows, s.d_model), w_lin_out=(Ll, s.d_model, vd),
                    lin_conv=(Ll, conv, s.gdn[4]), lin_alog=(Ll, s.gdn[1]),
                    lin_dt=(Ll, s.gdn[1]), lin_norm=(Ll, s.gdn[3]))
    for name, shape in want.items():
        got = tuple(getattr(pw, name).shape)
        if got != shape:
            raise ValueError(f"{name}: checkpoint shape {got} does not match the config {shape}")


def from_state_dict(spec: ModelSpec, state: dict, *, device, dtype, rank=0, world=1):
    return pack(spec, dict_getter(state), device=device, dtype=dtype, rank=rank, world=world)
