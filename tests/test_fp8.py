"""FP8 matrices kept 8-bit (quant.fp8_rows, packing.pack's keep_fp8): the GEMV and
QKV + RoPE kernels on FP8 rows against the fp32 reference on the weights those codes and scales
stand for, and FP8 checkpoints in modes ops / mega / vm against the same checkpoint dequantized."""
import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdecode
from fastdecode import ops
from fastdecode import reference as R
from fastdecode.quant import fp8_rows, fp8_values
from fastdecode.triton_kernels.config import StreamConfig, TileConfig, row_elems
from conftest import DEVICE
from helpers import ACT_GAIN, assert_close, checkpoint_ranks
from models import tiny_model
from test_ops import ACTS, STREAMS, TOKENS, rnd, xielu_params
from test_quant import write_compressed_fp8_checkpoint, write_fp8_checkpoint

FLOATS = st.sampled_from([torch.float32, torch.bfloat16])  # the activations' dtype


def fp8_stream(stream, words):
    """test_ops' stream with the codes as words dotted in f16 or not (StreamConfig.fp8_words:
    bf16 activations; fp32 ones keep the fp32 pieces)."""
    return dataclasses.replace(stream, fp8_words=words) if stream else stream
KS = st.integers(1, 40).map(lambda k: 16 * k)  # K % 16 == 0 (fp8_rows), 1 to 5 scale groups


def random_fp8(N, K, g, bn=1, bk=128):
    """(fp8_rows of random codes, the fp32 weights they stand for): codes of N(0, 1) * 16 in
    e4m3, a random scale per block [bn, bk] with the weights' rms K^-0.5."""
    q = (torch.randn(N, K, generator=g) * 16).to(torch.float8_e4m3fn)
    s = torch.rand(-(-N // bn), -(-K // bk), generator=g) * (K ** -0.5 / 8) + K ** -0.5 / 32
    rows = fp8_rows(q, s, (bn, bk)).to(DEVICE)
    return rows, fp8_values(rows, K)


@given(N=st.integers(1, 40), K=KS, bn=st.sampled_from([1, 3, 128]),
       bk=st.sampled_from([128, 256, 10 ** 6]), seed=st.integers(0, 2**31 - 1))
def test_fp8_rows_hold_the_codes_times_their_scales(N, K, bn, bk, seed):
    """quant.fp8_rows' layout read back (quant.fp8_values) is each code times its block's scale,
    looked up element by element -- a scale per 128 columns whatever block (128 wide or
    wider, the whole row) the checkpoint gave; its rows are 16-byte aligned."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(N, K, generator=g) * 16).to(torch.float8_e4m3fn)
    s = torch.rand(-(-N // bn), -(-K // bk), generator=g)
    rows = fp8_rows(q, s, (bn, bk))
    assert rows.shape == (N, row_elems(K, rows.dtype)) and rows.shape[1] % 16 == 0
    n, k = torch.meshgrid(torch.arange(N), torch.arange(K), indexing="ij")
    assert torch.equal(fp8_values(rows, K), q.float() * s[n // bn, k // bk])


def test_fp8_rows_refuse_what_the_kernels_cannot_read():
    """Scale blocks narrower than 128 columns (and than the row), E8M0 scales, e5m2 codes and
    K % 16 != 0 stay dequantized (None)."""
    q = torch.zeros(8, 256).to(torch.float8_e4m3fn)
    assert fp8_rows(q, torch.ones(2, 4), (4, 64)) is None
    assert fp8_rows(q, torch.ones(8, 1, dtype=torch.uint8), (1, 256)) is None
    assert fp8_rows(q.to(torch.float8_e5m2), torch.ones(8, 1), (1, 256)) is None
    assert fp8_rows(q[:, :40], torch.ones(8, 1), (1, 40)) is None
    assert fp8_rows(q, torch.ones(8, 1), (1, 256)) is not None


@given(T=TOKENS, K=KS, N=st.integers(1, 100), seed=st.integers(0, 2**31 - 1), dtype=FLOATS,
       norm=st.booleans(), bias=st.booleans(), swiglu=st.booleans(), residual=st.booleans(),
       stream=STREAMS, words=st.booleans(), act=ACTS, bn=st.sampled_from([1, 16]))
def test_fp8_gemv(T, K, N, seed, dtype, norm, bias, swiglu, residual, stream, words, act, bn):
    """ops.gemv on FP8 rows (decode streams, the tile loop, tl.dot tiles) against R.gemv on the
    fp32 weights they stand for: the T = 1 paths multiply each code by its scale in fp32 (no
    rounding of W), the tl.dot tiles take the codes exactly and scale each K chunk's product in
    fp32 -- so test_ops' gemv tolerance for the activations' dtype and K holds. The f16 words
    (fp8_words, bf16 activations) round x * 2^-8, each product and each pair of products to f16:
    ~3 x 2^-11 relative a term, independent among terms, so ~5e-4 relative on a dot -- under the
    bf16 output's own rounding (2^-8) that the tolerance already allows for."""
    g = torch.Generator().manual_seed(seed)
    gated = act not in ("xielu",)
    rows = 2 * N if swiglu and gated else N
    x = rnd(T, K, dtype=dtype, seed_gen=g)
    w, w_ref = random_fp8(rows, K, g, bn)
    b = xielu_params(N, dtype, g) if swiglu and act == "xielu" else \
        rnd(rows, dtype=dtype, seed_gen=g) if bias else None
    kw = dict(norm_w=rnd(K, dtype=dtype, seed_gen=g, shift=1) if norm else None, eps=1e-5,
              bias=b, swiglu=swiglu, act=act, gated=gated)
    res = rnd(T, N, dtype=dtype, seed_gen=g) if residual else None
    ref = R.gemv(x, w_ref, residual=None if res is None else res.clone(), **kw)
    out = ops.gemv(x, w, residual=res, out=res,
                   stream=fp8_stream(stream, words) if T == 1 else None, **kw)
    assert_close(out, ref, dtype, K, "fp8 gemv", gain=ACT_GAIN if swiglu else 1.0)


@given(T=TOKENS, group=st.sampled_from([1, 2, 4]), KVH=st.integers(1, 2),
       HD=st.sampled_from([4, 16, 24]), K=KS, pos=st.integers(0, 20),
       seed=st.integers(0, 2**31 - 1), dtype=FLOATS, stream=STREAMS, words=st.booleans())
def test_fp8_qkv_rope(T, group, KVH, HD, K, pos, seed, dtype, stream, words):
    """ops.qkv_rope on FP8 rows against R.qkv_rope on the weights they stand for (words: the
    f16 words, within the same tolerance as test_fp8_gemv's)."""
    g = torch.Generator().manual_seed(seed)
    H, S = group * KVH, pos + T + 3
    x = rnd(T, K, dtype=dtype, seed_gen=g)
    w, w_ref = random_fp8((H + 2 * KVH) * HD, K, g)
    nw = rnd(K, dtype=dtype, seed_gen=g, shift=1)
    inv = 1.0 / (1e4 ** (torch.arange(0, HD, 2).double() / HD))
    f = torch.outer(torch.arange(S).double(), inv)
    cos, sin = f.cos().float().to(DEVICE), f.sin().float().to(DEVICE)
    kc, vc = rnd(KVH, S, HD, dtype=dtype, seed_gen=g), rnd(KVH, S, HD, dtype=dtype, seed_gen=g)
    kc2, vc2 = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
    q = ops.qkv_rope(x, w, nw, cos, sin, p, kc, vc, n_heads=H, eps=1e-5,
                     stream=fp8_stream(stream, words))
    q_ref = R.qkv_rope(x, w_ref, nw, cos, sin, pos, kc2, vc2, n_heads=H, eps=1e-5)
    assert_close(q, q_ref, dtype, K, "q")
    assert_close(kc, kc2, dtype, K, "k cache")
    assert_close(vc, vc2, dtype, K, "v cache")


SMALL_KS = st.integers(1, 12).map(lambda k: 16 * k)  # 1 to 2 scale groups, 1 to 2 down chunks


@given(T=st.sampled_from([1, 1, 3]), K=SMALL_KS, N=st.integers(1, 40), F=SMALL_KS,
       E=st.integers(1, 5),
       data=st.data(), dtype=FLOATS, shared=st.booleans(), stream=STREAMS,
       small=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_fp8_experts_match_reference(T, K, N, F, E, data, dtype, shared, stream, small, seed):
    """A mixture's experts kept FP8 ([E, rows, row_elems(K)] stacks of fp8_rows): gemv's experts
    gate|up (RMSNorm prologue, SwiGLU epilogue; a decode row's stream or the tile loop) and
    experts_down (each K chunk's codes of every routed expert at once, their 128 columns'
    sums times their scales; a shared expert's FP8 down beside them), against the reference on
    the fp32 weights the codes stand for. Products exact in fp32 as test_fp8_gemv's, so the
    float experts' tolerances hold (down: K = max(F, FS) over top_k + 1 terms); small: 128-wide
    down chunks, several a row with a partial last one."""
    k = data.draw(st.integers(1, E))
    g = torch.Generator().manual_seed(seed)
    x = rnd(T, K, dtype=dtype, seed_gen=g)
    nw = rnd(K, dtype=dtype, seed_gen=g, shift=1)
    wgu, wgu_ref = (torch.stack(t) for t in zip(*(random_fp8(2 * N, K, g) for _ in range(E))))
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).view(-1)
    ids = ids.to(DEVICE, torch.int32)
    act = ops.gemv(x, wgu, norm_w=nw, eps=1e-5, swiglu=True, experts=ids,
                   stream=stream if T == 1 else None)
    for p, e in enumerate(ids.tolist()):
        ref = R.gemv(x[p // k:p // k + 1], wgu_ref[e], norm_w=nw, eps=1e-5, swiglu=True)
        assert_close(act[p:p + 1], ref, dtype, K, f"gate|up pair {p}", gain=ACT_GAIN)
    wd, wd_ref = (torch.stack(t) for t in zip(*(random_fp8(K, F, g) for _ in range(E))))
    h = rnd(T, K, dtype=dtype, seed_gen=g)
    a = rnd(T * k, F, dtype=dtype, seed_gen=g)
    wt = torch.rand(T * k, generator=g).to(DEVICE)
    FS = data.draw(SMALL_KS)
    acts, (ws, ws_ref) = rnd(T, FS, dtype=dtype, seed_gen=g), random_fp8(K, FS, g)
    s = torch.rand(T, generator=g).to(DEVICE)
    want = h.float().clone()
    for p, e in enumerate(ids.tolist()):
        want[p // k] += wt[p] * R.gemv(a[p:p + 1], wd_ref[e]).float()[0]
    if shared:
        want += s[:, None] * R.gemv(acts, ws_ref).float()
    ops.moe_down(h, a, wd, ids, wt, (acts, ws, s) if shared else None,
                 config=TileConfig(4, 128, 4) if small else None)
    assert_close(h, want, dtype, max(F, FS) * (k + 1), "experts' down")


def same_logits_and_tokens(fm, ref):
    """fm's logits of a prompt within 1e-4 of ref's and, from fresh caches, the same greedy
    tokens -- FP8 rows against the checkpoint dequantized (fp32: summation order only)."""
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]], device=DEVICE)
    torch.testing.assert_close(fm(ids), ref(ids), rtol=1e-4, atol=1e-4)
    fm.reset()
    ref.reset()
    assert torch.equal(fm.generate(ids, max_new_tokens=6), ref.generate(ids, max_new_tokens=6))


def fp8_model(**sizes):
    """A tiny Qwen3 (q / k norms) whose every matrix's K is a multiple of 16: d 48, q_dim 48,
    the down projection's 272 (three 128-column scale groups, the last partial)."""
    return tiny_model("qwen3", hidden_size=48, intermediate_size=272, head_dim=12,
                      num_attention_heads=4, **sizes)


@pytest.mark.parametrize("writer", ["fp8 4x128", "fp8 128x128", "channel"])
def test_fp8_checkpoint_in_ops_mode(tmp_path, writer):
    """An FP8 checkpoint (transformers' FineGrainedFP8 blocks, llm-compressor's per-channel
    scales) loaded in mode 'ops' keeps its matrices 8-bit -- half the bytes -- and gives the
    logits and greedy tokens of the same checkpoint dequantized (mode 'torch': each weight its
    codes times its scales rounded to the dtype once, fp32 here, so the two differ only by
    summation order: sums of <= 272 products, well under 1e-4 relative); moving the model
    moves the codes, never casts them."""
    if writer == "channel":
        write_compressed_fp8_checkpoint(fp8_model(), tmp_path, "channel")
    else:
        write_fp8_checkpoint(fp8_model(), tmp_path, tuple(int(n) for n in writer[4:].split("x")))
    kw = dict(max_seq_len=32, device=DEVICE, dtype=torch.float32)
    fm = fastdecode.from_pretrained(str(tmp_path), mode="ops", **kw)
    ref = fastdecode.from_pretrained(str(tmp_path), mode="torch", **kw)
    assert fm.weights.fp8 and not ref.weights.fp8
    for n in ("qkv", "o", "gu", "down"):
        for l in range(fm.spec.n_layers):
            assert torch.equal(fm.weights.matrix(n, l), ref.weights.matrix(n, l)), n
    same_logits_and_tokens(fm, ref)
    assert fm.to(torch.bfloat16).weights.w_qkv.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("mode", ["mega", "vm"])
def test_fp8_checkpoint_in_the_megakernel(tmp_path, mode):
    """The megakernel streams FP8 rows too (its layer matrices' pieces as (codes, scales),
    the bf16 lm_head as before; a prompt's step of several rows on the tl.dot tiles), and the
    VM runs its tasks on the rows dequantized: the logits and greedy tokens of the checkpoint
    dequantized in mode 'torch' (fp32: summation order only, as above)."""
    write_fp8_checkpoint(fp8_model(), tmp_path, (128, 128))
    kw = dict(max_seq_len=32, device=DEVICE, dtype=torch.float32)
    fm = fastdecode.from_pretrained(str(tmp_path), mode=mode, **kw)
    ref = fastdecode.from_pretrained(str(tmp_path), mode="torch", **kw)
    assert fm.weights.fp8
    same_logits_and_tokens(fm, ref)


def test_fp8_words_give_the_fp32_pieces_tokens(tmp_path):
    """bf16 activations: the megakernel's decode stream with the FP8 codes as words dotted in f16
    (StreamConfig.fp8_words) against the same stream's fp32 products (run once for both, as
    test_megakernel's word pieces): teacher-forced logits of four decode steps within bf16
    rounding of each other (each step's dots differ by the f16 roundings, ~5e-4 relative, and
    their bf16 stores may round the other way: 2^-8, then through 2 layers), the same argmax.
    Pieces of 8 rows x 128 (the down projection's K = 272 in three chunks, one scale group
    each; smaller pieces multiply the interpreter's iterations)."""
    write_fp8_checkpoint(fp8_model(), tmp_path, (128, 128))
    ids = torch.randint(0, 101, (1, 4), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    out = {}
    for words in (False, True):
        fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=16, device=DEVICE,
                                        mode="mega", dtype=torch.bfloat16)
        fm.runtime.mega_stream = StreamConfig(1024, 4, max_k=128, fp8_words=words)
        out[words] = torch.cat([fm(ids[:, t:t + 1])[0] for t in range(4)]).float()
        assert fm.weights.fp8 and fm.runtime.schedule(1).graph.tiling.fp8_words == words
    assert float((out[True] - out[False]).norm() / out[False].norm()) < 1e-2
    assert torch.equal(out[True].argmax(-1), out[False].argmax(-1))


def test_fp8_words_follow_the_register_stream():
    """StreamConfig.fp8_words None: words where every op's stream runs in registers (stages 1:
    measured faster), not on shared-memory stages (measured slower); a given value wins, and
    fp32 activations never take them."""
    bf16 = torch.bfloat16
    assert StreamConfig(stages=1).fp8_word_pieces(bf16)
    assert not StreamConfig(stages=3).fp8_word_pieces(bf16)
    assert not StreamConfig(stages=(1, 1, 3, 1)).fp8_word_pieces(bf16)
    assert not StreamConfig(stages=1, fp8_words=False).fp8_word_pieces(bf16)
    assert StreamConfig(stages=3, fp8_words=True).fp8_word_pieces(bf16)
    assert not StreamConfig(stages=1, fp8_words=True).fp8_word_pieces(torch.float32)


def fp8_mixture(family):
    """A tiny mixture whose every matrix's K is a multiple of 16 (fp8_rows), at tp=2 too: d 64,
    four heads of 16, experts 32 wide (one partial 128-column scale group; HunYuan's shared
    expert too), qwen2_moe's shared expert 64, the dense layers 48 (qwen2_moe_dense, glm4_moe,
    ernie4_5_moe)."""
    sizes = dict(shared_expert_intermediate_size=64) if family.startswith("qwen2_moe") else {}
    if family in ("qwen2_moe_dense", "glm4_moe", "ernie4_5_moe"):
        sizes["intermediate_size"] = 48  # the dense layers'
    width = "intermediate_size" if family in ("mixtral", "hunyuan_v1_moe") else \
        "moe_intermediate_size"
    return tiny_model(family, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, **{width: 32}, **sizes)


@pytest.mark.parametrize("family,mode", [("qwen3_moe", "ops"), ("qwen2_moe", "ops"),
                                         ("qwen2_moe", "mega"), ("mixtral", "ops"),
                                         ("qwen2_moe_dense", "ops"), ("glm4_moe", "mega"),
                                         ("hunyuan_v1_moe", "mega"), ("ernie4_5_moe", "ops")])
def test_fp8_mixture_checkpoint(tmp_path, family, mode):
    """A mixture's FP8 checkpoint (Qwen3-30B-A3B-FP8's layout: per-expert FP8 tensors, the
    router unquantized; Mixtral's under its own names, block_sparse_moe.experts.{e}.w1 / w3 /
    w2, as save_pretrained writes them) in mode 'ops' (and the megakernel's expert tasks: decode
    steps; glm4_moe's dense layer there too, FP8 rows on its own stacks) keeps
    its routed experts and its shared expert 8-bit with the attention's matrices (a dense
    layer's MLP among the expert layers too: qwen2_moe_dense, glm4_moe, ernie4_5_moe; a shared
    expert without a gate, its down scales doubled: glm4_moe, hunyuan_v1_moe, ernie4_5_moe;
    q / k rows permuted for RoPE, partial or interleaved: glm4_moe, ernie4_5_moe); each expert
    reads back as its codes times their scales (the torch mode's dequantized packing, bit for
    bit), and the logits and greedy tokens are the dequantized checkpoint's (fp32: summation
    order only, as test_fp8_checkpoint_in_ops_mode)."""
    write_fp8_checkpoint(fp8_mixture(family), tmp_path, (128, 128))
    kw = dict(max_seq_len=32, device=DEVICE, dtype=torch.float32)
    fm = fastdecode.from_pretrained(str(tmp_path), mode=mode, **kw)
    ref = fastdecode.from_pretrained(str(tmp_path), mode="torch", **kw)
    pw, rw = fm.weights, ref.weights
    assert pw.fp8 and pw.w_experts_gu.dtype == pw.w_experts_down.dtype == torch.float8_e4m3fn
    assert not rw.fp8 and rw.w_experts_gu.dtype == torch.float32
    assert pw.w_router.dtype == torch.float32
    s = fm.spec
    for l in range(s.n_layers):
        for e in range(s.n_experts if l in s.expert_layers else 0):
            for which in (0, 1):
                assert torch.equal(pw.expert_matrix(which, l, e), rw.expert_matrix(which, l, e))
        if s.ffn_dim or l in s.dense_layers:
            assert pw.mlp_weights(l)[1].dtype == torch.float8_e4m3fn
            for n in ("gu", "down"):
                assert torch.equal(pw.matrix(n, l), rw.matrix(n, l)), n
    same_logits_and_tokens(fm, ref)


def test_fp8_expert_shards_are_the_dequantized_shards(tmp_path):
    """Tensor parallelism keeps a mixture's FP8 experts 8-bit on every rank (per-channel scales:
    any columns): each rank's experts (their gate / up rows and down columns of the rank's
    slice of each expert's width) read back as its shard of the dequantized checkpoint."""
    write_compressed_fp8_checkpoint(fp8_mixture("qwen2_moe"), tmp_path, "channel")
    spec, kept_8bit = checkpoint_ranks(tmp_path, 2, keep_fp8=True)
    _, dequantized = checkpoint_ranks(tmp_path, 2)
    for r, (pw, ref) in enumerate(zip(kept_8bit, dequantized)):
        assert pw.w_experts_down.dtype == torch.float8_e4m3fn and pw.fp8
        for l in range(spec.n_layers):
            for e in range(spec.n_experts):
                for which in (0, 1):
                    assert torch.equal(pw.expert_matrix(which, l, e),
                                       ref.expert_matrix(which, l, e)), (r, l, e, which)


@pytest.mark.parametrize("writer,ffn,world,kept", [
    ("fp8 128x128", 256, 2, True),   # each rank's 128 down columns: one scale block
    ("fp8 128x128", 512, 4, True),
    ("channel", 288, 2, True),       # a scale per row: any columns (144 a rank: two groups)
    ("fp8 128x128", 288, 2, False),  # rank 1's down columns start mid-block (144)
    ("fp8 4x128", 256, 4, True)])    # 64 columns a rank: half a block each
def test_fp8_shards_are_the_dequantized_shards(tmp_path, writer, ffn, world, kept):
    """Tensor parallelism keeps an FP8 checkpoint 8-bit on every rank: each rank's FP8 rows
    (quant.fp8_rows of its shard: q / k / v / gate / up rows, o / down columns, each 128-column
    group's scale counted from the rank's first column) read back exactly as that rank's shard of
    the dequantized checkpoint. Where a row-parallel matrix's columns would cut a scale block
    for some rank (and a group of 128 would span two), no rank keeps them: the ranks decide
    alike, on the same packing."""
    model = tiny_model("qwen3", hidden_size=64, intermediate_size=ffn, head_dim=16,
                       num_attention_heads=4, num_key_value_heads=2)
    if writer == "channel":
        write_compressed_fp8_checkpoint(model, tmp_path, "channel")
    else:
        write_fp8_checkpoint(model, tmp_path, tuple(int(n) for n in writer[4:].split("x")))
    spec, kept_8bit = checkpoint_ranks(tmp_path, world, keep_fp8=True)
    _, dequantized = checkpoint_ranks(tmp_path, world)
    for r, (pw, ref) in enumerate(zip(kept_8bit, dequantized)):
        assert pw.fp8 == kept and not ref.fp8
        for n in ("qkv", "o", "gu", "down"):
            for l in range(spec.n_layers):
                assert torch.equal(pw.matrix(n, l), ref.matrix(n, l)), (r, n, l)


def test_fp8_checkpoint_blocks_too_narrow_dequantize(tmp_path):
    """Scale blocks 4 columns wide (not constant over 128 columns): mode 'ops' packs the
    dequantized weights, as every other mode does."""
    write_fp8_checkpoint(fp8_model(), tmp_path, (4, 4))
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device=DEVICE, mode="ops",
                                    dtype=torch.float32)
    assert not fm.weights.fp8 and fm.weights.w_qkv.dtype == torch.float32


def test_fp8_checkpoint_default_mode(tmp_path):
    """No mode asked: on a GPU an FP8 checkpoint whose matrices can stay 8-bit runs them 8-bit in
    the megakernel (module._default_mode: as fast as ops mode's FP8 tiles or faster); on the CPU
    the default torch mode packs them dequantized."""
    write_fp8_checkpoint(fp8_model(), tmp_path, (128, 128))
    fm = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, device=DEVICE)
    cuda = torch.device(DEVICE).type == "cuda"
    assert fm.weights.fp8 == cuda and fm.mode == ("mega" if cuda else "torch")
