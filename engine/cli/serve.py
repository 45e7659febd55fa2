"""``python -m engine serve``: Logitscope as an OpenAI-compatible server (``engine.serve``).

It listens on 127.0.0.1 unless ``--host`` names another address, which needs an API key
(``--api-key-env NAME``: the environment variable holding it) and is said on stderr: the
server then answers anyone who can reach that address. The address is bound before the model
loads (a port in use is a usage error at once, ``engine.serve.address``); the address is
printed on stderr once the model is loaded, and Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.cli.args import UsageError, add_kv_flags, add_precision_flag, kv_from
from engine.serve.address import DEFAULT_PORT, bind, is_local
from engine.serve.limits import ServeLimits


def add_serve_command(commands) -> None:
    p = commands.add_parser("serve", help="serve the model over the OpenAI API (chat, completions, logprobs)")
    p.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="the environment variable holding the API key clients must send (needed for another host)",
    )
    p.add_argument("--max-batch-size", type=int, default=8, help="requests decoded together (default 8)")
    add_limit_flags(p)
    add_precision_flag(p)
    add_kv_flags(p)


LIMIT_FLAGS = (
    ("--max-body-bytes", "max_body_bytes", int, "a request body's size (413 past it)"),
    ("--max-connections", "max_connections", int, "connections and requests at once (503 past it)"),
    ("--max-queued", "max_queued", int, "completion requests held at once, written or waiting (429 past it)"),
    ("--header-timeout", "header_timeout_s", float, "seconds to send a request's line and headers"),
    ("--body-timeout", "body_timeout_s", float, "seconds to send a request's body (408 past it)"),
    ("--keep-alive", "keep_alive_s", float, "seconds an idle kept-alive connection stays open"),
    ("--max-header-bytes", "max_header_bytes", int, "a request line and headers' size"),
)


def add_limit_flags(p: argparse.ArgumentParser) -> None:
    defaults = ServeLimits()
    for flag, name, kind, words in LIMIT_FLAGS:
        default = getattr(defaults, name)
        metavar = "N" if kind is int else "S"
        p.add_argument(
            flag, dest=name, type=kind, default=default, metavar=metavar, help=f"{words} (default {default:g})"
        )


def limits_of(args: argparse.Namespace) -> ServeLimits:
    """The limits the flags give; a usage error for a wrong one."""
    try:
        return ServeLimits(**{name: getattr(args, name) for _, name, _, _ in LIMIT_FLAGS})
    except ValueError as exc:  # said with the flag's name, not the field's
        message = str(exc)
        for flag, name, _, _ in LIMIT_FLAGS:
            if message.startswith(name + " "):
                message = flag + message[len(name) :]
        raise UsageError(message) from None


def api_key_of(args: argparse.Namespace) -> str | None:
    """The API key the flags name; a usage error for another host without one."""
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be in [1, 65535], got {args.port}.")
    key = None
    if args.api_key_env is not None:
        key = os.environ.get(args.api_key_env, "")
        if not key:
            raise UsageError(f"--api-key-env {args.api_key_env}: that environment variable is empty or not set.")
    if not is_local(args.host) and key is None:
        raise UsageError(
            f"--host {args.host} answers other machines: give an API key with --api-key-env NAME "
            "(or serve on 127.0.0.1)."
        )
    return key


GRACE_S = 5
"""Seconds Ctrl-C waits for open streams (each ends with an error event) to end."""


def serve_command(args: argparse.Namespace) -> int:
    key = api_key_of(args)  # every flag is checked before the slow model load, the address too
    limits = limits_of(args)
    kv = kv_from(args)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise UsageError(f"--host {args.host} --port {args.port}: {exc}") from None
    from engine.serve.engine_loop import EngineLoop
    from engine.serve.http import make_app
    from engine.serve.listener import make_server
    from engine.session.session import EngineSession

    def load() -> EngineSession:
        session = EngineSession(max_batch_size=args.max_batch_size)
        session.load(args.model, precision=args.precision, kv=kv)
        return session

    try:
        engine = EngineLoop(load)
    except BaseException:
        sock.close()
        raise
    name = engine.info.name
    if not is_local(args.host):
        print(
            f"warning: serving {name} to every machine that can reach {args.host}:{args.port} "
            "(requests need the API key).",
            file=sys.stderr,
        )
    print(f"serving {name} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    try:
        app = make_app(engine, key, limits, args.host)
        make_server(app, limits, app.state.live.stop_all, GRACE_S).run(sockets=[sock])
    finally:
        sock.close()
        engine.close()
    return 0
