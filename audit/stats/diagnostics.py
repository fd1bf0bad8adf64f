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
  ~ N(0, 1) for l = 1..k (fresh noise: independent across steps), and exact repeats at any of
  these lags; k = ``lags``, by default every lag up to two epochs (2 / q steps, at least 5,
  at most S - 1 and :data:`MAX_LAGS`), so noise repeated every k steps (per epoch, per
  macro-batch) is seen at its own lag.
- ``fresh_noise_coordinates``: the correlation between canary coordinates at a step,
  sum_t (sum_j z_{j,t})^2 against its chi-square law (a shared draw adds m^2 sigma^2).
- ``noise_law``: Kolmogorov-Smirnov of z / sigma against N(0, 1) and the count beyond
  4 sigma against its binomial law.
- ``steps_composed``: the accountant's steps vs the optimizer steps recorded (exact).
- ``sampling_rate``: the canaries' inclusion frequency in the recorded batches, its
  Clopper-Pearson interval vs the accountant's q.
- ``canary_signal``: the IN canaries' mean at steps that held them minus 1 (the signal of
  one clipped example, in units of C), z-test with the noise of the claim.
- ``noise_multiplier``: the noise's std s over the signal of one clipped example mu (both in
  the recorded units C / b): sigma_hat = s / mu is the noise multiplier the training applies
  (noise std per unit of per-example sensitivity, whatever C and the divisor really are). Its
  interval [s_lo / mu_hi, s_hi / mu_lo]: s's chi-square interval at level / 2 and mu's z
  interval at level / 2 with the noise bounded by s_hi (Bonferroni). Below sigma: refuted, and
  which is off: mu consistent with 1 (C and the divisor as declared) says sigma (or the
  noise's C) is off, with 1 / r for r = s / sigma (sqrt(b), b or C: noise divided by sqrt(b),
  twice by b, or drawn without C); mu not 1 with sigma_hat consistent says the divisor or C
  is off (a note: the privacy is as claimed).
- ``batch_sizes`` (when the recorded batch sizes and n are given, and the claim is Poisson at
  q): Fisher's dispersion index D = sum_t (s_t - s_bar)^2 / (n q_hat (1 - q_hat)) ~
  chi^2(S - 1), two-sided: fixed sizes (shuffling accounted as Poisson) give D near 0.
- ``batch_alignment`` (when the number of recorded batches is given): exact, the loader's
  batches against the optimizer steps (batch t is step t only if every batch was stepped on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from audit.core.findings import Finding
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
    "noise_multiplier",
    "batch_sizes",
    "batch_alignment",
)

MAX_LAGS = 1000
"""Most lags ``fresh_noise_steps`` tests by default (time: S x lags x m products)."""


@dataclass(frozen=True)
class Observed:
    """What one training recorded: y (m, S) in units of C, the (m, S) in-batch mask, the IN bits.

    Optional (each enables a diagnostic or names a cause): ``batch_sizes`` (S recorded batch
    sizes) with ``n`` (rows the loader samples from, canary slots included): ``batch_sizes``;
    ``batches_recorded`` (index batches the loader yielded): ``batch_alignment``; ``clip`` and
    ``divisor`` (C and the declared b): named in ``noise_multiplier``'s causes.
    """

    y: np.ndarray
    in_batch: np.ndarray
    included: np.ndarray
    batch_sizes: np.ndarray | None = None
    n: int | None = None
    batches_recorded: int | None = None
    clip: float | None = None
    divisor: float | None = None


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
    for lag in range(1, k + 1):
        a, b = z[:, :-lag], z[:, lag:]
        same = np.isfinite(a) & (a == b) & (a != 0)
        steps = tuple(int(t) + lag for t in np.flatnonzero(same.any(axis=0))[:20])
        if steps:
            every = "consecutive steps" if lag == 1 else f"steps {lag} apart"
            return Finding(
                "fresh_noise_steps", False, 0.0,
                f"the noise repeats exactly between {every} (first at steps {steps[:5]}): "
                "the noise generator is re-created or re-seeded inside the loop"
                + (" (every epoch or every k steps)" if lag > 1 else "")
                + "; create it once before training",
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


def _sampling_rate(
    obs: Observed, q: float | None, level: float, composed: int | None = None
) -> Finding:
    if q is None:
        return Finding("sampling_rate", True, level, "the claim states no q: not compared")
    k, n = int(obs.in_batch.sum()), int(obs.in_batch.size)
    # the two-sided Clopper-Pearson interval at 1 - level: the one-sided bounds at level / 2
    lo = float(clopper_pearson_lower(k, n, level / 2))
    hi = float(clopper_pearson_upper(k, n, level / 2))
    msg = (f"the recorded batches hold each canary slot with frequency {k / n:.4g} "
           f"(Clopper-Pearson [{lo:.4g}, {hi:.4g}]) against the accountant's q = {q:.4g}")
    steps = int(obs.y.shape[1])
    if not lo <= q <= hi:
        ratio = composed / steps if composed else 0.0
        if ratio >= 2 and ratio == int(ratio) and lo <= q * ratio <= hi:
            return Finding(
                "sampling_rate", False, level,
                msg + f": the accountant composed {composed} events at q / {int(ratio)} for "
                f"{steps} optimizer steps, each noised once: it counts micro-batches "
                "(gradient accumulation) as steps; compose one event per optimizer step at "
                "q = (batch size of a step) / n",
            )
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


def _noise_multiplier(obs: Observed, z: np.ndarray, sigma: float, level: float) -> Finding:
    name = "noise_multiplier"
    v = z[np.isfinite(z)]
    u = obs.y[obs.in_batch & obs.included[:, None]]
    if v.size < 2 or u.size < 2:
        return Finding(name, True, level, "too few observations to separate the noise "
                       "multiplier from the divisor")
    half = level / 2
    n = v.size
    s = float(np.sqrt(np.mean(v**2)))
    s_lo = float(np.sqrt(np.sum(v**2) / stats.chi2.ppf(1 - half / 2, n)))
    s_hi = float(np.sqrt(np.sum(v**2) / stats.chi2.ppf(half / 2, n)))
    mu = float(u.mean())
    width = float(stats.norm.isf(half / 2)) * s_hi / np.sqrt(u.size)
    mu_lo, mu_hi = mu - width, mu + width
    if mu_lo <= 0:
        return Finding(name, True, level, f"one clipped example's signal {mu:.3g} C/b is not "
                       "distinguishable from 0: the noise multiplier cannot be estimated")
    est, lo, hi = s / mu, s_lo / mu_hi, s_hi / mu_lo
    where = (f"noise std {s:.4g} C/b over {n} values, one clipped example's signal "
             f"{mu:.4g} [{mu_lo:.4g}, {mu_hi:.4g}] C/b over {u.size}: noise multiplier "
             f"{est:.4g} [{lo:.4g}, {hi:.4g}] against the claim's sigma = {sigma:.4g}")
    divisor_ok = mu_lo <= 1.0 <= mu_hi
    if hi < sigma:
        r = s / sigma
        causes = [f"1 / r = {1 / r:.3g} for r = noise / (sigma C) = {r:.3g}"]
        for label, value in (("sqrt(b)", None if obs.divisor is None else obs.divisor**0.5),
                             ("b", obs.divisor), ("C", obs.clip)):
            if value is not None and value > 1 and abs(np.log(value * r)) < 0.1:
                causes.append({"sqrt(b)": "the noise divided by sqrt(b)",
                               "b": "the noise divided by b twice",
                               "C": "the noise drawn without C (sigma, not sigma C)"}[label])
        which = ("sigma is off (the signal of one example is 1 C/b: C and the divisor are as "
                 "declared)" if divisor_ok else "the noise is too small for the signal one "
                 "example has (and the divisor or C is off as well)")
        return Finding(
            name, False, level,
            f"the training applies noise multiplier {est:.3g} < the claim's sigma = "
            f"{sigma:.4g}: {which}; " + ", ".join(causes) + f" ({where}); draw the noise as "
            "N(0, (sigma C)^2) once, then divide the noisy sum by b",
        )
    if not divisor_ok and lo <= sigma <= hi:
        return Finding(
            name, True, level,
            f"note: the noise multiplier is as claimed but one clipped example reads {mu:.3g} "
            f"C/b: the divisor or C is off by {mu:.3g} (the sum divided by b / {mu:.3g}, or "
            f"clipped to {mu:.3g} C) ({where})",
            refutes=False,
        )
    if lo > sigma:
        return Finding(name, True, level, f"note: more noise than claimed ({where})",
                       refutes=False)
    return Finding(name, True, level, where)


def _batch_sizes(obs: Observed, q: float | None, level: float) -> Finding:
    name = "batch_sizes"
    if obs.batch_sizes is None or obs.n is None or q is None:
        return Finding(name, True, level, "batch sizes or n not given, or no q claimed: not "
                       "compared")
    sizes = np.asarray(obs.batch_sizes, dtype=float)
    if sizes.size < 3:
        return Finding(name, True, level, "fewer than 3 batches: not compared")
    q_hat = float(sizes.mean()) / obs.n
    if not 0 < q_hat < 1:
        return Finding(name, True, level, f"q_hat = {q_hat:.3g}: not compared")
    d = float(np.sum((sizes - sizes.mean()) ** 2) / (obs.n * q_hat * (1 - q_hat)))
    df = sizes.size - 1
    p_lo, p_hi = float(stats.chi2.cdf(d, df)), float(stats.chi2.sf(d, df))
    msg = (f"the {sizes.size} recorded batch sizes (mean {sizes.mean():.4g}, std "
           f"{sizes.std():.3g}) have dispersion index {d:.4g} against chi2({df}) for "
           f"Binomial(n = {obs.n}, q) sizes")
    if min(p_lo, p_hi) < level / 2:
        kind = ("fixed batch sizes: the loader shuffles (or draws a fixed number) while the "
                "accountant assumes Poisson sampling; use Poisson sampling (Opacus: "
                "poisson_sampling=True) or an accountant for the sampler used"
                if p_lo < p_hi else
                "the sizes vary more than Poisson sampling's: a sampler other than the "
                "accountant's")
        return Finding(name, False, level, msg + ": " + kind)
    return Finding(name, True, level, msg)


def batch_alignment(recorded: int | None, steps: int) -> Finding:
    """Exact: the index batches the loader yielded against the optimizer steps.

    ``recorded`` counts each step's batch once (the batches accumulated into one step are that
    step's batch, :mod:`audit.deployed.instrument`) plus the batches no step took."""
    name = "batch_alignment"
    if recorded is None:
        return Finding(name, True, 0.0, "the number of batches not given: not compared")
    if recorded > steps:
        return Finding(
            name, False, 0.0,
            f"the loader yielded {recorded - steps} batches that no optimizer step took "
            f"({recorded} batches for {steps} steps, each step's accumulated batches counted "
            "once): their examples were drawn but never stepped on; step on every batch the "
            "canaries saw, or account the steps taken",
        )
    if recorded < steps:
        return Finding(
            name, False, 0.0,
            f"the loader yielded {recorded} batches for {steps} optimizer steps: "
            f"{steps - recorded} steps took no batch; step once per batch, or account the "
            "steps taken",
        )
    return Finding(name, True, 0.0, f"{recorded} batches for {steps} optimizer steps")


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
    lags: int | None = None,
) -> tuple[Finding, ...]:
    """Every diagnostic at level alpha / K (Bonferroni, family-wise alpha; module docstring).

    ``lags``: the lags of ``fresh_noise_steps``; None: up to two epochs (module docstring)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0 to diagnose the noise; got {sigma}")
    level = alpha / len(DIAGNOSTICS)
    z = _noise(obs)
    steps = int(obs.y.shape[1])
    if lags is None:
        epoch = int(np.ceil(2.0 / q)) if q else steps
        lags = min(max(5, epoch), MAX_LAGS)
    return (
        steps_composed(steps, composed),
        batch_alignment(obs.batches_recorded, steps),
        # noise_multiplier before noise_scale: the same evidence, but it names the cause
        # (divided by b twice, by sqrt(b), drawn without C), so a report's first sentence does
        _noise_multiplier(obs, z, sigma, level),
        _noise_scale(z, sigma, level),
        _fresh_steps(z, sigma, level, lags),
        _fresh_coordinates(z, sigma, level),
        _noise_law(z, sigma, level),
        _sampling_rate(obs, q, level, composed),
        _batch_sizes(obs, q, level),
        _canary_signal(obs, sigma, level),
    )
