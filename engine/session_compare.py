"""Compare models, from the app's side: a second local model loaded beside the running one,
and the same tokens (a reply's, or a scored text's) scored under both.

A mixin of :class:`engine.session.EngineSession`. The second model is checked before it
is loaded (it must fit beside the first: :mod:`engine.model_fit`) and after (the same
vocabulary: its tokenizer maps every piece to the same id, so one tokenization, the
running model's, serves both). It stays loaded for the next comparison until
:meth:`release_second` or another :meth:`load_second`. The rows are
:class:`engine.kld.TokenKLD`, KL(running ‖ second): the running model is the base.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from engine.backend import Messages
from engine.errors import EngineError
from engine.kld import TokenKLD, logprob_rows, pair_rows
from engine.kv_quantization import KVQuantization
from engine.model_fit import check_fits_beside, loaded_bytes
from engine.models import LoadedModel, ProgressFn, load
from engine.prompts import scored_text


@dataclass(frozen=True, slots=True)
class SecondModel:
    """What the app shows of the model a reply is compared with."""

    name: str
    source: str
    precision: str
    kv: str = "off"
    """Its KV cache (``KVQuantization.describe``): ``off``, ``8-bit (group 64)``, ..."""


class CompareModelsMixin:
    """Needs the session's ``scheduler`` (the running model) and ``prompt_for``."""

    _second: LoadedModel | None = None
    _second_source: str = ""

    def load_second(
        self,
        source: str,
        precision: str = "auto",
        progress: ProgressFn | None = None,
        kv: KVQuantization | None = None,
    ) -> SecondModel:
        """Load ``source`` in ``precision``, its KV cache quantized as ``kv`` says, beside the
        running model (the one held before is released first). The running model's own
        source and precision with another ``kv`` shares its weights (nothing is loaded).
        Refused before loading when it would not fit, after loading when its vocabulary
        differs; either way the running model is untouched."""
        running = self.scheduler.loaded
        self.release_second()
        same_weights = precision in (running.precision.choice, running.precision.dtype)
        if self.info is not None and source == self.info.source and same_weights:
            second = running.with_kv(kv)
        else:
            check_fits_beside(loaded_bytes(running.model), source, precision)
            second = load(source, progress, precision, kv=kv)
        _check_same_vocabulary(running, second)
        self._second, self._second_source = second, source
        return self.second_model()

    def second_model(self) -> SecondModel | None:
        s = self._second
        return SecondModel(s.name, self._second_source, s.precision.dtype, s.kv.describe()) if s is not None else None

    def release_second(self) -> None:
        # Dropping the reference frees the weights (MLX arrays are reference-counted). No
        # gc.collect() here: on the engine's thread a collection that reaches Qt objects
        # deadlocks with the GUI thread.
        self._second = None

    def compare_reply(
        self, messages: Messages, output: Sequence[int], top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A reply (its prompt ``messages`` and tokens ``output``) under the running model and
        the second one: one row per reply token, ``index`` 0 for its first (a generator:
        stop iterating to cancel)."""
        from engine.session import token_ids

        context = self.prompt_for(messages)
        return self._compare(context, token_ids(output), top, chunk)

    def compare_text(
        self, text: str, prompt: Messages | None = None, top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A given text (as :meth:`score_text` scores it) under both models."""
        context, targets = scored_text(self.scheduler.loaded.tokenizer, text, prompt)
        return self._compare(context, targets, top, chunk)

    def _compare(self, context: list[int], targets: list[int], top: int, chunk: int) -> Iterator[TokenKLD]:
        second = self._second
        if second is None:
            raise EngineError("load the model to compare with first (load_second).")
        if not targets:
            raise EngineError("there is no token to compare.")
        if not 1 <= top <= 100 or chunk <= 0:
            raise EngineError("top must be in [1, 100] and chunk positive.")
        running = self.scheduler.loaded
        tokens = list(context) + list(targets)
        first = len(context) - 1
        base = logprob_rows(running, tokens, chunk)
        return pair_rows(base, logprob_rows(second, tokens, chunk), tokens, first, top)


def _check_same_vocabulary(running: LoadedModel, second: LoadedModel) -> None:
    if running.vocab_size != second.vocab_size:
        raise EngineError(
            f"{second.name} has {second.vocab_size} logits and {running.name} {running.vocab_size}: "
            "a token-by-token comparison needs the same vocabulary."
        )
    mine, theirs = _vocab(running), _vocab(second)
    if mine is not None and theirs is not None and mine != theirs:
        differ = sum(1 for piece, i in mine.items() if theirs.get(piece) != i)
        raise EngineError(
            f"{second.name}'s tokenizer maps {differ} pieces to other ids than {running.name}'s: "
            "a token-by-token comparison needs the same tokenizer."
        )


def _vocab(loaded: LoadedModel) -> dict[str, int] | None:
    inner = getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer)
    get = getattr(inner, "get_vocab", None)
    return dict(get()) if get is not None else None
