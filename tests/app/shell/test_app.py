"""The app under pytest-qt (offscreen), on the tiny model: the whole flow a person would try."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import (  # noqa: E402
    TIMEOUT,
    assistant_entries,
    close_window,
    live_steps,
    open_window,
    send,
    settle,
    token_point,
)


def test_full_flow(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.name == "tiny-llama"
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}  # replies run to max_tokens
    greedy = SamplingParams(max_tokens=300, top_logprobs=5, penalty_window=16, logit_bias=no_eos)
    send(qtbot, window, "hello there", greedy, wait=False)
    assert window.composer.toPlainText() == ""
    # Tokens stream in; the inspector and the timeline follow the latest token.
    qtbot.waitUntil(lambda: any(len(steps) >= 3 for steps in live_steps(window)), timeout=TIMEOUT)
    window.controls.set_params(greedy.with_changes(temperature=1.5, top_k=20, seed=7))
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    (entry,) = assistant_entries(window)
    steps = window.entries[entry].steps
    assert len(steps) == 300
    assert window.inspector.step is steps[-1]
    assert window.timeline.steps == steps
    # The change mid-reply is in force for every following token, and only those.
    changed = [i for i, s in enumerate(steps) if s.params.temperature == 1.5]
    assert changed and changed == list(range(changed[0], 300)) and changed[0] >= 3
    assert all(s.params.top_k == 20 and s.params.seed == 7 for s in steps[changed[0] :])
    assert window.timeline.change_lines and len(window.timeline.change_lines) == 1
    # The saved reply names where its model came from (exports carry it).
    assert window.model.thread[-1].branch.model_source == str(tiny_folder)

    # Clicking a token selects it in the inspector and the timeline.
    stream = window.entries[entry].stream
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, (stream, 5)))
    assert window.model.selection == (stream, 5)
    assert window.inspector.step is steps[5]
    assert window.timeline.selection_line.value() == 5

    # Picking another candidate continues from there and keeps the old reply as a branch.
    window.controls.set_params(greedy.with_changes(max_tokens=12))
    view = window.inspector.chain_view
    row = next(r for r, c in enumerate(window.inspector.candidates) if c.token_id != steps[5].token_id)
    picked = window.inspector.candidates[row].token_id
    rect = view.visualRect(view.model().index(row, 0))
    # A real double-click: QTest's mouseDClick alone lacks the first press a person makes.
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    (entry,) = assistant_entries(window)
    new = window.entries[entry]
    assert (new.branch, new.branches) == (1, 2)
    assert [s.token_id for s in new.steps[:5]] == [s.token_id for s in steps[:5]]
    assert new.steps[5].token_id == picked and new.steps[5].forced
    assert [s.index for s in new.steps] == list(range(len(new.steps)))
    assert "‹" in window.chat.toHtml() and "2/2" in window.chat.toPlainText()
    window.chat.branch_stepped.emit(window.entries[entry].message_id, -1)
    window._redraw_if_dirty()
    assert window.entries[entry].branch == 0
    assert [s.token_id for s in window.entries[entry].steps] == [s.token_id for s in steps]

    # Stop ends a running reply; what was generated is kept. (A new chat: this one is
    # near the tiny model's 512-token context.)
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert [e.role for e in window.entries] == ["welcome"] and window.model.conversation is None
    send(qtbot, window, "go on", greedy.with_changes(max_tokens=450), wait=False)
    qtbot.waitUntil(lambda: any(len(steps) >= 2 for steps in live_steps(window)), timeout=TIMEOUT)
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    last = window.thread_messages[-1]
    assert last.branch.finish_reason == "cancelled"
    assert not window.last_error
    assert 2 <= len(last.branch.steps) < 450
    close_window(window)


def test_updates_are_coalesced(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    before = window.redraws
    send(qtbot, window, "count", SamplingParams(max_tokens=400, top_logprobs=2))
    tokens = len(window.thread_messages[-1].branch.steps)
    assert tokens == 400
    assert window.redraws - before < tokens / 2
    close_window(window)


def test_closing_during_generation_exits_cleanly(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "hello", SamplingParams(max_tokens=450), wait=False)
    # The send was taken (else the status bar says why: it timed out once in a full run).
    assert window.busy(), (window.statusBar().currentMessage(), window.last_error)
    # What the engine's thread does, recorded there (the window stops applying its reports
    # at the close): a close that waited for the reply would see all 450 tokens and its end.
    sampled, ended = [], []
    worker = window.engine.worker
    worker.token_sampled.connect(lambda _tag, _step: sampled.append(1), Qt.ConnectionType.DirectConnection)
    worker.job_finished.connect(lambda _tag, done: ended.append(done.finish_reason), Qt.ConnectionType.DirectConnection)
    qtbot.waitUntil(lambda: any(live_steps(window)), timeout=TIMEOUT)
    window.close()
    assert window.engine.thread.isFinished()
    assert len(sampled) < 450 and "length" not in ended, (len(sampled), ended)


def test_conversation_survives_restart(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "first question", SamplingParams(max_tokens=8, top_logprobs=4))
    (entry,) = assistant_entries(window)
    window.select_token((window.entries[entry].stream, 2))
    other = next(
        c.token_id for c in window.inspector.candidates if c.token_id != window.entries[entry].steps[2].token_id
    )
    window.pick_token(other)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    send(qtbot, window, "second question", SamplingParams(max_tokens=5, top_logprobs=4))
    saved = [(m.role, m.content, [b.text for b in m.branches], m.active) for m in window.thread_messages]
    saved_steps = window.thread_messages[1].branch.steps
    close_window(window)

    window = open_window(qtbot, profile, str(tiny_folder))
    restored = [(m.role, m.content, [b.text for b in m.branches], m.active) for m in window.thread_messages]
    assert restored == saved
    assert len(restored) == 4 and len(restored[1][2]) == 2
    steps = window.thread_messages[1].branch.steps
    assert [replace(s, request_id=-1) for s in steps] == [replace(s, request_id=-1) for s in saved_steps]
    assert steps[2].forced and steps[2].token_id == other
    assert any(math.isinf(c.logprob) or c.logprob <= 0 for c in steps[0].top)
    # The restored reply can still be branched after the restart.
    window._redraw_if_dirty()
    entry = assistant_entries(window)[0]
    window.select_token((window.entries[entry].stream, 1))
    window.pick_token(window.entries[entry].steps[1].token_id)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert len(window.thread_messages[1].branches) == 3
    close_window(window)


def test_model_that_fails_to_load_keeps_the_app_working(qtbot, profile, tiny_folder, tmp_path):
    window = open_window(qtbot, profile, str(tiny_folder))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    window.load_model(str(broken))
    qtbot.waitUntil(lambda: bool(window.last_error), timeout=TIMEOUT)
    assert "broken.gguf" in window.last_error and "GGUF" in window.last_error
    assert window.error_box.isVisible()
    assert window.model_info.name == "tiny-llama"
    assert window.model_label.text() == "tiny-llama · float32"
    window.error_box.close()
    send(qtbot, window, "still alive?", SamplingParams(max_tokens=4))
    assert len(window.thread_messages[-1].branch.steps) == 4
    close_window(window)


def test_invalid_control_values_are_flagged(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    current = window.controls.current
    window.controls.bias.setText("12:abc")
    window.controls.bias.editingFinished.emit()
    assert "logit_bias" in window.controls.error.text()
    assert "border" in window.controls.bias.styleSheet()
    assert window.controls.current == current
    window.controls.bias.setText("12:-100")
    window.controls.bias.editingFinished.emit()
    assert window.controls.current.logit_bias == {12: -100.0}
    assert window.controls.error.text() == ""
    # An id outside this model's vocabulary is flagged in the panel and never sent.
    vocab = window.model_info.vocab_size
    out_of_vocab = SamplingParams(max_tokens=2, logit_bias={vocab + 5: 1.0})
    send(qtbot, window, "hi", out_of_vocab)
    assert window.controls.error_widget() is window.controls.bias
    assert str(vocab + 5) in window.controls.error.text()
    assert window.model.thread == [] and window.controls.current.logit_bias == {12: -100.0}
    # The model checks too (settings that reach it by another path): the error carries its
    # field, which the panel outlines.
    window.controls.show_error(None)
    assert not window.model.generation.send("hi", out_of_vocab)
    assert "logit_bias" in window.last_error and window.model.thread == []
    assert window.controls.error_widget() is window.controls.bias
    assert "logit_bias" in window.controls.error.text()
    window.error_box.close()
    close_window(window)


def test_order_changed_mid_reply_applies_from_the_next_token(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    params = SamplingParams(max_tokens=200, temperature=0.8, top_k=20, seed=1, logit_bias=no_eos)
    send(qtbot, window, "hello there", params, wait=False)
    qtbot.waitUntil(lambda: any(len(steps) >= 3 for steps in live_steps(window)), timeout=TIMEOUT)
    window.controls.chain.move_stage("top_k", 0)  # as a drag would
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    (entry,) = assistant_entries(window)
    steps = window.entries[entry].steps
    assert len(steps) == 200
    changed = [i for i, s in enumerate(steps) if s.params.samplers[0] == "top_k"]
    assert changed and changed == list(range(changed[0], 200)) and changed[0] >= 3
    assert all(s.chain[-2:] == ("temperature", "top_k") for s in steps[: changed[0]])
    assert all(s.chain[-2:] == ("top_k", "temperature") for s in steps[changed[0] :])
    (line,) = window.timeline.change_lines
    assert line.value() == changed[0] - 0.5 and line.label.toPlainText() == "samplers"
    close_window(window)


@pytest.mark.slow
def test_default_model_answers_paris(qtbot, profile):
    window = open_window(qtbot, profile, "default")
    send(qtbot, window, "What is the capital of France?", SamplingParams(max_tokens=24))
    reply = window.thread_messages[-1].branch
    assert "Paris" in reply.text
    window._redraw_if_dirty()
    assert window.inspector.step is reply.steps[-1]
    assert len(window.inspector.candidates) >= 10
    assert window.inspector.chain_view.model().rowCount() == len(window.inspector.candidates)
    window.inspector.tabs.setCurrentIndex(1)  # the other tab is drawn when shown
    assert window.inspector.table.rowCount() == len(window.inspector.candidates)
    close_window(window)


def test_hover_timeline_click_and_presets(qtbot, profile, tiny_folder):
    from PySide6.QtCore import QPointF

    from app.views.chat_view import tooltip_for

    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "hover me", SamplingParams(max_tokens=12, top_logprobs=6))
    window._redraw_if_dirty()
    (entry,) = assistant_entries(window)
    steps = window.entries[entry].steps
    # Hovering a token finds that token; its tooltip gives its probability and 5 alternatives.
    stream = window.entries[entry].stream
    point = token_point(window, (stream, 4))
    assert window.chat.step_at(point) is steps[4]
    tip = tooltip_for(steps[4])
    assert "p(final)" in tip and tip.count("<br>") == 5
    # Clicking a point of the timeline selects that token.
    plot = window.timeline.prob_plot
    settle(window)  # the plot laid out and autoranged before mapping coordinates
    x, y = steps[7].index, math.exp(steps[7].logprob)
    scene = plot.vb.mapViewToScene(QPointF(x, y))
    view_pos = window.timeline.view.mapFromScene(scene)
    qtbot.mouseClick(window.timeline.view.viewport(), Qt.MouseButton.LeftButton, pos=view_pos)
    assert window.model.selection == (stream, 7)
    assert window.inspector.step is steps[7]
    # Presets: a built-in one sets its values; any other values show as "Custom"; saving adds one.
    window.controls.apply_preset("Creative")
    assert window.controls.current.temperature == 1.1
    assert window.controls.presets.currentText() == "Creative"
    window.controls.fields["temperature"].spin.setValue(0.55)
    assert window.controls.presets.currentText() == "Custom"
    window.controls.save_preset("Mine")
    window.controls.apply_preset("Greedy")
    window.controls.apply_preset("Mine")
    assert window.controls.current.temperature == 0.55
    close_window(window)


def test_reply_with_dry_and_xtc_shows_them_in_the_chain_view(qtbot, profile, tiny_folder):
    from app.views.chain_view import REMOVED_ROLE, VALUE_ROLE

    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    # A strong bias makes the tiny model repeat one token; DRY then pushes back harder at
    # every repeat (base^length), and once the distribution flattens XTC removes its top.
    params = SamplingParams(
        max_tokens=16,
        top_logprobs=10,
        logit_bias={**no_eos, 64: 6.0},
        dry_multiplier=1.0,
        dry_sequence_breakers=("@",),
        xtc_probability=1.0,
        xtc_threshold=0.01,
    )
    send(qtbot, window, "the cat the cat the cat", params)
    (entry,) = assistant_entries(window)
    steps = window.entries[entry].steps
    assert all(s.chain == ("raw", "bias", "dry", "temperature", "xtc") for s in steps)

    def dry_drop(step, cand):
        i = step.chain.index("dry")
        return cand.logprobs[i - 1] - cand.logprobs[i]

    index = next(
        i
        for i, s in enumerate(steps)
        if any(c.removed_by == "xtc" for c in s.top) and any(dry_drop(s, c) > 0.5 for c in s.top)
    )
    window.select_token((window.entries[entry].stream, index))
    step = window.inspector.step
    assert step is steps[index]
    model = window.inspector.chain_view.model()
    heads = [model.headerData(c, Qt.Orientation.Horizontal, VALUE_ROLE) for c in range(model.columnCount())]
    assert heads == ["raw", "bias", "dry", "temperature", "xtc"]
    dry, xtc = heads.index("dry"), heads.index("xtc")
    rows = window.inspector.candidates
    penalized = next(r for r, c in enumerate(rows) if dry_drop(step, c) > 0.5)
    assert model.data(model.index(penalized, dry), VALUE_ROLE) < model.data(model.index(penalized, dry - 1), VALUE_ROLE)
    removed = [r for r, c in enumerate(rows) if c.removed_by == "xtc"]
    assert removed and all(model.data(model.index(r, xtc)) == "✕ xtc" for r in removed)
    assert all(model.data(model.index(r, xtc), REMOVED_ROLE) == "xtc" for r in removed)
    # The timeline can follow DRY's entropy.
    window.timeline.stage.setCurrentText("dry")
    assert list(window.timeline.entropy_curve.getData()[1]) == [s.entropies[2] for s in steps]
    close_window(window)
