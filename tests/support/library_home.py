"""A home folder laid out like a Mac's where a user already has models, for the library's tests.

``build_mac_home(root)`` writes small real models (random weights, a few hundred KB at most)
where each program keeps them:

- the Hugging Face hub cache, ``~/.cache/huggingface/hub/models--<org>--<name>/`` exactly as
  huggingface_hub writes it: ``blobs/<etag>`` (sha256 for LFS files, the git blob sha1 for the
  rest), ``refs/main`` holding the commit, ``snapshots/<commit>/<file>`` linked to
  ``../../blobs/<etag>``: a 4-bit MLX model, a float16 transformers folder, an unknown model type;
- LM Studio, ``~/.lmstudio/models/<publisher>/<repo>/``: a GGUF (Q8_0), an MLX folder, a
  truncated GGUF and a GGUF of an architecture the converter does not take;
- Ollama, ``~/.ollama/models/manifests/registry.ollama.ai/library/<model>/<tag>`` (the registry's
  manifest JSON) and ``blobs/sha256-<hex>``: a model whose blob is a GGUF, one whose blob is missing;
- Logitscope's converted cache (``LOGITSCOPE_CACHE_DIR``): the LM Studio GGUF converted;
- ``~/Models``, a folder for the user to add: an MLX folder and a GGUF file.

``MacHome.expected`` says what the listing must report for each (``folder_expected`` once
``~/Models`` is added); ``MacHome.env`` points every scanner at the home (HOME, no HF_HOME).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

OLLAMA_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OLLAMA_CONFIG = "application/vnd.docker.container.image.v1+json"
OLLAMA_MODEL = "application/vnd.ollama.image.model"
OLLAMA_TEMPLATE = "application/vnd.ollama.image.template"
OLLAMA_PARAMS = "application/vnd.ollama.image.params"
Q8_0 = 7  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0


@dataclass(frozen=True)
class Expected:
    """What the listing must say about one model (reason: a part of the sentence)."""

    source: str
    name: str
    path: str
    format: str
    architecture: str | None
    quantization: str | None
    loadable: bool
    reason: str = ""


@dataclass
class MacHome:
    root: Path
    env: dict[str, str]
    hub: Path  # the Hugging Face hub cache
    lmstudio: Path  # LM Studio's models folder
    ollama: Path  # Ollama's models folder
    user_folder: Path  # ~/Models, for add_folder
    repo_ids: list[str] = field(default_factory=list)  # the loadable cached repos
    expected: list[Expected] = field(default_factory=list)
    folder_expected: list[Expected] = field(default_factory=list)

    def process_env(self) -> dict[str, str]:
        """os.environ without any variable that would point a scanner elsewhere, plus ``env``
        and HF_HUB_OFFLINE=1: for a subprocess."""
        skip = ("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "LOGITSCOPE_")
        base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        return base | self.env | {"HF_HUB_OFFLINE": "1"}

    def loadable_sources(self) -> list[str]:
        """Every ``--model`` the listing offers for a loadable model: the cached repo ids, the
        paths of the rest."""
        paths = [e.path for e in self.expected + self.folder_expected if e.loadable and e.source != "huggingface"]
        return paths + self.repo_ids


def build_mac_home(root: Path) -> MacHome:
    root.mkdir(parents=True, exist_ok=True)
    home = MacHome(
        root=root,
        env={"HOME": str(root), "LOGITSCOPE_CACHE_DIR": str(root / "Library" / "Caches" / "logitscope")},
        hub=root / ".cache" / "huggingface" / "hub",
        lmstudio=root / ".lmstudio" / "models",
        ollama=root / ".ollama" / "models",
        user_folder=root / "Models",
    )
    staging = root / ".staging"
    mlx4 = _mlx_4bit(staging / "mlx4")
    gguf = _gguf(staging / "tiny-llama-Q8_0.gguf")
    _huggingface(home, mlx4, staging)
    _lmstudio(home, mlx4, gguf)
    _ollama(home, gguf)
    _logitscope(home, home.lmstudio / "lmstudio-community" / "tiny-llama-GGUF" / gguf.name)
    _user_folder(home, staging)
    shutil.rmtree(staging)
    return home


def _huggingface(home: MacHome, mlx4: Path, staging: Path) -> None:
    from tests.support.tiny_model import write_tiny_model

    half = write_tiny_model(staging / "f16", dtype="float16")
    unknown = write_tiny_model(staging / "unknown")
    config = json.loads((unknown / "config.json").read_text()) | {"model_type": "whisper"}
    (unknown / "config.json").write_text(json.dumps(config))
    for repo, folder, fmt, quant, reason in (
        ("mlx-community/tiny-llama-4bit", mlx4, "mlx", "4-bit g64", ""),
        ("HuggingFaceTB/tiny-llama-f16", half, "safetensors", "f16", ""),
        ("openai/tiny-whisper", unknown, "safetensors", "f32", "mlx-lm has no model for model_type 'whisper'"),
    ):
        snapshot = write_hf_repo(home.hub, repo, folder)
        arch = "whisper" if reason else "llama"
        home.expected.append(Expected("huggingface", repo, str(snapshot), fmt, arch, quant, not reason, reason))
        if not reason:
            home.repo_ids.append(repo)


def write_hf_repo(hub: Path, repo_id: str, folder: Path, commit: str | None = None) -> Path:
    """``folder``'s files as huggingface_hub caches a download of ``repo_id``; the snapshot path."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for file in sorted(folder.iterdir()):
        data = file.read_bytes()
        if file.suffix == ".safetensors":  # an LFS file: its etag is the sha256
            etag = hashlib.sha256(data).hexdigest()
        else:  # a git file: the git blob id
            etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (repo / "blobs" / etag).write_bytes(data)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / etag)
    return snapshot


def _lmstudio(home: MacHome, mlx4: Path, gguf: Path) -> None:
    good = home.lmstudio / "lmstudio-community" / "tiny-llama-GGUF" / gguf.name
    good.parent.mkdir(parents=True)
    shutil.copy(gguf, good)
    name = "lmstudio-community/tiny-llama-GGUF/" + gguf.name
    home.expected.append(Expected("lmstudio", name, str(good), "gguf", "llama", "Q8_0", True))
    mlx = home.lmstudio / "mlx-community" / "tiny-llama-4bit"
    shutil.copytree(mlx4, mlx)
    home.expected.append(
        Expected("lmstudio", "mlx-community/tiny-llama-4bit", str(mlx), "mlx", "llama", "4-bit g64", True)
    )
    broken = home.lmstudio / "lmstudio-community" / "broken-GGUF" / "broken-Q8_0.gguf"
    broken.parent.mkdir(parents=True)
    data = gguf.read_bytes()
    broken.write_bytes(data[: len(data) // 2])  # an interrupted download
    name = "lmstudio-community/broken-GGUF/broken-Q8_0.gguf"
    home.expected.append(Expected("lmstudio", name, str(broken), "gguf", None, None, False, "truncated"))
    mamba = home.lmstudio / "second-state" / "tiny-mamba-GGUF" / "tiny-mamba-F32.gguf"
    mamba.parent.mkdir(parents=True)
    _unknown_arch_gguf(mamba)
    name = "second-state/tiny-mamba-GGUF/tiny-mamba-F32.gguf"
    reason = "does not take architecture 'mamba'"
    home.expected.append(Expected("lmstudio", name, str(mamba), "gguf", "mamba", "F32", False, reason))


def _ollama(home: MacHome, gguf: Path) -> None:
    blobs = home.ollama / "blobs"
    blobs.mkdir(parents=True)
    model_digest = _ollama_blob(blobs, gguf.read_bytes())
    template = _ollama_blob(blobs, b"{{ .Prompt }}")
    params = _ollama_blob(blobs, json.dumps({"stop": ["<|im_end|>"]}).encode())
    config = _ollama_blob(blobs, json.dumps({"model_format": "gguf", "model_family": "llama"}).encode())
    folder = home.ollama / "manifests" / "registry.ollama.ai" / "library" / "tinyllama"
    folder.mkdir(parents=True)
    layers = [
        {"mediaType": OLLAMA_MODEL, "digest": model_digest, "size": gguf.stat().st_size},
        {"mediaType": OLLAMA_TEMPLATE, "digest": template, "size": 13},
        {"mediaType": OLLAMA_PARAMS, "digest": params, "size": 1},
    ]
    manifest = {
        "schemaVersion": 2,
        "mediaType": OLLAMA_MANIFEST,
        "config": {"mediaType": OLLAMA_CONFIG, "digest": config, "size": 1},
        "layers": layers,
    }
    (folder / "latest").write_text(json.dumps(manifest))
    blob = blobs / model_digest.replace(":", "-")
    home.expected.append(Expected("ollama", "tinyllama:latest", str(blob), "gguf", "llama", "Q8_0", True))
    missing = "sha256:" + "0" * 64  # a pull that never finished: the manifest names a blob not there
    manifest["layers"] = [{"mediaType": OLLAMA_MODEL, "digest": missing, "size": 1}]
    (folder / "partial").write_text(json.dumps(manifest))
    path = str(blobs / missing.replace(":", "-"))
    home.expected.append(Expected("ollama", "tinyllama:partial", path, "gguf", None, None, False, "is missing"))


def _ollama_blob(blobs: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.replace(":", "-")).write_bytes(data)
    return digest


def _logitscope(home: MacHome, gguf: Path) -> None:
    """The GGUF as engine.models.load.converted_folder leaves it: ``<hash>-v<N>`` with source.json."""
    from engine.library.locations import CONVERTER_VERSION
    from engine.models.gguf_convert import convert_gguf
    from engine.models.load import file_hash

    target = Path(home.env["LOGITSCOPE_CACHE_DIR"]) / "models" / f"{file_hash(gguf)[:24]}-v{CONVERTER_VERSION}"
    target.mkdir(parents=True)
    convert_gguf(gguf, target)
    (target / "source.json").write_text(json.dumps({"gguf": str(gguf)}))
    home.expected.append(Expected("logitscope", gguf.stem, str(target), "mlx", "llama", "8-bit g32", True))


def _user_folder(home: MacHome, staging: Path) -> None:
    from tests.support.tiny_model import write_tiny_model

    mlx = shutil.copytree(staging / "mlx4", home.user_folder / "experiments" / "my-llama-4bit")
    home.folder_expected.append(Expected("folder", "my-llama-4bit", str(mlx), "mlx", "llama", "4-bit g64", True))
    plain = write_tiny_model(home.user_folder / "tiny-llama-f32")
    home.folder_expected.append(Expected("folder", "tiny-llama-f32", str(plain), "safetensors", "llama", "f32", True))


def _mlx_4bit(folder: Path) -> Path:
    """The tiny llama quantized to 4 bits (group 64) and saved as mlx_lm.convert saves it."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load, quantize_model, save_model

    from tests.support.tiny_model import write_tiny_model

    source = write_tiny_model(folder.parent / "mlx4-source")
    model, _tokenizer, config = load(str(source), return_config=True)
    model, config = quantize_model(model, config, group_size=64, bits=4)
    folder.mkdir(parents=True)
    save_model(folder, model)
    (folder / "model.safetensors.index.json").unlink(missing_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(config))
    assert any(name.endswith(".scales") for name, _ in tree_flatten(model.parameters()))
    return folder


def _gguf(path: Path) -> Path:
    """The tiny llama written as llama.cpp's converter would, its matrices in Q8_0."""
    from gguf import GGMLQuantizationType as T

    from tests.support.gguf_reference import bpe_vocab, random_model, write_model_gguf
    from tests.support.tiny_model import tiny_config

    vocab = bpe_vocab()
    config = tiny_config(len(vocab["tokens"]), context=256)
    model = random_model(config)
    layers = [f"blk.{i}.{t}.weight" for i in range(2) for t in ("attn_q", "attn_k", "attn_v", "attn_output")]
    layers += [f"blk.{i}.{t}.weight" for i in range(2) for t in ("ffn_gate", "ffn_up", "ffn_down")]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_model_gguf(path, "llama", model, config, vocab, {"general.file_type": Q8_0}, dict.fromkeys(layers, T.Q8_0))
    return path


def _unknown_arch_gguf(path: Path) -> None:
    """A well-formed GGUF of an architecture the converter does not map (one tensor is enough)."""
    import gguf
    import numpy as np

    from tests.support.gguf_reference import add_vocab, bpe_vocab

    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.add_file_type(0)  # ALL_F32
    add_vocab(writer, bpe_vocab())
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
