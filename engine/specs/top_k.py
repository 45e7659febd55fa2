"""``top_k`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.top_k`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec

SPEC = StageSpec(
    name="top_k",
    summary="Keeps the k most likely tokens.",
    order=40,
    fields=(
        Field(
            "top_k", int, 0, "Keep the k most likely tokens. 0 = off.", range=(0, 1_000_000), label="k", slider=(0, 200)
        ),
    ),
    neutral=lambda v: v.top_k == 0,
    definition="keep `l >= ` the k-th largest (ties with the k-th are kept)",
    off="0",
    reference="HF `TopKLogitsWarper` (llama.cpp keeps exactly k)",
    label=lambda v: f"top-k {v.top_k:g}",
)
