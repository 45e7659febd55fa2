"""The summary of a model comparison, as ``llama-perplexity --kl-divergence`` prints it.

Pure NumPy over the per-token values, with llama.cpp's definitions
(``tools/perplexity/perplexity.cpp``), so its tables and ours can be read side by side:

- ``mean_and_uncertainty``: the mean and its standard error ``sqrt(var / (n − 1))``, with
  ``var = E[x²] − E[x]²`` (0 when ``n <= 10``, llama.cpp's convention); the summary writes
  every uncertainty made from it as None (JSON null) under ``UNCERTAINTY_MIN_TOKENS``
  tokens, where llama-perplexity prints a 0 that reads as a measured precision;
- percentiles interpolate linearly between sorted values at ``fraction · (n − 1)``
  (NumPy's default), the median is the middle value or the mean of the two middle ones;
- perplexity is ``exp(mean NLL)`` with uncertainty ``ppl · se``; ``ln(PPL(model) /
  PPL(base))`` is the difference of the mean NLLs, its uncertainty from both standard
  errors and their covariance; the correlation is Pearson's, of the per-token NLLs;
- ``Δp`` is ``p_model(token) − p_base(token)`` of the text's token; RMS Δp is
  ``sqrt(E[Δp²])`` with uncertainty ``0.5 / rms · se(Δp²)``;
- same top p: the fraction of positions whose most likely token is the same, with the
  binomial uncertainty ``sqrt(p (1 − p) / (n − 1))``.

llama.cpp prints the percentiles only from 100 tokens on; they are given here for any
count (with fewer tokens they say little).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

UNCERTAINTY_MIN_TOKENS = 11
"""Tokens from which llama-perplexity computes a standard error (``n > 10``)."""
KLD_PERCENTILES = (99.9, 99.0, 95.0, 90.0, 10.0, 5.0, 1.0, 0.1)
DP_PERCENTILES = (99.9, 99.0, 95.0, 90.0, 75.0, 25.0, 10.0, 5.0, 1.0, 0.1)


def mean_and_uncertainty(values: np.ndarray) -> tuple[float, float]:
    n = len(values)
    if n < 1:
        return 0.0, 0.0
    mean = float(values.sum() / n)
    var = float((values * values).sum() / n - mean * mean)
    return mean, math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0


def _covariance(a: np.ndarray, b: np.ndarray) -> float:
    n = len(a)
    if n < 10:
        return 0.0
    return float(((a * b).sum() / n - (a.sum() / n) * (b.sum() / n)) / (n - 1))


def _percentiles(values: np.ndarray, which: Sequence[float]) -> dict[str, float]:
    if not len(values):
        return {}
    return {f"p{q:g}": float(np.percentile(values, q)) for q in which}


def summarize(
    kld: Sequence[float],
    nll_base: Sequence[float],
    nll_model: Sequence[float],
    same_top: Sequence[bool],
) -> dict:
    """The statistics over scored tokens: per token its KL(base ‖ model), the text token's
    negative logprob under each, and whether both put the same token first."""
    k = np.asarray(kld, np.float64)
    nb = np.asarray(nll_base, np.float64)
    nm = np.asarray(nll_model, np.float64)
    n = len(k)
    dp = np.exp(-nm) - np.exp(-nb)
    lm, lm_se = mean_and_uncertainty(nm)
    lb, lb_se = mean_and_uncertainty(nb)
    cov = _covariance(nm, nb)
    ratio_ln = lm - lb
    ratio_ln_se = math.sqrt(max(lm_se**2 + lb_se**2 - 2.0 * cov, 0.0))
    ppl_m, ppl_b = math.exp(lm), math.exp(lb)
    mse, mse_se = mean_and_uncertainty(dp * dp)
    rms = math.sqrt(mse)
    top = float(np.mean(same_top)) if n else 1.0
    kld_mean, kld_se = mean_and_uncertainty(k)
    dp_mean, dp_se = mean_and_uncertainty(dp)
    known = n >= UNCERTAINTY_MIN_TOKENS

    def se(value: float) -> float | None:
        return value if known else None

    return {
        "tokens": n,
        "kld_mean": kld_mean,
        "kld_mean_se": se(kld_se),
        "kld_median": float(np.median(k)) if n else 0.0,
        "kld_max": float(k.max()) if n else 0.0,
        "kld_min": float(k.min()) if n else 0.0,
        "kld_percentiles": _percentiles(k, KLD_PERCENTILES),
        "same_top": top,
        "same_top_se": se(math.sqrt(top * (1.0 - top) / (n - 1)) if n > 1 else 0.0),
        "dp_mean": dp_mean,
        "dp_mean_se": se(dp_se),
        "dp_rms": rms,
        "dp_rms_se": se(0.5 / rms * mse_se if rms > 0 else 0.0),
        "dp_max": float(dp.max()) if n else 0.0,
        "dp_min": float(dp.min()) if n else 0.0,
        "dp_median": float(np.median(dp)) if n else 0.0,
        "dp_percentiles": _percentiles(dp, DP_PERCENTILES),
        "ppl_base": ppl_b,
        "ppl_base_se": se(ppl_b * lb_se),
        "ppl_model": ppl_m,
        "ppl_model_se": se(ppl_m * lm_se),
        "ppl_ratio": math.exp(ratio_ln),
        "ppl_ratio_se": se(math.exp(ratio_ln) * ratio_ln_se),
        "ln_ppl_ratio": ratio_ln,
        "ln_ppl_ratio_se": se(ratio_ln_se),
        "ppl_diff": ppl_m - ppl_b,
        "ppl_diff_se": se(math.sqrt(max((ppl_m * lm_se) ** 2 + (ppl_b * lb_se) ** 2 - 2.0 * ppl_m * ppl_b * cov, 0.0))),
        "uncertainty_min_tokens": UNCERTAINTY_MIN_TOKENS,
        "nll_correlation": cov / (lm_se * lb_se) if lm_se > 0 and lb_se > 0 else None,
    }
