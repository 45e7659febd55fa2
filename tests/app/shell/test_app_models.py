"""Opening models of other architectures and cache kinds from the app, and a corrupt GGUF
refused through the app's own load path with the previous model kept."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402
from tests.support.tiny_archs import write_tiny_arch  # noqa: E402


def test_open_a_sliding_window_model_and_chat(qtbot, profile, tiny_folder, tmp_path):
    from app.views.about import about_text

    window = open_window(qtbot, profile, str(tiny_folder))
    folder = write_tiny_arch(tmp_path / "gemma", "gemma3_text")
    seen = []
    window.engine.worker.model_progressed.connect(lambda stage, fraction: seen.append((stage, fraction)))
    window.load_model(str(folder))
    qtbot.waitUntil(
        lambda: window.model_info is not None and window.model_info.architecture == "gemma3_text", timeout=TIMEOUT
    )
    assert window.model_info.cache_kinds == ("KVCache", "RotatingKVCache")
    assert seen and seen[-1][1] == 1.0
    assert "RotatingKVCache" in about_text(window.model_info)
    send(qtbot, window, "hello there, a reply longer than the window", SamplingParams(max_tokens=24))
    assert len(window.thread_messages[-1].branch.steps) >= 1
    close_window(window)


def test_a_corrupt_gguf_is_refused_in_a_dialog_and_the_model_stays(qtbot, profile, tiny_folder, tmp_path):
    window = open_window(qtbot, profile, str(tiny_folder))
    corrupt = tmp_path / "corrupt.gguf"
    # The magic then random bytes: MLX's own GGUF reader dies with a segfault on this.
    corrupt.write_bytes(b"GGUF" + np.random.default_rng(7).bytes(4096))
    window.load_model(str(corrupt))
    qtbot.waitUntil(lambda: bool(window.last_error), timeout=TIMEOUT)
    assert "corrupt.gguf" in window.last_error
    assert window.error_box.isVisible()
    assert window.model_info.name == "tiny-llama"
    window.error_box.close()
    send(qtbot, window, "still here?", SamplingParams(max_tokens=3))
    assert len(window.thread_messages[-1].branch.steps) == 3
    close_window(window)
