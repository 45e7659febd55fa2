"""One model the library found on disk: where it is, what it is, whether the engine can load it."""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = ("logitscope", "huggingface", "lmstudio", "ollama", "folder")
FORMATS = ("mlx", "gguf", "safetensors")  # safetensors = a transformers folder (not MLX-converted)


@dataclass(frozen=True)
class LibraryEntry:
    source: str  # one of SOURCES
    name: str  # repo id (huggingface), "model:tag" (ollama), folder or file name otherwise
    path: str  # absolute path of the folder or file: what ``--model`` takes
    format: str  # one of FORMATS
    architecture: str | None  # config.json model_type, or GGUF general.architecture
    quantization: str | None  # "4-bit g64", "Q4_K_M", "bf16"; None when unknown
    size_bytes: int  # on disk (weights and config), from stat() only
    loadable: bool
    reason: str  # "" when loadable, else a sentence saying why not
    fits: bool | None  # whether it fits in memory now; None when it cannot be estimated

    def as_record(self) -> dict:
        """The JSON object ``python -m engine models --json`` prints: the fields in this order."""
        return {
            "source": self.source,
            "name": self.name,
            "path": self.path,
            "format": self.format,
            "architecture": self.architecture,
            "quantization": self.quantization,
            "size_bytes": self.size_bytes,
            "loadable": self.loadable,
            "reason": self.reason,
            "fits": self.fits,
        }

    @property
    def model_source(self) -> str:
        """What to hand to ``engine.models.load`` / ``--model``: a cached Hugging Face model by
        its repo id (it resolves to the cached snapshot offline), anything else by its path (as
        is one GGUF file of a cached repo that holds several)."""
        by_repo = self.source == "huggingface" and not self.path.lower().endswith(".gguf")
        return self.name if by_repo else self.path


def human_size(size: int) -> str:
    """``1536`` -> ``'1.5 KB'``: decimal units, as Finder and LM Studio show sizes (the
    library's table and ``python -m engine models`` say the same)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
