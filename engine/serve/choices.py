"""A completions request of several choices answered as OpenAI and vLLM answer it (no MLX):
several prompts, ``n`` > 1, ``echo``, ``max_tokens: 0``.

Each prompt is one row of the engine's batch per choice: choice ``i * n + j`` is prompt
``i``'s ``j``-th reply, drawn with ``seed + j`` (no ``seed``: each its own random one). With
``echo`` the prompt is scored once through the engine's scoring path (``score`` of the
engine: ``EngineSession.score_tokens``, the numbers of ``python -m engine score``), and each
of its choices begins with the prompt's text and tokens: the first token's logprob and
candidates null (nothing predicts it), every later one's as the model gave it, then the
reply's own. A reply's end-of-sequence token is reported with ``echo`` (a scoring client
counts the reply's tokens: lm-evaluation-harness drops the last one), as vLLM reports it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from engine.api.events import Finished, FinishReason, ScoreDone, TokenStep
from engine.serve.known_fields import FieldError
from engine.serve.prompts import check_vocabulary
from engine.serve.request_fields import ServedRequest
from engine.serve.responses import finish_reason, token_logprobs
from engine.serve.seam import ServingEngine

Part = tuple[str, int, int]
"""("score", prompt, 0) or ("reply", prompt, j)."""


class Failed(Exception):
    """A part ended without finishing: ``message`` and ``code`` as the single path reports them."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass
class Prepared:
    """A request's prompts made ready: each one's single-prompt request and its tokens."""

    served: ServedRequest
    rows: list[ServedRequest]
    texts: list[str]


def check_engine(engine: ServingEngine, served: ServedRequest) -> None:
    """Refuse what this engine cannot do (the app's serves text prompts, unscored)."""
    scores = callable(getattr(engine, "score", None))
    if served.echo and not scores:
        raise FieldError("echo", "echo is not taken by this server yet (the app's): use python -m engine serve.")
    if not scores and any(not isinstance(p, str) for p in served.prompts):
        raise FieldError("prompt", "token-id prompts are not taken by this server yet (the app's).")
    check_vocabulary(served.prompts, engine.info.vocab_size)


def prepare(engine: ServingEngine, served: ServedRequest, token_bytes: Callable[[int], bytes]) -> Prepared:
    """Each prompt as a request of its own, tokenized by the engine (on the server's threads)."""
    rows, texts = [], []
    for i, prompt in enumerate(served.prompts):
        if isinstance(prompt, str):
            one = dataclasses.replace(served, prompt=prompt, prompts=(prompt,), prompt_tokens=None)
            text = prompt
        else:
            text = b"".join(token_bytes(t) for t in prompt).decode("utf-8", "replace")
            one = dataclasses.replace(served, prompt=text, prompts=(text,), prompt_tokens=prompt)
        one = dataclasses.replace(one, n=1, echo=False, generate=True)
        try:
            rows.append(engine.prepare(one))
        except FieldError as exc:
            where = "prompt" if len(served.prompts) == 1 else f"prompt[{i}]"
            raise FieldError(where if exc.param == "prompt" else exc.param, str(exc)) from None
        texts.append(text)
    return Prepared(served, rows, texts)


async def run(
    engine: ServingEngine, prepared: Prepared, disconnected: Callable[[], Any], poll_s: float
) -> dict[Part, list[Any]]:
    """Every part's events (its last one its ``Finished`` or ``ScoreDone``); a :class:`Failed`
    where one did not finish, every other part then cancelled."""
    served = prepared.served
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    started: dict[Part, int] = {}
    got: dict[Part, list[Any]] = {}

    def sink_for(part: Part) -> Callable[[Any], None]:
        return lambda e: loop.call_soon_threadsafe(events.put_nowait, (part, e))

    async def replies(i: int) -> list[Part]:
        """Start prompt ``i``'s replies; their parts."""
        if not served.generate:
            return []
        row = prepared.rows[i]
        parts = []
        for j in range(served.n):
            seed = row.params.seed
            params = row.params if seed is None else row.params.with_changes(seed=seed + j)
            part = ("reply", i, j)
            got[part] = []
            one = dataclasses.replace(row, params=params)
            started[part] = await asyncio.wrap_future(engine.submit(one, sink_for(part)))
            parts.append(part)
        return parts

    try:
        later = set()  # prompts whose replies start once their scoring is done
        for i, row in enumerate(prepared.rows):
            tokens = row.prompt_tokens
            if served.echo and tokens is not None and len(tokens) > 1:
                part = ("score", i, 0)
                got[part] = []
                score = engine.score  # type: ignore[attr-defined] - checked by check_engine
                started[part] = await asyncio.wrap_future(score(tokens, row.params, sink_for(part)))
                # The reply then prefills only the prompt's last token: the scoring leaves
                # the rest in the prefix store (lm-eval's echo with max_tokens 1).
                later.add(i)
            else:
                await replies(i)
        pending = set(got)
        while pending:
            try:
                part, event = await asyncio.wait_for(events.get(), poll_s)
            except TimeoutError:
                if await disconnected():
                    raise Failed("the client closed the connection.", "client_closed") from None
                continue
            got[part].append(event)
            if isinstance(event, Finished):
                pending.discard(part)
                if event.finish_reason == FinishReason.ERROR:
                    raise Failed(event.error or "the engine failed.", "engine_error")
                if event.finish_reason == FinishReason.CANCELLED:
                    raise Failed("the reply was cancelled by the server before it was finished.", "cancelled")
            elif isinstance(event, ScoreDone):
                pending.discard(part)
                if part[1] in later:
                    pending.update(await replies(part[1]))
        started.clear()
        return got
    finally:
        for request_id in started.values():  # whatever did not finish
            engine.cancel(request_id)


def _legacy(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The completions endpoint's ``logprobs`` (the first echoed token's logprob and top null)."""
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [e["top"] for e in entries],
        "text_offset": offsets,
    }


def answer(
    prepared: Prepared,
    got: dict[Part, list[Any]],
    token_bytes: Callable[[int], bytes],
    eos: Sequence[int],
    frame: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> dict[str, Any]:
    """The whole response: every choice in order, and the usage summed."""
    served = prepared.served
    top, post = served.logprobs, served.post_sampling
    ends = frozenset(eos)
    choices, prompt_tokens, completion_tokens = [], 0, 0

    def entry(step: TokenStep) -> dict[str, Any]:
        e = token_logprobs(step, top or 0, post, token_bytes)
        return {
            "token": e["token"],
            "logprob": e["logprob"],
            "top": {t["token"]: t["logprob"] for t in e["top_logprobs"]},
        }

    for i, row in enumerate(prepared.rows):
        tokens = list(row.prompt_tokens or ())
        prompt_tokens += len(tokens)
        echoed: list[dict[str, Any]] = []
        if served.echo and tokens:
            first = token_bytes(tokens[0]).decode("utf-8", "replace")
            echoed = [{"token": first, "logprob": None, "top": None}]
            echoed += [entry(s) for s in got.get(("score", i, 0), []) if isinstance(s, TokenStep)]
        for j in range(served.n):
            events = got.get(("reply", i, j), [])
            steps = [e for e in events if isinstance(e, TokenStep)]
            done = next((e for e in events if isinstance(e, Finished)), None)
            written = "".join(s.text for s in steps)
            entries = echoed + [entry(s) for s in steps if served.echo or s.token_id not in ends]
            text = (prepared.texts[i] if served.echo else "") + written
            choice: dict[str, Any] = {"index": i * served.n + j, "text": text}
            choice["logprobs"] = _legacy(entries) if top is not None else None
            choice["finish_reason"] = finish_reason(done) if done is not None else "length"
            completion_tokens += done.generated_tokens if done is not None else 0
            choices.append(choice)
    body = frame(choices)
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if served.echo:  # the prompts' tokens whose scoring an earlier prompt's gave (a shared context)
        cached = sum(e.cached_tokens for events in got.values() for e in events if isinstance(e, ScoreDone))
        body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return body


__all__ = ["Failed", "Prepared", "answer", "check_engine", "prepare", "run"]
