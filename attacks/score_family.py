"""A family of score statistics that do not assume the code is right (docs/design/attacks.md §7.4;
issue 33 item 3).

Every statistic maps the recorded all-iterates observations of one canary (one-run) or one
trial (multi-run), ``y = (y_1, ..., y_S)`` in units of C, to one score, higher meaning "canary
IN". Under correct DP-SGD ``y_t = x_t + n_t`` with ``x_t = 1`` when the canary's clipped
gradient is in step t's sum (probability q when IN, never when OUT) and ``n_t ~ N(0, sigma^2)``
fresh at every step; the sampler's likelihood ratio is then the Neyman-Pearson score. A bug
that changes the law's *shape* (noise reused across steps, noise once per epoch, a draw shared
by the coordinates, a wrong scale) leaves that score near noise while the data still separate
IN from OUT; the other members are built for those shapes:

==================  ==========================================================  ================
name                score                                                       robust to
==================  ==========================================================  ================
likelihood_ratio    sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))             (the claim)
total               sum_t y_t                                                   unknown q
maximum             max_t y_t                                                   few participations
step_differences    sum_t min(|y_{t+1} - y_t|, 1)                               noise reused
                                                                                across steps
whitened            log N(y; q 1, S_hat + q(1-q) I) - log N(y; 0, S_hat)        correlated noise
                    with S_hat the noise covariance estimated on a reference
step_ranks          sum_t Phi^-1(rank of y_t among the reference at step t)     shared draw,
                                                                                scale, tails
off_lattice         sum_t 1[y_t a off the bfloat16 / float16 lattice]           noise drawn in
                                                                                low precision
==================  ==========================================================  ================

Any score that is a function of the training's output alone is sound for the one-run bounds
(Steinke, Nasr, Jagielski 2023: the guesses may be any function of the output), and any fixed
function of one trial is sound for the multi-run bounds (the trials stay independent). The
*reference* rows (``whitened``, ``step_ranks``) must keep that true: in a one-run audit, every
canary's observations without their IN/OUT bits (a function of the output); in a multi-run
audit, the OUT trials of the selection half only (:mod:`audit.run.score_selection`), never the
trials scored. Choosing among the family is :mod:`audit.run.score_selection`'s (held-out
canaries or trials, or Bonferroni over the K members).

A statistic never reads the recorded batches: they are the sampler's randomness, which the
amplified claim assumes hidden (knowing which steps held a canary would audit the unamplified
mechanism against the amplified claim).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import ndtri

from audit.core.validation import check_choice, check_real
from audit.stats.float_collisions import LATTICE_FORMATS, on_lattice

__all__ = [
    "DEFAULT_FAMILY",
    "NOISE_FLOOR",
    "STATISTICS",
    "ScoreContext",
    "ScoreFamily",
    "ScoreStatistic",
    "likelihood_ratio",
    "maximum",
    "off_lattice",
    "step_differences",
    "step_ranks",
    "total",
    "whitened",
]

NOISE_FLOOR = 1e-3
"""The variance floor (units of C^2) ``whitened`` adds to every direction of the estimated noise
covariance: a direction with no noise (a reused draw cancels there) is scored as one with
0.03 C of noise, so the inverse exists and one participation (1 C) stands 30 standard
deviations out of it."""


@dataclass(frozen=True)
class ScoreContext:
    """What a statistic may read besides the rows it scores.

    Attributes:
        sigma: the claimed noise multiplier (noise std in units of C), None when unknown.
        q: the claimed probability that a step's sum holds the canary when IN, None when unknown.
        reference: rows ``(n_ref, S)`` of observations to calibrate on (``whitened``'s noise
            covariance, ``step_ranks``' per-step ranks): a function of the output alone, or
            trials held out from those scored (module docstring); None: none given.
    """

    sigma: float | None = None
    q: float | None = None
    reference: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.sigma is not None:
            check_real("sigma", self.sigma, minimum=0.0, strict_minimum=True)
        if self.q is not None:
            check_real("q", self.q, minimum=0.0, maximum=1.0, strict_minimum=True)
        if self.reference is not None and np.ndim(self.reference) != 2:
            raise ValueError(
                f"reference must be a (rows, steps) array; got shape {np.shape(self.reference)}"
            )

    def has(self, need: str) -> bool:
        """Whether the context supplies ``need`` (``sigma``, ``q`` or ``reference``)."""
        value = getattr(self, need)
        if need == "reference":
            return value is not None and np.shape(value)[0] >= 2
        return value is not None


ScoreFunction = Callable[[np.ndarray, ScoreContext], np.ndarray]
"""(rows (n, S), context) -> (n,) float64 scores, higher = IN; each row scored from itself and
the context only."""


@dataclass(frozen=True)
class ScoreStatistic:
    """One member of a :class:`ScoreFamily`.

    Attributes:
        name: a stable name (the report's and the selection record's).
        function: the score (:data:`ScoreFunction`).
        description: the formula in one line.
        rationale: what law shape it is built for (the bug it still sees).
        needs: what the context must supply (``sigma``, ``q``, ``reference``).
    """

    name: str
    function: ScoreFunction
    description: str
    rationale: str
    needs: tuple[str, ...] = ()

    def applicable(self, context: ScoreContext) -> bool:
        """Whether ``context`` supplies everything the statistic needs."""
        return all(context.has(need) for need in self.needs)

    def __call__(self, y: np.ndarray, context: ScoreContext) -> np.ndarray:
        rows = _rows(y)
        missing = [need for need in self.needs if not context.has(need)]
        if missing:
            raise ValueError(f"score statistic {self.name!r} needs {', '.join(missing)}")
        return np.asarray(self.function(rows, context), dtype=np.float64).reshape(rows.shape[0])


def _rows(y: np.ndarray) -> np.ndarray:
    rows = np.asarray(y)
    if rows.ndim != 2 or rows.shape[1] < 1:
        raise ValueError(f"observations must be a (rows, steps) array; got shape {rows.shape}")
    return rows if rows.dtype in (np.float32, np.float64) else rows.astype(np.float64)


def likelihood_ratio(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """The Poisson sampler's log likelihood ratio at the claim (Chua et al. 2024, arXiv
    2411.04205; :class:`attacks.likelihood_ratio.PoissonLR`, isolated pair):
    ``sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))``, the most powerful score when the
    training is the claimed mechanism."""
    assert context.sigma is not None and context.q is not None
    q, z = float(context.q), (np.asarray(y, dtype=np.float64) - 0.5) / float(context.sigma) ** 2
    return np.logaddexp(np.log1p(-q) if q < 1 else -np.inf, np.log(q) + z).sum(axis=1)


def total(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """``sum_t y_t``: optimal against a known total participation (deterministic batches), and
    needs neither sigma nor q."""
    return np.asarray(y).sum(axis=1, dtype=np.float64)


def maximum(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """``max_t y_t`` (Chua et al. 2024's max test): a canary that participated once or a few
    times stands out at those steps while the sum adds the noise of all S."""
    return np.asarray(y).max(axis=1).astype(np.float64)


def step_differences(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """``sum_t min(|y_{t+1} - y_t|, 1)``: the canary's participation changes, with the noise
    that two consecutive steps share cancelled.

    A noise reused at every step (a generator re-created or re-seeded in the loop), or added
    once per epoch or per macro-batch, cancels in ``y_{t+1} - y_t``, which is then
    ``x_{t+1} - x_t`` in {-1, 0, 1}: an OUT canary scores 0 (up to the steps where the noise is
    redrawn), an IN one about ``2 q (1 - q) (S - 1)``. The truncation at 1 (one clipped example,
    in units of C) bounds what the steps with fresh noise add. With fresh noise it is nearly
    constant (a valid, weak score)."""
    d = np.abs(np.diff(np.asarray(y, dtype=np.float64), axis=1))
    return np.minimum(d, 1.0).sum(axis=1)


def whitened(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """The Gaussian log likelihood ratio with the noise covariance estimated on the reference:
    ``log N(y; q 1, S_hat + q (1 - q) I) - log N(y; 0, S_hat)`` (up to a constant), where
    ``S_hat`` is the reference rows' sample covariance across steps plus :data:`NOISE_FLOOR`.

    The participations ``x_t`` have mean q and variance q (1 - q) per step, so an IN canary adds
    ``q 1`` to the mean and ``q (1 - q) I`` to the covariance. With fresh noise ``S_hat`` is
    near ``sigma^2 I`` and this is a quadratic Poisson-like score; with noise reused across
    steps ``S_hat`` is near ``sigma^2 1 1^T`` and the score reads the directions orthogonal to
    1, where only the participations vary (a total leak the sum and the likelihood ratio miss).
    Eigendecomposition ``S_hat = V diag(l) V^T``: with ``u = V^T y``, ``c = V^T q 1``, the score
    is ``1/2 sum_i [u_i^2 / l_i - (u_i - c_i)^2 / (l_i + q (1 - q))]``; O(S^3 + n S^2)."""
    assert context.q is not None and context.reference is not None
    ref = np.asarray(context.reference, dtype=np.float64)
    rows = np.asarray(y, dtype=np.float64)
    if ref.shape[1] != rows.shape[1]:
        raise ValueError(
            f"reference has {ref.shape[1]} steps but the observations {rows.shape[1]}"
        )
    cov = np.atleast_2d(np.cov(ref, rowvar=False)) + NOISE_FLOOR * np.eye(rows.shape[1])
    eigenvalues, vectors = np.linalg.eigh(cov)
    eigenvalues = np.maximum(eigenvalues, NOISE_FLOOR)
    q = float(context.q)
    u = rows @ vectors
    c = q * vectors.sum(axis=0)
    return 0.5 * (u**2 / eigenvalues - (u - c) ** 2 / (eigenvalues + q * (1 - q))).sum(axis=1)


def step_ranks(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """``sum_t Phi^-1((r_t + 1/2) / (n_ref + 1))`` with ``r_t`` the number of reference values
    below y_t at step t (ties counted half): van der Waerden's normal scores of the per-step
    ranks.

    A draw shared by every canary at a step (one noise added to all coordinates) shifts the
    reference by the same amount, so the ranks cancel it; ranks also do not depend on the
    noise's scale or tails (a wrong sigma, a heavy-tailed or uniform noise)."""
    assert context.reference is not None
    ref = np.sort(np.asarray(context.reference, dtype=np.float64), axis=0)
    rows = np.asarray(y, dtype=np.float64)
    if ref.shape[1] != rows.shape[1]:
        raise ValueError(
            f"reference has {ref.shape[1]} steps but the observations {rows.shape[1]}"
        )
    n = ref.shape[0]
    out = np.zeros(rows.shape[0])
    for t in range(rows.shape[1]):
        below = np.searchsorted(ref[:, t], rows[:, t], side="left")
        upto = np.searchsorted(ref[:, t], rows[:, t], side="right")
        out += ndtri((0.5 * (below + upto) + 0.5) / (n + 1))
    return out


def _lattice_choices(sigma: float | None) -> list[tuple[str, float]]:
    """(format, scale on y) pairs :func:`off_lattice` tries, the coarsest format first: y in
    units of C, and y / sigma (a standard normal drawn in low precision, then scaled)."""
    scales = [1.0] if sigma is None else [1.0, 1.0 / float(sigma)]
    return [(fmt, a) for fmt in LATTICE_FORMATS for a in scales]


def off_lattice(y: np.ndarray, context: ScoreContext) -> np.ndarray:
    """``sum_t 1[y_t a is not a bfloat16 (or float16) value]``: the steps whose observation
    is off the lattice of the format the noise lies on (Mironov, "On Significance of the
    Least Significant Bits for Differential Privacy", CCS 2012; docs/design/deployed.md).

    Noise drawn in bfloat16 or float16 lies on that format's lattice; a canary's signal added
    in float32 moves the value off it (1 + v is a bfloat16 value for about half the v), so an
    OUT canary scores 0 and an IN one about half its participations: the two separate
    perfectly once an IN canary took part a few times, whatever sigma. The (format, scale a)
    is the first (coarsest format first; a = 1, then 1 / sigma) on whose lattice at least half
    the values lie: among the reference's values when a reference is given (the same choice
    for every row), else among the row's own. With noise at float32 precision or finer every
    value is off every lattice (about 3.6e-4 on it by chance): a valid, near-constant score."""
    rows = np.asarray(y, dtype=np.float64)
    choices = _lattice_choices(context.sigma)
    if context.reference is not None and np.shape(context.reference)[0] >= 1:
        ref = np.asarray(context.reference, dtype=np.float64)
        pick = next((c for c in choices if on_lattice(ref * c[1], c[0]).mean() >= 0.5),
                    choices[0])
        return (~on_lattice(rows * pick[1], pick[0])).sum(axis=1).astype(np.float64)
    steps = rows.shape[1]
    counts = np.stack([on_lattice(rows * a, fmt).sum(axis=1) for fmt, a in choices])
    first = np.argmax(counts >= steps / 2, axis=0)  # the first choice with half on it
    none = ~(counts >= steps / 2).any(axis=0)
    on = counts[first, np.arange(rows.shape[0])]
    on = np.where(none, counts[0], on)
    return (steps - on).astype(np.float64)


STATISTICS: tuple[ScoreStatistic, ...] = (
    ScoreStatistic(
        "likelihood_ratio", likelihood_ratio,
        "sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))",
        "the Neyman-Pearson score of the claimed mechanism (Poisson steps, fresh noise)",
        ("sigma", "q"),
    ),
    ScoreStatistic(
        "total", total, "sum_t y_t", "a known total participation; needs no sigma or q"
    ),
    ScoreStatistic(
        "maximum", maximum, "max_t y_t", "a canary that participated in few steps"
    ),
    ScoreStatistic(
        "step_differences", step_differences, "sum_t min(|y_{t+1} - y_t|, 1)",
        "noise reused across consecutive steps (re-created generator, once per epoch)",
    ),
    ScoreStatistic(
        "whitened", whitened,
        "log N(y; q 1, S_hat + q(1-q) I) - log N(y; 0, S_hat), S_hat from the reference",
        "noise correlated across steps (reused, per epoch, per macro-batch)",
        ("q", "reference"),
    ),
    ScoreStatistic(
        "step_ranks", step_ranks, "sum_t Phi^-1(rank of y_t among the reference at step t)",
        "a draw shared across canaries, a wrong noise scale or law",
        ("reference",),
    ),
    ScoreStatistic(
        "off_lattice", off_lattice, "sum_t 1[y_t a off the bfloat16 / float16 lattice]",
        "noise drawn in low precision (bfloat16, float16): the signal moves values off its "
        "lattice",
    ),
)
"""Every statistic, in the family's order (ties in a selection go to the earlier one)."""


@dataclass(frozen=True)
class ScoreFamily:
    """An ordered family of :class:`ScoreStatistic` (module docstring).

    Attributes:
        statistics: the members, in order (the first is the one a single-statistic audit uses).
    """

    statistics: tuple[ScoreStatistic, ...] = STATISTICS

    def __post_init__(self) -> None:
        names = self.names
        if not names:
            raise ValueError("a score family needs at least one statistic")
        if len(set(names)) != len(names):
            raise ValueError(f"score family: statistic names must be unique; got {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.statistics)

    def __len__(self) -> int:
        return len(self.statistics)

    def only(self, names: Iterable[str]) -> ScoreFamily:
        """The members named, in the family's order (ValueError naming an unknown name)."""
        wanted = [check_choice("statistic", name, self.names) for name in names]
        return ScoreFamily(tuple(s for s in self.statistics if s.name in wanted))

    def applicable(self, context: ScoreContext) -> ScoreFamily:
        """The members ``context`` can compute (e.g. no ``likelihood_ratio`` without q)."""
        kept = tuple(s for s in self.statistics if s.applicable(context))
        if not kept:
            raise ValueError(
                f"no statistic of the family ({', '.join(self.names)}) can be computed from "
                "this context"
            )
        return ScoreFamily(kept)

    def with_function(self, name: str, function: ScoreFunction, description: str) -> ScoreFamily:
        """The family with member ``name``'s score replaced (e.g. the multi-run sampler's own
        likelihood ratio in place of the Poisson one)."""
        check_choice("statistic", name, self.names)
        return ScoreFamily(tuple(
            replace(s, function=function, description=description) if s.name == name else s
            for s in self.statistics
        ))

    def scores(self, y: np.ndarray, context: ScoreContext) -> Mapping[str, np.ndarray]:
        """Every member's scores of the rows ``y`` (members ``context`` cannot compute are
        skipped: :meth:`applicable`)."""
        return {s.name: s(y, context) for s in self.applicable(context).statistics}


DEFAULT_FAMILY = ScoreFamily()
"""Every statistic of :data:`STATISTICS`."""
