"""What the model layer asks the engine's worker to do: plain data, no Qt.

The worker runs a job and reports back with the job's tags (it has no request ids
when the job is made). Keep these narrow: a remote backend answers the same jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.params import SamplingParams

Messages = tuple[dict[str, str], ...]


@dataclass(frozen=True)
class ForcedToken:
    """The token a branch starts with (a picked candidate). ``token_id`` is None where a
    server did not report it; ``text`` is its text (None: not known here), which is what a
    remote server continues from. The local engine needs the id."""

    token_id: int | None
    text: str | None = None


@dataclass(frozen=True)
class ChatJob:
    """One reply. With ``forced`` (a branch): continue a reply after its first
    ``len(output)`` tokens with that token; without, a new reply."""

    tag: int
    messages: Messages
    params: SamplingParams
    output: tuple[int | None, ...] = ()
    """The reply's tokens before the forced one; None where a server did not report an id
    (a remote backend reads only their number and ``output_text``)."""
    forced: ForcedToken | None = None
    output_text: str | None = None
    """The text of ``output``: a remote server continues from text."""
    carry: Mapping[str, Any] | None = None
    """Stage state the history cannot rebuild (mirostat's μ), folded from the steps of
    ``output`` (:func:`engine.api.carry.carry_from_steps`); None: it starts afresh."""
    enable_thinking: bool | None = None
    """The chat template's ``enable_thinking`` for this prompt; None: the template's default."""


@dataclass(frozen=True)
class ForkJob:
    """One prompt, one reply per variant, one prefill (compare mode). With ``output``,
    each variant draws its own token after the first ``len(output)`` tokens of a reply
    ("compare from here"). ``tags[i]`` names variant i; ``group`` names the whole fork
    (its Divergence events)."""

    group: int
    tags: tuple[int, ...]
    messages: Messages
    variants: tuple[SamplingParams, ...]
    output: tuple[int | None, ...] = ()
    output_text: str | None = None
    """The text of ``output`` (a remote server continues from text)."""
    carry: Mapping[str, Any] | None = None
    """As :attr:`ChatJob.carry`, for every variant."""
    enable_thinking: bool | None = None
    """As :attr:`ChatJob.enable_thinking`."""
