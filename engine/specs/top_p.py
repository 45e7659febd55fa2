"""``top_p`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.top_p`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec

SPEC = StageSpec(
    name="top_p",
    summary="Nucleus sampling: keeps the most likely tokens until their mass reaches p.",
    order=50,
    fields=(
        Field(
            "top_p",
            float,
            1.0,
            "Keep the smallest set of most likely tokens whose probability reaches p. 1 = off.",
            range=(0.0, 1.0),
            lo_open=True,
            label="p",
            slider=(0.01, 1.0),
            spin=(0.01, 1.0),
            decimals=3,
        ),
    ),
    neutral=lambda v: v.top_p >= 1.0,
    definition="keep a token when the mass of the tokens more likely than it is `< p`",
    off="1",
    reference="HF `TopPLogitsWarper`, llama.cpp `top_p`",
    label=lambda v: f"top-p {v.top_p:g}",
)
