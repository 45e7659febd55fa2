"""What a stage declares once: its name, its fields, when it acts, and how it is documented.

A ``StageSpec`` imports neither MLX nor Qt, so the app, the CLI and
:class:`engine.api.params.SamplingParams` all read it: the dataclass fields, their
validation, the command-line flags, the panel's rows and the docs' stage table are made
from the specs (``engine/specs/<name>.py``, collected by
:mod:`engine.specs.registry`). The ``[B, V]`` kernel and the per-row state live in the
stage's MLX module (``engine/stages/<name>.py``), like llama.cpp's ``llama_sampler_i``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.specs.checks import check_float, check_int

Values = Any
"""Anything with the SamplingParams fields as attributes (SamplingParams itself, or the
editor's values in a namespace)."""


@dataclass(frozen=True)
class Field:
    """One SamplingParams field of a stage."""

    name: str
    kind: type
    """``float``, ``int``, or ``tuple`` (a list of strings, checked by ``check``)."""
    default: Any
    help: str
    """What it does, its range and its off value (the field's docstring and tooltip)."""
    range: tuple[float, float] = (0.0, 0.0)
    lo_open: bool = False
    """The range excludes its lower bound."""
    label: str = ""
    slider: tuple[float, float] = (0.0, 1.0)
    """The panel slider's span: the values people try; the spin box takes the whole range."""
    spin: tuple[float, float] | None = None
    """The spin box's range where it differs from ``range`` (an open lower bound)."""
    decimals: int | None = None
    flag: str | None = None
    """Its command-line flag; default ``--`` + the name with dashes."""
    check: Callable[[Any], Any] | None = None
    """Validation of a ``tuple`` field; numbers are checked against ``range``."""
    flags: tuple[str, ...] = ()
    """The flags of a field the command line parses itself (``grammar``: one per kind), and
    that the panel edits in a section of its own; empty: one flag and a generic row."""

    def validate(self, value: Any) -> Any:
        if self.check is not None:
            return self.check(value)
        if self.kind is int:
            return check_int(self.name, value, int(self.range[0]), int(self.range[1]))
        return check_float(self.name, value, *self.range, lo_open=self.lo_open)

    @property
    def custom(self) -> bool:
        """Its flags and its panel are its stage's own (not a generic row)."""
        return bool(self.flags)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def spin_range(self) -> tuple[float, float]:
        return self.spin if self.spin is not None else self.range


@dataclass(frozen=True)
class StageSpec:
    """One sampling stage, as everything but its kernel sees it."""

    name: str
    summary: str
    """One line: what the stage does (the editor's tooltip and page title)."""
    order: int
    """Its place in the canonical order (``STAGE_NAMES``) and the default chain."""
    fields: tuple[Field, ...]
    neutral: Callable[[Values], bool]
    """Whether these values leave every row unchanged (the stage is left out of the chain)."""
    definition: str
    """The docs table: what the stage computes."""
    off: str
    """The docs table: the values that switch it off."""
    reference: str
    """The docs table: what it follows and is tested against."""
    describe: Callable[[Values], str] | None = None
    """A few words for the editor's row; default: the one field's value."""
    label: Callable[[Values], str | None] | None = None
    """A few words for a settings label when it acts (e.g. ``top-k 40``); None: the name."""
    default_on: bool = True
    """In ``DEFAULT_SAMPLERS``; an opt-in stage runs only when ``samplers`` lists it."""
    reorderable: bool = True
    """False for ``bias``: always first, not in ``samplers``."""
    constraint: bool = False
    """A hard constraint (``grammar``): it runs whenever it is set, first (after ``bias``)
    where ``samplers`` does not list it (so it stays out of ``DEFAULT_SAMPLERS``: an order
    saved before it existed keeps its meaning), and greedy rows draw among the tokens it
    keeps wherever it stands."""
    marks_greedy: bool = False
    """Greedy rows draw the argmax of the distribution entering this stage (``temperature``)."""
    replay: Callable[[Any, Values, float | None], Any] | None = None
    """For state the history alone cannot rebuild (mirostat's μ): the state after one
    recorded token, from the state before it (None: the stage starts afresh), the token's
    settings and its logprob after this stage (None: not reported). A continuation of a
    stored reply rebuilds the carried state with it (:mod:`engine.api.carry`)."""
    check_carry: Callable[[Any], Any] | None = None
    """The carried state as a request takes it (``engine.api.carry.check_carry``), raising
    ``ValueError`` when it is not one; None: a finite number (mirostat's μ)."""

    def active(self, values: Values) -> bool:
        """Whether the stage runs for a row: in its ``samplers`` (or not reorderable, or a
        constraint) and not neutral."""
        listed = not self.reorderable or self.constraint or self.name in values.samplers
        return listed and not self.neutral(values)

    def summary_text(self, values: Values) -> str:
        if self.describe is not None:
            return self.describe(values)
        return f"{getattr(values, self.fields[0].name):g}"

    def short_label(self, values: Values) -> str | None:
        """None when the values are neutral."""
        if self.neutral(values):
            return None
        if self.label is not None:
            return self.label(values)
        return f"{self.name} {getattr(values, self.fields[0].name):g}"
