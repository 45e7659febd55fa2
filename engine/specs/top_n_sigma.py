"""``top_n_sigma`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.top_n_sigma`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec

SPEC = StageSpec(
    name="top_n_sigma",
    summary="Keeps logits within n standard deviations of the maximum (Tang et al. 2024).",
    order=80,
    fields=(
        Field(
            "top_n_sigma",
            float,
            0.0,
            "Keep logits ≥ max − n·σ over the tokens still in the distribution. 0 = off.",
            range=(0.0, 100.0),
            label="n",
            slider=(0.0, 5.0),
            decimals=2,
        ),
    ),
    neutral=lambda v: v.top_n_sigma == 0.0,
    definition="keep `l >= max − n·σ`, σ the population standard deviation of the logits still in the distribution",
    off="0",
    reference="llama.cpp `top_n_sigma` (Tang et al. 2024)",
    label=lambda v: f"nσ {v.top_n_sigma:g}",
)
