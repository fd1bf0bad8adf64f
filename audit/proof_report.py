"""The summary's share of issue 22: the planned threshold's statements, whole-curve evidence and
the labelled estimates of one cell (docs/design.md §8.12 - §8.14).

:func:`planned_statements` makes the eps bound and the verdict of ``threshold = "planned"``:
the plan comes from the theory's ``lower`` curve when the cell's attack is the one that curve
describes (white box: every iterate of a Dirac canary, scored by the sampler's default attack,
the exact likelihood ratio), and otherwise from a pilot, a seeded tenth of the trials left out
of the test. :func:`evidence_fields` adds ``curve_evidence`` (sound, or the refusal) and
``estimates`` (labelled) to a cell's entry; the existing keys keep their numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import attacks
from audit.curve_evidence import NoEvidence, curve_verdict, gdp_fit
from audit.estimates import bayesian_epsilon, bootstrap_auroc, bootstrap_tpr_at_fpr
from audit.mechanism import Mechanism
from audit.spec import AuditSpec, Cell
from audit.stats import FPR_TARGETS, EpsilonBound, Verdict
from audit.thresholds import (
    PILOT_FRACTION,
    pilot_curve,
    plan_threshold,
    planned_epsilon_lower_bound,
    planned_verdict,
    split_pilot,
)

__all__ = ["evidence_fields", "plan_source", "planned_statements"]


def plan_source(spec: AuditSpec, cell: Cell, mechanism: Mechanism, lower: object) -> str:
    """``theory`` when the theory's lower curve describes the cell's scores (white box: Dirac
    canary, every iterate, the sampler's default attack) and exists; else ``pilot``."""
    if lower is None or spec.observation != "all_iterates" or spec.canary != "dirac":
        return "pilot"
    default = attacks.default_attack(mechanism, spec.observation)
    name = getattr(default, "name", default)
    return "theory" if cell.attack == name else "pilot"


def planned_statements(
    spec: AuditSpec, cell: Cell, mechanism: Mechanism, lower: object, claim: Callable[[np.ndarray], object],
    scores_in: object, scores_out: object, alpha: float,
) -> tuple[EpsilonBound, Verdict, dict[str, Any]]:
    """(eps bound, verdict, ``planned`` entry) of ``threshold = "planned"`` (module docstring).

    Each statement has its own plan (the eps bound's maximises the expected eps_lb, the
    verdict's the chance of refuting the claim), both fixed before the test scores are read.
    """
    source = plan_source(spec, cell, mechanism, lower)
    test_in, test_out = scores_in, scores_out
    pilot = (0, 0)
    if source == "theory":
        curve, name = lower, f"the theory's lower curve ({getattr(lower, 'method', 'lower')})"
    else:
        pilot_in, test_in = split_pilot(scores_in, spec.seed)
        pilot_out, test_out = split_pilot(scores_out, spec.seed + 1)
        curve, name = pilot_curve(pilot_in, pilot_out), f"a pilot of {PILOT_FRACTION:.0%} of the trials"
        pilot = (pilot_in.size, pilot_out.size)
    n_in, n_out = int(np.size(test_in)), int(np.size(test_out))
    common = {"alpha": alpha, "source": source, "curve_name": name, "pilot": pilot}
    eps_plan = plan_threshold(curve, n_in, n_out, delta=spec.delta, **common)
    claim_plan = plan_threshold(curve, n_in, n_out, claim=claim, **common)
    bound, eps_test = planned_epsilon_lower_bound(test_in, test_out, eps_plan, delta=spec.delta, alpha=alpha,
                                                  seed=spec.seed)
    decision, claim_test = planned_verdict(test_in, test_out, claim, claim_plan, alpha=alpha, seed=spec.seed)
    entry = {
        "label": "threshold fixed before the scores were seen; one joint test of both rates on the test trials",
        "source": source,
        "epsilon_lb": {"plan": eps_plan.to_dict(), "test": eps_test.to_dict()},
        "verdict": {"plan": claim_plan.to_dict(), "test": claim_test.to_dict()},
    }
    return bound, decision, entry


def _refusal(error: NoEvidence) -> dict[str, str]:
    return {"refused": str(error)}


def evidence_fields(
    scores_in: object, scores_out: object, claim: Callable[[np.ndarray], object], bound: EpsilonBound, *,
    delta: float, alpha: float, seed: int,
) -> dict[str, Any]:
    """``curve_evidence`` (the whole-curve verdict and band eps, sound; or the refusal) and
    ``estimates`` (Bayesian eps at the bound's threshold and evaluation counts, bootstrap AUROC
    and TPR at FPR 0.1% and 1%, the GDP fit; each labelled an estimate)."""
    try:
        evidence: dict[str, Any] = curve_verdict(scores_in, scores_out, claim, alpha, delta=delta).to_dict()
    except NoEvidence as error:
        evidence = _refusal(error)
    try:
        fit: dict[str, Any] = gdp_fit(scores_in, scores_out, alpha=alpha).to_dict()
    except NoEvidence as error:
        fit = _refusal(error)
    bayes = bayesian_epsilon(bound.false_positives, bound.n_eval_out, bound.false_negatives, bound.n_eval_in,
                             delta=delta, level=1 - alpha, seed=seed)
    estimates = {
        "label": "estimates, not bounds",
        "bayesian_epsilon": bayes.to_dict(),
        "auroc": bootstrap_auroc(scores_in, scores_out, level=1 - alpha, seed=seed).to_dict(),
        "tpr_at_fpr": [bootstrap_tpr_at_fpr(scores_in, scores_out, phi, level=1 - alpha, seed=seed).to_dict()
                       for phi in FPR_TARGETS],
        "gdp_fit": fit,
    }
    return {"curve_evidence": evidence, "estimates": estimates}
