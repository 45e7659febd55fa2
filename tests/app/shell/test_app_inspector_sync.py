"""The inspector under streaming, branches and 100 candidates (issue 11, points 2, 3, 9, 10,
13 and 14): header, plots and table always describe one token, nothing outlives the
selection, labels stay readable, rows copy as text, and the settings of the token show."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QFontMetrics  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.model.textfmt import visible  # noqa: E402
from app.views.chain_view import raw_rank  # noqa: E402
from app.views.inspector_labels import elide  # noqa: E402
from app.views.theme import LIGHT  # noqa: E402
from engine.api.events import Candidate, TokenStep  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, settle  # noqa: E402
from tests.support.chain_steps import chain_step  # noqa: E402

BARS_TAB = 1


@pytest.fixture
def inspector(qtbot):
    from app.views.inspector import InspectorWidget

    widget = InspectorWidget()
    qtbot.addWidget(widget)
    widget.set_colors(LIGHT)
    widget.resize(520, 760)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def wide_step(n: int = 100, top_k: int = 40, index: int = 0) -> TokenStep:
    """``n`` candidates through raw -> penalties -> temperature -> top_k: the last
    ``n - top_k`` removed by top_k, tiny probabilities (printed as 1.2e-05)."""
    rng = np.random.default_rng(index)
    raw = np.sort(rng.normal(0, 3, n))[::-1].copy()
    raw[0] += 8  # one token takes most of the mass, the tail reads in e-notation
    penalty = np.where(np.arange(n) % 7 == 3, -0.6, 0.0)
    stages = {"raw": raw, "penalties": raw + penalty, "temperature": (raw + penalty) / 0.7}
    kth = np.sort(stages["temperature"])[::-1][top_k - 1]
    stages["top_k"] = np.where(stages["temperature"] >= kth, stages["temperature"], -np.inf)
    chain = tuple(stages)

    def logsoftmax(x):
        finite = np.isfinite(x)
        out = np.full_like(x, -np.inf)
        m = x[finite].max()
        out[finite] = x[finite] - m - np.log(np.exp(x[finite] - m).sum())
        return out

    lps = {s: logsoftmax(v) for s, v in stages.items()}
    top = []
    for i in range(n):
        logprobs = tuple(float(lps[s][i]) for s in chain)
        removed = next((s for s, v in zip(chain, logprobs, strict=True) if v == -math.inf), None)
        text = f" tok{i}" if i % 5 else f" a_longer_token_{i}"
        top.append(Candidate(i, text, float(raw[i]), logprobs, removed, 0.0, float(penalty[i]), int(i % 7 == 3)))
    params = SamplingParams(temperature=0.7, top_k=top_k, repetition_penalty=1.1, seed=11, top_logprobs=100)
    return TokenStep(
        request_id=1,
        index=index,
        position=10 + index,
        token_id=0,
        text=top[0].text,
        piece=top[0].text,
        chain=chain,
        logprobs=tuple(float(lps[s][0]) for s in chain),
        entropies=(1.0, 0.9, 0.7, 0.6),
        survivors=(n, n, n, top_k),
        top=tuple(top),
        params=params,
    )


# What the inspector shows, read back from its widgets ---------------------------------------


def shown_token(inspector) -> tuple[int, str] | None:
    """The token the header names: (index, piece as drawn), or None."""
    text = inspector.title.text()
    if "<b>Token " not in text:
        return None
    index = int(text.split("<b>Token ", 1)[1].split("<", 1)[0])
    piece = text.split("<code>", 1)[1].split("</code>", 1)[0]
    return index, piece


def bar_rows(inspector) -> list[str]:
    """The candidate names on the bars' axis, by row (thinned rows read "")."""
    levels = inspector.bars.bars_plot.getAxis("left")._tickLevels or [[]]
    names = dict(levels[0]) if levels else {}
    return [names.get(i, "") for i in range(len(inspector.bars.candidates))]


def table_rows(inspector) -> list[str]:
    return [inspector.table.item(r, 0).text() for r in range(inspector.table.rowCount())]


def check_in_step(inspector, step: TokenStep) -> None:
    """Header, bars, table and chain view all describe ``step``."""
    from app.model.textfmt import escape

    assert shown_token(inspector) == (step.index, escape(visible(step.piece)))
    names = [visible(c.text) for c in raw_rank(step)]
    axis_names = [elide(name) for name in names]
    if inspector.tabs.currentIndex() == BARS_TAB:
        assert inspector.bars.step is step
        assert table_rows(inspector) == names
        assert all(
            shown in ("", name, f"{name}  ✕") for shown, name in zip(bar_rows(inspector), axis_names, strict=True)
        )
        assert len(inspector.bars.raw_bars.opts["width"]) == len(names)
    else:
        assert inspector.chain_view.chain_model.step is step


def selected_ids(inspector) -> set[int]:
    rows = {index.row() for index in inspector.table.selectionModel().selectedRows()}
    return {inspector.candidates[r].token_id for r in rows}


def visible_labels(plot) -> list:
    from pyqtgraph import TextItem

    items = plot.vb.childGroup.childItems()
    return [i for i in items if isinstance(i, TextItem) and i.isVisible() and i.textItem.toPlainText()]


# Point 3: in step while a reply streams, after a branch ------------------------------------------


def test_inspector_stays_in_step_while_a_reply_streams_and_after_a_branch(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    inspector = window.inspector
    inspector.tabs.setCurrentIndex(BARS_TAB)
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    # Long enough to stream for a while on a loaded machine too (150 tokens once gave the
    # GUI, starved by the test workers, only two redraws to capture).
    params = SamplingParams(max_tokens=400, top_logprobs=12, temperature=1.0, top_k=8, seed=1, logit_bias=no_eos)
    captures: list[int] = []
    failures: list[str] = []

    def capture() -> None:
        # Rapid captures, between any two events of the stream: the widgets, not the model.
        step = inspector.step
        if step is None:
            return
        try:
            check_in_step(inspector, step)
            captures.append(step.index)
        except AssertionError as exc:
            failures.append(f"token {step.index}: {exc}")

    timer = QTimer()
    timer.timeout.connect(capture)
    timer.start(4)
    send(qtbot, window, "hello", params, wait=False)
    qtbot.waitUntil(lambda: inspector.step is not None and inspector.step.index >= 3, timeout=TIMEOUT)
    # A row picked by hand names a candidate: it follows that candidate or goes, never
    # stays on a row that now names another token.
    first = inspector.step
    row = 2
    chosen_id = inspector.candidates[row].token_id
    inspector.table.selectRow(row)
    assert selected_ids(inspector) == {chosen_id}
    assert window.busy(), "the reply ended before a row could be picked"
    qtbot.waitUntil(lambda: inspector.step is not first, timeout=TIMEOUT)
    assert selected_ids(inspector) <= {chosen_id}
    inspector.tabs.setCurrentIndex(0)  # the chain tab while tokens stream, then back
    on_chain_tab = inspector.step
    qtbot.waitUntil(lambda: inspector.step is not on_chain_tab or not window.busy(), timeout=TIMEOUT)
    inspector.tabs.setCurrentIndex(BARS_TAB)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    capture()
    timer.stop()
    assert not failures, failures[:3]
    assert len(set(captures)) >= 3

    # A branch from token 2: the bars' names and "removed" notes sit on their own rows.
    (entry,) = [e for e in window.entries if e.role == "assistant"]
    window.model.select((entry.stream, 2))
    window._redraw_if_dirty()
    window.clock.flush()
    step = inspector.step
    pick = next(c for c in inspector.candidates if c.token_id != step.token_id and math.isfinite(c.logprob))
    inspector._emit_pick(pick)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    window.clock.flush()
    (entry,) = [e for e in window.entries if e.role == "assistant"]
    assert entry.branches == 2
    for index in (2, 5, len(entry.steps) - 1):
        window.model.select((entry.stream, index))
        window.clock.flush()
        step = entry.steps[index]
        check_in_step(inspector, step)
        assert bar_rows(inspector) == [elide(visible(c.text)) + ("  ✕" if c.removed_by else "") for c in raw_rank(step)]
        notes = sorted(
            (round(item.pos().y()), item.textItem.toPlainText()) for item in visible_labels(inspector.bars.bars_plot)
        )
        removed = [(r, f"removed by {c.removed_by}") for r, c in enumerate(raw_rank(step)) if c.removed_by]
        assert notes == removed
    close_window(window)


# Point 9: nothing outlives the selection; never a negative zero -----------------------------


def test_new_chat_and_delete_clear_the_inspector(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    inspector = window.inspector
    inspector.tabs.setCurrentIndex(BARS_TAB)
    params = SamplingParams(max_tokens=6, top_logprobs=8, temperature=1.0, top_k=3, seed=2)

    def assert_cleared() -> None:
        window.clock.flush()
        assert inspector.step is None and shown_token(inspector) is None
        assert "Send a message" in inspector.title.text()
        assert not any(bar_rows(inspector)) and inspector.table.rowCount() == 0
        assert not visible_labels(inspector.bars.bars_plot) and not visible_labels(inspector.bars.effect_plot)
        assert inspector.settings.text() == ""

    send(qtbot, window, "hello", params)
    window.clock.flush()
    assert shown_token(inspector) is not None and any("✕" in r for r in bar_rows(inspector))
    window.new_chat()
    assert_cleared()
    conversation = window.store.reads.conversations()[0].id
    window.open_conversation(conversation)
    window.clock.flush()
    assert shown_token(inspector) is not None
    window.model.delete_conversation()
    assert_cleared()
    close_window(window)


def test_entropy_never_reads_negative_zero(inspector):
    from dataclasses import replace

    step = chain_step()
    step = replace(step, entropies=(*step.entropies[:-1], -1e-9))
    inspector.show_step(step)
    assert "-0.00" not in inspector.title.text()
    assert "→ xtc 0.00" in inspector.title.text()
    header = inspector.chain_view.model().headerData(len(step.chain) - 1, Qt.Orientation.Horizontal)
    assert "H 0.00" in header and "-0" not in header


# Point 10: readable with 100 candidates, in a narrow dock --------------------------------------


def test_hundred_candidates_stay_readable(qtbot, inspector):
    inspector.tabs.setCurrentIndex(BARS_TAB)
    plot = inspector.bars.bars_plot
    line = QFontMetrics(inspector.font()).height()
    for n in (100, 24, 12):
        step = wide_step(n, top_k=n * 2 // 5)
        inspector.show_step(step)
        settle(inspector)
        inspector.grab().save(f"/tmp/inspector-{n}.png")
        # Names on the axis never overprint: shown rows are at least a line apart.
        rows = [r for r, name in enumerate(bar_rows(inspector)) if name]
        ys = [plot.vb.mapViewToScene(QPointF(0, r)).y() for r in rows]
        assert len(rows) >= 10 and 0 in rows  # the chosen token is always named
        assert min(np.diff(ys)) >= line * 0.95, (line, min(np.diff(ys)))
        # "removed" notes (where rows are a line apart): inside the bars plot, never on
        # top of each other.
        box = plot.vb.sceneBoundingRect()
        notes = [item.mapRectToScene(item.boundingRect()) for item in visible_labels(plot)]
        assert bool(notes) == (len(rows) == n)
        for rect in notes:
            assert box.contains(rect), (box, rect)
        tops = sorted(rect.top() for rect in notes)
        assert all(b - a >= line * 0.9 for a, b in zip(tops, tops[1:], strict=False))
        check_table_columns(inspector.table)


def check_table_columns(table) -> None:
    """Every number and header whole."""
    head_fm = QFontMetrics(table.horizontalHeader().font())
    for col in range(table.columnCount()):
        head = table.horizontalHeaderItem(col).text()
        assert table.columnWidth(col) >= head_fm.horizontalAdvance(head) + 8, head
        for row in range(table.rowCount()):
            item = table.item(row, col)
            fits = table.columnWidth(col) >= QFontMetrics(item.font()).horizontalAdvance(item.text()) + 6
            assert fits, (head, item.text(), table.columnWidth(col))


@pytest.mark.parametrize("width", [380, 600])
def test_axis_titles_never_overlap(qtbot, inspector, width):
    """The titles are fitted to the plots' widths; each change of title is centred again.
    pyqtgraph centres an axis title only on a resize, so a title that changed without one
    (the log scale switched, another token) kept the old title's place: a longer one ran
    over its neighbour, or not, depending on whether a resize happened to come after (the
    test was flaky at 380 px). Here the titles change with no resize in between."""
    inspector.resize(width, 600)
    inspector.tabs.setCurrentIndex(BARS_TAB)
    inspector.log_scale.setChecked(True)  # a short title first ("log10 p")
    inspector.show_step(chain_step())
    settle(inspector)
    bars, effect = inspector.bars.bars_plot, inspector.bars.effect_plot
    for log in (False, True, False):
        inspector.log_scale.setChecked(log)  # the title changes; the plots keep their size
        inspector.grab().save(f"/tmp/inspector-titles-{width}.png")
        left = bars.getAxis("bottom").label.sceneBoundingRect()
        right = effect.getAxis("bottom").label.sceneBoundingRect()
        assert left.right() <= right.left(), (log, left, right)
        for plot, rect in ((bars, left), (effect, right)):
            axis = plot.getAxis("bottom")
            frame = axis.mapRectToScene(QRectF(0, 0, axis.width(), axis.height()))
            assert frame.left() - 1 <= rect.left() and rect.right() <= frame.right() + 1, (log, frame, rect)
            assert abs(rect.center().x() - frame.center().x()) <= 1, (log, axis.labelText)


def renamed(step: TokenStep, names: list[str]) -> TokenStep:
    """``step`` with its candidates (in the step's order) named ``names``."""
    from dataclasses import replace

    top = tuple(replace(c, text=name) for c, name in zip(step.top, names, strict=True))
    chosen = next(c for c in top if c.token_id == step.token_id)
    return replace(step, top=top, text=chosen.text, piece=chosen.text)


def test_chain_names_are_whole_after_a_token_with_shorter_names(qtbot, inspector):
    """Issue 24, point 21: the Chain tab's name column cut " cap" and "officia" while the
    table had room: Qt kept the column's width from the last token's names (same count)."""
    inspector.tabs.setCurrentIndex(0)  # Chain
    short = [chr(ord("a") + i) for i in range(12)]
    long = [" cap", "officia", " laborum", " Constantinople", *short[4:]]
    for names in (short, long):
        inspector.show_step(renamed(chain_step(), names))
        settle(inspector)
        rows = inspector.chain_view.verticalHeader()
        model = inspector.chain_view.chain_model
        shown = [model.headerData(r, Qt.Orientation.Vertical) for r in range(model.rowCount())]
        assert sorted(name.removeprefix("▶ ") for name in shown) == sorted(visible(n) for n in names)
        inspector.grab().save("/tmp/inspector-chain-names.png")
        for r, name in enumerate(shown):
            assert rows.width() >= rows.sectionSizeFromContents(r).width(), (name, rows.width())


# Point 13: Ctrl+C copies whole rows ---------------------------------------------------------------


def test_ctrl_c_copies_the_selected_rows_as_tab_separated_text(qtbot, inspector):
    step = chain_step()
    inspector.tabs.setCurrentIndex(BARS_TAB)
    inspector.show_step(step)
    table = inspector.table
    table.setFocus()
    table.selectRow(0)
    table.selectionModel().select(
        table.model().index(2, 0),
        table.selectionModel().SelectionFlag.Select | table.selectionModel().SelectionFlag.Rows,
    )
    QApplication.clipboard().clear()
    qtbot.keyClick(table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QApplication.clipboard().text().split("\n")
    columns = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert lines[0] == "\t".join(columns)
    for line, row in zip(lines[1:], (0, 2), strict=True):
        assert line == "\t".join(table.item(row, c).text() for c in range(table.columnCount()))
    assert lines[1].startswith(visible(inspector.candidates[0].text) + "\t")
    assert len(lines) == 3


# Points 2 and 14: the settings in force, and what the numbers mean ------------------------------


def test_the_settings_of_the_selected_token_show_under_the_header(inspector):
    step = chain_step()  # temperature 0.8, top_k 8, repetition 1.2, DRY 0.8, XTC, bias, seed 3
    inspector.show_step(step)
    line = inspector.settings.text()
    for words in ("temperature 0.8", "top_k 8", "repetition_penalty 1.2", "dry_multiplier 0.8", "seed 3"):
        assert words in line, line
    assert "top_p" not in line  # default values are left out of the line
    tip = inspector.settings.toolTip()
    for words in ("temperature", "top_p", "1", "logit_bias", "seed", "3", "samplers"):
        assert words in tip
    inspector.show_step(chain_step(params=SamplingParams(seed=5)))
    assert "greedy" in inspector.settings.text() and "seed 5" in inspector.settings.text()
    inspector.show_step(None)
    assert inspector.settings.text() == ""


def test_greedy_final_and_penalty_counts_are_explained(inspector):
    greedy = chain_step(params=SamplingParams(seed=5, repetition_penalty=1.3))
    inspector.tabs.setCurrentIndex(BARS_TAB)
    inspector.show_step(greedy)
    header = {inspector.table.horizontalHeaderItem(c).text(): c for c in range(inspector.table.columnCount())}
    final_tip = inspector.table.horizontalHeaderItem(header["p final"]).toolTip()
    assert "greedy" in final_tip and "100" in final_tip and "temperature" in final_tip
    count_tip = inspector.table.horizontalHeaderItem(header["count"]).toolTip()
    assert "prompt" in count_tip and "penalty_window" in count_tip
    title_tip = inspector.title.toolTip()
    assert "greedy" in title_tip and "not 100" in title_tip
