"""The File and Chat actions of scoring, replay, exports and imports, with their rules.

Score text… and the replay's two items need the backend's capability; each File → Export
item needs the selection to be what it writes (its tooltip says what to select otherwise).
The controller behind them (``app/shell/controllers/score_dialog.py``) is made at the first use of
any of them, or at the model's first selection, entries or conversation event (from then on
it draws a saved scored text's surprisal row when one is selected); the rules read the
model layer's :class:`app.model.scoring.Scoring`, which the actions own and hand to it.
"""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog

from app.model.scoring import EXPORT_NEEDS, NO_REPLAY, NOT_SAVED
from app.shell.context import ShellContext
from app.shell.controllers.score_dialog import ScoreController, ScoreParts
from app.views.score_views import ScoreTextDialog

REPLAY_TEXT = "Replay this reply under the current settings"
BRANCH_TEXT = "Branch at the replay's first change"
EXPORT_LABELS = {
    "reply": "This reply…",
    "conversation": "This conversation (all branches)…",
    "compare": "This compare run…",
    "scored": "This scored text…",
}


class ScoreActions:
    """File → Score text…, Open export…, Export ▸ (``exports``, by what each writes, and the
    two plots); Chat → Replay…, Branch at the replay's first change."""

    def __init__(self, context: ShellContext, parts: ScoreParts) -> None:
        self.context, self.parts = context, parts
        self.scoring = context.model.scoring(context.in_use)
        self._controller: ScoreController | None = None
        add = context.actions.add
        self.score_text = add("Score text…", self.score_text_dialog, capability="score")
        self.open_export = add("Open export…", lambda: self.controller().open_export())
        self.exports: dict[str, QAction] = {
            what: add(
                label,
                lambda w=what: self.controller().export(w),
                needs=lambda w=what: self.export_needs(w),
                tooltip=label,
                prefix="",
                says="tooltip",
            )
            for what, label in EXPORT_LABELS.items()
        }
        self.timeline_plot = add("Timeline plot (PNG, SVG)…", lambda: self.controller().export_plot("timeline"))
        self.inspector_plot = add("Inspector (PNG, SVG)…", lambda: self.controller().export_plot("inspector"))
        self.replay = add(
            REPLAY_TEXT, lambda: self.controller().replay_selected(), capability="replay", needs=self.replay_needs
        )
        self.branch = add(
            BRANCH_TEXT,
            lambda: self.controller().branch_at_first_change(),
            capability="replay",
            needs=self.branch_needs,
        )
        for name in ("selection_changed", "entries_changed", "conversation_changed"):
            getattr(context.model.events, name).connect(self._first_event)

    def controller(self) -> ScoreController:
        """Score text, replay, export and import, made at first use."""
        if self._controller is None:
            self._controller = ScoreController(self.context, self.parts, self.scoring)
        return self._controller

    def _first_event(self, *_args: object) -> None:
        self.controller()

    def colour_choice(self, shown: bool) -> bool:
        """The colour switch as the person set it: ``shown`` unless scoring switched it on."""
        return self._controller.colour_choice() if self._controller is not None else shown

    def replay_needs(self) -> str:
        """Chat → Replay needs a token of a saved reply selected (``Scoring.start_replay``'s rule)."""
        selection = self.context.model.selection
        return "" if selection is not None and selection[0][0] == "branch" else NOT_SAVED

    def branch_needs(self) -> str:
        """Chat → Branch at the replay's first change needs a replay shown that changed something."""
        result = self.scoring.result
        return "" if result is not None and result.first_change is not None else NO_REPLAY

    def export_needs(self, what: str) -> str:
        """Why File → Export → ``what`` cannot write now ("" when it can)."""
        return "" if what in self.scoring.export_kinds() else EXPORT_NEEDS[what]

    def score_text_dialog(self) -> None:
        dialog = ScoreTextDialog(self.context.parent, self.context.folders)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.controller().score_text(dialog.text.toPlainText(), dialog.prompt.text().strip() or None)
