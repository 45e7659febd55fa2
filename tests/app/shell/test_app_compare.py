"""Compare mode end to end on the tiny model: three settings stream into three columns,
a column's token goes to the inspector, the timeline draws a curve per column and the
divergence, a column is kept as the reply, "compare from here" from a token's context
menu, and the run reopens after a restart."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, token_point  # noqa: E402


def link_point(chat, href: str, prefix: bool = False) -> QPoint:
    """Where the chat draws the link ``href`` (a Keep or branch link; with ``prefix``, the
    first link that starts with it), in viewport coordinates."""
    chat.document().documentLayout()
    block = chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            found = fragment.charFormat().anchorHref()
            if found == href or (prefix and found.startswith(href)):
                cursor = QTextCursor(chat.document())
                cursor.setPosition(fragment.position() + fragment.length() // 2)
                return chat.cursorRect(cursor).center()
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href}")


def compare_entry(window):
    (entry,) = [e for e in window.entries if e.role == "compare"]
    return entry


def set_variants(window, variants: list[SamplingParams]) -> None:
    for controls, params in zip(window.panel.variant_controls, variants, strict=False):
        controls.set_params(params)
    window.panel.set_compare(True, len(variants))


def test_compare_three_settings_keep_one_and_compare_from_here(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    base = SamplingParams(max_tokens=12, top_logprobs=5, logit_bias=no_eos)
    variants = [base, base.with_changes(temperature=1.5, seed=1), base.with_changes(temperature=0.9, top_k=5, seed=2)]
    set_variants(window, variants)
    assert window.central.send_button.text() == "Send ×3"
    window.composer.setPlainText("compare these settings")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()

    # Three columns, side by side in the chat (a table of three columns, a body per cell).
    entry = compare_entry(window)
    assert [len(c.steps) for c in entry.columns] == [12, 12, 12]
    assert [c.label[:1] for c in entry.columns] == ["A", "B", "C"]
    section = window.chat.writer.sections[-1]
    assert section.table is not None and section.table.columns() == 3
    assert [body.drawn for body in section.bodies] == [12, 12, 12]
    # Each variant ran with its own settings: the greedy column is the argmax throughout.
    assert all(s.params.temperature == 1.5 for s in entry.columns[1].steps)
    assert all(s.raw_argmax for s in entry.columns[0].steps)

    # Clicking a token in column 2 shows it in the inspector, named by its column.
    ref = (entry.columns[1].stream, 4)
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, ref))
    assert window.model.selection == ref
    assert window.inspector.step is entry.columns[1].steps[4]
    assert "B ·" in window.inspector.title.text()

    # The timeline: a curve per column and the divergence curve, the first difference marked.
    window._redraw_if_dirty()
    timeline = window.timeline
    curves = [c for c in timeline.run.variant_curves if c.isVisible()]
    assert len(curves) == 3 and timeline.run_mode
    for curve, column in zip(curves, entry.columns, strict=True):
        assert list(curve.getData()[1]) == pytest.approx([math.exp(s.logprob) for s in column.steps])
    run = window.model.shown_run()
    x, js = timeline.run.divergence_curve.getData()
    assert list(x) == list(range(12)) and all(0 <= v <= math.log(2) + 1e-6 for v in js)
    assert list(js) == pytest.approx(run.divergence.mean()[1])
    tokens = [[s.token_id for s in c.steps] for c in entry.columns]
    expected_first = min(
        (next((i for i, (a, b) in enumerate(zip(p, q, strict=True)) if a != b), math.inf))
        for k, p in enumerate(tokens)
        for q in tokens[k + 1 :]
    )
    assert run.divergence.first() == expected_first
    assert timeline.run.first_difference.isVisible() and timeline.run.first_difference.value() == expected_first - 0.5
    assert timeline.selection_line.value() == 4

    # Keep column 2 (its Keep link): it becomes the reply; the others stay as its branches.
    message_id = entry.message_id
    qtbot.mouseClick(
        window.chat.viewport(), Qt.MouseButton.LeftButton, pos=link_point(window.chat, f"keep:{message_id}:1")
    )
    window._redraw_if_dirty()
    message = window.thread_messages[-1]
    assert len(message.branches) == 3 and message.active == 1
    (reply,) = [e for e in window.entries if e.role == "assistant"]
    assert reply.stream == entry.columns[1].stream and (reply.branch, reply.branches) == (1, 3)
    assert reply.kept.startswith("kept B")
    assert not window.timeline.run_mode
    assert [s.token_id for s in message.branch.steps] == tokens[1]

    # Compare from here: right-click a token of the kept reply → every setting redraws it.
    menu = window.chat.token_menu((reply.stream, 3))
    (action,) = [a for a in menu.actions() if a.text().startswith("Compare from here with 3 settings")]
    action.trigger()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    entry = compare_entry(window)
    assert all(c.start == 3 for c in entry.columns)
    assert all([s.token_id for s in c.steps[:3]] == tokens[1][:3] for c in entry.columns)
    assert all([s.index for s in c.steps] == list(range(len(c.steps))) for c in entry.columns)
    assert len(window.thread_messages[-1].branches) == 6
    run = window.model.shown_run()
    assert run.prefix_tokens == 3 and run.divergence.index[0] == 3
    saved = {
        "columns": [[s.token_id for s in c.steps] for c in entry.columns],
        "divergence": run.divergence.to_dict(),
    }
    close_window(window)

    # After a restart the undecided run shows again, with its divergence.
    window = open_window(qtbot, profile, str(tiny_folder))
    window._redraw_if_dirty()
    entry = compare_entry(window)
    assert [[s.token_id for s in c.steps] for c in entry.columns] == saved["columns"]
    run = window.model.run_of(entry.columns[0].stream)
    assert run.divergence.to_dict() == saved["divergence"] and run.kept is None
    assert window.chat.writer.sections[-1].table.columns() == 3
    close_window(window)
