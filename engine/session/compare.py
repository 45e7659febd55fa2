"""Compare models, from the app's side: a second local model loaded beside the running one,
and the same tokens (a reply's, or a scored text's) scored under both.

Held by :class:`engine.session.session.EngineSession`, which encodes the prompts and forwards
its ``load_second`` / ``second_model`` / ``release_second`` / ``compare_*`` calls. The second model is checked before it
is loaded (it must fit beside the first: :mod:`engine.models.fit`) and after (the same
vocabulary: its tokenizer maps every piece to the same id, so one tokenization, the
running model's, serves both). It stays loaded for the next comparison until
:meth:`ModelComparison.release` or another :meth:`ModelComparison.load`. The rows are
:class:`engine.api.results.TokenKLD`, KL(running ‖ second): the running model is the base.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from engine.analysis.kld import logprob_rows, pair_rows
from engine.api.backend import ModelInfo
from engine.api.errors import EngineError
from engine.api.kv_quantization import KVQuantization
from engine.api.results import SecondModel, TokenKLD
from engine.models.fit import check_fits_beside, loaded_bytes
from engine.models.load import LoadedModel, ProgressFn, load


class ModelComparison:
    """The second model and the comparisons under it. ``running`` gives the running model,
    ``info`` the running model's ``ModelInfo`` (None before one is loaded)."""

    def __init__(self, running: Callable[[], LoadedModel], info: Callable[[], ModelInfo | None]) -> None:
        self._running = running
        self._info = info
        self._second: LoadedModel | None = None
        self._second_source = ""

    def load(
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
        running = self._running()
        self.release()
        same_weights = precision in (running.precision.choice, running.precision.dtype)
        info = self._info()
        if info is not None and source == info.source and same_weights:
            second = running.with_kv(kv)
        else:
            check_fits_beside(loaded_bytes(running.model), source, precision)
            second = load(source, progress, precision, kv=kv)
        _check_same_vocabulary(running, second)
        self._second, self._second_source = second, source
        return self.second_model()

    @property
    def second(self) -> LoadedModel | None:
        """The second model, while one is held."""
        return self._second

    def second_model(self) -> SecondModel | None:
        s = self._second
        return SecondModel(s.name, self._second_source, s.precision.dtype, s.kv.describe()) if s is not None else None

    def release(self) -> None:
        # Dropping the reference frees the weights (MLX arrays are reference-counted). No
        # gc.collect() here: on the engine's thread a collection that reaches Qt objects
        # deadlocks with the GUI thread.
        self._second = None

    def compare(self, context: list[int], targets: list[int], top: int, chunk: int) -> Iterator[TokenKLD]:
        """``targets`` after ``context`` under the running model and the second: one row per
        target, ``index`` 0 for the first (a generator: stop iterating to cancel)."""
        second = self._second
        if second is None:
            raise EngineError("load the model to compare with first (load_second).")
        if not targets:
            raise EngineError("there is no token to compare.")
        if not 1 <= top <= 100 or chunk <= 0:
            raise EngineError("top must be in [1, 100] and chunk positive.")
        running = self._running()
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
    mine, theirs = running.vocabulary(), second.vocabulary()
    if mine is not None and theirs is not None and mine != theirs:
        differ = sum(1 for piece, i in mine.items() if theirs.get(piece) != i)
        raise EngineError(
            f"{second.name}'s tokenizer maps {differ} pieces to other ids than {running.name}'s: "
            "a token-by-token comparison needs the same tokenizer."
        )
