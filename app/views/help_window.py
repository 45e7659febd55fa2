"""Help → Logitscope Help: the documentation that ships with the app, read offline.

The README (what a user needs first) opens in a window of its own; its links to
``docs/*.md`` (the app, the engine, servers, exports, benchmarks) open in the same window,
with its screenshots (scaled to the page's width, :class:`HelpBrowser`), and a web link
opens in the browser. Qt renders the Markdown itself (``QTextBrowser`` takes ``.md``
sources as Markdown). The packaged app carries the same
files (``packaging/logitscope.spec``: ``help/``), found by :func:`help_root`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QSize, QUrl
from PySide6.QtGui import QDesktopServices, QImageReader, QKeySequence, QResizeEvent, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QTextBrowser, QVBoxLayout, QWidget

HELP_START = "README.md"
IMAGE_MARGIN = 8
"""Pixels a screenshot keeps free of the page's right edge."""


class HelpBrowser(QTextBrowser):
    """A QTextBrowser that draws a page's images no wider than the page: Qt draws them at
    their own size, so the README's 1400 px screenshots were cropped at the window's edge."""

    def __init__(self) -> None:
        super().__init__()
        self._sizes: dict[str, QSize] = {}
        self.sourceChanged.connect(lambda _url: self.fit_images())

    def natural_size(self, name: str) -> QSize:
        """The image ``name`` (relative to the page) at its own size (invalid: not found)."""
        path = self.source().resolved(QUrl(name)).toLocalFile()
        if path not in self._sizes:
            self._sizes[path] = QImageReader(path).size()
        return self._sizes[path]

    def fit_images(self) -> None:
        """Every image of the page at most as wide as the page, its proportions kept."""
        room = max(1, self.viewport().width() - 2 * int(self.document().documentMargin()) - IMAGE_MARGIN)
        found = []
        block = self.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.charFormat().isImageFormat():
                    found.append((fragment.position(), fragment.length(), fragment.charFormat().toImageFormat()))
                it += 1
            block = block.next()
        cursor = QTextCursor(self.document())
        for position, length, image in found:
            natural = self.natural_size(image.name())
            if not natural.isValid():
                continue
            width = min(natural.width(), room)
            if abs(image.width() - width) < 1:
                continue
            image.setWidth(width)
            image.setHeight(natural.height() * width / natural.width())
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(image)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.fit_images()


def help_root() -> Path:
    """The folder holding ``README.md`` and ``docs/``: inside the frozen app, or the source tree."""
    base = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and base is not None:
        return Path(base) / "help"
    return Path(__file__).resolve().parent.parent.parent


class HelpWindow(QWidget):
    """The documentation, with Back, Forward and Contents (the README)."""

    def __init__(self, parent: QWidget | None = None, root: Path | None = None) -> None:
        super().__init__(parent)
        self.root = root or help_root()
        self.setWindowTitle("Logitscope Help")
        self.resize(900, 700)
        self.browser = HelpBrowser()
        self.browser.setOpenLinks(False)  # every link goes through _on_link
        self.browser.setSearchPaths([str(self.root)])
        self.browser.anchorClicked.connect(self._on_link)
        self.back = QPushButton("Back")
        self.forward = QPushButton("Forward")
        self.home = QPushButton("Contents")
        self.back.setShortcut(QKeySequence.StandardKey.Back)
        self.forward.setShortcut(QKeySequence.StandardKey.Forward)
        self.back.clicked.connect(self.browser.backward)
        self.forward.clicked.connect(self.browser.forward)
        self.home.clicked.connect(self.open_start)
        self.browser.backwardAvailable.connect(self.back.setEnabled)
        self.browser.forwardAvailable.connect(self.forward.setEnabled)
        self.back.setEnabled(False)
        self.forward.setEnabled(False)
        buttons = QHBoxLayout()
        for button in (self.back, self.forward, self.home):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.browser, 1)
        self.open_start()

    def open_start(self) -> None:
        start = self.root / HELP_START
        if start.is_file():
            self.browser.setSource(QUrl.fromLocalFile(str(start)))
        else:  # a broken install: say where it was looked for rather than show nothing
            self.browser.setPlainText(f"The documentation was not found (looked for {start}).")

    def open_page(self, relative: str) -> None:
        """Open ``relative`` (``docs/APP.md``) under the help folder."""
        self.browser.setSource(QUrl.fromLocalFile(str(self.root / relative)))

    def _on_link(self, url: QUrl) -> None:
        """A web link opens in the browser; a page of the documentation (or a place in it)
        opens here, in the window's history."""
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
            return
        target = self.browser.source().resolved(url) if url.isRelative() else url
        here = self.browser.source()
        if url.hasFragment() and (target.scheme(), target.path()) == (here.scheme(), here.path()):
            self.browser.scrollToAnchor(url.fragment())
        else:
            self.browser.setSource(target)
