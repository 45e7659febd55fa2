"""Server → Start serving…: where Logitscope listens for OpenAI API requests.

This machine's address (127.0.0.1) by default; another address answers every machine that
can reach it, so it needs an API key and the dialog says so in red before Start is pressed.
The dialog only asks; ``app.shell.controllers.serving`` starts the server and reports a refusal (a port
in use) back into it (:meth:`ServeDialog.show_error`).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.serve.address import DEFAULT_PORT, is_local

OTHER_HOST = (
    "Another address answers every machine that can reach it: requests must carry this API key "
    "(Authorization: Bearer KEY)."
)


@dataclass(frozen=True)
class ServeChoice:
    host: str
    port: int
    api_key: str | None
    """None: no key asked (this machine only)."""


class ServeDialog(QDialog):
    def __init__(self, model: str, previous: ServeChoice | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Start serving")
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"Serve <b>{model}</b> over the OpenAI API (chat, completions, logprobs, llama.cpp's sampler "
            "fields). Every request appears in the Served list, each token inspectable."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.host = QLineEdit(previous.host if previous else "127.0.0.1")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(previous.port if previous else DEFAULT_PORT)
        self.key = QLineEdit(previous.api_key or "" if previous else "")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("needed for another address")
        form.addRow("Address:", self.host)
        form.addRow("Port:", self.port)
        form.addRow("API key:", self.key)
        layout.addLayout(form)
        self.warning = QLabel(OTHER_HOST)
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color: #c0392b;")
        layout.addWidget(self.warning)
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")
        layout.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.start = buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.host.textChanged.connect(self._check)
        self.key.textChanged.connect(self._check)
        self._check()

    def choice(self) -> ServeChoice:
        return ServeChoice(self.host.text().strip(), self.port.value(), self.key.text() or None)

    def problem(self) -> str:
        """Why Start cannot be pressed, or ""."""
        choice = self.choice()
        if not choice.host:
            return "Give an address to listen on (127.0.0.1: this machine only)."
        if not is_local(choice.host) and not choice.api_key:
            return f"{choice.host} answers other machines: give an API key."
        return ""

    def show_error(self, text: str) -> None:
        self.error.setText(text)

    def _check(self) -> None:
        self.warning.setVisible(not is_local(self.host.text().strip() or "127.0.0.1"))
        why = self.problem()
        self.start.setEnabled(not why)
        self.start.setToolTip(why)

    def _accept(self) -> None:
        if not self.problem():
            self.accept()
