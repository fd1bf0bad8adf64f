"""From stored scores to the typed results of every cell (:mod:`audit.run.results`).

For every cell (sampler, threat model, attack) the stored scores give (docs/design.md §8-§10)

- ``epsilon_lb``: a sound lower bound on eps at ``delta``, confidence 1 - alpha
  (:func:`audit.stats.binary.epsilon_lower_bound`, the threshold chosen soundly: fixed before
  the scores are seen (``threshold = "planned"``, the default: :mod:`audit.run.proof_report`,
  §8.12), on a held-out half of the trials (``"split"``) or on a Bonferroni-corrected grid);
- ``epsilon_optimistic``: the naive maximum over all thresholds: optimistic, not a bound;
- ``verdict``: ``violated`` when, at a soundly chosen threshold, the attack's FNR upper
  bound lies below the claimed trade-off curve at its FPR upper bound
  (FNR_hi < f_claim(FPR_hi), :func:`audit.stats.binary.verdict`: the curve test) or when
  ``epsilon_lb`` exceeds the claimed eps at delta (the epsilon test, :func:`epsilon_refutes`),
  so that the verdict and eps_lb never contradict; else ``consistent``, which means only that
  neither test refutes the claim. Each test holds at 1 - alpha, the verdict at 1 - 2 alpha
  (Bonferroni); ``verdict_tests`` says which refuted (docs/design.md §9.1). A multi-run audit of
  a script whose trainings return canary records also runs the findings
  (:func:`audit.run.multi_run_findings.key_findings`, family-wise at
  :func:`audit.run.multi_run_findings.findings_level`, 1e-3 by default): a failed
  finding that refutes the claimed mechanism makes every cell of its training key ``violated``
  whatever the epsilon says (``verdict_tests.findings``, its ``reason``; the eps numbers
  unchanged), and summary.json lists every finding under ``findings``
  (docs/design/multi-run-diagnostics.md); the pre-flight's findings (``replay``,
  ``unit_of_privacy``: :mod:`audit.run.preflight`, written by ``audit run`` before the
  trainings) join their key's, a failed replay violating the key's cells likewise;
- ``confidence``: what 1 - alpha covers: this cell alone (``confidence = "cell"``, the default)
  or every cell of the report at once (``"family"``: by Bonferroni's inequality each of the m
  cells is computed at alpha / m, so P(any eps_lb is wrong) <= alpha, and likewise for the
  verdicts);

beside the eps of the cell's theoretical curves (``theory_upper_epsilon``: a guarantee;
``theory_lower_epsilon``: achieved by a known pair of datasets; :func:`audit.theory.bounds_for`)
and of the claim (:mod:`audit.run.claims`). A one-run cell's statistics are
:mod:`audit.stats.one_run`'s (:func:`one_run_statistics`).

Stored scores are read only if their fingerprint (:mod:`audit.run.fingerprint`) matches the spec
and the code running now; stale ones are rescored from valid shards or refused (a ValueError
naming what changed), never mixed; a damaged score file is moved to ``<run>/damaged/`` and
rescored. Complete scores of one older version of the code, in a folder without shards (a
committed run), rebuild the results as they are, and say so (:func:`older_scores_version`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from audit.core.errors import DamagedFileError
from audit.core.exact_confidence import exact_confidence
from audit.core.findings import Finding
from audit.core.mechanism import Mechanism
from audit.run.claims import cell_bounds, claim_for, curve_epsilon
from audit.run.fingerprint import changes, encode, scores_fingerprint, shard_fingerprint
from audit.run.multi_run_findings import findings_level, key_findings, refuting
from audit.run.preflight import joined, preflight_alpha, preflight_findings
from audit.run.proof_report import (
    Refusal,
    curve_evidence,
    estimates,
    planned_statements,
)
from audit.run.results import (
    AuditResult,
    CellFields,
    CellInputs,
    CellResult,
    Confidence,
    ManyCanaries,
    OneRunCellResult,
    RunRecord,
    ScoresVersion,
    VerdictTests,
    accuracy_file,
    jsonable,
    tradeoff_file,
)
from audit.run.scoring import resolve_attacks, score_key
from audit.run.spec import AuditSpec, Cell
from audit.run.store import (
    RUN_FILE,
    SCORES_DIR,
    SHARDS_DIR,
    Fingerprint,
    load_scores,
    quarantine,
    stored_fingerprint,
    verify,
    write_text_atomically,
)
from audit.sampling import canaries_independent
from audit.stats.binary import EpsilonBound, Planned, Verdict, roc_summary, threshold_strategy
from audit.stats.curve_evidence import CurveVerdict
from audit.stats.many_canaries import dependent_epsilon_lower_bound, dependent_verdict
from audit.stats.one_run import (
    OneRunBound,
    OneRunVerdict,
    candidate_guesses,
    count_correct,
    fdp_epsilon_lb,
    one_run_epsilon_lb,
    one_run_verdict,
)
from audit.stats.one_run_gdp import OneRunGdpBound, one_run_gdp_lower_bound
from audit.stats.score_files import sorted_scores
from audit.stats.sequential import SequentialVerdict
from audit.stats.sequential_audit import (
    SEQUENTIAL_BAND_REFUSAL,
    SEQUENTIAL_ESTIMATES_LABEL,
    SequentialBound,
    sequential_evidence,
    sequential_outcome,
    sequential_roc,
)
from audit.theory import Bounds
from audit.theory.curve import TradeOffCurve, gdp_epsilon

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the annotations are never evaluated
    from typing_extensions import Unpack

__all__ = [
    "CELLS_FILE",
    "SUMMARY_FILE",
    "FindingsAuditResult",
    "FindingsVerdictTests",
    "canary_scores",
    "canary_statistics",
    "cell_result",
    "epsilon_refutes",
    "older_scores_version",
    "one_run_cell_result",
    "one_run_statistics",
    "summarize",
    "verdict_tests",
    "with_findings",
    "write_summary",
]

SUMMARY_FILE = "summary.json"
CELLS_FILE = "cells.csv"
"""Beside summary.json: its cells flattened, one row per cell (:meth:`AuditResult.cell_table`)."""


@dataclass(frozen=True)
class FindingsVerdictTests(VerdictTests):
    """A multi-run cell's verdict tests with the run's findings beside the two score tests
    (docs/design/multi-run-diagnostics.md §16.4): ``findings`` is True when a failed finding of
    the cell's training key refutes the claimed mechanism
    (:func:`audit.run.multi_run_findings.refuting`), ``reason`` says which and what was
    observed. The cell is violated when any of
    the three refutes; the findings hold at family-wise level ``findings_alpha`` over the run, so
    a correct training is wrongly violated with probability at most 2 alpha + findings_alpha
    (Bonferroni over the three)."""

    findings: bool = False
    reason: str | None = None
    findings_alpha: float = 0.0
    refuted: tuple[str, ...] = ()
    """The names of the refuting findings (in ``reason``, with their messages)."""

    @property
    def violated(self) -> bool:
        """Whether the curve test, the epsilon test or a refuting finding refutes the claim."""
        return self.curve or self.epsilon or self.findings

    def to_json(self) -> dict[str, object]:
        return {"curve": self.curve, "epsilon": self.epsilon, "findings": self.findings,
                "level": self.level, "reason": self.reason}


@dataclass(frozen=True)
class FindingsAuditResult(AuditResult):
    """:class:`AuditResult` of a multi-run audit whose trainings returned canary records: also
    the run's findings by training key name (summary.json's ``findings``, before ``cells``: one
    :class:`audit.core.findings.Finding` record each, with its ``training`` key)."""

    findings: Mapping[str, tuple[Finding, ...]] = field(default_factory=dict)

    def finding_records(self) -> list[dict[str, object]]:
        """summary.json's ``findings``: every finding's fields and its ``training`` key name."""
        return [{**f.to_dict(), "training": key}
                for key, found in self.findings.items() for f in found]

    def to_json(self) -> dict[str, object]:
        data = super().to_json()
        cells = data.pop("cells")
        return {**data, "findings": jsonable(self.finding_records()), "cells": cells}


def _findings_level(cell_alpha: float, findings_alpha: float) -> str:
    """The level of a verdict that is the union of the two score tests and the findings."""
    total = 2 * cell_alpha + findings_alpha
    return (
        f"each score test at 1 - alpha = {1 - cell_alpha:g}, the multi-run findings at "
        f"family-wise 1 - {findings_alpha:g} over the run; violated when any refutes: "
        f"{1 - total:g} (Bonferroni over the three)"
    )


def with_findings(
    result: AuditResult, findings: Mapping[str, tuple[Finding, ...]], *, alpha: float
) -> AuditResult:
    """``result`` with the run's findings (by training key name, at family-wise level
    ``alpha``): every cell of a key with findings gets :class:`FindingsVerdictTests`, and is
    ``violated`` when one of them refutes the claimed mechanism (the reason names them; the eps
    numbers are unchanged); ``result`` itself when there are no findings."""
    if not findings:
        return result
    cells = []
    for cell in result.cells:
        found = findings.get(cell.cell.training.name)
        if found is None:
            cells.append(cell)
            continue
        refuted = refuting(found)
        reason = None if not refuted else (
            f"{len(refuted)} of the {len(found)} multi-run findings refute the claimed mechanism "
            f"at family-wise confidence {1 - alpha:g}: "
            + "; ".join(f"{f.name}: {f.message}" for f in refuted)
        )
        tests = FindingsVerdictTests(
            curve=cell.verdict_tests.curve, epsilon=cell.verdict_tests.epsilon,
            level=_findings_level(cell.alpha, alpha), findings=bool(refuted), reason=reason,
            findings_alpha=alpha, refuted=tuple(f.name for f in refuted),
        )
        cells.append(replace(cell, violated=tests.violated, verdict_tests=tests))
    fields_of = {f.name: getattr(result, f.name) for f in dataclass_fields(AuditResult)}
    fields_of["cells"] = tuple(cells)
    return FindingsAuditResult(**fields_of, findings=dict(findings))


def _cells_with_scores(spec: AuditSpec, run_dir: Path) -> list[tuple[Cell, np.ndarray, np.ndarray]]:
    """Every cell with its stored scores, only if they carry the fingerprint of ``spec`` and
    the code running now (:mod:`audit.run.fingerprint`); a training key whose scores are missing or
    stale is rescored from its shards when they are all on disk with that fingerprint, and
    otherwise refused with a ValueError naming what is missing or what changed."""
    if not (run_dir / SCORES_DIR).is_dir() and not (run_dir / SHARDS_DIR).is_dir():
        raise ValueError(
            f"{run_dir} holds no stored scores ({SCORES_DIR}/) and no shards ({SHARDS_DIR}/) "
            "(shards are never "
            f"kept in git, nor the scores of large runs); run `audit run {run_dir}` to compute them"
        )
    current = scores_fingerprint(spec)
    out = []
    for key in spec.training_keys():
        cells = [cell for cell, _ in resolve_attacks(spec, key)]
        paths = [run_dir / SCORES_DIR / f"{c.name}.npz" for c in cells]
        stamps = {p: _fingerprint_or_quarantine(p, run_dir) for p in paths if p.exists()}
        # not moved aside
        stale = {p: changes(stamp, current) for p, stamp in stamps.items() if p.exists()}
        if len(stale) < len(paths) or any(stale.values()):
            try:
                score_key(spec, run_dir, key)  # only from shards of the current fingerprint
            except ValueError as error:
                if stale and any(stale.values()) and not (run_dir / SHARDS_DIR).is_dir():
                    path, changed = next((p, c) for p, c in stale.items() if c)
                    raise ValueError(
                        f"{path}: scores computed by another version ({'; '.join(changed)}) and "
                        "no shards "
                        f"to rescore from; run `audit run {run_dir}` to recompute them"
                    ) from None
                raise error from None
        out += [(cell, *_stored_scores(spec, run_dir, cell)) for cell in cells]
    return out


def older_scores_version(spec: AuditSpec, run_dir: Path) -> ScoresVersion | None:
    """The version of the stored scores when they can rebuild the report though the code
    changed since (docs/design.md §15.5): every cell's score file is there and readable, all carry
    one and the same fingerprint, it differs from the current one in code only (package version,
    harness source, engine routes, implementation source: never a spec value, never a missing
    fingerprint), and the run folder holds no shards (a committed run: its shards are not kept;
    where shards are, ``audit run`` resumes or, across versions, refuses them). Else None (the
    scores are current, or must be recomputed). ``audit run`` never resumes across versions."""
    current = scores_fingerprint(spec)
    paths = [run_dir / SCORES_DIR / f"{cell.name}.npz" for key in spec.training_keys()
             for cell, _ in resolve_attacks(spec, key)]
    if not paths or not all(path.exists() for path in paths):
        return None
    stamps = [_fingerprint_or_quarantine(path, run_dir) for path in paths]
    if not all(path.exists() for path in paths) or any(stamp is None for stamp in stamps):
        return None
    known = [stamp for stamp in stamps if stamp is not None]  # all of them (checked above)
    if len({encode(stamp) for stamp in known}) != 1:  # two versions: never mixed
        return None
    changed = changes(known[0], current)
    if not changed or any(item.startswith("spec key") for item in changed):
        return None
    if any((run_dir / SHARDS_DIR).glob("*.npz")):  # shards: resume or recompute them (`audit run`)
        return None
    return ScoresVersion.of(known[0], changed)


def _fingerprint_or_quarantine(path: Path, run_dir: Path) -> Fingerprint | None:
    """The fingerprint of the score file ``path``; a damaged one (:func:`audit.run.store.verify`)
    is moved aside and None returned when it is gone, so that it is rescored from the shards."""
    try:
        verify(path)
        return stored_fingerprint(path)
    except DamagedFileError as error:
        quarantine(path, run_dir, error)
        return None


def _stored_scores(spec: AuditSpec, run_dir: Path, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The stored (scores_in, scores_out) of ``cell``, sorted on disk and memory-mapped
    (:mod:`audit.stats.score_files`: memory bounded whatever the trial count, statistics
    bit-identical); in memory for a one-run audit, dependent canaries or a sequential audit, whose
    statistics read the scores in their order."""
    path = run_dir / SCORES_DIR / f"{cell.name}.npz"
    # training by training (dependent canaries, docs/design.md §8.17), shard by shard (§8.18)
    dependent = spec.evidence.canaries_per_training > 1 and not canaries_independent(cell.sampler)
    in_order = dependent or spec.evidence.stop is not None
    if spec.kind.one_run or in_order or not path.exists():
        return load_scores(run_dir, cell)
    return sorted_scores(path, "scores_in"), sorted_scores(path, "scores_out")


def epsilon_refutes(epsilon_lb: float, claimed_epsilon: float | None) -> bool:
    """Whether eps_lb (at delta, confidence 1 - alpha) exceeds the claimed eps at the same delta.

    Then the claim is refuted by the eps bound's own test: eps_lb > eps means, at the bound's
    threshold, FNR_hi < 1 - delta - e^eps FPR_hi or FNR_hi < e^-eps (1 - delta - FPR_hi), and
    every curve that is (eps, delta)-DP lies above both lines (Dong, Roth, Su 2022, Prop. 2.5),
    so FNR_hi < f(FPR_hi): a refutation of the claimed curve f at confidence 1 - alpha.
    """
    return isinstance(claimed_epsilon, int | float) and bool(epsilon_lb > claimed_epsilon)


def verdict_tests(
    curve_refutes: bool, epsilon_lb: float, claimed_epsilon: float | None
) -> VerdictTests:
    """The two tests behind a cell's verdict (docs/design.md §9.1): ``curve`` (the verdict's
    test of the claimed curve), ``epsilon`` (eps_lb > the claimed eps at delta,
    :func:`epsilon_refutes`); the cell is violated when either refutes the claim, so that the
    verdict and eps_lb never contradict. Each test alone holds at 1 - alpha; the verdict, a
    union of the two on the same scores, at 1 - 2 alpha (Bonferroni)."""
    return VerdictTests(
        curve=bool(curve_refutes), epsilon=epsilon_refutes(epsilon_lb, claimed_epsilon)
    )


def cell_result(
    spec: AuditSpec,
    cell: Cell,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    theory: dict[Mechanism, Bounds],
    *,
    cells: int = 1,
) -> CellResult:
    """The result of one cell from its scores (module docstring).

    ``theory`` caches :func:`audit.theory.bounds_for` by mechanism. ``cells``: the number of
    cells of the report; with ``confidence = "family"`` the cell's eps_lb and verdict are
    computed at alpha / cells (:meth:`AuditSpec.cell_alpha`), stated in its ``confidence``
    (and its ``alpha`` is that per-cell alpha).
    """
    mechanism = spec.mechanism(cell.training)
    bounds = cell_bounds(mechanism, theory)
    claim = claim_for(spec, mechanism, theory)
    alpha, delta = spec.cell_alpha(cells), spec.claim.delta
    upper, lower = bounds.upper, getattr(bounds, "lower", None)
    shared = CellFields(  # the fields of every cell, multi-run or one-run
        cell=cell,
        observation=spec.experiment.observation,
        trials_in=int(np.size(scores_in)),
        trials_out=int(np.size(scores_out)),
        delta=delta,
        alpha=alpha,
        confidence=Confidence.of(spec, cells),
        claim=claim.name,
        claim_description=claim.description,
        claimed_epsilon=claim.epsilon,
        theory_upper_epsilon=curve_epsilon(upper, delta),
        theory_lower_epsilon=curve_epsilon(lower, delta),
        theory_upper_method=upper.method if upper is not None else None,
        theory_lower_method=lower.method if lower is not None else None,
    )
    if spec.kind.one_run:  # the canaries' scores: one-run statistics
        # One run's canaries are not independent trials (§8.8): no multi-run bound, plan, curve
        # band or estimate (each assumes independent trials) is computed or written for them.
        one_run = one_run_statistics(spec, scores_in, scores_out, claim.curve, alpha=alpha)
        roc = _roc(scores_in, scores_out, spec.claim.alpha)
        return one_run_cell_result(one_run, roc, **shared)
    strategy, seed = threshold_strategy(spec.claim.threshold), spec.experiment.seed
    k = spec.evidence.canaries_per_training
    independent = k == 1 or canaries_independent(cell.sampler)
    bound: EpsilonBound | SequentialBound
    decision: Verdict | SequentialVerdict
    planned = None
    if independent and isinstance(strategy, Planned):  # the plan's joint tests (§8.12)
        bound, decision, planned = planned_statements(
            spec, cell, mechanism, lower, claim.curve, scores_in, scores_out, alpha,
            strategy=strategy,
        )
    elif independent:  # k independent canaries per training are k trials (docs/design.md §8.17)
        bound = strategy.epsilon_bound(scores_in, scores_out, delta=delta, alpha=alpha, seed=seed)
        decision = strategy.verdict(scores_in, scores_out, claim.curve, alpha=alpha, seed=seed)
    else:  # dependent canaries: bounds on the per-training error fractions
        bound = dependent_epsilon_lower_bound(
            scores_in,
            scores_out,
            canaries=k,
            delta=delta,
            confidence=exact_confidence(alpha),
            threshold=strategy,
            seed=seed,
        )
        decision = dependent_verdict(scores_in, scores_out, claim.curve,
                                     confidence=exact_confidence(alpha), canaries=k,
                                     threshold=strategy, seed=seed)
    # The curve band and the estimates assume independent trials: written only where they are
    # (a sequential cell's band is refused below).
    band: CurveVerdict | Refusal | None = None
    if independent and spec.evidence.stop is None:
        band = curve_evidence(scores_in, scores_out, claim.curve, delta=delta, alpha=alpha)
    # docs/design.md §8.12-§8.14
    estimated = (
        estimates(scores_in, scores_out, bound, delta=delta, alpha=alpha, seed=seed)
        if independent and isinstance(bound, EpsilonBound)
        else None
    )
    optimistic, epsilon_lb = bound.epsilon_optimistic, bound.epsilon_lb
    sequential = None
    if spec.evidence.stop is not None:  # anytime-valid verdict and eps_lb (docs/design.md §8.18)
        confidence = exact_confidence(alpha)  # alpha bit for bit
        outcome = sequential_outcome(
            scores_in, scores_out, claim.curve, shard_size=spec.evidence.shard_size, canaries=k,
            independent=independent, confidence=confidence, delta=delta,
        )
        assert spec.evidence.max_trials is not None  # set with stop (the spec's check)
        sequential = sequential_evidence(outcome, max_trials=spec.evidence.max_trials)
        decision, epsilon_lb = outcome.verdict, outcome.verdict.epsilon_lb
        bound = SequentialBound(epsilon_lb)
        planned = None
        # what holds at a stopping time only, or labelled as not anytime-valid (§8.18): the band
        # would be a fixed-size statement at a data-dependent size
        if independent:
            band = Refusal(SEQUENTIAL_BAND_REFUSAL)
        if estimated is not None:
            estimated = replace(estimated, label=SEQUENTIAL_ESTIMATES_LABEL)
    many = None if k == 1 else ManyCanaries(
        canaries_per_training=k, trainings_in=int(np.size(scores_in)) // k,
        trainings_out=int(np.size(scores_out)) // k, independent=independent,
    )
    roc_scores = (scores_in, scores_out) if independent else _first_canary(scores_in, scores_out, k)
    roc = _roc(*roc_scores, spec.claim.alpha)
    # The verdict and eps_lb never contradict (docs/design.md §9.1): either test refutes.
    tests = verdict_tests(decision.violated, epsilon_lb, claim.epsilon)
    return CellResult(
        **shared,
        roc=roc if sequential is None else sequential_roc(roc),
        epsilon_lb=epsilon_lb,
        epsilon_optimistic=optimistic,
        violated=tests.violated,
        verdict_tests=tests,
        evidence=decision,
        bound=bound,
        plot=tradeoff_file(cell.name),
        many_canaries=many,
        sequential=sequential,
        planned=planned,
        curve_evidence=band,
        estimates=estimated,
    )


def _roc(scores_in: np.ndarray, scores_out: np.ndarray, alpha: float) -> dict[str, object]:
    """:func:`audit.stats.binary.roc_summary` at confidence 1 - ``alpha``, ``alpha`` kept bit for
    bit (:func:`audit.core.exact_confidence.exact_confidence`)."""
    return roc_summary(scores_in, scores_out, confidence=exact_confidence(alpha))


def _first_canary(
    scores_in: np.ndarray, scores_out: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each training's first canary only: one independent score per training (dependent
    canaries)."""
    return np.asarray(scores_in)[::k], np.asarray(scores_out)[::k]


def canary_scores(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One run's canaries: (scores, included), the IN canaries first.

    Among tied scores the stable ranking puts IN canaries lowest, so ties are broken against
    the auditor (never more correct guesses than a bit-blind tie-break)."""
    scores = np.concatenate([np.asarray(scores_in, float), np.asarray(scores_out, float)])
    included = np.concatenate(
        [np.ones(np.size(scores_in), bool), np.zeros(np.size(scores_out), bool)]
    )
    return scores, included


@dataclass(frozen=True)
class OneRunStatistics:
    """One run's statistics of a cell (docs/design.md §8.8-§8.11): the sound bound (f-DP
    recursion with the (eps, delta) curve, the rule chosen soundly), the verdict against the
    claimed curve, the best candidate rule's bound (not corrected for the choice: optimistic,
    not a bound) and the number m of canaries."""

    bound: OneRunBound
    verdict: OneRunVerdict
    epsilon_optimistic: float
    canaries: int
    gdp: OneRunGdpBound
    """The strongest mu-GDP claim refuted, the rule chosen as the bound's (§8.19)."""

    def gdp_epsilon(self, delta: float) -> float | None:
        """eps at ``delta`` of mu_lb-GDP, None when mu_lb = 0 (an estimate that assumes the
        implementation's curve is Gaussian, not a bound: §8.19)."""
        mu = self.gdp.mu_lb
        return float(gdp_epsilon(delta, mu)) if mu > 0 else None


def one_run_cell_result(
    one_run: OneRunStatistics, roc: dict[str, object], **shared: Unpack[CellFields]
) -> OneRunCellResult:
    """A one-run cell's result from its statistics (§8.8-§8.11, §8.19): the verdict is the
    curve test and eps_lb the one-run bound; ``shared`` the fields of every cell (``cell``,
    ``delta``, ``claimed_epsilon``, ...: what :func:`cell_result` and a deployed training's
    audit, §14.5, know of the cell)."""
    bound = one_run.bound
    tests = verdict_tests(one_run.verdict.violated, bound.epsilon_lb, shared["claimed_epsilon"])
    return OneRunCellResult(
        **shared,
        roc=roc,
        epsilon_lb=bound.epsilon_lb,
        epsilon_optimistic=one_run.epsilon_optimistic,
        violated=tests.violated,
        verdict_tests=tests,
        evidence=one_run.verdict,
        bound=bound,
        plot=accuracy_file(shared["cell"].name),
        canaries=one_run.canaries,
        guesses=(bound.k_plus, bound.k_minus),
        correct=bound.correct,
        gdp=one_run.gdp,
        gdp_epsilon=one_run.gdp_epsilon(shared["delta"]),
    )


def one_run_statistics(
    spec: AuditSpec,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    claimed_curve: TradeOffCurve,
    *,
    alpha: float,
) -> OneRunStatistics:
    """:class:`OneRunStatistics` of one run's canary scores at ``alpha`` (the cell's), with the
    spec's delta, guesses and seed (:mod:`audit.stats.one_run`)."""
    return canary_statistics(
        scores_in,
        scores_out,
        claimed_curve,
        delta=spec.claim.delta,
        alpha=alpha,
        guesses=spec.one_run.guesses,
        seed=spec.experiment.seed,
    )


def canary_statistics(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    claimed_curve: TradeOffCurve,
    *,
    delta: float,
    alpha: float,
    guesses: str | tuple[int, int] | list[int],
    seed: int,
) -> OneRunStatistics:
    """:class:`OneRunStatistics` of one run's canary scores (the IN canaries' and the OUT
    canaries'), without a spec: also what a deployed training's audit computes (§14.5)."""
    scores, included = canary_scores(scores_in, scores_out)
    confidence = exact_confidence(alpha)  # alpha bit for bit
    bound = one_run_epsilon_lb(
        scores, included, delta=delta, confidence=confidence, guesses=guesses,
        method="fdp", seed=seed,
    )
    decision = one_run_verdict(scores, included, claimed_curve, confidence=confidence,
                               guesses=guesses, seed=seed)
    pairs = candidate_guesses(scores.size)
    counts = [count_correct(scores, included, kp, km) for kp, km in pairs]
    optimistic = fdp_epsilon_lb(
        scores.size,
        [c.guesses for c in counts],
        [c.correct for c in counts],
        delta=delta,
        alpha=alpha,
    )
    gdp = one_run_gdp_lower_bound(
        scores, included, confidence=confidence, guesses=guesses, seed=seed
    )
    return OneRunStatistics(bound, decision, float(np.max(optimistic)), int(scores.size), gdp)


def summarize(spec: AuditSpec, run_dir: str | Path) -> AuditResult:
    """The result of every cell, from the stored scores (scoring first any training key whose
    scores are missing or stale), with the spec, the shard fingerprint and run.json; from the
    complete scores of one older version of the code where :func:`older_scores_version` allows
    it, saying so (the result's ``scores_version``). A multi-run audit whose trainings returned
    canary records gets its findings (:func:`with_findings`: a :class:`FindingsAuditResult`, a
    refuting finding makes its key's cells ``violated``)."""
    run_dir = Path(run_dir)
    run = RunRecord.read(run_dir / RUN_FILE)
    if run is not None and run.trials_used_per_side and spec.trials == run.max_trials:
        # the last run was sequential (stop = "decided" or --until-decided, docs/design.md §8.18):
        # its verdicts are those of the shards it used
        spec = spec.until_decided().with_trials_used(run.trials_used_per_side)
    theory: dict[Mechanism, Bounds] = {}
    results, inputs = [], {}
    older = older_scores_version(spec, run_dir)
    if older is None:
        scored = _cells_with_scores(spec, run_dir)
    else:  # complete scores of one older version: used as they are, and said so
        scored = [(cell, *_stored_scores(spec, run_dir, cell)) for key in spec.training_keys()
                  for cell, _ in resolve_attacks(spec, key)]
    for cell, scores_in, scores_out in scored:
        results.append(cell_result(spec, cell, scores_in, scores_out, theory, cells=len(scored)))
        mechanism = spec.mechanism(cell.training)
        inputs[cell.name] = CellInputs(
            scores_in,
            scores_out,
            cell_bounds(mechanism, theory),
            claim_for(spec, mechanism, theory),
        )
    result = AuditResult(
        spec=spec,
        confidence=Confidence.of(spec, len(scored)),
        fingerprint={k: v for k, v in shard_fingerprint(spec).items() if k != "spec"},
        run=run,
        cells=tuple(results),
        scores_version=older,
        inputs=inputs,
    )
    if older is not None:  # a committed run: no shards, no canary records
        return result
    # the multi-run findings (a script's canary records) and the pre-flight's (the replay and the
    # unit of privacy, audit.run.preflight): a refuting one violates its key's cells
    before = preflight_findings(spec, run_dir)
    alpha = findings_level(spec) + preflight_alpha(before)
    return with_findings(result, joined(key_findings(spec, run_dir), before), alpha=alpha)


def write_summary(run_dir: str | Path, result: AuditResult) -> Path:
    """Write ``summary.json`` (:meth:`AuditResult.to_json`) and, beside it, ``cells.csv`` (the
    same cells flattened, :meth:`AuditResult.cell_table`) into ``run_dir``, each atomically;
    the path of summary.json."""
    path = Path(run_dir) / SUMMARY_FILE
    write_text_atomically(path, json.dumps(result.to_json(), indent=2) + "\n")
    write_text_atomically(path.with_name(CELLS_FILE), result.cell_table().to_csv())
    return path
