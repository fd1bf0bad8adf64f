"""The findings of a multi-run audit (``implementation = "script.py:train"``) from the canary
records its trainings return (docs/design/multi-run-diagnostics.md; issue 33 item 3).

Each training of a multi-run audit holds one Dirac canary, IN or OUT
(:mod:`audit.plugins.contract`), and :meth:`audit.deployed.instrument.DiracCanaries.result`
returns its :class:`audit.plugins.contract.CanaryRecord`: at every optimizer step t the canary
coordinate of what the optimizer received, in units of C, and the rows of the canary's slot and
of the batch. For correct DP-SGD (per-example clipping to C, noise N(0, sigma^2 C^2) fresh at
every step, the sum divided by b), with ``a_t`` the batch's other rows under the adversarial
threat model (each set to -g C on the coordinate, so -1 after clipping) and 0 isolated:

    y_t + a_t = slot_rows_t * 1[IN] + N(0, sigma^2),

independent across steps and across trainings (each training has its own seed). The trainings
are the rows of the one-run diagnostics' (m, S) table (:class:`audit.stats.diagnostics.Observed`:
a training is a canary, IN when its world is IN), so the same tests apply, at the same levels
(:func:`audit.stats.diagnostics.diagnose`, Bonferroni over its K tests, family-wise alpha):
the noise scale against the setup's sigma (an interval, both sides), fresh noise across steps,
the noise's law, q from the recorded batches against the setup's, the IN trainings' signal, and
the steps recorded against the setup's S = T E (exact), and (a note) the divisor the instrument
was told against the setup's b. The one-run test across coordinates
becomes ``fresh_noise_trials``: the trainings' noise is independent across trainings (a noise
generator seeded by a constant instead of the ``seed`` argument draws the same noise in every
training).

:func:`trial_findings` is the pure function of the records; :func:`shard_findings` reads one
shard's arrays (:func:`audit.plugins.contract.records_of`); :func:`multi_run_findings` a run
folder (every training key of the spec, the shards of the current fingerprint; alpha split over
the keys by Bonferroni so the whole run's findings hold at family-wise alpha);
:func:`key_findings` the same by training key, which :func:`audit.run.summary.summarize` calls:
a failed finding that refutes the claimed mechanism (:func:`refuting`) makes the cells of its
key ``violated`` in summary.json, cells.csv and report.md (moved here from
``audit.deployed.multi_run``, which re-exports it, so that the summary can).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from audit.core.confidence import significance
from audit.core.findings import Finding
from audit.plugins.contract import (
    RECORD_PREFIX,
    CanaryRecord,
    TrainingSetup,
    records_of,
    setup_from,
)
from audit.run.spec import AuditSpec
from audit.sampling import Poisson, get_sampler
from audit.stats.diagnostics import (
    ACCUSATION_LEVEL,
    DIAGNOSTICS,
    Observed,
    diagnose,
    steps_composed,
)

__all__ = [
    "MULTI_RUN_FINDINGS",
    "findings_level",
    "key_findings",
    "multi_run_findings",
    "observed_of",
    "refuting",
    "shard_findings",
    "trial_findings",
]

_REPLACED = ("steps_composed", "batch_alignment")
"""The one-run findings a multi-run audit computes otherwise: the steps of every training
(:func:`_steps`); the batches' alignment with the steps, which the record holds by construction
(batch t of the record is step t)."""

MULTI_RUN_FINDINGS: tuple[str, ...] = (
    "steps_composed",
    *("fresh_noise_trials" if name == "fresh_noise_coordinates" else name
      for name in DIAGNOSTICS if name not in _REPLACED),
    "noise_divisor",
)
"""The names of the findings (returned as: the steps first, then the one-run
diagnostics (:data:`audit.stats.diagnostics.DIAGNOSTICS`, the test across coordinates read
across trainings) in the order diagnose returns them, the divisor last)."""


def observed_of(
    records: Sequence[CanaryRecord], included: Sequence[bool] | np.ndarray, *, adversarial: bool
) -> Observed:
    """The (trainings, S) table of the one-run diagnostics: row i is training i's y_t + a_t
    (module docstring), its in-batch mask and whether its canary is IN; S is the fewest steps
    any training recorded (the steps finding reports the rest)."""
    included = np.asarray(included, dtype=bool).ravel()
    if len(records) != included.size or not records:
        raise ValueError(
            f"records: {len(records)} trainings but {included.size} IN/OUT flags; need one "
            "flag per training and at least one training"
        )
    steps = min(r.steps for r in records)
    y = np.stack([r.y[:steps] for r in records])
    if adversarial:
        y = y + np.stack([(r.batch_rows - r.slot_rows)[:steps] for r in records])
    in_batch = np.stack([r.in_batch[:steps] for r in records])
    return Observed(y=y, in_batch=in_batch, included=included)


_SHARED = re.compile(r"\(mean pairwise correlation [^)]*\)")


def _across_trials(finding: Finding, trainings: int) -> Finding:
    """The one-run test across coordinates, read across trainings (module docstring)."""
    if finding.passed:
        message = finding.message.replace(
            "no shared draw across coordinates",
            f"no shared noise across the {trainings} trainings",
        )
        return replace(finding, name="fresh_noise_trials", message=message)
    found = _SHARED.search(finding.message)
    detail = f" {found.group(0)}" if found else ""
    return replace(
        finding,
        name="fresh_noise_trials",
        message=(
            f"the trainings share their noise{detail}, although each has its own seed: the "
            "noise generator is seeded by a constant (or created once for every training); "
            "seed it from the seed argument of train"
        ),
        tensors=(),
    )


def _steps(records: Sequence[CanaryRecord], setup_steps: int) -> Finding:
    """Exact: every training's recorded optimizer steps against the setup's S = T E (what the
    harness's claim composes), and the same count in every training."""
    counts = sorted({r.steps for r in records})
    if len(counts) > 1:
        return Finding(
            "steps_composed", False, 0.0,
            f"the trainings took different numbers of optimizer steps ({counts[0]} to "
            f"{counts[-1]}; the setup composes {setup_steps}): the number of steps must not "
            "depend on the seed or on the canary",
        )
    found = steps_composed(counts[0], setup_steps)
    return replace(found, message=found.message.replace(
        "the accountant composed", "the setup (T E, what the claim composes) has"
    ))


def _divisor(records: Sequence[CanaryRecord], batch_size: float) -> Finding:
    """Exact, a note: the divisor the instrument was told against the setup's b (a script that
    divides by another b trains another configuration than the setup's; the tests above read
    y in units of C with the instrument's divisor, so they stay valid)."""
    known = sorted({r.noise_divisor for r in records if r.noise_divisor is not None})
    if not known:
        return Finding("noise_divisor", True, 0.0, "no noise divisor recorded: not compared")
    other = [d for d in known if abs(d - batch_size) > 1e-9 * batch_size]
    if other:
        return Finding(
            "noise_divisor", True, 0.0,
            f"note: the trainings divide the noisy sum by {', '.join(f'{d:g}' for d in known)} "
            f"but the setup's batch size is {batch_size:g}: the script does not train with "
            "setup.batch_size (Opacus derives its expected batch size from the data set's size: "
            "give it setup.n rows, the canary's slot included)",
            refutes=False,
        )
    return Finding(
        "noise_divisor", True, 0.0, f"the trainings divide the noisy sum by b = {batch_size:g}"
    )


def trial_findings(
    records: Sequence[CanaryRecord],
    included: Sequence[bool] | np.ndarray,
    setup: TrainingSetup,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    lags: int | None = None,
) -> list[Finding]:
    """The findings of a multi-run audit's trainings (module docstring), family-wise level
    1 - confidence (``alpha=``: the deprecated spelling).

    Args:
        records: one :class:`CanaryRecord` per training.
        included: per training, True when its canary is IN.
        setup: the setup the trainings were given: sigma, S = T E, q (its sampler's
            inclusion probability: b / n for Poisson, 1 / T fixed-size), the threat model.
        lags: the lags 1..lags of the fresh-noise test across steps (None: the
            diagnostics' default).

    Returns:
        The findings named :data:`MULTI_RUN_FINDINGS`, the steps first, the divisor last.
    """
    return _findings(
        records, included, setup, significance(confidence, alpha, where="trial_findings"), lags
    )


def _inclusion(setup: TrainingSetup) -> float | None:
    """q: the probability that the canary's slot is in a given step's batch under the setup's
    sampler (its registry's ``inclusion_probability``; b / n for Poisson, 1 / T for the
    fixed-size samplers); None (not compared) for a sampler that states none."""
    try:
        return float(get_sampler(setup.sampler).inclusion_probability(setup.mechanism))
    except ValueError:
        return None


def _findings(
    records: Sequence[CanaryRecord],
    included: Sequence[bool] | np.ndarray,
    setup: TrainingSetup,
    level: float,
    lags: int | None = None,
) -> list[Finding]:
    """:func:`trial_findings` at family-wise level ``level``."""
    obs = observed_of(records, included, adversarial=setup.threat_model == "adversarial")
    known = {f.name for f in fields(Observed)}
    extra: dict[str, object] = {}
    if {"batch_sizes", "n"} <= known and isinstance(get_sampler(setup.sampler), Poisson):
        # Poisson sizes are Binomial(n, q), independent across steps and trainings: the
        # dispersion test reads them pooled (a fixed-size sampler has no such law to test)
        steps = obs.y.shape[1]
        extra["batch_sizes"] = np.concatenate([r.batch_rows[:steps] for r in records])
        extra["n"] = int(setup.n)
    if {"clip", "divisor"} <= known:  # named in the causes of a too-small noise multiplier
        extra.update(clip=float(setup.clip), divisor=float(setup.batch_size))
    if extra:
        obs = replace(obs, **extra)  # type: ignore[arg-type]  # fields checked above
    found = diagnose(
        obs,
        sigma=float(setup.sigma),
        q=_inclusion(setup),
        composed=int(setup.total_steps),
        alpha=level,
        **({} if lags is None else {"lags": lags}),
    )
    out = [_steps(records, int(setup.total_steps))]
    for finding in found:
        if finding.name in _REPLACED:
            continue
        if finding.name == "fresh_noise_coordinates":
            out.append(_across_trials(finding, len(records)))
        elif finding.name == "sampling_rate":
            out.append(replace(finding, message=finding.message.replace(
                "the accountant's q", "the setup's q (what the claim accounts)"
            )))
        else:
            out.append(finding)
    out.append(_divisor(records, float(setup.batch_size)))
    return out


def shard_findings(
    arrays: Mapping[str, np.ndarray],
    setup: TrainingSetup,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
) -> list[Finding]:
    """:func:`trial_findings` of one shard's (or several concatenated shards') arrays, the IN
    trainings then the OUT ones; [] when the trainings returned no canary record."""
    level = significance(confidence, alpha, where="shard_findings")
    records_in, records_out = records_of(arrays, "in"), records_of(arrays, "out")
    if not records_in and not records_out:
        return []
    included = [True] * len(records_in) + [False] * len(records_out)
    return _findings([*records_in, *records_out], included, setup, level)


def multi_run_findings(
    run_dir: str | Path, *, confidence: float | None = None, alpha: float | None = None
) -> list[Finding]:
    """The findings of a multi-run audit's run folder, every training key of its spec.

    Reads the shards of the spec's plan whose fingerprint is the current one (as the scoring
    does; a stale or missing shard is left out, its trainings not tested), their canary records
    (the first ``trials_in`` IN and ``trials_out`` OUT trainings, as the scoring), and tests
    them per key at level alpha / (number of keys), so that every finding of the run holds at
    family-wise level alpha = 1 - confidence (default: :data:`audit.stats.diagnostics.
    ACCUSATION_LEVEL`, 1e-3, or the spec's ``alpha`` if smaller). Each finding's
    message starts with its key's name (``poisson-adversarial: ...``) when the spec has more
    than one key. [] when no training returned a canary record (an old script, the engine's
    own trainings, ``store = "scores"``).
    """
    from audit.run.spec import SPEC_FILE, load_spec
    from audit.run.store import run_folder

    folder = run_folder(run_dir)
    spec = load_spec(folder / SPEC_FILE)
    level = (
        None if confidence is None and alpha is None
        else significance(confidence, alpha, where="multi_run_findings")
    )
    return [f for found in key_findings(spec, folder, alpha=level).values() for f in found]


def findings_level(spec: AuditSpec) -> float:
    """The family-wise level of a run's findings: :data:`audit.stats.diagnostics.
    ACCUSATION_LEVEL` (1e-3), or the spec's ``alpha`` if smaller: a finding accuses the
    training, which needs stronger evidence than a bound that states a number."""
    return min(ACCUSATION_LEVEL, float(spec.claim.alpha))


def key_findings(
    spec: AuditSpec, run_dir: str | Path, *, alpha: float | None = None
) -> dict[str, tuple[Finding, ...]]:
    """:func:`multi_run_findings` of ``spec``'s run folder, by training key name (only the keys
    whose trainings returned canary records), at family-wise level ``alpha`` over the keys
    (None: :data:`audit.stats.diagnostics.ACCUSATION_LEVEL`, 1e-3, or the spec's ``alpha`` if
    smaller: an accusation needs stronger evidence than a bound). {} without a plug-in
    implementation (the engine's trainings return no record) or for a one-run audit. Only the
    ``canary_record.*`` arrays of each shard are read (a shard without them is skipped after
    reading its file list), so this is cheap beside the scoring: what
    :func:`audit.run.summary.summarize` calls for the cells' verdicts."""
    from audit.run.fingerprint import changes, shard_fingerprint
    from audit.run.store import SHARDS_DIR, plan, stored_fingerprint

    if spec.experiment.implementation is None or spec.kind.one_run:
        return {}
    shards = Path(run_dir) / SHARDS_DIR
    if not shards.is_dir():
        return {}
    level = findings_level(spec) if alpha is None else float(alpha)
    keys = spec.training_keys()
    fingerprint = shard_fingerprint(spec)
    out: dict[str, tuple[Finding, ...]] = {}
    for key in keys:
        records: dict[str, list[CanaryRecord]] = {"in": [], "out": []}
        for task in plan(spec, key):
            path = shards / task.filename
            if not path.exists():
                continue
            arrays = _record_arrays(path)
            if not arrays or changes(stored_fingerprint(path), fingerprint):
                continue
            for world in records:
                records[world].extend(records_of(arrays, world))
        kept_in = records["in"][: spec.evidence.trials_in]
        kept_out = records["out"][: spec.evidence.trials_out]
        if not kept_in and not kept_out:
            continue
        setup = setup_from(spec.training_config(key))
        found = _findings(
            [*kept_in, *kept_out], [True] * len(kept_in) + [False] * len(kept_out), setup,
            level / len(keys),
        )
        if len(keys) > 1:
            found = [replace(f, message=f"{key.name}: {f.message}") for f in found]
        out[key.name] = tuple(found)
    return out


def _record_arrays(path: Path) -> dict[str, np.ndarray]:
    """The ``canary_record.*`` arrays of one shard ({} when it holds none, or cannot be read:
    the scoring refuses or moves aside a damaged shard, the findings leave it out)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files if name.startswith(RECORD_PREFIX)}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError):
        return {}


def refuting(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """The failed findings that refute the claimed mechanism (``passed=False``,
    ``refutes=True``): one of them makes the cells of its key ``violated``
    (docs/design/multi-run-diagnostics.md)."""
    return tuple(f for f in findings if not f.passed and f.refutes)
