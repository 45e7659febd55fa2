"""The packaged app: build the one-folder bundle from a clean copy of the tree and run
``--selftest`` from another directory with a bare environment. Deselect with ``-m "not bundle"``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.bundle
@pytest.mark.slow
def test_bundle_selftest(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to make a clean copy")
    tree = clean_copy(tmp_path / "tree")
    dist, work = tmp_path / "dist", tmp_path / "work"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--distpath",
            str(dist),
            "--workpath",
            str(work),
            str(tree / "packaging" / "logitscope.spec"),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    program = dist / "Logitscope" / "Logitscope"
    assert program.is_file()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "home").mkdir(parents=True)
    env = {"HOME": str(elsewhere / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    run = subprocess.run(
        [str(program), "--selftest"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["frozen"]
    assert "Paris" in report["text"] and len(report["tokens"]) >= 5
    assert report["tokens_per_s"] > 0
    bundle = str(dist / "Logitscope")
    loaded = [report["model_file"], report["mlx_module"], report["mlx_lm_module"], report["engine_module"]]
    loaded += report["mlx_library"]
    for path in loaded:
        assert path.startswith(bundle), path
        assert not path.startswith(str(ROOT)) and not path.startswith(sys.prefix), path
    # The model was converted into the bare HOME's cache, not any cache of this machine.
    assert any((elsewhere / "home").rglob("config.json"))
    assert os.path.getsize(report["model_file"]) > 90_000_000
