"""Diagnostics of a deployed training from its Dirac canaries' observations, no extra training
(docs/design.md §14.5; issue 33 item 1).

The canary block's coordinate j at step t reads, in units of C,
``y_{j,t} = 1[j IN and in the step's batch] * 1 + N(0, sigma^2)`` for correct DP-SGD
(per-example clipping to C, noise N(0, sigma^2 C^2) per coordinate, fresh at every step, the
sum divided by the recorded divisor). Where the recorded batches say the canary was not in the
step's batch (every OUT canary; an IN canary absent from that batch), y is pure noise. Each
diagnostic below is a test of that law at level ``alpha / K`` (Bonferroni over the K tests,
family-wise level ``alpha``) or an exact observation (level 0):

- ``noise_scale``: n s^2 / sigma^2 ~ chi^2_n on the n pure-noise values (mean known 0);
  below the alpha/(2K) quantile: too little noise (refutes); above the upper one: a note.
- ``fresh_noise_steps``: the pooled lag-l products sum z_t z_{t+l} / (sigma^2 sqrt(N_l))
  ~ N(0, 1) for l = 1..k (fresh noise: independent across steps), and exact repeats.
- ``fresh_noise_coordinates``: the correlation between canary coordinates at a step,
  sum_t (sum_j z_{j,t})^2 against its chi-square law (a shared draw adds m^2 sigma^2).
- ``noise_law``: Kolmogorov-Smirnov of z / sigma against N(0, 1) and the count beyond
  4 sigma against its binomial law.
- ``steps_composed``: the accountant's steps vs the optimizer steps recorded (exact).
- ``sampling_rate``: the canaries' inclusion frequency in the recorded batches, its
  Clopper-Pearson interval vs the accountant's q.
- ``canary_signal``: the IN canaries' mean at steps that held them minus 1 (the signal of
  one clipped example, in units of C), z-test with the noise of the claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from audit.deployed.findings import Finding
from audit.stats.binary import clopper_pearson_lower, clopper_pearson_upper

__all__ = ["DIAGNOSTICS", "Observed", "diagnose", "in_batch_mask"]

#: the stable names, in the order they are run and counted in the Bonferroni family
DIAGNOSTICS: tuple[str, ...] = (
    "noise_scale",
    "fresh_noise_steps",
    "fresh_noise_coordinates",
    "noise_law",
    "sampling_rate",
    "canary_signal",
)


@dataclass(frozen=True)
class Observed:
    """What one training recorded: y (m, S) in units of C, the (m, S) in-batch mask, the IN bits."""

    y: np.ndarray
    in_batch: np.ndarray
    included: np.ndarray


def in_batch_mask(batches: Sequence[np.ndarray], real: int, m: int, steps: int) -> np.ndarray:
    """(m, S) booleans: canary j's slot was in step t's recorded batch (batch t = step t)."""
    if len(batches) < steps:
        raise ValueError(
            f"{len(batches)} batches recorded for {steps} optimizer steps; need one per step"
        )
    mask = np.zeros((m, steps), dtype=bool)
    for t in range(steps):
        slot = np.asarray(batches[t], dtype=np.int64) - real
        slot = slot[(slot >= 0) & (slot < m)]
        mask[slot, t] = True
    return mask


def _noise(obs: Observed) -> np.ndarray:
    """(m, S) with NaN where the value holds signal (IN canary in that step's batch)."""
    z = np.array(obs.y, dtype=float)
    z[obs.in_batch & obs.included[:, None]] = np.nan
    return z


def _noise_scale(z: np.ndarray, sigma: float, level: float) -> Finding:
    v = z[np.isfinite(z)]
    n = v.size
    if n < 2:
        return Finding("noise_scale", True, level, "too few pure-noise observations to test")
    chi = float(np.sum(v**2) / sigma**2)
    s = float(np.sqrt(np.mean(v**2)))
    lo, hi = stats.chi2.ppf(level / 2, n), stats.chi2.ppf(1 - level / 2, n)
    ratio = s / sigma
    # the interval for the noise's standard deviation (units of C), exact at level `level`
    ci = (float(np.sqrt(chi / hi)) * sigma, float(np.sqrt(chi / lo)) * sigma)
    where = f"{n} pure-noise values, std {s:.4g} C, interval [{ci[0]:.4g}, {ci[1]:.4g}] C"
    if chi < lo:
        return Finding(
            "noise_scale", False, level,
            f"too little noise: the noise's std is {ratio:.3g} x the claimed sigma = {sigma:.4g} "
            f"({where}); check that the noise is N(0, (sigma C)^2) before the division by the "
            "batch size (not divided twice, by sqrt(b), or without C)",
        )
    if chi > hi:
        return Finding(
            "noise_scale", True, level,
            f"note: more noise than claimed, {ratio:.3g} x sigma = {sigma:.4g} ({where}); "
            "the claim is conservative, or the noise divisor is wrong",
            refutes=False,
        )
    return Finding(
        "noise_scale", True, level, f"noise consistent with sigma = {sigma:.4g} ({where})"
    )


def _fresh_steps(z: np.ndarray, sigma: float, level: float, lags: int) -> Finding:
    S = z.shape[1]
    k = max(0, min(lags, S - 1))
    if k == 0:
        return Finding("fresh_noise_steps", True, level, "one step: nothing to compare")
    each = level / k
    crit = float(stats.norm.isf(each / 2))
    worst: tuple[float, int] = (0.0, 0)
    for lag in range(1, k + 1):
        prod = z[:, :-lag] * z[:, lag:]
        p = prod[np.isfinite(prod)]
        if p.size == 0:
            continue
        stat = float(p.sum() / (sigma**2 * np.sqrt(p.size)))
        if abs(stat) > abs(worst[0]):
            worst = (stat, lag)
    # exact repeats: a continuous noise repeats a value with probability 0
    a, b = z[:, :-1], z[:, 1:]
    same = np.isfinite(a) & (a == b) & (a != 0)
    steps = tuple(int(t) + 1 for t in np.flatnonzero(same.any(axis=0))[:20])
    if steps:
        return Finding(
            "fresh_noise_steps", False, 0.0,
            f"the noise repeats exactly between consecutive steps (first at steps {steps[:5]}): "
            "the noise generator is re-created or re-seeded inside the loop; create it once "
            "before training",
            steps=steps,
        )
    stat, lag = worst
    if abs(stat) > crit:
        corr = stat / np.sqrt(max(1, np.isfinite(z[:, :-lag] * z[:, lag:]).sum()))
        return Finding(
            "fresh_noise_steps", False, level,
            f"the noise is correlated across steps at lag {lag} (correlation {corr:.3g}, "
            f"z = {stat:.3g} > {crit:.3g}): noise reused or added once per {lag} step(s) "
            "(per epoch or per macro-batch); draw fresh noise at every optimizer step",
        )
    return Finding(
        "fresh_noise_steps", True, level,
        f"no dependence across steps at lags 1..{k} (max |z| = {abs(stat):.3g} <= {crit:.3g})",
    )


def _fresh_coordinates(z: np.ndarray, sigma: float, level: float) -> Finding:
    cols = z[np.isfinite(z).all(axis=1)]  # the canaries that are pure noise at every step
    if cols.size == 0 or cols.shape[0] < 2:
        return Finding("fresh_noise_coordinates", True, level, "too few canaries to compare")
    m, n = cols.shape
    # sum_j z_j / (sigma sqrt m) ~ N(0, 1) per step: sum of squares ~ chi^2_n
    chi = float(np.sum((cols.sum(axis=0) / (sigma * np.sqrt(m))) ** 2))
    hi = float(stats.chi2.isf(level, n))
    rho = (chi / n - 1) / (m - 1)
    if chi > hi:
        return Finding(
            "fresh_noise_coordinates", False, level,
            f"the canary coordinates share noise (mean pairwise correlation {rho:.3g} over "
            f"{n} steps): one draw is added to several coordinates; draw the noise per "
            "coordinate (torch.normal of the parameter's shape)",
            tensors=("canaries.block.weight",),
        )
    return Finding(
        "fresh_noise_coordinates", True, level,
        f"no shared draw across coordinates (mean pairwise correlation {rho:.3g})",
    )


def _noise_law(z: np.ndarray, sigma: float, level: float) -> Finding:
    v = z[np.isfinite(z)] / sigma
    if v.size < 8:
        return Finding("noise_law", True, level, "too few pure-noise values to test")
    half = level / 2
    ks = stats.kstest(v, "norm")
    p_tail = 2 * stats.norm.sf(4.0)
    beyond = int(np.sum(np.abs(v) > 4.0))
    p_beyond = float(stats.binom.sf(beyond - 1, v.size, p_tail))
    if ks.pvalue < half or p_beyond < half:
        return Finding(
            "noise_law", False, level,
            f"the noise is not N(0, sigma^2): Kolmogorov-Smirnov p = {ks.pvalue:.3g}, "
            f"{beyond} of {v.size} values beyond 4 sigma (expected {v.size * p_tail:.2g}); "
            "draw Gaussian noise (torch.normal), not uniform/Laplace or a quantised one",
        )
    return Finding(
        "noise_law", True, level,
        f"Gaussian at sigma (KS p = {ks.pvalue:.3g}, {beyond} values beyond 4 sigma)",
    )


def _sampling_rate(obs: Observed, q: float | None, level: float) -> Finding:
    if q is None:
        return Finding("sampling_rate", True, level, "the claim states no q: not compared")
    k, n = int(obs.in_batch.sum()), int(obs.in_batch.size)
    # the two-sided Clopper-Pearson interval at 1 - level: the one-sided bounds at level / 2
    lo = float(clopper_pearson_lower(k, n, level / 2))
    hi = float(clopper_pearson_upper(k, n, level / 2))
    msg = (f"the recorded batches hold each canary slot with frequency {k / n:.4g} "
           f"(Clopper-Pearson [{lo:.4g}, {hi:.4g}]) against the accountant's q = {q:.4g}")
    if not lo <= q <= hi:
        return Finding(
            "sampling_rate", False, level,
            msg + ": the accountant's q is not the training's (q = b / n with the wrong n, "
            "or a different sampler); compute q from the loader that trains",
        )
    return Finding("sampling_rate", True, level, msg)


def _canary_signal(obs: Observed, sigma: float, level: float) -> Finding:
    sel = obs.in_batch & obs.included[:, None]
    v = obs.y[sel]
    if v.size == 0:
        return Finding("canary_signal", True, level, "no IN canary was in a batch")
    mean = float(v.mean())
    z = (mean - 1.0) / (sigma / np.sqrt(v.size))
    crit = float(stats.norm.isf(level / 2))
    msg = (f"the IN canaries' signal is {mean:.4g} C at the {v.size} (canary, step) pairs that "
           "held them (1 for one example clipped to C)")
    if abs(z) > crit:
        return Finding(
            "canary_signal", False, level,
            msg + ": each example's gradient is not clipped to C as accounted (per-tensor "
            "clipping, the batch's sum clipped, or a wrong divisor); clip each example's whole "
            "gradient to C",
            tensors=("canaries.block.weight",),
        )
    return Finding("canary_signal", True, level, msg)


def steps_composed(recorded: int, composed: int | None) -> Finding:
    """Exact: the accountant's composed steps against the optimizer steps recorded."""
    if composed is None:
        return Finding("steps_composed", True, 0.0, "the claim states no step count: not compared")
    if composed < recorded:
        return Finding(
            "steps_composed", False, 0.0,
            f"the accountant composed {composed} steps but the training took {recorded} "
            "optimizer steps: compose one event per optimizer step (not per epoch)",
        )
    return Finding(
        "steps_composed", True, 0.0,
        f"the accountant composed {composed} steps for {recorded} optimizer steps",
    )


def diagnose(
    obs: Observed,
    *,
    sigma: float,
    q: float | None,
    composed: int | None,
    alpha: float,
    lags: int = 5,
) -> tuple[Finding, ...]:
    """Every diagnostic at level alpha / K (Bonferroni, family-wise alpha; module docstring)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0 to diagnose the noise; got {sigma}")
    level = alpha / len(DIAGNOSTICS)
    z = _noise(obs)
    return (
        steps_composed(int(obs.y.shape[1]), composed),
        _noise_scale(z, sigma, level),
        _fresh_steps(z, sigma, level, lags),
        _fresh_coordinates(z, sigma, level),
        _noise_law(z, sigma, level),
        _sampling_rate(obs, q, level),
        _canary_signal(obs, sigma, level),
    )
