"""The chat's commands turned into model calls with the panel's settings (connected here to
the views that ask for them): send, regenerate,
continue a reply with another token (from the inspector or the chat's "Branch from here
with"), compare from a token, and the panel's changes (a reply's live parameters, the
compare settings' count and names shown by the chat)."""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings

from app.model.chat import ChatModel
from app.model.model_in_use import ModelInUse
from app.store.compare_runs import TokenRef
from app.views.chat_panel import ChatPanel
from app.views.inspector import InspectorWidget
from app.views.sampling_panel import SamplingPanel
from app.views.status import StatusWidgets
from engine.api.params import SamplingParams


class ChatCommands:
    def __init__(
        self,
        model: ChatModel,
        in_use: ModelInUse,
        status: StatusWidgets,
        settings: QSettings,
        views: tuple[ChatPanel, SamplingPanel, InspectorWidget],
    ) -> None:
        self.model, self.in_use, self.status, self.settings = model, in_use, status, settings
        self.central, self.panel, self.inspector = views
        self.controls = controls = self.panel.controls
        chat = self.central.chat
        chat.compare_requested.connect(self.compare_from_here)
        chat.branch_requested.connect(self.branch_from)
        seed = controls.seed  # the chat's "reuse": a reply's seed, in force from now on
        chat.seed_reused.connect(lambda value: (seed.setText(str(value)), seed.editingFinished.emit()))
        self.inspector.token_picked.connect(self.pick_token)
        self.inspector.token_banned.connect(controls.ban_token)
        self.panel.params_changed.connect(self.params_changed)
        self.panel.variants_changed.connect(self.variants_changed)
        self.central.composer.submitted.connect(self.send)
        self.central.send_button.clicked.connect(self.send)
        self.central.regen_button.clicked.connect(self.regenerate)
        self.variants_changed()

    def send(self) -> None:
        if self.in_use.info is None:
            self.status.show_message("The model is still loading.")
            return
        if problem := self.panel.send_problem():  # invalid settings are never sent
            self.status.show_message(problem, 10_000)
            return
        composer = self.central.composer
        text = composer.toPlainText()
        self.model.set_system_prompt(self.central.system_prompt.text())
        if self.panel.compare_on():
            sent = self.model.generation.send_compare(text, self.panel.variants())
        else:
            sent = self.model.generation.send(text, self.controls.current)
        if sent:
            composer.clear()

    def regenerate(self) -> None:
        if self.in_use.info is not None:
            variants = self.panel.variants() if self.panel.compare_on() else None
            self.model.generation.regenerate(self.controls.current, variants)

    def pick_token(self, token_id: int | None, text: str | None = None) -> None:
        """Continue the selected token's reply with ``token_id`` instead: with the settings of
        the compare column it belongs to, else the main settings. None: a token a server
        sent without its id, named by ``text`` or the inspector's last pick (its text)."""
        model = self.model
        if self.in_use.info is None or model.selection is None:
            return
        run = model.run_of(model.selection[0])
        column = run.column_of(model.selection[0]) if run is not None else None
        params = run.columns[column].params if column is not None else self.controls.current
        picked = getattr(self.inspector, "last_pick", None)  # set at its first pick
        if text is None and picked is not None and picked.token_id == token_id:
            text = picked.text
        model.generation.pick_token(token_id, params, forced_text=text)

    def branch_from(self, ref: TokenRef, candidate) -> None:
        """The chat's "Branch from here with": token ``ref`` replaced by ``candidate``."""
        self.model.select(ref)
        self.pick_token(candidate.token_id, candidate.text)

    def compare_from_here(self, ref: TokenRef) -> None:
        """Each compare setting redraws token ``ref`` and continues from it."""
        if self.in_use.info is not None:
            self.model.generation.compare_from(ref, self.panel.variants())

    def params_changed(self, variant: int, params: SamplingParams) -> None:
        # Each reply keeps the parameters it started with; its TokenSteps record every change.
        if variant == 0:
            self.settings.setValue("params", json.dumps(params.to_dict()))
        self.model.generation.update_live_params(params, column=variant)

    def variants_changed(self) -> None:
        count = len(self.panel.variants())
        self.central.set_compare(count if self.panel.compare_on() else None)
        names = ", ".join(label for label, _ in self.panel.variants())
        self.central.chat.compare_label = f"Compare from here with {count} settings ({names})"
