"""A model of a real model's shape with random weights, for a machine without its file.

``python -m bench.gpu_model CONFIG_FOLDER OUT_FOLDER`` writes a model of the architecture,
shape and mixed quantization the ``config.json`` in CONFIG_FOLDER describes (the default
model's: a llama of 30 layers, hidden 576, 4 and 8 bits; Gemma 3 270M's as the engine
converts its GGUF: 18 layers, V = 262,144, 4, 5 and 8 bits, float32 elsewhere) with random
weights, and the tokenizer beside it (``tokenizer.json.xz`` is unpacked), into OUT_FOLDER.
A decode step of it runs exactly the kernels the real model's does (the same shapes, dtypes
and quantization), so its speed is the real model's; its text is noise. The GPU machine
this project borrows takes 64 MiB a call and the real files are 98 and 280 MB:
``bench/gpu_run.sh`` builds these there from the configs and tokenizers (7 MB in all), and
points ``bench`` at them (``LOGITSCOPE_BENCH_DEFAULT``, ``LOGITSCOPE_BENCH_GEMMA``).
"""

from __future__ import annotations

import importlib
import json
import lzma
import shutil
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def shaped_like(config_folder: Path, out: Path) -> Path:
    """Write the random model into ``out`` (once) and return it."""
    if (out / "model.safetensors").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((config_folder / "config.json").read_text())
    architecture = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = architecture.Model(architecture.ModelArgs.from_dict(config))
    quantization = config.get("quantization")
    if quantization:
        # Each layer as the real file has it: the engine's conversion lists every quantized
        # layer with its bits (the default model's embedding in 8, the rest in 4; Gemma's in
        # 4, 5 and 8, a few left in float).
        def how(path: str, module: nn.Module):
            own = quantization.get(path)
            if not hasattr(module, "to_quantized") or not isinstance(own, dict):
                return False
            return {"group_size": own["group_size"], "bits": own["bits"]}

        nn.quantize(model, class_predicate=how)
    mx.eval(model.parameters())
    weights = dict(tree_flatten(model.parameters()))
    if config.get("tie_word_embeddings"):
        # Gemma's class makes an output layer and drops it only when the file has none: the
        # real model reads its logits through the (quantized) embedding.
        weights = {name: value for name, value in weights.items() if not name.startswith("lm_head.")}
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    for name in FILES:
        if (config_folder / name).exists():
            shutil.copy(config_folder / name, out / name)
        elif (config_folder / f"{name}.xz").exists():
            (out / name).write_bytes(lzma.decompress((config_folder / f"{name}.xz").read_bytes()))
    return out


if __name__ == "__main__":
    print(shaped_like(Path(sys.argv[1]), Path(sys.argv[2])))
