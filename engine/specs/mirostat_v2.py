"""``mirostat_v2`` as the app, the CLI and the docs see it (kernel and μ: :mod:`engine.stages.mirostat_v2`).

Mirostat 2.0 (Basu et al., ICLR 2021) as llama.cpp's ``llama_sampler_init_mirostat_v2``:
a target surprise ``τ`` in bits per token and a learning rate ``η``. Opt-in: it runs only
where ``samplers`` lists it, and has no neutral value.
"""

from __future__ import annotations

import math

import numpy as np

from engine.specs.spec import Field, StageSpec, Values

LN2 = math.log(2.0)
LOG2_E_FLOAT32 = np.float32(1.0 / LN2)
"""log2 e rounded to float32, as the compiled step multiplies by it (``next_mu``)."""


def next_mu(mu: float, tau: float, eta: float, logprob: float) -> float:
    """llama.cpp: ``mu -= eta * (observed_surprise - tau)``, the surprise in bits of the token
    drawn, from the renormalized set (``logprob``: its logprob after this stage, nats).

    In float32, as llama.cpp's floats, and in the operations the compiled step computes
    it with (``engine.stages.mirostat_v2.next_mu_on_device``): the μ a step sampled ahead
    read is then the host's to the bit, and the host can check it."""
    f = np.float32
    return float(f(mu) - f(eta) * ((-f(logprob)) * LOG2_E_FLOAT32 - f(tau)))


def replay_mu(mu: float | None, values: Values, logprob: float | None) -> float:
    """μ after one recorded token: from 2τ when the stage starts; a token this stage removed
    (a forced one) or whose logprob was not reported leaves μ where it was, as in generation."""
    mu = 2.0 * values.mirostat_tau if mu is None else mu
    if logprob is not None and math.isfinite(logprob):
        mu = next_mu(mu, values.mirostat_tau, values.mirostat_eta, logprob)
    return mu


SPEC = StageSpec(
    name="mirostat_v2",
    summary="Mirostat 2.0: keeps the tokens whose surprise is at most μ, and steers μ toward τ bits per token.",
    order=100,
    fields=(
        Field(
            "mirostat_tau",
            float,
            5.0,
            "Mirostat 2.0: the target surprise in bits per token; μ starts at 2τ (default 5).",
            range=(0.0, 100.0),
            label="τ (target bits)",
            slider=(0.0, 10.0),
            decimals=2,
        ),
        Field(
            "mirostat_eta",
            float,
            0.1,
            "Mirostat 2.0: the learning rate of μ ← μ − η·(surprise − τ) (default 0.1).",
            range=(0.0, 1.0),
            label="η (learning rate)",
            slider=(0.0, 1.0),
            decimals=3,
        ),
    ),
    neutral=lambda v: False,
    definition="keep the tokens whose surprise `−log₂ p <= μ` (at least the most likely, and its ties); after "
    "the token, `μ ← μ − η·(s − τ)` with `s` the token's surprise after this stage; μ starts at `2τ` when the "
    "stage joins the row's chain, is carried through live changes and branches, and follows each scored token",
    off="not listed in `samplers`",
    reference="llama.cpp `llama_sampler_mirostat_v2_apply` (Basu et al. 2021)",
    describe=lambda v: f"τ {v.mirostat_tau:g} · η {v.mirostat_eta:g}",
    label=lambda v: f"mirostat τ {v.mirostat_tau:g}" if "mirostat_v2" in v.samplers else None,
    default_on=False,
    replay=replay_mu,
)
