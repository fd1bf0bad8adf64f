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

Verdict of a cell (the names are a contract; docs/design.md §11.1):

- ``invalid``: the answer is not a claim: nan, negative, not a number, an exception (with its
  message), inf where the theory's guarantee is finite, an answer that changed when the
  cell was asked again, or Unsupported on one ask and a number on another;
- ``unsound``: claimed < lower - tol(lower), with tol(x) = 1e-3 + 1e-3 x (a proven lower
  bound refutes it);
- ``loose``: claimed > upper + margin(upper), with margin(x) = 0.01 + 0.05 x;
- ``ok``: upper - tol(upper) <= claimed <= upper + margin(upper) (a proven guarantee is at
  most the claim, within the numerical slack tol);
- ``unverified``: everything else: the claim lies between the proven lower bound and the
  proven upper bound (or no upper bound is known for the cell under the relation, e.g. the
  shuffles' adversarial cells, whose only guarantee is the deterministic curve), or the
  bracket is inconsistent (lower above upper beyond tol: a numerical fault of the theory,
  which then proves nothing).

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
    get_accountant,
)
from audit.accounting.adjacency import DEFAULT_ADJACENCY, check_adjacency
from audit.accounting.reference import Bracket, TheoryCache, mechanism_epsilon_bracket
from audit.core.exact_confidence import exact_confidence
from audit.core.mechanism import Mechanism
from audit.core.seeding import rng_for
from audit.core.validation import check_choice, check_int, check_probability, check_real
from audit.sampling import get_sampler, registered_samplers, validate
from audit.stats.binary import epsilon_lower_bound
from audit.training.simulate import simulate_observations

__all__ = [
    "DEFAULT_FAIL_ON",
    "DEFAULT_GRID",
    "EXIT_CODES",
    "GRIDS",
    "LOOSE_ABSOLUTE_MARGIN",
    "LOOSE_RELATIVE_MARGIN",
    "REPEAT_TOLERANCE",
    "STATUSES",
    "THOROUGH_GRID",
    "UNSOUND_ABSOLUTE_TOLERANCE",
    "UNSOUND_RELATIVE_TOLERANCE",
    "VERDICTS",
    "CellResult",
    "CheckReport",
    "EmpiricalCheck",
    "Grid",
    "GridCell",
    "Reference",
    "UnsupportedCell",
    "check_accountant",
    "classify",
    "load_grid",
    "loose_margin",
    "resolve_grid",
    "theory_reference",
    "unsound_tolerance",
]

VERDICTS: tuple[str, ...] = ("unsound", "invalid", "unverified", "loose", "ok")
"""The verdicts of a cell, most severe first (module docstring)."""

STATUSES: tuple[str, ...] = VERDICTS
"""The old name of :data:`VERDICTS` (kept)."""

EXIT_CODES: dict[str, int] = {"unsound": 1, "invalid": 5, "unverified": 6, "loose": 7}
"""``audit check-accountant``'s exit status when a cell has this verdict and the verdict is in
``--fail-on`` (the most severe one wins, in the order of :data:`VERDICTS`); 0 otherwise, 2 on
bad input (3 and 4 are the harness's environment and internal errors, docs/design.md §15)."""

DEFAULT_FAIL_ON: tuple[str, ...] = ("unsound", "invalid")
"""The verdicts that fail a check by default (``unverified`` and ``loose`` are reported but
do not fail: a correct accountant can be either where the theory is loose)."""

UNSOUND_ABSOLUTE_TOLERANCE = 1e-3
UNSOUND_RELATIVE_TOLERANCE = 1e-3
LOOSE_ABSOLUTE_MARGIN = 0.01
LOOSE_RELATIVE_MARGIN = 0.05
REPEAT_TOLERANCE = 1e-9
"""Two answers to the same cell differ when |a - b| > 1e-9 max(1, |a|): far above float
round-off of a deterministic computation, far below any effect of state (a cache that ignores
the step count, an accountant that composes on every call)."""


def unsound_tolerance(lower: float) -> float:
    """How far below a proven lower bound a claim may be before it is ``unsound``: 1e-3 + 1e-3 x."""
    return UNSOUND_ABSOLUTE_TOLERANCE + UNSOUND_RELATIVE_TOLERANCE * abs(lower)


def loose_margin(upper: float) -> float:
    """How far above the best upper bound a claim may be before it is ``loose``: 0.01 + 0.05 x."""
    return LOOSE_ABSOLUTE_MARGIN + LOOSE_RELATIVE_MARGIN * abs(upper)


def _consistent(lower: float | None, upper: float | None) -> bool:
    if lower is None or upper is None or not math.isfinite(upper) or not math.isfinite(lower):
        return True
    return lower <= upper + unsound_tolerance(upper)


def classify(claimed: float, lower: float | None, upper: float | None) -> str:
    """The verdict of a claim against the bracket [lower, upper] (module docstring).

    ``invalid`` for nan, a negative claim, or inf where ``upper`` is finite; ``unsound`` below
    ``lower - tol(lower)`` (a finite claim under an infinite lower bound too); ``loose`` above
    ``upper + margin(upper)``; ``ok`` from ``upper - tol(upper)`` up; ``unverified`` otherwise
    (between the bounds, no upper bound, or an inconsistent bracket).
    """
    if math.isnan(claimed) or claimed < 0:
        return "invalid"
    finite_upper = upper is not None and math.isfinite(upper)
    if math.isinf(claimed):
        return "invalid" if finite_upper else "ok"
    if lower is not None and not math.isnan(lower):
        if math.isinf(lower):
            if lower > 0:
                return "unsound"
        elif claimed < lower - unsound_tolerance(lower):
            return "unsound" if _consistent(lower, upper) else "unverified"
    if finite_upper:
        assert upper is not None
        if claimed > upper + loose_margin(upper):
            return "loose"
        if claimed >= upper - unsound_tolerance(upper):
            return "ok"
    return "unverified"


# --------------------------------------------------------------------------------------
# The grids
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
    # Fixed-size batches drawn independently at each step (Lebeda et al. 2024), both threat
    # models: n = 1000, b = 10 (q = 0.01), 100 steps; a Poisson accountant applied to it is
    # unsound under the adversarial co-batch (the fixed size reveals the canary's steps).
    {
        "sampler": "sampled_without_replacement",
        "threat_model": ["adversarial", "isolated"],
        "sigma": 0.8,
        "steps_per_epoch": 100,
        "epochs": 1,
        "n": 1000,
        "batch_size": 10,
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


THOROUGH_GRID: tuple[dict[str, object], ...] = (
    *DEFAULT_GRID,
    # Poisson: the same (sigma, q) at growing step counts, on both sides of 5000 steps and up
    # to 1e5 (a cache keyed without the step count, an overflow past some count), deltas down
    # to 1e-10. q = 0.01, sigma = 1: eps from 0.5 to 25.
    # (1e5 steps at 1e-10 was left out while the reference's lower eps exceeded its upper
    # there: the FFT power's round-off floor, now counted by audit.theory.pld.roundoff_per_atom)
    {"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 100,
     "epochs": [1, 10, 60, 100, 1000], "delta": [1e-5, 1e-10]},
    # q = 0.001, sigma = 2: small epsilons (0.05 to 1) up to 1e5 steps.
    {"sampler": "poisson", "sigma": 2.0, "steps_per_epoch": 1000, "epochs": [1, 6, 10, 100],
     "delta": [1e-6, 1e-10]},
    # q = 0.1, sigma = 0.8: few heavy steps, large epsilons.
    {"sampler": "poisson", "sigma": 0.8, "steps_per_epoch": 10, "epochs": [1, 10, 100],
     "delta": [1e-5, 1e-8]},
    # Small epsilons: high noise (eps 0.02 to 0.2).
    {"sampler": "poisson", "sigma": 5.0, "steps_per_epoch": 250, "epochs": [4, 40],
     "delta": [1e-5, 1e-10]},
    # Deterministic: exact Gaussian DP, from one epoch to 1000 epochs.
    {"sampler": "deterministic", "sigma": [1.0, 20.0], "steps_per_epoch": 100,
     "epochs": [1, 10, 100, 1000], "delta": [1e-5, 1e-10]},
    # Truncated Poisson: the default twin at more steps and a smaller delta.
    {"sampler": "truncated_poisson", "sigma": 2.0, "steps_per_epoch": 10, "epochs": [10, 100],
     "n": 1000, "batch_size": 100, "max_batch_size": 150, "delta": [1e-5, 1e-10]},
    # Shuffles and balls-and-bins at a tiny delta.
    {"sampler": ["persistent_shuffle", "dynamic_shuffle"],
     "threat_model": ["adversarial", "isolated"], "sigma": 0.8, "steps_per_epoch": 1000,
     "epochs": 1, "delta": 1e-10},
    {"sampler": "balls_and_bins", "threat_model": ["adversarial", "isolated"], "sigma": 1.0,
     "steps_per_epoch": 10, "epochs": [3, 30], "delta": [1e-5, 1e-10]},
)
"""The thorough grid (``--grid thorough``): the default grid's cells, then growing step counts
up to 1e5 at fixed (sigma, q), deltas down to 1e-10, small epsilons; asked in a seeded random
order, each twice (:class:`Grid`). Every registered sampler with theory that no entry names
gets generic cells too (:func:`generic_entries`), so a sampler added later is checked."""

THOROUGH_REPEATS = 2
THOROUGH_ORDER_SEED = 0


def generic_entries(named: Iterable[str]) -> list[dict[str, object]]:
    """Cells for every registered sampler with theory not in ``named``: sigma = 1, T = 100,
    E in {1, 10}, n = 10000, b = 100, both threat models, deltas 1e-5 and 1e-10 (the
    combinations the sampler refuses are left out)."""
    from audit.theory.registry import THEORIES

    named = set(named)
    out: list[dict[str, object]] = []
    for sampler in registered_samplers():
        name = sampler if isinstance(sampler, str) else getattr(sampler, "name", str(sampler))
        if name in named or THEORIES.find(name) is None:
            continue
        for threat in ("adversarial", "isolated"):
            entry: dict[str, object] = {
                "sampler": name, "threat_model": threat, "sigma": 1.0, "steps_per_epoch": 100,
                "epochs": [1, 10], "n": 10_000, "batch_size": 100, "delta": [1e-5, 1e-10],
            }
            try:
                validate(Mechanism(name, sigma=1.0, steps_per_epoch=100, threat_model=threat,
                                   n=10_000, batch_size=100))
            except (TypeError, ValueError):
                continue
            out.append(entry)
    return out


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

    def cell_id(self) -> str:
        """A short readable id, e.g. ``poisson-adversarial-s1-T100-E10-d1e-05``."""
        m = self.mechanism
        sizes = "".join(
            f"-{k}{v}" for k, v in (("n", m.n), ("b", m.batch_size), ("B", m.max_batch_size))
            if v is not None
        )
        return (f"{m.sampler}-{m.threat_model}-s{m.sigma:g}-T{m.steps_per_epoch}-E{m.epochs}"
                f"{sizes}-d{self.delta:g}")

    def describe(self) -> str:
        """The mechanism in words."""
        m = self.mechanism
        steps = m.total_steps
        parts = [f"sigma = {m.sigma:g}",
                 f"{steps} steps ({m.epochs} epochs of {m.steps_per_epoch})"]
        if get_sampler(m.sampler).canary_law == "independent_steps":
            parts.append(f"q = {m.sampling_probability:.4g}")
        sizes = [f"{k} = {v}" for k, v in (("n", m.n), ("b", m.batch_size),
                                            ("B", m.max_batch_size)) if v is not None]
        return f"{m.sampler} batches ({', '.join(parts + sizes)}, {m.threat_model} threat model)"


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
            f"--grid={str(path)!r}: no such file (give 'default', 'thorough' or a .toml/.json "
            "grid file)"
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

GRIDS: tuple[str, ...] = ("default", "thorough")
"""The built-in grids by name."""


@dataclass(frozen=True)
class Grid:
    """A grid and how it is asked: its distinct cells, ``repeats`` asks of each, and the seed
    of the random order of the asks (None: the order of the cells, every pass)."""

    name: str
    cells: tuple[GridCell, ...]
    repeats: int = 1
    order_seed: int | None = None


def _dedupe(cells: Iterable[GridCell]) -> list[GridCell]:
    seen: set[GridCell] = set()
    out = []
    for c in cells:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def load_grid(grid: GridSpec = "default") -> list[GridCell]:
    """The distinct cells of ``grid``: ``"default"``, ``"thorough"``, a ``.toml``/``.json``
    file, or a sequence of entries (a cell listed twice is kept once, at its first place).

    An entry is a :class:`GridCell`, a ``(Mechanism, delta)`` pair, or a dict of
    :data:`GRID_KEYS` whose list values expand to their Cartesian product. A file holds
    ``cells = [...]`` (TOML: ``[[cells]]`` tables; JSON: ``{"cells": [...]}`` or a list).
    """
    if isinstance(grid, Grid):
        return list(grid.cells)
    if grid is None or (isinstance(grid, str) and grid == "default"):
        entries: Iterable[object] = DEFAULT_GRID
        source = "default grid"
    elif isinstance(grid, str) and grid == "thorough":
        named: set[object] = set()
        for e in THOROUGH_GRID:
            s = e["sampler"]
            named.update(s if isinstance(s, list | tuple) else [s])
        entries = [*THOROUGH_GRID, *generic_entries(str(n) for n in named)]
        source = "thorough grid"
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
    return _dedupe(cells)


def resolve_grid(
    grid: GridSpec | Grid = "default", *, repeats: int | None = None,
    order_seed: int | None = None,
) -> Grid:
    """The :class:`Grid` of ``grid``: ``thorough`` is asked twice in a random order of seed 0,
    the others once in their order, unless ``repeats`` / ``order_seed`` say otherwise."""
    if isinstance(grid, Grid):
        base = grid
    else:
        thorough = isinstance(grid, str) and grid == "thorough"
        name = grid if isinstance(grid, str | Path) else ("default" if grid is None else "custom")
        base = Grid(
            str(name), tuple(load_grid(grid)),
            THOROUGH_REPEATS if thorough else 1, THOROUGH_ORDER_SEED if thorough else None,
        )
    if repeats is not None:
        base = Grid(base.name, base.cells, check_int("repeats", repeats, minimum=1),
                    base.order_seed)
    if order_seed is not None:
        base = Grid(base.name, base.cells, base.repeats, check_int("order_seed", order_seed))
    return base


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

    @property
    def consistent(self) -> bool:
        """False when lower > upper + tol(upper) (module docstring)."""
        return _consistent(self.lower, self.upper)

    @classmethod
    def from_bracket(cls, bracket: Bracket) -> Reference:
        return cls(bracket.lower, bracket.upper, bracket.lower_method, bracket.upper_method,
                   bracket.note)


ReferenceFunction = Callable[[Mechanism, float], Reference]


def theory_reference(
    mechanism: Mechanism, delta: float, *, adjacency: str = DEFAULT_ADJACENCY,
    cache: TheoryCache | str | Path | bool | None = False,
) -> Reference:
    """The bracket of :func:`audit.accounting.reference.mechanism_epsilon_bracket` under
    ``adjacency`` (the curves cached per mechanism in memory; ``cache``: on disk too)."""
    bracket = mechanism_epsilon_bracket(mechanism, delta, adjacency=adjacency, cache=cache)
    return Reference.from_bracket(bracket)


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
    sampler = get_sampler(mechanism.sampler)
    # Poisson samplers: both threat models are the isolated pair; a sampler whose adversarial
    # co-batch is a stronger attack (fixed-size batches drawn independently) keeps its own
    if sampler.canary_law == "independent_steps" and not sampler.adversarial_worst:
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
    if math.isnan(value):
        return "nan"
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _fmt(value: float | None, digits: int = 5) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


@dataclass
class CellResult:
    """One supported cell: the claim, the proven bracket, the verdict and the margins.

    ``claimed`` is the first answer (nan where it was not a number), ``answers`` every
    answer in the order asked, ``error`` why an ``invalid`` cell is invalid.
    """

    cell: GridCell
    claimed: float
    reference: Reference
    status: str
    empirical: EmpiricalCheck | None = None
    answers: tuple[float, ...] = ()
    error: str | None = None
    adjacency: str = DEFAULT_ADJACENCY

    @property
    def verdict(self) -> str:
        return self.status

    @property
    def lower(self) -> float | None:
        return self.reference.lower

    @property
    def upper(self) -> float | None:
        return self.reference.upper

    @property
    def ratio(self) -> float | None:
        """claimed / lower (None without a finite positive lower bound or a finite claim)."""
        lower = self.lower
        if lower is None or not math.isfinite(lower) or lower <= 0 or not math.isfinite(
            self.claimed
        ):
            return None
        return self.claimed / lower

    @property
    def difference(self) -> float | None:
        """claimed - lower (None without a finite lower bound or a finite claim)."""
        lower = self.lower
        if lower is None or not math.isfinite(lower) or not math.isfinite(self.claimed):
            return None
        return self.claimed - lower

    def sentence(self) -> str:
        """One sentence: the mechanism in words, the verdict, by how much, at which delta."""
        where = f"{self.cell.describe()}, {self.adjacency} adjacency"
        d = self.cell.delta
        c, lo, up = self.claimed, self.lower, self.upper
        if self.status == "invalid":
            return f"{where}: at delta {d:g} the answer is invalid: {self.error}."
        if self.status == "unsound":
            assert lo is not None
            if math.isinf(lo):
                return (f"{where}: claimed eps {_fmt(c)} at delta {d:g}, but no finite eps "
                        "holds there (the proven lower bound is inf).")
            under = lo - c
            return (f"{where}: claimed eps {_fmt(c)} at delta {d:g} is {_fmt(under, 4)} below "
                    f"the proven lower bound {_fmt(lo)} ({100 * under / lo:.3g}% under, "
                    f"claim/lower = {_fmt(c / lo, 5)}; tolerance {unsound_tolerance(lo):.2g}).")
        if self.status == "loose":
            assert up is not None
            return (f"{where}: claimed eps {_fmt(c)} at delta {d:g} is {_fmt(c - up, 4)} above "
                    f"the proven upper bound {_fmt(up)} (more than the margin "
                    f"{loose_margin(up):.2g}): a valid guarantee that leaves privacy unused.")
        if self.status == "unverified":
            if not self.reference.consistent:
                return (f"{where}: claimed eps {_fmt(c)} at delta {d:g}: the theory's bracket is "
                        f"inconsistent (lower {_fmt(lo)} > upper {_fmt(up)}), so the claim is "
                        "neither refuted nor verified.")
            below = "no proven lower bound" if lo is None else f"the proven lower bound {_fmt(lo)}"
            above = (f"no proven upper bound under {self.adjacency} adjacency" if up is None
                     or not math.isfinite(up) else f"the proven upper bound {_fmt(up)}")
            return (f"{where}: claimed eps {_fmt(c)} at delta {d:g} lies between {below} and "
                    f"{above}: neither refuted nor verified.")
        return f"{where}: claimed eps {_fmt(c)} at delta {d:g} is ok."

    def to_dict(self) -> dict[str, object]:
        return {
            "configuration": self.cell.configuration(),
            "id": self.cell.cell_id(),
            "adjacency": self.adjacency,
            "claimed": _json_number(self.claimed),
            "answers": [_json_number(a) for a in self.answers],
            "lower": _json_number(self.lower),
            "upper": _json_number(self.upper),
            "claim_over_lower": _json_number(self.ratio),
            "claim_minus_lower": _json_number(self.difference),
            "status": self.status,
            "verdict": self.status,
            "error": self.error,
            "sentence": self.sentence(),
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


def format_table(cells: Sequence[CellResult]) -> str:
    """A fixed-width table of cells (one line each), with the margins claim/lower and
    claim - lower."""
    empirical = any(c.empirical is not None for c in cells)
    header = [
        "sampler", "threat", "sigma", "T", "E", "n/b/B", "delta", "claimed", "lower", "upper",
        "claim/lower", "claim-lower", "verdict",
    ]
    if empirical:
        header.append("eps_lb (sim)")
    rows = [header]
    for c in cells:
        m = c.cell.mechanism
        sizes = "/".join("-" if v is None else str(v) for v in (m.n, m.batch_size,
                                                                m.max_batch_size))
        row = [
            m.sampler, m.threat_model, f"{m.sigma:g}", str(m.steps_per_epoch), str(m.epochs),
            sizes if sizes != "-/-/-" else "-", f"{c.cell.delta:g}", _fmt(c.claimed),
            _fmt(c.lower), _fmt(c.upper),
            "-" if c.ratio is None else f"{c.ratio:.5f}",
            "-" if c.difference is None else f"{c.difference:+.4g}",
            c.status,
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
    adjacency: str = DEFAULT_ADJACENCY
    claimed_adjacency: str | None = None
    grid: str = "default"
    repeats: int = 1
    order_seed: int | None = None
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    cpu_seconds: float = 0.0
    theory_seconds: float = 0.0
    cache: str | None = None

    def with_verdict(self, verdict: str) -> list[CellResult]:
        return [c for c in self.cells if c.status == verdict]

    @property
    def unsound(self) -> list[CellResult]:
        return self.with_verdict("unsound")

    @property
    def invalid(self) -> list[CellResult]:
        return self.with_verdict("invalid")

    @property
    def unverified(self) -> list[CellResult]:
        return self.with_verdict("unverified")

    @property
    def loose(self) -> list[CellResult]:
        return self.with_verdict("loose")

    @property
    def failing(self) -> list[CellResult]:
        """The cells whose verdict is in ``fail_on``."""
        return [c for c in self.cells if c.status in self.fail_on]

    @property
    def mismatch(self) -> str | None:
        """A sentence when the accountant states its claims for another relation."""
        if self.claimed_adjacency is None or self.claimed_adjacency == self.adjacency:
            return None
        return (f"adjacency mismatch: accountant {self.accountant!r} states its claims for "
                f"{self.claimed_adjacency} neighbours; this check is under {self.adjacency} "
                f"(give --adjacency {self.claimed_adjacency} to check what it claims)")

    def exit_code(self) -> int:
        """The exit status (:data:`EXIT_CODES`): the most severe verdict in ``fail_on``."""
        for verdict in VERDICTS:
            if verdict in self.fail_on and verdict in EXIT_CODES and self.with_verdict(verdict):
                return EXIT_CODES[verdict]
        return 0

    def counts(self) -> dict[str, int]:
        counts = {s: sum(c.status == s for c in self.cells) for s in VERDICTS}
        counts["unsupported"] = len(self.unsupported)
        return counts

    def tolerances(self) -> dict[str, object]:
        return {
            "unsound": f"claimed < lower - ({UNSOUND_ABSOLUTE_TOLERANCE:g} + "
            f"{UNSOUND_RELATIVE_TOLERANCE:g} * lower)",
            "loose": f"claimed > upper + ({LOOSE_ABSOLUTE_MARGIN:g} + {LOOSE_RELATIVE_MARGIN:g} * "
                     "upper)",
            "ok": f"upper - ({UNSOUND_ABSOLUTE_TOLERANCE:g} + {UNSOUND_RELATIVE_TOLERANCE:g} * "
                  "upper) <= claimed <= upper + margin",
            "unverified": "between the bounds, no upper bound, or an inconsistent bracket",
            "invalid": "nan, negative, not a number, an exception, inf where the guarantee is "
                       f"finite, or two answers differing by more than {REPEAT_TOLERANCE:g} "
                       "relative",
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "accountant": self.accountant,
            "grid": self.grid,
            "adjacency": self.adjacency,
            "claimed_adjacency": self.claimed_adjacency,
            "mismatch": self.mismatch,
            "repeats": self.repeats,
            "order_seed": self.order_seed,
            "fail_on": list(self.fail_on),
            "exit_code": self.exit_code(),
            "counts": self.counts(),
            "tolerances": self.tolerances(),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "theory_seconds": round(self.theory_seconds, 3),
            "theory_cache": self.cache,
            "cells": [c.to_dict() for c in self.cells],
            "findings": [c.sentence() for c in self.cells if c.status != "ok"],
            "unsupported": [u.to_dict() for u in self.unsupported],
        }

    def table(self) -> str:
        """The readable report: counts, the table (each cell once), one sentence per cell that
        is not ok, notes, unsupported reasons, the rules."""
        counts = self.counts()
        total = len(self.cells) + len(self.unsupported)
        lines = [
            f"accountant {self.accountant!r}, grid {self.grid} ({total}"
            f" cells, each asked {self.repeats}x"
            + (f", random order seed {self.order_seed}" if self.order_seed is not None else "")
            + f"), {self.adjacency} adjacency: "
            + ", ".join(f"{counts[s]} {s}" for s in (*VERDICTS, "unsupported"))
            + f" ({self.seconds:.1f} s wall, {self.cpu_seconds:.1f} s CPU, theory "
            f"{self.theory_seconds:.1f} s)",
        ]
        if self.mismatch:
            lines.append(self.mismatch)
        if self.cells:
            lines += ["", format_table(self.cells)]
        findings = [c for c in self.cells if c.status != "ok"]
        if findings:
            lines += ["", "findings:"]
            order = {v: i for i, v in enumerate(VERDICTS)}
            for c in sorted(findings, key=lambda c: order[c.status]):
                lines.append(f"  [{c.status}] {c.sentence()}")
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
            f"unsound: {tol['unsound']}; ok: {tol['ok']}; loose: {tol['loose']}; unverified: "
            f"{tol['unverified']}; invalid: {tol['invalid']}.",
            f"exit status: {self.exit_code()} (fails on: {', '.join(self.fail_on) or 'nothing'})",
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    value: float | None = None
    unsupported: str | None = None
    error: str | None = None


def _ask(function: Accountant, cell: GridCell) -> _Answer:
    """One call of the accountant, its answer or error as data (never raises)."""
    try:
        answer = function(cell.mechanism, cell.delta)
    except Exception as error:  # the accountant's fault: the cell is invalid, the rest go on
        return _Answer(error=f"raised {type(error).__name__}: {' '.join(str(error).split())}")
    if isinstance(answer, Unsupported):
        return _Answer(unsupported=answer.reason)
    numeric = isinstance(answer, int | float) or hasattr(answer, "__float__")
    if isinstance(answer, bool) or not numeric:
        return _Answer(error=f"returned {answer!r}, not a float eps >= 0 or Unsupported(reason)")
    try:
        return _Answer(value=float(answer))
    except (TypeError, ValueError) as error:
        return _Answer(error=f"returned {answer!r}, not a number ({error})")


def _differ(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return False
    if math.isinf(a) or math.isinf(b):
        return a != b
    return abs(a - b) > REPEAT_TOLERANCE * max(1.0, abs(a))


def _judge(answers: list[_Answer]) -> tuple[float, tuple[float, ...], str | None, str | None]:
    """(claim, numeric answers, unsupported reason, error) of one cell's answers."""
    errors = [a.error for a in answers if a.error is not None]
    values = tuple(a.value for a in answers if a.value is not None)
    reasons = [a.unsupported for a in answers if a.unsupported is not None]
    claim = values[0] if values else math.nan
    if errors:
        return claim, values, None, errors[0]
    if reasons and values:
        return claim, values, None, (
            f"answered {_fmt(values[0])} on one ask and Unsupported ({reasons[0]}) on another"
        )
    if reasons:
        return claim, values, reasons[0], None
    for later in values[1:]:
        if _differ(values[0], later):
            return claim, values, None, (
                f"answered {values[0]!r} then {later!r} for the same cell (state: a cache or a "
                "composition that outlives the call)"
            )
    if math.isnan(claim):
        return claim, values, None, "returned nan"
    if claim < 0:
        return claim, values, None, f"returned a negative eps ({claim!r})"
    return claim, values, None, None


def check_accountant(
    accountant: str | Accountant | AccountantSpec,
    grid: GridSpec | Grid = "default",
    *,
    adjacency: str | None = None,
    repeats: int | None = None,
    order_seed: int | None = None,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    cache: TheoryCache | str | Path | bool | None = False,
    empirical_trials: int | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    reference: ReferenceFunction | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Ask ``accountant`` every cell of ``grid`` and give each supported cell a verdict.

    Every cell is reported, whatever another cell's answer was: an exception, nan or a
    negative eps makes that cell ``invalid`` (with the message), and the check goes on.

    Args:
        accountant: a registered name, ``"package.module:function"``, or a callable
            ``(mechanism, delta) -> float | Unsupported``.
        grid: ``"default"``, ``"thorough"``, a grid file, entries (see :func:`load_grid`),
            or a :class:`Grid`.
        adjacency: the neighbouring relation the claims are checked under (``zero_out``,
            ``add_remove``, ``replace_one``; default ``zero_out``). An accountant that states
            another one (:attr:`AccountantSpec.adjacency`) is named in the report.
        repeats: how many times each cell is asked (default: 2 for ``thorough``, else 1); two
            answers that differ make the cell ``invalid``.
        order_seed: the asks go in a random order of this seed, a new order each pass
            (default: seed 0 for ``thorough``, else the grid's order).
        fail_on: the verdicts that make :meth:`CheckReport.exit_code` non-zero.
        cache: the disk cache of the theory's brackets (False: none; None: the default
            folder; a folder; see :mod:`audit.accounting.reference`).
        empirical_trials: if given, every ``unsound`` cell is also audited by simulation with
            this many IN and this many OUT trials (see :func:`empirical_check`).
        alpha: 1 - confidence of the empirical eps lower bounds.
        seed: the audit seed of the simulations (split per cell).
        reference: ``(mechanism, delta) -> Reference``; default :func:`theory_reference`
            under ``adjacency``.
        progress: called with one line per cell (e.g. ``print`` to stderr).
    """
    import numpy as np

    spec = get_accountant(accountant)
    plan = resolve_grid(grid, repeats=repeats, order_seed=order_seed)
    adjacency = check_adjacency(DEFAULT_ADJACENCY if adjacency is None else adjacency)
    fail_on = tuple(check_choice("fail_on", v, VERDICTS) for v in fail_on)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    if empirical_trials is not None:
        empirical_trials = check_int("empirical_trials", empirical_trials, minimum=2)
    from audit.accounting.reference import resolve_cache

    store = resolve_cache(cache)
    if reference is None:
        def reference(m: Mechanism, d: float) -> Reference:
            return theory_reference(m, d, adjacency=adjacency,
                                    cache=False if store is None else store)

    start, cpu_start = time.perf_counter(), time.process_time()
    cells = plan.cells
    answers: list[list[_Answer]] = [[] for _ in cells]
    for r in range(plan.repeats):
        order = np.arange(len(cells))
        if plan.order_seed is not None:
            order = rng_for(plan.order_seed, "check-accountant-order", r).permutation(len(cells))
        for i in order.tolist():
            answers[i].append(_ask(spec.function, cells[i]))
    results: list[CellResult] = []
    unsupported: list[UnsupportedCell] = []
    theory_seconds = 0.0
    for cell, asked in zip(cells, answers, strict=True):
        claim, values, reason, error = _judge(asked)
        if reason is not None:
            unsupported.append(UnsupportedCell(cell, reason))
            continue
        t0 = time.perf_counter()
        if error is not None and not any(math.isfinite(v) for v in values):
            ref = Reference(None, None, note="no bracket computed: no finite answer to compare")
        else:
            ref = reference(cell.mechanism, cell.delta)
        theory_seconds += time.perf_counter() - t0
        if error is None:
            status = classify(claim, ref.lower, ref.upper)
            if status == "invalid":
                error = (f"returned inf where the proven guarantee is finite ({_fmt(ref.upper)}):"
                         " an overflow?")
        else:
            status = "invalid"
        result = CellResult(cell, claim, ref, status, answers=values, error=error,
                            adjacency=adjacency)
        if empirical_trials is not None and result.status == "unsound":
            result.empirical = empirical_check(
                cell, claim, empirical_trials, alpha=alpha, seed=seed
            )
        results.append(result)
        if progress is not None:
            progress(f"{cell.cell_id()}: claimed {_fmt(claim)}, lower {_fmt(ref.lower)}, "
                     f"upper {_fmt(ref.upper)} -> {result.status}")
    return CheckReport(
        spec.name, results, unsupported, time.perf_counter() - start, adjacency=adjacency,
        claimed_adjacency=spec.adjacency, grid=plan.name, repeats=plan.repeats,
        order_seed=plan.order_seed, fail_on=fail_on,
        cpu_seconds=time.process_time() - cpu_start, theory_seconds=theory_seconds,
        cache=None if store is None else str(store.directory),
    )
