"""Every fused op against reference.py (fp32 math on the same inputs), with hypothesis-drawn odd
sizes, positions and seeds; and for each tolerance, a deliberately wrong kernel that it rejects."""
import random

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastdecode import ops
from fastdecode import reference as R
from fastdecode.spec import ALIBI_BLOOM, ALIBI_FALCON, ModelSpec
from fastdecode.triton_kernels._common import INTERPRET, round_bf16
from fastdecode.triton_kernels.attention import split_range, split_range_host
from fastdecode.triton_kernels.config import StreamConfig, merge_splits
from fastdecode.triton_kernels.gemv import ACT_CODES
from fastdecode.triton_kernels.qkv_rope import defer_qk_norm
from helpers import ACT_GAIN, assert_close, close
from conftest import DEVICE

DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])
ACTS = st.sampled_from(sorted(ACT_CODES))  # every activation of the MLP epilogue
TOKENS = st.sampled_from([1, 1, 2, 5, 17])  # decode (register GEMV) and tl.dot (M padded) paths
# the megakernel's decode stream (T=1): 1 to 128 rows per tile, whole rows or K chunks of 16-64
# (odd K ends mid-chunk), one or several tiles per program; the register stream and (stages 3)
# the shared-memory one (gemv and qkv_rope; lm_head ignores stages)
STREAMS = st.sampled_from([None, StreamConfig(64, 4, 1, max_k=16), StreamConfig(256, 4, 3, max_k=64),
                           StreamConfig(8192, 8, 2), StreamConfig(512, 4, 4, max_k=32),
                           StreamConfig(64, 4, 3, max_k=16, stages=3),
                           StreamConfig(8192, 8, 2, stages=3)])


def rnd(*shape, dtype, seed_gen, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=seed_gen) * scale + shift).to(DEVICE, dtype)


@given(T=TOKENS, K=st.integers(1, 300), seed=st.integers(0, 2**31 - 1), dtype=DTYPES,
       has_res=st.booleans())
def test_rmsnorm(T, K, seed, dtype, has_res):
    g = torch.Generator().manual_seed(seed)
    x, w = rnd(T, K, dtype=dtype, seed_gen=g), rnd(K, dtype=dtype, seed_gen=g, shift=1)
    res = rnd(T, K, dtype=dtype, seed_gen=g) if has_res else None
    res_ref = res.clone() if has_res else None
    y = ops.rmsnorm(x, w, 1e-5, residual=res)
    ref = R.rmsnorm(x, w, 1e-5, residual=res_ref)
    assert_close(y, ref, dtype, K, "rmsnorm")
    if has_res:
        assert torch.equal(res, res_ref) or close(res, res_ref, dtype)


@given(T=TOKENS, N=st.integers(1, 3000), seed=st.integers(0, 2**31 - 1), dtype=DTYPES, act=ACTS,
       gated=st.booleans())
def test_swiglu(T, N, seed, dtype, act, gated):
    """The long prompts' MLP activation on a [gate | up] matmul output against the fp32
    reference's act(gate) * up (torch's silu / tanh GELU, relu^2) -- or act(up) of an up output
    alone (an MLP without a gate; xIELU always, with its parameter rows; gpt-oss's clamped
    SwiGLU never, its pre-activations std 3 past its clamp at 7 now and then): elementwise, one
    rounding to dtype (K=1); N past the 2048-lane block."""
    g = torch.Generator().manual_seed(seed)
    gated = gated and act != "xielu" or act == "swiglu_oai"
    p = xielu_params(N, dtype, g) if act == "xielu" else None
    y = rnd(T, (1 + gated) * N, dtype=dtype, seed_gen=g, scale=3.0)
    assert_close(ops.swiglu(y, act, gated, params=p), R.glu(y.float(), act, gated, params=p),
                 dtype, 1, "swiglu")


def xielu_params(N, dtype, g):
    """xIELU's operand rows [alpha_p x N | alpha_n x N] (packing.xielu_params), a value per row:
    softplus(N(0, 1)) and 0.5 + softplus(N(0, 1)), as HF's parameters give."""
    a = torch.nn.functional.softplus(torch.randn(2, N, generator=g)) + torch.tensor([[0.0], [0.5]])
    return a.view(-1).to(DEVICE, dtype)


@given(T=TOKENS, K=st.integers(1, 300), N=st.integers(1, 150), seed=st.integers(0, 2**31 - 1),
       dtype=DTYPES, norm=st.booleans(), bias=st.booleans(), swiglu=st.booleans(),
       residual=st.booleans(), stream=STREAMS, act=ACTS, gated=st.booleans())
def test_gemv(T, K, N, seed, dtype, norm, bias, swiglu, residual, stream, act, gated):
    """swiglu: the MLP epilogue, act(gate) * up over [gate; up] rows, or (not gated) act(up) --
    which gpt-oss's clamped SwiGLU (its own up term) refuses."""
    g = torch.Generator().manual_seed(seed)
    xielu = swiglu and act == "xielu"  # no gate; its parameters as the bias operand, always
    gated = gated and not xielu
    rows = 2 * N if swiglu and gated else N
    x = rnd(T, K, dtype=dtype, seed_gen=g)
    w = rnd(rows, K, dtype=dtype, seed_gen=g, scale=K ** -0.5)
    b = xielu_params(N, dtype, g) if xielu else rnd(rows, dtype=dtype, seed_gen=g) if bias \
        else None
    kw = dict(norm_w=rnd(K, dtype=dtype, seed_gen=g, shift=1) if norm else None, eps=1e-5,
              bias=b, swiglu=swiglu, act=act, gated=gated)
    res = rnd(T, N, dtype=dtype, seed_gen=g) if residual else None
    if swiglu and act == "swiglu_oai" and not gated:  # gpt-oss's needs its gate: refused
        with pytest.raises(ValueError, match="swiglu_oai"):
            ops.gemv(x, w, residual=res, out=res, stream=stream if T == 1 else None, **kw)
        return
    ref = R.gemv(x, w, residual=res, **kw)
    # residual updated in place when given
    out = ops.gemv(x, w, residual=res, out=res, stream=stream if T == 1 else None, **kw)
    assert_close(out, ref, dtype, K, "gemv", gain=ACT_GAIN if swiglu else 1.0)


def _qkv_case(T, H, KVH, HD, K, pos, S, dtype, g, bias, qk):
    x = rnd(T, K, dtype=dtype, seed_gen=g)
    w = rnd((H + 2 * KVH) * HD, K, dtype=dtype, seed_gen=g, scale=K ** -0.5)
    nw = rnd(K, dtype=dtype, seed_gen=g, shift=1)
    inv = 1.0 / (1e4 ** (torch.arange(0, HD, 2).double() / HD))
    f = torch.outer(torch.arange(S).double(), inv)
    cos, sin = f.cos().float().to(DEVICE), f.sin().float().to(DEVICE)
    b = rnd((H + 2 * KVH) * HD, dtype=dtype, seed_gen=g) if bias else None
    # q / k norm weights by head slot, each head its own (Cohere's, StableLM's; Qwen3's one row
    # is packed repeated)
    qkn = rnd(H + KVH, HD, dtype=dtype, seed_gen=g, shift=1) if qk else None
    kc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    return x, w, nw, cos, sin, b, qkn, kc, rnd(KVH, S, HD, dtype=dtype, seed_gen=g)


@given(T=TOKENS, group=st.sampled_from([1, 2, 3, 4]), KVH=st.integers(1, 3),
       HD=st.sampled_from([2, 6, 10, 16, 24, 40]), K=st.integers(2, 120), pos=st.integers(0, 30),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, bias=st.booleans(), qk=st.booleans(),
       pairs=st.sampled_from([None, 1, 2, 4]), stream=STREAMS, norm=st.sampled_from([1, 1, 0]))
def test_qkv_rope(T, group, KVH, HD, K, pos, seed, dtype, bias, qk, pairs, stream, norm):
    """pairs: rotation pairs per program (the GPU decode tile splits a head over programs); norm
    0: no RMSNorm prologue (a model without norms before its blocks, EXAONE 4)."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 3
    x, w, nw, cos, sin, b, qkn, kc, vc = _qkv_case(T, H, KVH, HD, K, pos, S, dtype, g, bias, qk)
    nw = nw if norm else None
    kc2, vc2 = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    kw = dict(n_heads=H, eps=1e-5, bias=b, qk_norm=qkn)
    q = ops.qkv_rope(x, w, nw, cos, sin, p, kc, vc, pairs=pairs, stream=stream, **kw)
    q_ref = R.qkv_rope(x, w, nw, cos, sin, pos, kc2, vc2, **kw)
    assert_close(q, q_ref, dtype, K, "q")
    assert_close(kc, kc2, dtype, K, "k cache")   # untouched rows must be bit-equal: both clones
    assert_close(vc, vc2, dtype, K, "v cache")
    assert torch.equal(kc[:, :pos], kc2[:, :pos]) and torch.equal(kc[:, pos + T:], kc2[:, pos + T:])


@given(T=TOKENS, group=st.sampled_from([1, 3]), KVH=st.integers(1, 3),
       HD=st.sampled_from([2, 8, 24]), K=st.integers(2, 90), pos=st.integers(0, 20),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, stream=STREAMS)
def test_qkv_rope_norm_over_all_heads(T, group, KVH, HD, K, pos, seed, dtype, stream):
    """OLMo 2's q / k norms: one RMSNorm over all H q heads' rows (H x HD long) and one over the
    KVH k heads', weights by head slot [H + KVH, HD] (QK_NORM_FULL, deferred at every T: the
    raw rows, then one qk_norm_rope_kernel program per KV group, each summing every head). The
    tolerance rejects the per-head norm of the same weights (where a token has several heads)."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 3
    x, w, nw, cos, sin, b, _, kc, vc = _qkv_case(T, H, KVH, HD, K, pos, S, dtype, g, False, False)
    qkn = rnd(H + KVH, HD, dtype=dtype, seed_gen=g, shift=1)
    kc2, vc2 = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    kw = dict(n_heads=H, eps=1e-5, qk_norm=qkn, qk_norm_full=True)
    q = ops.qkv_rope(x, w, nw, cos, sin, p, kc, vc, stream=stream if T == 1 else None, **kw)
    q_ref = R.qkv_rope(x, w, nw, cos, sin, pos, kc2, vc2, **kw)
    assert defer_qk_norm(True, T, True)
    assert_close(q, q_ref, dtype, K, "q")
    assert_close(kc, kc2, dtype, K, "k cache")
    if H > 1:
        y = R.gemv(x, w, norm_w=nw, eps=1e-5).view(T, -1, HD)[:, :H]
        per_head = torch.cat([R.norm_rope(y[:, i:i + 1], qkn[i:i + 1], cos[pos:pos + T].float(),
                                          sin[pos:pos + T].float(), 1e-5) for i in range(H)], 1)
        assert not close(q, per_head, dtype, K)


@pytest.mark.parametrize("HD,pairs,stream", [(6, None, None), (40, 2, None),
                                             (24, None, StreamConfig(64, 4, 1, max_k=16))])
def test_qkv_rope_decode_defers_qk_norm(HD, pairs, stream):
    """Decode with q/k norm (Qwen3) runs small QKV tiles that store raw fp32 rows, then one
    qk_norm_rope_kernel program per KV group (defer_qk_norm): against the reference, and the
    raw scratch really is what the second kernel read (q from it, with bias and norm weights)."""
    g = torch.Generator().manual_seed(HD)
    T, H, KVH, K, pos = 1, 6, 2, 72, 5
    S = pos + 4
    x, w, nw, cos, sin, b, qkn, kc, vc = _qkv_case(T, H, KVH, HD, K, pos, S, torch.float32, g,
                                                    True, True)
    kc2, vc2 = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    raw = torch.full((T, H + KVH, HD), float("nan"), device=DEVICE)
    kw = dict(n_heads=H, eps=1e-5, bias=b, qk_norm=qkn)
    q = ops.qkv_rope(x, w, nw, cos, sin, p, kc, vc, pairs=pairs, stream=stream, raw=raw, **kw)
    q_ref = R.qkv_rope(x, w, nw, cos, sin, pos, kc2, vc2, **kw)
    assert defer_qk_norm(True, T) and not defer_qk_norm(True, 2) and not defer_qk_norm(False, 1)
    assert_close(q, q_ref, torch.float32, K, "q")
    assert_close(kc, kc2, torch.float32, K, "k cache")
    assert_close(vc, vc2, torch.float32, K, "v cache")
    xn = R.rmsnorm(x, nw, 1e-5).float()
    want_raw = (xn @ w.float().t() + b.float())[:, :(H + KVH) * HD].view(T, H + KVH, HD)
    assert_close(raw, want_raw, torch.float32, K, "raw q/k rows")


@given(T=TOKENS, group=st.sampled_from([1, 2, 3, 4, 7]), KVH=st.integers(1, 3),
       HD=st.sampled_from([4, 10, 16, 24, 40, 64]), pos=st.integers(0, 150),
       window=st.sampled_from([0, 0, 1, 5, 33]), seed=st.integers(0, 2**31 - 1), dtype=DTYPES,
       n_splits=st.sampled_from([None, 1, 2, 5, 40]), block_s=st.sampled_from([None, 16]),
       block_tok=st.sampled_from([None, None, 2, 8]), heads=st.sampled_from([1, 1, 2, 0]))
@example(T=1, group=4, KVH=2, HD=16, pos=300, window=0, seed=0, dtype=torch.float32, n_splits=40,
         block_s=16, block_tok=None, heads=1)
@example(T=1, group=8, KVH=1, HD=64, pos=700, window=0, seed=2, dtype=torch.float32, n_splits=40,
         block_s=16, block_tok=None, heads=0)
@example(T=37, group=3, KVH=2, HD=24, pos=11, window=5, seed=1, dtype=torch.bfloat16, n_splits=1,
         block_s=32, block_tok=8, heads=1)
def test_attention(T, group, KVH, HD, pos, window, seed, dtype, n_splits, block_s, block_tok,
                   heads):
    """40 splits of 16-key blocks (tl.dot's least K) at pos 300: 301 keys in chunks of 16, 19
    active splits merged one head per program in one round; at pos 700 with the whole group of
    8 heads of 64 per merge program (heads 0), 22 active splits of 32 keys in two rounds of 16
    (config.merge_splits: the online rescale across rounds). heads: q heads per merge program
    (2: a group of 3 or 7 in chunks of 2, the last masked). block_tok: query tokens per program,
    as a long prompt's pass takes (prefill_attention_config: 5 blocks of 8 tokens x a group of 3
    padded to 4, the last block partial, launched last-first under a window)."""
    assert merge_splits(22, 8, 64) == 16 and merge_splits(19, 1, 16) == 32  # the rounds above
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 5
    q = rnd(T, H, HD, dtype=dtype, seed_gen=g)
    kc, vc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g), rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    out = ops.attention(q, kc, vc, p, window=window, n_splits=n_splits, block_s=block_s,
                        block_tok=block_tok, heads_per_merge=heads)
    ref = R.attention(q, kc, vc, pos, window=window)
    assert_close(out, ref, dtype, pos + T, "attention")


@given(T=TOKENS, group=st.sampled_from([1, 3]), KVH=st.integers(1, 2),
       HD=st.sampled_from([10, 16]), pos=st.integers(0, 80), window=st.sampled_from([0, 5]),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, n_splits=st.sampled_from([None, 1, 3]),
       cap=st.sampled_from([0.5, 2.0, 50.0]), qs=st.sampled_from([(), (), (0.5, 4)]))
def test_attention_softcap(T, group, KVH, HD, pos, window, seed, dtype, n_splits, cap, qs):
    """Gemma 2's soft-capped scores, cap tanh(q . k * scale / cap) (the kernels' exp form,
    _common.soft_cap, within cap 2^-24 of torch's tanh: far inside the tolerance), against the
    reference's; q three times the keys' scale, so the scores (std ~3) pass the caps 0.5 and 2,
    and the tolerance then rejects the uncapped attention (where a query sees several keys).
    qs (beta, orig): Ministral 3's position scale of the scores before the cap, 1 + beta ln(1 +
    floor(qp / orig)) (QSCALE; with the cap 50, i.e. barely capped, the tolerance rejects its
    absence past a few multiples of orig)."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 5
    q = rnd(T, H, HD, dtype=dtype, seed_gen=g, scale=3.0)
    kc, vc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g), rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    ref = R.attention(q, kc, vc, pos, window=window, softcap=cap, qscale=qs)
    out = ops.attention(q, kc, vc, p, window=window, n_splits=n_splits, softcap=cap, qscale=qs)
    assert_close(out, ref, dtype, pos + T, "attention softcap")
    if cap <= 2.0 and pos >= 8 and window == 0:
        assert not close(ops.attention(q, kc, vc, p, n_splits=n_splits, qscale=qs), ref, dtype,
                         pos + T)
    if qs and cap == 50.0 and pos >= 16 and window == 0:
        assert not close(ops.attention(q, kc, vc, p, n_splits=n_splits, softcap=cap), ref, dtype,
                         pos + T)


@given(T=TOKENS, group=st.sampled_from([1, 3]), KVH=st.integers(1, 3),
       HD=st.sampled_from([10, 16]), pos=st.integers(0, 300), window=st.sampled_from([0, 5]),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, n_splits=st.sampled_from([None, 1, 3]),
       kind=st.sampled_from([ALIBI_BLOOM, ALIBI_FALCON]))
def test_attention_alibi(T, group, KVH, HD, pos, window, seed, dtype, n_splits, kind):
    """ALiBi (BLOOM's slope j; Falcon's bf16(slope j) times the scale, the slopes rounded to
    bf16) against the reference's, the slopes of the head count drawn (its tail past a power of
    two among them: 3, 6, 9 heads); without them the tolerance rejects the output once a query
    sees a few keys."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 5
    q = rnd(T, H, HD, dtype=dtype, seed_gen=g)
    kc, vc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g), rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    spec = ModelSpec(family="bloom", n_layers=1, d_model=H * HD, n_heads=H, n_kv_heads=KVH,
                     head_dim=HD, ffn_dim=1, vocab_size=1, rms_eps=1e-5, rope_theta=1.0,
                     alibi=kind)
    slopes = spec.alibi_slopes().to(DEVICE)
    ref = R.attention(q, kc, vc, pos, window=window, alibi=slopes, alibi_kind=kind)
    out = ops.attention(q, kc, vc, p, window=window, n_splits=n_splits, alibi=slopes,
                        alibi_kind=kind)
    assert_close(out, ref, dtype, pos + T, "attention alibi")
    if pos >= 8 and window == 0:
        assert not close(ops.attention(q, kc, vc, p, n_splits=n_splits), ref, dtype, pos + T)


@triton.jit
def _round_bf16_kernel(x_ptr, y_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y_ptr + o, round_bf16(tl.load(x_ptr + o)))


def test_round_bf16_is_torchs():
    """_common.round_bf16 (by the bits: the interpreter's cast truncates) gives torch's
    .bfloat16(): random values, ties (to even) both ways, values that carry into the exponent,
    zeros, subnormals and the largest finite ones."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 1e3
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3FFFFFFF, 0x7F7FFFFF, 0xFF7F0000,
                         0x00000001, 0x80008000, 0x0, 0x80000000, 0x407FFFFF, 0x3F7F8000],
                        dtype=torch.int64).to(torch.int32)
    x = torch.cat([x[:4096 - len(bits)], bits.view(torch.float32)]).to(DEVICE)
    y = torch.empty_like(x)
    _round_bf16_kernel[(1,)](x, y, N=x.numel())
    want = x.bfloat16().float()
    assert torch.equal(y.view(torch.int32), want.view(torch.int32))


@given(pos=st.integers(0, 5000), T=st.sampled_from([1, 1, 3, 17]),
       window=st.sampled_from([0, 0, 1, 5, 700]), n_splits=st.integers(1, 40),
       align=st.sampled_from([1, 8, 32, 64]))
def test_split_range_deals_the_keys_evenly(pos, T, window, n_splits, align):
    """The splits of a launch cover every key its tokens may see, [k0, pos + T) -- k0 is where
    the first token's window starts -- in chunks of whole align-key blocks, none more than a
    block over an even share: a short context in a long cache still runs on all its splits."""
    k0, chunk = split_range_host(pos, T, window, n_splits, align)
    keys = pos + T - k0
    assert k0 == (max(0, pos - window + 1) if window else 0)
    assert chunk % align == 0 and chunk * n_splits >= keys
    assert chunk < -(-keys // n_splits) + align
    assert -(-keys // chunk) <= n_splits


@triton.jit
def _split_range_kernel(args_ptr, out_ptr, ALIGN: tl.constexpr):
    i = tl.program_id(0)
    k0, chunk = split_range(tl.load(args_ptr + 4 * i), tl.load(args_ptr + 4 * i + 1),
                            tl.load(args_ptr + 4 * i + 2), tl.load(args_ptr + 4 * i + 3), ALIGN)
    tl.store(out_ptr + 2 * i, k0)
    tl.store(out_ptr + 2 * i + 1, chunk)


@pytest.mark.parametrize("align", [16, 32])
def test_split_range_kernel_matches_host(align):
    """The kernels' split_range and the VM's split_range_host give the same splits."""
    rng = random.Random(align)
    cases = [(rng.randint(0, 9000), rng.choice([1, 2, 16]), rng.choice([0, 0, 1, 7, 4096]),
              rng.randint(1, 66)) for _ in range(64)]
    args = torch.tensor(cases, dtype=torch.int32, device=DEVICE)
    out = torch.zeros(len(cases), 2, dtype=torch.int32, device=DEVICE)
    _split_range_kernel[(len(cases),)](args, out, ALIGN=align)
    assert out.tolist() == [list(split_range_host(*c, align)) for c in cases]


@given(T=TOKENS, K=st.integers(1, 200), V=st.integers(2, 700), seed=st.integers(0, 2**31 - 1),
       dtype=DTYPES, stream=STREAMS, cap=st.sampled_from([0.0, 0.0, 1.5]), bias=st.booleans())
def test_lm_head_argmax(T, K, V, seed, dtype, stream, cap, bias):
    """The logits (plus a bias: a LayerNorm family's final norm bias through the head;
    soft-capped at cap > 0: Gemma 2's final_logit_softcapping) and the choice from them."""
    g = torch.Generator().manual_seed(seed)
    x, w = rnd(T, K, dtype=dtype, seed_gen=g), rnd(V, K, dtype=dtype, seed_gen=g)
    nw = rnd(K, dtype=dtype, seed_gen=g, shift=1)
    b = rnd(V, dtype=dtype, seed_gen=g) if bias else None
    logits = torch.empty(T, V, device=DEVICE)
    _, pval, pidx = ops.lm_head(x, w, nw, 1e-5, logits=logits,
                                stream=stream if T == 1 else None, softcap=cap, bias=b)
    ref = R.soft_cap(R.gemv(x, w, norm_w=nw, eps=1e-5, bias=b), cap)
    assert_close(logits, ref, torch.float32 if T == 1 else dtype, K, "logits")
    tok, hist = torch.zeros(1, dtype=torch.int32, device=DEVICE), torch.zeros(4, dtype=torch.long,
                                                                               device=DEVICE)
    pos, step = torch.tensor([7], dtype=torch.int32, device=DEVICE), torch.zeros(1, dtype=torch.int32,
                                                                               device=DEVICE)
    seedb = torch.zeros(1, dtype=torch.long, device=DEVICE)
    for row in {0, T - 1}:
        step.zero_()
        ops.choose_merge(pval, pidx, row, tok, hist, pos, step, seedb, T)
        # the kernel's own logits decide: exact argmax with the lowest id on ties
        assert int(tok) == int(torch.argmax(logits[row])) == int(hist[0])
    assert int(pos) == 7 + 2 * T if len({0, T - 1}) == 2 else int(pos) == 7 + T
    assert int(step) == 1


@given(T=st.integers(1, 5), D=st.integers(1, 300), seed=st.integers(0, 2**31 - 1), dtype=DTYPES,
       scale=st.sampled_from([1.0, 45.25, 0.37]))
def test_embedding(T, D, seed, dtype, scale):
    """The rows, times the embedding scale (Gemma's sqrt(d), Granite's multiplier) in fp32 with
    one rounding -- bit for bit the torch product; but Triton's interpreter rounds fp32 -> bf16
    toward zero (KNOWLEDGE.md; a GPU to nearest): there, within one bf16 ulp (2^-7 relative)."""
    g = torch.Generator().manual_seed(seed)
    emb = rnd(50, D, dtype=dtype, seed_gen=g)
    ids = torch.randint(0, 50, (T,), generator=g).to(DEVICE, torch.int32)
    want = (emb[ids.long()].float() * scale).to(dtype)
    got = ops.embedding(ids, emb, scale=scale)
    if INTERPRET and dtype == torch.bfloat16 and scale != 1.0:
        assert ((got.float() - want.float()).abs() <= want.float().abs() * 2.0 ** -7).all()
    else:
        assert torch.equal(got, want)


@given(T=st.integers(1, 18), D=st.integers(1, 700), P=st.integers(1, 4),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, norm=st.booleans(), bias=st.booleans())
def test_residual_add(T, D, P, seed, dtype, norm, bias):
    """The megakernel's REDUCE body standalone: h + (the parts' fp32 sum + bias), or + its
    RMSNorm (a norm after the block, over all D columns while each program writes its 256), ROWS
    token rows a tile (T past 16: two tiles). The sum's error is P fp32 adds (~2^-24), the
    norm's a D-long fp32 sum of squares: the result stored in h's dtype is one rounding from the
    fp32 reference's (rel_tol with K = D)."""
    g = torch.Generator().manual_seed(seed)
    h = rnd(T, D, dtype=dtype, seed_gen=g)
    parts = rnd(P, T, D, dtype=torch.float32, seed_gen=g, scale=2.0)
    w = rnd(D, dtype=dtype, seed_gen=g, shift=1.0) if norm else None
    b = rnd(D, dtype=dtype, seed_gen=g) if bias else None
    s = parts.sum(0) + (b.float() if bias else 0.0)
    want = h.float() + R.block_out(s, w, 1e-6)
    got = ops.residual_add(h.clone(), parts, w, 1e-6, bias=b)
    assert_close(got, want, dtype, D, "residual_add")
    if norm:  # and the tolerance rejects a norm over the program's columns only, or no norm
        part = h.float() + torch.cat([R.rmsnorm(s[:, c:c + 256], w[c:c + 256], 1e-6)
                                      for c in range(0, D, 256)], 1)
        if D > 256:
            assert not close(part.to(dtype), want, dtype, D)
        assert not close((h.float() + s).to(dtype), want, dtype, D)


# the PTX weight pieces (bf16, K % 8 == 0): the stream configs above with ptx=True
# the inline-PTX pieces and the same words by plain loads (StreamConfig.words)
PTX_STREAMS = st.sampled_from([StreamConfig(256, 4, 1, max_k=16, ptx=True),
                               StreamConfig(256, 4, 3, max_k=64, ptx=True),
                               StreamConfig(8192, 8, 2, ptx=True),
                               StreamConfig(256, 4, 1, max_k=16, words=True),
                               StreamConfig(8192, 8, 2, words=True)])


@given(K8=st.integers(1, 40), N=st.integers(1, 150), seed=st.integers(0, 2**31 - 1),
       norm=st.booleans(), bias=st.booleans(), swiglu=st.booleans(), residual=st.booleans(),
       stream=PTX_STREAMS)
@settings(max_examples=12)
def test_gemv_and_lm_head_ptx_stream(K8, N, seed, norm, bias, swiglu, residual, stream):
    """The decode stream with its pieces loaded as 16-byte words (inline PTX, or plain loads:
    StreamConfig.words), unpacked in registers, against the fp32 reference, at the plain
    stream's tolerance; the lm_head's token choice is the argmax of its own logits."""
    K, dtype, g = 8 * K8, torch.bfloat16, torch.Generator().manual_seed(seed)
    rows = 2 * N if swiglu else N
    x = rnd(1, K, dtype=dtype, seed_gen=g)
    w = rnd(rows, K, dtype=dtype, seed_gen=g, scale=K ** -0.5)
    kw = dict(norm_w=rnd(K, dtype=dtype, seed_gen=g, shift=1) if norm else None, eps=1e-5,
              bias=rnd(rows, dtype=dtype, seed_gen=g) if bias else None, swiglu=swiglu)
    res = rnd(1, N, dtype=dtype, seed_gen=g) if residual else None
    ref = R.gemv(x, w, residual=res, **kw)
    out = ops.gemv(x, w, residual=res, out=res, stream=stream, **kw)
    assert_close(out, ref, dtype, K, "gemv")
    nw = rnd(K, dtype=dtype, seed_gen=g, shift=1)
    logits = torch.empty(1, rows, device=DEVICE)
    _, pval, pidx = ops.lm_head(x, w, nw, 1e-5, logits=logits, stream=stream)
    assert_close(logits, R.gemv(x, w, norm_w=nw, eps=1e-5), torch.float32, K, "logits")
    best = int(pidx[0, int(torch.argmax(pval[0]))])
    assert logits[0, best] == logits[0].max()


@given(group=st.sampled_from([1, 3, 4]), KVH=st.integers(1, 3), HD=st.sampled_from([2, 10, 16, 40]),
       K8=st.integers(1, 15), pos=st.integers(0, 30), seed=st.integers(0, 2**31 - 1),
       bias=st.booleans(), stream=PTX_STREAMS)
@settings(max_examples=12)
def test_qkv_rope_ptx_stream(group, KVH, HD, K8, pos, seed, bias, stream):
    K, dtype, g = 8 * K8, torch.bfloat16, torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + 4
    x, w, nw, cos, sin, b, _, kc, vc = _qkv_case(1, H, KVH, HD, K, pos, S, dtype, g, bias, False)
    kc2, vc2 = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    q = ops.qkv_rope(x, w, nw, cos, sin, p, kc, vc, stream=stream, n_heads=H, eps=1e-5, bias=b)
    q_ref = R.qkv_rope(x, w, nw, cos, sin, pos, kc2, vc2, n_heads=H, eps=1e-5, bias=b)
    assert_close(q, q_ref, dtype, K, "q")
    assert_close(kc, kc2, dtype, K, "k cache")
    assert_close(vc, vc2, dtype, K, "v cache")


def test_ptx_stream_rejects_what_it_cannot_read():
    """16-byte chunks of bf16 rows only: fp32 / fp16 weights or K % 8 != 0 raise, not misread;
    the two word forms, or either with shared-memory stages, are refused."""
    for stream in (StreamConfig(256, 4, 1, max_k=64, ptx=True),
                   StreamConfig(256, 4, 1, max_k=64, words=True)):
        for dtype, K in ((torch.float32, 64), (torch.float16, 64), (torch.bfloat16, 60)):
            x, w = torch.ones(1, K, device=DEVICE, dtype=dtype), torch.ones(8, K, device=DEVICE,
                                                                            dtype=dtype)
            with pytest.raises(ValueError, match="PTX / word weight stream"):
                ops.gemv(x, w, stream=stream)
    with pytest.raises(ValueError, match="set one"):
        StreamConfig(ptx=True, words=True)
    with pytest.raises(ValueError, match="stages"):
        StreamConfig(words=True, stages=3)


# ---- each tolerance rejects a deliberately wrong kernel ---------------------------------------
# The wrong kernels are our kernels driven with one plausible bug each (an off-by-one position,
# window or norm epsilon, swapped halves, a missing bias); the same assertion must fail on them.

def test_tolerances_reject_wrong_kernels():
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        T, H, KVH, HD, K, pos = 3, 4, 2, 16, 96, 9
        S = pos + T + 2
        x, w, nw, cos, sin, b, qkn, kc, vc = _qkv_case(T, H, KVH, HD, K, pos, S, dtype, g, True,
                                                        True)
        kw = dict(n_heads=H, eps=1e-5, qk_norm=qkn)
        q_ref = R.qkv_rope(x, w, nw, cos, sin, pos, kc.clone(), vc.clone(), bias=b, **kw)
        off = torch.tensor([pos + 1], dtype=torch.int32, device=DEVICE)   # rope at the wrong position
        assert not close(ops.qkv_rope(x, w, nw, cos, sin, off, kc.clone(), vc.clone(), bias=b, **kw),
                         q_ref, dtype, K)
        p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)         # bias forgotten
        assert not close(ops.qkv_rope(x, w, nw, cos, sin, p, kc.clone(), vc.clone(), **kw),
                         q_ref, dtype, K)
        assert not close(ops.qkv_rope(x, w, nw, sin, cos, p, kc.clone(), vc.clone(), bias=b,
                                      **kw), q_ref, dtype, K)               # cos and sin swapped
        # attention: window off by one; causal limit off by one (a query seeing one future key)
        q = rnd(T, H, HD, dtype=dtype, seed_gen=g)
        ref = R.attention(q, kc, vc, pos, window=4)
        assert not close(ops.attention(q, kc, vc, p, window=5), ref, dtype, pos + T)
        assert not close(ops.attention(q[1:], kc, vc, p), R.attention(q[1:], kc, vc, pos + 1),
                         dtype, pos + T)
        # gemv: norm epsilon 1e-5 -> 1e-1 (rows of unit scale), gate/up swapped
        w2 = rnd(2 * 40, K, dtype=dtype, seed_gen=g, scale=K ** -0.5)
        ref = R.gemv(x, w2, norm_w=nw, eps=1e-5, swiglu=True)
        assert not close(ops.gemv(x, w2, norm_w=nw, eps=1e-1, swiglu=True), ref, dtype, K)
        assert not close(ops.gemv(x, torch.cat([w2[40:], w2[:40]]), norm_w=nw, eps=1e-5,
                                  swiglu=True), ref, dtype, K)
        # and the right kernel passes the same check
        assert close(ops.gemv(x, w2, norm_w=nw, eps=1e-5, swiglu=True), ref, dtype, K)


@pytest.mark.parametrize("stream", [None, StreamConfig(64, 4, 2, max_k=16),
                                    StreamConfig(64, 4, 2, max_k=16, stages=3)])
def test_pdl_launches_compute_the_same(stream, monkeypatch):
    """FASTDECODE_PDL=1 (config.use_pdl) changes when the ops-mode kernels start, not what they
    compute: gemv, QKV + RoPE with the deferred q/k norm, attention and lm_head with it on equal
    them with it off, bit for bit (the interpreter runs its no-op fallbacks; on the GPU,
    tests/test_gpu.py checks the real launches). stages 3: the shared-memory stream, PDL's wait
    inside its first iteration (gemv.gemv_kernel)."""
    from fastdecode.triton_kernels import config
    g = torch.Generator().manual_seed(5)
    T, H, KVH, HD, K, pos = 1, 4, 2, 16, 48, 3
    S = pos + 2
    x, w, nw, cos, sin, b, qkn, kc, vc = _qkv_case(T, H, KVH, HD, K, pos, S, torch.float32, g,
                                                    True, True)
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    w2 = rnd(40, K, dtype=torch.float32, seed_gen=g)
    outs = []
    for flag in ("0", "1"):
        monkeypatch.setattr(config, "_PDL_ENV", flag)
        assert config.use_pdl(DEVICE) == (flag == "1")
        k2, v2 = kc.clone(), vc.clone()
        q = ops.qkv_rope(x, w, nw, cos, sin, p, k2, v2, n_heads=H, eps=1e-5, bias=b,
                         qk_norm=qkn, stream=stream)
        att = ops.attention(q, k2, v2, p)
        y = ops.gemv(x, w2, norm_w=nw, stream=stream)
        logits, _, _ = ops.lm_head(x, w2, nw, 1e-5, logits=torch.empty(T, 40, device=DEVICE))
        outs.append((q, k2, v2, att, y, logits))
    for a, c in zip(*outs):
        assert torch.equal(a, c)



@given(T=TOKENS, group=st.sampled_from([1, 3]), KVH=st.integers(1, 3),
       HD=st.sampled_from([10, 16]), pos=st.integers(0, 300), window=st.sampled_from([0, 5]),
       seed=st.integers(0, 2**31 - 1), dtype=DTYPES, n_splits=st.sampled_from([None, 1, 3, 40]),
       block_tok=st.sampled_from([None, 8]))
def test_attention_sinks(T, group, KVH, HD, pos, window, seed, dtype, n_splits, block_tok):
    """gpt-oss's attention sinks (a logit per head joining its softmax without a value, counted
    once by split 0 whatever the splits: 40 of them leave most empty at these contexts; 8-token
    blocks as a long prompt's pass, a window leaving split 0 no keys of a later token) against
    the reference's. The sinks drawn around the scores' scale and above it (std 2, mean 1): at
    few keys they take much of each softmax, so the tolerance rejects the attention without
    them."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 5
    q = rnd(T, H, HD, dtype=dtype, seed_gen=g)
    kc, vc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g), rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    sinks = (1 + 2 * torch.randn(H, generator=g)).to(DEVICE)
    ref = R.attention(q, kc, vc, pos, window=window, sinks=sinks)
    out = ops.attention(q, kc, vc, p, window=window, n_splits=n_splits, block_tok=block_tok,
                        sinks=sinks)
    assert_close(out, ref, dtype, pos + T, "attention sinks")
    if pos + T <= 8 or window:
        assert not close(ops.attention(q, kc, vc, p, window=window, n_splits=n_splits), ref,
                         dtype, pos + T)
