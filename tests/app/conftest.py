"""Fixtures the app's tests share: models written for one kind of test, a panel on its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture
def controls(qtbot, tmp_path):
    """The sampling panel on its own, with settings in a fresh file."""
    from PySide6.QtCore import QSettings

    from app.views.controls import SamplingControls

    widget = SamplingControls(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(widget)
    return widget


@pytest.fixture
def timeline(qtbot):
    """The timeline on its own, light, 1400×200 (its default height), shown."""
    from app.views.theme import LIGHT
    from app.views.timeline import TimelineWidget

    widget = TimelineWidget()
    qtbot.addWidget(widget)
    widget.set_colors(LIGHT)
    widget.resize(1400, 200)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture(scope="module")
def long_context_folder(tmp_path_factory):
    """The tiny model with a 64k context, so a prompt can take many seconds to prefill."""
    from tests.support.tiny_model import write_tiny_model

    folder = write_tiny_model(tmp_path_factory.mktemp("long") / "tiny-long")
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 65536
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def long_tiny(tiny_folder, tmp_path):
    """The tiny model with a long context, so a reply can run for a while."""
    folder = tmp_path / "tiny-long"
    shutil.copytree(tiny_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 32768
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-style model that thinks (``<think>`` … ``</think>``)."""
    from tests.support.tiny_thinking import write_thinking_qwen3

    return write_thinking_qwen3(tmp_path_factory.mktemp("qwen3-app") / "tiny-qwen3")
