"""Models → Precision (auto, float32, float16, bfloat16): the choice saved per model source
(``app.model.precision``) and sent with every load of that model (``app.shell.controllers.model_loading``).
A server computes in what it was started with, so the submenu is disabled while one is in use.
"""

from __future__ import annotations

from app.model.precision import CHOICE, SERVER_CHOOSES
from app.shell.controllers.per_model_menu import PerModelMenu
from engine.api.backend import ModelInfo


class PrecisionMenu(PerModelMenu):
    TITLE = "Precision"
    MENU_TIP = "What the model computes in. Auto is float32 where it fits in memory: the numbers shown are the model's."
    CHOICE = CHOICE
    SERVER_REASON = SERVER_CHOOSES
    RELOADING = "Reloading in {label}…"

    def running(self, info: ModelInfo) -> str:
        return info.precision_choice
