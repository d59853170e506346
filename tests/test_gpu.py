"""GPU only (compiled Triton): the CUDA-graph decode equals eager launches, runs are bit-identical,
and the kernels agree with the torch reference mode on a real model shape (Llama-3.2-1B, random
bf16 weights)."""
import os
import sys

import pytest
import torch

import fastdecode
from helpers import drop_encoded_task, hf_logits, teacher_forced

pytestmark = pytest.mark.gpu
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))


@pytest.fixture(scope="module")
def llama1b():
    from shapes import random_model
    return random_model("1b")[1]


@pytest.fixture(scope="module", params=["1b", "8b", "qwen3-8b"])
def llama(request):  # and the Qwen3-8B shape: q/k norm, its decode norm in QKNORM tasks
    from shapes import random_model
    return random_model(request.param)[1]


def test_graph_equals_eager_and_deterministic(llama1b):
    ids = torch.randint(0, 128256, (1, 40), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(1))
    runs = []
    for graph in (True, True, True, False):
        fm = fastdecode.from_hf(llama1b, max_seq_len=256, mode="ops", cuda_graph=graph)
        runs.append(fm.generate(ids, max_new_tokens=48, eos_token_id=[]))
        del fm
    for r in runs[1:]:
        assert torch.equal(r, runs[0])


@pytest.mark.parametrize("shape", ["1b", "qwen3-8b"])
def test_ops_pdl_is_bit_identical(shape, monkeypatch):
    """Programmatic dependent launch (config.use_pdl) changes when each ops-mode kernel starts,
    not what it computes: teacher-forced logits (prefill + decode steps) and greedy tokens, in a
    CUDA graph and eagerly, bit-identical with and without it (Qwen3: the deferred q/k norm)."""
    from shapes import random_model
    from fastdecode.triton_kernels import config
    model = random_model(shape)[1]
    ids = torch.randint(0, 1000, (1, 40), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    runs = []
    for flag in ("0", "1"):
        monkeypatch.setattr(config, "_PDL_ENV", flag)
        for graph in (True, False):
            fm = fastdecode.from_hf(model, max_seq_len=128, mode="ops", cuda_graph=graph)
            logits = torch.cat([fm(ids[:, :32])[0]] + [fm(ids[:, t:t + 1])[0]
                                                         for t in range(32, 40)])
            fm.reset()
            runs.append((logits, fm.generate(ids, max_new_tokens=24, eos_token_id=[])))
            del fm
    for logits, toks in runs[1:]:
        assert torch.equal(logits, runs[0][0]) and torch.equal(toks, runs[0][1])


def test_sampling_graph_reproducible(llama1b):
    ids = torch.tensor([[1, 2, 3, 4]], device="cuda")
    fm = fastdecode.from_hf(llama1b, max_seq_len=128, mode="ops")
    kw = dict(max_new_tokens=24, do_sample=True, temperature=0.9, top_k=50, top_p=0.9, seed=3,
              eos_token_id=[])
    assert torch.equal(fm.generate(ids, **kw), fm.generate(ids, **kw))


def test_ops_matches_torch_mode_1b(llama1b):
    """Teacher-forced logits, 70-token prompt (two 64-token prefill chunks) + 8 decode steps.
    Both modes round activations to bf16 at the same ~6 points per layer; their differences come
    from fp32 summation order and from where bf16 rounding of those activations flips, which
    compounds over 16 layers: expected rel. error ~ sqrt(16 * 6) * 2^-8 ~ 0.04; we allow 0.08."""
    ids = torch.randint(0, 128256, (1, 78), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    outs = {}
    for mode in ("torch", "ops"):
        fm = fastdecode.from_hf(llama1b, max_seq_len=128, mode=mode)
        got = [fm(ids[:, :70])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(70, 78)]
        outs[mode] = torch.cat(got).float()
        del fm
    ref, got = outs["torch"], outs["ops"]
    err = float((got - ref).norm() / ref.norm())
    print(f"ops vs torch rel err {err:.4f}")
    assert err < 0.08
    top2 = torch.topk(ref, 2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 0.5
    assert torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear])


def test_families_bf16_on_gpu():
    """The tiny families again, bf16 on the GPU, graph decode vs HF bf16 greedy where not tied."""
    from models import FAMILIES, tiny_model
    for fam in FAMILIES:
        m = tiny_model(fam, dtype=torch.bfloat16).cuda()
        ids = torch.tensor([[3, 14, 15, 92, 65]], device="cuda")
        fm = fastdecode.from_hf(m, max_seq_len=64, mode="ops")
        out = fm.generate(ids, max_new_tokens=16, eos_token_id=[])
        eager = fastdecode.from_hf(m, max_seq_len=64, mode="ops", cuda_graph=False).generate(
            ids, max_new_tokens=16, eos_token_id=[])
        assert torch.equal(out, eager), fam


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("mode", ["ops", "mega"])
def test_model_on_the_second_gpu(mode):
    """A model on cuda:1 while cuda:0 is the current device (a multi-GPU notebook) runs on its
    own GPU -- Triton launches on the current device -- and gives the tokens it gives on
    cuda:0; moved there with fm.to("cuda:1"), the same."""
    from models import tiny_model
    ids = torch.tensor([[3, 14, 15, 92, 65]])
    want = fastdecode.from_hf(tiny_model("qwen3", dtype=torch.bfloat16).to("cuda:0"),
                              max_seq_len=64, mode=mode).generate(ids.cuda(0), max_new_tokens=12)
    torch.cuda.set_device(0)
    fm = fastdecode.from_hf(tiny_model("qwen3", dtype=torch.bfloat16).to("cuda:1"),
                            max_seq_len=64, mode=mode)
    assert torch.cuda.current_device() == 0
    got = fm.generate(ids.to("cuda:1"), max_new_tokens=12)
    assert got.device == torch.device("cuda:1") and torch.equal(got.cpu(), want.cpu())
    moved = fastdecode.from_hf(tiny_model("qwen3", dtype=torch.bfloat16).cuda(0), max_seq_len=64,
                               mode=mode).to("cuda:1")
    assert torch.equal(moved.generate(ids.to("cuda:1"), max_new_tokens=12).cpu(), want.cpu())


def test_mega_matches_ops_and_is_deterministic(llama):
    """Llama-3.2-1B, Llama-3.1-8B and Qwen3-8B shapes, all SMs, cooperative launch: a 32-token
    prompt, then 8 decode steps, teacher-forced, each mode against the fp32 model. Same op bodies
    as ops mode, but the fp32 sums run in another order -- decode tasks on the stream tiles
    (whole rows or 4096-wide chunks, vs ops mode's 4 x 1024 tiles), the prompt's two 16-row
    steps with their o / down tiles in K parts (config.rows_ksplit) -- so each bf16 store of
    the residual stream, the activations and q / k / v rounds a few elements the other way
    (2^-9 relative each), and on these random models the layers grow that to the bf16-vs-fp32
    level: mega vs ops 1.3e-2 / 1.8e-2 / 1.8e-2 (prompt and decode rows alike), while both are
    1.20e-2 / 1.55-1.57e-2 / 1.55-1.57e-2 from the fp32 model (H200, 4be4ddb, RESULTS session
    41; with the K parts off the prompt rows are ops' bit for bit). So mega is held to the fp32
    reference, as test_mega_rows_k_parts_match_whole_tiles holds its steps: within 15% of ops'
    error (measured within 1%), over all rows and over the decode rows alone; a wrong tile, a
    missing part or a race moves the logits by O(1). Then three runs bit-identical."""
    import copy
    ids = torch.randint(0, 128256, (1, 40), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(5))
    ref = hf_logits(copy.deepcopy(llama).float(), ids)  # the fp32 copy freed on return
    torch.cuda.empty_cache()
    ops = teacher_forced(fastdecode.from_hf(llama, max_seq_len=128, mode="ops"), ids, 32)
    runs = []
    for _ in range(3):
        fm = fastdecode.from_hf(llama, max_seq_len=128, mode="mega")
        runs.append((teacher_forced(fm, ids, 32),
                     fm.generate(ids[:, :8], max_new_tokens=40, eos_token_id=[])))
        del fm
    for rows in (slice(None), slice(32, None)):  # all rows, the decode steps'
        err = {n: float((o[rows] - ref[rows]).norm() / ref[rows].norm())
               for n, o in (("ops", ops), ("mega", runs[0][0]))}
        print(f"rows {rows}: rel err vs fp32: ops {err['ops']:.3e}, mega {err['mega']:.3e}")
        assert err["ops"] < 2e-2 and err["mega"] < 1.15 * err["ops"]
    for logits, toks in runs[1:]:
        assert torch.equal(logits, runs[0][0]) and torch.equal(toks, runs[0][1])


def _stream_variants(model, seed, name, values=(False, True), **fixed):
    """{value: (teacher-forced logits, 24 greedy tokens)} of the megakernel with
    StreamConfig(name=value, **fixed) for each value, checked to reach the launched schedule's
    tiling. The split-KV decode schedule unless `fixed` says otherwise (attn_in_qkv_keys=0: the
    contexts here are short, and the flags compared act on its ATTN / MERGE / QKNORM tasks)."""
    from fastdecode.triton_kernels.config import StreamConfig
    fixed = {"attn_in_qkv_keys": 0, **fixed}
    ids = torch.randint(0, 128256, (1, 40), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(seed))
    out = {}
    for on in values:
        fm = fastdecode.from_hf(model, max_seq_len=128, mode="mega")
        fm.runtime.mega_stream = StreamConfig(**{**fixed, name: on})
        out[on] = (teacher_forced(fm, ids, 32),
                   fm.generate(ids[:, :8], max_new_tokens=24, eos_token_id=[]))
        tiling = fm.runtime._last_sched.graph.tiling
        if name == "attn_in_qkv_keys":
            assert tiling.attn_in_qkv == (on > 0)
        elif name == "words":  # the PTX constexpr's third form (StreamConfig.piece_mode)
            assert tiling.ptx == (2 if on else 0)
        elif name == "carveout":  # a launch attribute: the tiling is the default's
            assert fm.runtime.stream.carveout == on
        elif name == "op_elems":  # o_proj's rows per tile follow its piece elements
            from fastdecode.graph import few_tiles_rows
            st, spec = fm.runtime.mega_stream, fm.runtime._last_sched.graph.spec
            assert tiling.rows_q == few_tiles_rows(st.tile(spec.q_dim, elems=st.elems(1)).block_n,
                                                   spec.d_model, fm.runtime.n_programs)
        else:
            assert getattr(tiling, name) == on
        del fm
    return out


def _same_argmax_where_clear(a, b, what):
    """Teacher-forced logits a vs b computed in another fp32 order: bf16 rounding flips only
    (both on the megakernel's tiles: < 1e-2), and the same greedy token wherever a's
    top-2 margin is over 10x the per-logit error scale (rel. error x the logits' RMS) -- a near-tie
    may go either way, a wrong tile moves every token."""
    err = float((b - a).norm() / a.norm())
    top2 = a.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 10 * err * a.pow(2).mean().sqrt()
    print(f"{what}: rel err {err:.2e}, {int(clear.sum())}/{len(clear)} clear argmaxes")
    assert err < 1e-2
    assert torch.equal(b.argmax(-1)[clear], a.argmax(-1)[clear]) and clear.sum() >= 4


@pytest.mark.parametrize("form", ["ptx", "words"])
def test_mega_ptx_stream_matches_plain(llama, form):
    """The megakernel with its decode weight pieces loaded as 16-byte words, unpacked in
    registers -- by inline PTX (ld.global.nc) or by plain loads (StreamConfig.words) -- against
    the plain-Triton bf16 pieces: the same tiles, only each piece's fp32 sum runs in another
    order."""
    out = _stream_variants(llama, 6, form)
    _same_argmax_where_clear(out[False][0], out[True][0], f"{form} vs plain pieces")


def test_mega_short_context_schedule_matches_split_kv(llama):
    """The short-context decode schedule (the QKV task completing a KV group runs its attention,
    one split, straight to the output; no ATTN / MERGE tasks) against the split-KV schedule: the
    same attention in another fp32 order (one online softmax over every key vs per-split partials
    merged by LSE), so bf16 rounding flips only. A missed release between the group's QKV tasks
    and its completer would read stale q / k / v rows."""
    out = _stream_variants(llama, 7, "attn_in_qkv_keys", values=(0, 384))
    _same_argmax_where_clear(out[0][0], out[384][0], "short-context vs split-KV schedule")


@pytest.mark.parametrize("flag", ["merge_in_attn", "norm_in_qkv"])
def test_mega_fused_group_tasks_are_bit_identical(llama, flag):
    """The last ATTN task of each KV group merging it / the last QKV task of a group norming it
    (ticket counters, acquire / release at GPU scope) instead of MERGE / QKNORM tasks: the same
    function of the same inputs, so the same bits -- teacher-forced logits and greedy tokens --
    on all SMs, where a missed release would show."""
    if flag == "norm_in_qkv" and llama.config.model_type != "qwen3":
        pytest.skip("no q/k norm")
    out = _stream_variants(llama, 8, flag)
    assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])


def test_mega_op_elems_match_default(llama1b):
    """Per-op weight-piece elements (StreamConfig.op_elems; o_proj and gate|up at half the
    default's 16384: twice the tiles, other task ranges) against the default: each output row's
    sum over K is the same whole-row piece either way, but the tiles' rows and the tasks' ranges
    move, so the check is the same argmax wherever it is clear (bf16 rounding flips only); a wrong
    tile range or a missed tile moves every token."""
    out = _stream_variants(llama1b, 9, "op_elems", values=(None, (16384, 8192, 8192, 16384)))
    _same_argmax_where_clear(out[None][0], out[(16384, 8192, 8192, 16384)][0],
                             "op_elems vs default")


def test_mega_carveout_is_bit_identical(llama1b):
    """StreamConfig.carveout (the kernel's preferred shared memory / L1 split, set by
    cuFuncSetAttribute, which raises on failure) with shared-memory stages: where the pieces
    wait changes, not what is computed -- the same bits as the driver's own carveout."""
    out = _stream_variants(llama1b, 11, "carveout", values=(None, 72), stages=2)
    assert torch.equal(out[None][0], out[72][0]) and torch.equal(out[None][1], out[72][1])


@pytest.mark.parametrize("name,seed", [("one_poller", 10), ("kv_prefetch", 11),
                                       ("attn_outline", 12)])
@pytest.mark.parametrize("keys", [0, None])
def test_mega_stream_flag_is_bit_identical(llama, keys, name, seed):
    """StreamConfig flags that change when or how a task runs, never what it computes: the same
    bits -- teacher-forced logits and greedy tokens -- on and off, on both decode schedules
    (split-KV, and the short-context one at keys=None).
    one_poller: every dependency wait polled by one thread of the program, the verdict shared by
    a barrier reduction; a thread that ran ahead of the acquire (the barrier not ordering thread
    0's acquire before the others' loads) would read stale rows.
    kv_prefetch: the K / V bulk L2 prefetches before the QKV_ATTN / ATTN tasks' waits are
    hints -- and no fault from their addresses (the keys of this step, rows its QKV tasks are
    writing among them).
    attn_outline: the attention body called out of line, the same arithmetic in the same order
    compiled otherwise; a call that passed an argument wrong (the ABI's parameter space, not the
    inliner) would move every token."""
    out = _stream_variants(llama, seed, name, attn_in_qkv_keys=keys)
    assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])


@pytest.mark.parametrize("one_poller,abort_every", [(False, 1), (True, 1), (True, 16)])
def test_mega_timeout_is_fast(llama1b, one_poller, abort_every):
    """A task that never runs (its queue entry dropped): its consumer times out, raises the abort
    word, every other program notices it (at every poll, or every 16th) and exits -- the host
    raises MegakernelTimeout naming the counter within a second, not after every program's own
    timeout."""
    import time
    from fastdecode.triton_kernels.config import StreamConfig
    fm = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega")
    fm.runtime.mega_stream = StreamConfig(one_poller=one_poller, abort_every=abort_every)
    fm(torch.tensor([[1]], device="cuda"))  # compile the T=1 step outside the timed region
    drop_encoded_task(fm.runtime, 1, "GATE_UP")
    fm.reset()
    t0 = time.perf_counter()
    with pytest.raises(fastdecode.MegakernelTimeout, match="gu"):
        fm(torch.tensor([[1]], device="cuda"))
    assert time.perf_counter() - t0 < 1.0


def test_mega_falls_back_to_one_program_per_sm(llama1b):
    """Four 4-warp programs per SM need 4 x 128 x 255 registers, twice an SM's 64K: CUDA refuses
    the cooperative launch before it runs, and the runtime retries with one program per SM. Its
    tiles are the same, only spread over fewer programs, so the tokens equal a per_sm=1 run."""
    from fastdecode.triton_kernels.config import StreamConfig
    ids = torch.randint(0, 128256, (1, 12), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    want = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega")
    want.runtime.mega_stream = StreamConfig(per_sm=1)
    want = want.generate(ids, max_new_tokens=20, eos_token_id=[])
    fm = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega")
    fm.runtime.mega_stream = StreamConfig(per_sm=4)
    with pytest.warns(UserWarning, match="one program per SM"):
        got = fm.generate(ids, max_new_tokens=20, eos_token_id=[])
    assert fm.runtime.mega_stream.per_sm == 1
    assert torch.equal(got, want)


def test_mega_rows_fp32_keep_two_programs_an_sm():
    """An fp32 model's steps of several rows tile K by 128 (config.rows_tile: bf16's 16 KB a
    piece, 91 KB of shared memory a program) and launch at decode's programs an SM, with no
    retry: at bf16's 32 x 256 they needed 182 KB a program, and CUDA refused two an SM even at
    carveout 100 (bench/RESULTS.md session 41). Logits as torch mode's (fp32, summation order:
    test_models' 1e-5)."""
    import warnings
    from models import tiny_model
    model = tiny_model("llama").cuda()
    ids = torch.randint(0, 101, (1, 16), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(3))
    ref = teacher_forced(fastdecode.from_hf(model, max_seq_len=64, mode="torch"), ids, 12)
    fm = fastdecode.from_hf(model, max_seq_len=64, mode="mega")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*fall back")
        got = teacher_forced(fm, ids, 12)
    rt = fm.runtime
    assert rt.schedule(12).graph.tiling.bk_q == 128 and rt.stream.per_sm > 1
    assert rt.schedule(12).n_programs == rt.schedule(1).n_programs
    assert rt._rows_carveout is None and not rt._rows_one_per_sm
    assert float((got - ref).norm() / ref.norm()) < 1e-5


def test_mega_rows_fall_back_alone(llama1b, monkeypatch):
    """A multi-row tile of 8 warps: two programs per SM of its kernel need 2 x 256 x 255
    registers, twice an SM's 64K, so CUDA refuses the prompt's launch; its steps retry with one
    program per SM while decode keeps the table's two (when a refusal made every step fall back,
    bench/sweep_rows.py timed the 1B's decode step after this tile's steps 23% slower: 933 us
    against 760). The o / down tiles' K parts pinned (config.ROWS_KSPLIT): their rule gives
    132 programs 2 parts where 264 take 4 (rows_ksplit), another fp32 order whose bf16 flips
    part this random model's greedy tokens at a near tie (H100, session 58)."""
    from fastdecode.triton_kernels import config
    monkeypatch.setattr(config, "ROWS_KSPLIT", 2)
    ids = torch.randint(0, 128256, (1, 12), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    want = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega").generate(
        ids, max_new_tokens=20, eos_token_id=[])
    monkeypatch.setattr(config, "MULTI_ROW_TILE", config.TileConfig(32, 256, 8))
    fm = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega")
    with pytest.warns(UserWarning, match="several rows fall back"):
        got = fm.generate(ids, max_new_tokens=20, eos_token_id=[])
    assert fm.runtime.stream.per_sm == 2 and fm.runtime._rows_one_per_sm
    # the same 32 x 256 tiles in the same K parts (warps split rows, not K; programs take whole tiles): each sum
    # runs in the same order, so the tokens are the same
    assert torch.equal(got, want)


def test_mega_rows_k_parts_match_whole_tiles(llama1b, monkeypatch):
    """Steps of several rows (16, 5, 3, 2 rows after a 12-token prompt: prompt lookup's checks,
    prefill chunks) with the o / down tiles in K parts summed by REDUCE tasks
    (config.rows_ksplit's rule: 4 parts on the 1B shape at two programs an SM) against whole
    tiles, each against the fp32 model teacher-forced. The parts are the same products, their K
    sum in another fp32 order; on this random 16-layer model such bf16 rounding flips grow to
    the bf16-vs-fp32 level (session 39: 1.2-1.3e-2 of the fp32 logits for both, and 1.2e-2
    between them, 28 / 30 argmaxes alike), so each is held to the fp32 reference: the parts'
    error within 15% of the whole tiles' (measured within 2%); a missing or doubled part, a
    wrong K range or a race on the partial buffers moves the logits by O(1). Four decode steps
    after them read the residual stream and caches those steps wrote."""
    import copy
    from fastdecode.triton_kernels import config
    ids = torch.randint(0, 128256, (42,), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(11))
    ref = hf_logits(copy.deepcopy(llama1b).float(), ids[None])[12:]
    out = {}
    for parts in (1, None):
        monkeypatch.setattr(config, "ROWS_KSPLIT", parts)
        fm = fastdecode.from_hf(llama1b, max_seq_len=128, mode="mega")
        fm.runtime.forward(ids[:12])
        logits = [fm.runtime.forward(ids[a:b]) for a, b in
                  ((12, 28), (28, 33), (33, 36), (36, 38))]
        assert (fm.runtime._last_sched.graph.tiling.ksplit > 1) == (parts is None)
        logits += [fm.runtime.forward(ids[t:t + 1]) for t in range(38, 42)]
        out[parts] = torch.cat(logits).float()
        del fm
    err = {p: float((o - ref).norm() / ref.norm()) for p, o in out.items()}
    print(f"rel err vs fp32: whole tiles {err[1]:.3e}, K parts {err[None]:.3e}")
    assert err[1] < 2e-2 and err[None] < 1.15 * err[1]


@pytest.mark.parametrize("kw", [
    dict(do_sample=True, top_k=40, top_p=0.9, temperature=0.8, seed=7, eos_token_id=[]),
    dict(do_sample=True, min_p=0.05, repetition_penalty=1.3, temperature=0.8, seed=7,
         eos_token_id=[]),
    dict(repetition_penalty=1.2, min_new_tokens=20, eos_token_id=list(range(0, 128256, 8017))),
    dict(do_sample=True, temperature=0.8, seed=7, eos_token_id=[],
         logits_processor=[lambda ids, s: s.masked_fill(ids[0, -1] % 2 == torch.arange(
             s.shape[1], device=s.device) % 2, float("-inf"))])])
def test_mega_top_p_steps_replay_a_cuda_graph(llama1b, kw):
    """mode="mega" (the CUDA default) with top-k / top-p, min-p, a repetition penalty or
    min_new_tokens -- what many models' generation configs ask for -- runs those steps through
    the ops bodies and their processing of the whole row of logits, replayed as one CUDA graph
    per step (the seen-token mask and the step counter updated on the device): the same tokens
    as launching them one by one (same seed, same kernels). The third: 16 stop tokens (the
    most the megakernel checks), masked for 20 tokens. The last: a caller's logits processor
    (parity alternates), run between the graph's logits and the choice."""
    ids = torch.randint(0, 128256, (1, 16), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(3))
    kw = dict(kw, max_new_tokens=24)
    fm = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega")
    assert fm.runtime.cuda_graph
    got = fm.generate(ids, **kw)
    want = fastdecode.from_hf(llama1b, max_seq_len=64, mode="mega", cuda_graph=False).generate(
        ids, **kw)
    assert torch.equal(got, want)
    if "logits_processor" in kw:  # each token's parity differs from the one before
        assert ((got[0, 16:] - got[0, 15:-1]) % 2 == 1).all()


@pytest.mark.parametrize("stages", [1, 3])
def test_stream_pdl_chain_reads_each_launchs_output(stages, monkeypatch):
    """A CUDA graph of decode-stream GEMVs (x_{i+1} = W_i rmsnorm(x_i), 2 tiles per program),
    with programmatic dependent launch off and on: every launch must read the output of the one
    before it, though its first weight pieces load before PDL's wait (stages 3: inside the
    shared-memory stream, gemv.gemv_kernel). The outputs are zeroed before the replay, so a load
    of x issued before the wait would read zeros (or a stale step). Each step against the fp32
    reference of its own input: bf16 output rounding (rel. 2^-9 per element) dominates, fp32
    sums over K=4096 add ~1e-6; 1e-2 leaves room for the roundings' sum over N. PDL on and off
    bit-identical."""
    from fastdecode import reference as R
    from fastdecode.ops import gemv
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import StreamConfig
    K, n = 4096, 6
    g = torch.Generator("cuda").manual_seed(3)
    ws = [(torch.randn(K, K, device="cuda", generator=g) * K ** -0.5).to(torch.bfloat16)
          for _ in range(n)]
    nw = (1 + 0.1 * torch.randn(K, device="cuda", generator=g)).to(torch.bfloat16)
    x0 = torch.randn(1, K, device="cuda", generator=g).to(torch.bfloat16)
    stream = StreamConfig(tiles=2, stages=stages)
    runs = []
    for flag in ("0", "1"):
        monkeypatch.setattr(config, "_PDL_ENV", flag)
        xs = [x0.clone()] + [torch.empty_like(x0) for _ in ws]

        def chain():
            for i, w in enumerate(ws):
                gemv(xs[i], w, norm_w=nw, eps=1e-5, out=xs[i + 1], stream=stream)
        chain()  # compile
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        for x in xs[1:]:
            x.zero_()
        graph.replay()
        torch.cuda.synchronize()
        for i, w in enumerate(ws):
            ref = R.gemv(xs[i], w, norm_w=nw, eps=1e-5)
            assert float((xs[i + 1].float() - ref).norm() / ref.norm()) < 1e-2, (flag, i)
        runs.append(torch.cat(xs[1:]))
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("swiglu", [False, True])
def test_table_stream_gemv_matches_reference(swiglu, monkeypatch):
    """gemv() without a config where the tile table names a persistent stream for the shape
    (config.gemv_stream; here every shape, through a patched lookup): the ops-mode calls -- gate|up
    with RMSNorm and SwiGLU, down / o_proj with the residual added -- on odd shapes (N not a
    multiple of the tile's rows, K not a power of two) against the fp32 reference. Tolerance as in
    test_stream_pdl_chain: bf16 output rounding (2^-9 relative) dominates, fp32 sums over K add
    ~1e-6."""
    from fastdecode import reference as R
    from fastdecode.ops import gemv
    from fastdecode.triton_kernels import config
    from fastdecode.triton_kernels.config import StreamConfig
    picked = StreamConfig(8192, 4, per_sm=4)
    monkeypatch.setattr(config, "lookup_gemv", lambda gpu, N, K, path=None: picked)
    g = torch.Generator("cuda").manual_seed(5)
    for K, N in [(2048, 3000), (1536, 8192), (14336, 4100)]:
        rows = 2 * N if swiglu else N
        w = (torch.randn(rows, K, device="cuda", generator=g) * K ** -0.5).to(torch.bfloat16)
        x = torch.randn(1, K, device="cuda", generator=g).to(torch.bfloat16)
        assert config.gemv_stream(N, K, x.device, rows=rows, parts=2 if swiglu else 1).tiles > 1
        if swiglu:
            nw = (1 + 0.1 * torch.randn(K, device="cuda", generator=g)).to(torch.bfloat16)
            out = gemv(x, w, norm_w=nw, eps=1e-5, swiglu=True)
            ref = R.gemv(x, w, norm_w=nw, eps=1e-5, swiglu=True)
        else:
            res = torch.randn(1, N, device="cuda", generator=g).to(torch.bfloat16)
            ref = R.gemv(x, w, residual=res)
            out = gemv(x, w, residual=res, out=res)
        err = float((out.float() - ref.float()).norm() / ref.float().norm())
        assert err < 1e-2, (K, N, err)


def test_long_prompt_prefill_matches_the_step_kernels(llama):
    """A 300-token prompt's logits by runtime._prefill_long (bf16 cuBLAS matmuls and the Triton
    attention kernel; passes of 128 + 128 + 44 tokens) against the step kernels' (prefill_min
    past the prompt). Both keep the residual stream and activations in bf16 and differ in where
    they round: the long path rounds each matmul's input and output to bf16 (2^-9 relative, a
    dot product's output then off by ~2^-9 relative), the step kernels keep them fp32. Each
    path is ~1.5e-2 from the fp32 torch mode on these shapes (ops mode measured so:
    test_mega_matches_ops_and_is_deterministic's docstring), so by the triangle inequality they
    are within 3e-2 of each other; a wrong chunk boundary, cache write or window gives O(1).
    Then mega and ops mode, which share the long prefill and its head, choose the same first
    token after it."""
    ids = torch.randint(0, 128256, (1, 300), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(6))
    out = {}
    for name, min_t in (("long", 64), ("step", 10**9)):
        fm = fastdecode.from_hf(llama, max_seq_len=320, mode="ops")
        fm.runtime.prefill_chunk, fm.runtime.prefill_min = 128, min_t
        out[name] = fm(ids)[0][-32:]
        del fm
    err = float((out["long"] - out["step"]).norm() / out["step"].norm())
    print(f"long-prompt prefill vs step kernels rel err {err:.2e}")
    assert err < 3e-2
    first = {}
    for mode in ("ops", "mega"):
        fm = fastdecode.from_hf(llama, max_seq_len=320, mode=mode)
        first[mode] = fm.generate(ids, max_new_tokens=4, eos_token_id=[])[0, 300]
        del fm
    assert first["ops"] == first["mega"]
