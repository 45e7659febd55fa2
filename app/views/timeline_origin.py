"""What the timeline says about the reply it shows: the backend, model and precision that
wrote it (``app.model.reply_origin``), whatever model is loaded now."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt

from app.model.remote_labels import label_forms
from app.model.reply_origin import ReplyOrigin
from app.views.fitting import FittedLabel


def origin_forms(origin: ReplyOrigin) -> list[str]:
    """The origin's line and shorter forms, longest first: a server's keeps ``server
    reports: <stage>`` to the last (``label_forms``), a local one its model's name."""
    if not (origin.model or origin.remote):
        return [""]
    full = origin.label()
    if origin.remote:
        return label_forms(full)
    return list(dict.fromkeys([full, full.rsplit(" · ", 1)[0], origin.model or full]))


class OriginLabels:
    """Beside the stage selector, the reply's origin (``tiny-llama · float32 · local``), in
    the longest form that fits; for a server's reply, *entropy: not reported by the server*
    inside the entropy plot (``set_note``: a plot title would take the plot's height)."""

    def __init__(self, set_note: Callable[[str], None]) -> None:
        self.label = FittedLabel()
        self.label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.set_note = set_note
        self.origin: ReplyOrigin | None = None

    def show(self, origin: ReplyOrigin) -> None:
        """Label the reply by ``origin``; only on a change (a new text costs a relayout)."""
        if origin == self.origin:
            return
        self.origin = origin
        self.label.set_forms(origin_forms(origin))
        self.label.setToolTip(f"This reply was written by {origin.label()}." if origin.model else "")
        self.set_note(origin.entropy_title() or "")
