"""A GGUF file's metadata and tensor table, read in one pass without parsing what is not needed.

gguf.GGUFReader (the `gguf` package) builds a numpy view for every element of every metadata
array: the 49K-token vocabulary and 49K merges of SmolLM2's GGUF take it 4.5 s on a 2-core CPU,
and transformers' AutoTokenizer parses the file that way a second time for its config -- most
of the quickstart's load time. The weights need only the scalars and the tensor table, so here
arrays are skipped (their length kept) and tensors are memory-mapped views shaped as
GGUFReader shapes them; dequantize (below) unpacks them in torch.

Layout (GGUF v2 / v3, little-endian; github.com/ggml-org/ggml docs/gguf.md): magic "GGUF", u32
version, u64 tensor count, u64 metadata count; each metadata entry a string key, u32 value type
and the value (a string is u64 length + UTF-8 bytes; an array u32 element type, u64 count,
elements); each tensor a string name, u32 n_dims, n_dims x u64 dims (ggml order, innermost
first), u32 ggml type, u64 offset into the data section, which starts at the next multiple of
general.alignment (default 32) after the table.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import torch

# metadata value type -> struct format of one value (8: string, 9: array handled apart)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """Not a GGUF file this reader understands (magic, version, a value type), or cut short."""


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array, skipped: its element type and length."""
    type: int
    count: int


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: object   # gguf.GGMLQuantizationType
    shape: tuple          # ggml order (innermost first), as GGUFReader's ReaderTensor.shape
    data: np.ndarray      # typed elements (float / int types) or bytes per row (quantized), as
                          # GGUFReader's ReaderTensor.data: numpy's order, outermost first


class GGUFFile:
    """metadata: {key: int | float | bool | str | GGUFArray}; tensors: [GGUFTensor], file
    order."""

    def __init__(self, path: str):
        import gguf
        self.path = path
        buf = np.memmap(path, dtype=np.uint8, mode="r")
        mv = memoryview(buf)
        if len(buf) < 24 or bytes(mv[:4]) != b"GGUF":
            raise GGUFFormatError(f"{path}: not a GGUF file ({len(buf)} bytes, magic "
                                  f"{bytes(mv[:4])!r})")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", mv, 4)
        if version not in (2, 3):
            raise GGUFFormatError(f"{path}: GGUF version {version} (this reader reads 2 and 3)")
        self._mv, self._at = mv, 24
        try:
            table = self._read_tables(n_kv, n_tensors)
        except struct.error as e:
            raise GGUFFormatError(f"{path}: cut short in its header at byte {self._at} of "
                                  f"{len(buf)} (an unfinished download?)") from e
        del self._mv
        align = int(self.metadata.get("general.alignment", 32))
        start = -(-self._at // align) * align
        Q = gguf.GGMLQuantizationType
        typed = {Q.F32: np.float32, Q.F16: np.float16, Q.F64: np.float64, Q.I8: np.int8,
                 Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64}
        self.tensors = []
        for name, dims, ggml_type, offset in table:
            qtype = gguf.GGMLQuantizationType(ggml_type)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            n = int(np.prod(dims, dtype=np.int64))
            np_shape = tuple(reversed(dims))
            end = start + offset + n * type_size // block
            if end > len(buf):
                raise GGUFFormatError(f"{path}: tensor {name} ends at byte {end}, past the "
                                      f"file's {len(buf)} (an unfinished download?)")
            raw = buf[start + offset: end]
            if qtype in typed:
                data = raw.view(typed[qtype]).reshape(np_shape)
            else:  # quantized (and bf16): bytes per row
                data = raw.reshape(gguf.quants.quant_shape_to_byte_shape(np_shape, qtype))
            self.tensors.append(GGUFTensor(name, qtype, tuple(int(d) for d in dims), data))

    def _read_tables(self, n_kv: int, n_tensors: int) -> list:
        """The metadata (into self.metadata), then the tensor table: [(name, dims, type,
        offset)]; self._at ends past it."""
        mv = self._mv
        self.metadata = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._u32())
        table = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._u32()
            dims = struct.unpack_from(f"<{n_dims}Q", mv, self._at)
            self._at += 8 * n_dims
            ggml_type, offset = struct.unpack_from("<IQ", mv, self._at)
            self._at += 12
            table.append((name, dims, ggml_type, offset))
        return table

    def _u32(self) -> int:
        (v,) = struct.unpack_from("<I", self._mv, self._at)
        self._at += 4
        return v

    def _string(self) -> str:
        (n,) = struct.unpack_from("<Q", self._mv, self._at)
        s = bytes(self._mv[self._at + 8: self._at + 8 + n]).decode("utf-8", errors="replace")
        self._at += 8 + n
        return s

    def _value(self, vtype: int):
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            etype = self._u32()
            (count,) = struct.unpack_from("<Q", self._mv, self._at)
            self._at += 8
            self._skip(etype, count)
            return GGUFArray(etype, count)
        fmt = _SCALAR.get(vtype)
        if fmt is None:
            raise GGUFFormatError(f"{self.path}: metadata value type {vtype} at byte {self._at}")
        (v,) = struct.unpack_from(fmt, self._mv, self._at)
        self._at += struct.calcsize(fmt)
        return v

    def _skip(self, etype: int, count: int):
        if etype == _STRING:  # each its own length: walk them (a 49K vocabulary: ~20 ms)
            mv, at = self._mv, self._at
            for _ in range(count):
                at += 8 + struct.unpack_from("<Q", mv, at)[0]
            self._at = at
        elif etype == _ARRAY:
            for _ in range(count):
                self._value(_ARRAY)
        elif etype in _SCALAR:
            self._at += struct.calcsize(_SCALAR[etype]) * count
        else:
            raise GGUFFormatError(f"{self.path}: array element type {etype} at byte {self._at}")


# ---- dequantization in torch, on the device the weights go to ----------------------------------
# The ggml block layouts (ggml-quants.c; the `gguf` package's numpy reference, gguf.quants, is what
# tests/test_loading.py checks these against): bytes per block of `block` elements, fp16 scales
# first except Q6_K's. The numpy reference dequantizes 110-170 M elements/s on a 2-core CPU (an 8B
# model: about a minute); here the raw blocks go to the GPU (4.5-8.5 bits an element instead of
# fp32's 32) and unpack there.

def _f16(b: torch.Tensor) -> torch.Tensor:
    """[n, 2k] uint8 -> [n, k] fp32: little-endian fp16 values."""
    return b.contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[..., m] uint8 -> [..., 2, m]: the low nibbles, then the high ones (ggml's order)."""
    return torch.stack([qs & 0xF, qs >> 4], dim=-2)


def _bits(b: torch.Tensor, n: int, width: int = 1) -> torch.Tensor:
    """[..., m] uint8 -> [..., n, m]: field i (width bits at bit i * width) of each byte."""
    shifts = torch.arange(0, n * width, width, device=b.device, dtype=torch.uint8)
    return (b.unsqueeze(-2) >> shifts.view(n, 1)) & ((1 << width) - 1)


def _scale_min_k4(s: torch.Tensor):
    """Q4_K / Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins per super-block."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 63, (md & 15) | ((d >> 2) & 48)], dim=-1)
    mn = torch.cat([m & 63, (md >> 4) | ((m >> 2) & 48)], dim=-1)
    return sc.float(), mn.float()


def _q8_0(b):
    return _f16(b[:, :2]) * b[:, 2:].contiguous().view(torch.int8).float()


def _q4_0(b):
    return _f16(b[:, :2]) * (_nibbles(b[:, 2:]).flatten(1).float() - 8)


def _q4_1(b):
    return _f16(b[:, :2]) * _nibbles(b[:, 4:]).flatten(1).float() + _f16(b[:, 2:4])


def _q5(b, lo: int, offset: float):
    """Q5_0 (lo 2: d, then 32 high bits, 16 bytes of nibbles; q - 16) and Q5_1 (lo 4: d, m)."""
    high = _bits(b[:, lo:lo + 4], 8).transpose(1, 2).flatten(1)  # bit i of the u32: element i
    q = (_nibbles(b[:, lo + 4:]).flatten(1) | (high << 4)).float()
    return _f16(b[:, :2]) * (q - offset) + (_f16(b[:, 2:4]) if lo == 4 else 0)


def _q4_k(b):
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    q = _nibbles(b[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32).float()
    return ((_f16(b[:, 0:2]) * sc)[..., None] * q - (_f16(b[:, 2:4]) * mn)[..., None]).flatten(1)


def _q5_k(b):
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    high = _bits(b[:, 16:48], 8)  # [n, 8, 32]: bit j of byte l -> sub-block j, element l
    q = (_nibbles(b[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32) | (high << 4)).float()
    return ((_f16(b[:, 0:2]) * sc)[..., None] * q - (_f16(b[:, 2:4]) * mn)[..., None]).flatten(1)


def _q6_k(b):
    n = b.shape[0]
    low = _nibbles(b[:, :128].reshape(n, 2, 64)).reshape(n, 8, 32)
    high = _bits(b[:, 128:192].reshape(n, 2, 32), 4, 2).reshape(n, 8, 32)
    q = ((low | (high << 4)).float() - 32).reshape(n, 16, 16)
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    return ((_f16(b[:, 208:210]) * scales)[..., None] * q).flatten(1)


def _bf16(b):
    return b.contiguous().view(torch.bfloat16).float()


def _dequantizers():
    import gguf
    Q = gguf.GGMLQuantizationType
    return {Q.Q8_0: _q8_0, Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q5_0: lambda b: _q5(b, 2, 16),
            Q.Q5_1: lambda b: _q5(b, 4, 0), Q.Q4_K: _q4_k, Q.Q5_K: _q5_k, Q.Q6_K: _q6_k,
            Q.BF16: _bf16}


DEQUANT_CHUNK = 1 << 24  # elements unpacked at a time: the unpacking's temporaries (a few bytes
                         # an element) stay ~0.2 GB beside the fp32 result, whatever the tensor


def dequantize(t: GGUFTensor, device="cpu") -> torch.Tensor:
    """A GGUF tensor as fp32 on `device`, in numpy's order ([rows, columns] for a matrix). Float
    and integer tensors convert; the quantized types above unpack in torch, DEQUANT_CHUNK
    elements at a time; any other type through the `gguf` package's numpy reference."""
    import gguf
    data = np.array(t.data)  # reads the memory-mapped bytes (a copy: torch wants it writable)
    fn = _dequantizers().get(t.tensor_type)
    if fn is None:
        if data.dtype != np.uint8:  # F32 / F16 / integer tensors
            return torch.from_numpy(data).to(device).float()
        return torch.from_numpy(np.array(gguf.quants.dequantize(data, t.tensor_type),
                                         dtype=np.float32)).to(device)
    block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    blocks = torch.from_numpy(data).to(device).reshape(-1, type_size)
    out = torch.empty(blocks.shape[0], block, dtype=torch.float32, device=blocks.device)
    step = max(1, DEQUANT_CHUNK // block)
    for i in range(0, blocks.shape[0], step):
        out[i:i + step] = fn(blocks[i:i + step])
    return out.reshape(gguf.quants.quant_shape_from_byte_shape(data.shape, t.tensor_type))
