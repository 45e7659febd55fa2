"""``penalties`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.penalties`)."""

from __future__ import annotations

from engine.specs.spec import Field, StageSpec, Values


def _neutral(v: Values) -> bool:
    return v.repetition_penalty == 1.0 and v.presence_penalty == 0.0 and v.frequency_penalty == 0.0


def _describe(v: Values) -> str:
    return (
        f"rep {v.repetition_penalty:g} · pres {v.presence_penalty:g} · freq {v.frequency_penalty:g}"
        f" · last {v.penalty_window or 'all'}"
    )


def _label(v: Values) -> str | None:
    return f"rep {v.repetition_penalty:g}" if v.repetition_penalty != 1.0 else None


SPEC = StageSpec(
    name="penalties",
    summary="Repetition, presence and frequency penalties over the last window tokens.",
    order=10,
    fields=(
        Field(
            "repetition_penalty",
            float,
            1.0,
            "Divide positive / multiply negative logits of tokens seen in the window. 1 = off.",
            range=(0.0, 100.0),
            lo_open=True,
            label="Repetition",
            slider=(0.5, 2.0),
            spin=(0.01, 100.0),
            decimals=3,
        ),
        Field(
            "presence_penalty",
            float,
            0.0,
            "Subtract from the logit of every token seen in the window. 0 = off.",
            range=(-100.0, 100.0),
            label="Presence",
            slider=(-2.0, 2.0),
            decimals=2,
        ),
        Field(
            "frequency_penalty",
            float,
            0.0,
            "Subtract frequency × count from the logit of tokens seen in the window. 0 = off.",
            range=(-100.0, 100.0),
            label="Frequency",
            slider=(-2.0, 2.0),
            decimals=2,
        ),
        Field(
            "penalty_window",
            int,
            64,
            "Tokens of prompt + output the penalties count. 0 = all of them.",
            range=(0, 1_000_000),
            label="Window",
            slider=(0, 1024),
        ),
    ),
    neutral=_neutral,
    definition="over the last `penalty_window` tokens of prompt + output (0 = all): repetition divides "
    "positive / multiplies negative logits of seen tokens, then `- presence` once and `- frequency·count`",
    off="1, 0, 0",
    reference="llama.cpp `penalties`; HF `RepetitionPenaltyLogitsProcessor`",
    describe=_describe,
    label=_label,
)
