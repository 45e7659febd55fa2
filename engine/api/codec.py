"""The token codec: one record for a :class:`TokenStep`, written and read by everything.

``python -m engine generate`` / ``score`` (JSON Lines), the app's store (SQLite) and the
app's exports all carry the same *token record*: keyed by stage name (``chain`` gives the
order; the chosen token's ``logprobs``, the ``entropies``, the ``survivors`` and each
candidate's ``logprobs`` are ``{stage: value}`` maps, so a stage added later never shifts
a column). What differs between them is a :class:`Style`: how many decimals, whether the
values derivable from others are spelled out for readers, whether the fields only needed
to rebuild the step are written, whether the record names its own version.

JSON has no infinities or NaN: a number that is not finite, or ``None`` ("not
reported"), is written as ``null`` and read back by its field: a logprob as -inf (a
removed token's) except the chosen token's logprob of a step a server reported (None);
any other number and any count as ``None``. A step a server reported carries
``"reported_stage"`` in the store and exports (the stage its numbers are; the CLI's record
keeps its bytes); a record without that key
existed is recognised as a server's by what it lacks (one stage, no raw logits, no
entropies) and gets ``chain[0]``. A token id a server did not report is ``null`` (the
step's and a candidate's). Records that wrote NaN or -1 for "not reported" (the store's
version 2, token ids before version 4, older exports and CLI lines) read back as ``None``
too.

Versions (``"v"``, written by the store; a record without ``"v"`` is a CLI or export
record, the current version, or a version-1 store record when it has
``penalized_logprob``): 1, the release before the stage chain (:mod:`engine.api.codec_v1`);
2, keyed by stage name, non-finite ``raw_logit`` / ``bias`` / ``penalty`` written as
NaN and unknown counts as -1; 3, the same record as the CLI's and the exports', strict
JSON, with ``rank``; 4, a token id a server did not report is ``null`` rather than -1.
Since reasoning models were read every token record carries ``"phase"`` (``"thinking"`` / ``"answer"``,
null for a model without reasoning markers); a record without it reads as None, so the
version stays 4. A token drafted by a draft model carries ``"draft"``
(:func:`engine.api.draft.encode_draft`); one without has no such key, so again version 4.
Likewise a token generated or scored under a grammar carries ``"grammar"``
(:func:`engine.api.grammar.encode_grammar`), and its ``done`` record the reply's figures.
Importable without MLX: the app uses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from engine.api.codec_v1 import decode_v1
from engine.api.draft import DraftRecord, decode_draft, encode_draft, stats_fields
from engine.api.events import (
    UNKNOWN_COUNT,
    UNREPORTED_TOKEN_ID,
    Candidate,
    Divergence,
    Finished,
    ScoreDone,
    TokenStep,
    same_token,
)
from engine.api.grammar import GrammarRecord, decode_grammar, encode_grammar, grammar_fields
from engine.api.params import SamplingParams
from engine.api.reasoning import PHASES

CODEC_VERSION = 4


class RecordType(str, Enum):
    """The ``type`` of a JSON Lines record of ``python -m engine`` (and of exports)."""

    TOKEN = "token"
    DONE = "done"
    SCORE_DONE = "score_done"
    DIVERGENCE = "divergence"

    def __str__(self) -> str:
        return self.value


class CodecError(ValueError):
    """A record this codec cannot read (newer, or not a token record)."""


@dataclass(frozen=True, slots=True)
class Style:
    """How a token record is written."""

    digits: int | None
    """Decimals numbers are rounded to; None keeps them as computed."""
    derived: bool
    """Spell out what readers want at hand but the record already holds: ``logprob``,
    ``raw_logprob``, ``entropy_raw``, ``entropy``, and each candidate's ``raw_logprob`` and
    ``logprob``."""
    full: bool
    """Write what only rebuilding the step needs: ``position``, ``piece``, the chosen
    token's ``logprobs``, each candidate's ``bias``, ``penalty`` and ``count`` (and ``dry``
    where DRY ran)."""
    versioned: bool
    """Write ``"v"``: records saved one by one (the store) name their version; a CLI
    stream and an export (whose header has a version) do not."""

    def number(self, value: float | None) -> float | None:
        if value is None or not math.isfinite(value):
            return None
        return value if self.digits is None else round(value, self.digits)


CLI = Style(digits=5, derived=True, full=False, versioned=False)
"""``python -m engine generate`` / ``score``: the contract tests and scripts read."""
EXPORT = Style(digits=None, derived=True, full=True, versioned=False)
"""The app's JSON Lines exports: the CLI's record and what rebuilds the step."""
STORE = Style(digits=None, derived=False, full=True, versioned=True)
"""The app's database: every value as computed, nothing written twice."""


# Encoding ------------------------------------------------------------------------------------


def _count(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def _per_stage(chain: tuple[str, ...], values: Iterable[Any], encode: Callable[[Any], Any]) -> dict[str, Any]:
    return {stage: encode(v) for stage, v in zip(chain, values, strict=True)}


def encode_candidate(step: TokenStep, c: Candidate, style: Style) -> dict[str, Any]:
    num = style.number
    out: dict[str, Any] = {"token_id": c.token_id, "text": c.text, "raw_logit": num(c.raw_logit)}
    if style.derived:
        out["raw_logprob"] = num(step.logprob_at("raw", c))
        out["logprob"] = num(c.logprob)
    out["logprobs"] = _per_stage(step.chain, c.logprobs, num)
    out["removed_by"] = c.removed_by
    if style.full:
        out["bias"] = num(c.bias)
        out["penalty"] = num(c.penalty)
        out["count"] = _count(c.count)
        if "dry" in step.chain:  # only where DRY ran: records without it keep their bytes
            out["dry"] = num(c.dry)
    return out


def encode_step(step: TokenStep, style: Style, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The token record of ``step``. ``params``: the step's ``SamplingParams.to_dict()``
    when the record is to carry them (the store: always; an export: where they changed)."""
    num, chain = style.number, step.chain
    out: dict[str, Any] = {"v": CODEC_VERSION} if style.versioned else {}
    out["index"] = step.index
    out["token_id"] = step.token_id
    out["text"] = step.text
    if style.derived:
        out["logprob"] = num(step.logprob)
        out["raw_logprob"] = num(step.logprob_at("raw"))
        out["entropy_raw"] = num(step.entropy_raw)
        out["entropy"] = num(step.entropy)
    out["chain"] = list(chain)
    out["entropies"] = _per_stage(chain, step.entropies, num)
    out["survivors"] = _per_stage(chain, step.survivors, _count)
    out["forced"] = step.forced
    out["phase"] = step.phase  # null: a model without reasoning markers
    out["top"] = [encode_candidate(step, c, style) for c in step.top]
    if step.rank is not None:
        out["rank"] = step.rank
    if step.draft is not None:  # only with a draft model: records without one keep their bytes
        out["draft"] = encode_draft(step.draft, num)
    if step.grammar is not None:  # likewise only under a grammar
        out["grammar"] = encode_grammar(step.grammar, num)
    if step.reported_stage is not None and style.full:
        # The CLI's record keeps its bytes: there one stage in ``chain`` with null raw logits
        # says it already, and decoding infers it (``_reported_stage``).
        out["reported_stage"] = step.reported_stage
    if style.full:
        out["position"] = step.position
        out["piece"] = step.piece
        out["logprobs"] = _per_stage(chain, step.logprobs, num)
    if params is not None:
        out["params"] = params
    return out


def token_record(step: TokenStep, request: int, style: Style = CLI) -> dict[str, Any]:
    """A ``token`` line: the step's record after its ``type`` and ``request`` number."""
    return {"type": RecordType.TOKEN.value, "request": request, **encode_step(step, style)}


# Decoding ------------------------------------------------------------------------------------


def record_version(data: Mapping[str, Any]) -> int:
    if "v" in data:
        return int(data["v"])
    return 1 if "penalized_logprob" in data else CODEC_VERSION


def _logprob(value: float | None) -> float:
    return -math.inf if value is None else float(value)


def _value(value: float | None) -> float | None:
    """A number that may be "not reported": null, or NaN as older records wrote it, is None."""
    return None if value is None or math.isnan(float(value)) else float(value)


def _counted(value: int | None) -> int | None:
    """A count that may be unknown: null, or -1 (``UNKNOWN_COUNT``) as older records wrote it."""
    return None if value is None or int(value) <= UNKNOWN_COUNT else int(value)


def _token_id(value: int | None) -> int | None:
    """A token id that may be unreported: null, or -1 (``UNREPORTED_TOKEN_ID``) as records
    before version 4 wrote it."""
    return None if value is None or int(value) <= UNREPORTED_TOKEN_ID else int(value)


def _reported_stage(data: Mapping[str, Any], chain: tuple[str, ...]) -> str | None:
    """The stage a server's numbers are: the record's key, or, for a record from before it,
    one stage whose raw logits and entropies are all unknown (the local engine always has
    them)."""
    if "reported_stage" in data:
        return data["reported_stage"]
    if len(chain) != 1:
        return None
    top = data.get("top") or []
    if top:
        unknown = all(_value(t.get("raw_logit")) is None for t in top)
    else:
        unknown = all(_value(v) is None for v in (data.get("entropies") or {}).values())
    return chain[0] if unknown else None


def decode_candidate(data: Mapping[str, Any], chain: tuple[str, ...], reported: bool = False) -> Candidate:
    """``reported``: the step is a server's (a null logprob is "not reported", not removed).

    A conversation opens by decoding every candidate of every step (200,000 for 20,000
    tokens), so the values as records hold them — a float, a count, an id — are taken as
    they are, and only the others (null, NaN, an integer where a float belongs, -1) go
    through the readers that say what they mean: the same values, several times faster."""
    values = [*map(data["logprobs"].get, chain)]
    if not all(type(v) is float and v == v for v in values):  # a null, a NaN or an integer
        read = _value if reported else _logprob
        values = [read(v) for v in values]
    token_id, raw_logit, count = data["token_id"], data["raw_logit"], data.get("count", 0)
    bias, penalty, dry = data.get("bias", 0.0), data.get("penalty", 0.0), data.get("dry")
    return Candidate(
        token_id if type(token_id) is int and token_id > UNREPORTED_TOKEN_ID else _token_id(token_id),
        data["text"],
        raw_logit if type(raw_logit) is float and raw_logit == raw_logit else _value(raw_logit),
        tuple(values),
        data["removed_by"],
        # A plain CLI record has none of these: the neutral values.
        bias if type(bias) is float and bias == bias else _value(bias),
        penalty if type(penalty) is float and penalty == penalty else _value(penalty),
        count if type(count) is int and count > UNKNOWN_COUNT else _counted(count),
        # Written only where DRY ran; a record from before candidates held it: not recorded.
        dry if type(dry) is float and dry == dry else _value(dry),
    )


def _chosen_logprobs(
    data: Mapping[str, Any], chain: tuple[str, ...], top: tuple[Candidate, ...], reported: bool
) -> tuple:
    logprobs = data.get("logprobs")
    if logprobs is not None:
        # A server's step has no removed chosen token: a null there is "not reported".
        read = _value if reported else _logprob
        return tuple(read(logprobs.get(s)) for s in chain)
    # A plain CLI record: the chosen token is one of the candidates (by text where the
    # server sent no ids).
    token_id, text = _token_id(data["token_id"]), data.get("piece", data["text"])
    chosen = next((c for c in top if same_token(c.token_id, c.text, token_id, text)), None)
    if chosen is None and reported and len(chain) == 1 and "logprob" in data:
        return (_value(data["logprob"]),)  # a server's one stage: the record's own logprob
    if chosen is None:
        raise CodecError(f"token record {data.get('index')} has no logprobs and its token is not a candidate.")
    return chosen.logprobs


def decode_step(data: Mapping[str, Any], params: SamplingParams | None = None, request_id: int = -1) -> TokenStep:
    """A token record of any version back into a step. ``params``: the step's parameters
    when the caller has them (parsed once for many records); otherwise ``data["params"]``."""
    version = record_version(data)
    if version == 1:
        return decode_v1(data, request_id)
    if version > CODEC_VERSION:
        raise CodecError(f"token step format {version} is newer than this app reads ({CODEC_VERSION}).")
    chain = tuple(data["chain"])
    reported = _reported_stage(data, chain)
    top = tuple(decode_candidate(t, chain, reported is not None) for t in data["top"])
    entropies, survivors = data["entropies"], data.get("survivors") or {}
    position = data.get("position", data["index"])
    return TokenStep(
        request_id=request_id,
        index=int(data["index"]),
        position=None if position is None or int(position) < 0 else int(position),
        token_id=_token_id(data["token_id"]),
        text=data["text"],
        piece=data.get("piece", data["text"]),
        chain=chain,
        logprobs=_chosen_logprobs(data, chain, top, reported is not None),
        entropies=tuple(_value(entropies.get(s)) for s in chain),
        survivors=tuple(_counted(survivors.get(s)) for s in chain),
        top=top,
        params=params if params is not None else SamplingParams.from_dict(data["params"]),
        forced=bool(data.get("forced", False)),
        rank=data.get("rank"),
        reported_stage=reported,
        phase=_phase(data.get("phase")),
        draft=_draft(data.get("draft")),
        grammar=_grammar(data.get("grammar")),
    )


def _grammar(value: Any) -> GrammarRecord | None:
    try:
        return decode_grammar(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"a token's grammar record is malformed: {exc}") from None


def _draft(value: Any) -> DraftRecord | None:
    try:
        return decode_draft(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"a token's draft record is malformed: {exc}") from None


def _phase(value: Any) -> str | None:
    if value is None or value in PHASES:
        return value
    raise CodecError(f"a token's phase must be one of {', '.join(PHASES)} or null, got {value!r}.")


# The records that end a request or a step --------------------------------------------------


def _rate(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def done_record(
    done: Finished, request: int, prompt_token_ids: Sequence[int] | None = None, grammar: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A ``done`` line: how request ``request`` ended (unknown numbers are null).
    ``prompt_token_ids``: the prompt as the model read it, where it is known here (a local
    model): with the tokens' ids it is the history every stage with state counted, so the
    records alone replay each step's penalties and DRY (docs/ENGINE.md); ``grammar``: the
    request's ``(kind, text)``, written in the grammar object, so that they replay its
    matcher too."""
    prompt = {} if prompt_token_ids is None else {"prompt_token_ids": [int(t) for t in prompt_token_ids]}
    return {
        "type": RecordType.DONE.value,
        "request": request,
        "finish_reason": str(done.finish_reason),
        "prompt_tokens": done.prompt_tokens,
        "generated_tokens": done.generated_tokens,
        "prefilled_tokens": _count(done.prefilled_tokens),
        "prompt_tps": _rate(done.prompt_tps),
        "generation_tps": _rate(done.generation_tps),
        **stats_fields(done.draft),
        **grammar_fields(done.grammar, grammar),
        **prompt,
    }


def score_done_fields(done: ScoreDone) -> dict[str, Any]:
    """A scored text's summary (the ``score_done`` line without its ``type``)."""
    return {
        "tokens": done.tokens,
        "perplexity": CLI.number(done.perplexity),
        "mean_surprisal_bits": CLI.number(done.mean_surprisal_bits),
        "tokens_per_second": done.tokens_per_second,
        **grammar_fields(done.grammar),
    }


def score_done_record(done: ScoreDone) -> dict[str, Any]:
    return {"type": RecordType.SCORE_DONE.value, **score_done_fields(done)}


def divergence_record(event: Divergence, order: Mapping[int, int]) -> dict[str, Any]:
    """A ``divergence`` line; ``order`` numbers the request ids as the ``request`` fields do."""
    return {
        "type": RecordType.DIVERGENCE.value,
        "index": event.index,
        "pairs": [[order[a], order[b]] for a, b in event.pairs],
        "js": [CLI.number(v) for v in event.js],
        "first_difference": list(event.first_difference),
    }
