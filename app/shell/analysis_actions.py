"""The actions of the analyses of a reply, as the menus lay them out: Models → Check precision…,
Compare models…, Logit lens of every token and the analyses read from a reply's steps (each
made by its controller, under its rule: ``app/shell/controllers/analysis_controller.py``,
``app/shell/controllers/step_analyses.py``), and File → Export → This model comparison…, This logit lens…
(made here: enabled once there is a result to export for the selected reply).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction

from app.shell.actions import Actions
from app.shell.controllers.compare_models import CompareModels
from app.shell.controllers.logit_lens import LogitLensController
from app.shell.controllers.precision_check import PrecisionCheck
from app.shell.controllers.step_analyses import StepAnalysisController

MODEL_COMPARISON_NEEDS = "Compare the selected reply with a second model first (Models → Compare models…)."
LENS_NEEDS = "Select a token of a reply and read it in the inspector's Layers tab first."


@dataclass(frozen=True)
class AnalysisActions:
    check_precision: QAction
    compare_models: QAction
    logit_lens: QAction
    from_steps: tuple[QAction, ...]
    """One checkable action per analysis read from the reply's steps (surprise, …)."""
    export_comparison: QAction
    export_lens: QAction


def analysis_actions(
    actions: Actions,
    precision: PrecisionCheck,
    compare: CompareModels,
    lens: LogitLensController,
    from_steps: list[StepAnalysisController],
) -> AnalysisActions:
    def lens_read() -> str:
        found, _ = lens.lens.selected()
        return "" if found is not None and found.rows else LENS_NEEDS

    def compared() -> str:
        found, _ = compare.comparisons.selected()
        return "" if found is not None else MODEL_COMPARISON_NEEDS

    return AnalysisActions(
        check_precision=precision.action,
        compare_models=compare.action,
        logit_lens=lens.action,
        from_steps=tuple(c.action for c in from_steps),
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
