"""A GGUF file opened over a memory map: its metadata and its tensors' bytes, read in place.

The gguf package's `GGUFReader` builds a numpy view for every element of every array field; for a
49k-token vocabulary (tokens, types, merges) that took 11 s on a 2-core EPYC, longer than llama.cpp
takes to load the whole model. The format is simple (a header, typed key/values, tensor infos, aligned
data), so we parse it directly: number arrays become one `np.frombuffer` each, string arrays one pass.
Tensor data is never copied: each tensor is a numpy view of the mapping."""

from __future__ import annotations

import mmap
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types: struct format of the scalars, numpy dtype of arrays of them.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF's order: ne0 (the row length) first
    qtype: int  # ggml type id (F32 = 0, F16 = 1, Q4_0 = 2, ...)
    data: np.ndarray  # uint8 view of the mapping, rows of whole blocks: [rows, row_bytes]

    @property
    def rows_shape(self) -> tuple[int, ...]:
        """The tensor's shape as torch and HF order it (rows first)."""
        return tuple(reversed(self.shape))


class GGUFFile:
    """`metadata` maps keys to Python values (numbers, strings, lists of strings, numpy arrays of numbers);
    `tensors` maps names to `TensorInfo` in file order."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._map
        if buf[:4] != MAGIC:
            raise ValueError(f"{self.path} is not a GGUF file (magic {bytes(buf[:4])!r})")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {version} is not supported (2 and 3 are)")
        self.version = version
        self._pos = 24
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("<I")
            self.metadata[key] = self._value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            shape = struct.unpack_from(f"<{n_dims}Q", buf, self._pos)
            self._pos += 8 * n_dims
            qtype, offset = self._unpack("<IQ")
            infos.append((name, tuple(int(n) for n in shape), qtype, offset))
        alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        start = -(-self._pos // alignment) * alignment
        whole = np.frombuffer(buf, dtype=np.uint8)
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype, offset in infos:
            per, size = _block(qtype)
            if shape[0] % per:
                raise ValueError(f"{self.path}: tensor {name} rows of {shape[0]} are not whole blocks of {per}")
            row_bytes = shape[0] // per * size
            rows = int(np.prod(shape[1:], dtype=np.int64))
            begin = start + offset
            if begin + rows * row_bytes > len(buf):
                raise ValueError(f"{self.path}: tensor {name} runs past the end of the file (truncated download?)")
            self.tensors[name] = TensorInfo(name, shape, qtype, whole[begin:begin + rows * row_bytes]
                                            .reshape(rows, row_bytes))

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "llama"))

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_get(self, key: str, default: Any = None) -> Any:
        """A `{arch}.` key, as llama.cpp names per-architecture hyper-parameters."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def release_unread(self, kept_pointers: set[int]) -> int:
        """Drops from this process's memory the mapped pages of every tensor none of whose bytes start a
        kept tensor (`kept_pointers`: the data pointers the model holds). Fused matrices (q/k/v, gate/up)
        are copies, so their parts' pages would stay resident, counted in RSS, never read again; the file
        is unchanged and a later read would page them back in. Returns the bytes released."""
        page = mmap.PAGESIZE
        base = np.frombuffer(self._map, dtype=np.uint8).ctypes.data
        released = 0
        for t in self.tensors.values():
            start = t.data.ctypes.data
            end = start + t.data.nbytes
            if any(start <= p < end for p in kept_pointers):
                continue
            lo, hi = -(-(start - base) // page) * page, (end - base) // page * page  # whole pages inside
            if hi > lo:
                self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                released += hi - lo
        return released

    # -- parsing ---------------------------------------------------------------------------------
    def _unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        (n,) = self._unpack("<Q")
        raw = self._map[self._pos:self._pos + n]
        self._pos += n
        return raw.decode("utf-8", errors="replace")

    def _strings(self, count: int) -> list[str]:
        """`count` strings in a row: a vocabulary's tokens or merges (300k for Qwen), so one tight loop."""
        buf, pos, out = self._map, self._pos, []
        length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            (n,) = length(buf, pos)
            pos += 8
            out.append(buf[pos:pos + n].decode("utf-8", errors="replace"))
            pos += n
        self._pos = pos
        return out

    def _value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            item, count = self._unpack("<IQ")
            if item == _STRING:
                return self._strings(count)
            if item in _NUMPY:
                dtype = np.dtype(_NUMPY[item])
                values = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).copy()
                self._pos += dtype.itemsize * count
                return values
            return [self._value(item) for _ in range(count)]  # arrays of arrays: rare, small
        if vtype not in _SCALARS:
            raise ValueError(f"{self.path}: unknown GGUF value type {vtype}")
        return self._unpack(_SCALARS[vtype])[0]


def prefetch(path: Path) -> None:
    """Asks the OS to read a .gguf file into its page cache in the background (posix_fadvise WILLNEED, on a
    thread: queueing the reads may block), so that a first start after a reboot or a download reads the file
    while Python imports the server, not page by page as the load touches it. Anything else: nothing."""
    if path.suffix != ".gguf" or not path.is_file() or not hasattr(os, "posix_fadvise"):
        return

    def advise() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # a hint the file system may refuse
        finally:
            os.close(fd)

    threading.Thread(target=advise, name="gguf-prefetch", daemon=True).start()


def _block(qtype: int) -> tuple[int, int]:
    """(weights per block, bytes per block) of a ggml type."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    except (ValueError, KeyError):
        raise ValueError(f"unknown ggml tensor type {qtype}") from None
