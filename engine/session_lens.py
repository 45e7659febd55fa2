"""The logit lens, from the app's side: a reply's or a scored text's tokens read out layer
by layer (:mod:`engine.lens`) under the running model.

A mixin of :class:`engine.session.EngineSession`. Positions are counted as the app counts
them: index 0 is the distribution the reply's (or the scored text's) first token was drawn
from, so :attr:`engine.lens.LensPosition.position` and each layer's ``position`` are
indices into ``output`` / the scored tokens, as :class:`engine.kld.TokenKLD`'s ``index``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from engine.backend import Messages
from engine.errors import EngineError
from engine.lens import LensPosition, lens
from engine.prompts import scored_text


class LensMixin:
    """Needs the session's ``scheduler`` (the running model) and ``prompt_for``."""

    def lens_reply(
        self, messages: Messages, output: Sequence[int], positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The lens at ``positions`` of a reply (its prompt ``messages`` and tokens
        ``output``; None: every token), one :class:`LensPosition` each, in order: a
        generator, stop iterating to cancel. ``len(output)`` asks for the distribution
        after the reply's last token."""
        from engine.session import token_ids

        return self._lens(self.prompt_for(messages), token_ids(output), positions, top)

    def lens_text(
        self, text: str, prompt: Messages | None = None, positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The lens at ``positions`` of a given text (tokenized as :meth:`score_text` does)."""
        context, targets = scored_text(self.scheduler.loaded.tokenizer, text, prompt)
        return self._lens(context, targets, positions, top)

    def _lens(
        self, context: list[int], targets: list[int], positions: Sequence[int] | None, top: int
    ) -> Iterator[LensPosition]:
        if not context:
            raise EngineError("the logit lens needs at least one prompt token.")
        wanted = list(range(len(targets))) if positions is None else [int(p) for p in positions]
        if not wanted or any(not 0 <= p <= len(targets) for p in wanted):
            raise EngineError(f"positions must be in [0, {len(targets)}], got {wanted[:5]}.")
        if sorted(set(wanted)) != wanted:
            raise EngineError("positions must be increasing and distinct.")
        tokens = list(context) + list(targets)
        offset = len(context) - 1
        rows = lens(self.scheduler.loaded, tokens, [offset + p for p in wanted], top)
        return (_shift(row, offset) for row in rows)


def _shift(row: LensPosition, offset: int) -> LensPosition:
    """``row`` with its positions counted from the reply's first token."""
    at = row.position - offset
    return replace(row, position=at, layers=tuple(replace(layer, position=at) for layer in row.layers))
