"""One KL divergence for the precision check and the model comparison (``engine.analysis.kl``),
against SciPy's ``rel_entr`` summed in float64."""

from __future__ import annotations

import numpy as np
from scipy.special import rel_entr

from engine.analysis import fidelity, kld
from engine.analysis.kl import kl_divergences


def _logprobs(rng, rows: int, vocab: int, scale: float) -> np.ndarray:
    x = rng.normal(0, scale, (rows, vocab))
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def test_the_check_and_the_comparison_read_the_same_divergence_as_scipy():
    rng = np.random.default_rng(0)
    base = _logprobs(rng, 6, 49_152, 3.0)
    # A second "precision": the same distributions moved a little (KL about 1e-5 nats).
    near = (base + rng.normal(0, 3e-3, base.shape)).astype(np.float32)
    near = near - np.log(np.exp(near.astype(np.float64)).sum(-1, keepdims=True)).astype(np.float32)
    targets = list(range(6))
    checked = [r.kld for r in fidelity.compare(near, base, targets, 0)]
    compared = [r.kld for r in kld.compare(base, near, targets, 0)]
    assert checked == compared == list(kl_divergences(base, near))
    reference = rel_entr(np.exp(base.astype(np.float64)), np.exp(near.astype(np.float64))).sum(-1)
    np.testing.assert_allclose(compared, reference, rtol=1e-3, atol=1e-9)
    assert all(k >= 0 for k in compared)
