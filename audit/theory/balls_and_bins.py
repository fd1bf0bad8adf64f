"""Balls-and-bins (Chua et al., AISTATS 2025, arXiv 2412.16802): which bound applies.

The isolated pair. In each epoch the canary is in one uniformly random step of T, the other
examples contribute nothing along its direction: one epoch is the random-allocation pair
P = (1/T) sum_j N(e_j, sigma^2 I_T) vs Q = N(0, sigma^2 I_T) (Feldman & Shenfeld, arXiv
2502.08202; Chua et al. 2025, §3), and the E epochs are independent, so the run is its E-fold
composition (:mod:`audit.theory.random_allocation`, ``sampler="balls_and_bins"``).

- upper (a guarantee): the pointwise maximum of the random-allocation upper curve and the
  deterministic curve G_{sqrt(E)/sigma}. The latter is a guarantee because one epoch's pair
  is a post-processing of the Gaussian pair N(1, sigma^2) vs N(0, sigma^2): put the observed
  value in a uniformly random coordinate and fill the other T - 1 with fresh N(0, sigma^2)
  noise; so its trade-off curve is at least G_{1/sigma}, and the E-fold composition at least
  G_{sqrt(E)/sigma} (Dong, Roth & Su 2022, Lemma 2.9 and Theorem 3.2). The maximum of two
  guarantees is a guarantee.
- lower (achieved): the random-allocation lattice test composed E times; where its lattice
  does not fit (small sigma), the per-epoch max test of the same pair composed E times
  (:func:`audit.theory.shuffle_adversarial.shuffle_max_test_lower`) and the upper curve is
  the deterministic curve alone.
- exact (small T): the lattice/FFT curve of the same isolated pair
  (:func:`audit.theory.shuffle_isolated.isolated_exact_curve`, dynamic-shuffle law).

The adversarial pair has the same two curves (docs/design.md §3.4, §6), as Poisson's does.
Every other example's step is drawn independently of the canary's, so the co-batch
cannot tell where the canary is (unlike shuffling, whose fixed batch sizes reveal its step):
with the harness's crafted co-batch (every other clipped gradient -C u) the observation is
y = y_iso - (O - (n - 1)/T), y_iso the isolated observation and (O_1, ..., O_T) ~
Multinomial(n - 1, 1/T each) per epoch, whose law is the same IN and OUT and independent of
y_iso. So the adversarial observation is a post-processing of the isolated one (add
independent noise): the isolated upper curve is a guarantee for it (Dong, Roth & Su 2022,
Lemma 2.9). For any co-batch data, not only this one, Chua et al. 2025 (§3) show that
(P, Q) above is a dominating pair of one epoch of adaptive balls-and-bins DP-SGD, and
the E epochs compose adaptively, so the upper curve is a guarantee under the adversarial
threat model in general. The isolated lower curve is achieved under the adversarial threat
model too: the adversary who gives every other example gradient 0 along u (a co-batch
the threat model allows) makes the observation exactly y_iso. So the adversarial curves
are the isolated ones, labelled ``adversarial``; the harness's own co-batch only adds
variance, so its audits land above the lower curve (as Poisson's adversarial audits do).
No ``exact`` curve is given for the adversarial pair: the isolated exact curve is the
adversary's worst case, not the curve of the crafted co-batch's observation.
"""

from __future__ import annotations

import math

from audit.core.mechanism import Mechanism
from audit.theory.deterministic import deterministic_curve
from audit.theory.random_allocation_octave import random_allocation_bounds
from audit.theory.shuffle_adversarial import shuffle_max_test_lower
from audit.theory.shuffle_isolated import isolated_exact_curve
from audit.theory.types import Bounds

__all__ = ["balls_and_bins_bounds"]

SAMPLER = "balls_and_bins"
RA_MAX_CELLS = 2**20
"""FFT window of the random-allocation lattice (as the shuffles' bounds use: about 1 s)."""


def balls_and_bins_bounds(m: Mechanism) -> Bounds:
    """Upper (guarantee), lower (achieved) and exact curves of balls-and-bins, either threat model.

    Args:
        m: a mechanism with ``sampler="balls_and_bins"``, ``threat_model`` ``isolated`` or
            ``adversarial`` (the same curves, labelled with it: see the module docstring).

    Returns:
        :class:`audit.theory.types.Bounds` (see the module docstring for each curve; ``exact``
        for the isolated pair only).
    """
    threat = m.threat_model
    mu = math.sqrt(m.epochs) / m.sigma
    upper = deterministic_curve(
        m.sigma, m.epochs, sampler=SAMPLER, threat_model=threat, kind="upper"
    ).relabel(
        method=(f"Gaussian DP mu = sqrt(E)/sigma = {mu:.6g} (one balls-and-bins epoch is a "
                "post-processing of one Gaussian step; closed form)"),
        short="deterministic GDP",
    )
    notes: list[str] = []
    ra = random_allocation_bounds(
        m.sigma, m.steps_per_epoch, m.epochs, sampler=SAMPLER, max_cells=RA_MAX_CELLS
    )
    notes.extend(ra.notes)
    upper = upper.maximum(
        ra.upper, method=f"max of [{upper.method}] and [{ra.upper.method}]",
        short="deterministic GDP + random allocation",
    )
    if ra.lower is None:
        # The same isolated law as dynamic shuffling: its max test is achieved here too.
        lower = shuffle_max_test_lower(SAMPLER, m.sigma, m.steps_per_epoch, m.epochs, "isolated")
    else:
        lower = ra.lower
    if threat != "isolated":
        upper = upper.relabel(
            threat_model=threat,
            method=upper.method + "; adversarial: the isolated pair's guarantee (the others' steps "
            "are independent of the canary's: the co-batch adds noise of a law free of the canary, "
            "a post-processing; Chua et al. 2025 for any co-batch)",
        )
        lower = lower.relabel(
            threat_model=threat,
            method=lower.method + "; adversarial: achieved by the co-batch of gradient 0 along u "
            "(the observation is then the isolated one)",
        )
        return Bounds(m, upper, lower, None, tuple(notes))
    exact = None
    try:
        exact = isolated_exact_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=SAMPLER)
    except ValueError as err:
        notes.append(f"no exact curve: {err}")
    return Bounds(m, upper, lower, exact, tuple(notes))
