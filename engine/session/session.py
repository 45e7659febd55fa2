"""One model and its scheduler, behind plain-data calls: what the app's worker owns.

Everything here must be called from one thread (MLX streams and arrays belong
to the thread that made them); nothing it returns holds an MLX array.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine.analysis.scored_texts import ScoredTexts
from engine.api.backend import Messages, ModelInfo, StartedRequest
from engine.api.capabilities import LOCAL_CAPABILITIES, Capabilities
from engine.api.draft import DEFAULT_DRAFT_TOKENS, DraftModel, check_draft_tokens
from engine.api.errors import EngineError
from engine.api.events import Event
from engine.api.kv_quantization import KVQuantization
from engine.api.params import SamplingParams
from engine.api.reasoning import checked_switch, has_thinking_switch
from engine.api.results import LensPosition, SecondModel, TokenKLD
from engine.models.fit import check_fits_beside, loaded_bytes
from engine.models.load import DEFAULT_MODEL, ProgressFn, default_model_path, load
from engine.runtime.prompts import encode_messages, encode_text, scored_text, token_ids
from engine.runtime.scheduler import Scheduler
from engine.session.compare import ModelComparison
from engine.session.lens import LensReader, LensReuse


def runtime_versions() -> dict[str, str]:
    import mlx_lm

    return {"mlx": mx.__version__, "mlx-lm": mlx_lm.__version__, "python": platform.python_version()}


def loaded_libraries() -> list[str]:
    """Shared libraries of MLX this process has mapped (Linux), else MLX's module file."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        found = {line.split()[-1] for line in maps.read_text().splitlines() if "libmlx" in line}
        if found:
            return sorted(found)
    return [str(Path(mx.__file__).resolve())]


def runtime_report() -> dict[str, object]:
    """Where the engine's code and libraries were loaded from (the bundle's self-test checks it)."""
    import mlx_lm

    return {
        "mlx_library": loaded_libraries(),
        "mlx_module": str(Path(mx.__file__).resolve()),
        "mlx_lm_module": str(Path(mlx_lm.__file__).resolve()),
        "engine_module": str(Path(__file__).resolve()),
        "executable": sys.executable,
        "frozen": bool(getattr(sys, "frozen", False)),
        **runtime_versions(),
    }


def describe_quantization(loaded) -> str:
    """The weights' storage in words: mlx-lm's affine quantization, else the float type."""
    quant = loaded.config.get("quantization")
    if isinstance(quant, dict) and "bits" in quant:
        layers = [v for v in quant.values() if isinstance(v, dict) and "bits" in v]
        bits = sorted({int(quant["bits"])} | {int(v["bits"]) for v in layers}) if layers else [int(quant["bits"])]
        widths = "/".join(str(b) for b in bits)
        return f"{widths}-bit affine (group {quant.get('group_size', 64)})"
    embed = getattr(getattr(loaded.model, "model", loaded.model), "embed_tokens", None)
    weight = getattr(embed, "weight", None)
    return str(weight.dtype).replace("mlx.core.", "") if weight is not None else "unknown"


class EngineSession:
    """The local backend (:class:`engine.api.backend.Backend`): one MLX model and its scheduler."""

    def __init__(self, prefill_chunk: int | None = None, max_batch_size: int = 8) -> None:
        """``prefill_chunk=None`` sizes prefill chunks from the measured rate (engine/runtime/chunking.py)."""
        self._prefill_chunk = prefill_chunk
        self._max_batch_size = max_batch_size
        self._loaded = None
        self._scheduler: Scheduler | None = None
        self._draft: DraftModel | None = None  # the draft of the running model (a new model has none)
        self._scored = ScoredTexts()
        self.info: ModelInfo | None = None
        self.enable_thinking: bool | None = None
        """The chat template's ``enable_thinking`` for prompts made from now on (None: its default)."""
        # Compare models and the logit lens, each given what it reads of the running model.
        self.comparison = ModelComparison(lambda: self.scheduler.loaded, lambda: self.info)
        self.lens = LensReader(lambda: self.scheduler)

    @property
    def capabilities(self) -> Capabilities:
        """Everything but the network: the model and the whole chain are here."""
        return LOCAL_CAPABILITIES

    def load(
        self, source: str, progress: ProgressFn | None = None, precision: str = "auto", kv: KVQuantization | None = None
    ) -> ModelInfo:
        """Load ``source`` to compute in ``precision`` with its KV cache quantized as ``kv``
        says (None: off); on failure the previous model stays in use."""
        loaded = load(source, progress, precision, kv=kv)
        scheduler = Scheduler(loaded, max_batch_size=self._max_batch_size, prefill_chunk=self._prefill_chunk)
        self._loaded, self._scheduler, self._draft = loaded, scheduler, None
        # The served prompts scored last, under this model; each one done leaves its caches
        # in the prefix store, where a reply to the same prompt starts from them.
        self._scored = ScoredTexts(finished=scheduler.prefix_store.add)
        self.info = ModelInfo(
            name=loaded.name,
            source=source,
            vocab_size=loaded.vocab_size,
            context_length=loaded.context_length,
            has_chat_template=bool(getattr(loaded.tokenizer, "chat_template", None)),
            eos_token_ids=tuple(sorted(loaded.eos_token_ids)),
            path=str(default_model_path()) if source == DEFAULT_MODEL else source,
            architecture=str(loaded.config.get("model_type", "")),
            cache_kinds=tuple(scheduler.cache_kinds),
            quantization=describe_quantization(loaded),
            precision=loaded.precision.dtype,
            precision_choice=loaded.precision.choice,
            precision_reason=loaded.precision.reason,
            kv=loaded.kv,
            reasoning=scheduler.reasoning,
            thinking_switch=has_thinking_switch(loaded.tokenizer),
            device="cpu" if mx.default_device() == mx.cpu else "gpu",
        )
        return self.info

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            raise EngineError("no model is loaded yet.")
        return self._scheduler

    def prompt_for(self, messages: Messages) -> list[int]:
        """Chat messages as prompt tokens: the chat template, or plain text without one."""
        return encode_messages(self.scheduler.loaded.tokenizer, messages, self.enable_thinking)

    def set_enable_thinking(self, enabled: bool | None) -> None:
        self.enable_thinking = checked_switch(enabled)

    def start(self, messages: Messages, params: SamplingParams) -> StartedRequest:
        prompt = self.prompt_for(messages)
        request_id = self.scheduler.insert(prompt, params)
        return StartedRequest(request_id, tuple(prompt))

    def start_text(self, text: str, params: SamplingParams) -> StartedRequest:
        prompt = encode_text(self.scheduler.loaded.tokenizer, text)
        request_id = self.scheduler.insert(prompt, params)
        return StartedRequest(request_id, tuple(prompt))

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
        """Continue a reply after its first ``len(output)`` tokens with ``forced_token``.
        ``output_text`` and ``forced_text`` are for remote backends; the ids suffice here,
        and must all be ints (``EngineError`` otherwise: a server's reply without ids)."""
        if forced_token is None:
            raise EngineError(
                "the local engine continues from token ids, and the picked token has none "
                "(the server that wrote it did not report it)."
            )
        ids = token_ids(output)
        prompt = self.prompt_for(messages)
        request_id = self.scheduler.continue_output(prompt, ids, forced_token, params, carry=carry)
        return StartedRequest(request_id, tuple(prompt))

    def fork(self, messages: Messages, variants: Sequence[SamplingParams]) -> list[StartedRequest]:
        """One prompt, one request per variant, sharing one prefill (compare mode)."""
        prompt = self.prompt_for(messages)
        return [StartedRequest(rid, tuple(prompt)) for rid in self.scheduler.fork(prompt, variants)]

    def fork_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        variants: Sequence[SamplingParams],
        *,
        output_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> list[StartedRequest]:
        """Continue a reply after its first ``len(output)`` tokens with each variant
        ("compare from here"); works for replies the engine no longer holds.
        ``output_text`` is for remote backends; the ids suffice here (all ints)."""
        output = token_ids(output)
        prompt = self.prompt_for(messages)
        ids = self.scheduler.fork_output(prompt, output, variants, carry=carry)
        return [StartedRequest(rid, tuple(prompt)) for rid in ids]

    def _teacher_chunk(self, chunk: int | None) -> int:
        """Tokens per forward pass of a teacher-forced pass (scoring, replay): ``chunk``, else
        sized like prefill."""
        if chunk is not None:
            return chunk
        from engine.runtime.chunking import first_size

        return self._prefill_chunk or first_size()

    def score_text(
        self,
        text: str,
        params: SamplingParams,
        prompt: Messages | None = None,
        chunk: int | None = None,
        request_id: int = 0,
    ):
        """Score ``text`` teacher-forced (:func:`engine.analysis.score.score`; a generator: stop
        iterating to cancel). With ``prompt``, ``text`` is the assistant's reply to those
        messages (chat template) and only its tokens are scored; else the first token of the
        text is the context. ``chunk``: tokens per forward pass (default: sized like prefill)."""
        from engine.analysis.score import score

        scheduler = self.scheduler
        context, targets = scored_text(scheduler.loaded.tokenizer, text, prompt)
        chunk = self._teacher_chunk(chunk)
        return score(
            scheduler.loaded, context, targets, params, scheduler.vocabulary, scheduler.text, chunk, 0, request_id
        )

    def score_tokens(
        self, tokens: Sequence[int], params: SamplingParams, chunk: int | None = None, request_id: int = 0
    ):
        """Score a prompt given as tokens as :meth:`score_text` scores a text without a
        prompt (its first token the context, every later one scored): a served request's
        ``echo``. A generator, like :meth:`score_text`. The prompts scored last are kept
        (``engine.analysis.scored_texts``): the choices of one item prefill their shared
        context once."""
        from engine.analysis.score import score

        scheduler = self.scheduler
        ids = list(tokens)
        chunk = self._teacher_chunk(chunk)
        vocabulary, text = scheduler.vocabulary, scheduler.text
        return score(scheduler.loaded, ids[:1], ids[1:], params, vocabulary, text, chunk, 0, request_id, self._scored)

    def check_fidelity(self, messages: Messages, output: Sequence[int | None], chunk: int = 64):
        """A reply (its prompt ``messages`` and tokens ``output``) teacher-forced in the running
        precision and in float32 (:func:`engine.analysis.fidelity.check`): a generator of one
        ``TokenFidelity`` per reply token, ``index`` 0 for its first; stop iterating to cancel.
        Summarize with :func:`engine.api.results.summarize`."""
        from engine.analysis.fidelity import check

        ids = token_ids(output)
        context = self.prompt_for(messages)
        first = len(context) - 1
        rows = check(self.scheduler.loaded, context + ids, chunk)
        return (replace(row, index=row.index - first) for row in rows if row.index >= first)

    def replay(
        self,
        messages: Messages,
        output: Sequence[int | None],
        params: SamplingParams | Sequence[SamplingParams],
        chunk: int | None = None,
        request_id: int = 0,
    ):
        """A stored reply (its prompt ``messages`` and its tokens ``output``) through the chain
        under ``params``, from one teacher-forced pass: every stage's distribution at every
        position, with indices matching the reply's (a generator, like :meth:`score_text`).
        ``params`` may be one set per token: each token's own recorded settings replay a
        reply whose settings changed while it was written."""
        from engine.analysis.score import score

        ids = token_ids(output)
        scheduler = self.scheduler
        chunk = self._teacher_chunk(chunk)
        context = self.prompt_for(messages)
        return score(scheduler.loaded, context, ids, params, scheduler.vocabulary, scheduler.text, chunk, 0, request_id)

    def replay_text(
        self,
        text: str,
        output: Sequence[int | None],
        params: SamplingParams | Sequence[SamplingParams],
        chunk: int | None = None,
        request_id: int = 0,
    ):
        """A text scored without a prompt, replayed as :meth:`score_text` scored it (its first
        token the context, not a chat around it): ``output`` must be the tokens the text
        gives after that one, else an ``EngineError`` before anything runs."""
        from engine.analysis.score import score

        ids = token_ids(output)
        scheduler = self.scheduler
        context, targets = scored_text(scheduler.loaded.tokenizer, text, None)
        if list(targets) != ids:
            raise EngineError("the scored text does not tokenize to the reply's tokens: it cannot be replayed.")
        chunk = self._teacher_chunk(chunk)
        return score(scheduler.loaded, context, ids, params, scheduler.vocabulary, scheduler.text, chunk, 0, request_id)

    # Compare models (engine/session/compare.py) ----------------------------------------------

    def load_second(
        self,
        source: str,
        precision: str = "auto",
        progress: ProgressFn | None = None,
        kv: KVQuantization | None = None,
    ) -> SecondModel:
        """Load ``source`` beside the running model (:meth:`ModelComparison.load`)."""
        return self.comparison.load(source, precision, progress, kv)

    def second_model(self) -> SecondModel | None:
        return self.comparison.second_model()

    def release_second(self) -> None:
        self.comparison.release()

    def load_draft(
        self,
        source: str,
        precision: str = "auto",
        tokens: int = DEFAULT_DRAFT_TOKENS,
        progress: ProgressFn | None = None,
    ) -> DraftModel:
        """Load ``source`` as the running model's draft (speculative decoding, from the next
        step): refused before loading when it would not fit beside it, after when it cannot
        serve it (another vocabulary, caches that cannot be cut back); either way the running
        model and its draft, if any, are untouched."""
        check_draft_tokens(tokens)
        scheduler = self.scheduler
        held = loaded_bytes(scheduler.loaded.model)
        if scheduler.drafter is not None:
            held += loaded_bytes(scheduler.drafter.draft.model)
        check_fits_beside(held, source, precision)
        draft = load(source, progress, precision)
        scheduler.set_draft(draft, tokens)
        self._draft = DraftModel(draft.name, source, draft.precision.dtype, tokens)
        return self._draft

    def draft_model(self) -> DraftModel | None:
        """The draft proposing to the running model, or None."""
        return self._draft if self._scheduler is not None and self._scheduler.drafter is not None else None

    def release_draft(self) -> None:
        if self._scheduler is not None:
            self._scheduler.set_draft(None)
        self._draft = None

    def compare_reply(
        self, messages: Messages, output: Sequence[int], top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A reply (its prompt ``messages`` and tokens ``output``) under the running model and
        the second one: one row per reply token, ``index`` 0 for its first (a generator:
        stop iterating to cancel)."""
        return self.comparison.compare(self.prompt_for(messages), token_ids(output), top, chunk)

    def compare_text(
        self, text: str, prompt: Messages | None = None, top: int = 10, chunk: int = 64
    ) -> Iterator[TokenKLD]:
        """A given text (as :meth:`score_text` scores it) under both models."""
        context, targets = scored_text(self.scheduler.loaded.tokenizer, text, prompt)
        return self.comparison.compare(context, targets, top, chunk)

    # The logit lens (engine/session/lens.py) ---------------------------------------------------

    def lens_reply(
        self, messages: Messages, output: Sequence[int], positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The lens at ``positions`` of a reply (its prompt ``messages`` and tokens
        ``output``; None: every token), one :class:`LensPosition` each, in order: a
        generator, stop iterating to cancel. ``len(output)`` asks for the distribution
        after the reply's last token."""
        return self.lens.read(self.prompt_for(messages), token_ids(output), positions, top)

    def lens_text(
        self, text: str, prompt: Messages | None = None, positions: Sequence[int] | None = None, top: int = 10
    ) -> Iterator[LensPosition]:
        """The lens at ``positions`` of a given text (tokenized as :meth:`score_text` does)."""
        context, targets = scored_text(self.scheduler.loaded.tokenizer, text, prompt)
        return self.lens.read(context, targets, positions, top)

    @property
    def lens_reuse(self) -> LensReuse:
        """What the last lens call took from the prefix store (set when it starts computing)."""
        return self.lens.reuse

    def step(self) -> list[Event]:
        return self.scheduler.step() if self._scheduler is not None else []

    def has_work(self) -> bool:
        return self._scheduler is not None and self._scheduler.has_work()

    def cancel(self, request_id: int) -> None:
        self.scheduler.cancel(request_id)

    def cancel_all(self) -> None:
        if self._scheduler is not None:
            for request_id in self._scheduler.request_ids():
                self._scheduler.cancel(request_id)

    def update_params(self, request_id: int, params: SamplingParams) -> None:
        self.scheduler.update_params(request_id, params)

    def token_text(self, token_id: int) -> str:
        return self.scheduler.text.piece(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        from engine.api.vocab_bytes import vocab_piece_bytes

        tokenizer = self.scheduler.loaded.tokenizer
        piece = getattr(tokenizer, "_tokenizer", tokenizer).convert_ids_to_tokens(int(token_id))
        return vocab_piece_bytes(piece) if isinstance(piece, str) else b""

    @staticmethod
    def memory_bytes() -> int:
        return int(mx.get_active_memory())

    @staticmethod
    def release_thread() -> None:
        """Call last on the thread that ran the engine: without it process exit can abort."""
        mx.synchronize()
        mx.clear_streams()
