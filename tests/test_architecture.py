"""The architecture's rules that no import contract states: no import cycle, no mixin class,
no controller reaching into the window, and an engine whose top folder holds packages.

The graph is grimp's (import-linter's own), which counts every import: inside functions and
under ``TYPE_CHECKING`` too."""

from __future__ import annotations

import ast
import re

import grimp

from tests.support.paths import ROOT

PACKAGES = ("app", "engine", "tools", "bench")


def project_sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_module_imports_itself_back_through_others():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    # For every import M -> X: whether X imports M back, directly or through others.
    cycles = sorted(
        f"{module} -> {imported}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if imported != module and module in graph.find_upstream_modules(imported)
    )
    assert cycles == []


def test_no_class_is_a_mixin():
    """A class of ours never shares a subclass with another base: behaviour is composed (an
    object held and given what it needs), not spread over classes mixed into one."""
    ours: set[str] = set()
    trees = [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in project_sources()]
    for _, tree in trees:
        ours |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    mixed = []
    for path, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and len(node.bases) > 1:
                names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if any(name in ours for name in names):
                    mixed.append(f"{path.relative_to(ROOT)}: {node.name}({', '.join(names)})")
    assert mixed == []


def test_nothing_reaches_into_the_window():
    """Controllers get a ShellContext and what else they need, never the window to probe."""
    probes = re.compile(r"\b(getattr|hasattr)\(\s*(self\.)?_?window\b")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "app").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if probes.search(line)
    ]
    importers = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "app").rglob("*.py"))
        if "app.shell.window import" in path.read_text(encoding="utf-8") and path.name != "__main__.py"
    ]
    assert found == [] and importers == []


def test_the_engine_top_folder_holds_packages():
    modules = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert modules == ["__init__.py", "__main__.py"]


def _source(module: str) -> str:
    path = ROOT / (module.replace(".", "/") + ".py")
    return (path if path.exists() else ROOT / module.replace(".", "/") / "__init__.py").read_text(encoding="utf-8")


def test_nothing_on_the_engines_thread_touches_a_widget():
    """``app/shell/engine_thread/`` runs on the engine's thread: none of its modules, nor any
    module of ours they import (directly or through others), imports Qt's widgets or pyqtgraph."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    thread = {m for m in graph.modules if m.startswith("app.shell.engine_thread")}
    reached = set(thread).union(*(graph.find_upstream_modules(m) for m in thread))
    widgets = re.compile(
        r"^\s*(from PySide6\.QtWidgets |import PySide6\.QtWidgets|from PySide6 import .*QtWidgets"
        r"|import pyqtgraph|from pyqtgraph)",
        re.M,
    )
    touching = sorted(m for m in reached if widgets.search(_source(m)))
    assert len(thread) > 1 and touching == []


def test_only_the_layout_places_docks():
    """Docks are placed by ``app/shell/layout.py`` alone; a controller asks it for its dock."""
    placing = re.compile(r"\.(addDockWidget|tabifyDockWidget|splitDockWidget)\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "app").rglob("*.py"))
        if path != ROOT / "app" / "shell" / "layout.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if placing.search(line)
    ]
    assert found == []


def test_no_part_of_the_chat_holds_the_chat():
    """``ChatModel`` is made of parts (the thread, the streams, the selection, the served
    requests, the generation, the analyses, scoring), each given the few collaborators it
    uses: no module of the model layer but ``app.model.chat`` itself imports it, directly or
    under ``TYPE_CHECKING``, and none declares a protocol of the whole chat."""
    graph = grimp.build_graph("app", include_external_packages=False)
    model = {m for m in graph.modules if m.startswith("app.model.")}
    holders = sorted(m for m in model if "app.model.chat" in graph.find_modules_directly_imported_by(m))
    assert len(model) > 10 and holders == []
    assert not (ROOT / "app" / "model" / "chat_state.py").exists()
