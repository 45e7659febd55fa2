"""A model of the default model's shape with random weights, for a machine without its file.

``python -m bench.gpu_model CONFIG_FOLDER OUT_FOLDER`` writes a SmolLM2-135M-shaped llama
(the ``config.json`` in CONFIG_FOLDER: 30 layers, hidden 576, its mixed 4- and 8-bit
quantization) with random weights, and the tokenizer beside it, into OUT_FOLDER. A decode
step of it runs exactly the kernels the real model's does (the same shapes, dtypes and
quantization), so its speed is the default model's; its text is noise. The GPU machine
this project borrows takes 64 MiB a call and the real file is 98 MB: ``bench/gpu_run.sh``
builds this there from the config and tokenizer (3.5 MB), and points ``bench`` at it.
"""

from __future__ import annotations

import json
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
    from mlx_lm.models import llama

    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((config_folder / "config.json").read_text())
    model = llama.Model(llama.ModelArgs.from_dict(config))
    quantization = config.get("quantization")
    if quantization:
        # Each layer as the real file has it (the embedding in 8 bits, the rest in 4).
        def how(path: str, module: nn.Module):
            if not hasattr(module, "to_quantized"):
                return False
            own = quantization.get(path, quantization)
            return {"group_size": own["group_size"], "bits": own["bits"]}

        nn.quantize(model, class_predicate=how)
    mx.eval(model.parameters())
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    for name in FILES:
        if (config_folder / name).exists():
            shutil.copy(config_folder / name, out / name)
    return out


if __name__ == "__main__":
    print(shaped_like(Path(sys.argv[1]), Path(sys.argv[2])))
