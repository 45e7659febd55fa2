"""Exports: JSON Lines and CSV, from the store or a scored text, and back in. Qt-free.

A JSON Lines export is a ``header`` record then the records of ``python -m engine generate``
/ ``score`` (``token``, ``done``, ``score_done``), each token record extended with what the
app needs to show it again (``message``, ``branch``, ``position``, ``piece``, the chosen
token's per-stage ``logprobs``, each candidate's ``bias``, ``penalty`` and ``count``: the
token codec's ``EXPORT`` style, :mod:`engine.api.codec`) and
with ``conversation`` / ``message`` / ``branch`` / ``compare_run`` / ``score`` records that
place the tokens. Messages and branches are numbered from 0 within the export (not the
database's ids), so export → import → export gives the same records. docs/EXPORT.md has
every field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from app.store.export_csv import write_csv
from engine.api.codec import EXPORT, RecordType, decode_step, encode_step
from engine.api.events import FinishReason, TokenStep
from engine.api.params import SamplingParams

FORMAT = "logitscope-export"
VERSION = 1
APP_VERSION = "0.1.0"


class ExportRecord(str, Enum):
    """The ``type`` of the records an export adds to the CLI's (``token``, ``done``,
    ``score_done``: :class:`engine.api.codec.RecordType`) to place the tokens."""

    HEADER = "header"
    CONVERSATION = "conversation"
    MESSAGE = "message"
    BRANCH = "branch"
    SCORE = "score"
    COMPARE_RUN = "compare_run"


def app_version() -> str:
    try:
        from importlib.metadata import version

        return version("logitscope")
    except Exception:
        return APP_VERSION


# The data an export holds --------------------------------------------------------------------


@dataclass
class ExportBranch:
    model: str
    params: SamplingParams
    finish_reason: str | None
    text: str
    steps: list[TokenStep]
    source: str | None = None
    """Where the model was loaded from (a path, "default", a repo id, a server); None if unknown."""
    precision: str | None = None
    """What the reply was computed in (``float32``, ``float16``, ``bfloat16``); None if not recorded."""
    backend: str | None = None
    """Where it was computed (``local``, ``remote:<kind>:<stage>:detected|set``); None if not recorded."""

    @property
    def interrupted(self) -> bool:
        """The app stopped (a crash, ``kill -9``) while this reply was being written."""
        return self.finish_reason == FinishReason.INTERRUPTED


@dataclass
class ExportMessage:
    role: str
    content: str = ""
    after: tuple[int, int] | None = None  # user: (message, branch) it answers; assistant: (message, -1)
    active: int = 0
    branches: list[ExportBranch] = field(default_factory=list)


@dataclass
class ExportRun:
    message: int
    prefix_tokens: int
    columns: list[dict[str, Any]]  # {"label", "params", "branch"} (branch: ordinal in the message)
    divergence: Any
    kept: int | None


@dataclass
class ExportScore:
    text: str
    prompt: str | None
    params: SamplingParams
    steps: list[TokenStep]
    done: dict[str, Any] | None
    interrupted: bool = False
    """The app stopped (a crash, ``kill -9``) while it was being scored."""


@dataclass
class ExportData:
    kind: str  # "conversation" | "reply" | "compare" | "score"
    model: dict[str, Any]
    title: str = ""
    system_prompt: str = ""
    messages: list[ExportMessage] = field(default_factory=list)
    runs: list[ExportRun] = field(default_factory=list)
    score: ExportScore | None = None
    header: dict[str, Any] | None = None  # as read, on import


# Steps -> token records ---------------------------------------------------------------------------


def _steps_records(steps: list[TokenStep], request: int, extra: dict, start: SamplingParams) -> Iterator[dict]:
    """``python -m engine generate``'s token records, with what the app needs to rebuild
    each step (style ``EXPORT``), its place (``extra``), and the parameters where they changed."""
    last = start
    for step in steps:
        changed = step.params.to_dict() if step.params != last else None
        last = step.params
        yield {"type": RecordType.TOKEN.value, "request": request, **extra, **encode_step(step, EXPORT, changed)}


# ExportData -> records ------------------------------------------------------------------------------


def header_record(data: ExportData, created: str | None = None) -> dict[str, Any]:
    params = _first_params(data)
    chain = None
    if data.score is not None and data.score.steps:
        chain = list(data.score.steps[0].chain)
    else:
        for m in data.messages:
            for b in m.branches:
                if b.steps and chain is None:
                    chain = list(b.steps[0].chain)
    return {
        "type": ExportRecord.HEADER.value,
        "format": FORMAT,
        "version": VERSION,
        "kind": data.kind,
        "model": data.model,
        "params": params.to_dict() if params is not None else None,
        "samplers": list(params.samplers) if params is not None else None,
        "chain": chain,
        "app_version": app_version(),
        "created": created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _first_params(data: ExportData) -> SamplingParams | None:
    if data.score is not None:
        return data.score.params
    for m in data.messages:
        for b in m.branches:
            return b.params
    return None


def records(data: ExportData, created: str | None = None) -> list[dict[str, Any]]:
    out = [header_record(data, created)]
    if data.score is not None:
        s = data.score
        score = {"text": s.text, "prompt": s.prompt, "params": s.params.to_dict(), "interrupted": s.interrupted}
        out.append({"type": ExportRecord.SCORE.value, **score})
        out.extend(_steps_records(s.steps, 0, {}, s.params))
        if s.done is not None:
            out.append({"type": RecordType.SCORE_DONE.value, **s.done})
        return out
    out.append({"type": ExportRecord.CONVERSATION.value, "title": data.title, "system_prompt": data.system_prompt})
    request = 0
    for i, m in enumerate(data.messages):
        rec: dict[str, Any] = {"type": ExportRecord.MESSAGE.value, "message": i, "role": m.role}
        if m.role == "user":
            rec["content"] = m.content
            rec["after_branch"] = list(m.after) if m.after is not None else None
        else:
            rec["after_message"] = m.after[0] if m.after is not None else None
            rec["active_branch"] = m.active
        out.append(rec)
        for j, b in enumerate(m.branches):
            where = {"message": i, "branch": j}
            out.append(
                {
                    "type": ExportRecord.BRANCH.value,
                    "request": request,
                    **where,
                    "model": b.model,
                    "model_source": b.source,
                    "precision": b.precision,
                    "backend": b.backend,
                    "params": b.params.to_dict(),
                    "finish_reason": b.finish_reason,
                    "interrupted": b.interrupted,
                    "text": b.text,
                }
            )
            out.extend(_steps_records(b.steps, request, where, b.params))
            out.append(
                {
                    "type": RecordType.DONE.value,
                    "request": request,
                    **where,
                    "finish_reason": b.finish_reason,
                    "interrupted": b.interrupted,
                    "generated_tokens": sum(not s.forced for s in b.steps),
                    "tokens": len(b.steps),
                }
            )
            request += 1
    for run in data.runs:
        out.append(
            {
                "type": ExportRecord.COMPARE_RUN.value,
                "message": run.message,
                "prefix_tokens": run.prefix_tokens,
                "columns": run.columns,
                "divergence": run.divergence,
                "kept": run.kept,
            }
        )
    return out


def write_jsonl(data: ExportData, path: str | Path, created: str | None = None) -> int:
    recs = records(data, created)
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(recs)


def write(data: ExportData, path: str | Path) -> int:
    """JSON Lines, or CSV when ``path`` ends in ``.csv``. Returns the records (rows) written."""
    if str(path).lower().endswith(".csv"):
        return write_csv(records(data), path)
    return write_jsonl(data, path)


# Records -> ExportData (import) --------------------------------------------------------------------------


class ExportFormatError(ValueError):
    pass


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ExportFormatError(f"line {n} is not JSON ({exc.msg}).") from None
    return out


def from_records(recs: list[dict[str, Any]]) -> ExportData:
    if not recs or recs[0].get("type") != ExportRecord.HEADER or recs[0].get("format") != FORMAT:
        raise ExportFormatError("not a Logitscope export: the first line is not its header record.")
    header = recs[0]
    if int(header.get("version", 0)) > VERSION:
        raise ExportFormatError(f"export format {header['version']} is newer than this app reads ({VERSION}).")
    data = ExportData(header.get("kind", "conversation"), header.get("model") or {}, header=header)
    current: ExportBranch | ExportScore | None = None
    params: SamplingParams | None = None
    for r in recs[1:]:
        kind = r.get("type")
        if kind == ExportRecord.CONVERSATION:
            data.title, data.system_prompt = r.get("title", ""), r.get("system_prompt", "")
        elif kind == ExportRecord.MESSAGE:
            m = ExportMessage(r["role"], r.get("content", ""))
            if r["role"] == "user":
                m.after = tuple(r["after_branch"]) if r.get("after_branch") is not None else None
            else:
                m.after = (r["after_message"], -1) if r.get("after_message") is not None else None
                m.active = int(r.get("active_branch", 0))
            data.messages.append(m)
        elif kind == ExportRecord.BRANCH:
            params = SamplingParams.from_dict(r["params"])
            current = ExportBranch(
                r.get("model", ""),
                params,
                r.get("finish_reason") or (FinishReason.INTERRUPTED.value if r.get("interrupted") else None),
                r.get("text", ""),
                [],
                r.get("model_source"),
                r.get("precision"),  # absent from exports made before schema 6: not recorded
                r.get("backend"),  # absent from exports made before schema 7: not recorded
            )
            data.messages[r["message"]].branches.append(current)
        elif kind == ExportRecord.SCORE:
            params = SamplingParams.from_dict(r["params"])
            current = ExportScore(r.get("text", ""), r.get("prompt"), params, [], None, bool(r.get("interrupted")))
            data.score = current
        elif kind == RecordType.TOKEN:
            if current is None or params is None:
                raise ExportFormatError("a token record before its branch or score record.")
            if "params" in r:
                params = SamplingParams.from_dict(r["params"])
            current.steps.append(decode_step(r, params))
        elif kind == RecordType.SCORE_DONE and data.score is not None:
            data.score.done = {k: v for k, v in r.items() if k != "type"}
        elif kind == ExportRecord.COMPARE_RUN:
            data.runs.append(ExportRun(r["message"], r["prefix_tokens"], r["columns"], r["divergence"], r.get("kept")))
    return data
