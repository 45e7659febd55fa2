"""Models → Surprise of every token (``app/model/surprise.py``, ``app/views/surprise_timeline.py``):
each drawn token's surprise (bits) and rank under the model's raw distribution, checked
against NumPy over the whole distribution the steps were made from, and the timeline row
drawing a real reply's stored logprobs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from app.model.chat import ChatModel
from app.model.model_in_use import ModelInUse
from app.model.surprise import SurpriseAnalysis, token_surprise
from app.store.store import Store
from engine.api.events import Candidate, TokenStep
from engine.api.params import SamplingParams

V, T, K = 40, 60, 5


def steps_from(logits: np.ndarray, drawn: np.ndarray, k: int = K) -> list[TokenStep]:
    """Steps as the engine stores them: the drawn token's raw logprob and the ``k`` most
    likely candidates (their raw logprobs), nothing else of the distribution."""
    logprobs = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    steps = []
    for i, token in enumerate(drawn):
        best = np.argsort(-logprobs[i], kind="stable")[:k]
        top = tuple(
            Candidate(int(t), f"t{t}", float(logits[i, t]), (float(logprobs[i, t]),), None, None, None, None)
            for t in best
        )
        steps.append(
            TokenStep(
                request_id=0, index=i, position=i, token_id=int(token), text=f"t{token}", piece=f"t{token}",
                chain=("raw",), logprobs=(float(logprobs[i, token]),), entropies=(None,), survivors=(None,),
                top=top, params=SamplingParams(),
            )
        )  # fmt: skip
    return steps


def test_surprise_and_rank_are_numpys_over_the_whole_distribution():
    rng = np.random.default_rng(7)
    logits = rng.normal(0.0, 2.5, size=(T, V))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # independent of the steps' log-softmax
    drawn = np.array([rng.choice(V, p=row) for row in p])
    rows = [token_surprise(s) for s in steps_from(logits, drawn)]
    chosen = p[np.arange(T), drawn]
    np.testing.assert_allclose([r.bits for r in rows], -np.log2(chosen), rtol=1e-9)
    full_rank = 1 + (p > chosen[:, None]).sum(-1)  # over every token of the vocabulary
    expected = [int(r) if r <= K else None for r in full_rank]  # beyond the k held: not known
    assert [r.rank for r in rows] == expected
    assert any(r is None for r in expected) and any(r == 1 for r in expected) and any(r and r > 1 for r in expected)
    assert all(r.held == K for r in rows)


def test_a_scored_texts_recorded_rank_and_a_servers_missing_logprob():
    logits = np.zeros((1, V))
    logits[0, 3] = 5.0
    (step,) = steps_from(logits, np.array([9]))
    assert token_surprise(replace(step, rank=17)).rank == 17  # a scored text's own record
    unknown = token_surprise(replace(step, logprobs=(None,)))
    assert math.isnan(unknown.bits) and unknown.rank is None


@pytest.mark.parametrize("rank_one", [True, False])
def test_the_most_surprising_unexpected_tokens_are_labelled(tmp_path, rank_one):
    logits = np.tile(np.linspace(3.0, -3.0, V), (4, 1))
    drawn = np.array([0, 4, 2, 0 if rank_one else 30])
    analysis = SurpriseAnalysis(ChatModel(Store(tmp_path / "db.sqlite3")).reading, ModelInUse())
    result = analysis.compute(("branch", 1), steps_from(logits, drawn))
    worst = result.worst()
    assert [r.index for r in worst] == ([1, 2] if rank_one else [3, 1, 2])
    assert result.at(4) is None and result.at(0).rank == 1


def test_the_timeline_row_draws_the_stored_logprobs(qtbot, tmp_path, tiny_folder):
    pytest.importorskip("pytestqt")
    from PySide6.QtCore import QSettings

    from tests.support.app_window import assistant_entries, close_window, open_window, send

    profile = tmp_path / "db.sqlite3", QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = open_window(qtbot, profile, str(tiny_folder))
    (controller,) = [c for c in window.step_analyses if isinstance(c.analysis, SurpriseAnalysis)]
    assert controller.action in window.menuBar().actions()[2].menu().actions()  # Models
    assert controller.action.text() == "Surprise of every token" and controller.action.isCheckable()
    send(qtbot, window, "hello", SamplingParams(temperature=1.0, seed=3, max_tokens=12, top_logprobs=5))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    window.model.select((stream, 2))
    controller.refresh()
    assert not controller.row.plot.isVisible()  # off until asked for
    controller.action.setChecked(True)
    row = controller.row
    assert row.plot.isVisible()
    steps = window.model.steps_of(stream)
    x, y = row.curve.getData()
    raw = np.array([s.logprobs[s.chain.index("raw")] for s in steps])
    np.testing.assert_allclose(y, -raw / np.log(2))
    assert list(x) == [s.index for s in steps] and row.selection_line.value() == 2
    controller.action.setChecked(False)
    assert not row.plot.isVisible()
    close_window(window)
