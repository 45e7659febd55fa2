"""``min_p`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.min_p`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec

SPEC = StageSpec(
    name="min_p",
    summary="Drops tokens less likely than min_p × the most likely one.",
    order=60,
    fields=(
        Field(
            "min_p",
            float,
            0.0,
            "Drop tokens below min_p × the top probability. 0 = off.",
            range=(0.0, 1.0),
            label="min p",
            slider=(0.0, 0.5),
            decimals=3,
        ),
    ),
    neutral=lambda v: v.min_p == 0.0,
    definition="keep `p >= min_p · p_max` (in log space)",
    off="0",
    reference="HF `MinPLogitsWarper`, llama.cpp `min_p`",
    label=lambda v: f"min-p {v.min_p:g}",
)
