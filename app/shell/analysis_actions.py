"""The actions of the analyses of a reply, with their rules: Models → Check precision…,
Compare models…, Logit lens of every token, and File → Export → This model comparison…,
This logit lens….

Each is enabled when its controller says the selected reply can be analysed (its tooltip
says why not, a server's reason included); the rules are evaluated again whenever an
analysis starts or ends, besides the window's own refreshes (selection, entries, …).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction

from app.shell.actions import Actions
from app.shell.compare_models import ACTION_TIP as COMPARE_TIP
from app.shell.compare_models import CompareModels
from app.shell.logit_lens import ACTION_TEXT as LENS_TEXT
from app.shell.logit_lens import ACTION_TIP as LENS_TIP
from app.shell.logit_lens import LogitLensController
from app.shell.precision_check import PrecisionCheck

CHECK_TIP = "Compare the selected reply's logprobs in this precision with float32's, token by token."
MODEL_COMPARISON_NEEDS = "Compare the selected reply with a second model first (Models → Compare models…)."
LENS_NEEDS = "Select a token of a reply and read it in the inspector's Layers tab first."


@dataclass(frozen=True)
class AnalysisActions:
    check_precision: QAction
    compare_models: QAction
    logit_lens: QAction
    export_comparison: QAction
    export_lens: QAction


def analysis_actions(
    actions: Actions, precision: PrecisionCheck, compare: CompareModels, lens: LogitLensController
) -> AnalysisActions:
    def lens_read() -> str:
        found, _ = lens.lens.selected()
        return "" if found is not None and found.rows else LENS_NEEDS

    def compared() -> str:
        return "" if compare.comparisons.selected() else MODEL_COMPARISON_NEEDS

    made = AnalysisActions(
        check_precision=actions.add(
            "Check precision…",
            precision.start,
            needs=precision.unavailable,
            tooltip=CHECK_TIP,
            status_tip=CHECK_TIP,
            prefix="",
        ),
        compare_models=actions.add(
            "Compare models…",
            compare.open_dialog,
            needs=compare.unavailable,
            tooltip=COMPARE_TIP,
            status_tip=COMPARE_TIP,
            prefix="",
        ),
        logit_lens=actions.add(
            LENS_TEXT,
            lens.read_every_token,
            needs=lens.lens.every_unavailable,
            tooltip=LENS_TIP,
            status_tip=LENS_TIP,
            prefix="",
        ),
        export_comparison=actions.add(
            "This model comparison…",
            compare.export,
            needs=compared,
            tooltip="This model comparison…",
            prefix="",
            says="tooltip",
        ),
        export_lens=actions.add(
            "This logit lens…",
            lens.export,
            capability="logit_lens",
            needs=lens_read,
            tooltip="This logit lens…",
            prefix="",
            says="tooltip",
        ),
    )
    # What the rules read changes when an analysis starts or ends, as well as with the selection.
    for events in (lens.lens.events, compare.comparisons.events):
        for name in ("started", "finished", "failed", "cancelled"):
            getattr(events, name).connect(actions.refresh_after)
    for signal in (precision.runner.finished, precision.runner.failed, precision.request_start):
        signal.connect(actions.refresh_after)  # queued: after the controller's own slots
    return made
