"""Guards against the PySide6 6.12.0 / Python 3.11 bug that drops a reference to None
on every void Qt call (pyqtgraph then aborts with 'none_dealloc'); docs/ARCHITECTURE.md,
Known pitfalls."""

import sys

import pytest

QtWidgets = pytest.importorskip("PySide6.QtWidgets")


def test_void_qt_calls_keep_none_refcount():
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    widget = QtWidgets.QWidget()
    before = sys.getrefcount(None)
    for _ in range(1000):
        widget.update()
    after = sys.getrefcount(None)
    assert before - after < 50, f"None lost {before - after} references in 1,000 update() calls"
    widget.deleteLater()
    app.processEvents()


def test_pinned_versions():
    import pyqtgraph
    import PySide6

    major, minor = (int(x) for x in PySide6.__version__.split(".")[:2])
    assert (major, minor) < (6, 12) or sys.version_info >= (3, 12)
    assert pyqtgraph.__version__ == "0.14.0"
