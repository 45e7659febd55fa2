"""Issue 22, the app: the logit lens in the inspector's Layers tab, the timeline's *decided at
layer* row and the export, on the real worker and EngineSession with the tiny random model.

What the tab shows is what ``engine.analysis.lens`` computes here directly for the same tokens; the
export holds what ``python -m engine lens`` prints for the same text; a cancelled job drops
its late results; a server, no model and an engine error are said in words; and a reply
goes first: a lens job started while it streams runs once it has ended."""

from __future__ import annotations

import contextlib
import io
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, drain_engine_thread, open_window, send  # noqa: E402

TEXT = "the cat sat on the mat and the dog ran after the ball in the park"


def greedy(window, tokens: int) -> SamplingParams:
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}  # the reply runs to max_tokens
    return SamplingParams(temperature=0.0, max_tokens=tokens, logit_bias=no_eos)


def show_layers(window) -> None:
    from app.views.inspector import LAYERS_TAB

    window.inspector.tabs.setCurrentIndex(LAYERS_TAB)
    window._redraw_if_dirty()


def select(window, stream, index: int) -> None:
    window.model.select((stream, index))
    window._redraw_if_dirty()


def read_out(qtbot, window, stream, index: int):
    """Select token ``index`` with the Layers tab in view and wait for its lens."""
    select(window, stream, index)
    lens = window.logit_lens.lens
    qtbot.waitUntil(lambda: lens.of(stream) is not None and lens.of(stream).at(index) is not None, timeout=TIMEOUT)
    window._redraw_if_dirty()
    return lens.of(stream).at(index)


def direct_lens(folder, tokens: list[int], positions: list[int], top: int = 20):
    """engine.analysis.lens on the same tokens, the model loaded here."""
    from engine.analysis.lens import lens
    from engine.models.load import load

    return list(lens(load(str(folder)), tokens, positions, top))


def cli_lens(*args: str) -> list[dict]:
    """``python -m engine lens`` in this process (the CLI's main), its records."""
    from engine.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["lens", *args]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_layers_tab_shows_what_engine_lens_computes_and_caches_it(qtbot, profile, tiny_folder):
    from app.model.lens_grid import COLUMNS, decided_words
    from app.model.textfmt import visible
    from engine.runtime.prompts import encode_messages

    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "hello there", greedy(window, 12))
    (entry,) = assistant_entries(window)
    stream, steps = window.entries[entry].stream, window.entries[entry].steps
    select(window, stream, 4)
    assert window.logit_lens.lens.running is None  # the tab is not in view: nothing is read
    show_layers(window)
    row = read_out(qtbot, window, stream, 4)

    # The engine's own lens of the same tokens, the reply's prompt as rendered for it.
    session = window.engine.worker._session
    context = encode_messages(
        session.scheduler.loaded.tokenizer, list(window.model.context_for(window.model.message_of(stream)))
    )
    output = [s.token_id for s in steps]
    (want,) = direct_lens(tiny_folder, context + output, [len(context) - 1 + 4])
    assert row.position == 4 and row.chosen == output[4] == want.chosen and row.decided_at == want.decided_at
    assert len(row.layers) == len(want.layers) == 3  # the embedding and two blocks
    for got, expected in zip(row.layers, want.layers, strict=True):
        assert [t for t, _ in got.top] == [t for t, _ in expected.top]
        np.testing.assert_allclose([lp for _, lp in got.top], [lp for _, lp in expected.top], atol=1e-4)
        assert got.rank_chosen == expected.rank_chosen
        assert got.kl_final == pytest.approx(expected.kl_final, abs=1e-4)

    # The heat map: (L + 1) layers × the last layer's top 10 and the chosen token, framed.
    view = window.inspector.layers_view
    grid = view.grid
    assert view.heatmap.isVisible() and not view.busy.isVisible()
    final = [t for t, _ in want.layers[-1].top[:COLUMNS]]
    assert list(grid.tokens[:COLUMNS]) == final
    assert grid.probs.shape == (3, COLUMNS + (want.chosen not in final))
    assert grid.tokens[grid.chosen_column] == want.chosen
    assert grid.labels == tuple(visible(session.token_text(t)) for t in grid.tokens)
    for layer, expected in enumerate(want.layers):  # every cell is the engine's number at that layer
        assert grid.probs[layer, grid.chosen_column] == pytest.approx(math.exp(expected.chosen_logprob), rel=1e-4)
        at_layer = dict(zip(final_ids := [t for t, _ in want.layers[-1].top], expected.final_top_logprobs, strict=True))
        assert len(final_ids) == len(expected.final_top_logprobs) and not np.isnan(grid.probs[layer]).any()
        for c, token in enumerate(grid.tokens):
            if token != want.chosen:
                assert grid.probs[layer, c] == pytest.approx(math.exp(at_layer[token]), rel=1e-4, abs=1e-12)
        for token, lp in expected.top:  # a final candidate in this layer's own list: the same number
            if token in at_layer:
                assert at_layer[token] == pytest.approx(lp, abs=1e-6)
    header = view.header.text()
    assert "Token 4" in header and decided_words(grid).split(";")[0] in header
    if want.decided_at is not None:
        assert f"decided at layer {want.decided_at} of 2" in header
    else:
        assert "never decided" in header
    np.testing.assert_allclose(view.kl_curve.getData()[1], [layer.kl_final for layer in want.layers], atol=1e-4)
    assert view.entropy_curve.getData()[0].tolist() == [0, 1, 2]
    left, top, _right, column, height, _turned = view.heatmap._boxes()
    tip = view.heatmap.tooltip_at(left + column / 2, top + height / 2)  # the last layer's first column
    assert tip.startswith(f"layer 2: “{grid.labels[0]}” p = ")

    # Another token, then back: the first one is shown again without a job.
    read_out(qtbot, window, stream, 7)
    started = []
    window.logit_lens.lens.events.started.connect(started.append)
    select(window, stream, 4)
    assert not started and window.logit_lens.lens.running is None
    assert view.grid.chosen == output[4] and "Token 4" in view.header.text()
    close_window(window)


def test_cancel_drops_the_job_and_an_engine_error_is_said(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "cancel me", greedy(window, 48))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    select(window, stream, 0)
    controller, lens = window.logit_lens, window.logit_lens.lens

    # Every token, cancelled after the first position arrived: what came later is dropped.
    def on_position(_stream, _row):
        if len(lens.results[stream].rows) == 1:
            controller.cancel(by_user=True)

    lens.events.position.connect(on_position)
    job = controller.read_every_token()
    assert job is not None and job.every and window.status.progress.isVisible()
    qtbot.waitUntil(lambda: lens.running is None, timeout=TIMEOUT)
    drain_engine_thread(qtbot, window)  # whatever the runner still sent has arrived, and is ignored
    assert len(lens.results[stream].rows) == 1 and not window.status.progress.isVisible()
    lens.events.position.disconnect(on_position)

    # The tab's Cancel before the read-out answers: the tab says so and offers to read again.
    show_layers(window)
    view = window.inspector.layers_view
    select(window, stream, 5)
    assert lens.running is not None and view.busy.isVisible() and view.cancel_button.isVisible()
    view.cancel_button.click()
    window._redraw_if_dirty()
    assert lens.running is None and "Cancelled" in view.message.text() and view.retry_button.isVisible()
    drain_engine_thread(qtbot, window)  # its late result, if any, has arrived
    assert lens.of(stream).at(5) is None  # and was dropped
    view.retry_button.click()
    qtbot.waitUntil(lambda: lens.of(stream).at(5) is not None, timeout=TIMEOUT)
    window._redraw_if_dirty()
    assert view.heatmap.isVisible() and "Token 5" in view.header.text()

    # An engine error (a position past the reply) reaches the tab, in red, and the status bar.
    select(window, stream, 6)
    controller.cancel(by_user=True)  # the tab's own read-out of token 6, started by the selection
    assert controller._start((6, 99)) is not None
    qtbot.waitUntil(lambda: lens.running is None, timeout=TIMEOUT)
    window._redraw_if_dirty()
    assert "positions must be in [0, 48]" in view.message.text() and view.retry_button.isVisible()
    assert "positions must be" in window.statusBar().currentMessage()
    assert "d93025" in view.message.styleSheet()
    close_window(window)


def test_a_server_and_no_model_say_why_instead_of_a_heat_map(
    qtbot,
    profile,
    tiny_folder,
    tiny_server,
    tmp_path,
):
    from app.model.logit_lens import NO_MODEL
    from tests.integration.test_app_remote import connect

    window = open_window(qtbot, profile, str(tiny_folder))
    show_layers(window)
    view, lens = window.inspector.layers_view, window.logit_lens.lens
    assert "Select a token" in view.message.text()
    connect(qtbot, window, tiny_server)  # mlx_lm.server serving the tiny model
    caps = window.model_info.capabilities
    assert not caps.logit_lens
    send(qtbot, window, "hi", greedy(window, 4))
    (entry,) = assistant_entries(window)
    select(window, window.entries[entry].stream, 1)
    assert view.message.isVisible() and not view.heatmap.isVisible()
    assert view.message.text() == caps.reason("logit_lens") and "server" in view.message.text()
    assert lens.running is None and not lens.results  # nothing was asked of the server
    action = window.analysis_actions.logit_lens
    assert not action.isEnabled() and action.toolTip() == caps.reason("logit_lens")
    window.logit_lens.export()  # nothing read: says so, writes nothing
    assert "Nothing to export" in window.statusBar().currentMessage()
    close_window(window)

    window = open_window(qtbot, profile, str(tmp_path / "no-such-model"))  # the load fails
    assert window.model_info is None and window.last_error
    show_layers(window)
    assert window.inspector.layers_view.message.text() == NO_MODEL
    close_window(window)


def test_every_token_of_a_scored_text_the_timeline_row_and_the_export_match_python_m_engine_lens(
    qtbot,
    profile,
    tiny_folder,
    tmp_path,
):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    (entry,) = assistant_entries(window)
    stream, steps = window.entries[entry].stream, window.entries[entry].steps
    select(window, stream, 0)
    controller = window.logit_lens
    row = controller.row
    assert not row.plot.isVisible()
    job = controller.read_every_token()
    assert job is not None and job.text == TEXT and job.total == len(steps)
    qtbot.waitUntil(lambda: controller.lens.running is None, timeout=TIMEOUT)
    window._redraw_if_dirty()
    assert "every token read" in window.statusBar().currentMessage()

    theirs = cli_lens("--model", str(tiny_folder), "--prompt", TEXT, "--all-positions", "--top", "20")
    # The command's last position is the distribution after the text's last token: no token
    # of the scored reply, so the app has one position fewer.
    last = max(r["position"] for r in theirs)
    theirs = [r for r in theirs if r["position"] != last]
    decided = {r["position"]: r["decided_at"] for r in theirs if r["type"] == "position"}
    assert sorted(decided) == list(range(len(steps)))

    # The timeline's row: each token's decided layer, never-decided ones as ✕ above the last layer.
    assert row.plot.isVisible()
    x, y = row.points.getData()
    assert [int(v) for v in x] == [p for p in sorted(decided) if decided[p] is not None]
    assert [int(v) for v in y] == [decided[p] for p in sorted(decided) if decided[p] is not None]
    never_x, never_y = row.never.getData()
    assert [int(v) for v in never_x] == [p for p in sorted(decided) if decided[p] is None]
    assert all(v == 3 for v in never_y)  # above the last layer, L = 2
    assert "of 2" in row.plot.titleLabel.text
    select(window, stream, 5)
    assert row.selection_line.isVisible() and row.selection_line.value() == 5

    # The export: the command's records for these positions, field for field.
    path = controller.export(path=str(tmp_path / "lens.jsonl"))
    ours = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(ours) == len(theirs) == len(steps) * 4  # three layers and a position record each
    for a, b in zip(ours, theirs, strict=True):
        assert a.keys() == b.keys()
        numbers = ("entropy", "kl_final", "chosen_logprob")
        assert {k: v for k, v in a.items() if k not in (*numbers, "top")} == {
            k: v for k, v in b.items() if k not in (*numbers, "top")
        }
        for k in numbers:
            if k in a:
                assert a[k] == pytest.approx(b[k], abs=2e-4), (k, a, b)
        if "top" in a:
            assert [(t["token_id"], t["text"]) for t in a["top"]] == [(t["token_id"], t["text"]) for t in b["top"]]
            np.testing.assert_allclose([t["logprob"] for t in a["top"]], [t["logprob"] for t in b["top"]], atol=2e-4)
    close_window(window)


def test_a_reply_goes_first_and_a_lens_job_started_meanwhile_follows_it(qtbot, profile, tiny_folder):
    from app.model.logit_lens import WAITS_FOR_REPLY

    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "first", greedy(window, 40))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    order: list[str] = []  # on the worker's thread, in the order the events were emitted
    worker, runner = window.engine.worker, window.logit_lens.runner
    worker.token_sampled.connect(lambda *_: order.append("token"))
    runner.position_ready.connect(lambda *_: order.append("lens"))
    send(qtbot, window, "second", greedy(window, 300), wait=False)  # the tiny context is 512
    qtbot.waitUntil(lambda: "token" in order, timeout=TIMEOUT)
    select(window, stream, 0)  # the first reply, by hand: the selection stops following the new one
    job = window.logit_lens.read_every_token()
    assert job is not None and window.busy()
    show_layers(window)  # after the job: the tab would otherwise read the selected token itself
    view = window.inspector.layers_view
    if window.busy():  # the tab says why nothing is read yet
        assert WAITS_FOR_REPLY in view.header.text()
    qtbot.waitUntil(lambda: window.logit_lens.lens.running is None, timeout=TIMEOUT)
    # Not one piece of the job ran while the reply was being written: it went on after.
    assert order.count("token") == 300 and order.count("lens") == 40
    assert order.index("lens") > len(order) - 1 - order[::-1].index("token"), order
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert len(window.entries[assistant_entries(window)[-1]].steps) == 300 and not window.last_error
    close_window(window)


def _layer(top, chosen_logprob, rank=1, entropy=1.0, kl=0.5):
    return SimpleNamespace(top=top, chosen_logprob=chosen_logprob, rank_chosen=rank, entropy=entropy, kl_final=kl)


def test_the_grid_and_its_words_without_qt():
    from app.model.lens_grid import decided_words, lens_grid, other_tops, other_tops_words

    lp = math.log
    layers = (
        _layer(((9, lp(0.9)), (1, lp(0.05))), lp(0.001), rank=40),  # the embedding: the input token
        _layer(((2, lp(0.5)), (1, lp(0.3))), lp(0.3), rank=2),
        _layer(((1, lp(0.6)), (2, lp(0.2))), lp(0.6)),
        _layer(((2, lp(0.4)), (1, lp(0.35))), lp(0.35), rank=2),
        _layer(((1, lp(0.7)), (3, lp(0.2))), lp(0.7)),
        _layer(((1, lp(0.8)), (3, lp(0.1))), lp(0.8)),
    )
    row = SimpleNamespace(position=3, chosen=1, decided_at=4, layers=layers)
    grid = lens_grid(row, lambda t: f" t{t}")
    assert grid.layers == 5 and grid.tokens == (1, 3) and grid.chosen_column == 0
    assert grid.labels == ("␣t1", "␣t3")
    assert grid.probs.shape == (6, 2)
    assert grid.probs[0, 0] == pytest.approx(0.001) and math.isnan(grid.probs[0, 1])  # outside layer 0's list
    assert grid.floors[0] == pytest.approx(0.05)
    assert other_tops(grid) == [("␣t2", 1, 1), ("␣t2", 3, 3)]
    assert other_tops_words(grid) == "other tokens led on the way: “␣t2” (layer 1), “␣t2” (layer 3)"
    assert decided_words(grid) == (
        "decided at layer 4 of 5: the most likely token from layer 4 on; it led at layer 2, then was overtaken"
    )
    last = replace_grid(grid, decided_at=5)
    assert decided_words(last).startswith("decided at layer 5 of 5, the last one; it led at layers 2, 4")
    never = replace_grid(grid, decided_at=None, rank_chosen=(40, 2, 1, 2, 1, 3))
    assert decided_words(never).startswith("never decided: not the most likely token even at the last layer (#3 there")
    assert decided_words(replace_grid(grid, decided_at=0)).startswith("decided at layer 0 of 5 (the embedding)")


def replace_grid(grid, **changes):
    from dataclasses import replace

    return replace(grid, **changes)
