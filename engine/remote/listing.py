"""Asking a server what it is and which models it serves, before any reply.

``/v1/models`` lists the models; the kind comes from that listing, ``/props`` (llama.cpp)
and the ``Server`` header (mlx_lm.server is Python's http.server). A server that answers
but cannot list its models is still usable when the model is named: mlx_lm.server 0.32
answers ``/v1/models`` with an empty body when the Hugging Face cache folder does not
exist on its machine (it scans that folder), which a fresh home folder does not have.
So the listing's failure is kept as a sentence (:attr:`ServerListing.problem`), not
raised; only a server that does not answer at all, or refuses the key, stops here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.backend import REMOTE, ModelInfo
from engine.remote.kind import ServerKind
from engine.remote.servers import context_of, detect_kind, model_ids, remote_capabilities
from engine.remote.stream import Transport
from engine.remote.wire import RemoteError, server_message

HUB_CACHE_HINT = (
    "mlx_lm.server answers so when the Hugging Face cache folder (~/.cache/huggingface/hub) does not "
    "exist on its machine: create that folder, or start the server with HF_HUB_CACHE set to an existing one"
)


@dataclass(frozen=True)
class ServerListing:
    kind: str
    """The server kind (``engine.remote.servers.KINDS``)."""
    models: list[str] = field(default_factory=list)
    problem: str = ""
    """Why the server listed no models although it answered ("" when it listed them)."""
    context: int = 0
    """The context per request the server says (llama.cpp's ``/props``); 0 when unknown."""


def ask_server(http: Transport, forced_kind: str | None = None) -> ServerListing:
    """What the server at ``http`` is and serves; raises RemoteError when it does not
    answer or refuses the API key (401, 403), since nothing else would work either."""
    status, headers, body = http.get("/v1/models")
    if status in (401, 403):
        msg = server_message(body) or "the API key was refused"
        raise RemoteError(f"the server answered {status}: {msg}", status=status, server_message=msg)
    models, problem = _listing(status, body)
    kind = forced_kind
    server = headers.get("server", "")
    props = None
    if kind in (None, "llama.cpp") and not server.startswith("BaseHTTP/"):
        props = http.get_json("/props")
        props = props if isinstance(props, dict) else None
    if kind is None:
        kind = detect_kind(models, server, props)
    if problem and kind == "mlx_lm":
        problem = f"{problem}; {HUB_CACHE_HINT}"
    return ServerListing(kind, model_ids(models), problem, context_of(props) if kind == "llama.cpp" else 0)


def pick_model(listing: ServerListing, source: str, base_url: str) -> tuple[str, str]:
    """The model to use, ``source`` or (``""``) the first listed, and a note ("" when none):
    where the server listed no models, ``source`` as named, and why there was no list."""
    if listing.problem:
        if not source:
            raise RemoteError(f"{base_url} did not list its models ({listing.problem}); type the model's name.")
        return source, f"the server did not list its models ({listing.problem}); {source} is used as typed."
    if not source and listing.models:
        source = listing.models[0]
    source = _listed_as(source, listing.models)
    if listing.models and source not in listing.models:
        raise RemoteError(f"{base_url} does not serve {source!r}; it serves: {', '.join(listing.models)}.")
    return source, ""


def _listed_as(source: str, models: list[str]) -> str:
    """The listed id that ``source`` names: itself, or the one listed id whose last path part
    it is, with or without ``.gguf`` (llama.cpp lists its model by the file's full path on
    its own machine, which the user does not know)."""
    if source in models:
        return source
    names = {m: m.replace("\\", "/").rsplit("/", 1)[-1] for m in models}
    named = [m for m, name in names.items() if source in (name, name.removesuffix(".gguf"))]
    return named[0] if len(named) == 1 else source


def _listing(status: int, body: bytes) -> tuple[Mapping[str, Any], str]:
    """``/v1/models``'s answer and "", or {} and why it is no listing."""
    if status >= 400:
        return {}, f"/v1/models answered {status}: {server_message(body) or 'no message'}"
    if not body.strip():
        return {}, "/v1/models answered with an empty body"
    try:
        data = json.loads(body)
    except ValueError:
        return {}, "/v1/models did not answer with JSON"
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return {}, "/v1/models did not list models"
    return data, ""


def served_model_info(
    kind: ServerKind, base_url: str, model: str, stage: str, detected: bool, chat: bool, note: str
) -> ModelInfo:
    """What the app shows of ``model`` on the server at ``base_url``: its kind, the stage its
    logprobs are (``detected``: from the kind, not said by the user) and what it can do."""
    return ModelInfo(
        name=model,
        source=base_url,
        vocab_size=0,
        context_length=0,
        has_chat_template=chat,
        eos_token_ids=(),
        path=base_url,
        backend=REMOTE,
        server=kind.name,
        reported_stage=stage,
        stage_detected=detected and kind.name != "openai",
        capabilities=remote_capabilities(kind, stage),
        server_note=note,
    )
