"""``python -m engine generate --server URL``: the same JSON Lines, from a remote server.

Every ``--prompt`` (or ``--variant`` of one prompt) is its own concurrent request. Token
records carry what the server reported; the rest is ``null`` (``entropies``,
``survivors``, ``raw_logit``, stages other than the one in ``chain``, ``token_id`` where
the server sends no ids). No ``divergence`` records: Jensen–Shannon divergence needs
whole distributions, which servers do not send. A server error prints the ``done``
record of each request (``finish_reason: "error"``, after the tokens that did arrive),
then one ``error:`` line on stderr, and exits 1. The API key is read from the variable
named by ``--api-key-env`` and never printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from engine.api.codec import done_record, token_record
from engine.api.params import SamplingParams


def add_remote_flags(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("--server", default=None, help="base URL of an OpenAI-compatible server (remote mode)")
    gen.add_argument(
        "--api-key-env", default=None, metavar="NAME", help="environment variable holding the server's API key"
    )
    gen.add_argument(
        "--remote-stage",
        default="auto",
        choices=("auto", "raw", "penalties", "final", "sglang"),
        help="which distribution the server's logprobs are (auto: from the server kind; docs/REMOTE.md)",
    )
    gen.add_argument(
        "--server-kind",
        default=None,
        choices=("vllm", "sglang", "llama.cpp", "mlx_lm", "lmstudio", "ollama", "openai"),
        help="skip detecting the server kind",
    )
    gen.add_argument("--timeout", type=float, default=60.0, help="remote: seconds without data before giving up")


def generate_remote(
    args: argparse.Namespace,
    params: SamplingParams,
    variants: Sequence[SamplingParams] | None,
) -> int:
    from engine.remote.backend import RemoteBackend, RemoteFinished

    backend = RemoteBackend(
        args.server,
        api_key_env=args.api_key_env,
        stage=args.remote_stage,
        kind=args.server_kind,
        chat=args.chat,
        timeout=args.timeout,
    )
    errors: list[str] = []
    try:
        backend.load("" if args.model == "default" else args.model)
        if getattr(args, "no_thinking", False):
            backend.set_enable_thinking(False)
        messages = [[{"role": "user", "content": p}] for p in args.prompt]
        if variants:
            order = {backend.start(messages[0], v).request_id: i for i, v in enumerate(variants)}
        else:
            order = {backend.start(m, params).request_id: i for i, m in enumerate(messages)}
        out = sys.stdout
        while backend.has_work():
            for event in backend.step():
                request = order.get(getattr(event, "request_id", -1))
                if request is None:
                    continue
                if hasattr(event, "token_id"):
                    out.write(json.dumps(token_record(event, request)) + "\n")
                elif isinstance(event, RemoteFinished):
                    out.write(json.dumps(done_record(event, request)) + "\n")
                    if event.error is not None:
                        errors.append(str(event.error))
            out.flush()
    finally:
        backend.close()
    if errors:
        print(f"error: {errors[0]}", file=sys.stderr)
        return 1
    return 0
