"""Every bench figure runs: ``python -m bench --smoke`` runs each figure of ``FIGURES`` at its
smallest size on small random models (its numbers are not checked), and a figure that waits
on the app's worker ends with one line on stderr when the worker fails, instead of waiting.

The smoke run is one process of about 30 s (half of it figure 15's three app and peer
launches), so that ``make test`` finds a figure that stopped running (issue 33, item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from bench.__main__ import FIGURES
from bench.common import UNAVAILABLE
from bench.guard import drifted
from bench.table import table
from tests.support.paths import ROOT


def _bench(args: list[str], timeout: float, script: str | None = None) -> subprocess.CompletedProcess:
    """``python -m bench ARGS`` (or ``script``, which calls ``bench.__main__.main``). TMPDIR is
    left as it is: MLX keeps its compiled CPU kernels there, and a fresh one compiles them all
    again (chain_cost took 14 s instead of 1); a smoke run removes what it writes itself."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "bench", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_every_figure_runs_in_smoke_mode() -> None:
    """Every bench figure runs end to end at its smallest size and leaves a result.

    Slow: one ``python -m bench --smoke`` runs every figure, each loading its models; a
    figure left out would rot unnoticed."""
    run = _bench(["--smoke", "--json"], timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout)
    assert results["smoke"] is True
    for name in FIGURES:
        assert name in results, f"figure {name} left no result: {run.stderr[-2000:]}"
        result = results[name]
        # A string only where the machine lacks something, in the words bench.common names.
        assert isinstance(result, dict) or result in UNAVAILABLE, (name, result)
        assert result, name
    print("seconds per figure:", results["seconds"])
    # The table reads every figure's result as the full run's (same shapes, fewer rows).
    lines = table(results).splitlines()
    assert len(lines) > len(FIGURES), lines


class _Real:
    def load(self, source: str, progress=None, precision: str = "auto", kv=None): ...

    @staticmethod
    def memory_bytes() -> int:
        return 0


def test_drifted_names_a_call_whose_signature_changed() -> None:
    class Behind(_Real):
        def load(self, source, progress=None): ...  # the arguments added since are missing

        def memory_bytes(self) -> int:  # a method for a staticmethod: the same call
            return 1

        def helper(self, x): ...  # its own: not the real one's business

    class Current(_Real):
        def load(self, source, progress=None, precision="auto", kv=None): ...

    assert drifted(Behind, _Real) == [
        "load: stand-in (source, progress=None) vs real (source, progress=None, precision='auto', kv=None)"
    ]
    assert drifted(Current, _Real) == []


def test_the_gui_scaling_stand_in_keeps_the_session_calls() -> None:
    from bench.gui_scaling import SyntheticSession
    from engine.api.backend import Backend
    from engine.session.session import EngineSession

    assert drifted(SyntheticSession, EngineSession) == []
    assert isinstance(SyntheticSession(2, 100.0), Backend)


FAILURES = {
    "load": """
        def load(self, source, progress=None, precision="auto", kv=None):
            raise OSError("the disk went away")
        g.SyntheticSession.load = load
    """,
    # The bug of issue 33: a stand-in whose load fell behind the worker's call.
    "drift": """
        def load(self, source, progress=None):
            return None
        g.SyntheticSession.load = load
    """,
    "step": """
        def step(self):
            if self.request is None:
                return []
            self.request = None  # the worker cancels and steps once more: that one succeeds
            raise ValueError("the step failed")
        g.SyntheticSession.step = step
    """,
}
SAID = {
    "load": "figure gui_scaling: the stand-in model's load: the app reported: Could not load synthetic. "
    "OSError: the disk went away",
    "drift": "figure gui_scaling: the stand-in session no longer matches EngineSession: load: stand-in "
    "(source, progress=None) vs real (source, progress=None, precision='auto', kv=None)",
    "step": "figure gui_scaling: the 20-token reply: the app reported: generation failed: ValueError: the step failed",
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failing_worker_ends_the_bench_with_its_reason(failure: str) -> None:
    script = "import sys\nimport bench.gui_scaling as g\nfrom bench.__main__ import main\n"
    script += textwrap.dedent(FAILURES[failure])
    script += "sys.exit(main(sys.argv[1:]))\n"
    run = _bench(["--smoke", "--only", "gui_scaling"], timeout=120, script=script)
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stdout == ""
    last = run.stderr.strip().splitlines()[-1]
    assert last == f"python -m bench: {SAID[failure]}", run.stderr[-3000:]
