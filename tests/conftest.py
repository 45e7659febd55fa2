from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Converted models go to a per-run cache unless the caller chose one (to reuse across runs)."""
    if "LOGITSCOPE_CACHE_DIR" not in os.environ:
        os.environ["LOGITSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny(tiny_folder: Path):
    from engine.models import load

    return load(str(tiny_folder))


@pytest.fixture(scope="session")
def smollm():
    from engine.models import load

    return load("default")
