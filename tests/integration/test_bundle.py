"""The packaged app, through the make targets the macOS workflow runs (.github/workflows/macos.yml):
``make app`` builds the one-folder bundle from a clean copy of the tree, ``make app-selftest``
runs its ``--selftest`` from another directory with a bare environment and an empty HOME, and
``make app-zip`` zips it. Deselect with ``-m "not bundle"``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.make_util import outside_make
from tests.support.paths import ROOT


def clean_copy(dest: Path) -> Path:
    """The files git would commit (tracked + untracked-not-ignored): no caches, no .venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def make(target: str, tree: Path, dist: Path, build: Path, timeout: float) -> subprocess.CompletedProcess:
    """``make TARGET`` in the copy, with this environment's tools as they are (``INSTALL=``:
    no venv is made in the copy) and the bundle under tmp_path."""
    scripts = sysconfig.get_path("scripts")
    # ZIP_LEVEL=0: stored, not compressed (3 s instead of 53 s here; packaging/README.md).
    variables = [f"DIST={dist}", f"BUILD={build}", "INSTALL=", f"BIN={scripts}", "ZIP_LEVEL=0"]
    command = ["make", "--no-print-directory", target, *variables]
    return subprocess.run(command, cwd=tree, capture_output=True, text=True, env=outside_make(), timeout=timeout)


@pytest.mark.bundle
@pytest.mark.slow
def test_bundle_selftest(tmp_path):
    """The packaged app from a clean copy of the tree, then its own self-test.

    Slow: it builds the whole bundle (PyInstaller over Qt, MLX and mlx-lm) and starts it;
    nothing smaller shows that the shipped files run."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to make a clean copy")
    if shutil.which("make") is None or shutil.which("zip") is None:
        pytest.skip("needs make and zip")
    tree = clean_copy(tmp_path / "tree")
    dist, build = tmp_path / "dist", tmp_path / "build"
    built = make("app", tree, dist, build, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    program = dist / "Logitscope" / "Logitscope"
    assert program.is_file()
    run = make("app-selftest", tree, dist, build, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["frozen"]
    assert "Paris" in report["text"] and len(report["tokens"]) >= 5
    assert report["tokens_per_s"] > 0
    bundle = str(dist / "Logitscope")
    loaded = [report["model_file"], report["mlx_module"], report["mlx_lm_module"], report["engine_module"]]
    loaded += report["mlx_library"]
    # Help → Logitscope Help: the README, every doc and the screenshots, inside the bundle.
    loaded.append(report["help"])
    assert Path(report["help"]).is_file()
    assert report["help_pages"] == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert report["help_screenshots"] == len(list((ROOT / "docs" / "screenshots").glob("*.png")))
    for path in loaded:
        assert path.startswith(bundle), path
        assert not path.startswith(str(ROOT)) and not path.startswith(sys.prefix), path
    # The model was converted into the self-test's empty HOME, not any cache of this machine.
    assert any((build / "selftest-home").rglob("config.json"))
    assert os.path.getsize(report["model_file"]) > 90_000_000
    zipped = make("app-zip", tree, dist, build, timeout=600)
    assert zipped.returncode == 0, zipped.stderr[-3000:]
    archive = Path(zipped.stdout.strip().splitlines()[-1])
    assert archive.parent == dist and archive.name.startswith("Logitscope-") and archive.suffix == ".zip"
    with zipfile.ZipFile(archive) as contents:
        names = set(contents.namelist())
    inside = {str(path.relative_to(dist)) for path in (dist / "Logitscope").rglob("*") if not path.is_dir()}
    assert inside <= names and "Logitscope/Logitscope" in names
