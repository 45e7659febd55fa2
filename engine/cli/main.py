"""``python -m engine generate``: JSON Lines of every token and every finished request.

The contract is in docs/ENGINE.md; tests, benchmarks and scripts depend on it. The records
are :mod:`engine.api.codec`'s; the sampling flags are made from the stage specs
(:mod:`engine.specs.registry`).
Errors print one line on stderr and exit non-zero, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from engine.api.codec import divergence_record, done_record, token_record
from engine.api.draft import check_draft_tokens
from engine.api.errors import EngineError, ModelLoadError
from engine.api.events import Divergence, Finished, TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.api.reasoning import has_thinking_switch
from engine.cli.args import (
    Parser,
    UsageError,
    add_draft_flags,
    add_kv_flags,
    add_precision_flag,
    add_sampling_flags,
    add_text_flags,
    json_object,
    kv_from,
    params_from,
)
from engine.cli.fidelity import add_fidelity_command
from engine.cli.kld import add_kld_command
from engine.cli.lens import add_lens_command
from engine.cli.models import add_models_command
from engine.cli.remote import add_remote_flags, generate_remote
from engine.cli.serve import add_serve_command

EXIT_USAGE = 2
EXIT_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m engine", description="Logitscope engine")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
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
    add_reasoning_flags(gen)
    gen.add_argument("--prefill-chunk", type=int, default=None, help=argparse.SUPPRESS)
    add_precision_flag(gen)
    add_kv_flags(gen)
    add_draft_flags(gen)
    add_remote_flags(gen)
    sc = commands.add_parser("score", help="score a given text token by token (teacher-forced) as JSON Lines")
    add_text_flags(sc)
    add_sampling_flags(sc)
    sc.add_argument("--prefill-chunk", type=int, default=128, help=argparse.SUPPRESS)
    add_precision_flag(sc)
    add_kv_flags(sc)
    add_fidelity_command(commands)
    add_kld_command(commands)
    add_lens_command(commands)
    add_models_command(commands)
    add_serve_command(commands)
    return parser


def add_reasoning_flags(p: argparse.ArgumentParser) -> None:
    """A reasoning model's settings per phase (docs/ENGINE.md, "Reasoning models")."""
    p.add_argument(
        "--think-variant",
        default=None,
        metavar="JSON",
        help="JSON object of SamplingParams fields over the flags, applied from the token after "
        "the end of the thinking (as a live change)",
    )
    p.add_argument(
        "--thinking-budget",
        type=int,
        default=None,
        metavar="N",
        help="force the end-of-thinking marker after N thinking tokens",
    )
    p.add_argument(
        "--no-thinking",
        action="store_true",
        help="with --chat: the chat template's enable_thinking=False, where the template has the switch",
    )


def reasoning_from(args: argparse.Namespace, params: SamplingParams) -> SamplingParams:
    """``params`` with ``--thinking-budget`` and ``--think-variant`` (its JSON over the flags)."""
    if getattr(args, "no_thinking", False) and not args.chat:
        raise UsageError("--no-thinking switches the chat template's thinking off: it needs --chat.")
    variant = None
    if args.think_variant is not None:
        changes = json_object("--think-variant", args.think_variant)
        if "max_tokens" in changes:  # the answer keeps the reply's (SamplingParams.answer_settings)
            raise UsageError(
                "--think-variant cannot set max_tokens: it limits the whole reply, thinking and answer "
                "together; set it with --max-tokens."
            )
        variant = SamplingParams.from_dict({**params.to_dict(), **changes})
    return params.with_changes(think_variant=variant, thinking_budget=args.thinking_budget)


def _reasoning_notes(args: argparse.Namespace, params: SamplingParams, markers: bool, tokenizer: object) -> list[str]:
    """What a reasoning flag changes nothing for with this model (the run goes on): said,
    rather than left to be guessed from the records."""
    notes = []
    if not markers and (params.think_variant is not None or params.thinking_budget is not None):
        notes.append("this model has no reasoning markers: --think-variant and --thinking-budget change nothing.")
    if getattr(args, "no_thinking", False) and not has_thinking_switch(tokenizer):
        notes.append("this model's chat template has no enable_thinking switch: --no-thinking changes nothing.")
    return notes


def variants_from(args: argparse.Namespace, params: SamplingParams) -> list[SamplingParams]:
    """Each ``--variant`` JSON object over the common flags, validated like the flags."""
    if len(args.prompt) != 1:
        raise UsageError(f"--variant forks one --prompt, got {len(args.prompt)} prompts.")
    return [
        SamplingParams.from_dict({**params.to_dict(), **json_object(f"--variant {i}", text)})
        for i, text in enumerate(args.variant)
    ]


def generate(args: argparse.Namespace) -> int:
    params = reasoning_from(args, params_from(args))  # validate before the slow model load
    variants = variants_from(args, params) if args.variant else None
    kv = kv_from(args)
    drafting = args.draft_model is not None
    if drafting:
        check_draft_tokens(args.num_draft_tokens)
    elif args.draft_precision is not None:
        raise UsageError("--draft-precision is the draft model's: it needs --draft-model.")
    if args.server:
        if kv.enabled:
            raise UsageError("--kv-bits is for a local model: a server quantizes its own KV cache.")
        if drafting:
            raise UsageError("--draft-model is for a local model: a server's speculative decoding is its own.")
        return generate_remote(args, params, variants)
    if args.prefill_chunk is not None and args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    from engine.models.load import load
    from engine.runtime.prompts import encode_chat, encode_text
    from engine.runtime.scheduler import Scheduler

    loaded = load(args.model, precision=args.precision, kv=kv)
    rows = len(variants) if variants else len(args.prompt)
    scheduler = Scheduler(loaded, max_batch_size=max(1, rows), prefill_chunk=args.prefill_chunk)
    if drafting:
        draft = load(args.draft_model, precision=args.draft_precision or args.precision)
        scheduler.set_draft(draft, args.num_draft_tokens)
    for note in _reasoning_notes(args, params, scheduler.reasoning is not None, loaded.tokenizer):
        print(f"note: {note}", file=sys.stderr)
    if args.chat:
        thinking = False if args.no_thinking else None
        prompts = [encode_chat(loaded.tokenizer, [{"role": "user", "content": p}], thinking) for p in args.prompt]
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
                i = order[event.request_id]
                grammar = (variants[i] if variants else params).grammar
                out.write(json.dumps(done_record(event, i, prompts[0 if variants else i], grammar)) + "\n")
            elif isinstance(event, Divergence):
                out.write(json.dumps(divergence_record(event, order)) + "\n")
        out.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "score":
            from engine.cli.score import score_command

            return score_command(args)
        if args.command == "fidelity":
            from engine.cli.fidelity import fidelity_command

            return fidelity_command(args)
        if args.command == "kld":
            from engine.cli.kld import kld_command

            return kld_command(args)
        if args.command == "lens":
            from engine.cli.lens import lens_command

            return lens_command(args)
        if args.command == "models":
            from engine.cli.models import models_command

            return models_command(args)
        if args.command == "serve":
            from engine.cli.serve import serve_command

            return serve_command(args)
        return generate(args)
    except UsageError as exc:
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
