"""After one deployed training: the one-run audit, its verdict and its report
(docs/design.md §14.5).

``one_run_audit(scores, included, claim, delta=...)`` takes one score per canary (higher =
IN: :meth:`audit.deployed.instrument.DiracCanaries.scores` white box,
:meth:`audit.deployed.input_canaries.InputCanaries.scores` black box), which canaries were IN,
and the claim (:func:`audit.deployed.claims.claim_from`: an Opacus ``PrivacyEngine``, a
dp_accounting accountant or an explicit epsilon), and computes what the harness computes
for a one-run cell (:func:`audit.run.summary.canary_statistics`, docs/design.md §8.8-§8.11):
the guesses (k+ IN for the highest scores, k- OUT for the lowest, chosen soundly among a
Bonferroni grid), ``epsilon_lb`` (the f-DP recursion with the (eps, delta) curve, a lower
bound at confidence 1 - alpha) and the verdict against the claimed (eps, delta)-DP curve.
:meth:`DeployedAudit.write` writes the report the rest of the harness writes for a one-run
cell: ``summary.json``, ``report.md`` (the one-run sentence, the claim's accountant and
assumptions) and the accuracy plot (:func:`audit.report.one_run.plot_accuracy`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from audit.core.validation import check_real
from audit.deployed.claims import DeployedClaim, claim_from
from audit.report.formatting import fmt
from audit.report.one_run import one_run_sentence, plot_accuracy
from audit.run.results import Confidence, OneRunCellResult, accuracy_file, jsonable
from audit.run.spec import Cell
from audit.run.summary import canary_statistics, verdict_tests
from audit.stats.binary import roc_summary

__all__ = ["DeployedAudit", "one_run_audit"]


@dataclass(frozen=True)
class DeployedAudit:
    """The one-run audit of a deployed training.

    Attributes:
        result: the one-run cell's record (``epsilon_lb``, ``verdict``, ``guesses``, ``correct``,
            ``canaries``, ``evidence``, ``bound``, ...) as in a harness run's summary.
        claim: the :class:`DeployedClaim` audited.
        scores_in, scores_out: the IN and OUT canaries' scores.
    """

    result: OneRunCellResult
    claim: DeployedClaim
    scores_in: np.ndarray = field(repr=False)
    scores_out: np.ndarray = field(repr=False)

    @property
    def epsilon_lb(self) -> float:
        """The eps lower bound at delta, sound at confidence 1 - alpha."""
        return float(self.result.epsilon_lb)

    @property
    def verdict(self) -> str:
        """``violated`` (the claim is refuted at level alpha) or ``consistent``."""
        return self.result.verdict

    def sentence(self) -> str:
        """The report's sentence for this audit."""
        head, body = one_run_sentence(self.result, fmt)
        return head + body + "."

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_json(), "claim": self.claim.to_dict()}

    def write(self, directory: str | Path, *, title: str = "Audit of a deployed training",
              notes: tuple[str, ...] = ()) -> Path:
        """Write ``summary.json``, ``report.md`` and the accuracy plot under ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(
            json.dumps(jsonable(self.to_dict()), indent=2) + "\n", encoding="utf-8"
        )
        plot_accuracy(
            out / self.result.plot, self.result, self.scores_in, self.scores_out, _curve(self.claim)
        )
        lines = [
            f"# {title}",
            "",
            self.sentence(),
            "",
            f"The claim: ε = {self.claim.epsilon:.4g} at δ = {self.claim.delta:g} from "
            f"**{self.claim.accountant}**, "
            "which assumes:",
            "",
            *[f"- {a}" for a in self.claim.assumptions],
            "",
            "One-run audit (Steinke, Nasr, Jagielski 2023; Mahloujifar, Melis, Chaudhuri 2024; "
            "docs/design.md "
            f"§8.8-§8.11): {self.result.canaries} canaries, each IN with probability 1/2; "
            f"ε_lb = {fmt(self.epsilon_lb, side='lower')} is a lower bound at "
            f"{100 * (1 - self.result.alpha):g}% "
            "confidence.",
            "",
            *[f"{note}\n" for note in notes],
            f"![accuracy]({self.result.plot})",
            "",
        ]
        (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
        return out


def _curve(claim: DeployedClaim) -> Any:
    """The claim's (eps, delta)-DP trade-off curve (as :mod:`audit.run.claims` builds an explicit
    claim)."""
    from audit.theory.curve import TradeOffCurve

    return TradeOffCurve.from_privacy_profile(
        [claim.epsilon], [claim.delta], sampler="poisson", threat_model="adversarial", kind="upper",
        method=f"{claim.accountant}: ({claim.epsilon:.4g}, {claim.delta:g})-DP",
    )


def one_run_audit(
    scores: Any,
    included: Any,
    claim: Any,
    *,
    delta: float,
    alpha: float = 0.05,
    guesses: Any = "bonferroni",
    seed: int = 0,
    sampler: str = "deployed",
    threat_model: str = "isolated",
    attack: str = "dirac",
    **context: Any,
) -> DeployedAudit:
    """The one-run audit of one training's canaries against ``claim`` (module docstring).

    Args:
        scores: one score per canary (higher = IN).  included: which canaries were IN.
        claim: an Opacus ``PrivacyEngine``, a dp_accounting accountant, a
            :class:`DeployedClaim` or an explicit epsilon (:func:`claim_from`).
        delta: the claim's delta.  alpha: 1 - confidence.
        guesses: ``"bonferroni"`` (default), ``"split"`` or a fixed (k+, k-).
        sampler, threat_model, attack: labels of the report (what was audited).
        context: ``optimizer``, ``loader``, ``epochs`` for an Opacus engine before training.
    """
    delta = check_real(
        "delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    stated = claim_from(claim, delta, **context)
    s = np.asarray(scores, dtype=float).ravel()
    b = np.asarray(included, dtype=bool).ravel()
    if s.size != b.size:
        raise ValueError(
            f"scores has {s.size} entries but included has {b.size}; need one per canary"
        )
    scores_in, scores_out = s[b], s[~b]
    curve = _curve(stated)
    stats = canary_statistics(
        scores_in, scores_out, curve, delta=delta, alpha=alpha, guesses=guesses, seed=seed
    )
    tests = verdict_tests(stats.verdict.violated, stats.bound.epsilon_lb, stated.epsilon)
    cell = Cell(sampler, threat_model, attack)
    result = OneRunCellResult(
        cell=cell,
        observation="deployed",
        trials_in=int(b.sum()),
        trials_out=int((~b).sum()),
        delta=delta,
        alpha=alpha,
        confidence=Confidence(1 - alpha, "cell", alpha, 1),
        claim="deployed",
        claim_description=f"{stated.accountant}'s",
        claimed_epsilon=stated.epsilon,
        theory_upper_epsilon=None,
        theory_lower_epsilon=None,
        theory_upper_method=None,
        theory_lower_method=None,
        roc=roc_summary(scores_in, scores_out, alpha=alpha),
        epsilon_lb=stats.bound.epsilon_lb,
        epsilon_optimistic=stats.epsilon_optimistic,
        violated=tests.violated,
        verdict_tests=tests,
        evidence=stats.verdict,
        bound=stats.bound,
        plot=accuracy_file(cell.name),
        canaries=stats.canaries,
        guesses=(stats.bound.k_plus, stats.bound.k_minus),
        correct=stats.bound.correct,
        gdp=stats.gdp,
        gdp_epsilon=stats.gdp_epsilon(delta),
    )
    return DeployedAudit(result=result, claim=stated, scores_in=scores_in, scores_out=scores_out)
