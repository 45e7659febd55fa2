"""The text forms of the non-numeric parameters: seed, logit bias, stop strings, DRY breakers.

Stop strings and DRY breakers are lists of any text (``<|im_end|>`` included), so they are
written one per line with ``\\n``, ``\\t`` and ``\\\\`` escapes, never split on a separator."""

from __future__ import annotations

from engine.api.params import SamplingParamsError

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
_ESCAPED = {value: "\\" + key for key, value in _ESCAPES.items()}


def parse_seed(text: str) -> int | None:
    """``""`` -> None (a new seed each reply), else the integer."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise SamplingParamsError("seed", text, f"seed must be an integer, got {text!r}.") from None


def parse_bias(text: str) -> dict[int, float]:
    """``"42:-100, 7:2.5"`` -> {42: -100.0, 7: 2.5}. An id given twice is an error: which of
    its values was meant cannot be guessed."""
    bias: dict[int, float] = {}
    given: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in text.replace(";", ",").split(","))):
        token, _, value = part.partition(":")
        try:
            token_id, number = int(token), float(value)
        except ValueError:
            raise SamplingParamsError(
                "logit_bias", part, f"logit_bias entries are token_id:bias, got {part!r}."
            ) from None
        if token_id in given:
            raise SamplingParamsError(
                "logit_bias",
                token_id,
                f"logit_bias gives token {token_id} twice ({given[token_id]} and {part}): keep one.",
            )
        bias[token_id], given[token_id] = number, part
    return bias


def format_bias(bias: dict[int, float]) -> str:
    return ", ".join(f"{k}:{v:g}" for k, v in bias.items())


def parse_stop(text: str) -> tuple[str, ...]:
    """Stop strings, one per line, with escapes; empty lines are skipped."""
    return parse_breakers(text)


def unescape(text: str) -> str:
    """``\\n`` -> newline, ``\\t`` -> tab, ``\\\\`` -> backslash, in one left-to-right pass
    (so ``\\\\n`` is a backslash then ``n``); any other backslash stays as it is."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def escape(text: str) -> str:
    """Inverse of :func:`unescape`: newline, tab and backslash become visible escapes."""
    return "".join(_ESCAPED.get(ch, ch) for ch in text)


def parse_breakers(text: str) -> tuple[str, ...]:
    """DRY sequence breakers, one per line, with escapes; empty lines are skipped."""
    return tuple(unescape(line) for line in text.split("\n") if line != "")


def format_breakers(breakers: tuple[str, ...]) -> str:
    return "\n".join(escape(b) for b in breakers)
