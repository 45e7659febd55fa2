"""``xtc`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.xtc`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec, Values


def _neutral(v: Values) -> bool:
    return v.xtc_probability == 0.0 or v.xtc_threshold > 0.5


SPEC = StageSpec(
    name="xtc",
    summary="Exclude top choices: sometimes removes every likely token but the least likely of them.",
    order=90,
    fields=(
        Field(
            "xtc_probability",
            float,
            0.0,
            "Exclude top choices: the chance per token that XTC acts (its own seeded coin). 0 = off.",
            range=(0.0, 1.0),
            label="Probability",
            slider=(0.0, 1.0),
            decimals=2,
        ),
        Field(
            "xtc_threshold",
            float,
            0.1,
            "When two or more tokens reach this probability, all but the least likely of them are removed "
            "(default 0.1). Above 0.5 XTC never acts.",
            range=(0.0, 1.0),
            label="Threshold",
            slider=(0.0, 0.5),
            decimals=3,
        ),
    ),
    neutral=_neutral,
    definition="when the row's coin `<= probability` and two or more tokens have `p >= threshold`, remove all of "
    "them but the least likely (ties at the least likely are kept)",
    off="probability 0, or threshold > 0.5",
    reference="llama.cpp `xtc`",
    describe=lambda v: f"prob {v.xtc_probability:g} · threshold {v.xtc_threshold:g}",
    label=lambda v: f"XTC {v.xtc_probability:g}",
)
