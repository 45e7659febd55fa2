"""The Compare models dialog: which second model (a folder, a GGUF file, a repo id or
``default``) and how it computes, then the load's and the comparison's progress, a refusal
in the engine's own words, and the result — llama-perplexity's summary of the reply under
both models, the worst tokens, and an export.

The settings are rows of one form (:meth:`CompareModelsDialog.settings` reads them into an
``app.model.model_compare.CompareSettings``): the source, the precision and the KV cache (Off,
8-bit, 4-bit, as Models → KV cache offers); a further load setting is one more row there.
Choosing a quantized KV cache for the running model's own source sets the running precision,
so the comparison is the running model against its own quantized cache (its weights shared:
nothing is loaded). The dialog only shows; the shell's
``app.shell.controllers.compare_models`` runs the job and calls the ``show_*`` methods.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QDialogButtonBox, QFormLayout, QLabel, QVBoxLayout, QWidget

from app.model.kv_cache import CHOICE_LABELS as KV_LABELS
from app.model.kv_cache import CHOICE_TIPS as KV_TIPS
from app.model.kv_cache import CHOICES as KV_CHOICES
from app.model.kv_cache import OFF
from app.model.model_compare import CompareSettings, Comparison, num, plus_minus
from app.model.textfmt import escape, visible
from app.views.file_dialogs import Folders
from app.views.model_dialogs import JobDialog, SourcePicker, cpu_bfloat16_note, precision_choice

SOURCE_TIP = "A model folder, a .gguf file, a Hugging Face repo id, or default (the bundled model)."
KV_TIP = (
    "The second model's KV cache. The running model's own source in its own precision with a quantized "
    "cache shares the running weights (nothing is loaded): what the quantized cache alone changes."
)


def _percent(decimals: int):
    return lambda value: f"{100 * value:.{decimals}f}%"


def result_html(c: Comparison) -> str:
    """The summary as a small table (rich text), the worst tokens under it."""
    s = c.stats
    pct = s["kld_percentiles"]
    rows = (
        ("Running model", escape(c.base.label)),
        ("Compared with", escape(c.second.label)),
        ("Tokens", str(s["tokens"])),
        ("Mean KLD", f"{num(s['kld_mean'])} {plus_minus(s['kld_mean_se'])} nats"),
        ("Median · 99th pct · max", f"{num(s['kld_median'])} · {num(pct.get('p99', 0.0))} · {num(s['kld_max'])}"),
        ("Same most likely token", f"{100 * s['same_top']:.1f}% {plus_minus(s['same_top_se'], _percent(1))}"),
        ("RMS Δp", f"{100 * s['dp_rms']:.2f}% {plus_minus(s['dp_rms_se'], _percent(2))}"),
        ("PPL running · compared", f"{num(s['ppl_base'])} · {num(s['ppl_model'])}"),
        ("PPL ratio", f"{s['ppl_ratio']:.4f} {plus_minus(s['ppl_ratio_se'], '{:.4f}'.format)}"),
    )
    cells = "".join(f"<tr><td>{k}&nbsp;&nbsp;</td><td><b>{v}</b></td></tr>" for k, v in rows)
    pieces = {r.index: escape(visible(c.piece(r.token_id))) for r in c.worst()}
    worst = ", ".join(f"#{r.index} <code>{pieces[r.index]}</code>: {num(r.kld)}" for r in c.worst())
    return f"<table>{cells}</table><p>Largest KLD: {worst}</p>"


class CompareModelsDialog(JobDialog):
    compare_requested = Signal(object)  # CompareSettings
    export_requested = Signal()

    def __init__(
        self,
        running: str,
        sources: list[str],
        precision: str,
        parent: QWidget | None = None,
        running_precision: str = "",
        folders: Folders | None = None,
        device: str = "",
    ) -> None:
        """``running``: the running model's label; ``sources``: the choices offered first
        (the running model's own source first); ``precision``: the one chosen at first;
        ``running_precision``: what the running model computes in (set when a quantized KV
        cache is chosen for its own source); ``folders``: where its file dialogs open; ``device``:
        MLX's (``ModelInfo.device``: on ``cpu``, bfloat16 is said to be slow)."""
        super().__init__(parent)
        self.running_source = sources[0] if sources else ""
        self.running_precision = running_precision
        self.setWindowTitle("Compare models")
        layout = QVBoxLayout(self)
        self.intro = QLabel(
            f"The selected reply's tokens under the running model, <b>{escape(running)}</b>, and a second "
            "model sharing its vocabulary: KL divergence per token over the whole vocabulary."
        )
        self.intro.setWordWrap(True)
        layout.addWidget(self.intro)
        form = QFormLayout()
        self.picker = SourcePicker(sources, SOURCE_TIP, folders or Folders(None), "to compare with")
        self.source, self.folder_button, self.gguf_button = (
            self.picker.combo,
            self.picker.folder_button,
            self.picker.gguf_button,
        )
        form.addRow("Second model", self.picker)
        self.precision = precision_choice(precision)
        form.addRow("Precision", self.precision)
        self.slow_note = cpu_bfloat16_note(self.precision, device)
        form.addRow(self.slow_note)
        self.kv = QComboBox()
        for bits in KV_CHOICES:
            self.kv.addItem(KV_LABELS[bits], bits)
            self.kv.setItemData(self.kv.count() - 1, KV_TIPS[bits], Qt.ItemDataRole.ToolTipRole)
        self.kv.setToolTip(KV_TIP)
        self.kv.currentIndexChanged.connect(self._kv_chosen)
        form.addRow("KV cache", self.kv)
        self.form = form  # a further load setting is one more row
        layout.addLayout(form)
        self.result = QLabel("")
        self.result.setTextFormat(Qt.TextFormat.RichText)
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for widget in (self.progress, self.message, self.result):
            layout.addWidget(widget)
        layout.addStretch(1)
        buttons = QDialogButtonBox()
        self.export_button = buttons.addButton("Export…", QDialogButtonBox.ButtonRole.ActionRole)
        self.export_button.setToolTip("The per-token records and the summary: JSON Lines or CSV")
        self.export_button.clicked.connect(self.export_requested.emit)
        self.export_button.hide()
        self.compare_button = buttons.addButton("Compare", QDialogButtonBox.ButtonRole.AcceptRole)
        self.compare_button.setDefault(True)
        self.compare_button.clicked.connect(lambda: self.compare_requested.emit(self.settings()))
        self.close_button = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.close_button.clicked.connect(self._close_clicked)
        layout.addWidget(buttons)
        self.resize(560, 300)

    def settings(self) -> CompareSettings:
        return CompareSettings(self.source.currentText().strip(), self.precision.currentData(), self.kv.currentData())

    def _kv_chosen(self, _index: int) -> None:
        """A quantized cache for the running model's own source: in its own precision, so the
        comparison measures the cache alone (and shares the running weights)."""
        own = self.source.currentText().strip() == self.running_source
        if self.kv.currentData() != OFF and own and self.running_precision:
            self.precision.setCurrentIndex(max(0, self.precision.findData(self.running_precision)))

    # What the shell reports ----------------------------------------------------------------

    def _set_running(self, running: bool) -> None:
        super()._set_running(running)
        self.picker.set_running(running)
        for widget in (self.precision, self.kv, self.compare_button):
            widget.setEnabled(not running)

    def show_started(self, settings: CompareSettings) -> None:
        self._set_running(True)
        self.result.setText("")
        self.export_button.hide()
        self._say(f"Loading {escape(settings.words())}…")

    def show_loaded(self, label: str) -> None:
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self._say(f"Comparing with {escape(label)}…")

    def show_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, 100)
        self.progress.setValue(int(100 * done / max(total, 1)))
        self.progress.setFormat(f"{done}/{total} tokens")

    def show_cancelled(self) -> None:
        self._set_running(False)
        self._say("Cancelled: nothing was compared.")

    def show_result(self, comparison: Comparison) -> None:
        self._set_running(False)
        n = len(comparison.rows)
        self._say(f"Compared {n} tokens: the timeline's KLD row and the inspector's Models tab show each one.")
        self.result.setText(result_html(comparison))
        self.export_button.show()
        self.adjustSize()  # the summary is taller than the dialog as first laid out
