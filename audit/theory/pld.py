"""Privacy loss distributions (dp_accounting) as trade-off curves, and dominated lattice pairs.

A PLD on the lattice {k d} is a pair of discrete distributions: atoms at loss l_k with mass
p_k under the "upper" distribution P and p_k e^{-l_k} under the "lower" Q, plus an infinity
mass (P-mass where Q = 0). The likelihood-ratio tests "loss > t" give the vertices

    alpha_t = sum_{l_k > t} p_k e^{-l_k},    beta_t = 1 - p_inf - sum_{l_k > t} p_k,

so the pair's trade-off curve T(Q, P) is piecewise linear through them and its privacy
profile max_t (1 - beta_t - e^eps alpha_t) is exactly dp_accounting's
``get_delta_for_epsilon`` (Koskela et al.; Doroshenko et al., *Connect the Dots*, 2022).
A pessimistic PLD is a dominating pair (its curve is below the truth: an ``upper`` curve); a
PLD of a dominated pair is an ``lower`` curve.

Optimistic rounding (loss rounded down) shifts every step's loss by up to d, so after T steps
the optimistic estimate trails by about T d / 2 in eps: useless for T*E = 1e4 at d = 1e-4.
:func:`dominated_lattice_pmf` avoids that: it *post-processes* a fine discretisation of the
pair (merging and splitting cells by a stochastic map, which the pair's privacy can only
improve under) into outputs whose losses lie exactly on the lattice. The result is a pair
dominated by the true one (achieved by a test), composable without further rounding; its
error comes only from merging cells of nearby loss, O(d) per atom but second order in delta.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from numpy.typing import NDArray

from audit.theory.curve import TradeOffCurve, lower_hull

__all__ = [
    "compose_dominated_pair",
    "dominated_lattice_pmf",
    "pld_curve",
    "pmf_vertices",
]

FloatArray = NDArray[np.float64]


def pmf_vertices(pmf: pld_pmf.PLDPmf) -> tuple[FloatArray, FloatArray]:
    """Vertices (alpha, beta) of the trade-off curve of the pair a dp_accounting PMF describes."""
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=float)  # private: no public accessor
    losses = (np.arange(len(probs)) + dense._lower_loss) * dense._discretization
    inf_mass = float(dense._infinity_mass)
    keep = probs > 0
    probs, losses = probs[keep][::-1], losses[keep][::-1]  # descending loss
    alpha = np.concatenate(([0.0], np.cumsum(probs * np.exp(-np.minimum(losses, 700.0)))))
    beta = np.concatenate(([1.0 - inf_mass], 1.0 - inf_mass - np.cumsum(probs)))
    return alpha, beta


def pld_curve(
    pld: pld_lib.PrivacyLossDistribution,
    *,
    sampler: str,
    threat_model: str,
    kind: str,
    method: str,
) -> TradeOffCurve:
    """The symmetrised trade-off curve of both directions (remove, add) of a PLD.

    The convex hull of both directions' curves, symmetrised for its kind: its privacy profile
    at eps >= 0 is the maximum of both directions', as dp_accounting's
    ``get_delta_for_epsilon``.
    """
    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    verts = [_convex(*pmf_vertices(pmf)) for pmf in pmfs]
    a, b = lower_hull(np.concatenate([v[0] for v in verts]), np.concatenate([v[1] for v in verts]))
    return TradeOffCurve(
        a, b, sampler=sampler, threat_model=threat_model, kind=kind, method=method
    )


def _convex(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Clip a PMF's vertex list to [0, 1] x [0, 1] and close it at (1, 0)."""
    a = np.clip(a, 0.0, 1.0)
    b = np.clip(b, 0.0, 1.0)
    return lower_hull(np.append(a, 1.0), np.append(b, 0.0))


def dominated_lattice_pmf(
    p: FloatArray, q: FloatArray, discretisation: float
) -> tuple[dict[int, float], float]:
    """A lattice PLD of a pair dominated by the discrete pair (p, q) over cells.

    Steps (all post-processing of the cell pair, so the output pair is dominated):
    1. cells with q = 0 go to the infinity mass; the rest are merged into bins of loss
       [k d, (k+1) d) (merging is post-processing);
    2. a sweep in increasing loss keeps an accumulator of unassigned mass whose aggregate
       loss is below the next lattice value g, and adds the fraction x of the next bin that
       makes the aggregate loss exactly g: (P_acc + x P_b) = e^g (Q_acc + x Q_b). Splitting a
       bin by a coin of bias x and merging is a stochastic map applied to both P and Q.
    3. The last accumulator (the top tail, aggregate loss below its target) is rounded down.

    Returns ({k: P-mass at loss k d}, infinity mass), the REMOVE-direction input of
    ``PrivacyLossDistribution.create_from_rounded_probability(pessimistic_estimate=False)``.
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
        return out, inf_mass
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
    if acc_p > 0:
        floor_k = math.floor(math.log(acc_p / acc_q) / d)
        out[floor_k] = out.get(floor_k, 0.0) + acc_p
    return out, inf_mass


def compose_dominated_pair(
    p: FloatArray,
    q: FloatArray,
    times: int,
    *,
    discretisation: float,
    p_rev: FloatArray | None = None,
    q_rev: FloatArray | None = None,
) -> pld_lib.PrivacyLossDistribution:
    """The ``times``-fold composition of the dominated lattice pair of cells (p, q) (optimistic).

    If ``p_rev, q_rev`` are given they describe the reverse ordered pair (the ADD direction);
    by default the pair is reversed as is (Q vs P).
    """
    rem, rem_inf = dominated_lattice_pmf(p, q, discretisation)
    add, add_inf = dominated_lattice_pmf(
        q if p_rev is None else p_rev, p if q_rev is None else q_rev, discretisation
    )
    pld = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        rem, rem_inf, discretisation, pessimistic_estimate=False,
        rounded_probability_mass_function_add=add, infinity_mass_add=add_inf, symmetric=False,
    )
    return pld.self_compose(times) if times > 1 else pld
