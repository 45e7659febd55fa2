"""Models → Library… without Qt: the table's columns, what each cell says, how it sorts and
what its tooltip reads, the search, and the dialog's status line.

The rows are ``engine.library.LibraryEntry`` objects as ``scan_library()`` hands them out; this
module only words them, so the dialog and its tests share one wording.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.library.entry import human_size

if TYPE_CHECKING:
    from engine.library import LibraryEntry

SOURCE_WORDS = {
    "logitscope": "Logitscope",
    "huggingface": "Hugging Face",
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "folder": "Folder",
}
FORMAT_WORDS = {"mlx": "MLX", "gguf": "GGUF", "safetensors": "safetensors"}
UNKNOWN = "—"
SCANNING = "Scanning…"


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    tip: str


COLUMNS = (
    Column("name", "Name", "The repo id (Hugging Face), model:tag (Ollama), else the folder or file name"),
    Column("source", "Source", "Where it was found"),
    Column("format", "Format", "MLX, GGUF, or a transformers safetensors folder"),
    Column("architecture", "Architecture", "config.json's model_type, or the GGUF's general.architecture"),
    Column("quantization", "Quantization", "How its weights are stored, where it says"),
    Column("size", "Size", "On disk: weights and config"),
    Column("fits", "Fits", "Whether it fits in this machine's memory now (? where it cannot be estimated)"),
    Column("loadable", "Loadable / reason", "Whether Logitscope can load it, and why not"),
    Column("path", "Path", "Where it is (~ is your home folder): what Models → Open… or --model takes"),
)
COLUMN_KEYS = tuple(column.key for column in COLUMNS)


def fits_words(fits: bool | None) -> str:
    return UNKNOWN if fits is None else ("yes" if fits else "no")


def short_path(path: str, home: str | None = None) -> str:
    """``/Users/ada/.lmstudio/models/x`` -> ``~/.lmstudio/models/x``, as a Mac shows a home's
    paths: the column has room for what differs between models, not for the home folder."""
    home = os.path.expanduser("~") if home is None else home
    if home and home != os.sep and (path == home or path.startswith(home.rstrip(os.sep) + os.sep)):
        return "~" + path[len(home.rstrip(os.sep)) :]
    return path


def cell_text(entry: LibraryEntry, key: str) -> str:
    """What column ``key`` shows for ``entry`` (the whole path is in the row's tooltip)."""
    if key == "path":
        return short_path(entry.path)
    if key == "source":
        return SOURCE_WORDS.get(entry.source, entry.source)
    if key == "format":
        return FORMAT_WORDS.get(entry.format, entry.format)
    if key == "size":
        return human_size(entry.size_bytes)
    if key == "fits":
        return fits_words(entry.fits)
    if key == "loadable":
        return "yes" if entry.loadable else f"no: {entry.reason}"
    value = getattr(entry, key)
    return UNKNOWN if value is None else str(value)


def sort_key(entry: LibraryEntry, key: str) -> Any:
    """What column ``key`` sorts by: sizes by bytes, yes before no before unknown, the rest by
    their words without case (one type per column, so Qt compares like with like)."""
    if key == "size":
        return entry.size_bytes
    if key == "fits":
        return {True: 0, False: 1, None: 2}[entry.fits]
    if key == "loadable":
        return f"{0 if entry.loadable else 1} {entry.reason.lower()}"
    text = cell_text(entry, key)
    # Unknown values sort after every known one rather than first.
    return "\uffff" if text == UNKNOWN else text.lower()


def row_tooltip(entry: LibraryEntry) -> str:
    """A row's tooltip: why it cannot be loaded, else what a double-click does."""
    if not entry.loadable:
        return f"Cannot be loaded: {entry.reason}\n{entry.path}"
    return f"Double-click or Enter to load {entry.model_source}\n{entry.path}"


def searched_text(entry: LibraryEntry) -> str:
    """Everything the search field looks in: name, path, architecture, source and format, in
    the words shown and the library's own keys (``lmstudio`` finds LM Studio's too)."""
    fields = (
        entry.name,
        entry.path,
        entry.architecture or "",
        entry.source,
        SOURCE_WORDS.get(entry.source, ""),
        entry.format,
    )
    return "\n".join(fields).lower()


def matches(entry: LibraryEntry, query: str) -> bool:
    """Every word of ``query`` is somewhere in the entry's searched text (case ignored)."""
    text = searched_text(entry)
    return all(word in text for word in query.lower().split())


def summary(entries: Sequence[LibraryEntry], shown: int, seconds: float | None = None) -> str:
    """The status line once a scan is done: ``12 models (3 cannot be loaded), 5 shown``."""
    total = len(entries)
    if total == 0:
        return "No models found. Add a folder that holds some."
    words = f"{total} model{'s' if total != 1 else ''}"
    unloadable = sum(1 for entry in entries if not entry.loadable)
    if unloadable:
        words += f" ({unloadable} cannot be loaded)"
    if shown != total:
        words += f", {shown} shown"
    if seconds is not None:
        words += f" · scanned in {seconds:.2f} s"
    return words


def not_loadable_words(entry: LibraryEntry) -> str:
    """The status line after activating a row that cannot be loaded."""
    return f"{entry.name} cannot be loaded: {entry.reason}"
