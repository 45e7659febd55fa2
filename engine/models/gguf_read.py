"""Read a GGUF file with gguf-py, checking every count, length and offset against the file first.

gguf-py's ``GGUFReader`` is llama.cpp's own reader, but it trusts the file: a
short read silently yields a shorter array, a header claiming 2**60 metadata
entries or array items loops (and allocates) until memory runs out, and a
bad type or a duplicate key surfaces as whatever numpy or ``enum`` raises.
``_CheckedReader`` keeps gguf-py's parsing and adds the checks:

- every read is bounds-checked against the file size before it happens;
- a count (metadata entries, array items, tensors) is compared with the bytes
  left in the file before any loop or allocation it would drive;
- every tensor's type, dimensions, element count, byte size and offset
  (aligned, inside the file, not overlapping another tensor) are validated
  before gguf-py builds its views, and no tensor data is read here at all.

``read_gguf`` turns anything that goes wrong into a ``ModelLoadError`` naming
the file and the problem. Nothing here hands the file to MLX.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType

from engine.api.errors import ModelLoadError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 50  # far beyond any real tensor, far below int64 overflow
_HEADER = 4 + 4 + 8 + 8  # magic, version, tensor count, metadata count
_MIN_KV = 8 + 4 + 1  # key length, value type, one byte of value
_MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset
_STRING = int(GGUFValueType.STRING)
_ARRAY = int(GGUFValueType.ARRAY)
_VALUE_TYPES = {int(t) for t in GGUFValueType}


class GGUFFormatError(ValueError):
    """The file breaks the GGUF format; the message says where and how."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order: outermost first, e.g. (rows, columns)
    data: np.ndarray  # a read-only view of the file: values for F32/F16, raw bytes otherwise

    @property
    def type_name(self) -> str:
        return self.qtype.name


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, Any]  # plain Python values: str, int, float, bool, lists of them
    tensors: dict[str, GGUFTensor]


class _CheckedReader(GGUFReader):
    """gguf-py's reader with every read and count checked against the file size."""

    def _get(self, offset, dtype, count=1, override_order=None):
        plain = self.__dict__.get("_plain")
        if plain is None:  # a plain ndarray view: slicing a np.memmap is several times slower
            plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
        offset, count = int(offset), int(count)
        dt = np.dtype(dtype)
        end = offset + dt.itemsize * count
        if offset < 0 or count < 0 or end > plain.shape[0]:
            raise GGUFFormatError(
                f"a read of {count} x {dt.itemsize} bytes at byte {offset} runs past the end of the file "
                f"({plain.shape[0]} bytes)"
            )
        arr = plain[offset:end].view(dt)
        order = self.byte_order if override_order is None else override_order
        return arr if order == "I" else arr.view(arr.dtype.newbyteorder(order))

    def _room(self, offset: int) -> int:
        return int(self.data.shape[0]) - int(offset)

    def _build_fields(self, offs, count):
        if self.byte_order != "I":
            raise GGUFFormatError("the file is in the other byte order (big-endian GGUF is not supported)")
        count = int(count)
        if count > self._room(offs) // _MIN_KV:
            raise GGUFFormatError(f"the header claims {count} metadata entries, more than the file can hold")
        return super()._build_fields(offs, count)

    def _build_tensor_info(self, offs, count):
        count = int(count)
        if count > self._room(offs) // _MIN_TENSOR_INFO:
            raise GGUFFormatError(f"the header claims {count} tensors, more than the file can hold")
        return super()._build_tensor_info(offs, count)

    def _get_field_parts(self, orig_offs, raw_type):
        raw_type = int(raw_type)
        if raw_type not in _VALUE_TYPES:
            raise GGUFFormatError(f"unknown metadata value type {raw_type} at byte {orig_offs}")
        if raw_type != _ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        length = self._get(orig_offs + 4, np.uint64)
        item_type, count = int(raw_itype[0]), int(length[0])
        if item_type not in _VALUE_TYPES:
            raise GGUFFormatError(f"unknown metadata array item type {item_type} at byte {orig_offs}")
        if item_type == _ARRAY:
            raise GGUFFormatError(f"nested metadata arrays are not supported (byte {orig_offs})")
        scalar = self.gguf_scalar_to_np.get(GGUFValueType(item_type))
        smallest = 8 if scalar is None else np.dtype(scalar).itemsize  # a string is at least its length
        if count > self._room(orig_offs + 12) // smallest:
            raise GGUFFormatError(f"an array at byte {orig_offs} claims {count} items, more than the file holds")
        if scalar is None:
            return super()._get_field_parts(orig_offs, raw_type)
        # Numbers: one view for the whole array instead of one per item (49,152 token types
        # otherwise cost a second). ReaderField.contents() flattens it the same way.
        values = self._get(orig_offs + 12, scalar, count)
        types = [GGUFValueType.ARRAY] + ([GGUFValueType(item_type)] if count else [])
        return 12 + int(values.nbytes), [raw_itype, length, values], [2] if count else [], types

    def _build_tensors(self, start_offs, fields):
        spans = [_check_tensor_info(field, int(start_offs), int(self.alignment), self._room(0)) for field in fields]
        spans.sort()
        for (_, end, name), (next_start, _end, next_name) in zip(spans, spans[1:], strict=False):
            if next_start < end:
                raise GGUFFormatError(f"tensors {name!r} and {next_name!r} overlap")
        return super()._build_tensors(start_offs, fields)


def _check_tensor_info(field: Any, data_start: int, alignment: int, file_size: int) -> tuple[int, int, str]:
    """Validate one tensor-table entry; return (first byte, end, name)."""
    _name_len, name_data, n_dims, dims, raw_type, offset = field.parts
    name = bytes(name_data).decode("utf-8", errors="replace")
    n = int(n_dims[0])
    if not 1 <= n <= MAX_DIMS:
        raise GGUFFormatError(f"tensor {name!r} has {n} dimensions (1 to {MAX_DIMS} allowed)")
    shape = [int(d) for d in dims]
    elements = 1
    for d in shape:
        if d < 1:
            raise GGUFFormatError(f"tensor {name!r} has an empty dimension {shape}")
        elements *= d
        if elements > MAX_ELEMENTS:
            raise GGUFFormatError(f"tensor {name!r} claims too many elements {shape}")
    try:
        qtype = GGMLQuantizationType(int(raw_type[0]))
    except ValueError:
        raise GGUFFormatError(f"tensor {name!r} has unknown type {int(raw_type[0])}") from None
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    if shape[0] % block:
        raise GGUFFormatError(f"tensor {name!r}: row length {shape[0]} is not a multiple of {qtype.name}'s {block}")
    rel = int(offset[0])
    if rel % alignment:
        raise GGUFFormatError(f"tensor {name!r}: offset {rel} is not aligned to {alignment} bytes")
    start = data_start + rel
    end = start + elements // block * block_bytes
    if end > file_size:
        raise GGUFFormatError(
            f"tensor {name!r} ({qtype.name} {shape}) needs bytes {start}..{end} but the file has {file_size}"
        )
    return start, end, name


def _check_start(path: Path) -> None:
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(_HEADER)
    except OSError as exc:
        raise ModelLoadError(path, f"cannot read the file ({exc.strerror or exc})") from None
    if head[:4] != MAGIC:
        raise ModelLoadError(path, "not a readable GGUF file (it does not start with the GGUF magic bytes)")
    if size < _HEADER:
        raise ModelLoadError(path, f"not a readable GGUF file (only {size} bytes, shorter than a GGUF header)")
    version = int.from_bytes(head[4:8], "little")
    if version & 0xFFFF == 0 and version:
        raise ModelLoadError(path, "not a readable GGUF file (big-endian GGUF files are not supported)")
    if version not in VERSIONS:
        raise ModelLoadError(path, f"not a readable GGUF file (GGUF version {version}; supported: 2 and 3)")


def _metadata(reader: GGUFReader) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            metadata[key] = field.contents()
        except UnicodeDecodeError:
            raise GGUFFormatError(f"metadata {key!r} is not valid UTF-8") from None
    return metadata


def read_gguf(path: Path) -> GGUFFile:
    """Parse and validate ``path``; tensor data stays unread (views of a memory map)."""
    path = Path(path)
    _check_start(path)
    try:
        reader = _CheckedReader(str(path), "r")
        version = int(reader.fields["GGUF.version"].parts[0][0])
        metadata = _metadata(reader)
        tensors = {
            t.name: GGUFTensor(t.name, t.tensor_type, tuple(int(d) for d in reversed(t.shape.tolist())), t.data)
            for t in reader.tensors
        }
    except ModelLoadError:
        raise
    except OSError as exc:
        raise ModelLoadError(path, f"cannot read the file ({exc.strerror or exc})") from None
    except GGUFFormatError as exc:
        raise ModelLoadError(path, f"not a readable GGUF file ({exc})") from None
    except UnicodeDecodeError:
        raise ModelLoadError(path, "not a readable GGUF file (a metadata key or tensor name is not UTF-8)") from None
    except MemoryError:
        raise ModelLoadError(path, "not a readable GGUF file (its header asks for more memory than there is)") from None
    except RecursionError:
        raise ModelLoadError(path, "not a readable GGUF file (nested too deeply)") from None
    except Exception as exc:  # gguf-py's own checks: KeyError on duplicates, ValueError, struct and numpy errors
        detail = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise ModelLoadError(path, f"not a readable GGUF file ({type(exc).__name__}: {detail})") from None
    if not tensors:
        raise ModelLoadError(path, "the GGUF file holds no tensors")
    return GGUFFile(path, version, metadata, tensors)
