"""The app against a real ``mlx_lm.server`` (the tiny model, on 127.0.0.1, a free port):
connect through Models → "Connect to a server…", chat, the inspector's stage label and
"not reported" fields, a branch from a token, a live change and a compare run of two
settings. The faults run against a stand-in, not a real server: a vLLM look-alike
(``tests/engine/remote/test_remote_faults.py``'s handler) in a process of its own — a
refused connection, the stand-in killed mid-reply (the partial reply is kept and saved, the
app stays usable), a 400 and a server that ignores logprobs; each such test says
``standin`` in its name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
httpx = pytest.importorskip("httpx")

from PySide6.QtCore import Qt  # noqa: E402

from app.model.remote_labels import NOT_REPORTED, is_local_host, plain_http_warning  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_compare import compare_entry, set_variants  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402
from tests.support.local_server import free_port, stop, wait_ready  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402

STANDIN = """
import sys, threading
from http.server import ThreadingHTTPServer
from tests.engine.remote.test_remote_faults import _Handler
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Handler)
server.daemon_threads = True
server.requests = []
server.serve_forever()
"""


@pytest.fixture
def standin_process(tmp_path):
    """The faults tests' stand-in server (a vLLM look-alike) in a process of its own, so
    that it can be killed mid-reply."""
    port = free_port()
    log_path = tmp_path / "standin.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", STANDIN, str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log_path, limit=30)
        yield url, proc
    finally:
        if proc.poll() is None:
            stop(proc)


def connect(qtbot, window, url: str, model: str | None = None):
    """Models → Connect to a server…: the URL, "List models", pick, Connect."""
    dialog = window.open_connect_dialog()
    dialog.url.setText(url)
    dialog.key_kind.setCurrentIndex(0)  # no API key
    dialog.probe()
    qtbot.waitUntil(lambda: not dialog.probing, timeout=TIMEOUT)
    assert dialog.error.text() == "", dialog.error.text()
    assert dialog.model.count() >= 1
    if model is not None:
        dialog.model.setCurrentText(model)
    before = window.model_info
    dialog.accept()
    qtbot.waitUntil(lambda: window.model_info is not before or bool(window.last_error), timeout=TIMEOUT)
    return dialog


def replies(window):
    return [e for e in window.entries if e.role == "assistant"]


def test_plain_http_warning_only_for_other_hosts():
    for url in ("http://127.0.0.1:8080", "http://localhost:1234/v1", "http://[::1]:80", "127.0.0.5:9"):
        assert is_local_host(url) and plain_http_warning(url) == ""
    assert plain_http_warning("http://10.0.0.7:8000")
    assert plain_http_warning("gpu-box:8000")
    assert plain_http_warning("https://gpu-box:8000") == ""


def test_chat_inspector_branch_live_change_and_compare_on_mlx_lm_server(qtbot, profile, tiny_folder, tiny_server):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.backend == "local"
    dialog = connect(qtbot, window, tiny_server)
    assert "mlx_lm.server" in dialog.server_label.text()
    assert dialog.warning.isHidden()  # 127.0.0.1: no plain-http warning
    info = window.model_info
    assert info.backend == "remote" and info.server == "mlx_lm" and info.stage_detected
    assert "server reports: penalties (detected for mlx_lm.server)" in window.status.model_label.text()
    assert window.settings.value("model") != tiny_server  # a server is not remembered as "the model"

    # Chat: the reply's tokens come into the chat, the inspector shows the server's stage.
    greedy = SamplingParams(max_tokens=12, top_logprobs=5)
    send(qtbot, window, "hello there", greedy)
    assert not window.last_error, window.last_error
    (entry,) = replies(window)
    steps = entry.steps
    assert len(steps) >= 2 and all(s.chain == ("raw",) for s in steps)
    shown = window.chat.toPlainText()
    assert entry.text and all(word in shown for word in entry.text.split() if word.isprintable())
    window.select_token((entry.stream, 1))
    window._redraw_if_dirty()
    title = window.inspector.title.text()
    # One stage named, the steps' own (a greedy request: no penalties ran), and no "entering
    # temperature" where the step has no temperature stage.
    assert "server reports: raw (detected for mlx_lm.server; its numbers are after penalties" in title
    assert "penalties (detected" not in title and "only;" not in title and NOT_REPORTED in title
    assert "greedy: the most likely token" in title and "entering temperature" not in title
    assert "temperature stage" not in window.inspector.title.toolTip()
    header = window.inspector.chain_view.chain_model.headerData(0, Qt.Orientation.Horizontal)
    assert header.startswith("raw (server)") and NOT_REPORTED in header
    assert "memory 0" not in window.status.memory_label.text()

    # Branch: continue from token 1 with another candidate.
    step = steps[1]
    other = next(c for c in step.top if c.token_id != step.token_id)
    window.pick_token(other.token_id)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    message = window.thread_messages[-1]
    assert len(message.branches) == 2
    branch = message.branches[-1]
    assert branch.steps[0].token_id == steps[0].token_id and branch.steps[1].forced
    assert branch.steps[1].text == other.text and len(branch.steps) > 2

    # A live change: the reply is restarted from the text so far with the new settings.
    window.controls.set_params(SamplingParams(max_tokens=200, top_logprobs=3))
    window.composer.setPlainText("tell me more")
    window.send()
    assert window.busy()
    changed = SamplingParams(max_tokens=5, top_logprobs=3)
    window.commands.params_changed(0, changed)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    last = window.thread_messages[-1].branches[-1]
    # Ended by the new max_tokens (not by the old 200, nor by an end of text): at 5 tokens, or
    # where the change landed when the server had already sent more (a loaded machine: the
    # stream runs in the server's process while this one waits for a core).
    assert last.steps and last.finish_reason == "length" and len(last.steps) < 200
    if len(last.steps) <= 5:
        assert last.steps[-1].params.max_tokens == 5

    # Compare: two settings, two streams, no divergence curve remotely.
    set_variants(window, [greedy, greedy.with_changes(temperature=0.8, seed=3)])
    window.composer.setPlainText("and then?")
    window.send()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    run = compare_entry(window)
    assert len(run.columns) == 2 and all(len(c.steps) >= 1 for c in run.columns)
    assert run.columns[1].steps[0].params.temperature == 0.8
    close_window(window)


def test_refused_connection_and_a_standin_server_killed_mid_reply(qtbot, profile, tiny_folder, standin_process):
    url, proc = standin_process
    window = open_window(qtbot, profile, str(tiny_folder))
    # Refused: the dialog says so, the local model stays.
    dialog = window.open_connect_dialog()
    dialog.url.setText(f"http://127.0.0.1:{free_port()}")
    dialog.probe()
    qtbot.waitUntil(lambda: not dialog.probing, timeout=TIMEOUT)
    assert "Could not list the server's models" in dialog.error.text()
    dialog.model.setCurrentText("x")
    dialog.accept()
    qtbot.waitUntil(lambda: bool(window.last_error), timeout=TIMEOUT)
    assert "Could not load" in window.last_error and window.model_info.backend == "local"
    window.error_box.close()
    window.last_error = ""

    # A server killed mid-reply: the tokens that came are kept and saved, the app goes on.
    connect(qtbot, window, url, model="slow")
    assert window.model_info.server == "vllm" and window.model_info.reported_stage == "raw"
    send(qtbot, window, "hi", SamplingParams(max_tokens=200, top_logprobs=2), wait=False)
    qtbot.waitUntil(lambda: any(len(r.steps) >= 3 for r in window.model.replies.values()), timeout=TIMEOUT)
    proc.kill()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert "The server failed" in window.last_error and "kept and saved" in window.last_error
    branch = window.thread_messages[-1].branches[-1]
    assert branch.finish_reason == "error" and branch.text.startswith(" t0 t1 t2")
    saved = window.store.reads.conversations()
    assert saved
    # Still usable: back to the local model, and a reply.
    window.error_box.close()
    window.last_error = ""
    window.load_model(str(tiny_folder))
    qtbot.waitUntil(lambda: window.model_info.backend == "local" or bool(window.last_error), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    send(qtbot, window, "hello", SamplingParams(max_tokens=4))
    assert not window.last_error and replies(window)[-1].steps
    close_window(window)


def test_a_400_and_a_standin_that_ignores_logprobs_show_the_reason(qtbot, profile, tiny_folder, standin_process):
    url, _ = standin_process
    window = open_window(qtbot, profile, str(tiny_folder))
    connect(qtbot, window, url, model="bad")
    send(qtbot, window, "hi", SamplingParams(max_tokens=4, top_logprobs=2))
    assert "The server failed" in window.last_error and "top_logprobs must be at most 20" in window.last_error
    window.error_box.close()
    window.last_error = ""
    connect(qtbot, window, url, model="nolog")
    send(qtbot, window, "hi again", SamplingParams(max_tokens=4, top_logprobs=2))
    assert "The server failed" in window.last_error and "logprobs" in window.last_error
    window.error_box.close()
    window.last_error = ""
    connect(qtbot, window, url, model="ok")  # and the app goes on
    send(qtbot, window, "once more", SamplingParams(max_tokens=4, top_logprobs=2))
    entry = replies(window)[-1]
    assert not window.last_error and len(entry.steps) == 4
    assert all(s.token_id is None for s in entry.steps)  # vLLM sends no token ids: not reported
    # A branch where the server sends no ids: the picked candidate's text is sent.
    window.select_token((entry.stream, 1))
    window._redraw_if_dirty()
    row = next(i for i, c in enumerate(window.inspector.candidates) if c.text == " x")
    window.inspector._pick_row(row)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    branch = window.thread_messages[-1].branches[-1]
    assert [s.text for s in branch.steps[:2]] == [" t0", " x"] and branch.steps[1].forced
    assert branch.steps[1].token_id is None  # not reported, and still a branch (not a new reply)
    # The stand-in continues from the " t"s of the text it is sent: " t0 x" has one.
    assert [s.text for s in branch.steps[2:]] == [" t1", " t2"]
    close_window(window)


def test_the_api_key_comes_from_the_environment_and_is_never_saved_with_a_standin(
    qtbot,
    profile,
    tiny_folder,
    standin_process,
    monkeypatch,
):
    from app.model import keys

    url, _ = standin_process
    secret = "sk-never-saved-0123456789"
    monkeypatch.setenv("LOGITSCOPE_TEST_KEY", secret)
    assert keys.read_key(keys.KeySource(keys.ENV, "LOGITSCOPE_TEST_KEY")) == secret
    with pytest.raises(keys.KeyUnavailable, match="not set"):
        keys.read_key(keys.KeySource(keys.ENV, "LOGITSCOPE_UNSET_KEY"))
    window = open_window(qtbot, profile, str(tiny_folder))
    dialog = window.open_connect_dialog()
    ok, _ = keys.keychain_status()
    if not ok:  # no keychain backend here: the choice is greyed out and the dialog says so
        assert not dialog.key_kind.model().item(2).isEnabled()
        assert "environment variable" in dialog.keychain_note
    dialog.url.setText(url)
    dialog.key_kind.setCurrentIndex(dialog.key_kind.findData(keys.ENV))
    dialog.env_name.setText("LOGITSCOPE_TEST_KEY")
    spec = dialog.spec()
    assert spec.api_key == secret and secret not in repr(spec)
    dialog.model.setCurrentText("ok")
    dialog.accept()
    qtbot.waitUntil(lambda: window.model_info.backend == "remote", timeout=TIMEOUT)
    send(qtbot, window, "hi", SamplingParams(max_tokens=3, top_logprobs=2))
    assert not window.last_error
    close_window(window)
    db, settings = profile
    settings.sync()
    assert settings.value("remote/key_env") == "LOGITSCOPE_TEST_KEY"
    for path in (Path(settings.fileName()), *Path(db).parent.glob("db.sqlite3*")):
        assert secret.encode() not in path.read_bytes(), path
