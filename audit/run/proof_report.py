"""The summary's share of issue 22: the planned threshold's statements, whole-curve evidence and
the labelled estimates of one cell (docs/design.md §8.12 - §8.14), as typed records.

:func:`planned_statements` makes the eps bound and the verdict of ``threshold = "planned"``:
the plan comes from the theory's ``lower`` curve when the cell's attack is the one that curve
describes (white box: every iterate of a Dirac canary, scored by the sampler's default attack,
the exact likelihood ratio), and otherwise from a pilot, a seeded tenth of the trials left out
of the test; its record is :class:`PlannedStatements` (summary key ``planned``).
:func:`curve_evidence` is the whole-curve verdict (sound) or a :class:`Refusal` (summary key
``curve_evidence``); :func:`estimates` the labelled estimates (:class:`Estimates`, summary key
``estimates``). The fields of :class:`audit.run.results.CellResult` hold these records; the
existing keys keep their numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

import attacks
from audit.core.exact_confidence import exact_confidence
from audit.core.mechanism import Mechanism
from audit.run.spec import AuditSpec, Cell
from audit.stats.binary import FPR_TARGETS, EpsilonBound, Planned, Verdict
from audit.stats.curve_evidence import CurveVerdict, GdpFit, NoEvidence, curve_verdict, gdp_fit
from audit.stats.estimates import (
    BayesianEpsilon,
    BootstrapInterval,
    bayesian_epsilon,
    bootstrap_auroc,
    bootstrap_tpr_at_fprs,
)
from audit.stats.thresholds import (
    JointTest,
    PlannedThreshold,
    plan_threshold,
    planned_epsilon_lower_bound,
    planned_verdict,
    take_pilot,
)

__all__ = [
    "Estimates",
    "PlannedStatements",
    "Refusal",
    "curve_evidence",
    "estimates",
    "plan_source",
    "planned_statements",
]

PLANNED_LABEL = (
    "threshold fixed before the scores were seen; one joint test of both rates on the test trials"
)
ESTIMATES_LABEL = "estimates, not bounds"


@dataclass(frozen=True)
class Refusal:
    """Why the scores carry no evidence for a statement
    (:class:`audit.stats.curve_evidence.NoEvidence`)."""

    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"refused": self.reason}


@dataclass(frozen=True)
class PlannedStatements:
    """The ``threshold = "planned"`` statements of a cell (docs/design.md §8.12): the plan and
    the joint test of the eps bound, and those of the verdict (each plan fixed before the test
    scores were read; ``source``: ``theory`` or ``pilot``)."""

    source: str
    epsilon_plan: PlannedThreshold
    epsilon_test: JointTest
    verdict_plan: PlannedThreshold
    verdict_test: JointTest
    label: str = PLANNED_LABEL

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "source": self.source,
            "epsilon_lb": {
                "plan": self.epsilon_plan.to_dict(),
                "test": self.epsilon_test.to_dict(),
            },
            "verdict": {"plan": self.verdict_plan.to_dict(), "test": self.verdict_test.to_dict()},
        }


@dataclass(frozen=True)
class Estimates:
    """The labelled estimates of a cell (docs/design.md §8.14): the Bayesian eps at the bound's
    threshold and evaluation counts, bootstrap intervals of the AUROC and of the TPR at each FPR
    of :data:`audit.stats.binary.FPR_TARGETS`, and the GDP fit over all thresholds (or why
    there is none). Estimates, not bounds."""

    bayesian_epsilon: BayesianEpsilon
    auroc: BootstrapInterval
    tpr_at_fpr: tuple[BootstrapInterval, ...]
    gdp_fit: GdpFit | Refusal
    label: str = ESTIMATES_LABEL

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "bayesian_epsilon": self.bayesian_epsilon.to_dict(),
            "auroc": self.auroc.to_dict(),
            "tpr_at_fpr": [interval.to_dict() for interval in self.tpr_at_fpr],
            "gdp_fit": self.gdp_fit.to_dict(),
        }


def plan_source(spec: AuditSpec, cell: Cell, mechanism: Mechanism, lower: object) -> str:
    """``theory`` when the theory's lower curve describes the cell's scores (white box: Dirac
    canary, every iterate, the sampler's default attack) and exists; else ``pilot``."""
    experiment = spec.experiment
    if lower is None or experiment.observation != "all_iterates" or experiment.canary != "dirac":
        return "pilot"
    default = attacks.default_attack(mechanism, experiment.observation)
    name = getattr(default, "name", default)
    return "theory" if cell.attack == name else "pilot"


def planned_statements(
    spec: AuditSpec,
    cell: Cell,
    mechanism: Mechanism,
    lower: object,
    claim: Callable[[np.ndarray], np.ndarray],
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    alpha: float,
    *,
    strategy: Planned = Planned(),  # noqa: B008 - a frozen dataclass, immutable
) -> tuple[EpsilonBound, Verdict, PlannedStatements]:
    """(eps bound, verdict, their :class:`PlannedStatements`) of ``threshold = "planned"``
    (module docstring).

    Each statement has its own plan (the eps bound's maximises the eps_lb reached with
    probability 0.9, the verdict's the chance of refuting the claim), both fixed before the test
    scores are read; a pilot takes ``strategy.pilot_fraction`` of the trials.
    """
    source = plan_source(spec, cell, mechanism, lower)
    delta, seed = spec.claim.delta, spec.experiment.seed
    test_in, test_out = scores_in, scores_out
    pilot = (0, 0)
    if source == "theory":
        curve, name = lower, f"the theory's lower curve ({getattr(lower, 'method', 'lower')})"
    else:
        taken = take_pilot(scores_in, scores_out, seed, strategy.pilot_fraction)
        curve, name, pilot = taken.curve, taken.name, taken.sizes
        test_in, test_out = taken.test_in, taken.test_out
    n_in, n_out = int(np.size(test_in)), int(np.size(test_out))
    common = {"alpha": alpha, "source": source, "curve_name": name, "pilot": pilot}
    eps_plan = plan_threshold(curve, n_in, n_out, delta=delta, **common)  # type: ignore[arg-type]
    claim_plan = plan_threshold(curve, n_in, n_out, claim=claim, **common)  # type: ignore[arg-type]
    bound, eps_test = planned_epsilon_lower_bound(
        test_in, test_out, eps_plan, delta=delta, alpha=alpha, seed=seed
    )
    decision, claim_test = planned_verdict(
        test_in, test_out, claim, claim_plan, alpha=alpha, seed=seed
    )
    return bound, decision, PlannedStatements(source, eps_plan, eps_test, claim_plan, claim_test)


def curve_evidence(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    *,
    delta: float,
    alpha: float,
) -> CurveVerdict | Refusal:
    """The whole-curve verdict and the band's eps (sound at 1 - alpha), or why the scores carry
    no evidence (docs/design.md §8.13)."""
    try:
        confidence = exact_confidence(alpha)  # alpha bit for bit
        return curve_verdict(
            scores_in, scores_out, claim, confidence=confidence, delta=delta
        )
    except NoEvidence as error:
        return Refusal(str(error))


def estimates(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    bound: EpsilonBound,
    *,
    delta: float,
    alpha: float,
    seed: int,
) -> Estimates:
    """:class:`Estimates` of a cell: Bayesian eps at ``bound``'s threshold and evaluation counts,
    bootstrap AUROC and TPR at FPR 0.1% and 1%, the GDP fit (docs/design.md §8.14)."""
    try:
        confidence = exact_confidence(alpha)
        fit: GdpFit | Refusal = gdp_fit(
            scores_in, scores_out, confidence=confidence
        )
    except NoEvidence as error:
        fit = Refusal(str(error))
    bayes = bayesian_epsilon(
        bound.false_positives,
        bound.n_eval_out,
        bound.false_negatives,
        bound.n_eval_in,
        delta=delta,
        level=1 - alpha,
        seed=seed,
    )
    return Estimates(
        bayesian_epsilon=bayes,
        auroc=bootstrap_auroc(scores_in, scores_out, level=1 - alpha, seed=seed),
        # one set of resamples for every FPR target (the same draws each target's own call makes)
        tpr_at_fpr=bootstrap_tpr_at_fprs(
            scores_in, scores_out, FPR_TARGETS, level=1 - alpha, seed=seed
        ),
        gdp_fit=fit,
    )
