"""Write another quantization of a GGUF file (for comparing quantizations with ``kld``).

Every quantized tensor is dequantized and quantized again to ``--type`` with gguf-py, the
reader and quantizer llama.cpp itself ships; float tensors (norms) and the metadata are
copied as they are (as gguf-py's ``gguf_new_metadata`` copies them). From a file that is
already quantized the result is a re-quantization of those weights, not of the original
float weights: what it measures is the difference between the two formats on the same
values.

    python -m tools.requantize IN.gguf OUT.gguf --type Q8_0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, Keys
from gguf.quants import dequantize, quantize

TARGETS = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")


def requantize(src: Path, dst: Path, target: str) -> dict[str, int]:
    """Write ``dst``; returns how many tensors were re-quantized and copied."""
    reader = GGUFReader(src)
    arch = reader.fields[Keys.General.ARCHITECTURE].contents()
    writer = GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    qtype = GGMLQuantizationType[target]
    tensors, counts = [], {"requantized": 0, "copied": 0}
    for t in reader.tensors:
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
            tensors.append((t.name, np.array(t.data), t.tensor_type))
            counts["copied"] += 1
            continue
        values = dequantize(t.data, t.tensor_type).astype(np.float32)
        tensors.append((t.name, quantize(values, qtype), qtype))
        counts["requantized"] += 1
    for name, data, kind in tensors:
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return counts


def requantized(src: Path, target: str, folder: Path) -> Path:
    """``src`` re-quantized to ``target`` as ``folder/<stem>-<target>.gguf``, written once (a
    draft model for the default one: bench figure 23, ``tools.draft_shot``)."""
    out = folder / f"{src.stem}-{target}.gguf"
    if not out.exists():
        folder.mkdir(parents=True, exist_ok=True)
        requantize(src, out, target)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.requantize", description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path)
    p.add_argument("target", type=Path)
    p.add_argument("--type", choices=TARGETS, default="Q8_0")
    args = p.parse_args(argv)
    counts = requantize(args.source, args.target, args.type)
    print(f"{args.target}: {counts['requantized']} tensors as {args.type}, {counts['copied']} copied", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
