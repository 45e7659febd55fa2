"""The window's menus: File, Chat, Models, Server, View, Help.

Only the layout: every item is an action its controller made, with its enablement rule
(``app/shell/actions.py``); nothing here enables or disables anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenuBar

from app.shell.analysis_actions import AnalysisActions
from app.shell.controllers.kv_cache_menu import KVCacheMenu
from app.shell.controllers.library import LibraryController
from app.shell.controllers.model_loading import ModelLoader
from app.shell.controllers.precision_menu import PrecisionMenu
from app.shell.controllers.serving import ServingController
from app.shell.score_actions import ScoreActions
from app.shell.window_actions import WindowActions


@dataclass(frozen=True)
class MenuParts:
    """The controllers whose actions the menus lay out."""

    window: WindowActions
    scoring: ScoreActions
    loader: ModelLoader
    library: LibraryController
    precision: PrecisionMenu
    kv_cache: KVCacheMenu
    analyses: AnalysisActions
    draft: QAction
    """Models → Draft model… (``app/shell/controllers/draft_model.py``)."""
    serving: ServingController
    """Server → Start serving…, Stop serving, Served requests (``app/shell/controllers/serving.py``)."""


def build_menus(bar: QMenuBar, parts: MenuParts) -> None:
    own, scoring, loader, analyses = parts.window, parts.scoring, parts.loader, parts.analyses

    file_menu = bar.addMenu("&File")
    file_menu.setToolTipsVisible(True)
    file_menu.addAction(own.new_chat)
    file_menu.addMenu(own.conversations_menu)
    file_menu.addAction(own.delete)
    file_menu.addSeparator()
    file_menu.addActions([scoring.score_text, scoring.open_export])
    export = file_menu.addMenu("Export")
    export.setToolTipsVisible(True)
    export.addActions(list(scoring.exports.values()))
    export.addAction(analyses.export_comparison)  # Models → Compare models…'s records
    export.addAction(analyses.export_lens)  # the logit lens's per-layer records
    export.addSeparator()
    export.addActions([scoring.timeline_plot, scoring.inspector_plot])
    file_menu.addSeparator()
    file_menu.addAction(own.quit)

    chat_menu = bar.addMenu("&Chat")
    chat_menu.setToolTipsVisible(True)
    chat_menu.addActions([own.send, own.stop, own.regenerate, own.continue_interrupted, own.compare_settings])
    chat_menu.addSeparator()
    chat_menu.addActions([scoring.replay, scoring.branch])

    model_menu = bar.addMenu("&Models")
    model_menu.setToolTipsVisible(True)  # a greyed-out item's tooltip is its reason
    model_menu.addAction(parts.library.action)
    model_menu.addSeparator()
    model_menu.addActions([loader.default_action, loader.folder_action, loader.gguf_action, loader.repo_action])
    model_menu.addSeparator()
    model_menu.addAction(loader.connect_action)
    model_menu.addMenu(loader.recent_menu)
    model_menu.addSeparator()
    model_menu.addMenu(parts.precision.menu)
    model_menu.addMenu(parts.kv_cache.menu)
    model_menu.addAction(parts.draft)  # Draft model…: speculative decoding
    model_menu.addAction(analyses.check_precision)  # Check precision…
    model_menu.addAction(analyses.compare_models)  # Compare models…
    model_menu.addAction(analyses.logit_lens)  # Logit lens of every token
    model_menu.addActions(list(analyses.from_steps))  # app/shell/controllers/step_analyses.py: surprise, …

    server_menu = bar.addMenu("&Server")
    server_menu.setToolTipsVisible(True)
    server_menu.addActions([parts.serving.start_action, parts.serving.stop_action])
    server_menu.addSeparator()
    server_menu.addAction(parts.serving.list_action)
    server_menu.addActions([parts.serving.cleanup.keep_action, parts.serving.cleanup.delete_action])

    view_menu = bar.addMenu("&View")
    theme_menu = view_menu.addMenu("Theme")
    theme_menu.addActions(own.theme_group.actions())
    view_menu.addAction(own.colour)
    view_menu.addActions(own.docks)
    view_menu.addAction(own.reset_layout)

    help_menu = bar.addMenu("&Help")
    help_menu.addActions([own.help, own.about, own.show_log])
