"""The repository explains itself: no tracked file points to a document outside it (or to
one that does not exist), and every relative link between the docs resolves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

# Spelled in pieces so that this file does not name them itself.
FORBIDDEN = ("../" + "shared", "DESIGN" + ".md", "docs/" + "CLI.md")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_points_outside_the_repository():
    found = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (screenshots, databases), or deleted in the work tree
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {word}" for word in FORBIDDEN if word in line]
    assert not found, "\n".join(found)


def test_links_between_the_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)


def test_the_architecture_page_names_real_files():
    """Every `path/file.py` it names exists (a rename must update the page)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:engine|app|tests|packaging)/[\w/]+\.(?:py|spec))", text))
    assert len(named) > 30
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing


def test_the_engine_module_table_lists_every_module():
    text = (ROOT / "docs" / "ENGINE.md").read_text(encoding="utf-8")
    table = text[text.index("## Modules") : text.index("## The sampling chain")]
    # Every module of every package, named itself or by its folder's row (`engine/stages/`);
    # a package's __init__ is its folder.
    engine = ROOT / "engine"
    modules = sorted(
        p.relative_to(ROOT).as_posix() for p in engine.rglob("*.py") if p.name != "__init__.py" or p.parent == engine
    )
    rows = "\n".join(line for line in table.splitlines() if line.startswith("| `"))
    missing = [m for m in modules if f"`{m}`" not in rows and f"| `{m.rsplit('/', 1)[0]}/` |" not in rows]
    assert not missing, missing


def test_the_app_module_table_lists_every_module_by_layer():
    """docs/APP.md's table names every module of the app's layers and of tools/."""
    text = (ROOT / "docs" / "APP.md").read_text(encoding="utf-8")
    table = text[text.index("## Modules, by layer") :]
    table = table[: table.index("\n## ")]
    modules = sorted(
        p.relative_to(ROOT).as_posix() for d in ("app", "tools") for p in (ROOT / d).rglob("*.py") if p.is_file()
    )
    missing = [m for m in modules if f"`{m}`" not in table]
    assert not missing, missing


def test_the_readme_names_every_gguf_architecture_tensor_type_and_tokenizer_the_converter_takes():
    """README's Models section says what ``engine/gguf*`` loads (issue 24, point 20: it spoke
    of llama files with five tensor types while a Gemma 3 Q4_K_M file chatted)."""
    from engine.library.convertible import ARCHITECTURES, SUPPORTED, TOKENIZER_MODELS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Models") :]
    section = section[: section.index("\n## ")]
    named = [f"`{arch}`" for arch in ARCHITECTURES] + [f"`{kind}`" for kind in TOKENIZER_MODELS]
    missing = [name for name in named if name not in section]
    missing += [t.name for t in SUPPORTED if not re.search(rf"\b{t.name}\b", section)]
    assert not missing, missing
    assert "llama-family" not in text and "llama-architecture" not in text
