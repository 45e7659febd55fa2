"""The inspector: the selected token, what every stage of the chain did to its candidates.

Two tabs over the same candidates in the same order (their ``raw`` rank):
*Chain* (``app.views.chain_view``), every candidate's probability after every stage that
ran, and *Raw vs final* (``app.views.bars_view``), bars for ``raw`` and for the last stage
with the bias, penalty and DRY effect on each logit and the numbers; a token of a reply compared with a second
model adds *Models* (``app.views.compare_tokens``), both models' top tokens; *Layers*
(``app.views.lens_tab``, filled by ``app.shell.controllers.logit_lens``) is the logit lens: what each
layer of the running model would have predicted there; a token of a reply written with a
draft model adds *Draft* (``app.views.draft_tab``), the draft's proposal and both models'
candidates. Double-click a candidate in
either of the first two (or use its context menu) to continue the reply from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.model.entries import latest_token
from app.model.inspector_settings import settings_line, settings_tooltip, title_tooltip
from app.model.remote_labels import NOT_REPORTED, NOT_SENT, p_label, step_stage_label
from app.model.reply_origin import ReplyOrigin
from app.model.scored import is_scored
from app.model.textfmt import escape, percent, visible
from app.model.thinking import forced_by_budget, phase_title
from app.views.bars_view import BarsView
from app.views.chain_view import ChainView, format_nats, raw_rank
from app.views.compare_tokens import CompareTokensView
from app.views.draft_tab import DraftView
from app.views.lens_tab import LayersView
from app.views.theme import LIGHT, Colors, variant_color
from app.views.throttle import RedrawClock, own_clock
from engine.api.events import Candidate, TokenStep

if TYPE_CHECKING:
    from app.model.chat import ChatModel

CHAIN_TAB, BARS_TAB, MODELS_TAB, LAYERS_TAB, DRAFT_TAB = 0, 1, 2, 3, 4
PLACEHOLDER = "Send a message: the latest token's candidates show here."
NOTHING_SELECTED = "No token selected: click a token of a reply in the chat to see its candidates."
INSPECTOR_MS = 100
"""Following the newest token of a streaming reply, at most 10 redraws a second (the chat
streams at 30): repainting the table is a large part of the GUI's cost per token, and no
one reads ten tables a second. A token picked by hand is shown at once."""


class InspectorWidget(QWidget):
    token_picked = Signal(object)  # continue the reply with this token id (None: not reported; see last_pick)
    token_banned = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.step: TokenStep | None = None
        self.where = ""
        self.precision: str | None = None  # what the selected reply was computed in (None: not recorded)
        self.origin = ReplyOrigin()  # what wrote the selected reply: its header says so
        self.model: ChatModel | None = None
        self.candidates: list[Candidate] = []
        self.title = QLabel(PLACEHOLDER)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        # The settings in force for this token (every field off its default, the seed first).
        self.settings = QLabel()
        self.settings.setTextFormat(Qt.TextFormat.PlainText)
        self.settings.setWordWrap(True)
        self.settings.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.log_scale = QCheckBox("log scale")
        self.log_scale.toggled.connect(self._redraw)
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.log_scale)

        self.chain_view = ChainView()
        self.bars = BarsView()
        self.table = self.bars.table
        self.tabs = QTabWidget()
        self.tabs.addTab(self.chain_view, "Chain")
        self.tabs.addTab(self.bars, "Raw vs final")
        # Models → Compare models…: shown only for a token of a compared reply (show_models).
        self.models_view = CompareTokensView()
        self.tabs.addTab(self.models_view, "Models")
        self.tabs.setTabVisible(MODELS_TAB, False)
        # The logit lens: computed when this tab is in view (app.shell.controllers.logit_lens fills it).
        self.layers_view = LayersView()
        self.tabs.addTab(self.layers_view, "Layers")
        # Speculative decoding: shown only for a token a draft model proposed for (show_step).
        self.draft_view = DraftView()
        self.tabs.addTab(self.draft_view, "Draft")
        self.tabs.setTabVisible(DRAFT_TAB, False)
        self.tabs.currentChanged.connect(lambda _: self._redraw())
        for view in (self.chain_view, self.table):
            view.doubleClicked.connect(lambda index: self._pick_row(index.row()))
            view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            view.customContextMenuRequested.connect(lambda pos, v=view: self._on_menu(v, pos))
        # The chain view's candidate names are its row headers: a double-click or a right-click
        # there does what it does on the row's numbers.
        names = self.chain_view.verticalHeader()
        names.sectionDoubleClicked.connect(self._pick_row)
        names.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        names.customContextMenuRequested.connect(lambda pos: self._on_menu(self.chain_view, pos, names))
        self.bars.plots.scene().sigMouseClicked.connect(self._on_plot_click)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.settings)
        layout.addWidget(self.tabs, 1)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.layers_view.set_colors(colors)
        self._redraw()

    def show_models(self, comparison, row, bring_forward: bool = False) -> None:
        """The selected token under both compared models (``app.views.compare_tokens``); the
        tab is there only while the token's reply has a comparison."""
        self.models_view.show_token(comparison, row, self.colors)
        shown = comparison is not None
        if not shown and self.tabs.currentIndex() == MODELS_TAB:
            self.tabs.setCurrentIndex(CHAIN_TAB)
        self.tabs.setTabVisible(MODELS_TAB, shown)
        if shown and bring_forward:
            self.tabs.setCurrentIndex(MODELS_TAB)

    def bind(self, model: ChatModel, clock: RedrawClock | None = None) -> None:
        """Show the model's selected token; redrawn at most ~30 times a second while a reply
        streams, and only when the selected token is another one."""
        self.model = model
        self.redraws = own_clock(self, clock).throttler(self._show_selection, INSPECTOR_MS)
        for name in ("entries_changed", "tokens_added"):
            getattr(model.events, name).connect(self._on_model_event)
        model.events.selection_changed.connect(self._on_selection_changed)
        self._show_selection()

    def _on_model_event(self, *_args) -> None:
        self.redraws.request()

    def _on_selection_changed(self, _ref) -> None:
        # A token picked by hand is shown at once; one followed as a reply streams, on the clock.
        self.redraws.request(urgent=not self.model.follow_latest)

    def _show_selection(self) -> None:
        step = self.model.selected_step()
        run = self.model.shown_run()
        where = ""
        if run is not None and step is not None:
            column = run.column_of(self.model.selection[0])
            where = f"<span style='color:{variant_color(column, self.colors)}'>●</span> {run.label(column)} · "
        stream = self.model.selection[0] if self.model.selection else None
        precision, origin = self.model.precision_of(stream), self.model.origin_of(stream)
        if step is not self.step or where != self.where or precision != self.precision or origin != self.origin:
            self.precision, self.origin = precision, origin
            self.show_step(step, where)

    def show_step(self, step: TokenStep | None, where: str = "") -> None:
        """``where``: rich text naming the compare column the token belongs to, if any."""
        self.step, self.where = step, where
        self._redraw()

    def _redraw(self) -> None:
        """Header, settings and the tab in view, all from ``self.step`` in one go."""
        step = self.step
        self.candidates = raw_rank(step) if step is not None else []
        log = self.log_scale.isChecked()
        # Only the tab in view is drawn: the other is brought up to date when it is shown.
        # With no selection (New chat, Delete) both are emptied: nothing outlives it.
        if step is None or self.tabs.currentIndex() == CHAIN_TAB:
            self.chain_view.show_step(step, self.colors, log)
        if step is None or self.tabs.currentIndex() == BARS_TAB:
            self.bars.show_step(step, self.candidates, self.colors, log)
        drafted = step is not None and step.draft is not None
        if not drafted and self.tabs.currentIndex() == DRAFT_TAB:
            self.tabs.setCurrentIndex(CHAIN_TAB)  # redraws through currentChanged
            return
        self.tabs.setTabVisible(DRAFT_TAB, drafted)
        if not drafted or self.tabs.currentIndex() == DRAFT_TAB:
            self.draft_view.show_step(step if drafted else None, self.colors)
        self.title.setText(self._title_html(step) if step is not None else self._placeholder())
        if step is None:
            self.title.setToolTip("")
        else:
            self.title.setToolTip(title_tooltip(step.params, step.forced, self.precision, step.chain, is_scored(step)))
        self.settings.setText(f"Settings: {settings_line(step.params)}" if step is not None else "")
        self.settings.setToolTip(settings_tooltip(step.params) if step is not None else "")

    def _placeholder(self) -> str:
        """Nothing selected: before any reply, an invitation; after one (a reply cancelled
        before its first token leaves none selected), that nothing is."""
        model = self.model
        return NOTHING_SELECTED if model is not None and latest_token(model.entries) is not None else PLACEHOLDER

    def _title_html(self, step: TokenStep) -> str:
        picked = " · picked by hand" if step.forced and not forced_by_budget(step) else ""
        if is_scored(step):  # forced too, but nobody picked it: the text was given
            picked = f" · scored text: given, not drawn (rank {step.rank} under raw)"
        if phase := phase_title(step):  # a reasoning model's token: thinking or answer
            picked += f" · {phase}"
        if step.params.greedy and not step.forced:
            # The stages after temperature were computed at T = 1 for inspection only; a
            # server's step has one stage, not temperature: its greedy token is its argmax.
            where = " entering temperature" if "temperature" in step.chain else ""
            picked = f" · greedy: the most likely token{where}"
        last = step.chain[-1]
        if step.reported_stage is not None:  # a server's numbers: named by their stage, never raw
            return (
                f"{self.where}<b>Token {step.index}</b> &nbsp;<code>{escape(visible(step.piece))}</code>"
                f" &nbsp; {p_label(step)} {percent(step.logprob)}"
                f"{picked}<br>{self._remote_label(step)}"
            )
        origin = f"<br><span style='color:{self.colors.muted}'>{escape(self.origin.label())}</span>"
        return (
            f"{self.where}<b>Token {step.index}</b> &nbsp;<code>{escape(visible(step.piece))}</code>"
            f" &nbsp; p after {last} {percent(step.logprob)} · raw {percent(step.raw_logprob)}"
            f" · entropy raw {format_nats(step.entropy_raw)} → {last} {format_nats(step.entropy)}{picked}"
            + (origin if self.origin.model else "")
        )

    def _remote_label(self, step: TokenStep) -> str:
        """What a server's numbers are (``app/model/remote_labels.py``), after the reply's own
        origin: the server and the stage it reported, whatever model is loaded now."""
        # The origin names the stage (the steps' own): said once, not again beside it.
        label = f"{escape(self.origin.label())} · {NOT_SENT}" if self.origin.remote else step_stage_label(step)
        return f"<span style='color:#c26a00'>{label}</span>"

    # Picking -----------------------------------------------------------------------

    def _on_plot_click(self, event) -> None:
        row = self.bars.row_at_scene(event.scenePos())
        if row is None:
            return
        self.table.selectRow(row)
        if event.double():
            self._pick_row(row)

    def _pick_row(self, row: int) -> None:
        if 0 <= row < len(self.candidates):
            self._emit_pick(self.candidates[row])

    def _emit_pick(self, cand: Candidate) -> None:
        # A server may send no token ids (None): the window reads the text from here.
        self.last_pick = cand
        self.token_picked.emit(cand.token_id)

    def _on_menu(self, view: QAbstractItemView, pos: QPoint, names: QHeaderView | None = None) -> None:
        """The candidate's menu: at ``pos`` in ``view``, or in its row headers ``names``."""
        row = names.logicalIndexAt(pos) if names is not None else view.indexAt(pos).row()
        if not 0 <= row < len(self.candidates):
            return
        cand = self.candidates[row]
        menu = QMenu(self)
        pick = QAction(f"Continue with “{visible(cand.text)}”", menu)
        pick.triggered.connect(lambda: self._emit_pick(cand))
        ban = QAction(f"Ban “{visible(cand.text)}” (logit bias −100)", menu)
        if cand.token_id is None:  # a logit bias names an id, and the server sent none
            ban.setText(f"Ban “{visible(cand.text)}”: its token id was {NOT_REPORTED}")
            ban.setEnabled(False)
        else:
            ban.triggered.connect(lambda: self.token_banned.emit(cand.token_id))
        menu.addAction(pick)
        menu.addAction(ban)
        if view is self.table:
            copy = QAction("Copy selected rows (Ctrl+C)", menu)
            copy.triggered.connect(self.table.copy_rows)
            menu.addAction(copy)
        menu.exec((names or view).viewport().mapToGlobal(pos))
