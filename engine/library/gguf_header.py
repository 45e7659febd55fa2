"""Read a GGUF file's header (metadata and tensor table) without touching its weights.

The listing needs the architecture, the file type, each tensor's type and whether the file
holds every byte its tensor table claims (a truncated download). ``engine.models.gguf_read`` parses the
whole metadata into Python values (a 150,000-token vocabulary takes a while); this reader walks
the same bytes with plain reads (a memory map would end the process with SIGBUS if the file
shrank meanwhile), keeps the scalar metadata, steps over arrays without decoding them, and
checks every read against the file's size, so a malformed file is a ``GGUFHeaderError``
saying what is wrong, never a crash or a huge allocation.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4


class GGUFHeaderError(ValueError):
    """The header breaks the GGUF format; the message says how."""


@dataclass
class GGUFHeader:
    version: int
    metadata: dict[str, Any]  # scalar values only; arrays are skipped
    tensor_types: Counter = field(default_factory=Counter)  # type name -> tensor count
    data_end: int = 0  # the last byte any tensor needs

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the GGUF magic bytes (an Ollama blob has no suffix)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_header(path: Path) -> GGUFHeader:
    """Parse ``path``'s header; GGUFHeaderError when it is malformed or its tensors run past
    the end of the file, OSError when it cannot be read."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise GGUFHeaderError(f"only {size} bytes, shorter than a GGUF header")
        return _Parser(_Head(f, size), size).header()


class _Head:
    """The file's first bytes, read as far as the parser needs them (doubling, from 1 MiB)."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size, self.data = f, size, bytearray()

    def reach(self, end: int) -> bytearray:
        """The bytes read so far, at least ``end`` of them; GGUFHeaderError when the file has
        fewer (it claims more than it holds, or it shrank while being read)."""
        if end > len(self.data):
            want = min(self.size, max(end, 2 * len(self.data), 1 << 20))
            self.f.seek(len(self.data))
            self.data += self.f.read(want - len(self.data))  # in place: a bytearray grows
            if end > len(self.data):
                raise GGUFHeaderError(f"the file is truncated: its header runs past its end ({len(self.data)} bytes)")
        return self.data


_LENGTH = struct.Struct("<Q")


def _skip_strings(head: _Head, at: int, count: int, size: int) -> int:
    """The offset after ``count`` strings (each its 8-byte length, then its bytes) from ``at``:
    the vocabulary's hundreds of thousands, so a tight loop over the bytes read so far, which
    reads more when it runs past them."""
    if count > (size - at) // 8:
        raise GGUFHeaderError(f"an array at byte {at} claims {count} strings, more than the file holds")
    unpack = _LENGTH.unpack_from
    while count:
        data, done = head.data, 0
        try:
            for done in range(count):  # noqa: B007 (``done`` says where it stopped)
                at += 8 + unpack(data, at)[0]
            count = 0
        except struct.error:  # past the bytes read so far: string ``done`` starts at ``at``; read on
            count -= done
            head.reach(at + 8)
        except OverflowError:  # a length near 2**64 (no C offset)
            at = size + 1
            break
    if at > size:
        raise GGUFHeaderError(f"the file is truncated: its header runs past its end ({size} bytes)")
    return at


class _Parser:
    def __init__(self, head: _Head, size: int) -> None:
        self.head, self.size, self.at = head, size, 0

    def take(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        if self.at + n > self.size:
            raise GGUFHeaderError(f"the file is truncated: its header runs past its end ({self.size} bytes)")
        value = struct.unpack_from(fmt, self.head.reach(self.at + n), self.at)[0]
        self.at += n
        return value

    def skip(self, n: int) -> None:
        if n < 0 or self.at + n > self.size:
            raise GGUFHeaderError(f"the file is truncated: its header runs past its end ({self.size} bytes)")
        self.at += n

    def string(self) -> str:
        n = self.take("<Q")
        start = self.at
        self.skip(n)
        try:
            return bytes(self.head.reach(self.at)[start : self.at]).decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFHeaderError(f"a string at byte {start} is not UTF-8") from None

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise GGUFHeaderError(f"unknown metadata value type {kind} at byte {self.at}")
        item, count = self.take("<I"), self.take("<Q")
        if item in _SCALARS:
            self.skip(count * struct.calcsize(_SCALARS[item]))
        elif item == _STRING:
            self.at = _skip_strings(self.head, self.at, count, self.size)
        else:
            raise GGUFHeaderError(f"unsupported metadata array item type {item}")
        return None

    def header(self) -> GGUFHeader:
        if self.head.reach(4)[:4] != MAGIC:
            raise GGUFHeaderError("it does not start with the GGUF magic bytes")
        self.at = 4
        version = self.take("<I")
        if version not in (2, 3):
            raise GGUFHeaderError(f"GGUF version {version} (supported: 2 and 3)")
        n_tensors, n_kv = self.take("<Q"), self.take("<Q")
        if n_kv > self.size // 13 or n_tensors > self.size // 32:
            raise GGUFHeaderError("the header claims more entries than the file can hold")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self.string()
            value = self.value(self.take("<I"))
            if value is not None:
                metadata[key] = value
        tensors = [self.tensor_info() for _ in range(n_tensors)]
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0:
            raise GGUFHeaderError(f"bad general.alignment {alignment!r}")
        data_start = -(-self.at // alignment) * alignment
        header = GGUFHeader(version, metadata)
        for qtype, offset, nbytes in tensors:
            header.tensor_types[qtype.name] += 1
            header.data_end = max(header.data_end, data_start + offset + nbytes)
        if not tensors:
            raise GGUFHeaderError("the file holds no tensors")
        if header.data_end > self.size:
            raise GGUFHeaderError(
                f"the file is truncated: its tensors need {header.data_end} bytes but it has {self.size}"
            )
        return header

    def tensor_info(self) -> tuple[GGMLQuantizationType, int, int]:
        name = self.string()
        n_dims = self.take("<I")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise GGUFHeaderError(f"tensor {name!r} has {n_dims} dimensions")
        elements = 1
        for _ in range(n_dims):
            elements *= self.take("<Q")
        raw = self.take("<I")
        try:
            qtype = GGMLQuantizationType(raw)
        except ValueError:
            raise GGUFHeaderError(f"tensor {name!r} has unknown type {raw}") from None
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        return qtype, self.take("<Q"), elements // block * block_bytes
