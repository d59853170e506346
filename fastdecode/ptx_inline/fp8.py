"""FP8 (e4m3) weight words times f16 activations, for the decode stream's FP8 word pieces.

fp8x4_dot_f16(w, xa, xb, USE_ASM) -> fp32: w an int32 word of four e4m3 codes (byte i element i,
    little-endian), xa / xb int32 words of two f16 each (elements 0, 1 and 2, 3; the low half
    first) -> (c0 xa0 + c2 xb0) + (c1 xa1 + c3 xb1): two `cvt.rn.f16x2.e4m3x2` (each a 16-bit
    pair of codes to an f16 pair: exact, e4m3 in f16), `mul.rn.f16x2` twice (each product
    rounded to f16), `add.rn.f16x2` (each lane's two products summed, rounded to f16), both lanes
    to fp32 (exact) and added in fp32 -- nine instructions for four codes, where converting each
    code to fp32 for an fp32 multiply-add takes a byte permute, a conversion to f16 and one to
    fp32 a pair besides the two FFMA (_common.row_partials' FP8_PIECES). The explicit .rn keeps
    ptxas from fusing a multiply into the add, so the fallback's separate roundings are the same
    numbers. No memory access, no ordering meaning. A code times an activation must stay within
    f16 (|c| <= 448: the caller scales the activations by 2^-8, _common.f16_pairs).
    Fallback (the interpreter): the same conversions and f16 roundings in Triton ops.
"""
import triton
import triton.language as tl


@triton.jit
def _e4m3_f16(w, i: tl.constexpr):
    """Byte i of the int32 words w as the e4m3 code's value in f16 (exact): its sign to f16's
    sign bit and its 7 exponent / mantissa bits to f16's top 7 below it make the code times 2^-8
    (f16's exponent bias 15 against e4m3's 7; e4m3's subnormals land on f16's normals), then
    times 2^8 (exact). Integer ops and a bitcast: the interpreter's float8 conversion is slow."""
    b = w >> (8 * i)
    h = ((b & 128) << 8) | ((b & 127) << 7)
    return h.to(tl.uint16).to(tl.float16, bitcast=True) * 256.0


@triton.jit
def _f16_half(w, i: tl.constexpr):
    """Half i (0 low, 1 high) of the int32 words w as f16."""
    return ((w >> (16 * i)) & 65535).to(tl.uint16).to(tl.float16, bitcast=True)


@triton.jit
def fp8x4_dot_f16(w, xa, xb, USE_ASM: tl.constexpr):
    if USE_ASM:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 l, h, s0, s1; .reg .b32 p, q; .reg .f32 f0, f1; mov.b32 {l, h}, $1; "
            "cvt.rn.f16x2.e4m3x2 p, l; cvt.rn.f16x2.e4m3x2 q, h; mul.rn.f16x2 p, p, $2; "
            "mul.rn.f16x2 q, q, $3; add.rn.f16x2 p, p, q; mov.b32 {s0, s1}, p; "
            "cvt.f32.f16 f0, s0; cvt.f32.f16 f1, s1; add.f32 $0, f0, f1; }",
            "=r,r,r,r", [w, xa, xb], dtype=tl.float32, is_pure=True, pack=1)
    else:
        lo = _e4m3_f16(w, 0) * _f16_half(xa, 0) + _e4m3_f16(w, 2) * _f16_half(xb, 0)
        hi = _e4m3_f16(w, 1) * _f16_half(xa, 1) + _e4m3_f16(w, 3) * _f16_half(xb, 1)
        return lo.to(tl.float32) + hi.to(tl.float32)
