"""Opening the conversation database, with a way out when it cannot be opened.

A file that is not a database (corrupt), from a newer Logitscope, locked by another
program, on a read-only disk or a full one: :func:`open_store` says which, in words, and
offers what can help — try again, or start with a new file. The old file is moved aside
(``<name>.unreadable-<time>``, with its ``-wal`` / ``-shm``), never deleted; where it cannot
be moved (a read-only folder) the new file goes to a writable folder instead and the old
one stays where it was.

``ask(title, text, choices) -> choice`` asks the person (a message box in the app; tests
pass their own). Choices: ``"retry"``, ``"new"``, ``"quit"``; ``"quit"`` raises
:class:`StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.store.store import NewerSchemaError, Store

Ask = Callable[[str, str, list[str]], str]
CHOICE_TEXT = {"retry": "Try again", "new": "Start with a new file", "quit": "Quit"}


class StoreUnavailable(RuntimeError):
    """The database could not be opened and the person chose to quit."""


def diagnose(path: Path, exc: BaseException) -> tuple[str, list[str]]:
    """What went wrong, in words, and the choices that can help."""
    text = str(exc)
    low = text.lower()
    where = f"The conversation database\n{path}\n"
    if isinstance(exc, NewerSchemaError):
        return (
            f"{where}was written by a newer version of Logitscope. Update Logitscope to open it, "
            "or start with a new file (the old one is kept, moved aside).",
            ["new", "quit"],
        )
    if "locked" in low or "busy" in low:
        return (
            f"{where}is locked by another program (another Logitscope window?). Close it and try "
            "again, or start with a new file (the old one is kept, moved aside).",
            ["retry", "new", "quit"],
        )
    if "full" in low:
        return (
            f"{where}cannot be written: the disk is full. Free some space and try again.",
            ["retry", "new", "quit"],
        )
    if "readonly" in low or "read-only" in low or "unable to open" in low or isinstance(exc, PermissionError):
        return (
            f"{where}cannot be written (a read-only file, folder or disk). Make it writable and "
            "try again, or start with a new file elsewhere (the old one is kept).",
            ["retry", "new", "quit"],
        )
    if "not a database" in low or "malformed" in low or isinstance(exc, sqlite3.DatabaseError):
        return (
            f"{where}is damaged or is not a Logitscope database ({text}). Start with a new file "
            "(the damaged one is kept, moved aside), or quit.",
            ["new", "quit"],
        )
    return (f"{where}cannot be opened: {type(exc).__name__}: {text}", ["retry", "new", "quit"])


def move_aside(path: Path) -> Path | None:
    """Rename the file (and its WAL files) out of the way; None when that is not possible."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.unreadable-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.unreadable-{stamp}-{n}")
    try:
        if path.exists():
            os.replace(path, target)
    except OSError:
        return None
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            with contextlib.suppress(OSError):
                os.replace(side, target.with_name(target.name + suffix))
    return target


def writable_elsewhere(path: Path) -> Path:
    """A new database's place when ``path``'s folder cannot take it."""
    folder = Path(tempfile.gettempdir()) / "logitscope"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}"


def open_store(path: str | Path, ask: Ask, timeout: float = 5.0) -> Store:
    """Open ``path``; on failure ask what to do, until a store is open or the person quits.
    The store's ``moved_aside`` is the old file's new name (or None) and ``opened_instead``
    says whether it is not at ``path``."""
    path = Path(path)
    while True:
        try:
            store = Store(path, timeout=timeout)
        except (sqlite3.Error, OSError, NewerSchemaError) as exc:
            text, choices = diagnose(path, exc)
            choice = ask("Logitscope: the conversation database", text, choices)
            if choice == "retry":
                continue
            if choice != "new":
                raise StoreUnavailable(text) from exc
            moved = move_aside(path)
            target = path if moved is not None and not path.exists() else writable_elsewhere(path)
            try:
                store = Store(target, timeout=timeout)
            except (sqlite3.Error, OSError) as again:
                target = writable_elsewhere(path)
                try:
                    store = Store(target, timeout=timeout)
                except (sqlite3.Error, OSError):
                    raise StoreUnavailable(f"{text}\n\nA new file could not be made either: {again}") from again
            store.moved_aside = moved
            store.opened_instead = target != path
            return store
        store.moved_aside = None
        store.opened_instead = False
        return store


def message_box_ask(parent=None) -> Ask:
    """``ask`` as a modal message box."""

    def ask(title: str, text: str, choices: list[str]) -> str:
        from PySide6.QtWidgets import QMessageBox

        box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=parent)
        buttons = {}
        for choice in choices:
            role = QMessageBox.ButtonRole.RejectRole if choice == "quit" else QMessageBox.ButtonRole.AcceptRole
            buttons[box.addButton(CHOICE_TEXT[choice], role)] = choice
        box.exec()
        return buttons.get(box.clickedButton(), "quit")

    return ask
