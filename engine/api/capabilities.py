"""What a backend can do, declared by the backend itself: the app asks this, never its type.

Every :class:`engine.api.backend.Backend` fills a :class:`Capabilities` truthfully (and puts
it on its :class:`engine.api.backend.ModelInfo`, so the GUI thread has it without reaching
into the worker). A capability that is off comes with the sentence a disabled menu item
shows, so the reason a server cannot score a text is written once, here, next to the
flag, not in each view. Importable without MLX: the app uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

NAMES = (
    "fork",
    "divergence",
    "score",
    "replay",
    "fidelity",
    "compare_models",
    "logit_lens",
    "draft",
    "precision",
    "layers",
    "full_chain",
    "token_ids",
    "memory",
    "load_files",
    "network",
    "serve",
)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Flags, each True when the backend does it; ``reasons`` says why for each one that is off."""

    fork: bool = False
    """``fork`` / ``fork_reply``: several settings from one prompt (compare mode)."""
    divergence: bool = False
    """Fork groups also yield ``Divergence`` events (needs whole distributions)."""
    score: bool = False
    """``score_text``: a given text teacher-forced through the chain."""
    replay: bool = False
    """``replay``: a stored reply re-scored under other settings."""
    fidelity: bool = False
    """``check_fidelity``: the running precision measured against float32."""
    compare_models: bool = False
    """``load_second`` / ``compare_reply`` / ``compare_text``: the same tokens under a second
    local model, compared over the whole vocabulary."""
    logit_lens: bool = False
    """``lens_reply`` / ``lens_text``: each layer's next-token distribution (the weights are here)."""
    draft: bool = False
    """``set_draft``: a draft model proposes tokens the model checks (speculative decoding)."""
    precision: bool = False
    """``load`` honours its ``precision`` argument (the model computes here)."""
    layers: bool = False
    """The model's internals are known: architecture, cache kinds, vocabulary, context."""
    full_chain: bool = False
    """Each ``TokenStep`` has every stage of the chain with entropies and survivors;
    without it a step holds one stage (``TokenStep.reported_stage``) and ``None`` for
    what was not reported."""
    token_ids: bool = False
    """Every step and candidate has its token id (else ``None`` where not sent)."""
    memory: bool = False
    """``memory_bytes`` measures the model's memory (else it returns 0: not known here)."""
    load_files: bool = False
    """``load`` takes a model file, folder or repo id (else: one of a server's model ids)."""
    network: bool = False
    """Requests travel over the network: one can fail mid-reply (``Finished.error``)."""
    serve: bool = False
    """``start_text`` / ``token_bytes``: what Logitscope's own OpenAI-compatible server needs
    beyond ``start`` (a completion's raw text, the bytes of each reported token)."""
    reasons: tuple[tuple[str, str], ...] = field(default=())
    """``(name, why it is off)`` for flags that are off."""

    def reason(self, name: str) -> str:
        """Why ``name`` is off, in one sentence; ``""`` when it is on."""
        if name not in NAMES:
            raise KeyError(f"capability must be one of {', '.join(NAMES)}, got {name!r}.")
        if getattr(self, name):
            return ""
        return dict(self.reasons).get(name, f"{name} is not available with this backend.")

    def missing(self) -> tuple[str, ...]:
        """The names that are off, in declaration order."""
        return tuple(f.name for f in fields(self) if f.name in NAMES and not getattr(self, f.name))


LOCAL_CAPABILITIES = Capabilities(
    fork=True,
    divergence=True,
    score=True,
    replay=True,
    fidelity=True,
    compare_models=True,
    logit_lens=True,
    draft=True,
    precision=True,
    layers=True,
    full_chain=True,
    token_ids=True,
    memory=True,
    load_files=True,
    serve=True,
    reasons=(("network", "the model runs in this process."),),
)
"""The local MLX engine: everything but the network."""

NO_MODEL = Capabilities(reasons=tuple((name, "no model is loaded yet.") for name in NAMES))
"""Before anything is loaded."""
