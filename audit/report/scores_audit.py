"""Scores first: the audit of attack scores a user already has (issue 34 item 4).

``audit.audit_scores(scores_in, scores_out, delta=...)`` (and ``audit scores FILE``,
:mod:`audit.cli.scores`) computes, from one score per IN trial and one per OUT trial (higher =
"member"), the typed result of one cell, as ``audit run`` computes a cell of ``summary.json``
(:func:`audit.run.summary.cell_result`), without a spec, a mechanism or a theory:

- ``epsilon_lb``: a sound lower bound on eps at ``delta`` with probability >= ``confidence``
  (:mod:`audit.stats.binary`; threshold chosen soundly). By default
  (``threshold = "planned_ranks"``, :data:`audit.core.names.SCORES_THRESHOLD`) the rules are
  fixed by the trial counts alone: order statistics at ranks 1, 4, 16, ... (up to an eighth of
  the trials) on both tails, each a joint test at alpha / K, the bound the largest of the K and
  the verdict "violated" iff one refutes the claim (Bonferroni; every trial tested;
  :class:`audit.stats.thresholds.PlannedFamily`). With ``threshold = "planned"`` the rank is
  planned on a **pilot**: scores
  alone carry no theory curve to plan from, so, as a spec's cell without one does
  (:func:`audit.run.proof_report.planned_statements`) and as ``audit simulate`` does, a seeded
  tenth of each side (:func:`audit.stats.thresholds.take_pilot`, chosen by position, seeded)
  plans the rank and is left out of the test; the bound holds whatever the plan (docs/design.md
  §8.12), and it is :func:`audit.stats.binary.epsilon_lower_bound`'s with ``threshold="planned"``
  and the same pilot. ``split``, ``multisplit`` and
  ``bonferroni`` use every score as given;
- ``verdict`` (with ``claim``): ``violated`` when the curve test (FNR_hi < f_claim(FPR_hi) at a
  soundly chosen threshold) or the epsilon test (eps_lb > the claimed eps at delta) refutes the
  claim, each at ``confidence``, the verdict at 1 - 2 (1 - confidence) (Bonferroni,
  docs/design.md §9.1); without a claim there is no verdict (``None`` in the JSON);
- the whole-curve evidence (with a claim), the ROC estimates and the labelled estimates
  (Bayesian eps, bootstrap AUROC and TPR, GDP fit): estimates, not bounds (§8.13-§8.14).

A claim is an eps (the (eps, delta)-DP trade-off curve at ``delta``: f(a) = max(0, 1 - delta -
e^eps a, e^-eps (1 - delta - a)), Dong, Roth and Su 2022, Prop. 2.5), ``"EPS@DELTA"`` (eps at
another delta), ``"gdp:MU"`` (the mu-GDP curve G_mu), or any guarantee curve
(:class:`audit.theory.curve.TradeOffCurve` of kind ``upper`` or ``exact``).

The result is a :class:`ScoresCellResult`, a :class:`audit.run.results.CellResult` whose JSON
(:meth:`~audit.run.results.CellResult.to_json`) has the keys of a summary.json cell;
:func:`write_scores_report` writes ``report.md``, ``tradeoff.png``, ``result.json`` and
``cells.csv`` for it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from audit.core.confidence import significance
from audit.core.errors import AuditInputError
from audit.core.names import DEFAULT_THRESHOLD, SCORES_THRESHOLD
from audit.report.formatting import fmt, format_bound
from audit.report.multi_run import REPORT_FILE, cell_sentence, plot_tradeoff
from audit.run.claims import Claim
from audit.run.proof_report import (
    PLANNED_LABEL,
    PlannedStatements,
    curve_evidence,
)
from audit.run.proof_report import estimates as labelled_estimates
from audit.run.results import (
    SCHEMA_VERSION,
    THRESHOLD_TEXT,
    CellResult,
    CellTable,
    Confidence,
    VerdictTests,
)
from audit.run.spec import Cell
from audit.run.store import write_text_atomically
from audit.run.summary import verdict_tests
from audit.stats.binary import (
    EpsilonBound,
    Planned,
    Verdict,
    confidence_of,
    curve_epsilon,
    per_trial_scores,
    roc_summary,
    threshold_strategy,
)
from audit.stats.score_direction import ScoreDirection, oriented_scores, score_direction
from audit.stats.thresholds import (
    JointTest,
    PlannedThreshold,
    plan_family,
    plan_threshold,
    planned_epsilon_lower_bound,
    planned_verdict,
)
from audit.theory.curve import TradeOffCurve

__all__ = [
    "CELLS_FILE",
    "PLOT_FILE",
    "RESULT_FILE",
    "ScoresCellResult",
    "audit_scores",
    "out_folder",
    "render_scores_markdown",
    "scores_claim",
    "scores_summary",
    "verdict_line",
    "write_scores_report",
]

PLOT_FILE = "tradeoff.png"
RESULT_FILE = "result.json"
CELLS_FILE = "cells.csv"
"""The cell as one flat row (``audit run``'s cells.csv layout), beside result.json."""
NO_CLAIM = "no claim"
"""The verdict of scores audited without a claim: nothing was tested."""


@dataclass(frozen=True)
class ScoresCellResult(CellResult):
    """The result of given scores (module docstring): a :class:`audit.run.results.CellResult`
    without a mechanism (its theory fields None) and, without a claim, without a verdict.

    ``source`` says where the scores came from; ``direction``: the declared direction and the
    test of a reversed separation (:class:`audit.stats.score_direction.ScoreDirection`; a
    warning, never a change of direction); ``reduce``: the rule that made one score per trial
    of several (None: one was given); ``has_claim`` whether a claim was tested (without
    one, ``claim``/``claimed_epsilon``/``verdict``/``verdict_tests``/``evidence`` are None in the
    JSON and :attr:`verdict` is ``"no claim"``); ``epsilon_plan``/``epsilon_test``: the planned
    rank and joint test of the eps bound when ``threshold = "planned"`` (also in ``planned``
    when a claim was tested); ``claim_curve``: the claimed curve (for the plot; not in the JSON).
    """

    source: str = field(default="arrays", kw_only=True)
    direction: ScoreDirection | None = field(default=None, kw_only=True)
    reduce: str | None = field(default=None, kw_only=True)
    has_claim: bool = field(default=True, kw_only=True)
    epsilon_plan: PlannedThreshold | None = field(default=None, kw_only=True)
    epsilon_test: JointTest | None = field(default=None, kw_only=True)
    claim_curve: TradeOffCurve | None = field(default=None, kw_only=True, compare=False,
                                              repr=False)

    @property
    def verdict(self) -> str:
        """``violated``, ``consistent`` (which does not prove the claim) or ``no claim``."""
        return super().verdict if self.has_claim else NO_CLAIM

    @property
    def pilot(self) -> tuple[int, int]:
        """The IN and OUT trials a planned threshold's pilot took (left out of the test)."""
        plan = self.epsilon_plan
        return (0, 0) if plan is None else (plan.pilot_in, plan.pilot_out)

    def _entry(self) -> dict[str, object]:
        entry = super()._entry()
        # no sampler, threat model, attack or observation is known of given scores
        entry.update(cell=self.cell.attack, sampler=None, threat_model=None, attack=None,
                     observation=None)
        if not self.has_claim:
            entry.update(claim=None, claim_description=None, claimed_epsilon=None, verdict=None,
                         verdict_tests=None, evidence=None)
        if self.planned is None and self.epsilon_plan is not None and self.epsilon_test:
            entry["planned"] = {
                "label": PLANNED_LABEL, "source": self.epsilon_plan.source,
                "epsilon_lb": {"plan": self.epsilon_plan.to_dict(),
                               "test": self.epsilon_test.to_dict()},
                "verdict": None,
            }
        entry["source"] = self.source
        entry["higher_is_member"] = self.direction is None or self.direction.higher_is_member
        entry["direction"] = None if self.direction is None else self.direction.to_dict()
        entry["reduce"] = self.reduce
        return entry


def scores_claim(claim: float | str | TradeOffCurve, delta: float) -> Claim:
    """The :class:`audit.run.claims.Claim` that ``claim`` names (module docstring): an eps at
    ``delta``, ``"EPS@DELTA"``, ``"gdp:MU"`` or a guarantee curve; its eps at ``delta``.

    Raises:
        AuditInputError: a value that is none of these, a negative eps or mu, or a curve of
            kind ``lower`` or ``approximation`` (not a guarantee).
    """
    if isinstance(claim, TradeOffCurve):
        if claim.kind not in ("upper", "exact"):
            raise AuditInputError(
                f"claim: a curve of kind {claim.kind!r} is not a guarantee; give an 'upper' or "
                "'exact' curve", culprit="claim",
            )
        eps = curve_epsilon(claim, delta)
        return Claim(claim.short, f"the given curve's ({claim.method})", claim, eps)
    text = str(claim).strip()
    if text.lower().startswith("gdp:"):
        mu = _claim_number(text[4:], text, "mu")
        curve = TradeOffCurve.from_gdp(mu, sampler="any", threat_model="any", kind="upper",
                                       method=f"claimed {mu:g}-GDP (closed form)")
        return Claim(f"gdp:{mu:g}", f"a {mu:g}-GDP", curve, curve_epsilon(curve, delta))
    eps_text, _, delta_text = text.partition("@")
    eps = _claim_number(eps_text, text, "eps")
    at = _claim_number(delta_text, text, "delta") if delta_text else delta
    if not 0 <= at < 1:
        raise AuditInputError(f"claim={text!r}: delta {at:g} must be in [0, 1)", culprit="claim")
    curve = TradeOffCurve.from_privacy_profile(
        [eps], [at], sampler="any", threat_model="any", kind="upper",
        method=f"claimed ({eps:g}, {at:g})-DP",
    )
    name = f"{eps:g}" if at == delta else f"{eps:g}@{at:g}"
    return Claim(name, f"an explicit ({eps:g}, {at:g})-DP", curve, curve_epsilon(curve, delta))


def _claim_number(text: str, claim: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise AuditInputError(
            f"claim={claim!r}: {what} {text.strip()!r} is not a number >= 0; a claim is EPS "
            "(at --delta), EPS@DELTA or gdp:MU",
            culprit="claim",
        )
    return value


def _no_claim_verdict(bound: EpsilonBound) -> Verdict:
    """The box of the eps bound against the trivial curve f = 0, which every mechanism meets:
    never violated (what the plot marks when no claim was tested; not in the JSON)."""
    return Verdict(
        violated=False, threshold=bound.threshold, strategy=bound.strategy, alpha=bound.alpha,
        false_positives=bound.false_positives, false_negatives=bound.false_negatives,
        n_eval_in=bound.n_eval_in, n_eval_out=bound.n_eval_out, fpr_hi=bound.fpr_hi,
        fnr_hi=bound.fnr_hi, f_of_fpr_hi=0.0, alpha_per_rate=bound.alpha_per_rate,
    )


def _several_per_trial(*arrays: ArrayLike) -> bool:
    """Whether any array holds several values per trial (rows), so that ``reduce`` applied."""
    return any(np.ndim(a) > 1 and np.size(a) != np.shape(a)[0] for a in arrays)


def audit_scores(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    delta: float,
    confidence: float | None = None,
    claim: float | str | TradeOffCurve | None = None,
    threshold: str = SCORES_THRESHOLD,
    seed: int = 0,
    alpha: float | None = None,
    name: str = "scores",
    source: str = "arrays",
    estimates: bool = True,
    higher_is_member: bool = True,
    reduce: str | None = None,
) -> ScoresCellResult:
    """Audit the scores of IN and OUT trials: the typed result of one cell (module docstring).

    Args:
        scores_in: one score per IN trial (canary a member), shape (n,) or (n, 1); several
            values per trial (shape (n, k)) are refused unless ``reduce`` is given: each trial is
            one independent training.
        scores_out: one score per OUT trial, on the same scale.
        delta: the delta at which eps is bounded, in [0, 1).
        confidence: the probability that ``epsilon_lb`` (and each test of the verdict) holds, in
            (0, 1) (default 0.95; the statistics need 1 - confidence < 0.5).
        claim: None (no verdict), an eps at ``delta``, ``"EPS@DELTA"``, ``"gdp:MU"`` or a
            guarantee :class:`audit.theory.curve.TradeOffCurve` (:func:`scores_claim`).
        threshold: ``planned_ranks`` (default, :data:`audit.core.names.SCORES_THRESHOLD`: the
            ranks 1, 4, 16, ... on both tails fixed by the trial counts, each joint test at
            alpha / K, every trial tested), ``planned`` (a pilot of a tenth of each side plans
            the rank and is left out of the test), ``split``, ``multisplit`` or ``bonferroni``.
        seed: seeds the pilot and the split (an int >= 0); tied scores are counted against the
            claim, never broken at random (docs/results.md, "Tied scores").
        alpha: deprecated spelling of 1 - confidence.
        name: the cell's name (the file's, for the report).
        source: where the scores came from (for the report).
        estimates: compute the labelled estimates (Bayesian eps, bootstrap AUROC and TPR, GDP
            fit; about half the time at 1e5 trials a side); False: none (``estimates`` None).
        higher_is_member: the declared direction: True (default) when higher scores mean
            member, False for losses and other lower-is-member scores (negated before any
            statistic). A separation the other way than declared is reported as a warning
            (``direction``); the bound is always the declared direction's.
        reduce: how several values per trial (rows of a 2-D array) become the trial's score:
            ``"mean"``, ``"max"`` or ``"min"``; None (default) refuses them.

    Returns:
        :class:`ScoresCellResult`; ``to_json()`` gives the summary.json cell's keys.

    Raises:
        ValueError: empty scores or NaN, several values per trial without ``reduce`` (naming
            the shape), delta outside [0, 1), confidence outside (0.5, 1), an unknown threshold,
            too few scores for the pilot or the split, a bad claim (naming the argument).
    """
    level_alpha = significance(confidence, alpha, where="audit_scores")
    if not isinstance(higher_is_member, bool | np.bool_):
        raise ValueError(f"higher_is_member={higher_is_member!r} must be True or False")
    # one score per trial (several refused or reduced by the stated rule), oriented so that
    # higher = member for every statistic below
    s_in = oriented_scores(per_trial_scores("scores_in", scores_in, reduce), higher_is_member)
    s_out = oriented_scores(per_trial_scores("scores_out", scores_out, reduce), higher_is_member)
    strategy = threshold_strategy(threshold)
    claimed = None if claim is None else scores_claim(claim, delta)
    curve = None if claimed is None else claimed.curve
    planned: PlannedStatements | None = None
    eps_plan: PlannedThreshold | None = None
    eps_test: JointTest | None = None
    decision: Verdict | None = None
    if isinstance(strategy, Planned):
        # no theory curve: a pilot plans the rank, then leaves the test (docs/design.md §8.12),
        # taken from the scores as given, as epsilon_lower_bound(threshold="planned") without a
        # plan takes it
        taken = strategy.pilot(s_in, s_out, seed)  # take_pilot, or why a side is too small
        n_in, n_out = taken.test_in.size, taken.test_out.size
        eps_plan = plan_threshold(taken.curve, n_in, n_out, alpha=level_alpha, delta=delta,
                                  source="pilot", curve_name=taken.name, pilot=taken.sizes)
        tested, eps_test = planned_epsilon_lower_bound(
            taken.test_in, taken.test_out, eps_plan, delta=delta, alpha=level_alpha, seed=seed
        )
        # n_in/n_out count every trial, n_eval_in/n_eval_out the test's
        bound = replace(tested, n_in=int(s_in.size), n_out=int(s_out.size))
        if curve is not None:
            claim_plan = plan_threshold(taken.curve, n_in, n_out, alpha=level_alpha, claim=curve,
                                        source="pilot", curve_name=taken.name, pilot=taken.sizes)
            decision, claim_test = planned_verdict(
                taken.test_in, taken.test_out, curve, claim_plan, alpha=level_alpha, seed=seed
            )
            planned = PlannedStatements("pilot", eps_plan, eps_test, claim_plan, claim_test)
    else:
        bound = strategy.epsilon_bound(s_in, s_out, delta=delta, alpha=level_alpha, seed=seed)
        if curve is not None:
            decision = strategy.verdict(s_in, s_out, curve, alpha=level_alpha, seed=seed)
    if decision is None:
        decision = _no_claim_verdict(bound)
        tests = VerdictTests(curve=False, epsilon=False)
    else:
        assert claimed is not None  # a verdict is computed only for a claim
        tests = verdict_tests(decision.violated, bound.epsilon_lb, claimed.epsilon)
    return ScoresCellResult(
        cell=Cell("scores", "given", name),
        observation="scores",
        trials_in=int(s_in.size),
        trials_out=int(s_out.size),
        delta=float(delta),
        alpha=level_alpha,
        confidence=Confidence(confidence_of(level_alpha), "cell", level_alpha, 1),
        epsilon_lb=bound.epsilon_lb,
        epsilon_optimistic=bound.epsilon_optimistic,
        claim=NO_CLAIM if claimed is None else claimed.name,
        claim_description=NO_CLAIM if claimed is None else claimed.description,
        claimed_epsilon=math.inf if claimed is None else claimed.epsilon,
        theory_upper_epsilon=None,
        theory_lower_epsilon=None,
        theory_upper_method=None,
        theory_lower_method=None,
        violated=tests.violated,
        verdict_tests=tests,
        evidence=decision,
        bound=bound,
        roc=roc_summary(s_in, s_out, confidence=confidence_of(level_alpha)),
        plot=PLOT_FILE,
        planned=planned,
        curve_evidence=(
            None if curve is None
            else curve_evidence(s_in, s_out, curve, delta=delta, alpha=level_alpha)
        ),
        estimates=(
            labelled_estimates(s_in, s_out, bound, delta=delta, alpha=level_alpha, seed=seed)
            if estimates else None
        ),
        source=source,
        direction=score_direction(s_in, s_out, alpha=level_alpha,
                                  higher_is_member=bool(higher_is_member)),
        reduce=reduce if _several_per_trial(scores_in, scores_out) else None,
        has_claim=claimed is not None,
        epsilon_plan=eps_plan,
        epsilon_test=eps_test,
        claim_curve=curve,
    )


# --------------------------------------------------------------------------- report


def _trivial_claim(delta: float) -> Claim:
    """No claim, drawn as the trivial curve f = 0 that every mechanism meets."""
    curve = TradeOffCurve.from_privacy_profile(
        [math.inf], [0.0], sampler="any", threat_model="any", kind="upper",
        method="no claim (the trivial curve f = 0)",
    )
    return Claim(NO_CLAIM, NO_CLAIM, curve, math.inf)


def _rule_text(result: ScoresCellResult, plan: PlannedThreshold | None) -> str:
    """The threshold rule behind a statement, briefly: the planned order statistic, or the
    strategy's name."""
    strategy = str(getattr(result.bound, "strategy", DEFAULT_THRESHOLD))
    if plan is None:
        return f"{strategy} threshold"
    stat = (f"the {plan.rank}-th largest of {plan.n_out} OUT scores" if plan.side == "out"
            else f"the {plan.rank}-th smallest of {plan.n_in} IN scores")
    return f"planned rule: {stat}, joint test"


def verdict_line(result: ScoresCellResult) -> str:
    """The verdict and why (issue 41 item 7): which test refuted the claim, or that neither
    did, with the numbers, the level of each test and of the verdict, and the threshold rule.

    ``violated: eps_lb 9.1 > claim 8 (...)`` or ``violated: the claimed curve is refuted
    (...)``; ``consistent: eps_lb 0.42 <= claim 8 and the curve test did not refute it (...)``.
    """
    if not result.has_claim:
        return "verdict: none (no claim given; --claim EPS tests the (eps, delta)-DP curve)"
    alpha = result.alpha
    each, whole = f"{100 * confidence_of(alpha):g}%", f"{100 * confidence_of(2 * alpha):g}%"
    tests = result.verdict_tests
    claim = f"claim {fmt(result.claimed_epsilon)}"
    eps_part = (f"eps_lb {fmt(result.epsilon_lb, side='lower')} "
                f"{'>' if tests.epsilon else '<='} {claim} at delta = {result.delta:g}")
    evidence = result.evidence
    verdict_plan = None if result.planned is None else result.planned.verdict_plan
    if result.planned is not None:
        p_value = result.planned.verdict_test.p_value
        curve_part = (f"joint test of the claimed curve p = {p_value:.3g} "
                      f"{'<=' if tests.curve else '>'} {alpha:g}")
    elif getattr(result.bound, "strategy", None) == SCORES_THRESHOLD:
        size = plan_family(result.trials_in, result.trials_out).size
        curve_part = (f"joint tests of the claimed curve at {size} rules, each at "
                      f"{alpha:g} / {size}: {'at least one' if tests.curve else 'none'} refutes it")
    elif isinstance(evidence, Verdict):
        curve_part = (f"FNR_hi {fmt(evidence.fnr_hi)} {'<' if tests.curve else '>='} "
                      f"f_claim(FPR_hi) {fmt(evidence.f_of_fpr_hi)}")
    else:  # not made by audit_scores
        curve_part = "the curve test"
    eps_rule, curve_rule = _rule_text(result, result.epsilon_plan), _rule_text(result, verdict_plan)
    rules = (eps_rule if eps_rule == curve_rule
             else f"eps test: {eps_rule}; curve test: {curve_rule}")
    levels = f"{each} each test, {whole} the verdict; {rules}"
    if tests.violated:
        reasons = [part for part, hit in ((eps_part, tests.epsilon),
                                          (f"the claimed curve is refuted: {curve_part}",
                                           tests.curve)) if hit]
        return f"verdict: violated: {' and '.join(reasons)} ({levels})"
    return (f"verdict: consistent: {eps_part}, and the curve test did not refute it "
            f"({curve_part}) ({levels}); consistent does not prove the claim")


def scores_summary(result: ScoresCellResult) -> list[str]:
    """The lines ``audit scores`` prints (and report.md states): the trials, the declared
    direction, eps_lb with its confidence and threshold, the pilot, the optimistic eps, the
    verdict and why (:func:`verdict_line`), and a reversed separation's warning."""
    level = f"{100 * result.confidence.level:g}%"
    bound = result.bound
    strategy = getattr(bound, "strategy", "")
    direction = result.direction
    declared = "higher = member" if direction is None else direction.declared
    reduced = (f"; several values per trial, reduced to their {result.reduce}"
               if result.reduce else "")
    lines = [
        f"scores: {result.source}: {result.trials_in} IN and {result.trials_out} OUT trials, "
        f"{declared} (declared){reduced}",
        f"  eps lower bound (sound, {level} confidence, threshold {strategy}): "
        f"{format_bound(result.epsilon_lb, 'lower', digits=5)} at delta = {result.delta:g}",
    ]
    if result.epsilon_plan is not None:
        pilot_in, pilot_out = result.pilot
        lines.append(
            f"  threshold planned on a pilot: {pilot_in} IN + {pilot_out} OUT trials, a seeded "
            f"{pilot_in / max(result.trials_in, 1):.0%} of each side, planned the rank (no theory "
            "curve comes with scores) and are left out of the test"
        )
    if strategy == SCORES_THRESHOLD:
        lines.append(f"  threshold: {plan_family(result.trials_in, result.trials_out).describe()}")
    lines.append(f"  eps optimistic (not a bound): {fmt(result.epsilon_optimistic, 5)}")
    if result.has_claim:
        lines.append(
            f"  claim {result.claim_description} (eps = {fmt(result.claimed_epsilon)} at delta = "
            f"{result.delta:g})"
        )
    lines.append(f"  {verdict_line(result)}")
    warning = None if direction is None else direction.warning()
    if warning is not None:
        lines.append(f"  {warning}")
    return lines


def render_scores_markdown(result: ScoresCellResult) -> str:
    """report.md of given scores: where they came from, the statements, the plot."""
    level = f"{100 * result.confidence.level:g}%"
    strategy = str(getattr(result.bound, "strategy", DEFAULT_THRESHOLD))
    declared = "higher = member" if result.direction is None else result.direction.declared
    warning = None if result.direction is None else result.direction.warning()
    lines = [
        f"# Audit of the scores `{result.cell.attack}`",
        "",
        f"Scores read from {result.source}: {result.trials_in} IN and {result.trials_out} OUT "
        f"trials, {declared} (declared); δ = {result.delta:g}, confidence {level} for each "
        "statement alone. No mechanism comes with scores: no theory curve is drawn or compared.",
        "",
        *([f"**{warning}**", ""] if warning else []),
        "```",
        *(line for line in scores_summary(result) if warning is None or warning not in line),
        "```",
        "",
    ]
    if result.has_claim:
        lines += [f"- {cell_sentence(result)}", ""]
    else:
        lines += [
            f"- The attack shows ε ≥ {fmt(result.epsilon_lb, side='lower')} at δ = "
            f"{result.delta:g} ({level} confidence); no claim was given, so nothing was tested "
            "against one (`--claim EPS` tests the (ε, δ)-DP trade-off curve).",
            "",
        ]
    if result.epsilon_plan is not None:
        lines += [f"- The ε bound's {result.epsilon_plan.describe()}.", ""]
    lines += [
        "ε_lb is a lower bound at the stated confidence "
        f"({THRESHOLD_TEXT.get(strategy, strategy)}). The optimistic ε picks the best threshold "
        "on the same scores and is not a bound.",
        "",
        f"![trade-off]({result.plot})",
        "",
    ]
    return "\n".join(lines)


def out_folder(path: str | Path) -> Path:
    """The report folder ``path``, checked before any work: a folder or a new name in an
    existing folder (never created with its parents silently).

    Raises:
        AuditInputError: ``path`` is a file, or its parent folder does not exist.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise AuditInputError(f"--out={out}: a file, not a folder", culprit="--out")
    if not out.parent.is_dir():
        raise AuditInputError(
            f"--out={out}: the folder {out.parent} does not exist", culprit="--out",
            fix=f"create it first (mkdir -p {out.parent}) or give another folder",
        )
    return out


def _as_audited(
    result: ScoresCellResult, scores_in: ArrayLike, scores_out: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """The scores as :func:`audit_scores` audited them: reduced per trial by ``result.reduce``
    and oriented (higher = member) by the declared direction."""
    higher = True if result.direction is None else result.direction.higher_is_member
    return (oriented_scores(per_trial_scores("scores_in", scores_in, result.reduce), higher),
            oriented_scores(per_trial_scores("scores_out", scores_out, result.reduce), higher))


def write_scores_report(
    out_dir: str | Path,
    result: ScoresCellResult,
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    plots: bool = True,
) -> list[Path]:
    """Write ``report.md``, ``result.json`` (``schema_version`` then the cell's JSON, the keys
    of a summary.json cell), ``cells.csv`` (the cell as one flat row, the columns of
    ``audit run``'s cells.csv: :class:`audit.run.results.CellTable`) and, with ``plots``,
    ``tradeoff.png`` into ``out_dir`` (created if its parent exists); the paths written."""
    out = out_folder(out_dir)
    out.mkdir(exist_ok=True)
    written = []
    if plots:
        claim = (
            _trivial_claim(result.delta) if result.claim_curve is None
            else Claim(result.claim, result.claim_description, result.claim_curve,
                       result.claimed_epsilon)
        )
        # no mechanism, no theory curves
        # the scores as the statistics read them: one per trial, higher = member
        plot_tradeoff(out / result.plot, result, *_as_audited(result, scores_in, scores_out),
                      None, claim)
        written.append(out / result.plot)
    document = {"schema_version": SCHEMA_VERSION, **result.to_json()}
    write_text_atomically(out / RESULT_FILE, json.dumps(document, indent=2) + "\n")
    write_text_atomically(out / CELLS_FILE, CellTable.of([result]).to_csv())
    write_text_atomically(out / REPORT_FILE, render_scores_markdown(result))
    return [*written, out / RESULT_FILE, out / CELLS_FILE, out / REPORT_FILE]
