"""Checking an accountant's claims against proven bounds, cell by cell over a grid.

For each grid cell (a :class:`audit.core.mechanism.Mechanism` and a delta) the accountant's claimed
eps(delta) is compared with the theory's bracket (:func:`audit.theory.bounds_for`):

- ``lower``: eps(delta) of the ``lower`` curve, achieved by a known pair of neighbouring
  datasets, so the true eps is at least this: the exact Gaussian-DP value (deterministic),
  the PLD of a dominated lattice pair (Poisson; achieved by a test, no rounding drift), the
  max-test bounds of Chua et al. 2024 (arXiv 2411.04205; shuffles), and for truncated
  Poisson the isolated pair's Poisson PLD with q replaced by the canary's per-step
  inclusion probability p' = q E[min(1, B / (1 + K))].
- ``upper``: eps(delta) of the ``upper`` curve, a guarantee: the exact value
  (deterministic), the pessimistic PLD (Poisson), the better of the truncation coupling and
  dp_accounting's truncated-Poisson PLD (truncated Poisson), the deterministic-batch GDP
  curve (shuffles: valid, but loose).

Status of a cell (the names are a contract):

- ``unsound``: claimed < lower - tol(lower), with tol(x) = 1e-3 + 1e-3 x;
- ``loose``: claimed > upper + margin(upper), with margin(x) = 0.01 + 0.05 x;
- ``ok``: otherwise (within the bracket up to these allowances, or no bound to compare with).

Why these numbers. *Tolerance*: the lower bounds are rigorous in exact arithmetic -- the
Gaussian-DP value is closed form (eps by bisection to machine precision), the Poisson lower
curve is the PLD of a pair dominated by the true one, the max-test bound holds for every
threshold, and every theory curve is stored as a piecewise-linear curve that is conservative
for its kind, with eps(delta) computed exactly from its vertices (:mod:`audit.theory.curve`).
What remains is floating-point and root-finding error, below 1e-6 in eps. The allowance of
1e-3 + 0.1% is a thousand times that and covers a claim computed a different but valid way
from sitting a hair below an exact value (dp_accounting's PLD of the deterministic Gaussian
reproduces the closed form to 1e-8; an estimate-style accountant may land either side), while
the gaps that matter are orders larger: 0.2 for Opacus' GDP on Poisson, 5.5 for Poisson
accounting of a one-epoch shuffle.
*Margin*: the Poisson bracket is narrow (measured width 2e-5 in eps at q = 0.01, sigma = 1,
1000 steps, delta = 1e-5), so the margin is not about the reference's error but about what
is worth flagging: valid accountants carry their own numerical slack above the truth (the PRV
accountant's upper end is up to 2 eps_error = 0.02 above it, measured +0.010 at the point
above), and a claim within 5% + 0.01 of the best bound is tight for practical purposes (5%
of eps is 5% of the privacy-loss budget). Beyond it the accountant leaves
privacy on the table: RDP's 2.10 against the PLD's 1.83 is 15% above, ``loose``. For the
shuffles the best upper bound is the deterministic one, so ``loose`` there means "claims more
than deterministic batches would need".

``--empirical`` confirms ``unsound`` cells with a simulated audit
(:func:`audit.training.simulate.simulate_observations`, the sampler's default attack,
:func:`audit.stats.binary.epsilon_lower_bound` with a held-out threshold at confidence 1 - alpha):
an eps lower bound above the claim refutes it by experiment as well as by theory.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from attacks import default_attack, get_attack
from audit.accounting.adapters import (
    Accountant,
    AccountantSpec,
    Unsupported,
    claim_epsilon,
    get_accountant,
)
from audit.core.errors import AuditInputError
from audit.core.exact_confidence import exact_confidence
from audit.core.mechanism import Mechanism
from audit.core.seeding import rng_for
from audit.core.validation import check_choice, check_int, check_probability, check_real
from audit.sampling import get_sampler, validate
from audit.stats.binary import curve_epsilon, epsilon_lower_bound
from audit.theory import bounds_for
from audit.training.simulate import simulate_observations

__all__ = [
    "DEFAULT_GRID",
    "LOOSE_ABSOLUTE_MARGIN",
    "LOOSE_RELATIVE_MARGIN",
    "STATUSES",
    "UNSOUND_ABSOLUTE_TOLERANCE",
    "UNSOUND_RELATIVE_TOLERANCE",
    "CellResult",
    "CheckReport",
    "EmpiricalCheck",
    "GridCell",
    "Reference",
    "UnsupportedCell",
    "check_accountant",
    "classify",
    "load_grid",
    "loose_margin",
    "theory_reference",
    "unsound_tolerance",
]

STATUSES: tuple[str, ...] = ("unsound", "loose", "ok")

UNSOUND_ABSOLUTE_TOLERANCE = 1e-3
UNSOUND_RELATIVE_TOLERANCE = 1e-3
LOOSE_ABSOLUTE_MARGIN = 0.01
LOOSE_RELATIVE_MARGIN = 0.05


def unsound_tolerance(lower: float) -> float:
    """How far below a proven lower bound a claim may be before it is ``unsound``: 1e-3 + 1e-3 x."""
    return UNSOUND_ABSOLUTE_TOLERANCE + UNSOUND_RELATIVE_TOLERANCE * abs(lower)


def loose_margin(upper: float) -> float:
    """How far above the best upper bound a claim may be before it is ``loose``: 0.01 + 0.05 x."""
    return LOOSE_ABSOLUTE_MARGIN + LOOSE_RELATIVE_MARGIN * abs(upper)


def classify(claimed: float, lower: float | None, upper: float | None) -> str:
    """``unsound`` if claimed < lower - tol(lower); ``loose`` if claimed > upper + margin(upper);
    else ``ok``."""
    if lower is not None and not math.isnan(lower):
        if math.isinf(lower):
            if lower > 0 and not math.isinf(claimed):
                return "unsound"
        elif claimed < lower - unsound_tolerance(lower):
            return "unsound"
    if upper is not None and math.isfinite(upper) and claimed > upper + loose_margin(upper):
        return "loose"
    return "ok"


# --------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------

_MECHANISM_KEYS = tuple(f.name for f in fields(Mechanism))
GRID_KEYS: tuple[str, ...] = (*_MECHANISM_KEYS, "delta")
"""Keys of a grid entry: the :class:`Mechanism` fields and ``delta``; any value may be a list
(the entry then stands for the Cartesian product)."""

DEFAULT_GRID: tuple[dict[str, object], ...] = (
    # Deterministic: exact mu-GDP, mu = sqrt(E)/sigma.
    {"sampler": "deterministic", "sigma": 1.0, "steps_per_epoch": 100, "epochs": 1, "delta": 1e-5},
    {"sampler": "deterministic", "sigma": 2.0, "steps_per_epoch": 100, "epochs": 10, "delta": 1e-5},
    # Poisson: q = 1/T. (q, sigma, T*E) = (0.01, 1, 1000) is the Opacus-GDP example,
    # (0.1, 2, 100) few heavy steps, (0.001, 0.8, 1000) the Poisson twin of the shuffle cell.
    {"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 100, "epochs": 10, "delta": 1e-5},
    {"sampler": "poisson", "sigma": 2.0, "steps_per_epoch": 10, "epochs": 10, "delta": 1e-5},
    {"sampler": "poisson", "sigma": 0.8, "steps_per_epoch": 1000, "epochs": 1, "delta": 1e-6},
    # Truncated Poisson: the twin of the (0.1, 2, 100) Poisson cell (n = 1000, b = 100),
    # batches truncated to B = 150, five standard deviations above b.
    {
        "sampler": "truncated_poisson",
        "sigma": 2.0,
        "steps_per_epoch": 10,
        "epochs": 10,
        "n": 1000,
        "batch_size": 100,
        "max_batch_size": 150,
        "delta": 1e-5,
    },
    # Shuffles, both threat models: one long epoch at low noise (Chua et al.'s regime,
    # the poisson-for-shuffle example), and several epochs.
    {
        "sampler": ["persistent_shuffle", "dynamic_shuffle"],
        "threat_model": ["adversarial", "isolated"],
        "sigma": 0.8,
        "steps_per_epoch": 1000,
        "epochs": 1,
        "delta": 1e-6,
    },
    {
        "sampler": ["persistent_shuffle", "dynamic_shuffle"],
        "threat_model": ["adversarial", "isolated"],
        "sigma": 1.0,
        "steps_per_epoch": 100,
        "epochs": 5,
        "delta": 1e-5,
    },
    # Balls-and-bins (Chua et al. 2025), both threat models: few short epochs, where its
    # random-allocation curves and the pld-accounting-random-allocation adapter both apply.
    {
        "sampler": "balls_and_bins",
        "threat_model": ["adversarial", "isolated"],
        "sigma": 1.0,
        "steps_per_epoch": 10,
        "epochs": 3,
        "delta": 1e-5,
    },
)
"""The default grid of ``audit check-accountant`` (same schema as a grid file)."""


@dataclass(frozen=True)
class GridCell:
    """One configuration to check: the mechanism and the target delta."""

    mechanism: Mechanism
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(
                f"mechanism={self.mechanism!r} must be an audit.core.mechanism.Mechanism"
            )
        object.__setattr__(self, "delta", check_probability("delta", self.delta))

    def configuration(self) -> dict[str, object]:
        """The cell as a flat JSON-ready dict (Mechanism fields and delta)."""
        m = self.mechanism
        return {
            "sampler": m.sampler,
            "threat_model": m.threat_model,
            "sigma": m.sigma,
            "steps_per_epoch": m.steps_per_epoch,
            "epochs": m.epochs,
            "n": m.n,
            "batch_size": m.batch_size,
            "max_batch_size": m.max_batch_size,
            "delta": self.delta,
        }


def _expand_entry(entry: object, where: str) -> list[GridCell]:
    if not isinstance(entry, Mapping):
        raise ValueError(
            f"{where}: a grid entry must be a table/dict of {', '.join(GRID_KEYS)}; got {entry!r}"
        )
    for key in entry:
        check_choice(f"{where}: grid key", key, GRID_KEYS)
    if "delta" not in entry:
        raise ValueError(f"{where}: a grid entry needs 'delta'")
    keys = list(entry)
    values = [v if isinstance(v, list | tuple) else [v] for v in entry.values()]
    cells = []
    for combination in itertools.product(*values):
        settings = dict(zip(keys, combination, strict=True))
        delta = settings.pop("delta")
        try:
            cells.append(GridCell(validate(Mechanism(**settings)), delta))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from error
    return cells


def _read_grid_file(path: Path) -> list[object]:
    if not path.is_file():
        raise ValueError(
            f"--grid={str(path)!r}: no such file (give 'default' or a .toml/.json grid file)"
        )
    text = path.read_text()
    if path.suffix.lower() == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
            import tomli as tomllib

        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"grid file {str(path)!r}: {error}") from error
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"grid file {str(path)!r}: {error}") from error
    else:
        raise ValueError(f"grid file {str(path)!r}: suffix must be .toml or .json")
    if isinstance(data, dict):
        if set(data) != {"cells"}:
            raise ValueError(
                f"grid file {str(path)!r}: expected one key 'cells' (a list of entries); got "
                f"{sorted(data)}"
            )
        data = data["cells"]
    if not isinstance(data, list) or not data:
        raise ValueError(f"grid file {str(path)!r}: 'cells' must be a non-empty list of entries")
    return data


GridSpec = str | Path | Iterable[object] | None


def load_grid(grid: GridSpec = "default") -> list[GridCell]:
    """The cells of ``grid``: ``"default"``, a ``.toml``/``.json`` file, or a sequence of entries.

    An entry is a :class:`GridCell`, a ``(Mechanism, delta)`` pair, or a dict of
    :data:`GRID_KEYS` whose list values expand to their Cartesian product. A file holds
    ``cells = [...]`` (TOML: ``[[cells]]`` tables; JSON: ``{"cells": [...]}`` or a list).
    """
    if grid is None or (isinstance(grid, str) and grid == "default"):
        entries: Iterable[object] = DEFAULT_GRID
        source = "default grid"
    elif isinstance(grid, str | Path):
        entries = _read_grid_file(Path(grid))
        source = f"grid file {str(grid)!r}"
    else:
        entries = grid
        source = "grid"
    cells: list[GridCell] = []
    for i, entry in enumerate(entries):
        where = f"{source}, entry {i}"
        if isinstance(entry, GridCell):
            cells.append(entry)
        elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Mechanism):
            cells.append(GridCell(entry[0], entry[1]))
        else:
            cells.extend(_expand_entry(entry, where))
    if not cells:
        raise ValueError(f"{source} has no cells")
    return cells


# --------------------------------------------------------------------------------------
# References from the theory
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """The proven bracket for one cell: eps(delta) of the lower and upper curves (None if none)."""

    lower: float | None
    upper: float | None
    lower_method: str | None = None
    upper_method: str | None = None
    note: str | None = None


ReferenceFunction = Callable[[Mechanism, float], Reference]


def theory_reference(mechanism: Mechanism, delta: float) -> Reference:
    """The bracket from :func:`audit.theory.bounds_for` (which caches the curves per mechanism)."""
    try:
        bounds = bounds_for(mechanism)
    except NotImplementedError as error:
        return Reference(None, None, note=f"no theory for this cell: {error}")
    lower, upper = bounds.lower, bounds.upper
    notes = tuple(getattr(bounds, "notes", ()) or ())
    return Reference(
        lower=curve_epsilon(lower, delta),
        upper=curve_epsilon(upper, delta),
        lower_method=None if lower is None else f"{lower.kind}: {lower.method}",
        upper_method=None if upper is None else f"{upper.kind}: {upper.method}",
        note="; ".join(notes) or None,
    )


# --------------------------------------------------------------------------------------
# Empirical confirmation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmpiricalCheck:
    """A simulated audit of one cell: its eps lower bound, and whether it refutes the claim."""

    trials: int
    attack: str
    threat_model: str
    epsilon_lb: float
    alpha: float
    confirms: bool
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "trials": self.trials,
            "attack": self.attack,
            "threat_model": self.threat_model,
            "epsilon_lb": _json_number(self.epsilon_lb),
            "alpha": self.alpha,
            "confirms_unsound": self.confirms,
            "seconds": round(self.seconds, 3),
        }


def empirical_check(
    cell: GridCell, claimed: float, trials: int, *, alpha: float = 0.05, seed: int = 0
) -> EmpiricalCheck:
    """Simulate ``trials`` IN and OUT runs of ``cell``, score them with the best known attack
    (:func:`attacks.default_attack`) and bound eps at the cell's delta (held-out threshold,
    confidence 1 - alpha; :func:`audit.stats.binary.epsilon_lower_bound`).

    Poisson and truncated Poisson are simulated under the ``isolated`` pair whatever the cell's
    threat model: it is the worst case there (an adversarial co-batch of random size only adds
    variance, see :mod:`audit.training.simulate`), and the theory of both threat models is that
    pair. ``confirms`` is True when the bound exceeds the claim: the claim is then refuted by the
    experiment at confidence 1 - alpha, independently of the theory.
    """
    trials = check_int("trials", trials, minimum=2)
    start = time.perf_counter()
    mechanism = cell.mechanism
    if get_sampler(mechanism.sampler).canary_law == "independent_steps":  # Poisson samplers
        mechanism = mechanism.with_(threat_model="isolated")
    key = json.dumps(cell.configuration(), sort_keys=True)
    observations = simulate_observations(mechanism, trials, rng_for(seed, "check-accountant", key))
    attack = get_attack(default_attack(mechanism))
    scores_in, scores_out = attack.scores(observations)
    del observations
    confidence = exact_confidence(alpha)  # the same alpha, bit for bit
    bound = epsilon_lower_bound(
        scores_in, scores_out, delta=cell.delta, confidence=confidence, threshold="split",
        seed=seed,
    )
    eps_lb = float(bound.epsilon_lb)
    return EmpiricalCheck(
        trials=trials,
        attack=attack.name,
        threat_model=mechanism.threat_model,
        epsilon_lb=eps_lb,
        alpha=alpha,
        confirms=eps_lb > claimed,
        seconds=time.perf_counter() - start,
    )


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


def _json_number(value: float | None) -> float | str | None:
    if value is None:
        return None
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


@dataclass
class CellResult:
    """One supported cell: the claim, the proven bracket and the status."""

    cell: GridCell
    claimed: float
    reference: Reference
    status: str
    empirical: EmpiricalCheck | None = None

    @property
    def lower(self) -> float | None:
        return self.reference.lower

    @property
    def upper(self) -> float | None:
        return self.reference.upper

    def to_dict(self) -> dict[str, object]:
        return {
            "configuration": self.cell.configuration(),
            "claimed": _json_number(self.claimed),
            "lower": _json_number(self.lower),
            "upper": _json_number(self.upper),
            "status": self.status,
            "lower_method": self.reference.lower_method,
            "upper_method": self.reference.upper_method,
            "note": self.reference.note,
            "empirical": None if self.empirical is None else self.empirical.to_dict(),
        }


@dataclass(frozen=True)
class UnsupportedCell:
    """A cell the accountant declined, with its reason."""

    cell: GridCell
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"configuration": self.cell.configuration(), "reason": self.reason}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.5g}"


def format_table(cells: Sequence[CellResult]) -> str:
    """A fixed-width table of cells (one line each)."""
    empirical = any(c.empirical is not None for c in cells)
    header = [
        "sampler",
        "threat",
        "sigma",
        "T",
        "E",
        "n/b/B",
        "delta",
        "claimed",
        "lower",
        "upper",
        "status",
    ]
    if empirical:
        header.append("eps_lb (sim)")
    rows = [header]
    for c in cells:
        m = c.cell.mechanism
        padded = "max_batch_size" in get_sampler(m.sampler).parameters
        sizes = f"{m.n}/{m.batch_size}/{m.max_batch_size}" if padded else "-"
        row = [
            m.sampler, m.threat_model, f"{m.sigma:g}", str(m.steps_per_epoch), str(m.epochs), sizes,
            f"{c.cell.delta:g}", _fmt(c.claimed), _fmt(c.lower), _fmt(c.upper), c.status,
        ]
        if empirical:
            e = c.empirical
            row.append(
                "-"
                if e is None
                else f"{_fmt(e.epsilon_lb)} ({'refutes' if e.confirms else 'does not refute'})"
            )
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class CheckReport:
    """The check of one accountant over a grid."""

    accountant: str
    cells: list[CellResult]
    unsupported: list[UnsupportedCell] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def unsound(self) -> list[CellResult]:
        return [c for c in self.cells if c.status == "unsound"]

    @property
    def loose(self) -> list[CellResult]:
        return [c for c in self.cells if c.status == "loose"]

    def counts(self) -> dict[str, int]:
        counts = {s: sum(c.status == s for c in self.cells) for s in STATUSES}
        counts["unsupported"] = len(self.unsupported)
        return counts

    def tolerances(self) -> dict[str, object]:
        return {
            "unsound": f"claimed < lower - ({UNSOUND_ABSOLUTE_TOLERANCE:g} + "
            f"{UNSOUND_RELATIVE_TOLERANCE:g} * lower)",
            "loose": f"claimed > upper + ({LOOSE_ABSOLUTE_MARGIN:g} + {LOOSE_RELATIVE_MARGIN:g} * "
                     "upper)",
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "accountant": self.accountant,
            "counts": self.counts(),
            "tolerances": self.tolerances(),
            "seconds": round(self.seconds, 3),
            "cells": [c.to_dict() for c in self.cells],
            "unsupported": [u.to_dict() for u in self.unsupported],
        }

    def table(self) -> str:
        """The readable report: the table of supported cells, unsupported reasons, the rules."""
        counts = self.counts()
        lines = [
            f"accountant {self.accountant!r}: "
            + ", ".join(f"{counts[s]} {s}" for s in (*STATUSES, "unsupported"))
            + f" ({self.seconds:.1f} s)",
        ]
        if self.cells:
            lines += ["", format_table(self.cells)]
        notes: dict[str, set[str]] = {}
        for c in self.cells:
            if c.reference.note:
                notes.setdefault(c.reference.note, set()).add(c.cell.mechanism.sampler)
        if notes:
            lines += ["", "notes:"] + [f"  {', '.join(sorted(v))}: {k}" for k, v in notes.items()]
        if self.unsupported:
            lines += ["", "unsupported cells:"]
            reasons: dict[str, list[str]] = {}
            for u in self.unsupported:
                reasons.setdefault(u.reason, []).append(u.cell.mechanism.sampler)
            for reason, samplers in reasons.items():
                lines.append(
                    f"  {', '.join(sorted(set(samplers)))} ({len(samplers)} cells): {reason}"
                )
        tol = self.tolerances()
        lines += [
            "",
            "lower: achieved by a known pair (the true eps is at least this); upper: a guarantee.",
            f"unsound: {tol['unsound']}; loose: {tol['loose']}.",
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------


def check_accountant(
    accountant: str | Accountant | AccountantSpec,
    grid: GridSpec = "default",
    *,
    empirical_trials: int | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    reference: ReferenceFunction | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Evaluate ``accountant`` on every cell of ``grid`` and classify each supported cell.

    Args:
        accountant: a registered name, ``"package.module:function"``, or a callable
            ``(mechanism, delta) -> float | Unsupported``.
        grid: ``"default"``, a grid file, or entries (see :func:`load_grid`).
        empirical_trials: if given, every ``unsound`` cell is also audited by simulation with
            this many IN and this many OUT trials (see :func:`empirical_check`).
        alpha: 1 - confidence of the empirical eps lower bounds.
        seed: the audit seed of the simulations (split per cell).
        reference: ``(mechanism, delta) -> Reference``; default :func:`theory_reference`.
        progress: called with one line per cell (e.g. ``print`` to stderr).
    """
    spec = get_accountant(accountant)
    cells = load_grid(grid)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    if empirical_trials is not None:
        empirical_trials = check_int("empirical_trials", empirical_trials, minimum=2)
    reference = reference or theory_reference
    start = time.perf_counter()
    results: list[CellResult] = []
    unsupported: list[UnsupportedCell] = []
    for cell in cells:
        try:
            claim = claim_epsilon(spec.function, cell.mechanism, cell.delta)
        # the accountant's fault, not a finding: one line naming the cell (exit 2)
        except Exception as error:
            raise AuditInputError(
                f"accountant {spec.name!r} raised {type(error).__name__}: "
                f"{' '.join(str(error).split())} "
                f"while evaluating {cell.configuration()}",
                culprit=spec.name,
                fix="fix the accountant (--debug shows its traceback)",
            ) from error
        if isinstance(claim, Unsupported):
            unsupported.append(UnsupportedCell(cell, claim.reason))
            continue
        ref = reference(cell.mechanism, cell.delta)
        result = CellResult(cell, claim, ref, classify(claim, ref.lower, ref.upper))
        if empirical_trials is not None and result.status == "unsound":
            result.empirical = empirical_check(
                cell, claim, empirical_trials, alpha=alpha, seed=seed
            )
        results.append(result)
        if progress is not None:
            m = cell.mechanism
            progress(
                f"{m.sampler}/{m.threat_model} sigma={m.sigma:g} T={m.steps_per_epoch} "
                f"E={m.epochs} "
                f"delta={cell.delta:g}: claimed {_fmt(claim)}, lower {_fmt(ref.lower)}, "
                f"upper {_fmt(ref.upper)} -> {result.status}"
            )
    return CheckReport(spec.name, results, unsupported, time.perf_counter() - start)
