"""Small confusions a new user met (issue 24, points 12, 13, 15 and 20): the welcome's words
after a new chat, where file dialogs open, telling conversations with the same title apart,
and where a model's loading progress shows. Keys go to the focused widget, as a person's
would; file dialogs are Qt's own, answered by typing a path into them."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QDir, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402
from tests.support.paths import ROOT

QUESTION_WORDS = "press Enter to send the question below"
EMPTY_WORDS = "type a message below and press Enter to send it"


def press(qtbot, key, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    target = QApplication.focusWidget()
    assert target is not None, "no widget has the keyboard focus"
    qtbot.keyClick(target, key, modifier)


def shown_text(window) -> str:
    window._redraw_if_dirty()
    return window.chat.toPlainText()


# 12. The welcome after Ctrl+N ---------------------------------------------------------------------


def test_the_welcome_speaks_of_a_question_only_while_one_is_in_the_box(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer)
    assert window.composer.toPlainText()  # the first question, typed in already
    assert QUESTION_WORDS in shown_text(window)
    window.controls.set_params(SamplingParams(max_tokens=2))
    press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    press(qtbot, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # a new chat: the box is empty
    assert window.model.conversation is None and window.composer.toPlainText() == ""
    text = shown_text(window)
    assert "question" not in text.splitlines()[-1] and EMPTY_WORDS in text, text.splitlines()[-1]
    qtbot.keyClicks(QApplication.focusWidget(), "Why is the sky blue?")
    assert QUESTION_WORDS in shown_text(window)
    press(qtbot, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    press(qtbot, Qt.Key.Key_Delete)
    assert EMPTY_WORDS in shown_text(window)
    close_window(window)


# 13. File dialogs open where the last one of their kind was answered, after a restart too ---------


def answer_file_dialog(path: str | None) -> list[str]:
    """Answer the next file dialog with ``path`` (None: cancel it); returns, once it has been
    answered, the folder it opened in."""
    opened: list[str] = []

    def answer() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QFileDialog):
            QTimer.singleShot(20, answer)  # not shown yet
            return
        opened.append(dialog.directory().absolutePath())
        if path is None:
            dialog.reject()
            return
        dialog.selectFile(path)
        dialog.accept()

    QTimer.singleShot(0, answer)
    return opened


def trigger(window, *titles: str) -> None:
    """Choose a menu item by its titles (``"File", "Export", "This reply…"``), as a click would."""
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == titles[0])
    for title in titles[1:-1]:
        menu = next(a.menu() for a in menu.actions() if a.text() == title)
    next(a for a in menu.actions() if a.text() == titles[-1]).trigger()


def test_file_dialogs_open_in_the_last_folder_of_their_kind_after_a_restart(
    qtbot,
    profile,
    tiny_folder,
    tmp_path,
    monkeypatch,
):
    monkeypatch.chdir(tmp_path)  # where Qt's dialogs opened every time
    db, settings = profile
    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(SamplingParams(max_tokens=2))
    window.send()
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    home = QDir.homePath()
    # A model folder: the dialog opens at home the first time, then where that folder is.
    opened = answer_file_dialog(str(tiny_folder))
    trigger(window, "Models", "Open model folder…")
    assert opened == [home]
    qtbot.waitUntil(lambda: window.model_info is not None and not window.busy(), timeout=TIMEOUT)
    # An export, written into a folder of its own.
    exports = tmp_path / "exports"
    exports.mkdir()
    window.model.select((("branch", window.thread_messages[-1].branch.id), 0))
    opened = answer_file_dialog(str(exports / "reply.jsonl"))
    trigger(window, "File", "Export", "This reply…")
    assert opened == [home] and (exports / "reply.jsonl").is_file()
    close_window(window)

    # A restart: the same settings file, read anew.
    from PySide6.QtCore import QSettings

    settings.sync()
    again = QSettings(settings.fileName(), QSettings.Format.IniFormat)
    window = open_window(qtbot, (db, again), str(tiny_folder))
    opened = answer_file_dialog(None)
    trigger(window, "Models", "Open GGUF file…")  # the same kind as model folders
    assert opened == [str(tiny_folder.parent)]
    opened = answer_file_dialog(None)
    trigger(window, "File", "Open export…")  # exports are opened where they were written
    assert opened == [str(exports)]
    opened = answer_file_dialog(None)
    trigger(window, "File", "Export", "Timeline plot (PNG, SVG)…")  # another kind: not used yet
    assert opened == [home]
    close_window(window)


# 15. Conversations with the same title are told apart --------------------------------------------


def test_open_conversation_tells_conversations_with_the_same_title_apart(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    question = window.composer.toPlainText()
    made = []
    for turns, max_tokens in ((1, 3), (2, 5)):
        window.new_chat()
        for _ in range(turns):
            window.controls.set_params(SamplingParams(max_tokens=max_tokens, logit_bias=no_eos))
            window.composer.setPlainText(question)
            window.send()
            qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
        qtbot.waitUntil(lambda: all(m.branch.steps for m in window.thread_messages if m.role == "assistant"))
        made.append(window.model.conversation.id)
    window.background.wait()  # the replies' steps are written to the store
    menu = window.window_actions.conversations_menu
    menu.aboutToShow.emit()
    texts = [a.text() for a in menu.actions()]
    assert len(texts) == 2 and len(set(texts)) == 2, texts  # not two identical titles
    newer, older = texts
    for text, turns, tokens in ((newer, "2 turns", "10 tokens"), (older, "1 turn", "3 tokens")):
        assert text.startswith(question) and "tiny-llama" in text and turns in text and tokens in text, text
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", text), text
    assert question in menu.actions()[0].toolTip()
    menu.actions()[1].trigger()  # the shorter, older one
    assert window.model.conversation.id == made[0]
    close_window(window)


# 20. Where a model's loading progress shows, as the README says -----------------------------------


def test_load_progress_shows_where_the_readme_says(qtbot, profile, tiny_folder):

    from app.shell.window import MainWindow

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "its progress in the status bar, and in the chat's welcome until a model is ready" in readme
    assert "Conversion and loading show their progress in the status bar" in readme
    db, settings = profile
    window = MainWindow(db_path=db, settings=settings, model=str(tiny_folder))
    qtbot.addWidget(window)
    seen: list[tuple[str, str]] = []  # (the chat's last line, the status bar's message) at each change

    def note(*_args) -> None:
        window._redraw_if_dirty()
        seen.append((window.chat.toPlainText().splitlines()[-1], window.statusBar().currentMessage()))

    window.model.events.entries_changed.connect(note)
    window.statusBar().messageChanged.connect(note)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    # The first load: in the chat's welcome and in the status bar.
    assert any(line.startswith("Loading the model (") and status.startswith("Model: ") for line, status in seen), seen
    # A later load, with a conversation in the chat: in the status bar (and its progress bar).
    window.controls.set_params(SamplingParams(max_tokens=2))
    window.send()
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    seen.clear()
    window.load_model(str(tiny_folder))
    assert window.status.progress.isVisible()
    qtbot.waitUntil(lambda: any(status.startswith("Loaded ") for _, status in seen), timeout=TIMEOUT)
    assert any(status == "Model: loading weights…" for _, status in seen), seen
    assert not any("Loading the model" in line for line, _ in seen)
    close_window(window)
