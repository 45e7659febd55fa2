"""Every model load failure and every server error the user is shown is in the app's log too
(Help → Show log): a malformed model file, a server that cannot be asked for its models, and
a real ``mlx_lm.server`` refusing a request (the tiny model, offscreen)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.integration.test_app_remote import connect  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402
from tests.support.local_server import free_port, mlx_lm_server  # noqa: E402


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    from app.shell.startup import logging_setup

    monkeypatch.setenv("LOGITSCOPE_LOG_DIR", str(tmp_path / "logs"))
    path = logging_setup.install("the tiny model")
    yield path
    logging_setup.uninstall()


def one_line(message: str) -> str:
    """A message as the log holds it: its lines folded into one."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def test_a_failed_load_is_in_the_log_with_its_reason(qtbot, profile, tiny_folder, tmp_path, log_file):
    window = open_window(qtbot, profile, str(tiny_folder))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(4096))  # a GGUF header, then nothing a reader can use
    window.load_model(str(broken))
    qtbot.waitUntil(lambda: bool(window.last_error), timeout=TIMEOUT)
    shown = window.last_error
    assert f"Could not load {broken}" in shown
    text = log_file.read_text()
    assert one_line(shown) in text  # the words of the dialog, reason included
    after = text[text.index(one_line(shown)) :]
    assert "Traceback (most recent call last)" in after  # and where it failed
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    next(a for a in help_menu.actions() if a.text() == "Show log").trigger()
    assert one_line(shown) in window.window_actions.log_dialog.view.toPlainText()
    window.window_actions.log_dialog.close()
    window.error_box.close()
    close_window(window)


def test_server_errors_are_in_the_log(qtbot, profile, tiny_folder, tmp_path, log_file):
    window = open_window(qtbot, profile, str(tiny_folder))
    # Nobody listens there: the dialog says it could not list the models; so does the log.
    dialog = window.open_connect_dialog()
    nowhere = f"http://127.0.0.1:{free_port()}"
    dialog.url.setText(nowhere)
    dialog.probe()
    qtbot.waitUntil(lambda: not dialog.probing, timeout=TIMEOUT)
    said = dialog.error.text()
    assert said.startswith("Could not list the server's models")
    assert f"{nowhere}: {one_line(said)}" in log_file.read_text()
    dialog.reject()

    # A real mlx_lm.server on a fresh hub folder that lists a model it cannot load: asked for
    # it, the server answers 404 with its reason.
    broken_model(tmp_path / "server" / "hf-hub", "local/broken")
    with mlx_lm_server(Path(tiny_folder), tmp_path / "server") as url:
        connect(qtbot, window, url, model="local/broken")
        assert window.model_info.backend == "remote", window.last_error
        send(qtbot, window, "hello", SamplingParams(max_tokens=3, top_logprobs=2))
        shown = window.last_error
        assert shown.startswith("The server failed: the server answered 404"), shown
        text = log_file.read_text()
        assert one_line(shown) in text
        assert f"server {url} (model local/broken) failed a reply" in text
        window.error_box.close()
        close_window(window)


def broken_model(hub: Path, repo: str) -> None:
    """A model in the Hugging Face cache layout that mlx_lm.server lists (it has the three
    files it looks for) but cannot load (they hold no model)."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors.index.json", "tokenizer_config.json"):
        (snapshot / name).write_text("{}")
