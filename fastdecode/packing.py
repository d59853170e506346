"""HF weights -> PackedWeights: per-layer matrices fused and stacked over layers, laid out for the
GEMV tiles (row-major [N, K], K contiguous, so a tile streams whole 16-byte-aligned rows).

    w_qkv  [L, (H + 2 KVH) * hd, d]   q rows, then k rows, then v rows (head-major)
    w_o    [L, d, H * hd]
    w_gu   [L, 2 * ffn, d]            gate rows, then up rows (the SWIGLU epilogue reads row n and
                                      row ffn + n in the same tile)
    w_down [L, d, ffn]
    norms  [L, d]; qk_norm [L, 2, hd] (Qwen3); biases where the family has them
    embed  [V, d]; lm_head [V, d] (the same tensor when the embeddings are tied)
Stacking over layers gives every op one base pointer plus a layer stride (what the megakernel needs).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from .spec import ModelSpec

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class PackedWeights:
    spec: ModelSpec
    embed: torch.Tensor
    lm_head: torch.Tensor
    final_norm: torch.Tensor
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor
    w_qkv: torch.Tensor
    w_o: torch.Tensor
    w_gu: torch.Tensor
    w_down: torch.Tensor
    b_qkv: torch.Tensor | None = None
    b_o: torch.Tensor | None = None
    b_gu: torch.Tensor | None = None
    b_down: torch.Tensor | None = None
    qk_norm: torch.Tensor | None = None

    @property
    def dtype(self):
        return self.w_qkv.dtype

    @property
    def device(self):
        return self.w_qkv.device

    def tensors(self):
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "spec"}


def pack(spec: ModelSpec, get, *, device, dtype) -> PackedWeights:
    """Build PackedWeights from get(hf_name) -> tensor | None (HF state-dict names)."""
    def need(name):
        t = get(name)
        if t is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        if not t.is_floating_point():
            raise TypeError(f"{name} has dtype {t.dtype}; fastdecode needs float weights "
                            "(dequantize first)")
        return t.to(device=device, dtype=dtype)

    def stack(fmt, *, cat=None, optional=False):
        out = []
        for i in range(spec.n_layers):
            names = [f"model.layers.{i}.{f}" for f in (cat or [fmt])]
            if optional and get(names[0]) is None:
                return None
            parts = [need(n) for n in names]
            out.append(torch.cat(parts, 0) if len(parts) > 1 else parts[0])
        return torch.stack(out).contiguous()

    attn = "self_attn.{}_proj"
    qkv_w = [attn.format(x) + ".weight" for x in "qkv"]
    qkv_b = [attn.format(x) + ".bias" for x in "qkv"]
    embed = need("model.embed_tokens.weight").contiguous()
    head = get("lm_head.weight")
    if spec.tied or head is None:
        lm_head = embed
    else:
        lm_head = need("lm_head.weight").contiguous()
    pw = PackedWeights(
        spec=spec, embed=embed, lm_head=lm_head, final_norm=need("model.norm.weight"),
        attn_norm=stack("input_layernorm.weight"),
        mlp_norm=stack("post_attention_layernorm.weight"),
        w_qkv=stack(None, cat=qkv_w), w_o=stack(attn.format("o") + ".weight"),
        w_gu=stack(None, cat=["mlp.gate_proj.weight", "mlp.up_proj.weight"]),
        w_down=stack("mlp.down_proj.weight"),
        b_qkv=stack(None, cat=qkv_b) if spec.attn_bias else None,
        b_o=stack(attn.format("o") + ".bias") if spec.o_bias else None,
        b_gu=stack(None, cat=["mlp.gate_proj.bias", "mlp.up_proj.bias"]) if spec.mlp_bias else None,
        b_down=stack("mlp.down_proj.bias") if spec.mlp_bias else None,
        qk_norm=stack(None, cat=["self_attn.q_norm.weight", "self_attn.k_norm.weight"])
        .view(spec.n_layers, 2, spec.head_dim) if spec.qk_norm else None,
    )
    _check_shapes(pw)
    return pw


def _check_shapes(pw: PackedWeights):
    s = pw.spec
    want = {
        "embed": (s.vocab_size, s.d_model), "lm_head": (s.vocab_size, s.d_model),
        "w_qkv": (s.n_layers, s.qkv_dim, s.d_model), "w_o": (s.n_layers, s.d_model, s.q_dim),
        "w_gu": (s.n_layers, 2 * s.ffn_dim, s.d_model),
        "w_down": (s.n_layers, s.d_model, s.ffn_dim),
    }
    for name, shape in want.items():
        got = tuple(getattr(pw, name).shape)
        if got != shape:
            raise ValueError(f"{name}: checkpoint shape {got} does not match the config {shape}")


def from_state_dict(spec: ModelSpec, state: dict, *, device, dtype) -> PackedWeights:
    return pack(spec, state.get, device=device, dtype=dtype)
