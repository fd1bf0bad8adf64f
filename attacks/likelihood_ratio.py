"""Likelihood-ratio distinguishers on all-iterates observations (docs/design.md §7.1).

Observation y_t ~ N(s_t, sigma^2), t = 1..T*E, normalised by the clipping norm C, after the
attacker removed what it knows; s_t is the canary's (and co-batch) signal. By Neyman-Pearson
the log likelihood ratio of the two hypotheses is the most powerful score for the pair it
is written for:

- Poisson (Chua et al. 2024, arXiv 2411.04205): per step, IN is (1-q) N(0, s^2) + q N(1, s^2),
  OUT is N(0, s^2), so LR = sum_t log(1 - q + q exp((2 y_t - 1) / (2 s^2))).
- Shuffle, isolated pair (one epoch): IN is MoG_T(1), OUT is N(0, I_T); the LR is the mean of
  T lognormals, log mean_t exp((2 y_t - 1) / (2 sigma^2)). Dynamic shuffle: sum over epochs
  (independent positions). Persistent shuffle: the canary sits at the same step index every
  epoch, so average y over epochs per step index first (noise sigma / sqrt(E)), then the same.
- Shuffle, adversarial pair (Chua et al. 2024, arXiv 2403.17673): IN is MoG_T(2), OUT is
  MoG_T(1): log sum_t exp((4 y_t - 4) / (2 sigma^2)) - log sum_t exp((2 y_t - 1) / (2 sigma^2));
  epochs combined as for the isolated pair.
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, epochs_view
from audit.core.mechanism import Mechanism
from audit.core.observations import Observations
from audit.sampling import get_sampler
from audit.sampling.laws import canary_inclusion_probability, cobatch_variance

__all__ = [
    "FixedSizeIndependentLR",
    "PoissonLR",
    "ShuffleAdversarialLR",
    "ShuffleIsolatedLR",
    "fold_epochs",
    "logsumexp_last",
    "unit_shift_log_ratio",
]


def logsumexp_last(z: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis, stabilised by the maximum; float64 result.

    Computed in the input's precision (float32 for simulated observations: the score is any
    fixed function of the observation, so rounding cannot make a bound unsound).
    """
    top = z.max(axis=-1, keepdims=True)
    total = np.exp(z - top).sum(axis=-1, dtype=np.float64)
    return np.log(total) + top[..., 0].astype(np.float64)


def unit_shift_log_ratio(y: np.ndarray, variance: float) -> np.ndarray:
    """log N(y; 1, s^2) / N(y; 0, s^2) = (2 y - 1) / (2 s^2), elementwise, in y's float dtype.

    The per-step exponent of every likelihood ratio here: one participation of the canary
    shifts y by 1 against noise of variance s^2.
    """
    return (y - y.dtype.type(0.5)) * y.dtype.type(1.0 / variance)


def fold_epochs(y: np.ndarray, mechanism: Mechanism) -> tuple[np.ndarray, float]:
    """Per-epoch observations ``(trials, E', T)`` and their noise std.

    Persistent shuffle: the canary's step index is the same in every epoch, so the E epochs
    are averaged per step index (E' = 1, noise sigma / sqrt(E)); otherwise E' = E, noise sigma.
    """
    view = epochs_view(y, mechanism)
    if get_sampler(mechanism.sampler).same_step_every_epoch and mechanism.epochs > 1:
        return view.mean(axis=1, keepdims=True), mechanism.sigma / np.sqrt(mechanism.epochs)
    return view, mechanism.sigma


class PoissonLR(Attack):
    """Poisson log likelihood ratio sum_t log(1 - q + q exp((2 y_t - 1)/(2 s^2))).

    q is the probability that the canary's gradient is in a step's sum: b/n for Poisson,
    and for truncated Poisson the probability that it is sampled *and* kept when the batch
    overflows B (:func:`audit.sampling.laws.canary_inclusion_probability`). s = sigma in the
    isolated threat model; in the adversarial one the unknown number of co-batch examples
    (each -1, centred by the attacker) adds its variance, s^2 = sigma^2 + Var(co-batch)
    (a Gaussian approximation of that term, so the score is near-optimal, not exactly LR).
    """

    name = "poisson_lr"
    observation = "all_iterates"
    canary_laws = ("independent_steps",)
    description = "Poisson likelihood ratio (sum over steps of the mixture log-LR)"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        y = epochs_view(data, mechanism).reshape(data.shape[0], -1)
        q = canary_inclusion_probability(mechanism)
        variance = mechanism.sigma**2
        if mechanism.threat_model == "adversarial":
            variance += cobatch_variance(mechanism)
        y = _floating(y)
        z = unit_shift_log_ratio(y, variance)
        # log(1 - q + q e^z) = log1p(q expm1(z)); above z = 60 it is log q + z to float precision.
        capped = np.minimum(z, y.dtype.type(60.0))
        per_step = np.log1p(y.dtype.type(q) * np.expm1(capped)) + (z - capped)
        return per_step.sum(axis=1, dtype=np.float64)


class FixedSizeIndependentLR(Attack):
    """Batches of b drawn without replacement at each step, adversarial pair: per step the
    exact log likelihood ratio of (1 - q) N(0, s^2) + q N(2, s^2) vs (1 - q) N(0, s^2) +
    q N(1, s^2),

        log(1 - q + q exp((2 y_t - 2) / s^2)) - log(1 - q + q exp((2 y_t - 1) / (2 s^2))),

    summed over steps: the co-batch of b - S_t others at -1 (after the add-back of b) reads
    2 S_t IN and S_t OUT, S_t ~ Bernoulli(q) the canary's inclusion, which the fixed batch size
    reveals (:mod:`audit.sampling.sampled_without_replacement`). The isolated pair is
    Poisson's (``poisson_lr``).
    """

    name = "fixed_size_independent_lr"
    observation = "all_iterates"
    canary_laws = ("independent_steps",)
    description = (
        "batches drawn without replacement, adversarial: (1-q) N(0) + q N(2) vs (1-q) N(0) + "
        "q N(1) per step"
    )

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        y = _floating(epochs_view(data, mechanism).reshape(data.shape[0], -1))
        q = canary_inclusion_probability(mechanism)
        variance = mechanism.sigma**2
        with np.errstate(divide="ignore"):  # q = 1: log(1 - q) = -inf, logaddexp handles it
            keep, take = np.log1p(-q), np.log(q)
        two = (y - y.dtype.type(1.0)) * y.dtype.type(2.0 / variance)  # log N(2) / N(0)
        one = unit_shift_log_ratio(y, variance)  # log N(1) / N(0)
        per_step = np.logaddexp(keep, take + two) - np.logaddexp(keep, take + one)
        return per_step.sum(axis=1, dtype=np.float64)


class ShuffleIsolatedLR(Attack):
    """Shuffle, isolated pair: sum over (folded) epochs of log mean_t exp((2 y_t - 1)/(2 s^2)).

    Canary in one uniformly random step per epoch. Where the adversarial co-batch count is
    random (balls-and-bins: O_t ~ Binomial(n - 1, 1/T), variance v, centred by the attacker),
    the score is the exact log likelihood ratio of the Gaussian model with the co-batch's
    first two moments, as :class:`PoissonLR` does with its co-batch variance: every other
    example is in exactly one step per epoch, so the epoch's counts sum to n - 1 and
    Cov(O) = v T/(T - 1) (I - 1 1^T / T). With noise, Sigma = a I - c 1 1^T,
    a = s^2 + v T/(T - 1), c = v/(T - 1), and a - c T = s^2 (Sherman-Morrison:
    Sigma^{-1} = I/a + c/(a s^2) 1 1^T), so per epoch

        log mean_t exp((2 y_t - 1) / (2 a)) + c (S - 1/2) / (a s^2),   S = sum_t y_t,

    which keeps the epoch sum's information (the co-batch cancels in S) and is the isolated
    score when v = 0 (fixed-size samplers, and every isolated pair). A Gaussian model of a
    lattice term, so near-optimal rather than the exact LR; any score is sound.
    """

    name = "shuffle_isolated_lr"
    observation = "all_iterates"
    canary_laws = ("uniform_step_per_epoch",)
    description = (
        "shuffle likelihood ratio, isolated pair MoG_T(1) vs N(0, I) (+ random co-batch moments)"
    )

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        epochs, s = fold_epochs(data, mechanism)
        y = _floating(epochs)
        variance = cobatch_variance(mechanism) if mechanism.threat_model == "adversarial" else 0.0
        if variance == 0.0:
            z = unit_shift_log_ratio(y, s**2)
            per_epoch = logsumexp_last(z) - np.log(mechanism.steps_per_epoch)
            return per_epoch.sum(axis=1)
        if y.shape[1] != mechanism.epochs:
            raise ValueError(
                f"attack {self.name!r}: a random co-batch with the canary in the same step every "
                f"epoch (sampler={mechanism.sampler!r}) has no score here"
            )
        t = mechanism.steps_per_epoch  # >= 2: with T = 1 the co-batch count is n - 1, variance 0
        a = s**2 + variance * t / (t - 1)
        c = variance / (t - 1)
        z = unit_shift_log_ratio(y, a)
        total = y.sum(axis=2, dtype=np.float64)
        per_epoch = logsumexp_last(z) - np.log(t) + c * (total - 0.5) / (a * s**2)
        return per_epoch.sum(axis=1)


class ShuffleAdversarialLR(Attack):
    """Shuffle, adversarial pair MoG_T(2) vs MoG_T(1), summed over (folded) epochs."""

    name = "shuffle_adversarial_lr"
    observation = "all_iterates"
    canary_laws = ("uniform_step_per_epoch",)
    description = "shuffle likelihood ratio, adversarial pair MoG_T(2) vs MoG_T(1)"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        epochs, s = fold_epochs(data, mechanism)
        y = _floating(epochs)
        scale = y.dtype.type(1.0 / s**2)
        z_in = (2 * y - 2) * scale  # (4 y - 4) / (2 s^2)
        z_out = unit_shift_log_ratio(y, s**2)
        return (logsumexp_last(z_in) - logsumexp_last(z_out)).sum(axis=1)


def _floating(y: np.ndarray) -> np.ndarray:
    """float32 stays float32 (speed), anything else becomes float64."""
    return y if y.dtype == np.float32 else y.astype(np.float64)
