"""Diagnostics of a deployed training from its Dirac canaries' observations, no extra training
(docs/design.md §14.5; issue 33 item 1).

The canary block's coordinate j at step t reads, in units of C,
``y_{j,t} = 1[j IN and in the step's batch] * 1 + N(0, sigma^2)`` for correct DP-SGD
(per-example clipping to C, noise N(0, sigma^2 C^2) per coordinate, fresh at every step, the
sum divided by the recorded divisor). Where the recorded batches say the canary was not in the
step's batch (every OUT canary; an IN canary absent from that batch), y is pure noise. Each
diagnostic below is a test of that law at level ``alpha / K`` (Bonferroni over the K tests,
family-wise level ``alpha``; the audits accuse at :data:`ACCUSATION_LEVEL`, 1e-3, by
default) or an exact count (level 0: ``steps_composed``, ``batch_alignment``). Levels hold for
any correct training whose noise is stored at float32 precision or finer (issue 41 item 2;
measured at m = 1000, 1000 steps, q = 0.01 by bench/findings_levels.py). One-sided questions
are asked one-sidedly: only more signal than one example clipped to C, less noise than sigma C,
or a larger q than accounted refutes; the other side is a note (``refutes=False``: the claim is
loose, not wrong).

- ``noise_scale``: n s^2 / sigma^2 ~ chi^2_n on the n pure-noise values (mean known 0);
  below the alpha/K quantile: too little noise (refutes, unless one example's signal reads
  below 1 as well: the declared divisor or C is off for both, a note); above the upper one:
  a note.
- ``fresh_noise_steps``: (a) exact repeats counted against the chance coincidences of float32
  noise (:mod:`audit.stats.float_collisions`: two independent draws are equal with probability
  at most 4 pi_24 = 5.5e-8): the equal coordinates of each pair of steps l apart against
  Binomial(pure-noise coordinates, 4 pi_24) (Bonferroni over the pairs), and the equal steps of
  each coordinate at each lag against the chained bound (Bonferroni over coordinates and lags),
  and the total count against its second factorial moment, a third of level / 2 each (a reused
  draw repeats the whole vector; noise drawn in bfloat16 or float16 repeats values 1e4 to 7e4
  times as often as float32's: both far beyond chance); (b) the self-normalised lag
  products T_l = sum z_t z_{t+l} / sqrt(sum (z_t z_{t+l})^2) for l = 1..k, two-sided at
  level / (2 k) each by Hoeffding given the products' magnitudes (their signs are fair coins
  under fresh noise, whatever the noise's scale): P(|T| >= t) <= 2 exp(-t^2 / 2). k = ``lags``,
  by default every lag up to two epochs (2 / q steps, at least 5, at most S - 1 and
  :data:`MAX_LAGS`), so noise repeated every k steps (per epoch, per macro-batch) is seen at
  its own lag.
- ``noise_precision``: the pure-noise values on the bfloat16 / float16 lattice (at y / sigma,
  y and y C) counted against Binomial(n, p), p the chance that correct float32 noise lands there
  (:func:`audit.stats.float_collisions.lattice_probability`; Mironov, CCS 2012), Bonferroni
  over formats and scales (:func:`noise_precision`); a lattice the values holding signal share
  (the gradient stored in bfloat16) is a note. Once a lattice is found, ``fresh_noise_steps``
  counts the repeats against that format's chance, so the low precision is named once.
- ``fresh_noise_coordinates``: per step, the squared projection of the pure-noise canaries'
  values on the diagonal over the rest, F_t ~ F(1, m - 1) under independent coordinates of any
  common scale; their chi^2_1 transforms summed ~ chi^2_S (a shared draw adds m sigma^2 to the
  projection).
- ``noise_law``: the noise's shape at its own scale s (RMS): Kolmogorov-Smirnov of z / s
  against N(0, 1) (conservative with s estimated: Stephens 1974) and the count beyond 4 s
  against its binomial law (less dispersed with s estimated, to first order).
- ``steps_composed``: the accountant's steps vs the optimizer steps recorded (exact).
- ``sampling_rate``: the canaries' inclusion frequency in the recorded batches, its one-sided
  Clopper-Pearson lower bound above the accountant's q refutes (below: a note).
- ``canary_signal``: the IN canaries' mean at steps that held them minus 1 (the signal of
  one clipped example, in units of C), one-sided z-test at level / 2 with the noise bounded by
  max(sigma, s_hi) (s_hi one-sided at level / 2): above 1 refutes unless the noise is larger
  than sigma as well (the divisor off for both: a note); below 1 (per-layer clipping whose
  norms total C): a note.
- ``noise_multiplier``: the noise's std s over the signal of one clipped example mu (both in
  the recorded units C / b): sigma_hat = s / mu is the noise multiplier the training applies
  (noise std per unit of per-example sensitivity, whatever C and the divisor really are). Its
  upper bound s_hi / mu_lo (s_hi from chi^2 and mu_lo from z, each one-sided at level / 2)
  below sigma: refuted, and which is off: mu consistent with 1 (C and the divisor as declared)
  says sigma (or the noise's C) is off, with 1 / r for r = s / sigma (sqrt(b), b or C: noise
  divided by sqrt(b), twice by b, or drawn without C); mu not 1 with sigma_hat consistent says
  the divisor or C is off (a note: the privacy is as claimed).
- ``batch_sizes`` (when the recorded batch sizes and n are given, and the claim is Poisson at
  q): Fisher's dispersion index D = sum_t (s_t - s_bar)^2 / (n q_hat (1 - q_hat)), two-sided
  (fixed sizes, shuffling accounted as Poisson, give D near 0): exact where affordable (the
  sizes' law given their total is multivariate hypergeometric, free of q: few steps or small
  n q, where the chi-square's lattice errs), else against the chi-square matched to D's mean
  and variance under Binomial sizes (:func:`dispersion_tails`).
- ``batch_alignment`` (when the number of recorded batches is given): exact, the loader's
  batches against the optimizer steps (batch t is step t only if every batch was stepped on).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from audit.core.findings import Finding
from audit.stats.binary import clopper_pearson_lower, clopper_pearson_upper
from audit.stats.float_collisions import (
    FLOAT32_BITS,
    LATTICE_FORMATS,
    chained_coincidence_tail,
    equal_draw_bound,
    largest_cell_bound,
    lattice_probability,
    on_lattice,
    total_coincidence_tail,
)

__all__ = [
    "ACCUSATION_LEVEL", "DIAGNOSTICS", "Observed", "diagnose", "dispersion_tails", "in_batch_mask",
    "noise_precision",
]

#: the stable names, in the order they are run and counted in the Bonferroni family
DIAGNOSTICS: tuple[str, ...] = (
    "noise_scale",
    "noise_precision",
    "fresh_noise_steps",
    "fresh_noise_coordinates",
    "noise_law",
    "sampling_rate",
    "canary_signal",
    "noise_multiplier",
    "batch_sizes",
    "batch_alignment",
)

ACCUSATION_LEVEL = 1e-3
"""The family-wise level at which the findings accuse a training (``FAILED``) by default:
one correct training in a thousand at most raises a failed finding (docs/design.md §14.5).

An accusation needs stronger evidence than a bound that states a number: the eps lower bound
is stated at 95% confidence (the audit's alpha), but a finding that fails at 0.05 family-wise
calls one correct training in twenty buggy, and each false alarm costs the trust in every
later verdict (issue 41). At 1e-3 a suite of 180 correct trainings (the false-alarm suite's
110 and the bug zoo's 70) expects at most 0.18 failed findings by the union bound (and fewer:
most tests are conservative; ``noise_scale``'s chi^2 is exact). The price is power: each of the
K tests runs at 1e-3 / K = 1e-4 instead of 0.005 (a z-test's critical value 3.7 instead of
2.6), so a small effect needs about twice the canaries; the bugs of the zoo leave effects far
larger (its README: every bug found on 5 of 5 seeds at this level)."""

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


def _repeats(
    z: np.ndarray, k: int, level: float, bits: int = FLOAT32_BITS, label: str = "float32"
) -> Finding | None:
    """Exact repeats counted against float32's coincidences (module docstring), at ``level``:
    a third to the largest count of equal coordinates at one pair of steps (Bonferroni over the
    pairs), a third to the largest count of equal steps of one coordinate at one lag
    (Bonferroni over coordinates and lags), a third to the total count (its second factorial
    moment); None when none is significant."""
    m, S = z.shape
    p = equal_draw_bound(bits)
    pair_level = level / 3 / max(1, sum(S - lag for lag in range(1, k + 1)))
    coord_level = level / 3 / max(1, m * k)
    worst_pair: tuple[float, int, int, int, int] = (1.0, 0, 0, 0, 0)  # p, lag, step, count, n
    worst_coord: tuple[float, int, int, int] = (1.0, 0, 0, 0)  # p, lag, coordinate, count
    hits: dict[int, np.ndarray] = {}
    equal_total, pairs_total = 0, 0
    for lag in range(1, k + 1):
        a, b = z[:, :-lag], z[:, lag:]
        finite = np.isfinite(a) & np.isfinite(b)
        pairs_total += int(finite.sum())
        same = finite & (a == b) & (a != 0)
        if not same.any():
            continue
        equal_total += int(same.sum())
        per_step = same.sum(axis=0)
        steps = np.flatnonzero(per_step)
        n = finite.sum(axis=0)[steps]
        pv = stats.binom.sf(per_step[steps] - 1, n, p)
        i = int(np.argmin(pv))
        if pv[i] < worst_pair[0]:
            worst_pair = (float(pv[i]), lag, int(steps[i]), int(per_step[steps[i]]), int(n[i]))
        significant = steps[pv < pair_level]
        if significant.size:
            hits[lag] = significant
        per_coord = same.sum(axis=1)
        j = int(np.argmax(per_coord))
        pc = chained_coincidence_tail(int(per_coord[j]), S, lag, p)
        if pc < worst_coord[0]:
            worst_coord = (pc, lag, j, int(per_coord[j]))
    # each draw is in at most 2 k pairs (k lags, before and after)
    p_total = total_coincidence_tail(equal_total, pairs_total, 2 * k, p,
                                     largest_cell_bound(bits))
    if (worst_pair[0] >= pair_level and worst_coord[0] >= coord_level
            and p_total >= level / 3):
        return None
    if worst_pair[0] >= pair_level and worst_coord[0] >= coord_level:
        return Finding(
            "fresh_noise_steps", False, level,
            f"the noise takes equal values far more often than noise drawn at {label} "
            f"precision or finer ({equal_total} equal pairs among {pairs_total} pairs of "
            f"values at lags 1..{k}, at most {pairs_total * p:.2g} expected by chance; "
            f"p <= {p_total:.3g}): the noise is drawn in low precision (bfloat16, float16) or "
            "on a coarse grid; draw it in float32 or float64",
        )
    if worst_pair[0] < pair_level:
        pv, lag, step, count, n = worst_pair
        whole = 2 * count >= n
        first = tuple(int(t) + lag for t in hits.get(lag, np.array([step]))[:20])
        where = (f"{count} of the {n} pure-noise canary coordinates equal between steps "
                 f"{step} and {step + lag}")
    else:
        pv, lag, j, count = worst_coord
        whole = 2 * count >= S - lag
        first = ()
        where = (f"canary coordinate {j} equal at {count} of {S - lag} pairs of steps {lag} "
                 "apart")
    every = "consecutive steps" if lag == 1 else f"steps {lag} apart"
    chance = (f"p = {pv:.3g} against {label} noise's chance coincidences, probability "
              f"{p:.3g} per pair of values")
    if whole:
        return Finding(
            "fresh_noise_steps", False, level,
            f"the noise repeats exactly between {every} ({where}; {chance}): the noise "
            "generator is re-created or re-seeded inside the loop"
            + (" (every epoch or every k steps)" if lag > 1 else "")
            + "; create it once before training",
            steps=first,
        )
    return Finding(
        "fresh_noise_steps", False, level,
        f"the noise takes equal values far more often than noise drawn at {label} precision "
        f"or finer ({where}; {chance}): the noise is drawn in low precision (bfloat16, "
        "float16) or on a coarse grid, or part of it is reused; draw it in float32 or float64",
        steps=first,
    )


def _fresh_steps(
    z: np.ndarray, sigma: float, level: float, lags: int, lattice: str | None = None
) -> Finding:
    """``fresh_noise_steps`` (module docstring); ``lattice``: the coarse format the noise lies
    on (``noise_precision`` found it): the exact repeats are then counted against that
    format's chance coincidences, so that the low precision is named once, by
    ``noise_precision``, and a reused draw is still seen."""
    S = z.shape[1]
    k = max(0, min(lags, S - 1))
    if k == 0:
        return Finding("fresh_noise_steps", True, level, "one step: nothing to compare")
    # half the level to the exact repeats, half to the lag products (module docstring)
    if lattice is None:
        repeated = _repeats(z, k, level / 2)
    else:
        repeated = _repeats(z, k, level / 2, LATTICE_FORMATS[lattice][0], lattice)
    if repeated is not None:
        return repeated
    each = level / 2 / k
    # Hoeffding, given the |products|: their signs are independent fair coins under fresh
    # noise (a lag's pairs form chains without cycles), so P(|T| >= t) <= 2 exp(-t^2 / 2) for
    # the self-normalised T = sum p / sqrt(sum p^2), whatever the noise's scale
    crit = float(np.sqrt(2 * np.log(2 / each)))
    worst: tuple[float, int, float] = (0.0, 0, 0.0)
    for lag in range(1, k + 1):
        prod = z[:, :-lag] * z[:, lag:]
        p = prod[np.isfinite(prod)]
        norm = float(np.sqrt(np.sum(p**2))) if p.size else 0.0
        if norm == 0.0:
            continue
        stat = float(p.sum() / norm)
        if abs(stat) > abs(worst[0]):
            worst = (stat, lag, stat / np.sqrt(p.size))
    stat, lag, corr = worst
    if abs(stat) > crit:
        return Finding(
            "fresh_noise_steps", False, level,
            f"the noise is correlated across steps at lag {lag} (correlation {corr:.3g}, "
            f"T = {stat:.3g} > {crit:.3g}): noise reused or added once per {lag} step(s) "
            "(per epoch or per macro-batch); draw fresh noise at every optimizer step",
        )
    return Finding(
        "fresh_noise_steps", True, level,
        f"no dependence across steps at lags 1..{k} (max |T| = {abs(stat):.3g} <= {crit:.3g}) "
        f"and no more exact repeats than {lattice or 'float32'} noise's chance coincidences"
        + ("" if lattice is None else f" (the noise lies on the {lattice} lattice: "
           "noise_precision)"),
    )


def _binomial_tail(count: int, n: int, p: float) -> float:
    """P(X >= count), X ~ Binomial(n, p); 0.0 where it underflows (:func:`_p_text` then states
    the bound in log space)."""
    return float(stats.binom.sf(count - 1, n, p)) if count > 0 else 1.0


def _p_text(pv: float, count: int, n: int, p: float) -> str:
    """The p-value as printed: its value, or where it underflows the union bound
    P(X >= k) <= C(n, k) p^k in log10 (computed where it lives, in log space)."""
    if pv > 0:
        return f"p = {pv:.3g}"
    log_bound = (special.gammaln(n + 1) - special.gammaln(count + 1)
                 - special.gammaln(n - count + 1) + count * math.log(p))
    return f"p <= 10^{log_bound / math.log(10):.4g}"


def _scales(obs: Observed, sigma: float) -> list[tuple[str, float]]:
    """The scales at which the noise may have been drawn on a lattice, as factors on y (units
    of C): ``sigma C`` (y / sigma: a standard normal drawn in low precision, then scaled),
    ``C`` (y: N(0, sigma^2 C^2) drawn in low precision with C = 1 or a power of 2) and, when
    C is known, ``1`` (y C: the noise drawn in low precision at its own scale sigma C). Scales
    a power of two apart are one lattice (a format's values times 2^k are its values)."""
    out: list[tuple[str, float]] = [("units of sigma C", 1.0 / sigma), ("units of C", 1.0)]
    if obs.clip is not None and obs.clip > 0:
        out.append(("the gradient's units", float(obs.clip)))
    kept: list[tuple[str, float]] = []
    for name, a in out:
        if all(abs(math.log2(a / b) - round(math.log2(a / b))) > 1e-12 for _, b in kept):
            kept.append((name, a))
    return kept


def _precision(
    obs: Observed, z: np.ndarray, sigma: float, level: float
) -> tuple[Finding, str | None]:
    """``noise_precision`` and the format whose lattice the noise lies on (None: none)
    (:func:`noise_precision`)."""
    name = "noise_precision"
    v = z[np.isfinite(z) & (z != 0)]
    if v.size < 2:
        return Finding(name, True, level, "too few nonzero pure-noise values to test"), None
    scales = _scales(obs, sigma)
    tests = [(fmt, label, a) for fmt in LATTICE_FORMATS for label, a in scales]
    each = level / len(tests)
    best: tuple[float, str, str, float, int] | None = None  # p-value, fmt, label, a, count
    for fmt, label, a in tests:
        count = int(on_lattice(v * a, fmt).sum())
        pv = _binomial_tail(count, v.size, lattice_probability(fmt))
        # the lattice that holds the most values; the coarsest format first on (nearly) equal
        # counts (bfloat16's values are float16's too, within float16's range)
        if pv < each and (best is None or count > 1.02 * best[4]):
            best = (pv, fmt, label, a, count)
    where = ""
    if best is not None:
        pv, fmt, label, a, count = best
        chance = lattice_probability(fmt)
        where = (f"; {count} of {v.size} pure-noise values representable in {fmt} ({label}), "
                 f"chance under float32 noise {chance:.2g} per value, {v.size * chance:.3g} "
                 f"expected; {_p_text(pv, count, v.size, chance)}")
    # a gradient stored in a coarse format (a model in bfloat16) rounds every value, noise and
    # signal alike, after the noise: post-processing, no leak. The stored gradient is y C / b;
    # the values that hold signal (an IN canary in the step's batch) on the lattice as often
    # as the noise say the rounding came after the signal was added
    held = obs.y[obs.in_batch & obs.included[:, None]]
    held = held[np.isfinite(held) & (held != 0)]
    store = (float(obs.clip) / float(obs.divisor) if obs.clip and obs.divisor
             else None if best is None else best[3])
    for stored in LATTICE_FORMATS if store is not None else ():  # the coarsest first
        stored_noise = float(on_lattice(v * store, stored).mean())
        stored_signal = float(on_lattice(held * store, stored).mean()) if held.size else 1.0
        if stored_noise < 0.9 or stored_signal < 0.9:
            continue
        seen = (f"the stored gradient on the {stored} lattice at {stored_noise:.0%} of the "
                "pure-noise values " + (f"and {stored_signal:.0%} of the {held.size} that hold "
                                        "signal" if held.size
                                        else "(no value holds signal to compare)"))
        return Finding(
            name, True, level,
            f"note: the privatized gradient is stored in {stored} ({seen}{where}): a "
            "rounding after the noise is added is post-processing, not a leak; were the noise "
            f"drawn in {stored} and the gradient rounded after, it would read the same: draw "
            "the noise in float32 or float64 to be sure",
            refutes=False,
        ), stored
    if best is None:
        return Finding(
            name, True, level,
            f"the {v.size} pure-noise values are on no low-precision lattice more often than "
            f"float32 noise's chance (bfloat16: {lattice_probability('bfloat16'):.2g}, "
            f"float16: {lattice_probability('float16'):.2g} per value)",
        ), None
    pv, fmt, label, a, count = best
    return Finding(
        name, False, level,
        f"low-precision noise: the noise is drawn in {fmt}: its values lie on the {fmt} "
        f"lattice ({where[2:]}; the values that hold signal leave it: the signal is added in "
        "higher precision, so which values lie on the lattice tells IN from OUT, Mironov, "
        "CCS 2012): draw it in float32 or float64",
        tensors=("canaries.block.weight",),
    ), fmt


def noise_precision(obs: Observed, z: np.ndarray, sigma: float, level: float) -> Finding:
    """``noise_precision`` (Mironov, "On Significance of the Least Significant Bits for
    Differential Privacy", CCS 2012): noise drawn in bfloat16 or float16 lies on that
    format's lattice, and the signal added in float32 moves values off it, so IN and OUT
    outputs differ in their last bits whatever sigma.

    On the n nonzero pure-noise values ``z`` (y where no signal is), at each scale the noise
    may have been drawn at (:func:`_scales`) and for each format (bfloat16, float16), the
    count K of values within 2^-22 relative of the lattice
    (:func:`audit.stats.float_collisions.on_lattice`) against Binomial(n, p_fmt), p_fmt the
    largest probability over the noise's scale that correct noise stored at float32 precision
    or finer counts as on it (:func:`audit.stats.float_collisions.lattice_probability`:
    bfloat16 3.6e-4, float16 2.8e-3); Bonferroni over the formats and scales at ``level``.
    A lattice that the values holding signal share (the gradient stored in that format,
    :func:`_precision`) is a note."""
    return _precision(obs, z, sigma, level)[0]


def _fresh_coordinates(z: np.ndarray, sigma: float, level: float) -> Finding:
    cols = z[np.isfinite(z).all(axis=1)]  # the canaries that are pure noise at every step
    if cols.size == 0 or cols.shape[0] < 2:
        return Finding("fresh_noise_coordinates", True, level, "too few canaries to compare")
    m, n = cols.shape
    # per step t: A_t = (sum_j z_jt)^2 / m is the squared projection of the step's m values on
    # the diagonal, R_t the rest; under independent N(0, s_t^2) coordinates
    # F_t = A_t / (R_t / (m - 1)) ~ F(1, m - 1) whatever s_t (the claim's sigma is not used:
    # more noise than claimed is no bug); its chi^2_1 transform summed over the steps ~ chi^2_n
    total = np.sum(cols**2, axis=0)
    proj = cols.sum(axis=0) ** 2 / m
    rest = np.maximum(total - proj, 0.0)
    keep = rest > 0
    f = proj[keep] / (rest[keep] / (m - 1))
    chi = float(np.sum(stats.chi2.isf(stats.f.sf(f, 1, m - 1), 1)))
    steps = int(keep.sum())
    hi = float(stats.chi2.isf(level, steps)) if steps else float("inf")
    rho = float((np.sum(proj) / (np.sum(total) / m) - 1) / (m - 1)) if steps else 0.0
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
    v = z[np.isfinite(z)]
    if v.size < 8:
        return Finding("noise_law", True, level, "too few pure-noise values to test")
    # the law's shape at the noise's own scale s (its scale against sigma is noise_scale's and
    # noise_multiplier's question: more noise than claimed is no bug). Kolmogorov-Smirnov with
    # the scale estimated is conservative at the Kolmogorov p-value (Stephens 1974, case 2:
    # the fitted law is closer to the sample than the true one); the count beyond 4 s is
    # less dispersed than Binomial(n, P(|Z| > 4)) to first order (a large count raises s)
    s = float(np.sqrt(np.mean(v**2)))
    if s == 0.0:
        return Finding("noise_law", False, level, "the noise is 0 at every pure-noise value: "
                       "no noise is added")
    u = v / s
    half = level / 2
    ks = stats.kstest(u, "norm")
    p_tail = 2 * stats.norm.sf(4.0)
    beyond = int(np.sum(np.abs(u) > 4.0))
    p_beyond = float(stats.binom.sf(beyond - 1, u.size, p_tail))
    if ks.pvalue < half or p_beyond < half:
        return Finding(
            "noise_law", False, level,
            f"the noise is not Gaussian: Kolmogorov-Smirnov p = {ks.pvalue:.3g} at its own "
            f"scale {s:.4g} C, {beyond} of {u.size} values beyond 4 standard deviations "
            f"(expected {u.size * p_tail:.2g}); draw Gaussian noise (torch.normal), not "
            "uniform/Laplace or a quantised one",
        )
    return Finding(
        "noise_law", True, level,
        f"Gaussian at its own scale {s:.4g} C (KS p = {ks.pvalue:.3g}, {beyond} values beyond "
        "4 standard deviations)",
    )


def _sampling_rate(
    obs: Observed, q: float | None, level: float, composed: int | None = None
) -> Finding:
    if q is None:
        return Finding("sampling_rate", True, level, "the claim states no q: not compared")
    k, n = int(obs.in_batch.sum()), int(obs.in_batch.size)
    # one-sided: only a rate above the accountant's q refutes (a lower one is a loose claim);
    # each bound is the one-sided Clopper-Pearson bound at `level`
    lo = float(clopper_pearson_lower(k, n, level))
    hi = float(clopper_pearson_upper(k, n, level))
    msg = (f"the recorded batches hold each canary slot with frequency {k / n:.4g} "
           f"(Clopper-Pearson [{lo:.4g}, {hi:.4g}], each end one-sided at {level:.3g}) against "
           f"the accountant's q = {q:.4g}")
    steps = int(obs.y.shape[1])
    if lo > q:
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
    if hi < q:
        return Finding(
            "sampling_rate", True, level,
            msg + ": note: the canary slots are drawn less often than accounted, the claim is "
            "loose for them (q = b / n counted without the canary slots, or another sampler)",
            refutes=False,
        )
    return Finding("sampling_rate", True, level, msg)


@dataclass(frozen=True)
class _Units:
    """The noise's std s and one clipped example's signal mu (units of C / b), each with its
    one-sided bounds at ``level / 2`` (:func:`_units`)."""

    s: float
    s_lo: float
    s_hi: float
    n: int
    mu: float | None = None
    mu_lo: float | None = None
    mu_hi: float | None = None
    k: int = 0


def _units(obs: Observed, z: np.ndarray, level: float) -> _Units | None:
    """s from the n pure-noise values (chi^2_n, mean known 0), its bounds one-sided at
    level / 2; mu the IN canaries' mean at their steps, z bounds one-sided at level / 2 with
    the noise bounded by s_hi (Bonferroni: both hold with probability >= 1 - level)."""
    v = z[np.isfinite(z)]
    if v.size < 2:
        return None
    n = v.size
    ss = float(np.sum(v**2))
    s = float(np.sqrt(ss / n))
    s_lo = float(np.sqrt(ss / stats.chi2.isf(level / 2, n)))
    s_hi = float(np.sqrt(ss / stats.chi2.ppf(level / 2, n)))
    u = obs.y[obs.in_batch & obs.included[:, None]]
    if u.size < 1:
        return _Units(s, s_lo, s_hi, n)
    mu = float(u.mean())
    width = float(stats.norm.isf(level / 2)) * s_hi / np.sqrt(u.size)
    return _Units(s, s_lo, s_hi, n, mu, mu - width, mu + width, int(u.size))


def _canary_signal(obs: Observed, sigma: float, level: float) -> Finding:
    name = "canary_signal"
    sel = obs.in_batch & obs.included[:, None]
    v = obs.y[sel]
    if v.size == 0:
        return Finding(name, True, level, "no IN canary was in a batch")
    units = _units(obs, _noise(obs), level)
    mean = float(v.mean())
    # one-sided: only more signal than one example clipped to C can refute; the noise's std
    # bounded above by max(sigma, s_hi) (s_hi one-sided at level / 2), the z-test at level / 2
    bound = max(sigma, units.s_hi) if units is not None else sigma
    zstat = (mean - 1.0) / (bound / np.sqrt(v.size))
    crit = float(stats.norm.isf(level / 2))
    msg = (f"the IN canaries' signal is {mean:.4g} C at the {v.size} (canary, step) pairs that "
           "held them (1 for one example clipped to C)")
    if zstat > crit:
        if units is not None and units.s_lo > sigma:
            return Finding(
                name, True, level,
                msg + f": note: the noise is larger than sigma as well (std at least "
                f"{units.s_lo:.4g} C against sigma = {sigma:.4g}): the divisor or C is off "
                "for signal and noise alike; noise_multiplier reads their ratio",
                refutes=False,
            )
        return Finding(
            name, False, level,
            msg + ": each example's gradient is not clipped to C as accounted (per-tensor "
            "clipping, the batch's sum clipped, or a wrong divisor); clip each example's whole "
            "gradient to C",
            tensors=("canaries.block.weight",),
        )
    if zstat < -crit:
        return Finding(
            name, True, level,
            msg + ": note: less signal than one example clipped to C (per-layer clipping whose "
            "norms total C, or a larger divisor): the claim is loose, not refuted",
            refutes=False,
        )
    return Finding(name, True, level, msg)


def _noise_scale(
    z: np.ndarray, sigma: float, level: float, units: _Units | None = None
) -> Finding:
    v = z[np.isfinite(z)]
    n = v.size
    if n < 2:
        return Finding("noise_scale", True, level, "too few pure-noise observations to test")
    chi = float(np.sum(v**2) / sigma**2)
    s = float(np.sqrt(np.mean(v**2)))
    # one-sided at `level` each way: only less noise than claimed can refute
    lo, hi = stats.chi2.ppf(level, n), stats.chi2.isf(level, n)
    ratio = s / sigma
    ci = (float(np.sqrt(chi / hi)) * sigma, float(np.sqrt(chi / lo)) * sigma)
    where = (f"{n} pure-noise values, std {s:.4g} C, at least {ci[0]:.4g} C and at most "
             f"{ci[1]:.4g} C (each one-sided at {level:.3g})")
    if chi < lo:
        if units is not None and units.mu_hi is not None and units.mu_hi < 1.0:
            return Finding(
                "noise_scale", True, level,
                f"note: less noise than sigma = {sigma:.4g} in the declared units ({where}), "
                f"but one example's signal reads below 1 as well (at most {units.mu_hi:.4g} C):"
                " the divisor or C is off for signal and noise alike; noise_multiplier reads "
                "their ratio",
                refutes=False,
            )
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
            "the claim is loose (conservative), or the noise divisor is wrong",
            refutes=False,
        )
    return Finding(
        "noise_scale", True, level, f"noise consistent with sigma = {sigma:.4g} ({where})"
    )


def _noise_multiplier(obs: Observed, z: np.ndarray, sigma: float, level: float) -> Finding:
    name = "noise_multiplier"
    units = _units(obs, z, level)
    if units is None or units.mu is None or units.k < 2:
        return Finding(name, True, level, "too few observations to separate the noise "
                       "multiplier from the divisor")
    s, s_lo, s_hi, n = units.s, units.s_lo, units.s_hi, units.n
    mu, mu_lo, mu_hi = units.mu, units.mu_lo, units.mu_hi
    assert mu_lo is not None and mu_hi is not None  # set with mu
    if mu_lo <= 0:
        return Finding(name, True, level, f"one clipped example's signal {mu:.3g} C/b is not "
                       "distinguishable from 0: the noise multiplier cannot be estimated")
    # one-sided: the applied multiplier's upper bound s_hi / mu_lo holds with probability
    # >= 1 - level (s_hi and mu_lo each one-sided at level / 2); below sigma refutes
    est, lo, hi = s / mu, s_lo / mu_hi, s_hi / mu_lo
    where = (f"noise std {s:.4g} C/b over {n} values, one clipped example's signal "
             f"{mu:.4g} [{mu_lo:.4g}, {mu_hi:.4g}] C/b over {units.k}: noise multiplier "
             f"{est:.4g} [{lo:.4g}, {hi:.4g}] (each end one-sided at {level:.3g}) against the "
             f"claim's sigma = {sigma:.4g}")
    divisor_ok = mu_lo <= 1.0 <= mu_hi
    if hi < sigma:
        r = s / sigma
        if r <= 0:  # no noise at all on the canary block (e.g. noise only where a gradient is)
            causes = ["no noise at all on the canary block (noise std 0)"]
        else:
            causes = [f"1 / r = {1 / r:.3g} for r = noise / (sigma C) = {r:.3g}"]
        for label, value in (("sqrt(b)", None if obs.divisor is None else obs.divisor**0.5),
                             ("b", obs.divisor), ("C", obs.clip)):
            if value is not None and value > 1 and r > 0 and abs(np.log(value * r)) < 0.1:
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


EXACT_BUDGET = 30_000_000
"""Most cells x shifts the exact dispersion test computes (:func:`dispersion_tails`); above it
the moment-matched chi-square."""


def _exact_dispersion(sizes: np.ndarray, n: int) -> tuple[float, float] | None:
    """P(Q <= Q_obs | T), P(Q >= Q_obs | T) for Q = sum_t (s_t - c)^2, c = T // S, under S
    independent Binomial(n, q) sizes given their total T: the multivariate hypergeometric law
    P(s | T) = prod_t C(n, s_t) / C(n S, T), free of q (Vandermonde: the products over all s
    of total T sum to C(n S, T)). Exact: a dynamic programme over the steps on (partial sum,
    partial Q <= Q_obs), each |s_t - c| <= sqrt(Q_obs) (Q only grows), gives
    P(Q <= k, total T) for every k <= Q_obs; the upper tail is 1 - P(Q <= Q_obs - 1 | T) (a
    difference near 1 only where it is not small). None above :data:`EXACT_BUDGET`."""
    S, T = sizes.size, int(sizes.sum())
    c = T // S
    r = T - c * S  # sum_t (s_t - c)
    q_obs = int(np.sum((sizes.astype(np.int64) - c) ** 2))
    h = math.isqrt(q_obs)
    x = np.arange(max(-c, -h), min(n - c, h) + 1)
    span = 2 * S * h + 1  # partial sums -S h .. S h
    if S * x.size * span * (q_obs + 1) > EXACT_BUDGET:
        return None
    logw = special.gammaln(n + 1) - special.gammaln(c + x + 1) - special.gammaln(n - c - x + 1)
    top = float(logw.max())
    weight = np.exp(logw - top)
    dist = np.zeros((span, q_obs + 1))
    dist[S * h, 0] = 1.0
    log_scale = 0.0  # dist times exp(log_scale) is the products' sum (weights over exp(top))
    for _ in range(S):
        new = np.zeros_like(dist)
        for x_t, wi in zip(x.tolist(), weight, strict=True):
            xi = int(x_t)
            sq = xi * xi
            rows = slice(max(0, xi), span + min(0, xi))
            src = slice(max(0, -xi), span - max(0, xi))
            new[rows, sq:] += wi * dist[src, : q_obs + 1 - sq]
        total = float(new.sum())
        if total <= 0:
            return None
        dist = new / total
        log_scale += math.log(total)
    cdf = np.cumsum(dist[S * h + r])
    log_norm = (special.gammaln(n * S + 1) - special.gammaln(T + 1)
                - special.gammaln(n * S - T + 1))  # log C(n S, T)
    log_factor = log_scale + S * top - float(log_norm)

    def prob(mass: float) -> float:  # mass x exp(log_factor), in log space
        return 0.0 if mass <= 0 else min(1.0, math.exp(math.log(mass) + log_factor))

    lower = prob(float(cdf[q_obs]))
    below = prob(float(cdf[q_obs - 1])) if q_obs > 0 else 0.0
    return lower, max(0.0, min(1.0, 1.0 - below))


def dispersion_tails(sizes: np.ndarray, n: int) -> tuple[float, float, str]:
    """The lower and upper p-values of Fisher's dispersion index of Binomial(n, q) batch sizes
    (q unknown), and how they were computed: ``exact`` (the conditional law given the total,
    :func:`_exact_dispersion`) where affordable (few steps, or sizes near their mean: the
    lower tail, where the chi-square's lattice errs), else ``moment-matched chi2``:
    D = sum (s_t - s_bar)^2 / (n q_hat (1 - q_hat)) against g chi2(h) with g h = S - 1 and
    2 g^2 h = 2 (S - 1) + kappa (S - 1)^2 / S, the variance of D under Binomial sizes
    (kappa = (1 - 6 q (1 - q)) / (n q (1 - q)) their excess kurtosis)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    exact = _exact_dispersion(sizes, int(n))
    if exact is not None:
        return exact[0], exact[1], "exact"
    S = sizes.size
    q_hat = float(sizes.mean()) / n
    v = n * q_hat * (1 - q_hat)
    d = float(np.sum((sizes - sizes.mean()) ** 2) / v)
    kappa = (1 - 6 * q_hat * (1 - q_hat)) / v
    var = 2 * (S - 1) + kappa * (S - 1) ** 2 / S
    g = var / (2 * (S - 1))
    h = (S - 1) / g
    return float(stats.chi2.cdf(d / g, h)), float(stats.chi2.sf(d / g, h)), "moment-matched chi2"


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
    p_lo, p_hi, how = dispersion_tails(np.rint(sizes).astype(np.int64), int(obs.n))
    msg = (f"the {sizes.size} recorded batch sizes (mean {sizes.mean():.4g}, std "
           f"{sizes.std():.3g}) have dispersion index {d:.4g} (mean {df} for "
           f"Binomial(n = {obs.n}, q) sizes; p = {p_lo:.3g} below, {p_hi:.3g} above, {how})")
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


def steps_composed(recorded: int, composed: int | None,
                   participations: int | None = None) -> Finding:
    """Exact: the accountant's composed steps against the optimizer steps recorded.

    A subsampled event (Poisson) is composed once per optimizer step, so ``composed`` must
    reach ``recorded``. An accountant that composes *unsampled* Gaussian mechanisms
    (``participations`` given: the most steps any one example took part in, from the recorded
    batches) needs one per participation, not per step: shuffling's "one Gaussian per epoch"
    is correct when each example is in one batch per epoch (no amplification is claimed)."""
    if composed is None:
        return Finding("steps_composed", True, 0.0, "the claim states no step count: not compared")
    if participations is not None:
        if composed < participations:
            return Finding(
                "steps_composed", False, 0.0,
                f"the accountant composed {composed} unsampled Gaussian mechanisms but an "
                f"example took part in {participations} optimizer steps: compose one per "
                "participation of an example",
            )
        return Finding(
            "steps_composed", True, 0.0,
            f"the accountant composed {composed} unsampled Gaussian mechanisms for at most "
            f"{participations} participations of an example ({recorded} optimizer steps)",
        )
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
    participations: int | None = None,
) -> tuple[Finding, ...]:
    """Every diagnostic at level alpha / K (Bonferroni, family-wise alpha; module docstring).

    ``lags``: the lags of ``fresh_noise_steps``; None: up to two epochs (module docstring).
    ``participations``: for a claim composed of unsampled Gaussian mechanisms, the most steps
    one example took part in (:func:`steps_composed` compares the count with it)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0 to diagnose the noise; got {sigma}")
    level = alpha / len(DIAGNOSTICS)
    z = _noise(obs)
    units = _units(obs, z, level)
    precision, lattice = _precision(obs, z, sigma, level)
    steps = int(obs.y.shape[1])
    if lags is None:
        epoch = int(np.ceil(2.0 / q)) if q else steps
        lags = min(max(5, epoch), MAX_LAGS)
    return (
        steps_composed(steps, composed, participations),
        batch_alignment(obs.batches_recorded, steps),
        # noise_multiplier before noise_scale: the same evidence, but it names the cause
        # (divided by b twice, by sqrt(b), drawn without C), so a report's first sentence does
        _noise_multiplier(obs, z, sigma, level),
        _noise_scale(z, sigma, level, units),
        precision,
        _fresh_steps(z, sigma, level, lags, lattice),
        _fresh_coordinates(z, sigma, level),
        _noise_law(z, sigma, level),
        _sampling_rate(obs, q, level, composed),
        _batch_sizes(obs, q, level),
        _canary_signal(obs, sigma, level),
    )
