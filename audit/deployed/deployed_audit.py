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
from audit.deployed.claims import DeployedClaim, claim_from, composition
from audit.deployed.diagnostics import Observed, diagnose, in_batch_mask
from audit.deployed.findings import Finding
from audit.report.formatting import fmt
from audit.report.one_run import one_run_sentence, plot_accuracy
from audit.run.results import Confidence, OneRunCellResult, jsonable
from audit.run.spec import Cell
from audit.run.summary import canary_statistics, one_run_cell_result
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
    findings: tuple[Finding, ...] = ()

    @property
    def failed(self) -> tuple[Finding, ...]:
        """The failed findings (those that refute the claim first)."""
        bad = [f for f in self.findings if not f.passed]
        return tuple(sorted(bad, key=lambda f: not f.refutes))

    @property
    def epsilon_lb(self) -> float:
        """The eps lower bound at delta, sound at confidence 1 - alpha."""
        return float(self.result.epsilon_lb)

    @property
    def verdict(self) -> str:
        """``violated`` (the claim is refuted at level alpha: by eps_lb, or by a failed finding
        that refutes the claimed mechanism) or ``consistent``."""
        if any(f.refutes for f in self.failed):
            return "violated"
        return self.result.verdict

    def sentence(self) -> str:
        """The report's sentence: the failed findings first, then the epsilon."""
        head, body = one_run_sentence(self.result, fmt)
        found = "".join(
            f"Finding {f.name} failed (level {f.level:.3g}): {f.message}. " for f in self.failed
        )
        return found + head + body + "."

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.result.to_json(),
            "verdict": self.verdict,
            "claim": self.claim.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
        }

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
            *(
                ["Findings (each a test at its level, Bonferroni over the diagnostics, or an "
                 "exact observation at level 0):", "",
                 *[f"- {'FAILED' if not f.passed else 'passed'} **{f.name}** "
                   f"(level {f.level:.3g}): {f.message}" for f in
                   (*self.failed, *[g for g in self.findings if g.passed])], ""]
                if self.findings else []
            ),
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
    included: Any = None,
    claim: Any = None,
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

    Two forms: ``one_run_audit(canaries, claim, delta=...)`` with the
    :class:`audit.deployed.instrument.DiracCanaries` after training (its scores, its IN bits
    and the diagnostics of :mod:`audit.deployed.diagnostics`, family-wise level ``alpha``), or
    ``one_run_audit(scores, included, claim, delta=...)`` (no diagnostics).

    Args:
        scores: one score per canary (higher = IN), or the DiracCanaries object.
        included: which canaries were IN (the scores form).
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
    findings: tuple[Finding, ...] = ()
    if hasattr(scores, "observations") and hasattr(scores, "included"):
        canaries = scores
        if claim is None:
            claim, included = included, None
        if included is not None:
            raise ValueError(
                "one_run_audit(canaries, claim, delta=...): included comes from the canaries"
            )
        stated = _with_ledger(claim_from(claim, delta, **context), claim)
        scores, included, findings = _from_canaries(canaries, stated, alpha)
    else:
        if included is None or claim is None:
            raise ValueError(
                "one_run_audit(scores, included, claim, delta=...) needs included and claim"
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
    cell = Cell(sampler, threat_model, attack)
    result = one_run_cell_result(
        stats,
        roc_summary(scores_in, scores_out, alpha=alpha),
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
    )
    return DeployedAudit(
        result=result, claim=stated, scores_in=scores_in, scores_out=scores_out,
        findings=findings,
    )


def _with_ledger(stated: DeployedClaim, source: Any) -> DeployedClaim:
    """A dp_accounting claim completed with the ledger's composed steps and sigma."""
    ledger = getattr(source, "ledger", None)
    if ledger is None or stated.steps is not None:
        return stated
    from dataclasses import replace

    c = composition(ledger)
    return replace(
        stated,
        steps=c.steps if c.steps else None,
        noise_multiplier=c.sigmas[0] if len(c.sigmas) == 1 else stated.noise_multiplier,
        sample_rate=c.rates[0] if len(c.rates) == 1 else stated.sample_rate,
    )


def _from_canaries(
    canaries: Any, claim: DeployedClaim, alpha: float
) -> tuple[np.ndarray, np.ndarray, tuple[Finding, ...]]:
    """The canaries' scores (the sampler's likelihood ratio at the claim's q and sigma where
    known, else the sum), their IN bits and the diagnostics at family-wise level alpha
    (docs/design.md §14.5)."""
    y = canaries.observations
    m, steps = y.shape
    sigma = claim.noise_multiplier
    q = claim.sample_rate
    scores = canaries.scores(sigma=sigma, sampling_probability=q)
    included = np.asarray(canaries.included, dtype=bool)
    if sigma is None or canaries.real is None or len(canaries.batches) < steps:
        return scores, included, ()
    mask = in_batch_mask(canaries.batches, int(canaries.real), m, steps)
    obs = Observed(y=y, in_batch=mask, included=included)
    return scores, included, diagnose(
        obs, sigma=float(sigma), q=q, composed=claim.steps, alpha=alpha
    )
