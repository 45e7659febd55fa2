"""What a server cannot do itself, behind the same calls as the local engine's.

A server has no fork: :meth:`ServerEmulation.fork` (compare mode) and
:meth:`ServerEmulation.fork_reply` ("compare from here") start one stream per variant,
together, each continuing the reply's text where there is one; no ``Divergence`` events
(those need whole distributions, which no server sends). Scoring, replay and the
fidelity check need the model's whole distribution at given tokens, which a server does
not give: those calls raise with the reason the backend's ``capabilities`` declare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.api.backend import Messages, StartedRequest
from engine.api.capabilities import Capabilities
from engine.api.errors import EngineError
from engine.api.params import SamplingParams
from engine.remote.events import RemoteRequest


class ServerEmulation:
    """Mixed into :class:`engine.remote.backend.RemoteBackend`, whose request calls it uses."""

    if TYPE_CHECKING:  # provided by RemoteBackend
        capabilities: Capabilities

        def _begin(
            self, messages: Messages, params: SamplingParams, prefix: str, index: int, forced
        ) -> StartedRequest: ...

        def _checked(self, params: SamplingParams, seed: int | None) -> SamplingParams: ...

        def _body(self, req: RemoteRequest) -> tuple[str, dict[str, Any]]: ...

        def _text_of(self, ids: Sequence[int | None]) -> str: ...

    def fork(self, messages: Messages, variants: Sequence[SamplingParams]) -> list[StartedRequest]:
        """A server has no fork: one stream per variant, started together (no ``Divergence``:
        that needs whole distributions, which no server sends). All are checked first, so a
        variant the server cannot take starts none."""
        return self._fork(messages, variants, "", 0)

    def fork_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        variants: Sequence[SamplingParams],
        *,
        output_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> list[StartedRequest]:
        """Each variant continues the reply's text after its first ``len(output)`` tokens
        (their ids may be None: a server's reply continues from ``output_text``); ``carry``
        is ignored (a server keeps its sampler's state)."""
        if output_text is None:
            output_text = self._text_of(output)
        return self._fork(messages, variants, output_text, len(output))

    def _fork(self, messages: Messages, variants: Sequence[SamplingParams], prefix: str, index: int) -> list:
        for params in variants:  # validate every variant before anything starts
            self._body(RemoteRequest(-1, tuple(messages), self._checked(params, None), prefix, index))
        return [self._begin(messages, params, prefix, index, None) for params in variants]

    def score_text(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("score"))

    def replay(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("replay"))

    def check_fidelity(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("fidelity"))

    def load_second(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("compare_models"))

    def second_model(self) -> None:
        return None

    def release_second(self) -> None:
        """Nothing is held: a server cannot compare models."""

    def compare_reply(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("compare_models"))

    def compare_text(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("compare_models"))

    def lens_reply(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("logit_lens"))

    def lens_text(self, *args: Any, **kwargs: Any):
        raise EngineError(self._refused("logit_lens"))

    def _refused(self, name: str) -> str:
        reason = self.capabilities.reason(name)
        return f"{name}: {reason}" if reason else f"{name} is not available."
