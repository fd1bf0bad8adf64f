"""A sequential audit's verdict on a cell's scores, shard by shard (``stop = "decided"``).

The scores of a training key arrive in shard order (shard i holds trials i s .. i s + s - 1 of each
side, s = ``shard_size``; k rows per training with ``canaries_per_training = k``). Shard 0 is the
pilot: it fixes the threshold and the confidence sequences' priors
(:func:`audit.stats.sequential.plan_sequential_test`) and is left out of the test. After each later
shard the test looks at the cumulative error sums
(:func:`audit.stats.sequential.sequential_verdict`) and stops at the first look where the verdict is
decided (docs/design.md §8.18). The same function serves the runner (when to stop adding shards) and
the report (the verdict of the shards used): both see the same prefix of shards, so they agree.

Units: independent canaries (or k = 1) count each canary as one Bernoulli observation of the
rate; dependent canaries count each training as one [0, 1] observation, the fraction of its
canaries in error (docs/design.md §8.17).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from audit.core.confidence import significance
from audit.stats.many_canaries import training_rows
from audit.stats.sequential import (
    SequentialPlan,
    SequentialVerdict,
    _plan_at,
    bet_log_wealth,
    plan_bet,
    sequential_verdict,
)

__all__ = [
    "SEQUENTIAL_BAND_REFUSAL",
    "SEQUENTIAL_ESTIMATES_LABEL",
    "SEQUENTIAL_LABEL",
    "SEQUENTIAL_ROC_LABEL",
    "SequentialBound",
    "SequentialEvidence",
    "SequentialOutcome",
    "sequential_evidence",
    "sequential_outcome",
    "sequential_roc",
]


@dataclass(frozen=True)
class SequentialOutcome:
    """The plan fixed on the pilot, the verdict at the stopping look, and the trainings used
    per side (pilot included; ``None`` shards beyond the stopping look were not read)."""

    plan: SequentialPlan
    verdict: SequentialVerdict
    shards_used: int
    trials_used: int


def sequential_outcome(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    *,
    shard_size: int,
    canaries: int = 1,
    independent: bool = True,
    confidence: float | None = None,
    alpha: float | None = None,
    delta: float,
) -> SequentialOutcome:
    """Run the sequential test over the shards these scores hold, stopping at the first decided
    look, at ``confidence`` (default 0.95; ``alpha=`` its deprecated spelling 1 - confidence)."""
    alpha = significance(confidence, alpha, where="sequential_outcome")
    rows_in = training_rows(scores_in, canaries, "scores_in")
    rows_out = training_rows(scores_out, canaries, "scores_out")
    trials = min(rows_in.shape[0], rows_out.shape[0])
    if trials <= shard_size:
        raise ValueError(
            f"a sequential test needs more than the pilot shard ({shard_size} trainings); got "
            f"{trials}"
        )
    plan = _plan_at(rows_in[:shard_size], rows_out[:shard_size], claim, alpha)
    per_unit = 1.0 if independent else float(canaries)
    looks: list[tuple[float, int, float, int]] = []
    fp = fn = log_wealth = 0.0
    end = shard_size
    verdict = None
    while end < trials:
        start, end = end, min(end + shard_size, trials)
        # the past only
        bet = plan_bet(rows_in[:start], rows_out[:start], claim, per_canary=independent)
        log_wealth += bet_log_wealth(
            bet, rows_in[start:end], rows_out[start:end], per_canary=independent
        )
        fp += float(np.count_nonzero(rows_out[start:end] >= plan.threshold)) / per_unit
        fn += float(np.count_nonzero(rows_in[start:end] < plan.threshold)) / per_unit
        units = (end - shard_size) * (canaries if independent else 1)
        looks.append((fp, units, fn, units))
        verdict = sequential_verdict(
            plan, claim, looks, delta=delta, log_wealth=log_wealth, previous=verdict
        )
        if verdict.decided:
            break
    assert verdict is not None
    return SequentialOutcome(
        plan=plan, verdict=verdict, shards_used=-(-end // shard_size), trials_used=end
    )


SEQUENTIAL_LABEL = (
    "anytime-valid at the data-dependent stopping time: the verdict is an e-process (bets on the "
    "claim's support "
    "line at thresholds chosen from past shards; violated when the e-value reaches 1/alpha); "
    "eps_lb and FPR/FNR "
    "bounds: beta-binomial mixture confidence sequences (alpha/2 each, running intersection) at "
    "the pilot shard's "
    "threshold; each holds at 1 - alpha"
)
"""What a sequential cell's numbers are (summary.json's ``sequential.label``)."""

SEQUENTIAL_BAND_REFUSAL = (
    "not computed for a sequential cell: the whole-curve band is a fixed-size statement (a "
    "confidence 1 - alpha at a sample size fixed in advance) and does not hold at the "
    "data-dependent stopping size of stop = 'decided' (docs/design.md §8.18)"
)
"""A sequential cell's ``curve_evidence``: the reason it carries none."""

SEQUENTIAL_ESTIMATES_LABEL = (
    "estimates, not bounds, and not anytime-valid: computed at the data-dependent stopping size "
    "of a sequential audit, so their intervals' levels hold for a sample size fixed in advance "
    "only"
)
"""A sequential cell's ``estimates.label``."""

SEQUENTIAL_ROC_LABEL = (
    "estimates, not bounds, and not anytime-valid: TPR at an empirical FPR <= target and the AUROC "
    "at the data-dependent stopping size of a sequential audit (point estimates only: a "
    "fixed-size interval would not hold at a stopping time)"
)
"""A sequential cell's ``roc.label``."""


def sequential_roc(roc: Mapping[str, object]) -> dict[str, object]:
    """A fixed-size ROC summary (:func:`audit.stats.binary.roc_summary`) as a sequential cell
    states it: the point estimates (TPR at each FPR target, the AUROC) without the
    Clopper-Pearson intervals and their confidence, which a data-dependent stopping size voids
    (docs/design.md §8.18)."""
    dropped = {"tpr_lo", "tpr_hi", "confidence"}
    rows = roc.get("tpr_at_fpr", [])
    assert isinstance(rows, list)
    return {
        **roc,
        "label": SEQUENTIAL_ROC_LABEL,
        "tpr_at_fpr": [{k: v for k, v in row.items() if k not in dropped} for row in rows],
    }


@dataclass(frozen=True)
class SequentialBound:
    """The eps bound of a sequential cell: the confidence sequences' ``epsilon_lb`` (the
    fixed-size Clopper-Pearson bound is not valid at a data-dependent sample size)."""

    epsilon_lb: float

    def to_dict(self) -> dict[str, object]:
        """summary.json's ``bound`` of a sequential cell."""
        return {"strategy": "sequential", "epsilon_lb": self.epsilon_lb,
                "note": "the fixed-size bound is not valid at a data-dependent sample size"}


@dataclass(frozen=True)
class SequentialEvidence:
    """How a sequential cell was decided (summary.json's ``sequential``, docs/design.md §8.18):
    the plan fixed on the pilot, whether the verdict was decided and why, the trials used per
    side (pilot included) of the budget ``max_trials``, the shards and looks, the e-value."""

    plan: SequentialPlan
    decided: bool
    outcome: str
    trials_used_per_side: int
    max_trials: int
    shards_used: int
    looks: int
    e_value: float

    @property
    def trainings_used(self) -> int:
        """Trainings used, IN and OUT together."""
        return 2 * self.trials_used_per_side

    def to_dict(self) -> dict[str, object]:
        """summary.json's ``sequential`` of a cell."""
        plan = self.plan
        return {
            "stop": "decided",
            "decided": self.decided,
            "outcome": self.outcome,
            "trainings_used": self.trainings_used,
            "trials_used_per_side": self.trials_used_per_side,
            "max_trials": self.max_trials,
            "shards_used": self.shards_used,
            "looks": self.looks,
            "pilot": {
                "trials_per_side": plan.pilot_in,
                "threshold": plan.threshold if np.isfinite(plan.threshold) else "inf",
                "fpr_prior": list(plan.fpr_prior),
                "fnr_prior": list(plan.fnr_prior),
                "chosen_by": "max of f(FPR_hi) - FNR_hi on the pilot shard (Clopper-Pearson, "
                "alpha/2); priors: "
                "Jeffreys posteriors of the pilot's error counts; the pilot is left out of the "
                "test",
            },
            "e_value": self.e_value,
            "label": SEQUENTIAL_LABEL,
        }


def sequential_evidence(outcome: SequentialOutcome, *, max_trials: int) -> SequentialEvidence:
    """The :class:`SequentialEvidence` of a sequential test's outcome, with the budget."""
    v = outcome.verdict
    reason = "refuted" if v.violated else ("futile" if v.futile else "budget spent, undecided")
    return SequentialEvidence(
        plan=outcome.plan,
        decided=v.decided,
        outcome=reason,
        trials_used_per_side=outcome.trials_used,
        max_trials=max_trials,
        shards_used=outcome.shards_used,
        looks=v.looks,
        e_value=math.exp(min(v.log_wealth, 700.0)),
    )
