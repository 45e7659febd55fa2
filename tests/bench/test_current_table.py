"""docs/BENCHMARKS.md opens on today's figures, made from the bench's JSON: the table between
its markers is what ``python -m bench.current`` writes from the files it names, so it cannot
drift from them (its first table once read figure 1 as 0.885 while the runs measured 1.043)."""

from __future__ import annotations

import json

from bench.current import PAGE, ROOT, SOURCES, page_block, render


def test_the_pages_current_figures_are_the_ones_its_json_gives():
    assert page_block(PAGE.read_text(encoding="utf-8")) == render().strip("\n") + "\n", (
        "docs/BENCHMARKS.md's current figures differ from the JSON: run python -m bench.current"
    )


def test_each_named_run_exists_and_figure_1_is_the_newest_measured():
    for runs in SOURCES.values():
        assert runs
        for path, commit, date in runs:
            file, _, key = path.partition("#")
            results = json.loads((ROOT / file).read_text(encoding="utf-8"))
            assert not key or key in results, path
            assert len(commit) >= 7 and date.startswith("2026-"), path
    block = page_block(PAGE.read_text(encoding="utf-8"))
    cpu = block[: block.index("### GPU")]
    (decode,) = [line for line in cpu.splitlines() if line.startswith("1 decode")]
    assert "1.043" in decode  # the 0d603d3 run, not an older one
