"""How the views label numbers a remote server reported, and the ones it did not.

A remote ``TokenStep`` (``engine/api/backend.py``) carries one stage: ``reported_stage`` (also
its ``chain``) names the distribution the server's logprobs describe; entropies,
survivors, raw logits, bias, penalty and counts are ``None``. Those are *not reported*,
never zero: the views write :data:`NOT_REPORTED` for them, and name the server's numbers
by their stage (``p(penalties)``), never ``raw`` or ``final`` (:func:`p_label`).
"""

from __future__ import annotations

import ipaddress
import math
from urllib.parse import urlsplit

from engine.api.events import Candidate, TokenStep, same_token

NOT_REPORTED = "not reported"
REPORTS = "server reports: "
STAGE_CHOICES = ("auto", "raw", "penalties", "final", "sglang")
STAGE_WORDS = {
    "raw": "raw (the model's logits)",
    "penalties": "after bias and penalties, before temperature",
    "final": "after the whole sampling chain",
    "sglang": "after penalties and temperature",
}
SERVER_TITLES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llama.cpp": "llama.cpp server",
    "mlx_lm": "mlx_lm.server",
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "openai": "OpenAI-compatible server",
}


def p_label(step: TokenStep, final: bool = True) -> str:
    """What the step's chosen-token probability is called: ``p(final)`` for the local
    engine's (``p(raw)`` with ``final=False``), ``p(<stage>)`` for a server's numbers."""
    if step.reported_stage is not None:
        return f"p({step.reported_stage})"
    return "p(final)" if final else "p(raw)"


def reports_one_stage(info) -> bool:
    """Whether the backend of ``info`` (an ``engine.api.backend.ModelInfo``) reports one stage
    of the chain, not all of it: its capabilities say so (a server), not its type."""
    return info is not None and not info.capabilities.full_chain


def stage_label(info) -> str:
    """``server reports: penalties (detected for mlx_lm.server)`` for a remote model."""
    if not reports_one_stage(info):
        return ""
    how = f"detected for {server_title(info.server)}" if info.stage_detected else "assumed — set it in Connect…"
    return f"{REPORTS}{info.reported_stage} ({how})"


def server_title(kind: str) -> str:
    return SERVER_TITLES.get(kind, kind or "server")


def status_text(info) -> str:
    """The status bar's model label for a remote model."""
    return f"{info.name} @ {info.source} · {stage_label(info)}"


def label_forms(label: str) -> list[str]:
    """``label`` and shorter forms of it, longest first, for where it does not fit. A
    server's label keeps its stage to the last (``server reports: penalties``): first goes
    how the stage was found, then the server's address, then the model's name."""
    head, marker, stage = label.rpartition(REPORTS)
    if not marker:
        return [label]
    short = REPORTS + stage.split(" (", 1)[0]
    head = head.removesuffix(" · ")
    forms = [label]
    if head:
        name = head.split(" @ ", 1)[0]
        forms += [f"{head} · {short}", f"{name} · {short}"]
    forms.append(short)
    return [form for i, form in enumerate(forms) if form not in forms[:i]]


NOT_SENT = f"entropies, tokens left, raw logits and other stages: {NOT_REPORTED}"


def step_stage_label(step: TokenStep) -> str:
    """Under the inspector's title: what the numbers of a remote step are (where the reply's
    origin, which names the stage itself, is not known)."""
    return f"remote: the server reports <b>{step.reported_stage or step.chain[0]}</b> only; {NOT_SENT}"


def sort_key(step: TokenStep, cand: Candidate) -> tuple[float, bool, int]:
    """Raw rank where raw logits are known, else the first reported stage's rank (ties: by
    id, the tokens without one last)."""
    value = cand.raw_logit
    if value is None:
        value = cand.logprobs[0] if cand.logprobs and cand.logprobs[0] is not None else -math.inf
    return (-value, cand.token_id is None, cand.token_id or 0)


def is_local_host(url: str) -> bool:
    """127.0.0.0/8, ::1 and localhost (and names under .localhost)."""
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_warning(url: str) -> str:
    """A warning for ``http://`` to a host that is not this machine, else ``""``."""
    url = url.strip()
    scheme = urlsplit(url).scheme.lower() if "://" in url else "http"
    if scheme == "http" and url and not is_local_host(url):
        return (
            "Plain http:// to another machine: the prompts, replies and the API key travel "
            "unencrypted. Use https:// (or an SSH tunnel) unless the network is trusted."
        )
    return ""


def is_chosen(step: TokenStep, cand: Candidate) -> bool:
    """Whether ``cand`` is the step's token (by text where the server sends no ids)."""
    return same_token(cand.token_id, cand.text, step.token_id, step.piece)


def token_id_text(token_id: int | None) -> str:
    """A token id as shown: the number, or "not reported" (a server that sent none)."""
    return NOT_REPORTED if token_id is None else str(token_id)
