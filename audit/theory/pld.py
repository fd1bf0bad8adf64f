"""Privacy loss distributions (dp_accounting) as trade-off curves, and dominated lattice pairs.

A PLD on the lattice {k d} is a pair of discrete distributions: atoms at loss l_k with mass
p_k under the "upper" distribution P and p_k e^{-l_k} under the "lower" Q, plus an infinity
mass (P-mass where Q = 0). The likelihood-ratio tests "loss > t" have

    alpha_t = sum_{l_k > t} p_k e^{-l_k},    power_t = p_inf + sum_{l_k > t} p_k,

so the pair's trade-off curve T(Q, P) is piecewise linear through them and its privacy
profile max_t (power_t - e^eps alpha_t) is exactly dp_accounting's
``get_delta_for_epsilon`` (Koskela et al.; Doroshenko et al., *Connect the Dots*, 2022).
Both are **tail sums from the high-loss end**, accurate where they are tiny (alpha down to
1e-300 at eps 60); the old form beta = 1 - p_inf - sum p_k lost them to cancellation.

- ``upper`` (:func:`pld_curve`): a pessimistic PLD is a dominating pair; its head (losses
  >= 0, i.e. eps >= 0) in both directions gives a guarantee whose profile equals
  dp_accounting's at every eps >= 0 (docs/design.md §5.2).
- ``lower`` (:func:`compose_dominated_pair`, :func:`achieved_curve`): the composition of a
  pair *dominated* by the true one-step pair, built on the lattice by
  :func:`dominated_lattice_pmf`. Each direction is composed on its own as a pair of real
  (sub-)distributions and its curve is read off with every numerical error on the safe side
  (below); the reverse test of each direction, "loss <= t", gives the mirrored points
  (beta_t, 1 - alpha_t) = (P(L <= t), Q(L <= t)), with P(L <= t) a tail sum from the
  low-loss end and Q(L <= t) = Q_kept - alpha_t, never an inverse of a truncated PMF.

Optimistic rounding (loss rounded down) shifts every step's loss by up to d, so after T steps
the optimistic estimate trails by about T d / 2 in eps: useless for T*E = 1e4 at d = 1e-4.
:func:`dominated_lattice_pmf` avoids that: it *post-processes* a fine discretisation of the
pair (merging and splitting cells by a stochastic map, which the pair's privacy can only
improve under) into outputs whose losses lie exactly on the lattice. The result is a pair
dominated by the true one (achieved by a test), composable without further rounding.

**Numerical errors of the achieved curves, each on the safe side.** The composition is an
FFT power (dp_accounting ``self_compose``) with tails of P-mass at most ``TAIL_MASS`` = 1e-30
outside its window (they wrap around: up to that much P-mass may sit at a wrong loss), and
float64 round-off of about 1e-19 per atom at 1e3 steps, 1e-17 at 1e5 (measured by the negative
atoms it leaves, or by a positive floor under every atom). With ``noise`` =
:func:`roundoff_per_atom` (twice the largest of the most negative atom, the smallest atom when
all are positive, and 4 eps_mach max_k p_k), each count of n atoms moves by at most n noise,
so: power_t -= (count above t) noise + tail; alpha_t +=
noise sum_{l > t} e^{-l} + tail e^{-t}; the mirrored FPR P(L <= t) += (count below t) noise
+ tail; the mirrored power Q(L <= t) -= the same alpha allowance. Outcomes the lattice pair
drops (Q-only cells, the top accumulator, tails beyond the cell range) are outcomes on
which both tests never reject, so the counts stay exact for a real test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from audit.theory.curve import TradeOffCurve

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "TAIL_MASS",
    "ComposedPair",
    "achieved_curve",
    "compose_dominated_pair",
    "dominated_lattice_pair",
    "dominated_lattice_pmf",
    "pld_curve",
    "pmf_head_points",
    "roundoff_per_atom",
]

FloatArray = NDArray[np.float64]

TAIL_MASS = 1e-30
"""P-mass the FFT composition of an achieved pair may leave outside its window."""

_MAX_EXP = 700.0  # e^700 ~ 1e304: atoms with loss below -700 are left out of Q-side sums


def _dense(pmf: pld_pmf.PLDPmf) -> tuple[FloatArray, FloatArray, float]:
    """(losses ascending, probabilities, infinity mass) of a dp_accounting PMF."""
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=float)  # private: no public accessor
    losses = (np.arange(len(probs)) + dense._lower_loss) * dense._discretization
    return losses, probs, float(dense._infinity_mass)


def pmf_head_points(pmf: pld_pmf.PLDPmf) -> tuple[FloatArray, FloatArray]:
    """(alpha_t, power_t) of the tests "loss > t" for t at the atoms with loss >= 0.

    Tail sums from the top, as dp_accounting's own delta(eps): the curve through these
    vertices has exactly the PMF's privacy profile at every eps >= 0.
    """
    losses, probs, inf_mass = _dense(pmf)
    top = losses >= -1e-12
    losses, probs = losses[top][::-1], probs[top][::-1]  # descending loss
    alpha = np.concatenate(([0.0], np.cumsum(probs * np.exp(-losses))))
    power = inf_mass + np.concatenate(([0.0], np.cumsum(probs)))
    return alpha, power


def pld_curve(
    pld: pld_lib.PrivacyLossDistribution,
    *,
    sampler: str,
    threat_model: str,
    kind: str = "upper",
    method: str,
) -> TradeOffCurve:
    """The guarantee given by a pessimistic PLD: the heads of both directions (remove, add).

    Its privacy profile at eps >= 0 is the maximum of both directions', as dp_accounting's
    ``get_delta_for_epsilon``. Only for guarantees: an achieved curve comes from
    :func:`achieved_curve`, which accounts for the composition's numerical errors.

    Raises:
        ValueError: ``kind`` is not ``upper``.
    """
    if kind != "upper":
        raise ValueError(f"pld_curve: kind must be 'upper' (a pessimistic PLD), got {kind!r}; "
                         "an achieved curve comes from achieved_curve")
    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    points = [pmf_head_points(pmf) for pmf in pmfs]
    return TradeOffCurve(
        np.concatenate([a for a, _ in points]),
        powers=np.concatenate([p for _, p in points]),
        sampler=sampler, threat_model=threat_model, kind="upper", method=method,
    )


def dominated_lattice_pmf(
    p: FloatArray, q: FloatArray, discretisation: float
) -> tuple[dict[int, float], float]:
    """({k: P-mass at loss k d}, infinity mass) of :func:`dominated_lattice_pair`."""
    probs, inf_mass, _ = dominated_lattice_pair(p, q, discretisation)
    return probs, inf_mass


def dominated_lattice_pair(
    p: FloatArray, q: FloatArray, discretisation: float
) -> tuple[dict[int, float], float, float]:
    """A lattice PLD of a pair dominated by the discrete pair (p, q) over cells.

    Steps (all post-processing of the cell pair, so the output pair is dominated):
    1. cells with q = 0 go to the infinity mass; cells with p = 0 are dropped (an outcome
       on which the tests never reject); the rest are merged into bins of loss
       [k d, (k+1) d) (merging is post-processing);
    2. a sweep in increasing loss keeps an accumulator of unassigned mass whose aggregate
       loss is below the next lattice value g, and adds the fraction x of the next bin that
       makes the aggregate loss exactly g: (P_acc + x P_b) = e^g (Q_acc + x Q_b). Splitting a
       bin by a coin of bias x and merging is a stochastic map applied to both P and Q.
    3. The last accumulator (the top tail, aggregate loss l_acc below its next target) is
       labelled with the lattice loss k d = floor(l_acc / d) d <= l_acc. Its true Q-mass is
       below the implied one, P_acc e^{-k d}: the label is still a function of the output, so
       the tests on the composed labels are real tests whose true FPR (under Q) is at most
       the one computed from implied Q-masses (safe side), with the P side exact. Only the
       reverse tests need the true kept Q-mass, which is returned.

    Returns ({k: P-mass at loss k d}, infinity mass, true Q-mass of the finite outputs): the
    REMOVE-direction input of a dp_accounting PMF.
    """
    d = float(discretisation)
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    inf_mass = float(p[(q <= 0) & (p > 0)].sum())
    ok = (q > 0) & (p > 0)
    p, q = p[ok], q[ok]
    loss = np.log(p) - np.log(q)
    k = np.floor(loss / d).astype(np.int64)
    bins, index = np.unique(k, return_inverse=True)  # sparse: bins may span a wide range
    pb = np.bincount(index, weights=p)
    qb = np.bincount(index, weights=q)
    out: dict[int, float] = {}
    if bins.size == 0:
        return out, inf_mass, 0.0
    pb_l, qb_l = pb.tolist(), qb.tolist()
    ks = bins.tolist()
    acc_p, acc_q = pb_l[0], qb_l[0]
    target = ks[0] + 1
    for kb, pbin, qbin in zip(ks[1:], pb_l[1:], qb_l[1:], strict=True):
        eg = math.exp(target * d)
        need = eg * acc_q - acc_p  # > 0: the accumulator's loss is below the target
        excess = pbin - eg * qbin  # >= 0: the bin's loss is at or above the target
        if excess > 0 and need <= excess:
            x = need / excess
            out[target] = out.get(target, 0.0) + acc_p + x * pbin
            acc_p, acc_q = (1 - x) * pbin, (1 - x) * qbin
            target = kb + 1
        else:
            acc_p += pbin
            acc_q += qbin
    q_true = sum(m * math.exp(-k * d) for k, m in out.items())
    if acc_p > 0:
        floor_k = math.floor(math.log(acc_p / acc_q) / d)
        out[floor_k] = out.get(floor_k, 0.0) + acc_p
        q_true += acc_q
    return out, inf_mass, q_true


@dataclass(frozen=True)
class ComposedPair:
    """The ``times``-fold composition of a dominated lattice pair, each direction on its own.

    ``directions`` holds, per direction (remove, then add), the composed finite PMF, the
    exact infinity mass 1 - (1 - p_inf)^times and the Q-mass of the kept finite outcomes
    Q_kept = (sum_k p_k e^{-l_k})^times.
    """

    directions: tuple[tuple[pld_pmf.PLDPmf, float, float], ...]
    times: int
    discretisation: float
    tail_mass: float


def _one_direction(
    loss_probs: dict[int, float], inf_mass: float, q_one: float, times: int, d: float,
    tail_mass: float,
) -> tuple[pld_pmf.PLDPmf, float, float]:
    from dp_accounting.pld import pld_pmf

    pmf: pld_pmf.PLDPmf = pld_pmf.SparsePLDPmf(loss_probs, d, 0.0, pessimistic_estimate=False)
    if times > 1:
        pmf = pmf.self_compose(times, tail_mass_truncation=tail_mass)
    infinity = -math.expm1(times * math.log1p(-min(inf_mass, 1.0 - 1e-300)))
    q_kept = math.exp(times * math.log(q_one)) if q_one > 0 else 0.0
    return pmf, infinity, q_kept


def compose_dominated_pair(
    p: FloatArray,
    q: FloatArray,
    times: int,
    *,
    discretisation: float,
    p_rev: FloatArray | None = None,
    q_rev: FloatArray | None = None,
    tail_mass: float = TAIL_MASS,
) -> ComposedPair:
    """The ``times``-fold composition of the dominated lattice pair of cells (p, q).

    If ``p_rev, q_rev`` are given they describe the reverse ordered pair (the ADD direction);
    by default the pair is reversed as is (Q vs P).
    """
    d = float(discretisation)
    rem = dominated_lattice_pair(p, q, d)
    add = dominated_lattice_pair(q if p_rev is None else p_rev, p if q_rev is None else q_rev, d)
    return ComposedPair(
        directions=tuple(_one_direction(probs, inf, q_one, times, d, tail_mass)
                         for probs, inf, q_one in (rem, add)),
        times=int(times), discretisation=d, tail_mass=float(tail_mass),
    )


def roundoff_per_atom(probs: FloatArray) -> float:
    """The FFT composition's round-off per atom, an allowance on its safe side (module
    docstring): twice the largest of the most negative atom, the smallest atom when every atom
    is positive, and 4 eps_mach max_k p_k.

    The round-off of an FFT power is spread over the whole window whatever the true masses,
    so where the true mass is nil (the far tails) the atoms are the error itself: of either
    sign (the most negative atom measures it), or an offset of one sign, which then shows as a
    floor under every atom (the smallest atom measures it). Measured at q = 0.01, sigma = 1,
    T = 1e5 (d = 1e-4, about 1e6 atoms): one direction's atoms are all at least 1.14e-17 (the
    91368 atoms above loss 50 hold 1.1e-12 of spurious mass, which read as eps 50 at delta
    1e-12 above the guarantee's 36.8 when only the most negative atom, none there, was
    counted), the other's most negative is -5.4e-17. The factor 2 covers atoms whose error
    exceeds the measured floor (1.32e-17 at most above loss 50 there)."""
    most_negative = float(-probs.min(initial=0.0))
    smallest = float(probs.min()) if probs.size else 0.0
    floor = smallest if smallest > 0 else 0.0
    return 2.0 * max(most_negative, floor, 2 * np.finfo(float).eps * float(probs.max(initial=0.0)))


def _direction_points(
    pmf: pld_pmf.PLDPmf, infinity: float, q_kept: float, tail_mass: float
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(alpha, power, beta, 1 - alpha) of the tests "loss > t" of one composed direction,
    each moved to its safe side by the numerical allowances of the module docstring."""
    losses, probs, _ = _dense(pmf)
    noise = roundoff_per_atom(probs)
    desc_l, desc_p = losses[::-1], probs[::-1]
    weight = np.exp(-np.clip(desc_l, -_MAX_EXP, None))
    usable = desc_l >= -_MAX_EXP
    count_above = np.arange(len(desc_p) + 1, dtype=float)
    q_above = np.concatenate(([0.0], np.cumsum(np.where(usable, desc_p * weight, 0.0))))
    p_above = np.concatenate(([0.0], np.cumsum(desc_p)))
    noise_q = noise * np.concatenate(([0.0], np.cumsum(np.where(usable, weight, 0.0))))
    # threshold t just below each atom: e^{-t} ~ the weight of the last atom counted
    e_minus_t = np.concatenate(([0.0], weight))
    alpha = q_above + noise_q + tail_mass * e_minus_t
    power = infinity + p_above - noise * count_above - tail_mass
    p_below = np.concatenate((np.cumsum(probs)[::-1], [0.0]))  # P(L <= t_k): atoms k..n-1
    count_below = (len(desc_p) - count_above)
    beta = p_below + noise * count_below + tail_mass
    inverse_power = q_kept - alpha
    return alpha, power, beta, inverse_power


def achieved_curve(
    composed: ComposedPair,
    *,
    sampler: str,
    threat_model: str,
    kind: str = "lower",
    method: str,
) -> TradeOffCurve:
    """The curve achieved by the composed dominated pair: both directions' tests and their
    reverse tests, every numerical error on the safe side (module docstring)."""
    points = [_direction_points(pmf, inf, qk, composed.tail_mass)
              for pmf, inf, qk in composed.directions]
    cat = [np.concatenate([pt[i] for pt in points]) for i in range(4)]
    alpha, power, beta, inverse_power = cat
    alpha = np.clip(alpha, 0.0, 1.0)
    return TradeOffCurve(
        alpha, np.clip(beta, 0.0, 1.0), powers=np.clip(power, 0.0, 1.0),
        inverse_powers=np.clip(inverse_power, 0.0, 1.0),
        sampler=sampler, threat_model=threat_model, kind=kind, method=method,
    )
