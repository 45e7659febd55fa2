"""Models → "Connect to a server…": an OpenAI-compatible server's URL, one of its models,
where its API key comes from, and which distribution its logprobs are.

The model list comes from the server's ``/v1/models`` through ``engine.remote.backend.probe``,
which blocks: it runs on a plain thread and reports back through a queued signal, with a
busy bar meanwhile and the server's error in the dialog. A server that answers but cannot
list its models (mlx_lm.server on a fresh home folder) is said so, with why, and a model
typed in is used as typed. The API key is read from an
environment variable or the OS keychain (:mod:`app.model.keys`) when needed and kept in memory
only; the settings remember the URL, the model, the variable's name and the stage, never
the key. Once the server answered, the dialog says what its kind can and cannot do
(``engine.remote.abilities``, from the kind's own data) before the first reply.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.model import keys
from app.model.remote_jobs import RemoteSpec
from app.model.remote_labels import STAGE_CHOICES, STAGE_WORDS, plain_http_warning, server_title

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_ENV = "OPENAI_API_KEY"
KEY_CHOICES = ((keys.NONE, "No API key"), (keys.ENV, "Environment variable"), (keys.KEYCHAIN, "OS keychain"))


ITEM_FLAGS_ROLE = Qt.ItemDataRole.UserRole - 1
"""Where a combo box's QStandardItemModel keeps an item's flags."""
ITEM_DISABLED = Qt.ItemFlag.ItemIsSelectable.value  # selectable by the model, never chosen: greyed


def item_enabled(combo: QComboBox, index: int) -> bool:
    """Whether item ``index`` of ``combo`` can be chosen (read by index, not through an item)."""
    model = combo.model()
    return bool(model.flags(model.index(index, 0)) & Qt.ItemFlag.ItemIsEnabled)


class _ProbeRelay(QObject):
    """Lives on the GUI thread; the probe thread emits, Qt queues the call here. It has no
    parent: the probe thread holds it, so a dialog closed (and deleted) before the server
    answers leaves the relay alive to emit into nothing. As the dialog's child it was deleted
    with it, and the late emit from the probe thread crashed the process (seen in the tests)."""

    done = Signal(int, object, object)  # probe number, (kind, models) or None, exception or None


class ConnectDialog(QDialog):
    connect_requested = Signal(object)  # RemoteSpec
    probe_failed = Signal(str)  # what the dialog says when the server could not be asked (logged)

    def __init__(self, settings: QSettings, parent: QWidget | None = None, probe=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.setMinimumWidth(560)
        self.settings = settings
        self._probe_fn = probe
        self._probes = 0
        self.server_kind = ""
        self.relay = _ProbeRelay()
        self.relay.done.connect(self._on_probed)

        self.url = QLineEdit(str(settings.value("remote/url", DEFAULT_URL)))
        self.url.setPlaceholderText("http://host:port (with or without /v1)")
        self.warning = QLabel("")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color: #c26a00;")
        self.key_kind = QComboBox()
        for kind, text in KEY_CHOICES:
            self.key_kind.addItem(text, kind)
        self.env_name = QLineEdit(str(settings.value("remote/key_env", DEFAULT_ENV)))
        self.env_name.setToolTip("The environment variable that holds the API key (the key is read, never saved)")
        self.keychain_key = QLineEdit()
        self.keychain_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.keychain_key.setPlaceholderText("paste a key to save it in the keychain (optional)")
        self.save_key = QPushButton("Save in keychain")
        self.save_key.clicked.connect(self._save_key)
        self.key_note = QLabel("")
        self.key_note.setWordWrap(True)
        ok, words = keys.keychain_status()
        self.keychain_ok = ok
        if not ok:
            # By the model's index, never a QStandardItem wrapper: PySide does not learn when the
            # combo deletes an item, and a stale wrapper at a reused address was handed back for
            # another object later (a crash in the tests, a wrong type in CI).
            self.key_kind.setItemData(2, ITEM_DISABLED, ITEM_FLAGS_ROLE)
            self.key_kind.setItemText(2, "OS keychain (not available)")
            self.keychain_note = f"No OS keychain here ({words}); put the key in an environment variable instead."
            # Said where the choice is made, not under "No API key": no key is used then.
            self.key_kind.setItemData(2, self.keychain_note, Qt.ItemDataRole.ToolTipRole)
        else:
            self.keychain_note = f"The key is read from the {words} for this server's host."
        saved_kind = str(settings.value("remote/key_kind", keys.NONE))
        index = self.key_kind.findData(saved_kind)
        if index >= 0 and item_enabled(self.key_kind, index):
            self.key_kind.setCurrentIndex(index)

        self.list_button = QPushButton("List models")
        self.list_button.clicked.connect(self.probe)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(120)
        self.busy.hide()
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.setMinimumContentsLength(30)
        saved_model = str(settings.value("remote/model", ""))
        if saved_model:  # the model typed or chosen last time, offered again
            self.model.addItem(saved_model)
            self.model.setCurrentText(saved_model)
        self.server_label = QLabel("Press “List models” to ask the server what it serves.")
        self.server_label.setWordWrap(True)
        self.abilities = QLabel("")
        self.abilities.setWordWrap(True)
        self.abilities.hide()
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stage = QComboBox()
        for name in STAGE_CHOICES:
            self.stage.addItem(name if name == "auto" else f"{name}: {STAGE_WORDS[name]}", name)
        self.stage.setCurrentIndex(max(0, self.stage.findData(str(settings.value("remote/stage", "auto")))))
        self.stage.setToolTip(
            "Which distribution the server's logprobs are. auto: from the server kind (see docs/REMOTE.md); "
            "set it when the server kind is unknown or was started with another logprobs mode"
        )
        self.timeout = QDoubleSpinBox()
        self.timeout.setRange(1, 3600)
        self.timeout.setSuffix(" s")
        self.timeout.setValue(float(settings.value("remote/timeout", 60.0)))
        self.timeout.setToolTip("Seconds without a byte from the server before a request fails")
        self.template = QLineEdit(str(settings.value("remote/chat_template", "")))
        self.template.setPlaceholderText("optional: a local tokenizer folder (needed for mlx_lm.server branches)")
        self.template.setToolTip(
            "Servers that cannot continue an assistant message (mlx_lm.server) continue branches and live "
            "changes through /v1/completions with the chat rendered here from this folder's template. "
            "Left empty for mlx_lm.server serving a local folder, that folder is used."
        )

        form = QFormLayout()
        form.addRow("Server URL", self.url)
        form.addRow("", self.warning)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key_kind)
        key_row.addWidget(self.env_name, 1)
        key_row.addWidget(self.keychain_key, 1)
        key_row.addWidget(self.save_key)
        form.addRow("API key", key_row)
        form.addRow("", self.key_note)
        model_row = QHBoxLayout()
        model_row.addWidget(self.model, 1)
        model_row.addWidget(self.list_button)
        model_row.addWidget(self.busy)
        form.addRow("Model", model_row)
        form.addRow("Logprobs are", self.stage)
        form.addRow("Timeout", self.timeout)
        form.addRow("Chat template", self.template)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        # Below the form, full width: QFormLayout clips a wrapped label's later lines.
        layout.addWidget(self.server_label)
        layout.addWidget(self.abilities)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

        self.url.textChanged.connect(self._on_url)
        self.key_kind.currentIndexChanged.connect(self._on_key_kind)
        self._on_url()
        self._on_key_kind()

    # The form ---------------------------------------------------------------------------

    def _on_url(self) -> None:
        text = plain_http_warning(self.url.text())
        self.warning.setText(f"⚠ {text}" if text else "")
        self.warning.setVisible(bool(text))

    def _on_key_kind(self) -> None:
        kind = self.key_kind.currentData()
        self.env_name.setVisible(kind == keys.ENV)
        self.keychain_key.setVisible(kind == keys.KEYCHAIN)
        self.save_key.setVisible(kind == keys.KEYCHAIN)
        # A sentence about where the key comes from only when a key is used.
        if kind == keys.ENV:
            self.key_note.setText("The key is read from this variable when connecting; it is never saved.")
        elif kind == keys.KEYCHAIN:
            self.key_note.setText(self.keychain_note)
        else:
            self.key_note.setText("")
        self.key_note.setVisible(bool(self.key_note.text()))

    def key_source(self) -> keys.KeySource:
        kind = self.key_kind.currentData()
        if kind == keys.ENV:
            return keys.KeySource(keys.ENV, self.env_name.text().strip())
        if kind == keys.KEYCHAIN:
            return keys.KeySource(keys.KEYCHAIN, keys.account_for(self.url.text().strip()))
        return keys.KeySource()

    def _save_key(self) -> None:
        try:
            keys.store_key(keys.account_for(self.url.text().strip()), self.keychain_key.text())
        except keys.KeyUnavailable as exc:
            self.error.setText(str(exc))
            return
        self.keychain_key.clear()
        self.key_note.setText("Saved in the OS keychain.")

    def _read_key(self) -> str | None:
        try:
            return keys.read_key(self.key_source())
        except keys.KeyUnavailable as exc:
            self.error.setText(f"API key: {exc}")
            raise

    # Probing the server -----------------------------------------------------------------

    def probe(self) -> None:
        """Ask the server for its models on a thread of its own."""
        url = self.url.text().strip()
        if not url:
            self.error.setText("Enter the server's URL.")
            return
        try:
            key = self._read_key()
        except keys.KeyUnavailable:
            return
        self._probes += 1
        number = self._probes
        self.error.setText("")
        self.server_label.setText(f"Asking {url}/v1/models…")
        self.busy.show()
        self.list_button.setEnabled(False)
        probe = self._probe_fn
        if probe is None:
            from engine.remote.backend import probe

        relay = self.relay

        def run() -> None:
            try:
                result = probe(url, api_key=key, timeout=5, retries=0)
            except Exception as exc:  # shown in the dialog
                relay.done.emit(number, None, exc)
                return
            relay.done.emit(number, result, None)

        threading.Thread(target=run, name="probe", daemon=True).start()

    @Slot(int, object, object)
    def _on_probed(self, number: int, result, exc) -> None:
        if number != self._probes:
            return  # an earlier probe answered late
        self.busy.hide()
        self.list_button.setEnabled(True)
        if exc is not None:
            self.server_label.setText("")
            self.error.setText(f"Could not list the server's models: {exc}")
            self._show_abilities("")
            self._fit()
            self.probe_failed.emit(f"{self.url.text().strip()}: {self.error.text()}")
            return
        kind, models, problem = result.kind, result.models, result.problem
        self.server_kind = kind
        current = self.model.currentText()
        self.model.clear()
        self.model.addItems(models)
        self.model.setCurrentText(current if current in models or not models else models[0])
        title = server_title(kind)
        self.server_label.setStyleSheet("color: #c26a00;" if problem else "")
        if problem:  # it answered: a model typed here is used as typed
            self.server_label.setText(f"⚠ {title} could not list its models: {problem}. Type the model's name.")
            self.model.setFocus()
        elif models:
            self.server_label.setText(f"{title}: {len(models)} model(s).")
        else:
            self.server_label.setText(f"{title}: it lists no models; type the model's name.")
        self._show_abilities(kind)
        self._fit()

    def _fit(self) -> None:
        """Grow to show every line of the wrapped sentences (the server's advice, what it can
        do): a dialog keeps the height it was opened with, and its layout's minimum ignores
        a wrapped label's height for the width it has."""
        layout = self.layout()
        layout.activate()
        need = layout.totalHeightForWidth(self.width())
        if need > self.height():
            self.setMinimumHeight(need)
            self.resize(self.width(), need)

    def _show_abilities(self, kind: str) -> None:
        from engine.remote.abilities import abilities

        words = abilities(kind)
        self.abilities.setText("\n".join(f"• {w}" for w in words))
        self.abilities.setVisible(bool(words))

    @property
    def probing(self) -> bool:
        return self.busy.isVisible()

    # Connecting -------------------------------------------------------------------------

    def spec(self) -> RemoteSpec | None:
        url = self.url.text().strip()
        if not url:
            self.error.setText("Enter the server's URL.")
            return None
        try:
            key = self._read_key()
        except keys.KeyUnavailable:
            return None
        model = self.model.currentText().strip()
        template = self.template.text().strip() or None
        if template is None and self.server_kind == "mlx_lm" and model and Path(model).is_dir():
            template = model  # mlx_lm.server names a local model by its folder
        return RemoteSpec(url, model, key, self.stage.currentData(), self.timeout.value(), template)

    def accept(self) -> None:
        spec = self.spec()
        if spec is None:
            return
        source = self.key_source()
        self.settings.setValue("remote/url", spec.url)
        self.settings.setValue("remote/model", spec.model)
        self.settings.setValue("remote/key_kind", source.kind)
        self.settings.setValue("remote/key_env", self.env_name.text().strip())
        self.settings.setValue("remote/stage", spec.stage)
        self.settings.setValue("remote/timeout", spec.timeout)
        self.settings.setValue("remote/chat_template", self.template.text().strip())
        self.connect_requested.emit(spec)
        super().accept()
