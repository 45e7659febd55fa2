"""``typical_p`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.typical_p`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec

SPEC = StageSpec(
    name="typical_p",
    summary="Locally typical sampling (Meister et al. 2022).",
    order=70,
    fields=(
        Field(
            "typical_p",
            float,
            1.0,
            "Locally typical sampling: keep the tokens closest to the expected surprisal until their mass "
            "reaches p. 1 = off.",
            range=(0.0, 1.0),
            lo_open=True,
            label="p",
            slider=(0.01, 1.0),
            spin=(0.001, 1.0),
            decimals=3,
        ),
    ),
    neutral=lambda v: v.typical_p >= 1.0,
    definition="sort by `|−log p − H|`; keep tokens until the mass reaches `p`, and every token as typical as "
    "the last one kept",
    off="1",
    reference="HF `TypicalLogitsWarper` (Meister et al. 2022)",
    label=lambda v: f"typical {v.typical_p:g}",
)
