"""``python -m engine generate``: JSON Lines of every token and every finished request.

The contract is in docs/ENGINE.md; tests, benchmarks and scripts depend on it. The records
are :mod:`engine.codec`'s.
Errors print one line on stderr and exit non-zero, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from engine.cli_fidelity import add_fidelity_command, add_precision_flag
from engine.codec import divergence_record, done_record, token_record
from engine.errors import EngineError, ModelLoadError
from engine.events import Divergence, Finished, TokenStep
from engine.params import DEFAULT_DRY_SEQUENCE_BREAKERS, DEFAULT_SAMPLERS, SamplingParams, SamplingParamsError
from engine.precision import check_choice
from engine.remote_cli import add_remote_flags, generate_remote

EXIT_USAGE = 2
EXIT_ERROR = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description="Logitscope engine")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = commands.add_parser("generate", help="generate and print every token as JSON Lines")
    gen.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    gen.add_argument("--prompt", action="append", required=True, help="repeat to batch")
    gen.add_argument("--chat", action="store_true", help="wrap each prompt as a user message")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--stop", action="append", default=[])
    add_sampling_flags(gen)
    gen.add_argument(
        "--variant",
        action="append",
        default=None,
        help="JSON object of SamplingParams fields overriding the flags; repeat to fork one prompt "
        "into several settings sharing one prefill",
    )
    gen.add_argument("--prefill-chunk", type=int, default=None, help=argparse.SUPPRESS)
    add_precision_flag(gen)
    add_remote_flags(gen)
    sc = commands.add_parser("score", help="score a given text token by token (teacher-forced) as JSON Lines")
    sc.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    source = sc.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to score")
    source.add_argument("--file", help="a UTF-8 text file to score")
    sc.add_argument("--chat", action="store_true", help="the text is the assistant's reply to --prompt")
    sc.add_argument("--prompt", help="with --chat: the user message the text answers")
    add_sampling_flags(sc)
    sc.add_argument("--prefill-chunk", type=int, default=128, help=argparse.SUPPRESS)
    add_precision_flag(sc)
    add_fidelity_command(commands)
    return parser


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """Every SamplingParams field but max_tokens and stop, as flags (one per field)."""
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("--penalty-window", type=int, default=64)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--top-logprobs", type=int, default=10)
    p.add_argument(
        "--samplers", default=None, help=f"stage order, comma-separated (default: {','.join(DEFAULT_SAMPLERS)})"
    )
    p.add_argument("--typical-p", type=float, default=1.0)
    p.add_argument("--top-n-sigma", type=float, default=0.0)
    p.add_argument("--xtc-probability", type=float, default=0.0)
    p.add_argument("--xtc-threshold", type=float, default=0.1)
    p.add_argument("--dry-multiplier", type=float, default=0.0)
    p.add_argument("--dry-base", type=float, default=1.75)
    p.add_argument("--dry-allowed-length", type=int, default=2)
    p.add_argument("--dry-penalty-last-n", type=int, default=-1)
    p.add_argument(
        "--dry-sequence-breaker",
        action="append",
        default=None,
        help='repeatable; replaces the default list (\\n : " *); escapes \\n \\t \\\\ are read',
    )
    p.add_argument("--dynatemp-range", type=float, default=0.0)
    p.add_argument("--dynatemp-exponent", type=float, default=1.0)


def params_from(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        penalty_window=args.penalty_window,
        seed=args.seed,
        max_tokens=getattr(args, "max_tokens", 256),
        stop=tuple(getattr(args, "stop", ())),
        top_logprobs=args.top_logprobs,
        samplers=DEFAULT_SAMPLERS if args.samplers is None else _split(args.samplers),
        typical_p=args.typical_p,
        top_n_sigma=args.top_n_sigma,
        xtc_probability=args.xtc_probability,
        xtc_threshold=args.xtc_threshold,
        dry_multiplier=args.dry_multiplier,
        dry_base=args.dry_base,
        dry_allowed_length=args.dry_allowed_length,
        dry_penalty_last_n=args.dry_penalty_last_n,
        dry_sequence_breakers=DEFAULT_DRY_SEQUENCE_BREAKERS
        if args.dry_sequence_breaker is None
        else tuple(unescape(b) for b in args.dry_sequence_breaker),
        dynatemp_range=args.dynatemp_range,
        dynatemp_exponent=args.dynatemp_exponent,
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


def variants_from(args: argparse.Namespace, params: SamplingParams) -> list[SamplingParams]:
    """Each ``--variant`` JSON object over the common flags, validated like the flags."""
    if len(args.prompt) != 1:
        raise _UsageError(f"--variant forks one --prompt, got {len(args.prompt)} prompts.")
    variants = []
    for i, text in enumerate(args.variant):
        try:
            changes = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _UsageError(f"--variant {i} is not valid JSON ({exc.msg}).") from None
        if not isinstance(changes, dict):
            raise _UsageError(f"--variant {i} must be a JSON object of sampling parameters, got {text!r}.")
        variants.append(SamplingParams.from_dict({**params.to_dict(), **changes}))
    return variants


def generate(args: argparse.Namespace) -> int:
    params = params_from(args)  # validate before the slow model load
    variants = variants_from(args, params) if args.variant else None
    if args.server:
        return generate_remote(args, params, variants)
    if args.prefill_chunk is not None and args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    check_choice(args.precision)
    from engine.models import load
    from engine.prompts import encode_chat, encode_text
    from engine.scheduler import Scheduler

    loaded = load(args.model, precision=args.precision)
    rows = len(variants) if variants else len(args.prompt)
    scheduler = Scheduler(loaded, max_batch_size=max(1, rows), prefill_chunk=args.prefill_chunk)
    if args.chat:
        prompts = [encode_chat(loaded.tokenizer, [{"role": "user", "content": p}]) for p in args.prompt]
    else:
        prompts = [encode_text(loaded.tokenizer, p) for p in args.prompt]
    if variants:
        order = {rid: i for i, rid in enumerate(scheduler.fork(prompts[0], variants))}
    else:
        order = {scheduler.insert(tokens, params): i for i, tokens in enumerate(prompts)}
    out = sys.stdout
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                out.write(json.dumps(token_record(event, order[event.request_id])) + "\n")
            elif isinstance(event, Finished):
                out.write(json.dumps(done_record(event, order[event.request_id])) + "\n")
            elif isinstance(event, Divergence):
                out.write(json.dumps(divergence_record(event, order)) + "\n")
        out.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "score":
            from engine.cli_score import score_command

            return score_command(args)
        if args.command == "fidelity":
            from engine.cli_fidelity import fidelity_command

            return fidelity_command(args)
        return generate(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SamplingParamsError, EngineError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, SamplingParamsError) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (e.g. `head`) closed the pipe: not an error
        sys.stderr.close()
        return 0
    except Exception as exc:  # the contract: one line, never a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
