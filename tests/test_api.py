"""Public API: forward/reset/generate contracts, streamers, patch/unpatch, and every bad input
raising a clear error before any kernel runs."""
import os
import sys
import threading

import pytest
import torch

import fastdecode
from conftest import DEVICE
from helpers import record_calls
from models import tiny_model

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))  # shapes

@pytest.fixture(scope="module")
def model():
    return tiny_model("llama").to(DEVICE)


@pytest.fixture(scope="module")
def fm(model):
    return fastdecode.from_hf(model, max_seq_len=48, mode="torch")


def test_forward_contract(fm, model):
    ids = torch.tensor([[5, 6, 7, 8]], device=DEVICE)
    fm.reset()
    a = fm(ids)
    assert a.shape == (1, 4, 101) and a.dtype == torch.float32
    assert fm.position == 4
    b = fm(ids[:, :2])  # appended after what the cache holds: positions 4, 5
    with torch.no_grad():
        ref = model(torch.cat([ids, ids[:, :2]], 1)).logits[0, 4:].float()
    assert torch.allclose(b[0], ref, atol=1e-4, rtol=1e-4)
    fm.reset()
    assert fm.position == 0 and torch.equal(fm(ids), a)
    fm.reset()  # a tokenizer's output as keywords, its mask all ones
    assert torch.equal(fm(input_ids=ids, attention_mask=torch.ones_like(ids)), a)
    with pytest.raises(ValueError, match="padding"):
        fm(ids, attention_mask=torch.tensor([[0, 1, 1, 1]], device=DEVICE))
    assert fm.config is model.config and isinstance(fm, torch.nn.Module)


def test_generate_like_hf(fm, model):
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    out = fm.generate(ids, max_new_tokens=9, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=9, do_sample=False)
    assert out.dtype == torch.long and torch.equal(out, ref)


def test_generate_positional_arguments_like_hf(fm, model):
    """generate's positional parameters are HF's, in HF's order (inputs, generation_config,
    logits_processor, ...), so a call written for HF's generate binds the same way."""
    import inspect

    from transformers import GenerationConfig, GenerationMixin, LogitsProcessorList
    from transformers.generation.logits_process import SuppressTokensLogitsProcessor
    ours = list(inspect.signature(fm.generate).parameters.values())
    hf = list(inspect.signature(GenerationMixin.generate).parameters)[1:]  # after self
    positional = [p.name for p in ours if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == ["input_ids"] + hf[1:len(positional)] and len(positional) >= 8
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    gc = GenerationConfig(max_new_tokens=6, do_sample=False)
    procs = LogitsProcessorList([SuppressTokensLogitsProcessor([4, 5], device=DEVICE)])
    with torch.no_grad():
        ref = model.generate(ids, gc, procs)
    assert torch.equal(fm.generate(ids, gc, procs), ref)
    assert torch.equal(fm.generate(ids, gc), fm.generate(ids, max_new_tokens=6))


@pytest.mark.filterwarnings("ignore:Using the model-agnostic default `max_length`")
def test_generated_length_like_hf(fm, model):
    """Without max_new_tokens, HF's length rule: a max_length (argument or generation config)
    counts the prompt; none set means 20 new tokens, capped by max_position_embeddings."""
    from transformers import GenerationConfig
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    cases = [dict(), dict(max_length=7), dict(generation_config=GenerationConfig(max_length=9)),
             dict(generation_config=GenerationConfig(max_new_tokens=4), max_length=30)]
    for kw in cases:
        with torch.no_grad():
            ref = model.generate(ids, do_sample=False, eos_token_id=None, **kw)
        out = fm.generate(ids, eos_token_id=[], **kw)
        assert torch.equal(out, ref), kw
    assert fm.generate(ids, eos_token_id=[]).shape[1] == 3 + 20
    short = tiny_model("llama", max_position_embeddings=14).to(DEVICE)
    with torch.no_grad():
        ref = short.generate(ids, do_sample=False, eos_token_id=None)
    out = fastdecode.from_hf(short, max_seq_len=48, mode="torch").generate(ids, eos_token_id=[])
    assert out.shape[1] == 14 and torch.equal(out, ref)


def test_eos_stops(fm):
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    full = fm.generate(ids, max_new_tokens=9)
    eos = int(full[0, 6])           # the 4th generated token
    out = fm.generate(ids, max_new_tokens=9, eos_token_id=[1000, eos])
    first = (full[0, 3:] == eos).nonzero()[0].item()
    assert torch.equal(out, full[:, :3 + first + 1])   # ends with the EOS token, like HF


def test_num_return_sequences(fm):
    """num_return_sequences (sampling): N independent samples of one prompt, row i the single
    sample of seed + i, the rows that stopped at EOS padded to the longest with pad_token_id
    (else the first EOS id, as HF); greedy, a streamer or recorded scores with N > 1 raise."""
    ids = torch.tensor([[1, 2, 3]], device=DEVICE)
    kw = dict(max_new_tokens=8, do_sample=True, temperature=3.0)
    rows = [fm.generate(ids, seed=11 + i, eos_token_id=[], **kw) for i in range(4)]
    out = fm.generate(ids, seed=11, eos_token_id=[], num_return_sequences=4, **kw)
    assert out.shape == (4, 11) and torch.equal(out, torch.cat(rows))
    assert len({tuple(r[0].tolist()) for r in rows}) > 1  # independent draws
    # an EOS id that ends some rows early: each row is its single run, then padding
    eos = int(rows[1][0, 5])
    singles = [fm.generate(ids, seed=11 + i, eos_token_id=eos, **kw) for i in range(4)]
    assert len({s.shape[1] for s in singles}) > 1
    for pad, want_pad in ((None, eos), (99, 99)):
        out = fm.generate(ids, seed=11, eos_token_id=eos, num_return_sequences=4,
                          pad_token_id=pad, **kw)
        assert out.shape == (4, max(s.shape[1] for s in singles))
        for row, s in zip(out, singles):
            n = s.shape[1]
            assert torch.equal(row[:n], s[0]) and bool((row[n:] == want_pad).all())
    with pytest.raises(ValueError, match="do_sample"):
        fm.generate(ids, max_new_tokens=2, num_return_sequences=2)
    with pytest.raises(ValueError, match="streamer"):
        fm.generate(ids, num_return_sequences=2, streamer=object(), **kw)
    with pytest.raises(ValueError, match="output_scores"):
        fm.generate(ids, num_return_sequences=2, return_dict_in_generate=True,
                    output_scores=True, **kw)


def test_streamers(fm, model):
    from transformers import TextIteratorStreamer

    class Tok:  # the smallest tokenizer TextIteratorStreamer needs
        def decode(self, ids, **kw):
            return "".join(f"<{i}>" for i in ids)

    class Collect:
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, value):
            self.puts.append(value.tolist())

        def end(self):
            self.ended = True
    ids = torch.tensor([[4, 5]], device=DEVICE)
    s = Collect()
    out = fm.generate(ids, max_new_tokens=5, streamer=s)
    assert s.ended and s.puts[0] == [[4, 5]] and [p[0] for p in s.puts[1:]] == out[0, 2:].tolist()
    it = TextIteratorStreamer(Tok(), skip_prompt=True)
    th = threading.Thread(target=fm.generate, args=(ids,), kwargs=dict(max_new_tokens=5,
                                                                       streamer=it))
    th.start()
    text = "".join(it)
    th.join()
    assert text == "".join(f"<{i}>" for i in out[0, 2:].tolist())


def test_patch_unpatch_round_trip(model):
    ids = torch.tensor([[7, 8, 9]], device=DEVICE)
    with torch.no_grad():
        before = model.generate(ids, max_new_tokens=6, do_sample=False)
    fastdecode.patch(model, max_seq_len=32, mode="torch")
    assert "generate" in model.__dict__
    assert "_fastdecode" not in dict(model.named_modules())  # not registered as a submodule
    out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, before)
    fastdecode.unpatch(model)
    assert "generate" not in model.__dict__ and "_fastdecode" not in model.__dict__
    with torch.no_grad():
        assert torch.equal(model.generate(ids, max_new_tokens=6, do_sample=False), before)


def test_bad_inputs_raise(fm):
    ok = torch.tensor([[1, 2]], device=DEVICE)
    with pytest.raises(ValueError, match="batch size"):
        fm.generate(torch.ones(2, 3, dtype=torch.long, device=DEVICE), max_new_tokens=2)
    with pytest.raises(ValueError, match="batch size"):
        fm(torch.ones(2, 3, dtype=torch.long, device=DEVICE))
    with pytest.raises(ValueError, match="attention_mask has zeros"):
        fm.generate(ok, attention_mask=torch.tensor([[0, 1]], device=DEVICE), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_seq_len"):
        fm.generate(ok, max_new_tokens=47)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        fm.generate(ok, max_new_tokens=-1)
    fm.reset()
    with pytest.raises(ValueError, match="max_seq_len"):
        fm(torch.ones(1, 49, dtype=torch.long, device=DEVICE))
    with pytest.raises(ValueError, match="outside"):
        fm(torch.tensor([[1, 101]], device=DEVICE))
    with pytest.raises(TypeError, match="integer"):
        fm(torch.ones(1, 2, device=DEVICE))
    with pytest.raises(ValueError, match="is on meta"):
        fm(torch.ones(1, 2, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match="beam"):
        fm.generate(ok, num_beams=4)
    # HF arguments that would change the result are refused, not ignored; their defaults pass
    with pytest.raises(ValueError, match="min_new_tokens must be >= 0"):
        fm.generate(ok, max_new_tokens=4, min_new_tokens=-1, eos_token_id=2)
    with pytest.raises(TypeError, match="must be callables"):
        fm.generate(ok, max_new_tokens=2, logits_processor=[0.5])
    with pytest.raises(ValueError, match="output_hidden_states"):
        fm.generate(ok, max_new_tokens=2, return_dict_in_generate=True,
                    output_hidden_states=True)
    with pytest.raises(ValueError, match="repetition_penalty must be > 0"):
        fm.generate(ok, max_new_tokens=2, repetition_penalty=0.0)
    with pytest.raises(ValueError, match="min_p must be in"):
        fm.generate(ok, max_new_tokens=2, do_sample=True, min_p=1.5)
    with pytest.raises(TypeError, match="unsupported arguments"):
        fm.generate(ok, max_new_tokens=2, penalty_alpha=0.6)
    for images in (dict(pixel_values=torch.zeros(1, 3, 8, 8)),  # Qwen2-VL's grid sizes too
                   dict(image_grid_thw=torch.ones(1, 3, dtype=torch.long))):
        with pytest.raises(TypeError, match="images are not supported"):
            fm.generate(ok, max_new_tokens=2, **images)
    with pytest.raises(ValueError, match="guidance_scale"):
        fm.generate(ok, max_new_tokens=2, guidance_scale=1.5)
    with pytest.raises(ValueError, match="stop_strings needs the model's tokenizer"):
        fm.generate(ok, max_new_tokens=2, stop_strings=["."])
    with pytest.raises(ValueError, match="temperature"):
        fm.generate(ok, max_new_tokens=2, do_sample=True, temperature=0.0)
    assert fm.position == 0  # nothing ran


def test_harmless_hf_arguments_at_their_defaults(fm):
    """The same tokens with HF's no-op arguments (min_new_tokens without stop tokens, empty
    processor lists, num_beams=1, the logits processors' neutral values, beam-only and cache
    arguments) as without them; a generation_config's repetition_penalty applies, as in HF,
    unless the call sets another."""
    ok = torch.tensor([[1, 2]], device=DEVICE)
    want = fm.generate(ok, max_new_tokens=4, eos_token_id=[])
    got = fm.generate(ok, max_new_tokens=4, eos_token_id=[], min_new_tokens=4, num_beams=1,
                      logits_processor=[], stopping_criteria=[], output_scores=False,
                      pad_token_id=0, no_repeat_ngram_size=0, bad_words_ids=None, typical_p=1.0,
                      min_p=0.0, repetition_penalty=1.0, stop_strings=[], length_penalty=1.3,
                      cache_implementation="static")
    assert torch.equal(got, want)
    import copy
    gc = copy.deepcopy(fm.generation_config)
    gc.repetition_penalty = 3.0
    got = fm.generate(ok, max_new_tokens=4, eos_token_id=[], generation_config=gc)
    assert torch.equal(got, fm.generate(ok, max_new_tokens=4, eos_token_id=[],
                                        repetition_penalty=3.0))
    assert torch.equal(fm.generate(ok, max_new_tokens=4, eos_token_id=[], generation_config=gc,
                                   repetition_penalty=1.0), want)


def test_model_level_errors(model):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            fastdecode.from_hf(model, device="cuda")
    with pytest.raises(TypeError, match="dtype must be"):
        fastdecode.from_hf(model, dtype=torch.int8)
    with pytest.raises(ValueError, match="mode"):
        fastdecode.from_hf(model, mode="warp")
    import transformers as tf
    mamba = tf.MambaForCausalLM(tf.MambaConfig(num_hidden_layers=1, hidden_size=16,
                                               vocab_size=50))
    with pytest.raises(fastdecode.UnsupportedModelError, match="'mamba' is not supported"):
        fastdecode.from_hf(mamba)
    q = tiny_model("qwen2")
    q.model.layers[0].mlp.up_proj.weight = torch.nn.Parameter(
        q.model.layers[0].mlp.up_proj.weight.data.to(torch.int8), requires_grad=False)
    with pytest.raises(TypeError, match="int8"):
        fastdecode.from_hf(q)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            fastdecode.from_pretrained("smollm2", device="cuda")


def test_to_device_and_dtype():
    """fm.to / .half() / .float() / .cuda() move the packed weights as nn.Module's would move
    parameters: the result runs as a model built on that device and dtype from the start (the
    same logits, bit for bit: the same packed values through the same ops), its cache empty."""
    model = tiny_model("llama_bias_tied")  # tied: the lm_head must stay the embedding's tensor
    ids = torch.tensor([[4, 9, 2, 7, 1]])
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        fm = fastdecode.from_hf(model, max_seq_len=16, mode="torch")
        fm(ids)
        assert fm.to("cpu", torch.float32) is fm and fm.position == 5  # no change: cache kept
        assert fm.to(DEVICE, dtype) is fm
        assert fm.device.type == DEVICE.type and fm.dtype == dtype
        assert fm.position == (5 if (DEVICE.type, dtype) == ("cpu", torch.float32) else 0)
        assert fm.weights.lm_head is fm.weights.embed
        fresh = fastdecode.from_hf(tiny_model("llama_bias_tied").to(DEVICE, dtype),
                                   max_seq_len=16, mode="torch")
        fm.reset()  # (the unchanged fp32 CPU model still holds the 5 tokens)
        assert torch.equal(fm(ids.to(DEVICE)), fresh(ids.to(DEVICE)))
    assert fm.half().dtype == torch.float16 and fm.float().dtype == torch.float32
    sinks = fastdecode.from_hf(tiny_model("gpt_oss"), max_seq_len=16, mode="torch")
    sinks.to(DEVICE, torch.bfloat16)  # gpt-oss's attention sinks: rounded as the weights, fp32
    assert sinks.weights.sinks.dtype == torch.float32
    fresh = fastdecode.from_hf(tiny_model("gpt_oss").to(DEVICE, torch.bfloat16), max_seq_len=16,
                               mode="torch")
    assert torch.equal(sinks.weights.sinks, fresh.weights.sinks)
    assert torch.equal(sinks(ids.to(DEVICE)), fresh(ids.to(DEVICE)))
    before = fm.weights
    with pytest.raises(TypeError, match="float64"):
        fm.double()
    assert fm.weights is before and fm(ids.to(DEVICE)).dtype == torch.float32  # still usable
    if DEVICE.type == "cuda":  # a CPU-built model moved to the GPU takes the GPU's default mode
        cpu = fastdecode.from_hf(tiny_model("llama"), max_seq_len=16)
        assert cpu.cuda().mode == "mega" and cpu.device.type == "cuda"
        want = fastdecode.from_hf(tiny_model("llama").cuda(), max_seq_len=16)
        assert torch.equal(cpu.generate(ids.cuda(), max_new_tokens=6),
                           want.generate(ids.cuda(), max_new_tokens=6))


def test_from_hf_packs_onto_a_device_and_dtype():
    """from_hf(model, device=, dtype=) packs the HF weights there, converted: the same model as
    one built from the HF model moved and converted first (bit for bit: the same packed values),
    with only the packed copy on the target device. patch(cpu_model, device="cuda") takes CPU
    inputs and returns CPU outputs, as the HF model's generate does."""
    model = tiny_model("qwen2")  # fp32, on the CPU
    ids = torch.tensor([[4, 9, 2, 7, 1]])
    fm = fastdecode.from_hf(model, max_seq_len=32, device=DEVICE, dtype="bfloat16")
    want = fastdecode.from_hf(tiny_model("qwen2").to(DEVICE, torch.bfloat16), max_seq_len=32)
    assert fm.device.type == DEVICE.type and fm.dtype == torch.bfloat16 and fm.mode == want.mode
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert torch.equal(fm.generate(ids.to(DEVICE), max_new_tokens=8),
                       want.generate(ids.to(DEVICE), max_new_tokens=8))
    if DEVICE.type == "cuda":
        fastdecode.patch(model, max_seq_len=32, device="cuda", dtype=torch.bfloat16)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8)
        assert out.device.type == "cpu"
        assert torch.equal(out, want.generate(ids.cuda(), max_new_tokens=8).cpu())
        d = model.generate(input_ids=ids, max_new_tokens=3, return_dict_in_generate=True,
                           output_scores=True)
        assert d.sequences.device.type == "cpu" and d.scores[0].device.type == "cpu"
        fastdecode.unpatch(model)


def test_weights_too_large_raise():
    """Packing onto a GPU without room for the packed weights raises first. Their size is the
    published parameter count in bf16: Llama-3.1-8B's 8,030,261,248 (untied: the embedding and
    the lm_head both), Llama-3.2-1B's 1,235,814,400 (tied: one tensor), Mixtral-8x7B's
    46,702,792,704 (every expert packed, not the 12.9B a token reads)."""
    import transformers as tf
    from shapes import SHAPES
    from fastdecode.packing import check_weights_fit
    from fastdecode.spec import ModelSpec
    for cfg, params, tied in ((SHAPES["8b"][1](), 8030261248, False),
                              (SHAPES["1b"][1](), 1235814400, True),
                              (tf.MixtralConfig(), 46702792704, False)):
        spec = ModelSpec.from_hf_config(cfg)
        check_weights_fit(spec, spec.vocab_size, not tied, torch.bfloat16, 2 * params)
        with pytest.raises(ValueError, match="packed weights need .*from_pretrained"):
            check_weights_fit(spec, spec.vocab_size, not tied, torch.bfloat16, 2 * params - 1)


def test_free_bytes_count_torch_cache():
    """The room checked before packing or a KV cache is the driver's free memory plus what torch's
    caching allocator holds unused (a model moved to the CPU leaves its blocks there): 10 GiB
    free, 50 reserved, 20 allocated -> 40 GiB."""
    from unittest import mock
    from fastdecode.packing import device_free_bytes
    gib = 1 << 30
    with mock.patch("torch.cuda.mem_get_info", return_value=(10 * gib, 80 * gib)), \
            mock.patch("torch.cuda.memory_reserved", return_value=50 * gib), \
            mock.patch("torch.cuda.memory_allocated", return_value=20 * gib):
        assert device_free_bytes("cuda:0") == 40 * gib


def test_kv_cache_too_large_raises():
    """A max_seq_len whose KV cache cannot fit the device raises before any allocation, naming
    the largest that fits: Llama-3.1-8B's 2 x 32 layers x 8 KV heads x 128 bf16 = 128 KiB a
    position, 16 GiB free -> 15 GiB of room -> 122880 positions."""
    from shapes import SHAPES
    from fastdecode.spec import ModelSpec
    from fastdecode.state import check_kv_fits
    spec = ModelSpec.from_hf_config(SHAPES["8b"][1]())
    free = 16 << 30
    check_kv_fits(spec, 122880, torch.bfloat16, free)
    with pytest.raises(ValueError, match=r"needs 15\.0 GiB .* max_seq_len=122880 is the largest"):
        check_kv_fits(spec, 122881, torch.bfloat16, free)
    if DEVICE.type == "cuda":
        with pytest.raises(ValueError, match="KV cache needs"):
            fastdecode.from_hf(tiny_model("llama").cuda(), max_seq_len=1 << 40)


@pytest.mark.parametrize("mode", ["torch", "mega"])
def test_prefix_cache_prefills_only_the_new_tokens(mode):
    """prefix_cache=True: a chat's next turn (the last reply and a new message after it) prefills
    only what the cache does not hold, and decodes as a fresh model does (fp32: the kept entries
    equal to rounding); a prompt the cache holds entirely still feeds its last token; another
    prompt, reset(), a forward() in between, max_new_tokens=0, a penalty over the whole prompt
    and prompt lookup behave as they would without the cache."""
    model = tiny_model("qwen2").to(DEVICE)
    fm = fastdecode.from_hf(model, max_seq_len=96, mode=mode, prefix_cache=True)
    fresh = fastdecode.from_hf(model, max_seq_len=96, mode="torch")
    starts = record_calls(fm.runtime, "prefill", lambda ids, s, start=0: start)

    def both(ids, **kw):
        kw = dict(max_new_tokens=8, eos_token_id=[], **kw)
        got = fm.generate(ids, **kw)
        assert torch.equal(got, fresh.generate(ids, **kw)), (ids, kw)
        return got
    ids = torch.tensor([[3, 14, 15, 92, 65, 35]], device=DEVICE)
    turn1 = both(ids)                                    # 14 tokens, 13 of them cached
    turn2 = torch.cat([turn1, torch.tensor([[7, 8, 9]], device=DEVICE)], 1)
    out2 = both(turn2)
    both(out2[:, :20])                                   # held entirely: its last token fed
    both(torch.tensor([[5, 5, 5]], device=DEVICE))       # another prompt: from 0
    assert starts == [0, 13, 19, 0]
    fm.generate(ids, max_new_tokens=0)                   # nothing fed: the cache kept
    fm(torch.tensor([[6, 6]], device=DEVICE))            # appended: [5, 5, 5, t, ..., 6, 6]
    cached = len(fm.runtime.fed)
    both(torch.tensor([fm.runtime.fed + [1]], device=DEVICE), repetition_penalty=1.5)
    both(torch.tensor([fm.runtime.fed[:cached]], device=DEVICE), prompt_lookup_num_tokens=3)
    fm.reset()
    both(ids)
    assert starts[4:] == [cached, cached - 1, 0]
    plain = fastdecode.from_hf(model, max_seq_len=96, mode="torch")  # off by default
    seen = record_calls(plain.runtime, "prefill", lambda ids, s, start=0: start)
    out = plain.generate(ids, max_new_tokens=4)
    plain.generate(out, max_new_tokens=4)
    assert seen == [0, 0]
