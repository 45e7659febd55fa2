"""What Logitscope's server answers, as OpenAI defines it (no MLX, no network): chat and
completion responses and their streamed chunks, ``logprobs`` in each endpoint's shape, usage,
and errors.

The logprobs a token carries are of the model's own distribution (``raw``), as llama.cpp's
server reports them, or, with ``post_sampling_probs``, of the distribution after the whole
chain (the one the token was drawn from). Each entry also has the token's ``id``, as
llama.cpp's entries do, and its ``bytes``. A token the chain removed has no finite logprob:
it is written ``-9999.0``, OpenAI's own floor. The end-of-sequence token is not reported
(OpenAI's and llama.cpp's servers do not): its step ends the reply.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine.api.events import Finished, FinishReason, TokenStep

FLOOR = -9999.0
TokenBytes = Callable[[int], bytes]


def _lp(value: float | None) -> float:
    return FLOOR if value is None or not math.isfinite(value) else max(FLOOR, float(value))


def stage_of(step: TokenStep, post_sampling: bool) -> str:
    return step.chain[-1] if post_sampling else step.chain[0]


def _entry(token_id: int, text: str, logprob: float | None, token_bytes: TokenBytes) -> dict[str, Any]:
    return {"id": token_id, "token": text, "logprob": _lp(logprob), "bytes": list(token_bytes(token_id))}


def token_logprobs(step: TokenStep, top: int, post_sampling: bool, token_bytes: TokenBytes) -> dict[str, Any]:
    """A chat ``logprobs.content`` entry: the token and its ``top`` most likely candidates."""
    stage = stage_of(step, post_sampling)
    entry = _entry(step.token_id, step.piece, step.logprob_at(stage), token_bytes)
    ranked = sorted(
        (c for c in step.top if c.token_id is not None and math.isfinite(step.logprob_at(stage, c) or -math.inf)),
        key=lambda c: -(step.logprob_at(stage, c) or -math.inf),
    )
    entry["top_logprobs"] = [_entry(c.token_id, c.text, step.logprob_at(stage, c), token_bytes) for c in ranked[:top]]
    return entry


def llama_cpp_probs(step: TokenStep, top: int, post_sampling: bool, token_bytes: TokenBytes) -> dict[str, Any]:
    """A ``completion_probabilities`` entry as llama.cpp's server writes it (``n_probs``)."""
    entry = token_logprobs(step, top, post_sampling, token_bytes)
    if post_sampling:  # llama.cpp then writes probabilities
        entry["prob"] = math.exp(entry.pop("logprob"))
        entry["top_probs"] = [{**t, "prob": math.exp(t.pop("logprob"))} for t in entry.pop("top_logprobs")]
    return entry


def finish_reason(done: Finished) -> str:
    return "length" if done.finish_reason == FinishReason.LENGTH else "stop"


def usage(done: Finished) -> dict[str, int]:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.generated_tokens,
        "total_tokens": done.prompt_tokens + done.generated_tokens,
    }


class Reply:
    """One served reply's responses: its chunks as its steps arrive, or the whole response at
    its end. ``chat``: the chat endpoint's shapes, else the completions endpoint's."""

    def __init__(
        self,
        request_id: str,
        model: str,
        chat: bool,
        logprobs: int | None,
        post_sampling: bool,
        llama_cpp: bool,
        token_bytes: TokenBytes,
        eos: Sequence[int],
    ) -> None:
        self.id, self.model, self.chat = request_id, model, chat
        self.logprobs, self.post_sampling, self.llama_cpp = logprobs, post_sampling, llama_cpp
        self.token_bytes, self.eos = token_bytes, frozenset(eos)
        self.created = int(time.time())
        self.text: list[str] = []
        self.entries: list[dict[str, Any]] = []
        self.probs: list[dict[str, Any]] = []
        self.offsets: list[int] = []
        self._offset = 0

    def _object(self, streamed: bool) -> str:
        if self.chat:
            return "chat.completion.chunk" if streamed else "chat.completion"
        return "text_completion"

    def _frame(self, choice: dict[str, Any], streamed: bool) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self._object(streamed),
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, **choice}],
        }

    def add(self, step: TokenStep) -> dict[str, Any] | None:
        """The chunk of one step. The end-of-sequence token is not reported, but text held
        back before it (a possible start of a stop string) comes with it: a chunk of that
        text alone, or None when there is none."""
        if step.token_id in self.eos:
            if not step.text:
                return None
            self.text.append(step.text)
            self._offset += len(step.text)
            key, value = ("delta", {"content": step.text}) if self.chat else ("text", step.text)
            return self._frame({key: value, "logprobs": None, "finish_reason": None}, streamed=True)
        self.text.append(step.text)
        choice: dict[str, Any] = {}
        entry = None
        if self.logprobs is not None:
            entry = token_logprobs(step, self.logprobs, self.post_sampling, self.token_bytes)
            self.entries.append(entry)
            self.offsets.append(self._offset)
        self._offset += len(step.text)
        if self.chat:
            choice["delta"] = {"content": step.text}
            choice["logprobs"] = {"content": [entry]} if entry is not None else None
        else:
            choice["text"] = step.text
            choice["logprobs"] = self._legacy([entry], [self.offsets[-1]]) if entry is not None else None
        choice["finish_reason"] = None
        frame = self._frame(choice, streamed=True)
        if self.llama_cpp:
            probs = llama_cpp_probs(step, self.logprobs or 0, self.post_sampling, self.token_bytes)
            self.probs.append(probs)
            frame["completion_probabilities"] = [probs]
        return frame

    def first_chunk(self) -> dict[str, Any]:
        """A chat stream's first chunk: the assistant's role (OpenAI's servers send it first)."""
        return self._frame(
            {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}, True
        )

    def last_chunk(self, done: Finished) -> dict[str, Any]:
        key = "delta" if self.chat else "text"
        empty: Any = {} if self.chat else ""
        return self._frame({key: empty, "logprobs": None, "finish_reason": finish_reason(done)}, True)

    def usage_chunk(self, done: Finished) -> dict[str, Any]:
        frame = self._frame({}, True)
        frame["choices"] = []
        frame["usage"] = usage(done)
        return frame

    def whole(self, done: Finished) -> dict[str, Any]:
        """The response of a request that was not streamed."""
        text = "".join(self.text)
        choice: dict[str, Any]
        if self.chat:
            logprobs = {"content": self.entries} if self.logprobs is not None else None
            choice = {"message": {"role": "assistant", "content": text}, "logprobs": logprobs}
        else:
            logprobs = self._legacy(self.entries, self.offsets) if self.logprobs is not None else None
            choice = {"text": text, "logprobs": logprobs}
        choice["finish_reason"] = finish_reason(done)
        frame = self._frame(choice, streamed=False)
        frame["usage"] = usage(done)
        if self.llama_cpp:
            frame["completion_probabilities"] = self.probs
        return frame

    @staticmethod
    def _legacy(entries: list[dict[str, Any]], offsets: list[int]) -> dict[str, Any]:
        """The completions endpoint's ``logprobs``: tokens, their logprobs, the candidates as
        text → logprob, and each token's offset in the text."""
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets,
        }


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
