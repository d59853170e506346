"""Tensor-parallel sharding and the step over N virtual ranks (fp32 all-reduce in rank order)
against the tp=1 model, for every family and for 2, 4 and 8 ranks."""
import copy

import pytest
import torch
import transformers as tf

import fastdecode
from fastdecode.distributed import (TensorParallelError, ThreadCollectives, ThreadGroup,
                                    VirtualTP)
from fastdecode.errors import MegakernelTimeout
from fastdecode.module import FastModel
from fastdecode.loading import safetensors_getter
from fastdecode.packing import dict_getter, pack
from fastdecode.spec import ModelSpec
from fastdecode.triton_kernels._common import INTERPRET
from fastdecode.triton_kernels.config import StreamConfig
from helpers import checkpoint_ranks, needs_gpus, rel_err, run_ranks, skip_unless_hf_reencodes
from models import LONGROPE, tiny_model

# (family, world) pairs the tiny models allow (tp must divide heads and ffn, and divide the KV
# heads or be a multiple of them); the last six replicate KV heads (MQA over 2 and 4 ranks, GQA
# 3:1 over 6 ranks -- one q head each -- Qwen3's q/k norm over 4, Phi-3's partial rotary over 4,
# StableLM-2-12B's per-head q / k norms over 6)
CASES = [("llama", 2), ("llama_bias_tied", 2), ("llama_bias_tied", 4), ("qwen2", 3),
         ("qwen3", 2), ("mistral_gqa", 2), ("phi3", 2), ("granite", 3), ("helium", 2),
         ("ernie4_5", 2), ("smollm3", 2), ("exaone", 2), ("glm", 2),
         ("hunyuan_v1_dense", 2), ("gemma", 2), ("cwm", 2), ("gemma3_text", 2), ("glm4", 2),
         ("gemma2", 2), ("exaone4", 2), ("ministral3", 2), ("arcee", 2), ("hyperclovax", 2),
         ("vaultgemma", 2), ("nanochat", 2), ("stablelm", 2), ("starcoder2", 2), ("phi", 2),
         ("cohere2", 2), ("gpt_neox", 2), ("gpt2", 2), ("gptj", 2), ("gpt_bigcode", 2),
         ("gpt_bigcode_mha", 2), ("opt", 2), ("falcon", 2), ("falcon_new", 2),
         ("falcon_seq", 2), ("falcon_rw", 3), ("bloom", 2), ("bloom", 3),
         ("mpt", 2), ("stablelm_qk", 2), ("cohere_qk", 2), ("apertus", 2), ("codegen", 2),
         ("biogpt", 2), ("nemotron", 2), ("gpt_neo", 2), ("xglm", 2),
         ("mistral", 2), ("mistral", 4), ("llama", 6), ("qwen3", 4), ("phi3", 4),
         ("stablelm_qk", 6)]
# mixtures of experts: each expert's rows split like a dense MLP's (qwen2_moe: its shared expert
# too; gpt_oss: the experts' biases); qwen3_moe_tp: 2 KV heads and 24-wide experts, so 2 ranks;
# qwen2_moe_dense: a dense MLP layer among them, split as a dense model's (ERNIE's, GLM's and
# dots' too: their routers, choice biases among them, replicated)
MOE_CASES = [("mixtral", 2), ("qwen2_moe", 2), ("granitemoe", 2), ("granitemoeshared", 2),
             ("gpt_oss", 2), ("qwen3_moe_tp", 2), ("hunyuan_v1_moe", 2), ("qwen2_moe_dense", 2),
             ("ernie4_5_moe", 2), ("glm4_moe", 2), ("dots1", 2)]
CASES += MOE_CASES


def model_for(family):
    if family == "wide":
        return wide_llama()
    if family == "mistral_gqa":  # the tiny mistral is MQA (one KV head): give it two
        return tiny_model("mistral", num_key_value_heads=2)
    if family == "qwen3_moe_tp":
        return tiny_model("qwen3_moe", num_key_value_heads=2, moe_intermediate_size=24)
    return tiny_model(family)


def wide_llama():
    """8 KV heads, so 4 and 8 ranks are possible; odd vocab (not a multiple of 8)."""
    cfg = tf.LlamaConfig(vocab_size=203, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=8,
                         tie_word_embeddings=True, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    m = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name
                    else torch.randn_like(p) / p.shape[-1] ** 0.5)
    return m


def spec_and_getter(model):
    return ModelSpec.from_hf_config(model.config), dict_getter(dict(model.state_dict()))


def packed(model, rank=0, world=1, device="cpu"):
    spec, get = spec_and_getter(model)
    return pack(spec, get, device=device, dtype=torch.float32, rank=rank, world=world)


@pytest.mark.parametrize("family,world", CASES)
def test_shards_concatenate_back(family, world):
    model = model_for(family)
    pw = packed(model)
    s = pw.spec
    shards = [packed(model, r, world) for r in range(world)]
    hd = s.head_dim
    qs = [sh.w_qkv[:, :sh.spec.q_dim] for sh in shards]
    assert torch.equal(torch.cat(qs, 1), pw.w_qkv[:, :s.q_dim])
    # K and V rows: split over ranks, or (world > KV heads) each rank's q heads' one KV head
    reps = max(1, world // s.n_kv_heads)
    k_full, v_full = pw.w_qkv[:, s.q_dim:s.q_dim + s.kv_dim], pw.w_qkv[:, s.q_dim + s.kv_dim:]
    for r, sh in enumerate(shards):
        q_heads = range(r * s.n_heads // world, (r + 1) * s.n_heads // world)
        kv_heads = sorted({h // s.group for h in q_heads})
        assert sh.spec.n_kv_heads == len(kv_heads) and sh.spec.group * len(kv_heads) == \
            len(q_heads)
        rows = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in kv_heads])
        kv = sh.w_qkv[:, sh.spec.q_dim:]
        assert torch.equal(kv, torch.cat([k_full[:, rows], v_full[:, rows]], 1))
        if s.qk_norm:  # a row per head slot: the rank's q heads', then its KV heads'
            assert torch.equal(sh.qk_norm, pw.qk_norm[:, list(q_heads) +
                                                      [s.n_heads + k for k in kv_heads]])
    assert sum(sh.spec.n_kv_heads for sh in shards) == s.n_kv_heads * reps
    assert torch.equal(torch.cat([sh.w_o for sh in shards], 2), pw.w_o)
    assert torch.equal(torch.cat([sh.w_down for sh in shards], 2), pw.w_down)
    f = s.ffn_dim // world
    gates = [sh.w_gu[:, :f] for sh in shards] if s.gated else []  # (no gate: up rows alone)
    ups = [sh.w_gu[:, f:] if s.gated else sh.w_gu for sh in shards]
    assert all(sh.w_gu.shape[1] == (1 + s.gated) * f for sh in shards)
    assert torch.equal(torch.cat(gates + ups, 1), pw.w_gu)
    assert torch.equal(torch.cat([sh.lm_head for sh in shards], 0), pw.lm_head)
    assert sum(sh.spec.vocab_size for sh in shards) == s.vocab_size
    assert all(sh.spec.head_dim == hd for sh in shards)


@pytest.mark.parametrize("family,world", MOE_CASES + [("qwen2_moe", 4)])
def test_expert_shards_concatenate_back(family, world):
    """Each expert's gate rows, up rows (and their biases) and down columns over the ranks
    concatenate back to the full model's; the router (and its bias) is every rank's; the
    experts' down biases are added once, by rank 0; a dense layer's MLP (ModelSpec.
    dense_layers) splits as a dense model's: gate rows, up rows, down columns."""
    model = model_for(family)
    if world == 4:  # 4 ranks: 2 KV heads replicated, experts and shared expert 4 x 6 wide
        model = tiny_model(family, moe_intermediate_size=24, shared_expert_intermediate_size=24)
    pw = packed(model)
    s = pw.spec
    F, f = s.expert_ffn, s.expert_ffn // world
    shards = [packed(model, r, world) for r in range(world)]
    for name in ("w_experts_gu", "b_experts_gu"):
        full = getattr(pw, name)
        if full is None:
            continue
        parts = [getattr(sh, name) for sh in shards]
        assert torch.equal(torch.cat([p[:, :, :f] for p in parts] + [p[:, :, f:] for p in parts],
                                     2), full)
    assert torch.equal(torch.cat([sh.w_experts_down for sh in shards], 3), pw.w_experts_down)
    assert all(sh.spec.expert_ffn == f for sh in shards) and F == f * world
    for sh in shards:
        assert torch.equal(sh.w_router, pw.w_router)
        assert (sh.b_router is None) == (pw.b_router is None)
        if pw.b_router is not None:
            assert torch.equal(sh.b_router, pw.b_router)
    if pw.b_experts_down is not None:
        assert torch.equal(shards[0].b_experts_down, pw.b_experts_down)
        assert all(not sh.b_experts_down.any() for sh in shards[1:])
    assert (pw.w_dense_gu is None) == (not s.dense_layers)
    if s.dense_layers:
        fd = s.dense_ffn // world
        gu = [sh.w_dense_gu for sh in shards]
        assert torch.equal(torch.cat([g[:, :fd] for g in gu] + [g[:, fd:] for g in gu], 1),
                           pw.w_dense_gu)
        assert torch.equal(torch.cat([sh.w_dense_down for sh in shards], 2), pw.w_dense_down)


@pytest.mark.parametrize("F,world,kept", [(64, 2, True), (128, 4, True), (64, 4, False)])
def test_mxfp4_expert_shards(tmp_path, F, world, kept):
    """A gpt-oss MXFP4 checkpoint over `world` ranks: where a rank's slice of each expert's F
    holds whole blocks of 32 (F / world % 32 == 0) its experts stay MXFP4 -- gate|up's rows and
    down's columns of codes and scales -- else every rank packs them as floats; either way each
    rank's experts dequantize exactly to its slice of the one-rank model's."""
    from test_quant import write_mxfp4_checkpoint
    write_mxfp4_checkpoint(tiny_model("gpt_oss", hidden_size=64, intermediate_size=F), tmp_path)
    _, (full,) = checkpoint_ranks(tmp_path, 1)
    spec, shards = checkpoint_ranks(tmp_path, world)
    f = F // world
    for r, pw in enumerate(shards):
        assert (pw.s_experts_gu is not None) == kept and full.s_experts_gu is not None
        g = torch.cat([torch.arange(r * f, (r + 1) * f), F + torch.arange(r * f, (r + 1) * f)])
        for l in range(spec.n_layers):
            for e in range(spec.n_experts):
                assert torch.equal(pw.expert_matrix(0, l, e), full.expert_matrix(0, l, e)[g])
                assert torch.equal(pw.expert_matrix(1, l, e),
                                   full.expert_matrix(1, l, e)[:, r * f:(r + 1) * f])


def teacher_forced(run, ids, prompt=9):
    return torch.cat([run(ids[:prompt])] + [run(ids[t:t + 1]) for t in range(prompt, len(ids))])


def forced_and_greedy(f, ids, new_tokens):
    """A FastModel's teacher-forced logits over ids [T] (a 9-token prompt, then a token a step)
    and, from a fresh cache, its greedy tokens after ids[:5] -- both on the CPU."""
    logits = teacher_forced(lambda x: f(x[None])[0], ids).cpu()
    f.reset()
    return logits, f.generate(ids[None, :5], max_new_tokens=new_tokens, eos_token_id=[]).cpu()


@pytest.mark.parametrize("family,world", CASES + [("wide", 4), ("wide", 8)])
def test_virtual_ranks_match_tp1(family, world):
    model = model_for(family)
    ids = torch.randint(0, model.config.vocab_size, (17,),
                        generator=torch.Generator().manual_seed(1))
    fm = fastdecode.from_hf(model, max_seq_len=64, mode="torch")
    want = teacher_forced(lambda x: fm(x[None])[0], ids)
    tp = VirtualTP(*spec_and_getter(model), world, max_seq_len=64)
    got = teacher_forced(tp.forward, ids)
    # fp32 everywhere; only the order of the fp32 sums differs (per rank, then across ranks):
    # ~sqrt(K) 2^-24 per reduction, 1e-5 leaves 20x margin and catches any wrong shard (O(1))
    assert rel_err(got, want) < 1e-5
    for row in got:  # the cross-rank argmax picks the full model's token
        shards = row.split([fm.spec.shard(r, world).vocab_size for r in range(world)])
        assert VirtualTP.choose(shards) == int(row.argmax())


def test_bad_tp_sizes_raise():
    spec = packed(tiny_model("llama")).spec          # 6 heads, 2 KV heads, ffn 72
    for world in (0, -1, 3, 4, 12, True, 2.0):       # 3: not a multiple of the 2 KV heads
        with pytest.raises(TensorParallelError):
            spec.check_tp(world)
    with pytest.raises(TensorParallelError, match="key_value"):
        packed(tiny_model("qwen2"), 0, 2)              # 3 KV heads over 2 ranks
    for world in (1, 2, 6):                          # 6: each KV head on 3 ranks
        spec.check_tp(world)
    with pytest.raises(TensorParallelError, match="span every head"):
        packed(tiny_model("olmo2"), 0, 2)              # q / k norms over all heads: one rank
    with pytest.raises(TensorParallelError, match="experts' intermediate size=26"):
        packed(tiny_model("qwen3_moe"), 0, 3)          # 6 heads, 3 KV heads, experts 26 wide
    with pytest.raises(TensorParallelError, match="shared expert's intermediate size=30"):
        packed(tiny_model("qwen2_moe", moe_intermediate_size=24), 0, 4)


@pytest.mark.parametrize("family,world", [("qwen3", 2), ("llama_bias_tied", 4), ("mistral", 4),
                                          ("phi3", 2), ("qwen2_moe", 2), ("mixtral", 2),
                                          ("gpt_oss", 2)])
def test_rank_reads_its_shard_from_safetensors(tmp_path, family, world):
    model = model_for(family)
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    spec = ModelSpec.from_hf_config(model.config)
    for r in range(world):
        a = pack(spec, safetensors_getter(str(tmp_path)), device="cpu", dtype=torch.float32,
                 rank=r, world=world)
        b = packed(model, r, world)
        for name, t in b.tensors().items():
            assert (t is None) == (a.tensors()[name] is None)
            if t is not None:
                assert torch.equal(a.tensors()[name], t), (name, r)




@pytest.mark.parametrize("family,world,mode,device", [
    ("qwen3", 2, "torch", "cpu"), ("llama", 2, "ops", "cpu"), ("mistral", 2, "torch", "cpu"),
    ("gemma2", 2, "ops", "cpu"),
    pytest.param("llama", 2, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(2)]),
    pytest.param("mistral", 2, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(2)]),
    pytest.param("qwen3", 2, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(2)]),
    pytest.param("qwen2_moe", 2, "ops", "cuda", marks=[pytest.mark.gpu, needs_gpus(2)]),
    pytest.param("wide", 4, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(4)]),
    pytest.param("wide", 8, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(8)]),
    pytest.param("mistral", 8, "mega", "cuda", marks=[pytest.mark.gpu, needs_gpus(8)])])
def test_torchrun_ranks_match_single_process(tmp_path, family, world, mode, device):
    """Real processes: torchrun, each rank packs its shard from safetensors; every rank
    holds the same logits and tokens (greedy, sampled, greedy with a repetition penalty: the
    gathered vocabulary's logits), equal to the single-process model's. cpu: gloo; ops: the
    Triton kernels (interpreted) with row-parallel partial sums all-reduced between them and the
    vocab-parallel lm_head gathered before the token choice. cuda, mega: one GPU per rank, the
    megakernel's in-kernel all-reduce over NVLink (symmetric memory), fp32 weights. mistral: MQA,
    its one KV head replicated on every rank. gemma2, ops: the norms after the blocks applied to
    the all-reduced sums (ops.residual_add), the logits' soft-cap on each rank's shard. qwen2_moe,
    ops on two GPUs: each rank's slice of every expert, all-reduced over NCCL."""
    import os
    import subprocess
    import sys
    model = model_for(family)
    model.save_pretrained(tmp_path / "ckpt")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc-per-node={world}", os.path.join(root, "tests", "tp_worker.py"),
                          str(tmp_path / "ckpt"), str(world), str(tmp_path / "out"), mode,
                          device],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    outs = [torch.load(tmp_path / f"out.{r}") for r in range(world)]
    fm = fastdecode.from_pretrained(str(tmp_path / "ckpt"), device="cpu", dtype=torch.float32,
                                    max_seq_len=64)
    ids = torch.arange(3, 20)[None] % fm.spec.vocab_size
    want = torch.cat([fm(ids[:, :9])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(9, 17)])
    for o in outs:
        assert torch.equal(o["logits"], outs[0]["logits"])      # bit-identical across ranks
        assert torch.equal(o["tokens"], outs[0]["tokens"])
        assert torch.equal(o["penalized"], outs[0]["penalized"])
    assert rel_err(outs[0]["logits"], want) < 1e-5
    assert torch.equal(outs[0]["tokens"], fm.generate(ids[:, :5], max_new_tokens=8,
                                                      eos_token_id=[]))
    assert torch.equal(outs[0]["penalized"], fm.generate(
        ids[:, :5], max_new_tokens=8, eos_token_id=[], repetition_penalty=2.0))
    for o in outs:  # every rank draws the same sample
        assert torch.equal(o["sampled"], outs[0]["sampled"])
    if mode != "torch":  # the Gumbel noise is keyed on global token ids: the one-rank draw
        # of the same mode (the prompt's last row keys its noise by its row in the chunk in
        # mega, by row 0 in ops, which computes only that row)
        one = fastdecode.from_pretrained(str(tmp_path / "ckpt"), device=device,
                                         dtype=torch.float32, max_seq_len=64, mode=mode)
        assert torch.equal(outs[0]["sampled"], one.generate(
            ids[:, :5].to(device), max_new_tokens=8, eos_token_id=[], do_sample=True,
            temperature=1.5, seed=3).cpu())


# programs per virtual rank on one GPU: every rank's cooperative grid resident at once
GPU_RANK_PROGRAMS = 8


def mega_ranks(model, world, fn, max_seq_len=64, device="cpu", shards=None, mode="mega"):
    """fn(FastModel) on every virtual rank of a tensor-parallel mode="mega" model: one thread per
    rank, each rank's megakernel running concurrently (Triton's interpreter on the CPU; on one
    GPU, each rank on its own CUDA stream with GPU_RANK_PROGRAMS programs), pushing partial sums
    into the other ranks' buffers and waiting on their flags. shards: the ranks' PackedWeights
    (else model's, packed); mode "ops": the ops-mode kernels, all-reduced between them."""
    spec, _ = spec_and_getter(model)
    group = ThreadGroup(world)

    def rank(r):
        pw = shards[r] if shards else packed(model, r, world, device)
        fm = FastModel(pw, model.config, max_seq_len=max_seq_len,
                       mode=mode, collectives=ThreadCollectives(spec, group, r, device))
        if device == "cpu":
            return fn(fm)
        fm.runtime.n_programs = GPU_RANK_PROGRAMS
        with torch.cuda.stream(torch.cuda.Stream(device)):
            out = fn(fm)
            torch.cuda.current_stream(device).synchronize()
        return out
    return run_ranks(world, rank)


def test_longrope_reencode_over_virtual_ranks():
    """longrope's re-encode (Runtime._refill) on 2 virtual mega ranks: the cache refilled by the
    ops bodies with the ranks' partial sums all-reduced -- every rank's greedy tokens and each
    step's logits across the original context are HF's generate's (fp32: test_models' 1e-5)."""
    model = tiny_model("phi3", sliding_window=None, **LONGROPE)
    ids = torch.randint(3, 101, (1, 10), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=14, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        want = model.generate(ids, do_sample=False, **kw)
    skip_unless_hf_reencodes(model, want, ids.shape[1])
    for got in mega_ranks(model, 2, lambda fm: fm.generate(ids, **kw), 40):
        assert torch.equal(got.sequences, want.sequences)
        assert rel_err(torch.cat(got.logits), torch.cat(want.logits)) < 1e-5


def test_long_prompt_prefill_over_virtual_ranks():
    """A 70-token prompt through the long-prompt prefill (runtime._prefill_long, passes of 32) on
    2 virtual mega ranks: each block's partial sums all-reduced by the collectives (fp32, rank
    order), the lm_head's vocabulary shards gathered; logits against the fp32 tp=1 model (the
    1e-5 of test_virtual_ranks_match_tp1), the same greedy continuation (decode by the
    megakernel's in-kernel all-reduce), the ranks bit-identical."""
    model = model_for("qwen3")
    ids = torch.randint(0, model.config.vocab_size, (70,),
                        generator=torch.Generator().manual_seed(4))
    fm = fastdecode.from_hf(model, max_seq_len=96, mode="torch")
    want = fm(ids[None])[0]
    fm.reset()
    greedy = fm.generate(ids[None], max_new_tokens=2, eos_token_id=[])

    def run(f):
        f.runtime.prefill_chunk = 32
        logits = f(ids[None])[0]
        f.reset()
        return logits, f.generate(ids[None], max_new_tokens=2, eos_token_id=[])
    outs = mega_ranks(model, 2, run, max_seq_len=96)
    for logits, tokens in outs:
        assert torch.equal(logits, outs[0][0]) and torch.equal(tokens, outs[0][1])
    assert rel_err(outs[0][0], want) < 1e-5
    assert torch.equal(outs[0][1], greedy)


@pytest.mark.parametrize("family,world,stages", [("qwen3", 2, None), ("llama_bias_tied", 2, 3),
                                                ("wide", 4, None), ("mistral", 2, None),
                                                ("gemma3_text", 2, None), ("glm4", 2, 3),
                                                ("gemma2", 2, None), ("exaone4", 2, None)])
def test_mega_virtual_ranks_match_tp1(family, world, stages):
    """The megakernel's in-kernel all-reduce (push partial sums + system-scope flags, rank-order
    fp32 sum) and cross-rank token choice, on virtual ranks: prefill chunks (T=9) and decode
    steps, several steps per launch; logits against the fp32 tp=1 model, bit-identical ranks.
    Decode steps with up to 10 keys run the short-context schedule (its own remote counters), the
    later ones the split-KV schedule; a 3-step launch from position 8 splits at the boundary.
    stages 3: QKV / o_proj / gate|up / down stream through shared memory, their waits (the remote
    ones too) inside the stream (config.StreamConfig.stages). gemma3_text, glm4, gemma2: norms
    after the blocks, which REDUCE applies to the ranks' summed partials; gemma2's soft-capped
    attention and logits (each rank caps its vocabulary shard); exaone4: no norms before the
    blocks, no RoPE on its full layers."""
    check_mega_ranks(family, world, stages, "cpu")


@needs_gpus(1)
@pytest.mark.parametrize("family,world,stages", [("qwen3", 2, None), ("llama_bias_tied", 2, 3),
                                                ("wide", 4, None)])
def test_mega_virtual_ranks_share_one_gpu(family, world, stages):
    """test_mega_virtual_ranks_match_tp1 compiled for the GPU, its ranks' megakernels running
    side by side on one GPU (one CUDA stream each): the tensor-parallel kernel's pushes and its
    release / acquire flags at system scope on real hardware where no second GPU is lent -- the
    protocol, not NVLink's speed. Bit-identical ranks, logits within fp32's 1e-5 of tp=1."""
    check_mega_ranks(family, world, stages, "cuda")


def check_mega_ranks(family, world, stages, device):
    """test_mega_virtual_ranks_match_tp1's body on `device` (the tp=1 references: mode torch on
    the CPU, mode mega on `device`)."""
    model = model_for(family)
    ids = torch.randint(0, model.config.vocab_size, (13,),
                        generator=torch.Generator().manual_seed(2))
    want, greedy = forced_and_greedy(fastdecode.from_hf(model, max_seq_len=64, mode="torch"),
                                     ids, 7)
    one = fastdecode.from_hf(copy.deepcopy(model).to(device), max_seq_len=64, mode="mega")
    sample = dict(max_new_tokens=7, eos_token_id=[], do_sample=True, temperature=1.5, seed=3)
    d = ids.to(device)
    sampled = one.generate(d[None, :5], **sample)

    def run(f):
        f.runtime.mega_stream = StreamConfig(attn_in_qkv_keys=10, stages=stages)
        logits = teacher_forced(lambda x: f(x[None])[0], d)
        f.reset()
        f.runtime.decode_chunk = 3  # several decode steps per megakernel launch
        return logits, f.generate(d[None, :5], max_new_tokens=7, eos_token_id=[]), \
            f.generate(d[None, :5], **sample), set(f.runtime._schedules)
    outs = [[o.cpu() if torch.is_tensor(o) else o for o in out]
            for out in mega_ranks(model, world, run, device=device)]
    for logits, tokens, drawn, scheds in outs:
        assert torch.equal(logits, outs[0][0]) and torch.equal(tokens, outs[0][1])
        assert torch.equal(drawn, outs[0][2])
        assert {(1, True), (1, False)} <= scheds  # both decode schedules ran
    # fp32: the sums differ from tp=1 only in order (per rank, then across ranks), as in
    # test_virtual_ranks_match_tp1
    assert rel_err(outs[0][0], want) < 1e-5
    assert torch.equal(outs[0][1], greedy)
    assert torch.equal(outs[0][2], sampled.cpu())  # Gumbel noise keyed on global token ids


@pytest.mark.parametrize("family,device", [
    pytest.param("qwen2_moe", "cpu", marks=pytest.mark.skipif(
        not INTERPRET, reason="ops kernels on CPU tensors: Triton's interpreter only")),
    pytest.param("qwen2_moe", "cuda", marks=needs_gpus(1)),
    pytest.param("gpt_oss", "cuda", marks=needs_gpus(1)),
    pytest.param("gpt_oss_mxfp4", "cuda", marks=needs_gpus(1)),
    pytest.param("qwen2_moe_fp8", "cuda", marks=needs_gpus(1)),
    pytest.param("mixtral", "cuda", marks=needs_gpus(1))])
def test_moe_ops_virtual_ranks_match_tp1(tmp_path, family, device):
    """A mixture of experts in mode 'ops' over 2 virtual ranks (threads; on one GPU, a CUDA stream
    each): every rank routes alike, runs its slice of each expert (and of qwen2_moe's shared
    expert), and the down kernel's fp32 partial sums are all-reduced into the residual.
    Bit-identical ranks; fp32, so the logits differ from the tp=1 model's only in summation order
    (1e-5, as test_virtual_ranks_match_tp1), the same greedy tokens. gpt_oss_mxfp4: the ranks'
    experts packed from an MXFP4 checkpoint, kept 4-bit (32 of each expert's 64 rows a rank),
    against the float model holding the values they stand for (exact in fp32). qwen2_moe_fp8:
    an FP8 checkpoint's ranks, their experts and matrices kept 8-bit (test_fp8's mixture), against
    the checkpoint dequantized at tp=1."""
    shards, ref = None, None
    if family == "qwen2_moe_fp8":
        from test_fp8 import fp8_mixture
        from test_quant import write_compressed_fp8_checkpoint
        model = fp8_mixture("qwen2_moe")
        write_compressed_fp8_checkpoint(model, tmp_path, "channel")
        _, shards = checkpoint_ranks(tmp_path, 2, device, keep_fp8=True)
        assert all(pw.w_experts_gu.dtype == torch.float8_e4m3fn for pw in shards)
        ref = fastdecode.from_pretrained(str(tmp_path), max_seq_len=32, mode="torch",
                                         dtype=torch.float32)
    elif family == "gpt_oss_mxfp4":
        from test_quant import write_mxfp4_checkpoint
        model = tiny_model("gpt_oss", hidden_size=64, intermediate_size=64)
        write_mxfp4_checkpoint(model, tmp_path)
        _, shards = checkpoint_ranks(tmp_path, 2, device)
        assert all(pw.s_experts_gu is not None for pw in shards)
    else:
        model = model_for(family)
    ids = torch.randint(0, model.config.vocab_size, (11,),
                        generator=torch.Generator().manual_seed(5))
    if ref is None:
        ref = fastdecode.from_hf(model, max_seq_len=32, mode="torch")
    want, greedy = forced_and_greedy(ref, ids, 4)
    d = ids.to(device)
    outs = mega_ranks(model, 2, lambda f: forced_and_greedy(f, d, 4), max_seq_len=32,
                      device=device, mode="ops", shards=shards)
    for logits, tokens in outs:
        assert torch.equal(logits, outs[0][0]) and torch.equal(tokens, outs[0][1])
    assert rel_err(outs[0][0], want) < 1e-5
    assert torch.equal(outs[0][1], greedy)


@needs_gpus(1)
def test_fp8_mega_virtual_ranks_share_one_gpu(tmp_path):
    """An FP8 checkpoint at tp=2 on virtual ranks sharing one GPU: each rank's megakernel streams
    its shard's FP8 rows (test_fp8's shards: q / k / v / gate / up rows, o / down columns, each
    kept 8-bit). Bit-identical ranks; fp32 activations, so the logits differ from the tp=1 FP8
    megakernel's only in summation order (per rank, then across ranks): within 1e-5, the same
    greedy tokens."""
    from test_quant import write_fp8_checkpoint
    model = tiny_model("qwen3", hidden_size=64, intermediate_size=256, head_dim=16,
                       num_attention_heads=4, num_key_value_heads=2)
    write_fp8_checkpoint(model, tmp_path, (128, 128))
    one = fastdecode.from_pretrained(str(tmp_path), max_seq_len=64, device="cuda", mode="mega",
                                     dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (13,),
                        generator=torch.Generator().manual_seed(2)).cuda()
    want, greedy = forced_and_greedy(one, ids, 7)
    _, shards = checkpoint_ranks(tmp_path, 2, "cuda", keep_fp8=True)
    assert one.weights.fp8 and all(pw.fp8 for pw in shards)

    def run(f):
        f.runtime.mega_stream = StreamConfig(attn_in_qkv_keys=10)
        return forced_and_greedy(f, ids, 7)
    outs = mega_ranks(model, 2, run, device="cuda", shards=shards)
    for logits, tokens in outs:
        assert torch.equal(logits, outs[0][0]) and torch.equal(tokens, outs[0][1])
    assert rel_err(outs[0][0], want) < 1e-5
    assert torch.equal(outs[0][1], greedy)


def test_mega_silent_rank_raises():
    """A rank that stops stepping: the others' in-kernel waits are bounded and raise
    MegakernelTimeout naming it -- no hang."""
    model = model_for("llama")
    ids = torch.arange(3, 9)[None]

    def run(f):
        f(ids[:, :3])  # both ranks: the first step (every rank compiled, then launched)
        if f.runtime.collectives.rank == 1:
            return None  # then never steps again
        f.runtime.max_spin_remote = 200
        with pytest.raises(MegakernelTimeout, match="rank 1 never pushed"):
            f(ids[:, 3:])
        return True
    assert mega_ranks(model, 2, run)[0]


def test_mega_rank_missing_at_launch_raises():
    """A rank that never launches the megakernel at all: the others' launch barrier times out
    naming it (a dist.barrier would block until NCCL's watchdog)."""
    model = model_for("llama")

    def run(f):
        if f.runtime.collectives.rank == 1:
            return None
        f.runtime.tp_barrier_s = 0.5
        with pytest.raises(MegakernelTimeout, match=r"rank\(s\) \[1\]"):
            f(torch.arange(3, 6)[None])
        return True
    assert mega_ranks(model, 2, run)[0]


def test_mega_tp_needs_peer_to_peer_ranks():
    """Processes without mapped peer memory (gloo on CPUs) get a clear error at construction."""
    model = model_for("llama")

    class Gloo:
        world, rank, peer_to_peer = 2, 0, False
    with pytest.raises(ValueError, match="one GPU per rank"):
        FastModel(packed(model, 0, 2), model.config, max_seq_len=64, mode="mega",
                  collectives=Gloo())
