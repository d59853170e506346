"""Quantized checkpoints: which ones load, and their weights dequantized as they are read.

A checkpoint says how it is quantized in its config's `quantization_config` (transformers'
`quant_method`). fastdecode streams float weights (bf16 / fp16 / fp32), so a quantized
checkpoint loads only where its weights can be turned back into floats exactly as transformers
turns them when it dequantizes:

- "fp8" (transformers' FineGrainedFP8Config: Qwen3-*-FP8, ...): a linear layer's weight W [N, K]
  is stored as float8 codes q (e4m3) with fp32 scales `weight_scale_inv` [ceil(N / bn),
  ceil(K / bk)], one per block of `weight_block_size` [bn, bk] (the last blocks partial; one
  scale: per tensor), and W[n, k] = q[n, k] * s[n // bn, k // bk] -- computed in fp32 (exact:
  a 4-bit significand times an fp32 scale) and rounded to the packed dtype once, as
  transformers' Fp8Dequantize rounds it. The embeddings, norms and (mostly) the lm_head stay
  unquantized in such checkpoints and load as they are. The dequantized weights stream as bf16:
  an FP8 checkpoint decodes at the bf16 model's speed, in its memory (but see fp8_rows below).
- "compressed-tensors" whose weights are 8-bit floats (format "float-quantized" or
  "naive-quantized": llm-compressor's FP8 / FP8-dynamic checkpoints, RedHatAI/*-FP8 and the
  like): the same codes with scales `weight_scale` per tensor ([1]), per output channel ([N, 1]),
  per group of K columns ([N, K / g]) or per block ([ceil(N / bn), ceil(K / bk)], the config
  group's block_structure), symmetric (no zero point): W = q * s by compressed_tensors'
  dequantize ((q - 0) * s, in the scale's dtype: one rounding of an exact product, as here).
  Kept 8-bit in modes 'ops' and 'mega' (fp8_rows; packing.pack's keep_fp8): an e4m3 weight
  whose scales are constant over each 128 columns (blocks 128 wide or wider, per channel, per
  tensor, groups of 128) packs as its codes and a row's scales (triton_kernels._common.FP8_GROUP's
  row layout) and streams half the bf16 bytes (+ 3% for the scales); the kernels multiply the
  codes by their scales in fp32 (no rounding of W to bf16 at T = 1). Tensor parallelism: a
  rank's shard of each matrix (fp8_rows' index), where every rank's columns of the row-parallel
  ones keep each 128-column group in one scale block (col_parts) -- else every rank dequantizes.
- "mxfp4" (gpt-oss): each expert matrix W [E, N, K] (N the output rows: gate|up's 2F, down's d)
  is stored as `<name>_blocks` [E, N, K / 32, 16] uint8 -- two FP4 (e2m1) codes a byte, the low
  nibble first -- and `<name>_scales` [E, N, K / 32] uint8 E8M0 exponents, one per 32 elements:
  W[e, n, k] = fp4(code) * 2^(scale - 127), exact in fp32 and bf16 (a 2-bit significand), as
  transformers' convert_moe_packed_tensors computes it; served in HF's orientation, [E, K, N]
  (its GptOssExperts parameters), the attention, router and embeddings unquantized. packing.pack
  keeps such experts MXFP4 instead (their codes and scales as stored: PackedWeights.s_experts_*;
  the expert GEMVs decode them in registers), so they stream a quarter of the bytes; this
  dequantization serves the rest (a residual scale on the experts: none in gpt-oss).

Every other method or scheme (GPTQ, AWQ, bitsandbytes, integer or 4-bit compressed-tensors,
sparse ones ...) raises UnsupportedModelError before any tensor is read; so does a float8 tensor
without its scales.
"""
from __future__ import annotations

import torch

from .spec import UnsupportedModelError
from .triton_kernels._common import FP8_GROUP
from .triton_kernels.config import row_elems

FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2")
                   if hasattr(torch, n))
# quant method -> the suffix of a weight's scales beside its name ("...q_proj.weight" + suffix)
SCALE_SUFFIX = {"fp8": "_scale_inv", "compressed-tensors": "_scale"}
SUPPORTED = (*SCALE_SUFFIX, "mxfp4")
# the e2m1 values of the 16 FP4 codes (sign bit 3; OCP Microscaling Formats spec, as
# transformers' FP4_VALUES)
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
              -6.0)
# bytes an MXFP4 element takes as packed (PackedWeights.s_experts_gu): a 4-bit code, and an 8-bit
# scale a 32
MXFP4_BYTES = 0.5 + 1 / 32
# bytes a dense FP8 element takes as packed (fp8_rows: a code, and a 4-byte scale a 128; padding
# ignored)
FP8_BYTES = 1 + 4 / 128
FLOAT8_FORMATS = ("float-quantized", "naive-quantized")  # compressed-tensors' dense fp8 formats


def quantization(config) -> dict | None:
    """The config's quantization_config as a dict (None: not quantized). transformers keeps it
    a dict on configs it built from a file, an object with to_dict() on a loaded model's."""
    q = getattr(config, "quantization_config", None)
    if q is None or isinstance(q, dict):
        return q or None
    return q.to_dict()


def check(config) -> str | None:
    """-> the quant method (None: none); raises UnsupportedModelError for one fastdecode cannot
    dequantize."""
    q = quantization(config)
    if q is None:
        return None
    method = q.get("quant_method")
    if method not in SUPPORTED:
        raise UnsupportedModelError(
            f"{method!r}-quantized checkpoints are not supported (fastdecode streams float "
            f"weights; it dequantizes {', '.join(SUPPORTED)} checkpoints as they load): "
            "load an unquantized checkpoint")
    if method == "compressed-tensors":
        groups = list((q.get("config_groups") or {}).values())
        fmt = q.get("format")  # "mixed-precision" (or none): each group names its own
        fmts = {g.get("format") for g in groups} if fmt in (None, "mixed-precision") else {fmt}
        schemes = [g.get("weights") or {} for g in groups]
        fp8 = all(w.get("type") == "float" and w.get("num_bits") == 8
                  and w.get("symmetric", True) for w in schemes)
        sparse = (q.get("sparsity_config") or {}).get("format", "dense") != "dense"
        if not fmts <= set(FLOAT8_FORMATS) or not schemes or not fp8 or sparse:
            raise UnsupportedModelError(
                f"compressed-tensors checkpoints in format {fmt!r} with weights "
                f"{[(w.get('type'), w.get('num_bits')) for w in schemes]}"
                f"{' and sparsity' if sparse else ''} are not supported: fastdecode dequantizes "
                "their symmetric 8-bit float weights (formats " + ", ".join(FLOAT8_FORMATS) + ")")
    return method


def _block(q: dict, method: str):
    """The block [bn, bk] the config gives a weight's scales (None: derived from the grid)."""
    if method == "fp8":
        return q.get("weight_block_size")
    blocks = {tuple(g["weights"]["block_structure"]) for g in q["config_groups"].values()
              if g["weights"].get("block_structure")}
    return blocks.pop() if len(blocks) == 1 else None


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, block=None) -> torch.Tensor:
    """q [N, K] float8 codes, scale [ceil(N / bn), ceil(K / bk)] (or one element: per tensor)
    -> fp32 q * s per block (module docstring). block [bn, bk]: the config's weight_block_size;
    without it, the block the scale grid divides the weight into (transformers' rule)."""
    if scale.dtype == torch.uint8:  # E8M0 exponents stored as bytes: 2 ** (byte - 127)
        s = (scale.to(torch.float32) - 127.0).exp2()
    else:
        s = scale.to(torch.float32)
    w = q.to(torch.float32)
    if s.numel() == 1:
        return w * s.reshape(())
    N, K = w.shape
    s, (bn, bk) = _scale_grid(N, K, s, block)
    s = s.repeat_interleave(bn, dim=0)[:N].repeat_interleave(bk, dim=1)[:, :K]
    return w * s


def _scale_grid(N: int, K: int, s: torch.Tensor, block):
    """(s as [ceil(N / bn), ceil(K / bk)] fp32, (bn, bk)) of dequantize_fp8's scales."""
    if s.numel() == 1:
        return s.reshape(1, 1), (N, K)
    gn, gk = s.shape
    if block is None:
        if N % gn or K % gk:
            raise ValueError(f"a weight [{N}, {K}] whose scale grid [{gn}, {gk}] does not divide "
                             "it needs the config's weight_block_size")
        block = (N // gn, K // gk)
    bn, bk = block
    if (gn, gk) != (-(-N // bn), -(-K // bk)):
        raise ValueError(f"a weight [{N}, {K}] in blocks of {bn} x {bk} has "
                         f"{-(-N // bn)} x {-(-K // bk)} scales, the checkpoint {gn} x {gk}")
    return s, (bn, bk)


def fp8_rows(q: torch.Tensor, scale: torch.Tensor, block=None, index=None,
             col_parts: int = 1) -> torch.Tensor | None:
    """q [N, K] float8_e4m3fn codes and their scales (dequantize_fp8's) -> the rows as the FP8
    kernels read them (_common.FP8_GROUP): [N, row_elems(K)] float8_e4m3fn, each row its K codes,
    then its fp32 scale of each 128 columns, zero padding to 16 bytes. index (a tuple of slices,
    rows then columns, as packing's getters take): the rows of q[index] -- a tensor-parallel
    rank's shard, its 128-column groups counted from its first column. col_parts: the K columns
    are cut in that many equal parts (a row-parallel matrix's ranks) and every part must be
    readable, so all ranks decide alike. None where they cannot be read so: e5m2 codes, E8M0
    scales, a (part's) K % 16 != 0, or a (part's) group of 128 columns spanning two scale blocks
    (blocks narrower than 128 columns, or not a multiple of them, or a part not starting on a
    block)."""
    G = FP8_GROUP.value
    N, K = q.shape
    if q.dtype != torch.float8_e4m3fn or scale.dtype == torch.uint8 or K % col_parts:
        return None
    s, (bn, bk) = _scale_grid(N, K, scale.to(torch.float32), block)
    rix, cix = (*(index or ()), slice(None), slice(None))[:2]
    width = K // col_parts
    if width % 16 or not all(_groups_in_blocks(p * width, width, bk) for p in range(col_parts)):
        return None
    c0, c1, step = cix.indices(K)
    if step != 1 or (c1 - c0) % 16 or not _groups_in_blocks(c0, c1 - c0, bk):
        return None
    Kl = c1 - c0
    ng = -(-Kl // G)
    rows = s.repeat_interleave(bn, dim=0)[:N][rix][
        :, (c0 + torch.arange(ng, device=s.device) * G) // bk]
    codes = q[rix][:, c0:c1]
    out = torch.zeros(codes.shape[0], row_elems(Kl, q.dtype), dtype=torch.uint8,
                      device=q.device)
    out[:, :Kl] = codes.view(torch.uint8)
    out[:, Kl:Kl + 4 * ng] = rows.contiguous().to(q.device).view(torch.uint8)
    return out.view(torch.float8_e4m3fn)


def _groups_in_blocks(c0: int, width: int, bk: int) -> bool:
    """Each 128-column group of columns [c0, c0 + width) lies in one scale block of bk columns
    (the groups counted from c0: fp8_rows' row layout)."""
    G = FP8_GROUP.value
    return all(g // bk == (min(g + G, c0 + width) - 1) // bk for g in range(c0, c0 + width, G))


def _scale_bytes(K: int) -> slice:
    """The bytes of an fp8_rows row that hold its fp32 scales: one per FP8_GROUP of its K
    codes, after them."""
    return slice(K, K + 4 * -(-K // FP8_GROUP.value))


def fp8_values(rows: torch.Tensor, K: int) -> torch.Tensor:
    """fp8_rows' layout [..., N, row_elems(K)] -> the fp32 weights [..., N, K] (exact)."""
    s = rows.view(torch.uint8)[..., _scale_bytes(K)].contiguous().view(torch.float32)
    return rows[..., :K].to(torch.float32) * \
        s.repeat_interleave(FP8_GROUP.value, dim=-1)[..., :K]  # s: [..., N, groups]


def fp8_rows_scaled(rows: torch.Tensor, K: int, factor: float) -> torch.Tensor:
    """fp8_rows' layout [..., N, row_elems(K)] with every scale times factor, a new tensor (a
    power of two: the values times it exactly)."""
    out = rows.clone()
    b, span = out.view(torch.uint8), _scale_bytes(K)
    b[..., span] = (b[..., span].contiguous().view(torch.float32) * factor).view(torch.uint8)
    return out


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """blocks [..., N, G, 16] uint8, scales [..., N, G] uint8 -> fp32 [..., N, G * 32] (module
    docstring: each byte's low nibble the even element, its high one the odd)."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} do not match their scales "
                         f"{tuple(scales.shape)} (expected [..., G, 16] and [..., G])")
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    b = blocks.to(torch.int64)
    w = torch.stack([lut[b & 15], lut[b >> 4]], -1).flatten(-2)  # [..., N, G, 32]
    w = torch.ldexp(w, scales.to(torch.int32)[..., None] - 127)
    return w.flatten(-2)


def encode_mxfp4(w: torch.Tensor):
    """w [..., K] whose every group of 32 along K is MXFP4's (e2m1 values times one power of two:
    a model transformers dequantized from an MXFP4 checkpoint) -> (codes [..., K / 2] uint8,
    scales [..., K / 32] uint8) that dequantize_mxfp4 turns back into w exactly; None where a
    value is not so (K % 32 != 0 too). Each group's scale puts its largest magnitude in [4, 8):
    the stored one where the group holds a 4 or a 6, else a smaller power of two that gives the
    same values (codes doubled: every e2m1 value below 4 doubles into the set)."""
    *lead, K = w.shape
    if K % 32 or not w.is_floating_point():
        return None
    g = w.float().reshape(*lead, K // 32, 32)
    _, e = torch.frexp(g.abs().amax(-1))  # amax = m 2^e, m in [0.5, 1): floor(log2) = e - 1
    s = (e - 3 + 127).clamp(0, 254)
    q = torch.ldexp(g, (127 - s)[..., None].to(g.dtype))  # exact: a power of two
    lut = torch.tensor(FP4_VALUES[:8], device=w.device)
    idx = torch.bucketize(q.abs(), lut).clamp(max=7)
    if not torch.equal(lut[idx], q.abs()):
        return None
    code = (idx | (torch.signbit(q).to(idx.dtype) << 3)).to(torch.uint8)
    codes = code[..., 0::2] | (code[..., 1::2] << 4)  # the low nibble the even element
    return codes.reshape(*lead, K // 2), s.to(torch.uint8)


def dequantizing_getter(config, get, device=None):
    """get(name, index=None) of a checkpoint -> the same, its fp8 weights dequantized (fp32, on
    `device`, else where get put them; sliced by index after: a block straddles a rank's
    rows); an MXFP4 checkpoint's expert matrices from their blocks and scales (fp32, HF's
    orientation; index: a slice of the experts, read as such). Not quantized: get itself."""
    method = check(config)
    if method is None:
        return get
    if method == "mxfp4":
        def read4(name, index=None):
            t = get(name, index)
            if t is not None:
                return t
            blocks, scales = get(name + "_blocks", index), get(name + "_scales", index)
            if blocks is None:
                return None
            if scales is None:
                raise TypeError(f"{name}_blocks is MXFP4 without its {name}_scales")
            if device is not None:
                blocks, scales = blocks.to(device), scales.to(device)
            return dequantize_mxfp4(blocks, scales).transpose(-1, -2)
        return read4
    block = _block(quantization(config), method)
    suffix = SCALE_SUFFIX[method]

    def codes(name):  # (q, scale) of a float8 weight on `device`, else None
        q = get(name)
        if q is None or q.dtype not in FP8_DTYPES:
            return None
        scale = get(name + suffix)
        if scale is None:
            raise TypeError(f"{name} is float8 without its {name}{suffix}")
        zp = get(name + "_zero_point")
        if zp is not None and zp.any():
            raise UnsupportedModelError(f"{name}: an asymmetric fp8 weight (a zero point)")
        return (q, scale) if device is None else (q.to(device), scale.to(device))

    def read(name, index=None):
        t = get(name, index)
        if t is None or t.dtype not in FP8_DTYPES:
            return t
        w = dequantize_fp8(*codes(name), block)
        return w if index is None else w[index]

    def rows(name, index=None, col_parts=1):
        """name's weight (its shard `index`) in fp8_rows' layout (kept 8-bit), else None."""
        qs = codes(name)
        return None if qs is None else fp8_rows(*qs, block, index, col_parts)
    read.fp8_rows = rows
    return read
