"""The interface the app's worker drives: the local MLX engine or a remote server.

Two implementations: :class:`engine.session.session.EngineSession` (the model runs here, on MLX)
and :class:`engine.remote.backend.RemoteBackend` (an OpenAI-compatible server runs it and
reports logprobs). Both are driven from one thread by the same calls and emit the same
events (:mod:`engine.api.events`), so the chat, inspector, timeline, branching and compare
work on either. What differs is how much a step carries:

- **local**: every stage of the chain (``TokenStep.chain`` starts with ``raw``), the
  entropy and survivors after each, the raw logit, bias, penalty and (where DRY ran) DRY
  change of each candidate;
  fork groups also yield :class:`engine.api.events.Divergence`.
- **remote**: only what the server returned. ``TokenStep.reported_stage`` (and the
  one-stage ``chain``) names the stage the server's numbers describe (``raw``,
  ``penalties``, the last stage, ... see ``docs/REMOTE.md``); ``logprobs`` holds the
  chosen token's logprob there (None if the server did not report it); ``entropies``
  and ``survivors`` are None (not reported); each candidate has one logprob,
  ``raw_logit``/``bias``/``penalty``/``count`` None; ``position`` None; ``token_id`` None
  where the server sends text only (matched by text). No ``Divergence`` events. Read
  stage values with ``TokenStep.logprob_at(stage)``, which is None for a stage the
  server did not report, never with ``raw_logprob`` (that is simply the first stage of
  the chain); label them by ``reported_stage``.

What each backend can do is its ``capabilities`` (:mod:`engine.api.capabilities`), which
the app asks instead of the backend's type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from engine.api.capabilities import LOCAL_CAPABILITIES, Capabilities
from engine.api.draft import DraftModel
from engine.api.events import Event
from engine.api.kv_quantization import KV_OFF, KVQuantization
from engine.api.params import SamplingParams
from engine.api.reasoning import ReasoningMarkers
from engine.api.results import LensPosition, SecondModel, TokenFidelity, TokenKLD

Messages = Sequence[dict[str, str]]
ProgressFn = Callable[[str, float], None]

LOCAL = "local"
REMOTE = "remote"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    source: str
    vocab_size: int
    """0 when not known (a remote server does not say)."""
    context_length: int
    """0 when not known."""
    has_chat_template: bool
    eos_token_ids: tuple[int, ...]
    path: str
    """The file or folder the weights came from; a remote server's base URL."""
    architecture: str = ""
    """mlx-lm's model type, e.g. ``llama``, ``gemma3_text``, ``qwen3_next``."""
    cache_kinds: tuple[str, ...] = ()
    """The mlx-lm cache kinds of its layers, e.g. ``("KVCache", "RotatingKVCache")``."""
    quantization: str = ""
    """How the weights are stored, e.g. ``4-bit affine (group 32)`` or ``bfloat16``."""
    backend: str = LOCAL
    """``local`` (MLX here) or ``remote`` (an OpenAI-compatible server)."""
    precision: str = ""
    """What the model computes in (``float32``, ``float16``, ``bfloat16``); empty for a
    remote server (it does not say)."""
    precision_choice: str = ""
    """What was asked for: ``auto`` or a dtype (``engine.api.precision.PRECISIONS``)."""
    precision_reason: str = ""
    """Why ``precision`` was chosen, in one sentence."""
    kv: KVQuantization = KV_OFF
    """How the KV cache is quantized (local only; off for a remote server: it does not say)."""
    server: str = ""
    """Remote only: the server kind (``vllm``, ``sglang``, ``llama.cpp``, ``mlx_lm``,
    ``lmstudio``, ``ollama``, ``openai``)."""
    reported_stage: str = ""
    """Remote only: which distribution the server's logprobs are (``raw``, ``penalties``,
    ``final``, or ``sglang``: after penalties and temperature), as set or detected."""
    stage_detected: bool = False
    """Remote only: True when ``reported_stage`` follows from the server kind, False when
    it was set by the user or assumed (an unknown server)."""
    capabilities: Capabilities = LOCAL_CAPABILITIES
    """What the backend that loaded this model can do (the backend's own ``capabilities``):
    the app enables its menus and picks its labels from this, never from ``backend``."""
    server_note: str = ""
    """Remote only: what went wrong while connecting without stopping it, in one sentence
    (the server could not list its models, so the model is used as named); "" when nothing."""
    reasoning: ReasoningMarkers | None = None
    """The model's reasoning markers (``engine.api.reasoning``): its replies' tokens have a
    ``phase``; None: no markers (local), or not known (a server: its tokens get a phase
    from its ``reasoning_content`` / ``reasoning`` deltas where it sends them)."""
    thinking_switch: bool = False
    """Whether the chat template has the ``enable_thinking`` switch
    (``Backend.set_enable_thinking``)."""
    device: str = ""
    """Local only: MLX's device, ``cpu`` or ``gpu`` ("" for a remote server). MLX's CPU has
    no fast bfloat16 (a bfloat16 model there runs at a small fraction of its speed), which the
    app's dialogs say before a bfloat16 draft or comparison is started."""


@dataclass(frozen=True, slots=True)
class StartedRequest:
    request_id: int
    prompt_tokens: tuple[int, ...]
    """The prompt's token ids; empty when the backend does not know them (a remote server)."""


@runtime_checkable
class Backend(Protocol):
    """What the worker calls, all from its one thread. Calls validate before they change
    anything; a rejected call raises (``SamplingParamsError``, ``EngineError``, or
    ``engine.remote.backend.RemoteError``, an ``EngineError``)."""

    info: ModelInfo | None

    @property
    def capabilities(self) -> Capabilities:
        """What this backend can do; a call it cannot do raises ``EngineError`` with
        ``capabilities.reason(name)``."""
        ...

    def load(
        self, source: str, progress: ProgressFn | None = None, precision: str = "auto", kv: Any = None
    ) -> ModelInfo:
        """Local: load a model (``default``, a path, a repo id) to compute in ``precision``
        (``engine.api.precision``) with its KV cache as ``kv`` says (an
        ``engine.api.kv_quantization.KVQuantization``; None: off). Remote: choose the server's
        model ``source`` (an id from its ``/v1/models``); ``precision`` is the server's
        business and ignored, and a ``kv`` that quantizes is refused (the server's cache is
        its own)."""
        ...

    def start(self, messages: Messages, params: SamplingParams) -> StartedRequest:
        """Start a reply to ``messages``; its events come from :meth:`step`."""
        ...

    def start_text(self, text: str, params: SamplingParams) -> StartedRequest:
        """Start a continuation of ``text`` as it is, no chat template (a served
        ``/v1/completions`` request). Needs ``capabilities.serve``."""
        ...

    def continue_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        forced_token: int | None,
        params: SamplingParams,
        *,
        output_text: str | None = None,
        forced_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> StartedRequest:
        """Continue a reply after its first ``len(output)`` tokens with ``forced_token``
        (a branch); ``TokenStep.index`` continues from ``len(output)``, and the first step
        is the forced token (``forced=True``). A remote backend continues from text:
        ``output_text`` (the reply's text before the forced token) and ``forced_text``
        (the forced token's text), so an id of None (a server that did not report it)
        is fine there. The local engine reads the ids, which must all be ints (an
        ``EngineError`` says so otherwise), and ignores the texts. ``carry``: the stage
        state the history cannot rebuild (mirostat's μ) as
        :func:`engine.api.carry.carry_from_steps` folds it from the reply's steps; a
        server keeps its own and ignores it."""
        ...

    def fork(self, messages: Messages, variants: Sequence[SamplingParams]) -> list[StartedRequest]:
        """One prompt, one request per variant (compare mode). Local: one shared prefill and
        ``Divergence`` events. Remote: one stream per variant (``capabilities.divergence``
        is off)."""
        ...

    def fork_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        variants: Sequence[SamplingParams],
        *,
        output_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> list[StartedRequest]:
        """Each variant draws its own token after the first ``len(output)`` tokens of a reply
        ("compare from here"). A remote backend continues from ``output_text`` (the ids may
        be None there); the local engine needs int ids. ``carry`` as in
        :meth:`continue_reply`."""
        ...

    def score_text(
        self,
        text: str,
        params: SamplingParams,
        prompt: Messages | None = None,
        chunk: int | None = None,
        request_id: int = 0,
    ) -> Iterator[Event]:
        """``text`` teacher-forced through the chain (``capabilities.score``): a generator of
        ``PrefillProgress``, ``TokenStep`` and a last ``ScoreDone``; stop iterating to cancel."""
        ...

    def replay(
        self,
        messages: Messages,
        output: Sequence[int],
        params: SamplingParams | Sequence[SamplingParams],
        chunk: int | None = None,
        request_id: int = 0,
    ) -> Iterator[Event]:
        """A stored reply through the chain under ``params`` (``capabilities.replay``)."""
        ...

    def replay_text(
        self,
        text: str,
        output: Sequence[int],
        params: SamplingParams | Sequence[SamplingParams],
        chunk: int | None = None,
        request_id: int = 0,
    ) -> Iterator[Event]:
        """A text scored without a prompt, replayed as ``score_text`` read it (its first token
        the context; ``capabilities.replay``)."""
        ...

    def check_fidelity(self, messages: Messages, output: Sequence[int], chunk: int = 64) -> Iterator[TokenFidelity]:
        """A reply in the running precision against float32 (``capabilities.fidelity``): one
        ``engine.api.results.TokenFidelity`` per reply token."""
        ...

    def load_second(
        self, source: str, precision: str = "auto", progress: ProgressFn | None = None, kv: Any = None
    ) -> SecondModel:
        """Load a second model beside the running one to compare with
        (``capabilities.compare_models``), its KV cache as ``kv`` (an
        ``engine.api.kv_quantization.KVQuantization``; the running model's own weights with
        another ``kv`` are shared): refused with the numbers when it would not fit, or when
        its vocabulary differs. Returns an ``engine.api.results.SecondModel``."""
        ...

    def second_model(self) -> SecondModel | None:
        """The second model held (``SecondModel``), or None."""
        ...

    def release_second(self) -> None:
        """Free the second model."""
        ...

    def load_draft(
        self, source: str, precision: str = "auto", tokens: int = 3, progress: ProgressFn | None = None
    ) -> DraftModel:
        """Load a draft model that proposes ``tokens`` at a time for the running model to check
        (``capabilities.draft``; speculative decoding: the replies stay the same): refused
        with the reason when it would not fit or cannot serve the running model."""
        ...

    def draft_model(self) -> DraftModel | None:
        """The draft proposing to the running model (``DraftModel``), or None."""
        ...

    def release_draft(self) -> None:
        """No draft from the next step; its weights are freed."""
        ...

    def compare_reply(
        self, messages: Messages, output: Sequence[int], top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A reply under the running model and the second: one ``engine.api.results.TokenKLD`` per
        reply token (KL(running ‖ second) and both top lists); stop iterating to cancel."""
        ...

    def compare_text(
        self, text: str, prompt: Messages | None = None, top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A given text (scored as ``score_text`` scores it) under both models."""
        ...

    def lens_reply(
        self, messages: Messages, output: Sequence[int], positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The logit lens (``capabilities.logit_lens``) at ``positions`` of a reply (index 0:
        the distribution its first token was drawn from; None: every token): one
        ``engine.api.results.LensPosition`` each, in order; stop iterating to cancel."""
        ...

    def lens_text(
        self, text: str, prompt: Messages | None = None, positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The logit lens at ``positions`` of a given text (tokenized as ``score_text`` does)."""
        ...

    def step(self) -> list[Event]:
        """The events since the last call. Local: runs one decode step. Remote: returns
        what the server sent, waiting at most a few tens of milliseconds for it."""
        ...

    def has_work(self) -> bool: ...

    def cancel(self, request_id: int) -> None:
        """Stop a request at once (remote: closes its HTTP request); its
        ``Finished("cancelled")`` comes with the next :meth:`step`."""
        ...

    def cancel_all(self) -> None: ...

    def update_params(self, request_id: int, params: SamplingParams) -> None:
        """New settings from the next token. Remote: cancels the stream and continues
        from the text received so far with the new settings."""
        ...

    def set_enable_thinking(self, enabled: bool | None) -> None:
        """The chat template's ``enable_thinking`` for every prompt made from now on (the
        next reply, its continuations): True / False where the template has the switch
        (``ModelInfo.thinking_switch``), None to leave the template's default. Remote: sent
        as ``chat_template_kwargs``."""
        ...

    def token_text(self, token_id: int) -> str: ...

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (``logprobs``' ``bytes``; a character split across tokens is
        in neither whole). Reads only the tokenizer's vocabulary, so the server's threads may
        call it. Needs ``capabilities.serve``."""
        ...

    def memory_bytes(self) -> int: ...

    def release_thread(self) -> None:
        """Call last, on the thread that drove the backend."""
        ...
