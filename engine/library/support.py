"""What ``engine.models.load`` takes, decided without importing MLX or mlx-lm.

- a GGUF file: an architecture the converter maps (``engine.library.convertible.ARCHITECTURES``), every
  tensor in a type it converts (``engine.library.convertible.SUPPORTED``) and a tokenizer it builds
  (``engine.library.convertible.TOKENIZER_MODELS``);
- a folder: a ``model_type`` mlx-lm has a module for (its ``models/`` folder, found with
  ``importlib.util.find_spec`` without importing the package, and its ``MODEL_REMAPPING``
  read from the source), and safetensors weights named as mlx-lm looks for them.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path

from engine.library.convertible import ARCHITECTURES, SUPPORTED, TOKENIZER_MODELS

GGUF_TYPES = frozenset(t.name for t in SUPPORTED)


def gguf_problem(architecture: str | None, tensor_types: set[str], tokenizer: object) -> str:
    """Why the converter would refuse a GGUF with this header; "" when it takes it."""
    if architecture not in ARCHITECTURES:
        return f"the GGUF converter does not take architecture {architecture!r} (it takes {', '.join(ARCHITECTURES)})"
    other = sorted(tensor_types - GGUF_TYPES)
    if other:
        return f"tensor types {', '.join(other)} are not converted (supported: {', '.join(sorted(GGUF_TYPES))})"
    if tokenizer not in TOKENIZER_MODELS:
        return f"tokenizer model {tokenizer!r} is not converted (supported: {', '.join(TOKENIZER_MODELS)})"
    return ""


@lru_cache(maxsize=1)
def _mlx_lm_folder() -> Path | None:
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def mlx_lm_model_types() -> frozenset[str]:
    """The model types mlx-lm has a module for (``mlx_lm/models/<type>.py``)."""
    folder = _mlx_lm_folder()
    if folder is None:
        return frozenset()
    return frozenset(p.stem for p in (folder / "models").glob("*.py") if not p.stem.startswith("_"))


@lru_cache(maxsize=1)
def _remapping() -> dict[str, str]:
    """mlx-lm's ``MODEL_REMAPPING`` (``mistral`` -> ``llama``...), read from utils.py's source."""
    folder = _mlx_lm_folder()
    try:
        tree = ast.parse((folder / "utils.py").read_text(encoding="utf-8")) if folder else None
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body if tree else ():
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id == "MODEL_REMAPPING":
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def model_type_problem(model_type: object) -> str:
    """Why mlx-lm would refuse a folder with this ``model_type``; "" when it has a module."""
    if not isinstance(model_type, str) or not model_type:
        return "config.json names no model_type"
    known = mlx_lm_model_types()
    if not known:
        return "mlx-lm is not installed"
    if _remapping().get(model_type, model_type) not in known:
        return f"mlx-lm has no model for model_type {model_type!r}"
    return ""
