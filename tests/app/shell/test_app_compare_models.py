"""Issue 21, item 3: Models → Compare models… in the app, on the real worker and
EngineSession with two tiny random models sharing a tokenizer (seeds 0 and 1).

The comparison's per-token KL divergence is what ``engine.analysis.kld`` computes here directly (and,
for a scored text, what ``python -m engine kld`` prints for the same tokens); the timeline's
KLD row, the inspector's Models tab and the summary line show it; the export round-trips;
refusals (another vocabulary, too big) leave the app and its model as they were; a
cancelled load drops its result and releases the second model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, drain_engine_thread, open_window, send  # noqa: E402
from tests.support.tiny_model import write_tiny_model  # noqa: E402

TEXT = "the cat sat on the mat and the dog ran after the ball in the park"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    return write_tiny_model(root / "tiny-a", seed=0), write_tiny_model(root / "tiny-b", seed=1)


def greedy(window, tokens: int) -> SamplingParams:
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}  # the reply runs to max_tokens
    return SamplingParams(temperature=0.0, max_tokens=tokens, top_logprobs=5, logit_bias=no_eos)


def select(window, stream, index: int) -> None:
    window.model.select((stream, index))
    window._redraw_if_dirty()


def open_dialog(window):
    action = window.analysis_actions.compare_models
    assert action.isEnabled(), action.toolTip()
    action.trigger()
    dialog = window.compare_models.dialog
    assert dialog is not None and dialog.isVisible()
    return dialog


def compare_with(qtbot, window, source: str, precision: str = "auto"):
    """Choose ``source`` in the dialog and press Compare; the dialog once it has answered."""
    dialog = open_dialog(window)
    dialog.source.setCurrentText(source)
    dialog.precision.setCurrentIndex(dialog.precision.findData(precision))
    dialog.compare_button.click()
    action, comparisons = window.analysis_actions.compare_models, window.compare_models.comparisons
    if comparisons.running is not None:  # the action's rule follows the job, without the menu opening
        assert not action.isEnabled() and comparisons.running_words in action.toolTip()
    qtbot.waitUntil(lambda: not dialog.running, timeout=TIMEOUT)
    assert action.isEnabled() == (comparisons.unavailable() == "")
    return dialog


def session_of(window):
    return window.engine.worker._session


def direct_rows(a, b, tokens: list[int], first: int):
    """engine.analysis.kld on the same tokens, both models loaded here."""
    from engine.analysis.kld import logprob_rows, pair_rows
    from engine.models.load import load

    base, model = load(str(a)), load(str(b))
    return list(pair_rows(logprob_rows(base, tokens, 64), logprob_rows(model, tokens, 64), tokens, first, 10)), model


def test_a_reply_compared_with_a_second_model_matches_engine_kld_everywhere(
    qtbot,
    profile,
    pair,
    tmp_path,
):
    import pandas as pd

    from app.model.model_compare import num
    from app.views.inspector import MODELS_TAB
    from engine.api.kld_records import summary_record, token_record
    from engine.runtime.prompts import encode_messages
    from engine.runtime.text import TokenText

    a, b = pair
    window = open_window(qtbot, profile, str(a))
    send(qtbot, window, "hello there", greedy(window, 24))
    (entry,) = assistant_entries(window)
    stream, steps = window.entries[entry].stream, window.entries[entry].steps
    select(window, stream, 0)
    assert not window.compare_models.kld_row.plot.isVisible()
    assert not window.inspector.tabs.isTabVisible(MODELS_TAB)

    dialog = compare_with(qtbot, window, str(b))
    comparison = window.compare_models.comparisons.of(stream)
    assert comparison is not None, dialog.message.text()
    assert not window.last_error and not window.status.progress.isVisible()
    assert (comparison.base.label, comparison.second.label) == ("tiny-a · float32", "tiny-b · float32")
    assert session_of(window).second_model().source == str(b)  # kept for the next comparison

    # The same tokens through engine.analysis.kld here: the same numbers.
    message = window.model.message_of(stream)
    context = encode_messages(session_of(window).scheduler.loaded.tokenizer, list(window.model.context_for(message)))
    output = [s.token_id for s in steps]
    rows, model_b = direct_rows(a, b, context + output, len(context) - 1)
    assert len(comparison.rows) == len(steps) == len(rows) == 24
    assert [r.token_id for r in comparison.rows] == output
    np.testing.assert_allclose([r.kld for r in comparison.rows], [r.kld for r in rows], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        [r.logprob_model for r in comparison.rows], [r.logprob_model for r in rows], rtol=1e-5, atol=1e-6
    )
    assert [r.top_model[0][0] for r in comparison.rows] == [r.top_model[0][0] for r in rows]
    klds = np.array([r.kld for r in rows])
    assert klds.min() > 0  # two different random models: every token differs somewhat

    # Timeline: the KLD row, titled with both models, the five largest ringed.
    row = window.compare_models.kld_row
    assert row.plot.isVisible()
    x, y = row.curve.getData()
    assert list(x) == list(range(24))
    np.testing.assert_allclose(y, [r.kld for r in comparison.rows])
    assert row.worst_indices == [int(i) for i in np.argsort(-klds, kind="stable")[:5]]
    title = row.plot.titleLabel.text
    assert "tiny-a · float32" in title and "tiny-b · float32" in title

    # The summary line: mean ± se, 99th percentile, max, same top, RMS Δp, both PPLs and the ratio.
    s = comparison.stats
    line = window.compare_models.summary_label.text()
    for part in (
        f"mean KLD {num(s['kld_mean'])} ± {num(s['kld_mean_se'])}",
        f"99th pct {num(s['kld_percentiles']['p99'])}",
        f"max {num(float(klds.max()))}",
        f"same top {100 * s['same_top']:.1f}%",
        f"RMS Δp {100 * s['dp_rms']:.2f}%",
        f"PPL {num(s['ppl_base'])} vs {num(s['ppl_model'])}",
        f"ratio {s['ppl_ratio']:.4f}",
        "tiny-a · float32 vs tiny-b · float32",
    ):
        assert part in line, (part, line)
    nll_b = -np.array([r.logprob_base for r in rows])
    assert s["ppl_base"] == pytest.approx(math.exp(nll_b.mean()), rel=1e-5)
    assert s["kld_max"] == pytest.approx(klds.max(), rel=1e-5)
    assert "Mean KLD" in dialog.result.text() and dialog.export_button.isVisible()

    # Inspector: the worst token under both models, side by side.
    worst = row.worst_indices[0]
    select(window, stream, worst)
    inspector = window.inspector
    assert inspector.tabs.isTabVisible(MODELS_TAB) and inspector.tabs.currentIndex() == MODELS_TAB
    view, want = inspector.models_view, comparison.rows[worst]
    assert f"KLD {num(want.kld)} nats" in view.header.text()
    assert "Token " + str(worst) in view.header.text()
    for table, top in ((view.base_table, want.top_base), (view.second_table, want.top_model)):
        assert table.rowCount() == 10
        assert [table.item(r, 1).text() for r in range(10)] == [_visible(comparison.piece(t)) for t, _ in top]
        for r, (token, _) in enumerate(top):
            assert table.item(r, 1).font().bold() == (token == want.token_id)
    assert "tiny-b · float32" in view.second_title.text()
    # Tokens where the lists disagree are marked with their rank in the other list.
    other = {t: k for k, (t, _) in enumerate(want.top_model, 1)}
    marks = [view.base_table.item(r, 4).text() for r in range(10)]
    assert marks == [str(other[t]) if t in other else "—" for t, _ in want.top_base]

    # Export: JSON Lines are python -m engine kld's records for these tokens; CSV reads with pandas.
    path = window.compare_models.export(path=str(tmp_path / "compare.jsonl"))
    exported = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    piece = TokenText(model_b.tokenizer).piece
    about = {"base": "tiny-a", "base_precision": "float32", "model": "tiny-b", "precision": "float32"}
    about |= {"kv_bits": None, "kv_group_size": 64, "quantized_kv_start": 0}  # as the CLI's summary
    expected = [token_record(r, piece) for r in rows] + [summary_record(rows, about, False)]
    assert exported == expected
    csv = window.compare_models.export(path=str(tmp_path / "compare.csv"))
    df = pd.read_csv(csv)
    assert len(df) == 24 and list(df["index"]) == list(range(24)) and list(df.token_id) == output
    np.testing.assert_allclose(df.kld, [r["kld"] for r in exported[:-1]])
    assert set(df.model) == {"tiny-b"} and set(df.base_precision) == {"float32"}

    # Another reply (not compared): the row, the tab and the line go.
    send(qtbot, window, "again", greedy(window, 6))
    second_entry = assistant_entries(window)[-1]
    select(window, window.entries[second_entry].stream, 0)
    assert not row.plot.isVisible() and not inspector.tabs.isTabVisible(MODELS_TAB)
    assert not window.compare_models.summary_label.text()
    dialog.close()

    # The model in use reloaded in another precision: the comparison was of the one before, so
    # neither its line (it stayed, squeezing the model's label) nor its row comes back.
    select(window, stream, 0)
    assert window.compare_models.summary_label.text() and row.plot.isVisible()
    window.precision.choose("float16")
    qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.precision == "float16", timeout=TIMEOUT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    select(window, stream, 0)
    assert not window.compare_models.summary_label.text()
    assert not row.plot.isVisible() and not inspector.tabs.isTabVisible(MODELS_TAB)
    close_window(window)


def test_a_scored_text_exports_what_python_m_engine_kld_prints(qtbot, profile, pair, tmp_path):
    from tests.engine.analysis.test_kld import _kld

    a, b = pair
    window = open_window(qtbot, profile, str(a))
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    select(window, stream, 0)
    compare_with(qtbot, window, str(b))
    assert window.compare_models.comparisons.of(stream) is not None
    path = window.compare_models.export(path=str(tmp_path / "scored.jsonl"))
    ours = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    cli = _kld("--base", str(a), "--model", str(b), "--text", TEXT, "--top", "10")
    theirs = [json.loads(line) for line in cli.stdout.splitlines()]
    assert len(ours) == len(theirs) == len(window.entries[entry].steps) + 1
    assert ours == theirs
    close_window(window)


def test_refusals_show_the_engines_message_and_change_nothing(qtbot, profile, pair, monkeypatch):
    from engine.models import fit as model_fit

    a, b = pair
    window = open_window(qtbot, profile, str(a))
    send(qtbot, window, "hello", greedy(window, 8))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    select(window, stream, 3)
    info, running = window.model_info, session_of(window).scheduler.loaded

    # Another vocabulary: the default model (49,152 logits) beside the tiny one.
    dialog = compare_with(qtbot, window, "default")
    text = dialog.message.text()
    assert "same vocabulary" in text and "logits" in text, text
    assert window.compare_models.comparisons.results == {} and not dialog.export_button.isVisible()
    assert not window.compare_models.kld_row.plot.isVisible()
    assert window.model_info is info and session_of(window).scheduler.loaded is running
    assert session_of(window).second_model() is None
    assert window.model.selection == (stream, 3) and not window.last_error
    assert dialog.compare_button.isEnabled()  # choose again

    # Too big: refused with the numbers before anything is loaded.
    monkeypatch.setattr(model_fit, "total_memory", lambda: 1000)
    dialog.source.setCurrentText(str(b))
    dialog.compare_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=TIMEOUT)
    assert "needs about" in dialog.message.text() and "GiB" in dialog.message.text()
    assert window.compare_models.comparisons.results == {} and session_of(window).second_model() is None
    monkeypatch.undo()
    dialog.close()

    # The running model goes on as before.
    send(qtbot, window, "still here", greedy(window, 4))
    assert len(window.entries[assistant_entries(window)[-1]].steps) == 4 and not window.last_error
    assert window.model_info is info
    close_window(window)


def test_cancel_during_the_load_drops_the_result_and_releases_the_second_model(qtbot, profile, pair):
    a, b = pair
    window = open_window(qtbot, profile, str(a))
    send(qtbot, window, "cancel me", greedy(window, 16))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    select(window, stream, 0)
    dialog = open_dialog(window)
    dialog.source.setCurrentText(str(b))
    loads: list[str] = []
    controller = window.compare_models

    def on_loading(stage, _fraction):
        loads.append(stage)
        if len(loads) == 1:
            dialog.close_button.click()  # "Cancel" while the second model loads

    controller.comparisons.events.loading.connect(on_loading)
    dialog.compare_button.click()
    assert dialog.running and dialog.close_button.text() == "Cancel"
    qtbot.waitUntil(lambda: not dialog.running, timeout=TIMEOUT)
    assert loads and "Cancelled" in dialog.message.text() and dialog.isVisible()
    qtbot.waitUntil(lambda: session_of(window).second_model() is None, timeout=TIMEOUT)
    drain_engine_thread(qtbot, window)  # whatever the runner still sent has arrived, and is dropped
    assert controller.comparisons.results == {} and controller.comparisons.running is None
    assert not controller.kld_row.plot.isVisible() and not window.status.progress.isVisible()

    # The next comparison runs to its end.
    controller.comparisons.events.loading.disconnect(on_loading)
    dialog.compare_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=TIMEOUT)
    assert controller.comparisons.of(stream) is not None and len(controller.comparisons.of(stream).rows) == 16
    dialog.close()
    close_window(window)


def test_the_menu_item_says_why_it_is_disabled(qtbot, profile, pair):
    from dataclasses import replace

    from engine.remote.servers import KINDS, remote_capabilities

    a, _ = pair
    window = open_window(qtbot, profile, str(a))
    action = window.analysis_actions.compare_models
    assert not action.isEnabled() and "Select a token" in action.toolTip()
    send(qtbot, window, "hi", greedy(window, 4))
    (entry,) = assistant_entries(window)
    select(window, window.entries[entry].stream, 0)
    assert action.isEnabled()
    local = window.model_info
    window.in_use.info = replace(local, backend="remote", capabilities=remote_capabilities(KINDS["mlx_lm"], "raw"))
    window.actions.apply(window.in_use.info.capabilities)  # as a server's model_loaded does
    assert not action.isEnabled() and "whole distributions" in action.toolTip()
    window.in_use.info = local
    window.compare_models.export()  # nothing compared: says so, writes nothing
    assert "compare a reply first" in window.statusBar().currentMessage()
    close_window(window)


def _visible(text: str) -> str:
    from app.model.textfmt import visible

    return visible(text)


def test_a_prompt_less_scored_text_is_rebuilt_whole_from_its_label():
    from app.model.reply_checks import whole_text
    from app.store.scored_labels import score_label

    text = "the cat sat on the mat"
    assert whole_text(score_label(text), " cat sat on the mat") == text  # "the" was the context
    assert whole_text(score_label(text), text) == text  # a BOS was the context: every token scored
    assert whole_text("What is the capital of France?", "Paris.") is None  # scored as a reply
    assert whole_text(score_label(text), "something else") is None
