"""The random-allocation pair at any noise: a guarantee on an octave (floating-point) lattice.

The linear lattice of :mod:`audit.theory.random_allocation` must hold Y_j = exp(s X_j - s^2/2)
(s = 1/sigma) up to a cap with M P(Y > cap) tiny; below sigma of about 0.6 the lognormal tail
makes that window impossibly wide. Here every positive value lives on the *octave lattice*

    v = 2^j (1 + k/N),   j = j0, ..., j0 + J - 1,   k = 0, ..., N - 1,

(a float with an N-cell mantissa) plus two atoms: ``zero`` (a value below z = 2^j0) and
``overflow`` (at or above top = 2^(j0 + J)). Rounding to the nearest lattice value costs a
*relative* error of at most 1/(2N), whatever the magnitude, so the heavy tail is carried as
exactly as the bulk (docs/design.md §6.9). The sum of two independent lattice laws A + B is
computed octave by octave: for A in octave j, B restricted to octaves <= j is rounded to the
spacing h_j = 2^j / N of octave j (error <= h_j / 2), the two are convolved exactly by FFT on
that linear grid, and the result (in [2^j, 2^(j+2))) is rounded to the lattice (error
<= h_j in octave j + 1); symmetrically for B in octave j with A below it. Each sum therefore
carries a relative error of at most 1.5 / (2N - 0.5) with respect to the sum of its inputs
(the larger input is >= 2^j), i.e. a log-error eps_N = -log(1 - 1.5/(2N - 0.5)). By induction
over the summation tree (leaf log-error eps_leaf = -log(1 - 1/(2N)), node a = max(children)
+ eps_N), the represented sum S' of n leaves satisfies

    S' <= S e^a    and    S <= (S' + n z) e^a,

(leaves below z are represented by 0; an overflow is +infinity for the second inequality and
top <= S e^a for the first). This is the geometric-lattice idea of the ``pld-accounting``
package (Feldman & Shenfeld's accountant, arXiv 2602.17284, Alg. 4), with two changes: the
rounding is to the nearest value and its error is carried as the single log-shift a instead of
being rounded one-sidedly at each stage, and the sum is an exact FFT per octave (cost
O(J N log N) per sum instead of O((J N)^2)).

**upper** (a guarantee; a dominating pair per direction, composed by dp_accounting):

- remove (P vs Q), loss log(S / M) with S = Y~ + R, R the sum of M - 1 leaves under Q and Y~
  the canary's size-biased leaf (log Y~ ~ N(s^2/2, s^2)): loss <= log(S'/M + z) + a;
- add (Q vs P), loss log(M / S) with S the sum of M leaves under Q: loss <= log(M / S') + a
  (an S' of 0 gives +infinity).

Each bound holds pointwise on a coupling, so the law of the right-hand side, rounded up onto
the PLD lattice {k d}, stochastically dominates the true loss (docs/design.md §5.2). The
floating-point error of everything (Gaussian cell masses, each FFT: Higham's bound, octaves
skipped as negligible) is an L1 bound e_num on the computed law; that much mass is moved
from the bottom of each PMF to +infinity (its CDF then stays below the true one). The choice
z = exp(-(s^2/2 + 9 s) - 12), top = M exp(s^2/2 + 9 s) keeps the zero and overflow atoms below
1e-18 of mass where they distort a loss (both are accounted exactly, as losses).

Errors stated in ``method``: N, the tree depth and the loss shift a per epoch, d (the PLD
rounding, at most d per epoch), e_num. Persistent shuffling is one epoch at sigma / sqrt(E);
dynamic shuffling and balls-and-bins compose E times.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray
from scipy import fft

from audit.core.validation import check_int, check_real
from audit.sampling import get_sampler
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import pld_curve
from audit.theory.random_allocation import RA_CANARY_LAW, _cell_masses, random_allocation_curves

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "RA_MAX_CELLS",
    "AllocationBounds",
    "OctaveLaw",
    "octave_allocation_plds",
    "octave_allocation_upper",
    "octave_leaf",
    "octave_sum",
    "random_allocation_bounds",
]

FloatArray = NDArray[np.float64]
IndexArray = NDArray[np.integer]
"""Cell indices (reduceat starts, target cells)."""

_U = np.finfo(float).eps / 2
TAIL_SIGMAS = 9.0
"""z = exp(-(s^2/2 + 9 s)) and top = M exp(s^2/2 + 9 s): N(0, 1) beyond 9 has mass 1e-19."""
FLOOR_MARGIN = 12.0
"""z = exp(-(s^2/2 + 9 s) - 12): the zero atom's loss error z M / S' stays below 1e-5 e^-loss."""
SKIP_MASS = 1e-40
"""Octaves lighter than this are left out of a sum (their mass joins e_num)."""
MAX_MANTISSA = 2**15
"""Largest N (cells per octave)."""
MIN_MANTISSA = 2**7
REFERENCE_DELTA = 1e-5
"""The delta at which the accuracy target (and the coarse first pass) is set."""
RELATIVE_ACCURACY = 0.01
"""Target of the lattice shift and the PLD rounding together, relative to eps(1e-5)."""
_ROWS_PER_BATCH_CELLS = 2**22


@dataclass(frozen=True)
class OctaveLaw:
    """The law of a represented sum S' on the octave lattice (module docstring).

    ``pmf[o, k]`` is the mass at 2^(j0 + o) (1 + k / N). ``log_error`` is a (S' <= S e^a,
    S <= (S' + leaves z) e^a); ``numerical`` an L1 bound on the floating-point error of the
    whole law (cells, zero and overflow); ``depth`` the height of the summation tree.
    """

    j0: int
    pmf: FloatArray
    zero: float
    over: float
    log_error: float
    leaves: int
    numerical: float
    depth: int

    @property
    def mantissa(self) -> int:
        return int(self.pmf.shape[1])

    @property
    def octaves(self) -> int:
        return int(self.pmf.shape[0])

    @property
    def z(self) -> float:
        return math.ldexp(1.0, self.j0)

    @property
    def top(self) -> float:
        return math.ldexp(1.0, self.j0 + self.octaves)

    def values(self) -> FloatArray:
        """The lattice values, shape (J, N)."""
        n = self.mantissa
        scale = np.ldexp(1.0, self.j0 + np.arange(self.octaves))
        return scale[:, None] * (1.0 + np.arange(n) / n)[None, :]


def leaf_log_error(mantissa: int) -> float:
    """-log(1 - 1/(2N)) plus a margin for the float X-edges (a few u relative)."""
    return -math.log1p(-(0.5 + 1e-9) / mantissa)


def sum_log_error(mantissa: int) -> float:
    """eps_N = -log(1 - 1.5/(2N - 0.5)): the log-error one octave sum adds."""
    return -math.log1p(-1.5 / (2 * mantissa - 0.5))


def octave_leaf(s: float, shift: float, j0: int, octaves: int, mantissa: int) -> OctaveLaw:
    """Y = exp(s X - s^2/2), X ~ N(shift, 1), rounded to the nearest lattice value.

    shift 0: a round under Q; shift s: the canary's round under P (size-biased). Cell edges are
    the midpoints between neighbouring lattice values (the first edge is z, the last the
    midpoint below top); Gaussian masses of the X-cells by
    :func:`audit.theory.random_allocation._cell_masses` (accurate tails, an L1 error bound).
    """
    n = mantissa
    base = OctaveLaw(j0, np.zeros((octaves, n)), 0.0, 0.0, 0.0, 1, 0.0, 0)
    v = np.append(base.values().ravel(), base.top)
    edges = np.concatenate(([base.z], (v[:-1] + v[1:]) / 2))
    x = (np.log(edges) + s * s / 2) / s
    mass, error = _cell_masses(x, shift)
    return OctaveLaw(
        j0=j0, pmf=mass[1:-1].reshape(octaves, n), zero=float(mass[0]), over=float(mass[-1]),
        log_error=leaf_log_error(n), leaves=1, numerical=float(error), depth=1,
    )


@functools.lru_cache(maxsize=8)
def _coarsen_plan(mantissa: int) -> tuple[tuple[IndexArray, IndexArray], ...]:
    """Per t >= 1: (reduceat starts, target cells) of rint((N + k) / 2^t) over k = 0..N-1."""
    n = mantissa
    plans = []
    for t in range(1, int(math.log2(n)) + 2):
        idx = np.rint((n + np.arange(n)) / 2.0**t).astype(np.int64)
        starts = np.flatnonzero(np.diff(idx, prepend=-1))
        plans.append((starts, idx[starts]))
    return tuple(plans)


def _coarsened_below(law: OctaveLaw, rows: NDArray[np.int64], include_own: bool) -> FloatArray:
    """For each octave o in ``rows``: B restricted to octaves < o (or <= o), rounded to the
    nearest multiple of h_o = 2^(j0+o)/N, as masses on cells 0..2N (value m h_o); the zero
    atom is at cell 0."""
    n, pmf = law.mantissa, law.pmf
    out = np.zeros((len(rows), 2 * n + 1))
    if include_own:
        out[:, n:2 * n] = pmf[rows]
    mass = pmf.sum(axis=1)
    below = np.concatenate(([0.0], np.cumsum(mass)))  # below[o] = mass of octaves < o
    plans = _coarsen_plan(n)
    for t, (starts, cells) in enumerate(plans, start=1):
        src = rows - t
        ok = src >= 0
        if not ok.any():
            continue
        sums = np.add.reduceat(pmf[src[ok]], starts, axis=1)
        out[np.flatnonzero(ok)[:, None], cells[None, :]] += sums
    deep = np.maximum(rows - len(plans), 0)  # octaves < o - L round to 0
    out[:, 0] += law.zero + below[deep]
    return out


def _fft_error(length: int, tops: FloatArray, lowers: FloatArray) -> float:
    """L1 bound on the float error of the FFT convolutions of nonnegative rows a (tops) and
    b (lowers), summed over the rows.

    With ||fl(F x) - F x||_2 <= gamma ||F x||_2 for each transform (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2002, Thm 24.2; gamma = 10 u log2 n, generous),
    |F x|_inf <= ||x||_1 and Parseval, the computed convolution c satisfies
    ||fl(c) - c||_2 <= 1.01 (gamma (||a||_2 ||b||_1 + ||a||_1 ||b||_2) + (gamma + u) ||a||_1
    ||b||_2), and L1 <= sqrt(n) L2.
    """
    gamma = 10 * _U * math.log2(length)
    a1, b1 = tops.sum(axis=1), lowers.sum(axis=1)
    a2, b2 = np.linalg.norm(tops, axis=1), np.linalg.norm(lowers, axis=1)
    l2 = 1.01 * (gamma * (a2 * b1 + a1 * b2) + (gamma + _U) * a1 * b2)
    return float(math.sqrt(length) * l2.sum())


def _sum_rows(
    tops: FloatArray, lowers: FloatArray, n: int
) -> tuple[FloatArray, float]:
    """FFT convolution of each top-octave row (cells N..2N-1) with its lower row (cells 0..2N);
    returns rows of 3N cells (m = N .. 4N - 1) and the L1 float-error bound."""
    length = fft.next_fast_len(3 * n, real=True)
    fa = fft.rfft(tops, length, axis=1)
    fb = fft.rfft(lowers, length, axis=1)
    conv = fft.irfft(fa * fb, length, axis=1)[:, : 3 * n]
    err = _fft_error(length, tops, lowers)
    return np.maximum(conv, 0.0), err


@functools.lru_cache(maxsize=8)
def _upper_half_plan(mantissa: int) -> tuple[IndexArray, IndexArray]:
    """(reduceat starts, target cells) of m -> rint(m / 2) - N for m = 2N .. 4N - 1 (cells of
    octave o + 1; a target N is cell 0 of octave o + 2)."""
    n = mantissa
    idx = np.rint(np.arange(2 * n, 4 * n) / 2.0).astype(np.int64) - n
    starts = np.flatnonzero(np.diff(idx, prepend=-1))
    return starts, idx[starts]


def octave_sum(a: OctaveLaw, b: OctaveLaw) -> OctaveLaw:
    """The law of A' + B' (independent) rounded to the lattice (module docstring)."""
    if (a.j0, a.pmf.shape) != (b.j0, b.pmf.shape):
        raise ValueError("octave_sum: the two laws must share one lattice (j0, J, N)")
    n, octaves = a.mantissa, a.octaves
    same = a is b
    out = np.zeros((octaves + 2, n))  # two octaves of headroom, then overflow
    skipped = 0.0
    numerical = a.numerical + b.numerical
    starts, cells = _upper_half_plan(n)
    passes = [(a, b, True)] if same else [(a, b, True), (b, a, False)]
    for top_law, low_law, include_own in passes:
        mass = top_law.pmf.sum(axis=1)
        rows = np.flatnonzero(mass > SKIP_MASS)
        skipped += float(mass[mass <= SKIP_MASS].sum())
        batch = max(1, _ROWS_PER_BATCH_CELLS // (4 * n))
        for first in range(0, len(rows), batch):
            chunk = rows[first:first + batch]
            lowers = _coarsened_below(low_law, chunk, include_own)
            if same:  # A, B i.i.d.: (A in o, B <= o) + (B in o, A < o)
                lowers = 2.0 * lowers
                lowers[:, n:2 * n] -= top_law.pmf[chunk]
            tops = np.zeros((len(chunk), n + 1))
            tops[:, :n] = top_law.pmf[chunk]
            # rows of A's octave o at cells N..2N-1: convolve with the lower rows (cells 0..2N)
            conv, err = _sum_rows(tops, lowers, n)
            numerical += err + 8 * _U * float(lowers.sum(axis=1) @ tops.sum(axis=1))
            # conv index i <-> m = N + i
            out[chunk, :] += conv[:, :n]
            upper = np.add.reduceat(conv[:, n:3 * n], starts, axis=1)
            spill = cells == n
            keep = ~spill
            out[np.ix_(chunk + 1, cells[keep])] += upper[:, keep]
            out[chunk + 2, 0] += upper[:, spill].sum(axis=1)
    over_finite = float(out[octaves:].sum())
    finite_mass = 1.0 - a.over - b.over + a.over * b.over
    over = a.over + b.over - a.over * b.over + over_finite
    zero = a.zero * b.zero
    numerical += skipped * 1.0 + 8 * _U * finite_mass
    return OctaveLaw(
        j0=a.j0, pmf=out[:octaves].copy(), zero=zero, over=min(over, 1.0),
        log_error=max(a.log_error, b.log_error) + sum_log_error(n), leaves=a.leaves + b.leaves,
        numerical=numerical, depth=max(a.depth, b.depth) + 1,
    )


def octave_power(leaf: OctaveLaw, times: int) -> OctaveLaw | None:
    """The law of the sum of ``times`` i.i.d. leaves (None for 0): squarings, then the needed
    powers combined smallest first (tree depth at most floor(log2 times) + 2)."""
    if times <= 0:
        return None
    powers = []
    current = leaf
    bit = 1
    while bit <= times:
        if times & bit:
            powers.append(current)
        bit <<= 1
        if bit <= times:
            current = octave_sum(current, current)
    total = powers[0]
    for p in powers[1:]:
        total = octave_sum(total, p)
    return total


def _lattice(s: float, rounds: int) -> tuple[int, int]:
    """(j0, J): z = 2^j0 <= exp(-(s^2/2 + 9 s) - 12), top = 2^(j0 + J) >= M exp(s^2/2 + 9 s).

    z enters the remove loss as log(S'/M + z): below e^-12 of the loss's scale."""
    reach = s * s / 2 + TAIL_SIGMAS * s
    j0 = math.floor(-(reach + FLOOR_MARGIN) / math.log(2))
    top = math.ceil((math.log(rounds) + reach) / math.log(2))
    return j0, top - j0


@dataclass(frozen=True)
class OctaveSums:
    """The represented sums of one epoch: S under P (remove) and under Q (add)."""

    sigma: float
    rounds: int
    remove: OctaveLaw
    add: OctaveLaw


@functools.lru_cache(maxsize=2)  # up to ~40 MB each (J x N floats, two directions)
def octave_sums(sigma: float, rounds: int, mantissa: int) -> OctaveSums:
    """S = Y~ + R under P and S = Y + R under Q, R the sum of M - 1 rounds under Q."""
    s = 1.0 / sigma
    j0, octaves = _lattice(s, rounds)
    leaf_q = octave_leaf(s, 0.0, j0, octaves, mantissa)
    leaf_p = octave_leaf(s, s, j0, octaves, mantissa)
    rest = octave_power(leaf_q, rounds - 1)
    if rest is None:
        return OctaveSums(sigma, rounds, leaf_p, leaf_q)
    return OctaveSums(sigma, rounds, octave_sum(rest, leaf_p), octave_sum(rest, leaf_q))


def _dominating_pmf(
    loss: FloatArray, mass: FloatArray, inf_mass: float, numerical: float, d: float
) -> pld_pmf.DensePLDPmf:
    """Losses rounded up onto {k d}; the bottom ``numerical`` mass moved to +infinity (the
    infinity mass is the larger of the exact one plus that and 1 minus the finite mass), mass
    below 1e-18 at the bottom rounded up into the first kept atom (rounding up keeps the
    domination)."""
    keep = (mass > 0) & np.isfinite(loss)
    inf_mass += float(mass[~np.isfinite(loss) & (mass > 0)].sum())
    k = np.ceil(loss[keep] / d * (1 + 1e-12) + 1e-9).astype(np.int64)
    lo = int(k.min())
    probs = np.bincount(k - lo, weights=mass[keep])
    below = np.cumsum(probs)
    first = int(np.searchsorted(below, 1e-18, side="right"))
    if first > 0:
        probs[first] += below[first - 1]
        probs = probs[first:]
        lo += first
    remove = numerical
    below = np.cumsum(probs)
    whole = int(np.searchsorted(below, remove, side="right"))
    if whole < len(probs):
        probs[whole] -= remove - (below[whole - 1] if whole else 0.0)
        probs[:whole] = 0.0
    else:
        probs[:] = 0.0
    first = int(np.argmax(probs > 0))
    probs, lo = probs[first:], lo + first
    # at least the exact infinity mass plus the moved error, at least the float deficit
    infinity = min(1.0, max(inf_mass + remove, 1.0 - float(math.fsum(probs.tolist()))))
    from dp_accounting.pld import pld_pmf

    return pld_pmf.DensePLDPmf(d, lo, probs, infinity, pessimistic_estimate=True)


def _direction_pmfs(
    sums: OctaveSums, d: float
) -> tuple[pld_pmf.DensePLDPmf, pld_pmf.DensePLDPmf]:
    m = float(sums.rounds)
    rem, add = sums.remove, sums.add
    v = rem.values().ravel()
    loss_rem = np.append(np.log(v / m + rem.z), math.log(rem.z)) + rem.log_error
    mass_rem = np.append(rem.pmf.ravel(), rem.zero)
    pmf_rem = _dominating_pmf(loss_rem, mass_rem, rem.over, rem.numerical, d)
    v = add.values().ravel()
    loss_add = np.append(np.log(m / v), math.log(m / add.top)) + add.log_error
    mass_add = np.append(add.pmf.ravel(), add.over)
    pmf_add = _dominating_pmf(loss_add, mass_add, add.zero, add.numerical, d)
    return pmf_rem, pmf_add


def _describe(sums: OctaveSums, d: float) -> str:
    rem, add = sums.remove, sums.add
    return (
        f"octave lattice N = {rem.mantissa} cells per octave, {rem.octaves} octaves "
        f"(z = {rem.z:.3g}, top = {rem.top:.3g}); per epoch: loss shift a = "
        f"{max(rem.log_error, add.log_error):.3g} (tree depth {max(rem.depth, add.depth)}: "
        f"leaf {leaf_log_error(rem.mantissa):.2g} + {sum_log_error(rem.mantissa):.2g} per sum), "
        f"PLD rounding <= d = {d:.3g}, float error to infinity "
        f"{max(rem.numerical, add.numerical):.2g}"
    )


@functools.lru_cache(maxsize=16)
def octave_allocation_plds(
    sigma: float, rounds: int, compositions: int, mantissa: int, discretisation: float
) -> tuple[pld_lib.PrivacyLossDistribution, str]:
    """(pessimistic PLD of ``compositions`` epochs of the pair at ``sigma``, error statement)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    sums = octave_sums(sigma, rounds, mantissa)
    rem, add = _direction_pmfs(sums, discretisation)
    if compositions > 1:
        rem, add = rem.self_compose(compositions), add.self_compose(compositions)
    return pld_lib.PrivacyLossDistribution(rem, add), _describe(sums, discretisation)


def _accuracy_plan(
    sigma: float, rounds: int, compositions: int, relative_accuracy: float
) -> tuple[int, float]:
    """(N, d) for a lattice shift plus PLD rounding of about ``relative_accuracy`` eps(1e-5).

    A coarse first pass (N = 2^7, d = 1e-2) estimates eps; the shift E (a + d) is then set to
    the target: a third to d, two thirds to a = depth eps_N.
    """
    coarse, _ = octave_allocation_plds(sigma, rounds, compositions, MIN_MANTISSA, 1e-2)
    depth = max(1, math.floor(math.log2(max(rounds - 1, 1)))) + 3
    eps_coarse = float(coarse.get_epsilon_for_delta(REFERENCE_DELTA))
    shift = compositions * (depth * sum_log_error(MIN_MANTISSA) + 1e-2)
    eps_est = max(eps_coarse - shift, 0.1 * eps_coarse, 1e-3)
    budget = relative_accuracy * eps_est / compositions
    d = min(1e-2, max(1e-5, budget / 3))
    need = depth * 0.75 / (2 * budget / 3)
    mantissa = int(min(MAX_MANTISSA, max(MIN_MANTISSA, 2 ** math.ceil(math.log2(need)))))
    return mantissa, d


def octave_allocation_upper(
    sigma: float,
    rounds: int,
    epochs: int = 1,
    *,
    sampler: str = "dynamic_shuffle",
    mantissa: int | None = None,
    discretisation: float | None = None,
    relative_accuracy: float = RELATIVE_ACCURACY,
) -> TradeOffCurve:
    """The random-allocation guarantee on the octave lattice (module docstring).

    Args:
        sigma: noise multiplier (> 0).
        rounds: M, the rounds (steps) per epoch (>= 1).
        epochs: E (>= 1): composed E times for ``dynamic_shuffle`` and ``balls_and_bins``;
            one epoch at sigma / sqrt(E) for ``persistent_shuffle``.
        sampler: a registered sampler whose canary law is one uniformly random step per epoch.
        mantissa: N, cells per octave (a power of 2 in [2^7, 2^15]); default from
            ``relative_accuracy`` by a coarse first pass.
        discretisation: the PLD loss lattice d (default from ``relative_accuracy``).
        relative_accuracy: the target of the lattice's loss shift plus the PLD rounding,
            relative to eps at delta 1e-5 (default 1%).

    Returns:
        A curve of kind ``upper`` with every error term in its ``method``.

    Raises:
        ValueError: a field out of range, or a sampler with another canary law.
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    rounds = check_int("rounds", rounds, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    chosen = get_sampler(sampler)
    if chosen.canary_law != RA_CANARY_LAW:
        raise chosen.missing(
            "random-allocation pair",
            f"its canary law is {chosen.canary_law!r}, not {RA_CANARY_LAW!r}",
        )
    relative_accuracy = check_real(
        "relative_accuracy", relative_accuracy, minimum=0.0, strict_minimum=True
    )
    if mantissa is not None:
        mantissa = check_int("mantissa", mantissa, minimum=MIN_MANTISSA)
        if mantissa > MAX_MANTISSA or mantissa & (mantissa - 1):
            raise ValueError(
                f"mantissa must be a power of 2 in [{MIN_MANTISSA}, {MAX_MANTISSA}], got {mantissa}"
            )
    if discretisation is not None:
        discretisation = check_real(
            "discretisation", discretisation, minimum=0.0, strict_minimum=True
        )
    return _upper(float(sigma), int(rounds), int(epochs), sampler, mantissa, discretisation,
                  float(relative_accuracy))


@functools.lru_cache(maxsize=32)
def _upper(
    sigma: float, rounds: int, epochs: int, sampler: str, mantissa: int | None,
    discretisation: float | None, relative_accuracy: float,
) -> TradeOffCurve:
    persistent = get_sampler(sampler).same_step_every_epoch
    eff = sigma / math.sqrt(epochs) if persistent else sigma
    comps = 1 if persistent else epochs
    if mantissa is None or discretisation is None:
        auto_n, auto_d = _accuracy_plan(eff, rounds, comps, relative_accuracy)
        mantissa = auto_n if mantissa is None else mantissa
        discretisation = auto_d if discretisation is None else discretisation
    pld, errors = octave_allocation_plds(eff, rounds, comps, mantissa, discretisation)
    how = "one epoch at sigma/sqrt(E)" if persistent else f"{epochs}-fold PLD composition"
    curve = pld_curve(
        pld, sampler=sampler, threat_model="isolated", kind="upper",
        method=(f"random-allocation pair (M = {rounds}, sigma = {sigma:g}), pessimistic PLD on "
                f"the octave lattice, {how}; {errors}"),
    )
    curve.short = "random allocation (octave lattice)"
    return curve


RA_MAX_CELLS = 2**20
"""FFT window of the linear random-allocation lattice used beside the octave lattice."""


@dataclass(frozen=True)
class AllocationBounds:
    """The random-allocation pair's curves as a cell's theory uses them.

    ``upper``: the octave-lattice guarantee, and where the linear lattice of
    :mod:`audit.theory.random_allocation` fits, the pointwise maximum with its guarantee (the
    maximum of guarantees is a guarantee). ``lower``: the linear lattice's achieved curve, or
    None where that lattice does not fit (``notes`` says why).
    """

    upper: TradeOffCurve
    lower: TradeOffCurve | None
    notes: tuple[str, ...]


def random_allocation_bounds(
    sigma: float, rounds: int, epochs: int = 1, *, sampler: str = "dynamic_shuffle",
    max_cells: int = RA_MAX_CELLS,
) -> AllocationBounds:
    """The octave-lattice upper curve, combined with the linear lattice's curves where it fits.

    Raises:
        ValueError: bad input, or a sampler with another canary law.
    """
    upper = octave_allocation_upper(sigma, rounds, epochs, sampler=sampler)
    try:
        linear_upper, lower = random_allocation_curves(
            sigma, rounds, epochs, sampler=sampler, max_cells=max_cells
        )
    except ValueError as err:
        note = (f"no random-allocation lattice test (the upper curve is the octave lattice's "
                f"alone): {err}")
        return AllocationBounds(upper, None, (note,))
    both = upper.maximum(
        linear_upper, method=f"max of [{upper.method}] and [{linear_upper.method}]",
        short="random allocation (octave + linear lattice)",
    )
    return AllocationBounds(both, lower, ())
