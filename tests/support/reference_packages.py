"""The tests' reference packages (PyTorch and accelerate), installed apart from the app's
environment, in its ``reference/`` folder (the Makefile's ``REFERENCE``): the app and the engine
start without torch, and the tests' own processes put the folder on their path here.

Appended, not prepended: a package the environment has itself (numpy, huggingface_hub) stays
the environment's. It must come before anything imports transformers, which decides once, at
its import, whether torch is there."""

from __future__ import annotations

import sys
from pathlib import Path

FOLDER = Path(sys.prefix) / "reference"


def use() -> bool:
    """Put the reference folder on this process's path (True when it is there to use)."""
    if not FOLDER.is_dir():
        return False
    if str(FOLDER) not in sys.path:
        sys.path.append(str(FOLDER))
    return True
