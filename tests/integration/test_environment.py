"""The environment ``make run`` makes: the app and the engine start without PyTorch, which is
the tests' reference alone (installed apart, ``tests/support/reference_packages.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import reference_packages
from tests.support.paths import ROOT


def test_the_app_and_the_engine_import_no_torch():
    """What the app's process imports, in a process of this environment as ``make run`` starts
    it (no test path): transformers (through mlx-lm) finds no torch and imports none."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import app.shell.window, engine.session.session, sys; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_the_tests_have_torch_for_their_references():
    """The tests' own processes do: the folder is there and torch imports from it."""
    assert reference_packages.use()
    import torch

    assert str(reference_packages.FOLDER) in str(torch.__file__)
