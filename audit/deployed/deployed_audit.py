"""After one deployed training: the one-run audit, its verdict and its report
(docs/design.md §14.5).

``one_run_audit(canaries, claim, delta=...)`` takes the :class:`DiracCanaries` after training:
it runs the diagnostics (:mod:`audit.deployed.diagnostics`, accusing at family-wise level
``findings_level``, by default :data:`audit.stats.diagnostics.ACCUSATION_LEVEL` = 1e-3) and
scores the canaries with a family of statistics (:mod:`attacks.score_family`: the sampler's
likelihood ratio, the sum, the maximum, statistics robust to reused or correlated noise),
chosen soundly (:mod:`audit.run.score_selection`: Bonferroni over the K statistics by default,
or on held-out canaries), so that a bug that changes the law's shape still moves eps_lb.
``one_run_audit(scores, included, claim, delta=...)`` takes one score per canary (higher =
IN: :meth:`audit.deployed.instrument.DiracCanaries.scores` white box,
:meth:`audit.deployed.input_canaries.InputCanaries.scores` black box), which canaries were IN,
and the claim (:func:`audit.deployed.claims.claim_from`: an Opacus ``PrivacyEngine``, a
dp_accounting accountant or an explicit epsilon), and computes what the harness computes
for a one-run cell (:func:`audit.run.summary.canary_statistics`, docs/design.md §8.8-§8.11):
the guesses (k+ IN for the highest scores, k- OUT for the lowest, chosen soundly among a
Bonferroni grid), ``epsilon_lb`` (the f-DP recursion with the (eps, delta) curve, a lower
bound at the stated confidence) and the verdict against the claimed (eps, delta)-DP curve.
:meth:`DeployedAudit.write` writes the report the rest of the harness writes for a one-run
cell: ``summary.json``, ``report.md`` (the one-run sentence, the claim's accountant and
assumptions) and the accuracy plot (:func:`audit.report.one_run.plot_accuracy`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from attacks.score_family import DEFAULT_FAMILY, ScoreContext, ScoreFamily
from audit.core.confidence import significance
from audit.core.exact_confidence import exact_confidence
from audit.core.validation import check_real
from audit.deployed.claims import DeployedClaim, claim_from, composition
from audit.deployed.diagnostics import Observed, diagnose, in_batch_mask
from audit.deployed.findings import Finding
from audit.report.formatting import fmt
from audit.report.one_run import one_run_sentence, plot_accuracy
from audit.run.one_run_selection import choose_one_run
from audit.run.results import (
    SCHEMA_VERSION,
    CellTable,
    Confidence,
    OneRunCellResult,
    Scalar,
    flat_scalars,
    jsonable,
)
from audit.run.score_selection import ScoreSelection
from audit.run.spec import Cell
from audit.run.store import write_text_atomically
from audit.run.summary import OneRunStatistics, canary_statistics, one_run_cell_result
from audit.stats.binary import roc_summary
from audit.stats.diagnostics import ACCUSATION_LEVEL

__all__ = ["DeployedAudit", "one_run_audit"]


@dataclass(frozen=True)
class DeployedAudit:
    """The one-run audit of a deployed training.

    Attributes:
        result: the one-run cell's record (``epsilon_lb``, ``verdict``, ``guesses``, ``correct``,
            ``canaries``, ``evidence``, ``bound``, ...) as in a harness run's summary.
        claim: the :class:`DeployedClaim` audited.
        scores_in, scores_out: the IN and OUT canaries' scores (of the stated statistic, on the
            canaries its bound is computed on).
        findings: the diagnostics' :class:`Finding` records (the canaries form).
        selection: how the score statistic was chosen among the family (the canaries form;
            None: one given score).
        inconclusive: the names of the findings whose failure a post-processing of the
            privatized gradient could explain, stated as inconclusive (passed, not refuting:
            :func:`_observation_caveats`); the message of each says why.
        notes: what the audit assumed or read (where the privatized gradient was read, values
            read from Opacus and a user-given value that disagrees), printed in the sentence.
    """

    result: OneRunCellResult
    claim: DeployedClaim
    scores_in: np.ndarray = field(repr=False)
    scores_out: np.ndarray = field(repr=False)
    findings: tuple[Finding, ...] = ()
    selection: ScoreSelection | None = None
    inconclusive: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[Finding, ...]:
        """The failed findings (those that refute the claim first)."""
        bad = [f for f in self.findings if not f.passed]
        return tuple(sorted(bad, key=lambda f: not f.refutes))

    @property
    def epsilon_lb(self) -> float:
        """The eps lower bound at delta, sound at confidence 1 - alpha (with a family of scores:
        family-wise, :attr:`selection`)."""
        return float(self.result.epsilon_lb)

    @property
    def verdict(self) -> str:
        """``violated`` (the claim is refuted at level alpha: by eps_lb, or by a failed finding
        that refutes the claimed mechanism) or ``consistent``."""
        if any(f.refutes for f in self.failed):
            return "violated"
        return self.result.verdict

    def sentence(self) -> str:
        """The report's sentence: the failed findings first, then the epsilon, then what the
        audit assumed (:attr:`notes`) and the inconclusive findings. The verdict's clause is
        :attr:`verdict`'s: it names what refuted the claim (the scores' curve or eps_lb test, or
        the refuting findings) and its level, 1 - 2 alpha - alpha_f with alpha_f the findings'
        levels summed (Bonferroni; :func:`audit.report.formatting.verdict_level`)."""
        head, body = one_run_sentence(
            self.result, fmt, refuted=tuple(f.name for f in self.failed if f.refutes),
            findings_alpha=sum(f.level for f in self.findings),
        )
        found = "".join(
            f"Finding {f.name} failed (level {f.level:.3g}): {f.message}. " for f in self.failed
        )
        chosen = f" {self.selection.sentence()}." if self.selection is not None else ""
        notes = "".join(f" {n[:1].upper()}{n[1:]}." for n in self.notes)
        unsure = (f" Inconclusive (could be post-processing, not a leak): "
                  f"{', '.join(self.inconclusive)}." if self.inconclusive else "")
        return found + head + body + "." + chosen + notes + unsure

    def to_dict(self) -> dict[str, object]:
        return {
            **self.result.to_json(),
            "verdict": self.verdict,
            "claim": self.claim.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "inconclusive": list(self.inconclusive),
            "notes": list(self.notes),
            "score_selection": None if self.selection is None else self.selection.to_json(),
        }

    def cell_table(self) -> CellTable:
        """The audit as one flat row, ``audit run``'s cells.csv layout
        (:class:`audit.run.results.CellTable`: ``schema_version`` first, then the one-run
        cell's columns in summary.json's order, ``verdict`` the audit's, findings included),
        then ``cell_verdict`` (eps_lb's alone), ``claim.*``, ``findings_failed`` (the failed
        findings' names, ``;``-joined, refuting ones first) and ``findings_refuting``."""
        row: dict[str, Scalar] = {
            "schema_version": SCHEMA_VERSION,
            **flat_scalars(jsonable(self.result.to_json())),
            "verdict": self.verdict,
            "cell_verdict": self.result.verdict,
            **flat_scalars(jsonable(self.claim.to_dict()), "claim"),
            "findings_failed": ";".join(f.name for f in self.failed),
            "findings_refuting": int(sum(f.refutes for f in self.failed)),
        }
        return CellTable(tuple(row), (row,))

    def write(self, directory: str | Path, *, title: str = "Audit of a deployed training",
              notes: tuple[str, ...] = ()) -> Path:
        """Write ``summary.json`` (``schema_version`` first: :data:`audit.run.results.
        SCHEMA_VERSION`, then :meth:`to_dict`), ``cells.csv`` (:meth:`cell_table`),
        ``report.md`` and the accuracy plot under ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        document = {"schema_version": SCHEMA_VERSION, **self.to_dict()}
        write_text_atomically(out / "summary.json",
                              json.dumps(jsonable(document), indent=2) + "\n")
        write_text_atomically(out / "cells.csv", self.cell_table().to_csv())
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
                 *[f"- {_status(f, self.inconclusive)} **{f.name}** "
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
            "confidence"
            + (f", family-wise over the {len(self.selection.outcomes)} score statistics "
               f"({self.selection.correction})" if self.selection is not None else "")
            + ".",
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
    confidence: float | None = None,
    alpha: float | None = None,
    guesses: Any = "bonferroni",
    seed: int = 0,
    sampler: str = "deployed",
    threat_model: str = "isolated",
    attack: str = "dirac",
    family: ScoreFamily | None = DEFAULT_FAMILY,
    selection: str = "bonferroni",
    split_seed: int = 0,
    findings_level: float | None = None,
    **context: Any,
) -> DeployedAudit:
    """The one-run audit of one training's canaries against ``claim`` (module docstring).

    Two forms: ``one_run_audit(canaries, claim, delta=...)`` with the
    :class:`audit.deployed.instrument.DiracCanaries` after training (its observations, its IN
    bits, the diagnostics of :mod:`audit.deployed.diagnostics` at family-wise level
    ``findings_level`` (1e-3 by default), and by default the score *family* of
    :mod:`attacks.score_family` chosen soundly:
    :func:`audit.run.score_selection.choose_one_run`), or ``one_run_audit(scores, included,
    claim, delta=...)`` (one given score, no diagnostics: as before).

    With the family, each of its K statistics is a function of the output alone (the reference
    of ``whitened`` and ``step_ranks`` is every canary's observations, without their bits), and
    the stated eps_lb and verdict hold at ``confidence`` family-wise: ``selection="bonferroni"``
    (default) computes every statistic's at (1 - confidence) / K on all canaries and states the
    best; ``"split"`` chooses on half the canaries (``split_seed``) and states the other half's
    bound at 1 - confidence. ``family=None`` (or a family of one) scores with the sampler's
    likelihood ratio alone, as before the family.

    Args:
        scores: one score per canary (higher = IN), or the DiracCanaries object.
        included: which canaries were IN (the scores form).
        claim: an Opacus ``PrivacyEngine``, a dp_accounting accountant, a
            :class:`DeployedClaim` or an explicit epsilon (:func:`claim_from`).
        delta: the claim's delta.
        confidence: the probability that the stated bound holds (default 0.95).
        alpha: deprecated spelling of 1 - confidence.
        guesses: ``"bonferroni"`` (default), ``"split"`` or a fixed (k+, k-).
        sampler: a label of the report (the sampler audited).
        threat_model: a label of the report (the threat model audited).
        attack: a label of the report (the attack that made the scores).
        family: the score statistics of the canaries form (:data:`DEFAULT_FAMILY`); None: the
            likelihood ratio at the claim's q and sigma (the sum when q is unknown) alone.
        selection: ``bonferroni`` or ``split`` (:mod:`audit.run.score_selection`).
        split_seed: the seed of the ``split`` halves.
        findings_level: the family-wise level at which the findings accuse the training (the
            canaries form; default :data:`audit.stats.diagnostics.ACCUSATION_LEVEL`, 1e-3, or
            1 - confidence if smaller): a finding fails only on evidence that a correct
            training shows at most this often.
        context: ``optimizer``, ``loader``, ``epochs`` for an Opacus engine before training.
    """
    level = significance(confidence, alpha, where="one_run_audit")
    delta = check_real(
        "delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    findings: tuple[Finding, ...] = ()
    unsure: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if hasattr(scores, "observations") and hasattr(scores, "included"):
        canaries = scores
        if claim is None:
            claim, included = included, None
        if included is not None:
            raise ValueError(
                "one_run_audit(canaries, claim, delta=...): included comes from the canaries"
            )
        stated = _with_ledger(claim_from(claim, delta, **context), claim)
        stated, notes = _opacus_read(canaries, stated)
        sigma = _canary_sigma(canaries, stated)
        accuse = _accusation_level(findings_level, level)
        findings = _diagnostics(canaries, stated, accuse, sigma=sigma)
        findings, unsure, caveats = _observation_caveats(canaries, findings, sigma, accuse)
        notes = (*notes, *caveats)
        if family is not None:
            audit = _family_audit(
                canaries, stated, family, findings, delta=delta, alpha=level, guesses=guesses,
                seed=seed, cell=Cell(sampler, threat_model, attack), selection=selection,
                split_seed=split_seed, sigma=sigma,
            )
            return replace(audit, inconclusive=unsure, notes=notes)
        scores = canaries.scores(sigma=sigma, sampling_probability=stated.sample_rate)
        included = np.asarray(canaries.included, dtype=bool)
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
    stats = canary_statistics(
        scores_in, scores_out, _curve(stated), delta=delta, alpha=level, guesses=guesses,
        seed=seed,
    )
    result = _cell_result(stats, scores_in, scores_out, stated, Cell(sampler, threat_model, attack),
                          delta=delta, alpha=level, alpha_each=level)
    return DeployedAudit(
        result=result, claim=stated, scores_in=scores_in, scores_out=scores_out,
        findings=findings, inconclusive=unsure, notes=notes,
    )


def _accusation_level(findings_level: float | None, alpha: float) -> float:
    """The findings' family-wise level: ``findings_level``, else :data:`ACCUSATION_LEVEL` or the
    audit's alpha if smaller (an accusation never needs less evidence than the bound)."""
    if findings_level is None:
        return min(ACCUSATION_LEVEL, float(alpha))
    return check_real("findings_level", findings_level, minimum=0.0, maximum=1.0,
                      strict_minimum=True, strict_maximum=True)


def _cell_result(
    stats: OneRunStatistics, scores_in: np.ndarray, scores_out: np.ndarray,
    stated: DeployedClaim, cell: Cell, *, delta: float, alpha: float, alpha_each: float,
) -> OneRunCellResult:
    """The one-run cell's record: stated at 1 - ``alpha``, computed at ``alpha_each``."""
    return one_run_cell_result(
        stats,
        _roc(scores_in, scores_out, alpha),
        cell=cell,
        observation="deployed",
        trials_in=int(scores_in.size),
        trials_out=int(scores_out.size),
        delta=delta,
        alpha=alpha,
        confidence=Confidence(1 - alpha, "cell", alpha_each, 1),
        claim="deployed",
        claim_description=f"{stated.accountant}'s",
        claimed_epsilon=stated.epsilon,
        theory_upper_epsilon=None,
        theory_lower_epsilon=None,
        theory_upper_method=None,
        theory_lower_method=None,
    )


def _family_audit(
    canaries: Any, stated: DeployedClaim, family: ScoreFamily, findings: tuple[Finding, ...], *,
    delta: float, alpha: float, guesses: Any, seed: int, cell: Cell, selection: str,
    split_seed: int, sigma: float | None,
) -> DeployedAudit:
    """The canaries scored by every statistic of ``family`` the claim allows, one chosen
    soundly (:func:`audit.run.score_selection.choose_one_run`)."""
    y = np.asarray(canaries.observations, dtype=float)
    b = np.asarray(canaries.included, dtype=bool).ravel()
    if y.ndim != 2 or y.shape[0] != b.size:
        raise ValueError(
            f"canaries.observations has shape {y.shape} for {b.size} canaries; need (m, steps)"
        )
    score_context = ScoreContext(sigma=sigma, q=stated.sample_rate, reference=y)
    members = [s for s in family.statistics if s.applicable(score_context)]
    chosen_family = ScoreFamily(tuple(members)) if members else ScoreFamily().only(["total"])
    curve = _curve(stated)
    choice = choose_one_run(
        chosen_family.scores(y, score_context), b, curve, stated.epsilon, delta=delta,
        alpha=alpha, guesses=guesses, seed=seed, method=selection, split_seed=split_seed,
    )
    used = b[choice.used]
    s = choice.scores[choice.used]
    scores_in, scores_out = s[used], s[~used]
    result = _cell_result(choice.statistics, scores_in, scores_out, stated, cell, delta=delta,
                          alpha=alpha, alpha_each=choice.selection.alpha_each)
    return DeployedAudit(
        result=result, claim=stated, scores_in=scores_in, scores_out=scores_out,
        findings=findings, selection=choice.selection,
    )


def _with_ledger(stated: DeployedClaim, source: Any) -> DeployedClaim:
    """A dp_accounting claim completed with the ledger's composed steps and sigma."""
    ledger = getattr(source, "ledger", None)
    if ledger is None or stated.steps is not None:
        return stated
    c = composition(ledger)
    return replace(
        stated,
        steps=c.steps if c.steps else None,
        noise_multiplier=c.sigmas[0] if len(c.sigmas) == 1 else stated.noise_multiplier,
        sample_rate=c.rates[0] if len(c.rates) == 1 else stated.sample_rate,
    )


def _diagnostics(canaries: Any, claim: DeployedClaim, alpha: float,
                 sigma: float | None = None) -> tuple[Finding, ...]:
    """The diagnostics at family-wise level alpha (docs/design.md §14.5), where the claim
    states sigma and the canaries recorded their batches (else none).

    What the instrument recorded enables the optional ones (:class:`Observed`): the S step
    batches' sizes (distinct examples: an augmentation's copies of one example count once)
    and n = the wrapped dataset's rows (real + m canary slots) for
    ``batch_sizes``; the loader batches counted in steps (S + the batches no step took, each
    step's group of accumulated batches counting once) for ``batch_alignment``; C and the
    declared divisor b for ``noise_multiplier``'s causes."""
    y = canaries.observations
    m, steps = y.shape
    sigma = claim.noise_multiplier if sigma is None else sigma
    batches = list(getattr(canaries, "step_batches", None) or canaries.batches)
    if sigma is None or canaries.real is None or len(batches) < steps:
        return ()
    included = np.asarray(canaries.included, dtype=bool)
    mask = in_batch_mask(batches, int(canaries.real), m, steps)
    unstepped = getattr(canaries, "unstepped_batches", None)
    obs = Observed(
        y=y, in_batch=mask, included=included,
        batch_sizes=np.array([np.unique(np.asarray(b)).size for b in batches[:steps]],
                             dtype=np.int64),
        n=int(canaries.real) + int(m),
        batches_recorded=(len(canaries.batches) if unstepped is None
                          else steps + int(unstepped)),
        clip=None if getattr(canaries, "clip", None) is None else float(canaries.clip),
        divisor=getattr(canaries, "noise_divisor", None),
    )
    # a claim without subsampling (unsampled Gaussian mechanisms, e.g. one per epoch for a
    # shuffling loader) is compared with the participations of the most-used example
    participations = None
    if claim.sample_rate is None and claim.steps is not None:
        counts = np.bincount(np.concatenate([np.unique(np.asarray(b, dtype=np.int64))
                                             for b in batches[:steps]] or [np.zeros(0, int)]))
        participations = int(counts.max()) if counts.size else 0
    return diagnose(obs, sigma=float(sigma), q=claim.sample_rate, composed=claim.steps,
                    alpha=alpha, participations=participations)


#: the findings whose failure a post-processing of the privatized gradient before
#: ``optimizer.step()`` can cause in a correct training (measured: ``clip_grad_norm_`` on the
#: noisy gradient, momentum, EMA or a scaling written on ``p.grad``): each tests the noise's
#: absolute scale, law or independence across steps or coordinates, or the signal's size
POST_PROCESSING_SENSITIVE: tuple[str, ...] = (
    "noise_scale", "noise_law", "fresh_noise_steps", "fresh_noise_coordinates",
    "canary_signal",
)


def post_processing_floor(sigma: float) -> float:
    """The smallest noise multiplier a post-processing of one step's Gaussian mechanism can
    show, 1 / sqrt(exp(1 / sigma^2) - 1) (slightly below sigma: 2.926 at sigma = 3).

    A statistic f of the released y = s + N(0, sigma^2) (s = 1 IN, 0 OUT), processed by any
    map that does not see s, has (E_IN f - E_OUT f)^2 <= Var_OUT(f) chi^2(IN || OUT)
    (Cauchy-Schwarz), and chi^2 between the two Gaussians is exp(1 / sigma^2) - 1, which no
    post-processing increases (data processing); so signal / noise-std <= sqrt(exp(1/sigma^2)
    - 1). A noise multiplier estimated below this floor is not explained by post-processing
    (docs/design/deployed.md §14.3)."""
    return float(1.0 / np.sqrt(np.expm1(1.0 / sigma**2)))


def _status(finding: Finding, inconclusive: tuple[str, ...]) -> str:
    if not finding.passed:
        return "FAILED"
    return "inconclusive" if finding.name in inconclusive else "passed"


def _opacus_read(canaries: Any, stated: DeployedClaim) -> tuple[DeployedClaim, tuple[str, ...]]:
    """The claim completed with what the Opacus optimizer applies (sigma, where the claim
    states none), and sentences naming the values read from Opacus that a user gave
    differently (:class:`audit.deployed.instrument.OpacusSettings`)."""
    settings = getattr(canaries, "opacus_settings", None)
    if settings is None:
        return stated, ()
    notes = list(settings.notes())
    applied = settings.noise_multiplier
    if applied is not None:
        if stated.noise_multiplier is None:
            stated = replace(stated, noise_multiplier=applied)
            notes.append(f"sigma = {applied:.6g} read from Opacus's optimizer (the claim "
                         "states none)")
        elif not np.isclose(stated.noise_multiplier, applied, rtol=1e-6, atol=0.0):
            notes.append(f"the claim's sigma = {stated.noise_multiplier:.6g} disagrees with "
                         f"the noise multiplier Opacus applies, {applied:.6g} "
                         f"({settings.optimizer}.noise_multiplier): the findings test the "
                         "claim's")
    return stated, tuple(notes)


def _canary_sigma(canaries: Any, stated: DeployedClaim) -> float | None:
    """The noise's std in the canaries' unit: sigma (C / c under per-layer clipping, where the
    canary block's own clip c is the unit: ``canaries.clip_ratio``)."""
    sigma = stated.noise_multiplier
    if sigma is None:
        return None
    return float(sigma) * float(getattr(canaries, "clip_ratio", 1.0))


def _observation_caveats(
    canaries: Any, findings: tuple[Finding, ...], sigma: float | None, alpha: float
) -> tuple[tuple[Finding, ...], tuple[str, ...], tuple[str, ...]]:
    """(findings, the inconclusive ones' names, notes): where the privatized gradient was read.

    Opacus (read inside ``DPOptimizer`` after its noise) and a plain loop marked with
    ``canaries.privatized()``: the findings stand (a note counts the steps whose ``p.grad``
    changed between the mark and ``optimizer.step()``). A plain loop without the mark:
    ``p.grad`` at ``optimizer.step()`` is assumed to be the privatized gradient, and a failed
    finding a post-processing could cause (:data:`POST_PROCESSING_SENSITIVE`; ``fresh_noise_
    steps`` but for exact repeats, which no continuous post-processing makes;
    ``noise_multiplier`` unless the training's noise multiplier is below
    :func:`post_processing_floor` at the finding's level) becomes inconclusive: passed, not
    refuting, its message saying why."""
    point = getattr(canaries, "observed_at", None)
    notes: list[str] = []
    steps = int(np.shape(canaries.observations)[1])
    if point == "marked":
        changed = int(getattr(canaries, "transformed_steps", 0))
        notes.append("the privatized gradient was read where canaries.privatized() marks it"
                     + (f"; p.grad changed after the mark at {changed} of {steps} steps "
                        "(post-processing before optimizer.step(), not read)" if changed else ""))
        if any(not f.passed and f.name in ("noise_scale", "noise_multiplier") for f in findings):
            notes.append("check that canaries.privatized() comes after the noise is added (a "
                         "mark before it reads the noiseless sum)")
    if point == "opacus":
        notes.append("the privatized gradient was read inside Opacus's DPOptimizer, right after "
                     "its noise and division")
    if point != "step":
        return findings, (), tuple(notes)
    notes.append("the canaries read p.grad at optimizer.step(), assumed to be the privatized "
                 "gradient (a plain loop without canaries.privatized()); a post-processing "
                 "before the step (clip_grad_norm_, momentum, EMA) is read as part of it")
    why = ("inconclusive: p.grad at optimizer.step() was read as the privatized gradient (no "
           "canaries.privatized() line), and a post-processing of the privatized gradient "
           "before the step (clip_grad_norm_, momentum or EMA on p.grad, a rescaling) changes "
           "this law without any leak; mark the point with canaries.privatized() right after "
           "the noise is added to decide. Observed: ")
    out, unsure = [], []
    for f in findings:
        soft = not f.passed and f.refutes and (
            (f.name in POST_PROCESSING_SENSITIVE
             and not (f.name == "fresh_noise_steps" and f.steps))
            or (f.name == "noise_multiplier" and not _below_floor(canaries, sigma, f, alpha)))
        if soft:
            out.append(replace(f, passed=True, refutes=False, message=why + f.message))
            unsure.append(f.name)
        else:
            out.append(f)
    return tuple(out), tuple(unsure), tuple(notes)


def _below_floor(canaries: Any, sigma: float | None, finding: Finding, alpha: float) -> bool:
    """Whether ``noise_multiplier`` fails against :func:`post_processing_floor` of sigma too,
    at the finding's own level (then no post-processing explains it)."""
    if sigma is None:
        return False
    from audit.stats import diagnostics as law

    batches = list(getattr(canaries, "step_batches", None) or canaries.batches)
    y = np.asarray(canaries.observations, dtype=float)
    m, steps = y.shape
    if canaries.real is None or len(batches) < steps:
        return False
    obs = law.Observed(
        y=y, in_batch=law.in_batch_mask(batches, int(canaries.real), m, steps),
        included=np.asarray(canaries.included, dtype=bool),
        clip=getattr(canaries, "clip", None), divisor=getattr(canaries, "noise_divisor", None),
    )
    level = finding.level if finding.level > 0 else alpha / len(law.DIAGNOSTICS)
    floor = law._noise_multiplier(obs, law._noise(obs), post_processing_floor(sigma), level)
    return not floor.passed


def _roc(scores_in: np.ndarray, scores_out: np.ndarray, alpha: float) -> dict[str, object]:
    """:func:`roc_summary` at confidence 1 - ``alpha``, ``alpha`` kept bit for bit
    (:func:`audit.core.exact_confidence.exact_confidence`)."""
    return roc_summary(scores_in, scores_out, confidence=exact_confidence(alpha))
