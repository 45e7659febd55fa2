"""``temperature`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.temperature`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec, Values


def _neutral(v: Values) -> bool:
    return v.temperature == 1.0 and v.dynatemp_range == 0.0


def _describe(v: Values) -> str:
    text = "greedy" if v.temperature == 0 else f"T {v.temperature:g}"
    if v.dynatemp_range > 0:
        text += f" ± {v.dynatemp_range:g} (exp {v.dynatemp_exponent:g})"
    return text


def _label(v: Values) -> str:
    if v.temperature == 0:
        return "greedy"
    return f"T {v.temperature:g}" + (f"±{v.dynatemp_range:g}" if v.dynatemp_range else "")


SPEC = StageSpec(
    name="temperature",
    summary="Divides the logits; dynamic temperature scales T with the entropy. T = 0 is greedy.",
    order=30,
    fields=(
        Field(
            "temperature",
            float,
            0.0,
            "Divides the logits. 1 = off; 0 = greedy (the most likely token entering this stage).",
            range=(0.0, 100.0),
            label="Temperature",
            slider=(0.0, 2.0),
            decimals=2,
        ),
        Field(
            "dynatemp_range",
            float,
            0.0,
            "Dynamic temperature: T moves within T ± range with the entropy (llama.cpp temp_ext). 0 = off.",
            range=(0.0, 100.0),
            label="Dynamic range",
            slider=(0.0, 2.0),
            decimals=2,
        ),
        Field(
            "dynatemp_exponent",
            float,
            1.0,
            "Dynamic temperature: exponent on the normalized entropy (default 1; no effect when the range is 0).",
            range=(0.0, 100.0),
            label="Dynamic exponent",
            slider=(0.0, 4.0),
            decimals=2,
        ),
    ),
    neutral=_neutral,
    definition="`l / T`; with `dynatemp_range = r > 0`: `T' = lo + (hi − lo)·(H / ln n)^exponent`, "
    "`lo = max(0, T − r)`, `hi = T + r`, `H` the entropy and `n` the number of tokens still in the "
    "distribution, floored at 1e-6 (llama.cpp divides by 0 there)",
    off="T = 1, r = 0",
    reference="llama.cpp `temp_ext`",
    describe=_describe,
    label=_label,
    marks_greedy=True,
)
