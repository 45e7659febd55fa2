"""Models → Library… (issue 25, point 1) on a home folder laid out like a Mac's
(``tests/support/library_home.py``: small real models in the Hugging Face cache, LM Studio, Ollama,
Logitscope's cache and a folder to add), driven as a person would: the shortcut, typing in the
search field, a click on a header, double-clicks on rows, Qt's own folder dialog answered."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QPalette  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.model import library_table as words  # noqa: E402
from tests.app.shell.test_app_welcome_and_files import answer_file_dialog  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, drain_engine_thread, open_window  # noqa: E402
from tests.support.library_home import build_mac_home  # noqa: E402

POINTING_ELSEWHERE = ("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "LOGITSCOPE_")


@pytest.fixture(scope="module")
def built_home(tmp_path_factory):
    """Built once for the module (a 4-bit model and a GGUF conversion take a few seconds)."""
    return build_mac_home(tmp_path_factory.mktemp("mac") / "ada")


@pytest.fixture
def mac_home(built_home, tmp_path, monkeypatch):
    """This process's environment pointed at the built home, as the app's would be on that Mac:
    no HF_HOME (the default ~/.cache/huggingface), the config folder in tmp, offline."""
    for key in list(os.environ):
        if key.startswith(POINTING_ELSEWHERE):
            monkeypatch.delenv(key)
    for key, value in built_home.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LOGITSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return built_home


def press(qtbot, key, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    target = QApplication.focusWidget()
    assert target is not None, "no widget has the keyboard focus"
    qtbot.keyClick(target, key, modifier)


def open_library(qtbot, window):
    """Ctrl+Shift+L in the window, as typed; the dialog once its scan is done."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    press(qtbot, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    dialog = window.library.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: not dialog.scanning, timeout=TIMEOUT)
    return dialog


def double_click(qtbot, dialog, name: str) -> None:
    """A person's double-click on the row named ``name`` (its first press selects it)."""
    row = dialog.row_of(name)
    assert row >= 0, f"{name} is not shown"
    table = dialog.table
    table.scrollTo(dialog.proxy.index(row, 0))
    point = table.visualRect(dialog.proxy.index(row, 0)).center()
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton, pos=point)


def shown_names(dialog) -> list[str]:
    return [entry.name for entry in dialog.visible_entries()]


def test_the_library_lists_searches_sorts_and_loads_on_a_mac_like_home(qtbot, profile, tiny_folder, mac_home):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.name == "tiny-llama"
    dialog = open_library(qtbot, window)
    asked = []  # every load's progress: none until a loadable row is chosen
    window.engine.worker.model_progressed.connect(lambda stage, fraction: asked.append(stage))
    # Every model of the home, each under its source, with its format and architecture.
    listed = {(e.source, e.name): e for e in dialog.model.entries}
    for expected in mac_home.expected:
        entry = listed[(expected.source, expected.name)]
        assert (entry.path, entry.format, entry.architecture) == (expected.path, expected.format, expected.architecture)
        assert entry.loadable == expected.loadable and expected.reason in entry.reason
    assert sorted(shown_names(dialog)) == sorted(e.name for e in mac_home.expected)
    assert dialog.status.text().startswith(f"{len(mac_home.expected)} models (")
    # An unloadable row is greyed, and says why in its column and its tooltip.
    broken = next(e for e in mac_home.expected if not e.loadable)
    index = dialog.proxy.index(dialog.row_of(broken.name), words.COLUMN_KEYS.index("loadable"))
    assert broken.reason in index.data() and broken.reason in index.data(Qt.ItemDataRole.ToolTipRole)
    disabled = QApplication.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
    assert index.data(Qt.ItemDataRole.ForegroundRole) == disabled
    loadable = dialog.proxy.index(dialog.row_of(mac_home.repo_ids[0]), 0)
    assert loadable.data(Qt.ItemDataRole.ForegroundRole) is None

    # The search filters as it is typed: "ollama" leaves Ollama's models only.
    assert QApplication.focusWidget() is dialog.search
    qtbot.keyClicks(dialog.search, "ollama")
    assert sorted(shown_names(dialog)) == ["tinyllama:latest", "tinyllama:partial"]
    assert ", 2 shown" in dialog.status.text()
    # ↓ in the search field walks the rows; Enter on one that cannot be loaded says why.
    assert dialog.current_entry().name == "tinyllama:latest"
    press(qtbot, Qt.Key.Key_Down)
    assert dialog.current_entry().name == "tinyllama:partial" and QApplication.focusWidget() is dialog.search
    press(qtbot, Qt.Key.Key_Return)
    assert "tinyllama:partial cannot be loaded" in dialog.status.text() and dialog.isVisible()
    qtbot.keyClick(dialog.search, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(dialog.search, "whisper")  # an architecture
    assert shown_names(dialog) == ["openai/tiny-whisper"]
    qtbot.keyClick(dialog.search, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(dialog.search, Qt.Key.Key_Backspace)
    assert len(shown_names(dialog)) == len(mac_home.expected)

    # A click on Size's header sorts by bytes, smallest first; a second, largest first.
    header = dialog.table.horizontalHeader()
    column = words.COLUMN_KEYS.index("size")
    point = QPoint(header.sectionViewportPosition(column) + header.sectionSize(column) // 2, header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=point)
    sizes = [e.size_bytes for e in dialog.visible_entries()]
    assert sizes == sorted(sizes) and len(set(sizes)) > 3
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert [e.size_bytes for e in dialog.visible_entries()] == sorted(sizes, reverse=True)

    # A double-click on a model that cannot be loaded says why, and loads nothing.
    double_click(qtbot, dialog, "tinyllama:partial")
    assert "is missing" in dialog.status.text() and dialog.isVisible()
    drain_engine_thread(qtbot, window)  # a load, had one been asked for, has reached the window
    assert window.model_source == str(tiny_folder) and window.model_info.name == "tiny-llama" and not asked

    # A double-click on the cached Hugging Face repo loads it by its repo id, offline, through
    # the worker (HF_HUB_OFFLINE: a download would fail).
    double_click(qtbot, dialog, "mlx-community/tiny-llama-4bit")
    qtbot.waitUntil(lambda: window.model_info.name != "tiny-llama" or bool(window.last_error), timeout=TIMEOUT)
    assert not window.last_error
    assert window.model_info.name == "mlx-community/tiny-llama-4bit" == window.model_source
    assert not dialog.isVisible()  # the window's status bar has the load
    assert window.model_label.text().startswith("mlx-community/tiny-llama-4bit")
    close_window(window)


def test_added_folders_are_listed_and_removed(qtbot, profile, tiny_folder, mac_home):
    from engine.library import added_folders

    window = open_window(qtbot, profile, str(tiny_folder))
    dialog = open_library(qtbot, window)
    before = len(dialog.model.entries)
    assert not dialog.remove_button.isEnabled()
    # Add folder…: Qt's folder dialog, answered with ~/Models; the folder is kept and scanned.
    opened = answer_file_dialog(str(mac_home.user_folder))
    qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
    assert opened
    qtbot.waitUntil(lambda: not dialog.scanning and len(dialog.model.entries) > before, timeout=TIMEOUT)
    assert added_folders() == [mac_home.user_folder]
    folder_rows = {(e.name, e.path) for e in dialog.model.entries if e.source == "folder"}
    assert folder_rows == {(e.name, e.path) for e in mac_home.folder_expected}
    # Remove folder lists it; choosing it forgets the folder and its models.
    assert dialog.remove_button.isEnabled()
    (action,) = dialog.remove_menu.actions()
    assert action.text() == str(mac_home.user_folder)
    action.trigger()
    qtbot.waitUntil(lambda: not dialog.scanning and len(dialog.model.entries) == before, timeout=TIMEOUT)
    assert added_folders() == [] and not dialog.remove_button.isEnabled()
    # Rescan, and Enter on the selected row: the top match of a search loads.
    qtbot.mouseClick(dialog.rescan_button, Qt.MouseButton.LeftButton)
    assert dialog.scanning and dialog.status.text() == words.SCANNING
    qtbot.waitUntil(lambda: not dialog.scanning, timeout=TIMEOUT)
    dialog.activateWindow()  # the folder dialog had it; offscreen, nothing gives it back
    qtbot.waitUntil(lambda: QApplication.activeWindow() is dialog)
    dialog.search.setFocus()
    qtbot.keyClicks(dialog.search, "lmstudio tiny-llama-4bit")
    assert shown_names(dialog) == ["mlx-community/tiny-llama-4bit"]
    press(qtbot, Qt.Key.Key_Return)
    expected = next(e for e in mac_home.expected if e.source == "lmstudio" and e.format == "mlx")
    qtbot.waitUntil(
        lambda: window.model_source == expected.path and window.model_info.source == expected.path, timeout=TIMEOUT
    )
    assert window.model_info.name == "tiny-llama-4bit"
    close_window(window)


def test_the_scan_does_not_hold_the_window(qtbot, profile, tiny_folder, mac_home, monkeypatch):
    """While the scan runs (held here until released) the window answers: Scanning… is shown,
    and the rows come when the scan ends."""
    import threading

    import engine.library

    release = threading.Event()
    scan = engine.library.scan_library

    def slow_scan(*args, **kwargs):
        release.wait(TIMEOUT / 1000)
        return scan(*args, **kwargs)

    monkeypatch.setattr(engine.library, "scan_library", slow_scan)
    window = open_window(qtbot, profile, str(tiny_folder))
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    press(qtbot, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    dialog = window.library.dialog
    assert dialog.scanning and dialog.status.text() == words.SCANNING and dialog.busy.isVisible()
    qtbot.keyClicks(dialog.search, "gguf")  # the GUI thread types while the scan waits
    assert dialog.search.text() == "gguf"
    release.set()
    qtbot.waitUntil(lambda: not dialog.scanning, timeout=TIMEOUT)
    assert shown_names(dialog) and all(e.format == "gguf" for e in dialog.visible_entries())
    close_window(window)


# The words, without Qt ----------------------------------------------------------------------------


def test_the_table_words_sizes_and_sorts_unknowns_last(mac_home):
    from engine.library import scan_library

    entries = scan_library()
    assert words.human_size(999) == "999 B" and words.human_size(1536) == "1.5 KB"
    assert words.human_size(3_200_000_000) == "3.2 GB"
    unknown = next(e for e in entries if e.architecture is None)
    known = next(e for e in entries if e.architecture is not None)
    assert words.cell_text(unknown, "architecture") == words.UNKNOWN
    assert words.sort_key(unknown, "architecture") > words.sort_key(known, "architecture")
    assert words.matches(known, "LM studio") == (known.source == "lmstudio")
    assert words.short_path("/Users/ada/.ollama/models/blobs/x", "/Users/ada") == "~/.ollama/models/blobs/x"
    assert words.short_path("/Users/adam/m", "/Users/ada") == "/Users/adam/m"  # not ada's home
