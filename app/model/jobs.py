"""What the model layer asks the engine's worker to do: plain data, no Qt.

The worker runs a job and reports back with the job's tags (it has no request ids
when the job is made). Keep these narrow: a remote backend answers the same jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.params import SamplingParams

Messages = tuple[dict[str, str], ...]


@dataclass(frozen=True)
class ChatJob:
    """One reply. ``output`` + ``forced_token``: continue a reply after its first
    ``len(output)`` tokens with ``forced_token`` (a picked candidate)."""

    tag: int
    messages: Messages
    params: SamplingParams
    output: tuple[int, ...] = ()
    forced_token: int | None = None
    output_text: str | None = None
    """The text of ``output`` and of the forced token: a remote server continues from text."""
    forced_text: str | None = None


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
    output: tuple[int, ...] = ()
    output_text: str | None = None
    """The text of ``output`` (a remote server continues from text)."""
