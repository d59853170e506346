"""Tensor-parallel sharding and the step over N virtual ranks (fp32 all-reduce in rank order)
against the tp=1 model, for every family and for 2, 4 and 8 ranks."""
import pytest
import torch
import transformers as tf

import fastdecode
from fastdecode.distributed import TensorParallelError, VirtualTP
from fastdecode.loading import safetensors_getter
from fastdecode.packing import dict_getter, pack
from fastdecode.spec import ModelSpec
from helpers import rel_err
from models import tiny_model

# (family, world) pairs the tiny models allow (tp must divide KV heads, heads and ffn)
CASES = [("llama", 2), ("llama_bias_tied", 2), ("llama_bias_tied", 4), ("qwen2", 3),
         ("qwen3", 2), ("mistral_gqa", 2)]


def model_for(family):
    if family == "wide":
        return wide_llama()
    if family == "mistral_gqa":  # the tiny mistral is MQA (one KV head): give it two
        return tiny_model("mistral", num_key_value_heads=2)
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


def packed(model, rank=0, world=1):
    spec, get = spec_and_getter(model)
    return pack(spec, get, device="cpu", dtype=torch.float32, rank=rank, world=world)


@pytest.mark.parametrize("family,world", CASES)
def test_shards_concatenate_back(family, world):
    model = model_for(family)
    pw = packed(model)
    s = pw.spec
    shards = [packed(model, r, world) for r in range(world)]
    hd = s.head_dim
    qs = [sh.w_qkv[:, :sh.spec.q_dim] for sh in shards]
    ks = [sh.w_qkv[:, sh.spec.q_dim:sh.spec.q_dim + sh.spec.kv_dim] for sh in shards]
    vs = [sh.w_qkv[:, sh.spec.q_dim + sh.spec.kv_dim:] for sh in shards]
    assert torch.equal(torch.cat(qs + ks + vs, 1), pw.w_qkv)
    assert torch.equal(torch.cat([sh.w_o for sh in shards], 2), pw.w_o)
    assert torch.equal(torch.cat([sh.w_down for sh in shards], 2), pw.w_down)
    f = s.ffn_dim // world
    gates = [sh.w_gu[:, :f] for sh in shards]
    ups = [sh.w_gu[:, f:] for sh in shards]
    assert torch.equal(torch.cat(gates + ups, 1), pw.w_gu)
    assert torch.equal(torch.cat([sh.lm_head for sh in shards], 0), pw.lm_head)
    assert sum(sh.spec.vocab_size for sh in shards) == s.vocab_size
    assert all(sh.spec.head_dim == hd and sh.spec.group == s.group for sh in shards)


def teacher_forced(run, ids, prompt=9):
    return torch.cat([run(ids[:prompt])] + [run(ids[t:t + 1]) for t in range(prompt, len(ids))])


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
    for world in (0, -1, 3, 4):
        with pytest.raises(TensorParallelError):
            spec.check_tp(world)
    with pytest.raises(TensorParallelError, match="key_value"):
        packed(tiny_model("mistral"), 0, 2)            # MQA: one KV head
    spec.check_tp(1)
    spec.check_tp(2)


@pytest.mark.parametrize("family,world", [("qwen3", 2), ("llama_bias_tied", 4)])
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


@pytest.mark.parametrize("family,world,mode", [("qwen3", 2, "torch"), ("llama", 2, "ops")])
def test_torchrun_ranks_match_single_process(tmp_path, family, world, mode):
    """Real processes: torchrun, gloo, each rank packs its shard from safetensors; every rank
    holds the same logits and tokens, equal to the single-process model's. ops: the Triton
    kernels (interpreted here) with row-parallel partial sums all-reduced between them and the
    vocab-parallel lm_head gathered before the token choice."""
    import os
    import subprocess
    import sys
    model = model_for(family)
    model.save_pretrained(tmp_path / "ckpt")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc-per-node={world}", os.path.join(root, "tests", "tp_worker.py"),
                          str(tmp_path / "ckpt"), str(world), str(tmp_path / "out"), mode],
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
    assert rel_err(outs[0]["logits"], want) < 1e-5
    assert torch.equal(outs[0]["tokens"], fm.generate(ids[:, :5], max_new_tokens=8,
                                                      eos_token_id=[]))
    for o in outs:  # every rank draws the same sample
        assert torch.equal(o["sampled"], outs[0]["sampled"])
    if mode == "ops":  # the Gumbel noise is keyed on global token ids: the one-rank draw
        one = fastdecode.from_pretrained(str(tmp_path / "ckpt"), device="cpu",
                                         dtype=torch.float32, max_seq_len=64, mode="ops")
        assert torch.equal(outs[0]["sampled"], one.generate(
            ids[:, :5], max_new_tokens=8, eos_token_id=[], do_sample=True, temperature=1.5,
            seed=3))
