"""What the CLI's commands share: the usage error, the parser that raises it, and the flags
several commands take (sampling, the text to score, precision, the KV cache) with their
checked values. Imported by every command module; it imports none of them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from engine.api.errors import EngineError
from engine.api.kv_quantization import KV_BITS, KV_GROUP_SIZES, KVQuantization
from engine.api.params import DEFAULT_SAMPLERS, SamplingParams
from engine.api.precision import PRECISIONS
from engine.specs.registry import FIELDS

if TYPE_CHECKING:
    from engine.models.load import LoadedModel


class UsageError(Exception):
    """A command line that cannot run: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """Every SamplingParams field but max_tokens and stop, as flags (one per field): the
    general ones here, each stage's from its spec (``--`` + the field name with dashes)."""
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--top-logprobs", type=int, default=10)
    p.add_argument(
        "--samplers", default=None, help=f"stage order, comma-separated (default: {','.join(DEFAULT_SAMPLERS)})"
    )
    p.add_argument(
        "--logit-bias",
        default=None,
        metavar="JSON",
        help="JSON object of token id -> bias added to that logit before every stage (OpenAI's logit_bias), "
        "e.g. '{\"42\": -100}'",
    )
    _add_grammar_flags(p)
    for spec_field in FIELDS.values():
        text = spec_field.help.replace("%", "%%")
        if spec_field.custom:
            continue  # its own flags (the grammar's, above)
        if spec_field.kind is tuple:
            help_text = f"repeatable; replaces the default list. {text}"
            p.add_argument(spec_field.cli_flag, dest=spec_field.name, action="append", default=None, help=help_text)
        else:
            p.add_argument(
                spec_field.cli_flag, dest=spec_field.name, type=spec_field.kind, default=spec_field.default, help=text
            )


def _add_grammar_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--json-schema",
        metavar="FILE|JSON",
        default=None,
        help="structured output: every token keeps the reply valid under this JSON schema (a file, or the "
        "schema itself); compiled by llguidance",
    )
    group.add_argument(
        "--json-object", action="store_true", help="structured output: any JSON object (OpenAI's json_object)"
    )
    group.add_argument("--regex", metavar="R", default=None, help="structured output: the whole reply matches R")
    group.add_argument(
        "--grammar",
        metavar="FILE",
        default=None,
        help="structured output: a Lark (.lark) or GBNF (.gbnf, llama.cpp's) grammar file",
    )


def grammar_from(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``grammar`` field the grammar flags give (``()``: none); files are read here."""
    if getattr(args, "json_object", False):
        return ("json", "")
    if getattr(args, "regex", None) is not None:
        return ("regex", args.regex)
    schema = getattr(args, "json_schema", None)
    if schema is not None:
        text = _read(Path(schema), "--json-schema") if not schema.lstrip().startswith("{") else schema
        json_object("--json-schema", text)
        return ("json_schema", text)
    grammar = getattr(args, "grammar", None)
    if grammar is not None:
        path = Path(grammar)
        kind = {".lark": "lark", ".gbnf": "gbnf"}.get(path.suffix.lower())
        if kind is None:
            raise UsageError(f"--grammar takes a .lark or a .gbnf file, got {grammar!r}.")
        return (kind, _read(path, "--grammar"))
    return ()


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read {str(path)!r} ({exc.strerror or exc}).") from None


def json_object(flag: str, text: str) -> dict:
    try:
        changes = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc.msg}).") from None
    if not isinstance(changes, dict):
        raise UsageError(f"{flag} must be a JSON object, got {text!r}.")
    return changes


def params_from(args: argparse.Namespace) -> SamplingParams:
    stage_values = {}
    for name, spec_field in FIELDS.items():
        if spec_field.custom:
            continue
        value = getattr(args, name)
        if spec_field.kind is tuple:
            value = spec_field.default if value is None else tuple(unescape(v) for v in value)
        stage_values[name] = value
    bias = {}
    if args.logit_bias is not None:  # its keys read as the app's and the API's are (token ids)
        bias = SamplingParams.from_dict({"logit_bias": json_object("--logit-bias", args.logit_bias)}).logit_bias
    return SamplingParams(
        seed=args.seed,
        logit_bias=bias,
        max_tokens=getattr(args, "max_tokens", 256),
        stop=tuple(getattr(args, "stop", ())),
        top_logprobs=args.top_logprobs,
        samplers=DEFAULT_SAMPLERS if args.samplers is None else _split(args.samplers),
        grammar=grammar_from(args),
        **stage_values,
    )


def _split(names: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in names.split(",") if n.strip())


def unescape(text: str) -> str:
    """``\\n``, ``\\t`` and ``\\\\`` typed on a command line (or in a field) as the characters."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def add_text_flags(p: argparse.ArgumentParser) -> None:
    """The model and a given text (or a chat reply to a prompt): what ``score`` and
    ``fidelity`` read."""
    p.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to score")
    source.add_argument("--file", help="a UTF-8 text file to score")
    p.add_argument("--chat", action="store_true", help="the text is the assistant's reply to --prompt")
    p.add_argument("--prompt", help="with --chat: the user message the text answers")


def add_precision_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        default="auto",
        choices=PRECISIONS,
        help=f"{' | '.join(PRECISIONS)}: what the model computes in (default auto)",
    )


def add_draft_flags(p: argparse.ArgumentParser) -> None:
    """Speculative decoding (``engine.runtime.speculative``): a draft model proposes, the model checks."""
    p.add_argument(
        "--draft-model",
        default=None,
        metavar="M",
        help="a smaller model with the same vocabulary that proposes tokens for --model to check "
        "(default | PATH | REPO); the reply is the same, each token record gains 'draft'",
    )
    p.add_argument(
        "--draft-precision",
        default=None,
        choices=PRECISIONS,
        help="what the draft model computes in (default: --precision)",
    )
    p.add_argument(
        "--num-draft-tokens",
        type=int,
        default=3,
        metavar="K",
        help="tokens the draft proposes per block (1 to 16, default 3)",
    )


def add_kv_flags(p: argparse.ArgumentParser, whose: str = "the model's") -> None:
    """mlx-lm's KV-cache quantization flags (``engine.api.kv_quantization``)."""
    p.add_argument(
        "--kv-bits",
        type=int,
        default=None,
        choices=KV_BITS,
        help=f"quantize {whose} KV cache to this many bits (default: not quantized)",
    )
    p.add_argument(
        "--kv-group-size",
        type=int,
        default=64,
        choices=KV_GROUP_SIZES,
        help="with --kv-bits: numbers sharing one scale (default 64)",
    )
    p.add_argument(
        "--quantized-kv-start",
        type=int,
        default=0,
        help="with --kv-bits: quantize once a request holds this many tokens (default 0: from the first)",
    )


def kv_from(args: argparse.Namespace) -> KVQuantization:
    """The flags as a checked setting (a bad value is a usage error)."""
    try:
        return KVQuantization(args.kv_bits, args.kv_group_size, args.quantized_kv_start)
    except EngineError as exc:
        raise UsageError(str(exc)) from None


def read_text(args: argparse.Namespace) -> str:
    if args.file is None:
        return args.text
    try:
        return Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(f"cannot read {args.file!r}: {exc}") from None


def check_chat(args: argparse.Namespace) -> None:
    """``--chat`` answers ``--prompt``: refused without it."""
    if args.chat and not args.prompt:
        raise UsageError("--chat needs --prompt: the user message the text answers.")


def load_scored_text(args: argparse.Namespace) -> tuple[LoadedModel, list[int], list[int]]:
    """``score`` and ``fidelity``: the model and the text to score (its context and the tokens
    scored), every flag checked before the slow load."""
    check_chat(args)
    if args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    kv = kv_from(args)
    text = read_text(args)
    from engine.models.load import load
    from engine.runtime.prompts import scored_text

    loaded = load(args.model, precision=args.precision, kv=kv)
    context, targets = scored_text(loaded.tokenizer, text, args.prompt if args.chat else None)
    return loaded, context, targets
