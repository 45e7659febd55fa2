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
    add_precision_flag(p)
    add_kv_flags(p)


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


def serve_command(args: argparse.Namespace) -> int:
    key = api_key_of(args)  # every flag is checked before the slow model load, the address too
    kv = kv_from(args)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise UsageError(f"--host {args.host} --port {args.port}: {exc}") from None
    import uvicorn

    from engine.serve.engine_loop import EngineLoop
    from engine.serve.http import make_app
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
        uvicorn.Server(uvicorn.Config(make_app(engine, key), log_level="warning")).run(sockets=[sock])
    finally:
        sock.close()
        engine.close()
    return 0
