"""Server → *Keep served requests…* and *Delete served requests…*.

Every request the app serves becomes a conversation; a client that never stops would grow
the database without bound. The retention keeps the newest ``serving/keep_requests``
(QSettings) served requests, 500 by default (``app.model.served_writer.KEEP_DEFAULT``, as
many as the Served list shows; 0 keeps every one): an older one goes with its conversation
when a request ends, on the writer's thread. *Delete served requests…* asks first, then
deletes every served request but those being written and the open conversation, a batch at a
time on the same thread, with a progress dialog whose Cancel stops between two batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QInputDialog, QMessageBox, QProgressDialog

from app.model.served_writer import KEEP_DEFAULT

if TYPE_CHECKING:
    from app.model.served import ServedRequests
    from app.shell.context import ShellContext

KEEP_KEY = "serving/keep_requests"
KEEP_TIP = "How many served requests stay in the database (the newest); older ones go with their conversations."
DELETE_TIP = "Delete every served request and its conversation (not those being written, not the open one)."
NOTHING = "No served request to delete (those being written and the open conversation stay)."
PROGRESS_AFTER = 2
"""Batches after which the progress dialog shows (a short deletion needs none)."""


def saved_keep(context: ShellContext) -> int:
    value = context.settings.value(KEEP_KEY, KEEP_DEFAULT)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return KEEP_DEFAULT


class ServedCleanup:
    def __init__(self, context: ShellContext, served: ServedRequests) -> None:
        self.context = context
        self.served = served
        served.set_keep(saved_keep(context))
        actions = context.actions
        self.keep_action = actions.add("Keep served requests…", self.ask_keep, tooltip=KEEP_TIP, status_tip=KEEP_TIP)
        self.delete_action = actions.add(
            "Delete served requests…", self.ask_delete, tooltip=DELETE_TIP, status_tip=DELETE_TIP
        )
        self.confirm: QMessageBox | None = None
        self.progress: QProgressDialog | None = None
        self.deleting = False
        self._total = 0

    def set_keep(self, keep: int) -> None:
        self.context.settings.setValue(KEEP_KEY, int(keep))
        self.served.set_keep(keep)
        kept = f"the newest {keep}" if keep else "every one"
        self.context.status.show_message(f"Served requests kept: {kept}.")

    def ask_keep(self) -> None:
        keep, ok = QInputDialog.getInt(
            self.context.parent,
            "Keep served requests",
            "Served requests to keep (the newest; 0 keeps all):",
            self.served.keep,
            0,
            10_000_000,
        )
        if ok:
            self.set_keep(keep)

    def ask_delete(self) -> None:
        """Ask first (how many go, what stays); Delete starts :meth:`delete_all`."""
        if self.deleting:
            return
        count = self.served.deletable()
        if not count:
            self.context.status.show_message(NOTHING)
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Delete served requests",
            f"Delete {count} served request{'s' if count != 1 else ''} and "
            f"{'their conversations' if count != 1 else 'its conversation'}? Requests being written and the open "
            "conversation stay. This cannot be undone.",
            QMessageBox.StandardButton.Cancel,
            self.context.parent,
        )
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.buttonClicked.connect(lambda button: self.delete_all() if button is delete else None)
        self.confirm = box
        box.open()

    def delete_all(self) -> None:
        """Delete, a batch at a time on the writer's thread, until none is left or Cancel."""
        if self.deleting:
            return
        self.deleting = True
        self._total = max(1, self.served.deletable())
        self._batches = 0
        self.served.delete_some(self._stepped)

    def _stepped(self, left: int | Exception) -> None:
        if isinstance(left, Exception):
            self._end(f"Served requests could not be deleted: {left}")
            return
        self._batches += 1
        cancelled = self.progress is not None and self.progress.wasCanceled()
        if left <= 0 or cancelled:
            deleted = self._total - max(left, 0)
            end = " (cancelled)." if left else "."
            self._end(f"Deleted {deleted} served request{'s' if deleted != 1 else ''}{end}")
            return
        if self.progress is None and self._batches >= PROGRESS_AFTER:
            self.progress = QProgressDialog("Deleting served requests…", "Cancel", 0, self._total, self.context.parent)
            self.progress.setMinimumDuration(0)
            self.progress.show()
        if self.progress is not None:
            self.progress.setValue(self._total - left)
        self.served.delete_some(self._stepped)

    def _end(self, message: str) -> None:
        self.deleting = False
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        self.context.status.show_message(message, 8000)
