"""The model library: every model already on disk (Logitscope's converted cache, the Hugging Face
hub cache, LM Studio, Ollama, folders the user adds), described from headers and stat() alone.

Qt-free and MLX-free (the app lists models on its GUI thread): nothing here imports mlx or
mlx_lm. The command is ``python -m engine models`` (engine.cli.models, docs/ENGINE.md).
"""

from engine.library.entry import FORMATS, SOURCES, LibraryEntry
from engine.library.folders import add_folder, added_folders, remove_folder
from engine.library.scan import scan_library

__all__ = ["FORMATS", "SOURCES", "LibraryEntry", "add_folder", "added_folders", "remove_folder", "scan_library"]
