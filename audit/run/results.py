"""The typed results of an audit: one frozen record per cell, and the audit's record around them.

The run stage computes them from the stored scores (:mod:`audit.run.summary`); ``summary.json``
is their :meth:`AuditResult.to_json`, and ``report.md``, the plots and the CLI lines are
written from the records themselves (:mod:`audit.report`), so no stage reads another's dict by
string (docs/design.md §2.5). The JSON keys are the summary.json contract of docs/design.md
§10: ``to_json`` writes exactly those keys, in that order.

- :class:`Confidence`: what 1 - alpha covers (docs/design.md §8.7);
- :class:`CellResult`: one multi-run cell: the sound ``epsilon_lb``, the optimistic eps, the
  claim, the theory's eps and the verdict, with the statistics' own records as evidence
  (:class:`audit.stats.binary.EpsilonBound`, :class:`audit.stats.binary.Verdict`);
- :class:`OneRunCellResult`: its one-run twin (docs/design.md §8.8-§8.11), whose evidence are
  :class:`audit.stats.one_run.OneRunBound` and :class:`audit.stats.one_run.OneRunVerdict`;
- :class:`VerdictTests`: the two tests behind a cell's verdict (docs/design.md §9.1);
- :class:`ScoresVersion`: the older version of the code whose scores a report was rebuilt
  from (docs/design.md §15.5);
- :class:`RunRecord`: the timings of the last ``audit run`` (``run.json``);
- :class:`AuditResult`: every cell, the spec, the fingerprint and the run record.

summary.json opens with :data:`SCHEMA_VERSION` (``schema_version``); ``cells.csv``
(:meth:`AuditResult.cell_table`) is the same cells flattened, one row per cell, a column per
scalar of the cell's summary.json entry (nested keys joined by dots, list items by their index:
``evidence.fpr_hi``, ``roc.tpr_at_fpr.0.tpr``), for ``pandas.read_csv`` (docs/results.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from audit.run.claims import Claim
from audit.run.fingerprint import portable_implementation
from audit.run.proof_report import Estimates, PlannedStatements, Refusal
from audit.run.spec import AuditSpec, Cell
from audit.run.store import write_text_atomically
from audit.stats.binary import EpsilonBound, Verdict
from audit.stats.curve_evidence import CurveVerdict
from audit.stats.one_run import OneRunBound, OneRunVerdict
from audit.stats.one_run_gdp import OneRunGdpBound
from audit.stats.sequential import SequentialVerdict
from audit.stats.sequential_audit import (
    SEQUENTIAL_BAND_REFUSAL,
    SEQUENTIAL_ESTIMATES_LABEL,
    SEQUENTIAL_ROC_LABEL,
    SequentialBound,
    SequentialEvidence,
)
from audit.theory import Bounds

__all__ = [
    "SCHEMA_VERSION",
    "THRESHOLD_TEXT",
    "AuditResult",
    "CellFields",
    "CellInputs",
    "CellResult",
    "CellTable",
    "Confidence",
    "ManyCanaries",
    "OneRunCellResult",
    "RunRecord",
    "ScoresVersion",
    "VerdictTests",
    "accuracy_file",
    "flat_scalars",
    "jsonable",
    "tradeoff_file",
]

THRESHOLD_TEXT: dict[str, str] = {
    "split": "threshold chosen on one half of the trials, Clopper-Pearson bounds on the other half",
    "bonferroni": "thresholds on a grid fixed in advance, Clopper-Pearson bounds "
    "Bonferroni-corrected over it",
    "multisplit": "median of 11 split bounds, each at alpha/2 (Markov: the median holds at alpha)",
    "planned": "threshold fixed before the scores were seen (an order statistic planned from the "
               "theory or a "
    "pilot), one joint test of both rates on all test trials",
    "planned_ranks": "a family of order statistics fixed by the trial counts alone (ranks 1, 4, "
    "16, ... on both tails), a joint test of both rates for each at alpha / K (Bonferroni over "
    "the K rules), eps_lb the largest",
}
"""How each ``threshold`` strategy chooses the threshold, in words (summary labels, report.md)."""


SCHEMA_VERSION = 1
"""The version of summary.json's and cells.csv's layout (their ``schema_version`` key and
column). Bumped when a reader must change: a key or column removed or renamed, a value whose
meaning, unit or type changes, or a nesting that moves. New keys (new columns) do not bump it:
a reader ignores what it does not know. An integer, so that ``pandas.read_csv`` reads it back as
written (docs/results.md)."""

Scalar = str | int | float | bool | None
"""A value of a cells.csv column (a JSON scalar of summary.json)."""


def flat_scalars(value: object, prefix: str = "") -> dict[str, Scalar]:
    """Every scalar of the JSON value ``value`` under a flat name: the keys of nested objects
    joined by ``.``, a list's items named by their index (``roc.tpr_at_fpr.0.tpr``); in the
    order of the value (the order of summary.json)."""
    if isinstance(value, dict):
        items: list[tuple[str, object]] = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        assert value is None or isinstance(value, str | int | float | bool), value  # JSON
        return {prefix: value}
    out: dict[str, Scalar] = {}
    for key, item in items:
        out.update(flat_scalars(item, f"{prefix}.{key}" if prefix else key))
    return out


@dataclass(frozen=True)
class CellTable:
    """cells.csv as a record: the column names (stable: ``schema_version`` first, then the
    columns of the first cell in its summary.json order, then those only later cells have, in
    theirs) and one row per cell, in summary.json's cell order (a cell without a column: None,
    an empty field)."""

    columns: tuple[str, ...]
    rows: tuple[Mapping[str, Scalar], ...]

    @classmethod
    def of(cls, cells: tuple[CellResult, ...] | list[CellResult]) -> CellTable:
        rows = [{"schema_version": SCHEMA_VERSION, **flat_scalars(cell.to_json())}
                for cell in cells]
        columns = dict.fromkeys(["schema_version", *(name for row in rows for name in row)])
        return cls(tuple(columns), tuple(rows))

    def to_csv(self) -> str:
        """The table as CSV text (RFC 4180, ``\\n`` line ends): a header row, then one row per
        cell; floats as Python's ``repr`` (the shortest text that reads back to the same
        float), ``inf``/``-inf``/``nan`` as summary.json writes them, None as an empty field,
        booleans as ``True``/``False``."""
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return buffer.getvalue()


def tradeoff_file(cell_name: str) -> str:
    """``tradeoff_<cell>.png``: the plot of a multi-run cell."""
    return f"tradeoff_{cell_name}.png"


def accuracy_file(cell_name: str) -> str:
    """``accuracy_<cell>.png``: the plot of a one-run cell."""
    return f"accuracy_{cell_name}.png"


def jsonable(value: object) -> Any:  # JSON: any of its types
    """Plain JSON: numpy scalars to Python, non-finite floats to the strings "inf"/"-inf"/"nan"."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


@dataclass(frozen=True)
class Confidence:
    """What 1 - alpha covers (docs/design.md §8.7): ``level`` = 1 - alpha holds for each cell
    alone (``scope = "cell"``, ``cells = 1``) or for all ``cells`` cells at once (``scope =
    "family"``); ``alpha`` is what each cell's eps_lb and verdict are computed at."""

    level: float
    scope: str
    alpha: float
    cells: int

    @classmethod
    def of(cls, spec: AuditSpec, cells: int) -> Confidence:
        """The confidence of a report of ``cells`` cells under ``spec``'s ``confidence``."""
        family = spec.claim.confidence == "family"
        return cls(
            1 - spec.claim.alpha,
            spec.claim.confidence,
            spec.cell_alpha(cells),
            cells if family else 1,
        )

    @property
    def family(self) -> bool:
        """Whether 1 - alpha holds for every cell at once."""
        return self.scope == "family"

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "scope": self.scope, "alpha": self.alpha, "cells": self.cells}


VERDICT_LEVEL = "each test at 1 - alpha; violated when either refutes: 1 - 2 alpha (Bonferroni)"
"""The level of a verdict that is the union of two tests on the same scores
(docs/design.md §9.1)."""


@dataclass(frozen=True)
class VerdictTests:
    """The two tests behind a cell's verdict (docs/design.md §9.1): ``curve``, the verdict's
    test of the claimed trade-off curve (FNR_hi < f_claim(FPR_hi) at a soundly chosen threshold,
    or the one-run verdict), and ``epsilon``, eps_lb > the claimed eps at the same delta
    (:func:`audit.run.summary.epsilon_refutes`). The cell is violated when either refutes the
    claim, so that the verdict and eps_lb never contradict; each test alone holds at 1 - alpha,
    the verdict (their union, on the same scores) at 1 - 2 alpha (Bonferroni)."""

    curve: bool
    epsilon: bool
    level: str = VERDICT_LEVEL

    @property
    def violated(self) -> bool:
        """Whether either test refutes the claim."""
        return self.curve or self.epsilon

    def to_json(self) -> dict[str, object]:
        return {"curve": self.curve, "epsilon": self.epsilon, "level": self.level}


@dataclass(frozen=True)
class ManyCanaries:
    """A cell with ``canaries_per_training`` = k > 1 (docs/design.md §8.17): k canaries per
    training, the trainings a side, and whether the k canaries are independent (each a trial)
    or dependent (bounds per training on the fractions of its canaries in error)."""

    canaries_per_training: int
    trainings_in: int
    trainings_out: int
    independent: bool

    def to_dict(self) -> dict[str, object]:
        """The summary.json keys of the cell (after ``plot``)."""
        return {
            "canaries_per_training": self.canaries_per_training,
            "trainings_in": self.trainings_in,
            "trainings_out": self.trainings_out,
            "canaries_independent": self.independent,
        }


class CellFields(TypedDict):
    """The fields of every cell record, multi-run or one-run, known before its statistics: what
    :func:`audit.run.summary.cell_result` and a deployed training's audit (docs/design.md §14.5)
    know of the cell (its name, observation, trial counts, delta, alpha and confidence, the claim,
    the theory's eps). Unpacked into :class:`CellResult` and :class:`OneRunCellResult`, typed
    key by key."""

    cell: Cell
    observation: str
    trials_in: int
    trials_out: int
    delta: float
    alpha: float
    confidence: Confidence
    claim: str
    claim_description: str
    claimed_epsilon: float
    theory_upper_epsilon: float | None
    theory_lower_epsilon: float | None
    theory_upper_method: str | None
    theory_lower_method: str | None


@dataclass(frozen=True)
class CellResult:
    """One audited cell (sampler, threat model, attack): the summary.json entry as a record.

    ``epsilon_lb`` is a sound lower bound on eps at ``delta`` with confidence 1 - ``alpha``;
    ``epsilon_optimistic`` is not a bound; ``theory_upper_epsilon`` is a guarantee and
    ``theory_lower_epsilon`` is achieved by a known pair of datasets (None where unknown);
    ``violated`` is the verdict: the claimed curve refuted by the curve test or by the epsilon
    test (``verdict_tests``, docs/design.md §9, §9.1). The summary adds (docs/design.md
    §8.12-§8.14) ``planned``: the plans and joint tests of ``threshold = "planned"`` (None for
    another strategy); ``curve_evidence``: the whole-curve verdict (sound) or why the scores carry
    none; ``estimates``: labelled estimates, not bounds. A record built without them (None) writes
    none of their keys.
    """

    cell: Cell
    observation: str
    trials_in: int
    trials_out: int
    delta: float
    alpha: float
    confidence: Confidence
    epsilon_lb: float
    epsilon_optimistic: float
    claim: str
    claim_description: str
    claimed_epsilon: float
    theory_upper_epsilon: float | None
    theory_lower_epsilon: float | None
    theory_upper_method: str | None
    theory_lower_method: str | None
    violated: bool
    verdict_tests: VerdictTests
    evidence: Verdict | OneRunVerdict | SequentialVerdict
    bound: EpsilonBound | OneRunBound | SequentialBound
    roc: Mapping[str, object]
    plot: str
    planned: PlannedStatements | None = field(default=None, kw_only=True)
    curve_evidence: CurveVerdict | Refusal | None = field(default=None, kw_only=True)
    estimates: Estimates | None = field(default=None, kw_only=True)
    many_canaries: ManyCanaries | None = field(default=None, kw_only=True)
    """k > 1 canaries per training (None: one, the default)."""
    sequential: SequentialEvidence | None = field(default=None, kw_only=True)
    """A sequential audit's cell (``stop = "decided"``, docs/design.md §8.18): how its verdict was
    decided; its ``epsilon_lb``, ``evidence`` and ``bound`` are then the anytime-valid ones."""

    @property
    def name(self) -> str:
        """``<sampler>-<threat_model>-<attack>``."""
        return self.cell.name

    @property
    def verdict(self) -> str:
        """``violated`` or ``consistent`` (which does not prove the claim)."""
        return "violated" if self.violated else "consistent"

    def to_json(self) -> dict[str, object]:
        """The summary.json entry (keys and order of docs/design.md §10), plain JSON."""
        return jsonable(self._entry())

    def _entry(self) -> dict[str, object]:
        return {
            "cell": self.cell.name,
            "sampler": self.cell.sampler,
            "threat_model": self.cell.threat_model,
            "attack": self.cell.attack,
            "observation": self.observation,
            "trials_in": self.trials_in,
            "trials_out": self.trials_out,
            "delta": self.delta,
            "alpha": self.alpha,
            "confidence": self.confidence.to_json(),
            "epsilon_lb": self.epsilon_lb,
            "epsilon_optimistic": self.epsilon_optimistic,
            "claim": self.claim,
            "claim_description": self.claim_description,
            "claimed_epsilon": self.claimed_epsilon,
            "theory_upper_epsilon": self.theory_upper_epsilon,
            "theory_lower_epsilon": self.theory_lower_epsilon,
            "theory_upper_method": self.theory_upper_method,
            "theory_lower_method": self.theory_lower_method,
            "verdict": self.verdict,
            "verdict_tests": self.verdict_tests.to_json(),
            "evidence": self.evidence.to_dict(),
            "bound": self.bound.to_dict(),
            "roc": self.roc,
            "plot": self.plot,
            **({"planned": self.planned.to_dict()} if self.planned is not None else {}),
            **(
                {"curve_evidence": self.curve_evidence.to_dict()}
                if self.curve_evidence is not None
                else {}
            ),
            **({"estimates": self.estimates.to_dict()} if self.estimates is not None else {}),
            **({} if self.many_canaries is None else self.many_canaries.to_dict()),
            **({} if self.sequential is None else {"sequential": self.sequential.to_dict()}),
        }


@dataclass(frozen=True)
class OneRunCellResult(CellResult):
    """A one-run cell (docs/design.md §8.8): ``canaries`` m, each IN with probability 1/2,
    the chosen rule ``guesses`` = (k+, k-) and its ``correct`` guesses; ``epsilon_lb`` is the
    f-DP bound on the number of correct guesses (sound at 1 - alpha), ``evidence`` and
    ``bound`` the one-run statistics' records."""

    evidence: OneRunVerdict
    bound: OneRunBound
    canaries: int
    guesses: tuple[int, int]
    correct: int
    gdp: OneRunGdpBound | None = field(default=None, kw_only=True)
    """The strongest mu-GDP claim the canaries refute (docs/design.md §8.19)."""
    gdp_epsilon: float | None = field(default=None, kw_only=True)
    """eps at ``delta`` of mu_lb-GDP (None when mu_lb = 0): an estimate that assumes the
    implementation's curve is Gaussian, not a bound (§8.19)."""

    def _entry(self) -> dict[str, object]:
        gdp = (
            {}
            if self.gdp is None
            else {"gdp_family": {**self.gdp.to_dict(), "epsilon_if_gaussian": self.gdp_epsilon}}
        )
        return {**super()._entry(), "audit": "one_run", "canaries": self.canaries,
                "guesses": list(self.guesses), "correct": self.correct, **gdp}


@dataclass(frozen=True)
class RunRecord:
    """What the last ``audit run`` did (``run.json``): wall and compute seconds, shards, the
    parallelism used and when it finished. Written by the runner, shown by the report."""

    wall_seconds: float
    shards_total: int
    shards_computed: int
    shards_reused: int
    compute_seconds: float
    n_jobs: int
    backend: str
    finished_utc: str
    trials_used_per_side: int | None = None
    """A sequential audit (``stop = "decided"``, docs/design.md §8.18): the trials a side of the
    shards it used before its verdicts were decided (None: a fixed-size audit)."""
    max_trials: int | None = None
    """A sequential audit's budget, trials a side (None: a fixed-size audit)."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Keys of run.json this version does not name (kept as written)."""

    @classmethod
    def read(cls, path: Path) -> RunRecord | None:
        """The record in ``path`` (None when there is none)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        named = {k: data[k] for k in cls.__dataclass_fields__ if k != "extra" and k in data}
        return cls(**named, extra={k: v for k, v in data.items() if k not in named})

    def to_json(self) -> dict[str, object]:
        sequential = ("trials_used_per_side", "max_trials")  # written by a sequential audit only
        data = {
            k: getattr(self, k) for k in self.__dataclass_fields__
            if k != "extra" and not (k in sequential and getattr(self, k) is None)
        }
        return {**data, **self.extra}

    def write(self, path: Path) -> None:
        """Write run.json atomically (:func:`audit.run.store.write_text_atomically`)."""
        write_text_atomically(path, json.dumps(self.to_json(), indent=2) + "\n")


@dataclass(frozen=True)
class ScoresVersion:
    """The older version of the code whose complete scores a report was rebuilt from
    (docs/design.md §15.5): its package version, harness source hash, engine routes and
    implementation source, and what changed since (code only, never a spec value)."""

    package_version: object
    harness_source: object
    engine: object
    implementation: object
    changes: tuple[str, ...]

    @classmethod
    def of(
        cls, stamp: Mapping[str, object], changes: list[str] | tuple[str, ...]
    ) -> ScoresVersion:
        """The version of the score files' fingerprint ``stamp``, with its ``changes``."""
        # an older version stored absolute paths of its machine: summary.json names none
        return cls(stamp.get("package_version"), stamp.get("harness_source"), stamp.get("engine"),
                   portable_implementation(stamp.get("implementation")), tuple(changes))

    @property
    def text(self) -> str:
        """One line: which older version of the code computed the scores."""
        return (
            f"rebuilt from scores computed by an older version of the code (package version "
            f"{self.package_version}, harness source sha256 {str(self.harness_source)[:12]}); "
            f"changed since: {'; '.join(self.changes)}. The report's statistics are recomputed by "
            "the code "
            "running now from those scores; the trainings were not rerun"
        )

    def to_json(self) -> dict[str, object]:
        return {"package_version": self.package_version, "harness_source": self.harness_source,
                "engine": self.engine, "implementation": self.implementation,
                "changes": list(self.changes), "text": self.text}


@dataclass(frozen=True)
class CellInputs:
    """What one cell's statistics were computed from, kept for the plots (never written to
    summary.json): its scores (sorted and memory-mapped for a multi-run cell), its theory
    curves and its claim."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    bounds: Bounds
    claim: Claim


@dataclass(frozen=True)
class AuditResult:
    """Every cell of an audit with its spec, shard fingerprint and last run: summary.json."""

    spec: AuditSpec
    confidence: Confidence
    fingerprint: Mapping[str, object]
    run: RunRecord | None
    cells: tuple[CellResult, ...]
    scores_version: ScoresVersion | None = None
    """Set when the report was rebuilt from the scores of an older version of the code."""
    inputs: Mapping[str, CellInputs] = field(default_factory=dict, compare=False, repr=False)
    """Per cell name, what it was computed from (for the plots)."""

    def to_json(self) -> dict[str, object]:
        """summary.json: the spec's headline values, the confidence, the spec, the fingerprint
        (without the spec it repeats), the run record, the labels of the numbers, the cells."""
        spec = self.spec
        one_run = spec.kind.one_run
        return jsonable(
            {
                "schema_version": SCHEMA_VERSION,
                "name": spec.name,
                "description": spec.experiment.description,
                "mode": spec.mode.value,
                "seed": spec.experiment.seed,
                "claim": spec.claim.claim,
                "delta": spec.claim.delta,
                "alpha": spec.claim.alpha,
                "confidence": self.confidence.to_json(),
                "spec": spec.to_dict(),
                "fingerprint": dict(self.fingerprint),
                "scores_version": None
                if self.scores_version is None
                else self.scores_version.to_json(),
                "run": None if self.run is None else self.run.to_json(),
                "labels": _labels(
                    spec.claim.threshold, one_run=one_run,
                    sequential=spec.evidence.stop is not None,
                ),
                "cells": [cell._entry() for cell in self.cells],
            }
        )

    def cell_table(self) -> CellTable:
        """cells.csv: the cells of summary.json flattened, one row each (:class:`CellTable`)."""
        return CellTable.of(self.cells)


def _labels(threshold: str, *, one_run: bool, sequential: bool = False) -> dict[str, str]:
    """What each number of summary.json is (a bound at which confidence, or an estimate); for a
    sequential audit (``stop = "decided"``, docs/design.md §8.18) what holds at any stopping
    time, and what does not (labelled so, or not computed)."""
    labels = {
        "epsilon_lb": "sound lower bound on eps at delta, confidence 1 - alpha "
        f"({THRESHOLD_TEXT[threshold]})",
        "confidence": "per cell: level = 1 - alpha of the spec, for the cell alone (scope 'cell') "
        "or for all "
        "cells at once (scope 'family'); alpha = what the cell's eps_lb and verdict are computed "
        "at",
        "epsilon_optimistic": "optimistic, not a bound (best threshold chosen on the same scores)",
        "theory_upper_epsilon": "guarantee: the mechanism's true eps is at most this",
        "theory_lower_epsilon": "achieved by a known pair of datasets: the true eps is at least "
        "this",
        "verdict": "violated: FNR_hi < f_claim(FPR_hi) at a soundly chosen threshold (the curve "
        "test), or "
        "epsilon_lb > claimed_epsilon at delta (the epsilon test); each test at confidence 1 - "
        "alpha, the "
        "verdict (either refutes) at 1 - 2 alpha (Bonferroni); verdict_tests says which refuted",
        "roc": "estimates, not bounds: TPR at an empirical FPR <= 0.1% and 1% (Clopper-Pearson "
        "interval "
        "on the TPR at confidence 1 - alpha) and the AUROC",
        "curve_evidence": "sound at confidence 1 - alpha: the claim against a band on the whole "
        "trade-off "
        "curve (every threshold at once), and the band's eps lower bound; or why the scores carry "
        "no evidence",
        "estimates": "estimates, not bounds: Bayesian credible interval of eps (joint posterior "
        "of FPR, FNR), "
        "bootstrap intervals of the AUROC and the TPR at FPR 0.1% and 1%, the GDP fit over all "
        "thresholds",
    }
    if sequential:
        labels.update(
            {
                "epsilon_lb": "sound lower bound on eps at delta, confidence 1 - alpha at any "
                "stopping time (anytime-valid: beta-binomial confidence sequences of FPR and FNR "
                "at the pilot shard's threshold, docs/design.md §8.18)",
                "verdict": "violated: the e-process on the claimed curve reached 1/alpha (the "
                "curve test) or epsilon_lb > claimed_epsilon at delta (the epsilon test); each "
                "test at confidence 1 - alpha at any stopping time, the verdict (either refutes) "
                "at 1 - 2 alpha (Bonferroni)",
                "epsilon_optimistic": "optimistic, not a bound (best threshold chosen on the "
                "scores used)",
                "roc": SEQUENTIAL_ROC_LABEL,
                "curve_evidence": SEQUENTIAL_BAND_REFUSAL,
                "estimates": SEQUENTIAL_ESTIMATES_LABEL,
            }
        )
    if one_run:
        labels.update(
            {
                "epsilon_lb": "sound lower bound on eps at delta, confidence 1 - alpha, from one "
                "run's canaries "
                "(f-DP bound on the number of correct guesses, rule chosen soundly)",
                "epsilon_optimistic": "optimistic, not a bound (the best guessing rule's bound, "
                "not corrected "
                "for choosing it)",
                "verdict": "violated: under the claimed curve the observed number of correct "
                "guesses has "
                "probability below alpha (per rule: alpha / rules)",
                "canaries": "m canaries in the training(s), each IN with probability 1/2; guesses "
                            "= [k+, k-]; "
                "correct: of the k+ + k- guesses",
            }
        )
    return labels
