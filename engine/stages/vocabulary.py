"""What stage state resolves against the model's vocabulary, made once and kept: DRY's
sequence breakers and the grammar stage's matchers.

One per loaded model (the scheduler, scoring and a draft each hold the one of the model they
sample). llguidance's tokenizer is made from the model's Hugging Face tokenizer at the first
grammar (half a second for a 49k vocabulary), and a grammar's matcher is compiled once and
copied for each row that uses it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any

from engine.specs.grammar import compiled
from engine.stages.dry_state import BreakerCache, Breakers

KEPT_GRAMMARS = 8


class GrammarUnavailable(RuntimeError):
    """The model's tokenizer cannot be read by llguidance (not a fast tokenizer)."""


class Vocabulary:
    """``size`` tokens; ``breakers(strings)`` resolves DRY's sequence breakers (None: no
    breaker resolves, for tests without a tokenizer); ``tokenizer`` is the model's Hugging
    Face tokenizer (or mlx-lm's wrapper of one) and ``eos`` the ids that end a reply, which
    a complete grammar allows."""

    def __init__(
        self,
        size: int,
        breakers: Callable[[tuple[str, ...]], Breakers] | None = None,
        tokenizer: Any = None,
        eos: Collection[int] = (),
    ) -> None:
        self.size = size
        self._breakers = breakers
        self._tokenizer = tokenizer
        self._eos = sorted(eos)
        self._ll_tokenizer: Any = None
        self._matchers: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, loaded: Any, piece: Callable[[int], str]) -> Vocabulary:
        """The vocabulary of a loaded model (``engine.models.load.LoadedModel``); ``piece``
        gives a token's text."""
        tokenizer = loaded.tokenizer
        cache = BreakerCache(
            loaded.vocab_size, piece, lambda text: list(tokenizer.encode(text, add_special_tokens=False))
        )
        return cls(loaded.vocab_size, cache, tokenizer, loaded.eos_token_ids)

    def breakers(self, texts: tuple[str, ...]) -> Breakers:
        if self._breakers is None:
            return Breakers(frozenset())
        return self._breakers(texts)

    def matcher(self, grammar: tuple[str, ...]) -> Any:
        """A fresh ``llguidance.LLMatcher`` of ``grammar`` (``(kind, text)``) at its start."""
        return self.compile(grammar).deep_copy()

    def compile(self, grammar: tuple[str, ...]) -> Any:
        """``grammar``'s matcher, compiled now unless it is kept, and kept. A server calls it on
        its own threads, so that the engine's thread finds it compiled: the kept matchers
        change under a lock, and a compile runs outside it (the engine's thread never waits
        for another thread's compile)."""
        with self._lock:
            template = self._matchers.get(grammar)
            if template is not None:
                self._matchers.move_to_end(grammar)
                return template
        from llguidance import LLMatcher

        template = LLMatcher(self.ll_tokenizer(), compiled(*grammar), log_level=0)
        if template.is_error():
            raise ValueError(f"the grammar cannot be used with this model's tokenizer: {template.get_error()}")
        with self._lock:
            self._matchers[grammar] = template
            while len(self._matchers) > KEPT_GRAMMARS:
                self._matchers.popitem(last=False)
        return template

    def ll_tokenizer(self) -> Any:
        """llguidance's tokenizer of this vocabulary, made at the first call."""
        if self._ll_tokenizer is None:
            if self._tokenizer is None:
                raise GrammarUnavailable("no tokenizer was given for grammars.")
            import llguidance.hf
            from transformers import PreTrainedTokenizerFast

            inner = getattr(self._tokenizer, "_tokenizer", self._tokenizer)
            if not isinstance(inner, PreTrainedTokenizerFast):
                raise GrammarUnavailable(
                    f"structured output needs a fast (Rust) tokenizer; this model's is {type(inner).__name__}."
                )
            self._ll_tokenizer = llguidance.hf.from_tokenizer(
                inner, n_vocab=self.size, eos_token=self._eos or None, slices=None
            )
        return self._ll_tokenizer
