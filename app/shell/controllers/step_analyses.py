"""The analyses computed from a reply's own steps (no model, no job), each a checkable action
showing its timeline row for the selected reply.

``STEP_ANALYSES`` lists them: a :class:`app.model.reply_analysis.StepAnalysis` and the
:class:`app.views.series_row.SeriesRow` drawing its result. Adding one is a model module, a
view, their tests and one line here; the window makes a :class:`StepAnalysisController` for
each, and the Models menu lays out their actions after the other analyses'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.model.draft import DraftAcceptance
from app.model.grammar_masks import GrammarMasks
from app.model.surprise import SurpriseAnalysis
from app.views.acceptance_timeline import AcceptanceRow
from app.views.grammar_timeline import GrammarRow
from app.views.surprise_timeline import SurpriseRow

if TYPE_CHECKING:
    from app.model.reply_analysis import StepAnalysis
    from app.shell.context import ShellContext
    from app.views.series_row import SeriesRow
    from app.views.throttle import RedrawClock
    from app.views.timeline import TimelineWidget

REFRESH_MS = 100

STEP_ANALYSES: tuple[tuple[type[StepAnalysis], type[SeriesRow]], ...] = (
    (SurpriseAnalysis, SurpriseRow),  # app/model/surprise.py, app/views/surprise_timeline.py
    (DraftAcceptance, AcceptanceRow),  # app/model/draft.py, app/views/acceptance_timeline.py
    (GrammarMasks, GrammarRow),  # app/model/grammar_masks.py, app/views/grammar_timeline.py
)


class StepAnalysisController:
    """One step analysis: its action (checked: its row is shown) and its row, redrawn when
    the selection or the selected reply changes (at most every ``REFRESH_MS`` while a reply
    streams)."""

    def __init__(
        self,
        context: ShellContext,
        timeline: TimelineWidget,
        clock: RedrawClock,
        analysis: type[StepAnalysis],
        row: type[SeriesRow],
    ) -> None:
        model = context.model
        self.model, self.analysis = model, analysis(model.reading, context.in_use)
        self.row = row(timeline, model.select_index)
        self.action = context.actions.add(
            analysis.TITLE, lambda _on: self.refresh(), tooltip=analysis.TIP, checkable=True
        )
        self._refreshes = clock.throttler(self.refresh, REFRESH_MS)
        events = model.events
        for emitter in (events.selection_changed, events.entries_changed, events.tokens_added):
            emitter.connect(lambda *_: self._refreshes.request())
        events.conversation_changed.connect(lambda _: self.refresh())

    def refresh(self) -> None:
        found, _ = self.analysis.selected() if self.action.isChecked() else (None, None)
        selection = self.model.selection
        self.row.show(found, selection[1] if selection is not None else None)


def step_analyses(context: ShellContext, timeline: TimelineWidget, clock: RedrawClock) -> list[StepAnalysisController]:
    """A controller for each of ``STEP_ANALYSES``."""
    return [StepAnalysisController(context, timeline, clock, a, r) for a, r in STEP_ANALYSES]
