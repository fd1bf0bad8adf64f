"""Which batch sampler does a deployed ``DataLoader`` really use? (docs/design.md §14.1)

An accountant's epsilon holds only for the sampler it assumes. Opacus accounts every loader
as Poisson with q = 1 / len(loader) (``make_private`` with ``poisson_sampling=False`` keeps a
shuffling loader and still accounts it as Poisson); a ``WeightedRandomSampler`` draws with
other inclusion rates than the ``sample_rate`` the accountant is given. :func:`inspect_loader`
draws whole epochs of index batches from the user's loader (its ``batch_sampler``: no data is
loaded) and identifies the law with stated tests, each at level :data:`ALPHA` and with its
power against a named alternative at the sizes it drew:

- **fixed sizes**: every batch of an epoch but its last has the same size, in every epoch
  (exact observation; power: 1 - pmax^(S-1) against Poisson sizes, pmax the largest
  Binomial(n, q) probability, S the batches drawn);
- **Binomial(n, q) sizes** (random sizes only): Fisher's index of dispersion
  D = sum_t (s_t - s_bar)^2 / (n q (1 - q)) ~ chi2(S - 1), q = s_bar / n, two-sided at alpha
  (power against a variance ratio rho = 1.5 or 1/1.5: P(rho X outside the acceptance
  interval), X ~ chi2(S - 1));
- **every example once per epoch** (exact observation; power against Poisson sampling at the
  same q: 1 - (T q (1 - q)^(T - 1))^(n E), the chance that E Poisson epochs all look like
  partitions);
- **the same order every epoch** (exact; power against a fresh uniform permutation every epoch:
  1 - (1/n!)^(E - 1));
- **with replacement**: an index twice in one batch (exact; power against uniform draws with
  replacement at the batch sizes seen: 1 - prod_t prod_{i < s_t} (1 - i/n));
- **weighted** (examples not used once per epoch): per-example inclusion counts c_i against
  equal rates, X = sum_i (c_i - c_bar)^2 / (c_bar (1 - p)) ~ chi2(n - 1) (p = q without
  replacement, 1/n with), rejected above its 1 - alpha quantile (power against half of the
  examples drawn at twice the rate of the other half: noncentral chi2 with
  lambda = n c_bar / (9 (1 - p)));
- **independence** of memberships (random batches): U, the pairs of examples that share two
  steps, against its exact mean and variance under independent memberships given the sizes,
  rejected at E U + k sd, k = sqrt(1/alpha - 1) (Cantelli: level <= alpha whatever U's law;
  power: Cantelli's lower bound against fixed pairs of examples always drawn together);
- **uniform positions** (a new once-per-epoch order): the example-by-step counts' chi-square
  against uniform steps (power against half of the examples twice as likely early);
- **reused order** (a new once-per-epoch order): two consecutive epochs in the same order
  (exact; power 1 against a permutation used for two epochs once E >= 3);
- **class rates** (labels from the dataset, examples not once per epoch): Pearson's test of one
  common inclusion rate across the classes, chi2(K - 1) (power against one class at 1.2x);
- **stratified batches** (labels, a new once-per-epoch order): every batch holds each class in
  proportion (within 1) in every epoch, an event whose probability under a uniform shuffle is
  computed exactly (a hypergeometric dynamic program) and rejected when <= alpha (power 1
  against a stratified shuffle once it is).

Labels are read from the loader's dataset (``targets``, ``labels``, a ``TensorDataset``'s
last tensor; :func:`read_labels`) or given (``labels=``); without them the two label tests do
not apply (a stratified shuffle then looks like ``dynamic_shuffle``: said in the docs).

The identified law is a registered sampler (:mod:`audit.sampling`) or ``"unknown"`` with the
reasons: fixed sizes, once per epoch and the same order is ``deterministic`` (the identity
order) or ``persistent_shuffle``; a new order every epoch, ``dynamic_shuffle``; random
Binomial sizes with each example once per epoch, ``balls_and_bins``; random Binomial sizes,
not once per epoch, no repeat in a batch and equal rates, ``poisson``; every batch of the same
size, not once per epoch, no repeat in a batch, equal rates and independent memberships,
``sampled_without_replacement`` (Lebeda et al. 2024). Unequal rates (``weighted`` or
``class_rates``) and a stratified shuffle are ``unknown``. With ``inspection_epochs=None``
epochs are drawn until every applicable test has power >= :data:`TARGET_POWER` and (examples
not once per epoch) the worst example's rate is bounded within :data:`RATE_PRECISION` of the
mean (at most :data:`MAX_EPOCHS`, or :data:`MAX_INDICES` indices).

The comparison with the accountant (:class:`AccountantAssumptions`): whether the loader is the
Poisson sampler at the sample rate the accountant assumed, and the batch size the noisy sum is
divided by. Then the theory bracket of the identified sampler (:func:`audit.theory.bounds_for`,
adversarial threat model: the guarantee must hold for every pair of neighbouring data sets)
at the training's sigma, steps and epochs (identified by draws, examples not once per epoch:
at the worst example's rate, :class:`InclusionRates`, never the mean rate), and whether the
accountant's epsilon is a guarantee for the loader actually used (it is if it is at least the
upper bound's epsilon; refuted if it is below the lower bound's).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.special import gammaln
from scipy.stats import beta as beta_law
from scipy.stats import binom, chi2, ncx2

from audit.core.validation import check_int, check_real
from audit.deployed.claims import AccountantAssumptions, opacus_assumptions

__all__ = [
    "ALPHA",
    "MAX_EPOCHS",
    "RATE_PRECISION",
    "TARGET_POWER",
    "AccountantAssumptions",
    "ClassRate",
    "InclusionRates",
    "LoaderInspection",
    "LoaderTest",
    "TheoryBracket",
    "draw_epochs",
    "inspect_loader",
    "loader_size",
    "read_labels",
]

ALPHA = 1e-3
"""Level of each statistical test. Eleven tests; five are exact observations (level 0) and six
statistical (``binomial_sizes``, ``weighted``, ``class_rates``, ``independence``,
``uniform_positions``, ``stratified_batches``, each at most ALPHA; at most four apply to one
loader), so a sampler that is what it claims is rejected with probability <= 0.4% in all
(union bound)."""

TARGET_POWER = 0.99
"""The power every applicable test must reach before ``inspection_epochs=None`` stops drawing."""

MAX_EPOCHS = 2000
"""Most epochs ``inspection_epochs=None`` draws."""

MAX_INDICES = 20_000_000
"""Most indices ``inspection_epochs=None`` draws in all (memory and time)."""

MIN_EPOCHS = 3
"""Fewest epochs drawn: two are needed to compare orders, three to see a third."""

WEIGHT_RATIO = 2.0
"""Alternative of the weighted test: half of the examples drawn at this multiple of the others'
rate."""

DISPERSION_RATIO = 1.5
"""Alternative of the Binomial-sizes test: variance ratio rho = 1.5 or 1/1.5."""


@dataclass(frozen=True)
class LoaderTest:
    """One test on the drawn batches.

    Attributes:
        name: ``fixed_sizes``, ``binomial_sizes``, ``once_per_epoch``, ``same_order``,
            ``with_replacement``, ``weighted``, ``class_rates``, ``independence``,
            ``uniform_positions``, ``reused_order`` or ``stratified_batches``.
        holds: whether the property holds on the draws (for a statistical test: not
            rejected at ``alpha``); None when the test does not apply.
        statistic, p_value: of a statistical test (None for an exact observation).
        alpha: the level (0 for an exact observation: it never errs when the property holds).
        power: the probability of finding the property false under ``alternative`` at the
            sizes drawn (None when not computable).
        alternative: the alternative the power is computed against.
        detail: what was seen.
    """

    name: str
    holds: bool | None
    power: float | None
    alternative: str
    detail: str
    statistic: float | None = None
    p_value: float | None = None
    alpha: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TheoryBracket:
    """The identified sampler's proven epsilon range at the training's sigma, T, E and delta.

    ``epsilon_upper``: a guarantee (the true epsilon is at most this); ``epsilon_lower``:
    achieved by a known pair of neighbouring data sets (the true epsilon is at least this).
    ``guarantee``: ``"yes"`` (sampler identified by type, accountant epsilon >= upper),
    ``"refuted"`` (by type, < lower), ``"consistent"`` (identified only by its draws: never a
    guarantee) or ``"not shown"`` (in between, or no bound).
    """

    sampler: str
    sigma: float
    steps_per_epoch: int
    epochs: int
    delta: float
    epsilon_lower: float | None
    epsilon_upper: float | None
    accountant_epsilon: float | None
    guarantee: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LoaderInspection:
    """What :func:`inspect_loader` found (``to_dict`` is the ``--json`` output).

    Attributes:
        sampler: the registered sampler name the draws identify, or ``"unknown"``.
        n: examples the loader draws from; epochs, batches: drawn; steps_per_epoch: T.
        batch_size: b (fixed sizes: the common size; random: the mean size, an estimate).
        sampling_probability: q implied (random sizes: s_bar / n, an estimate; fixed: 1/T).
        q_interval: Clopper-Pearson interval of q at 1 - alpha (random sizes only).
        tests: the :class:`LoaderTest` results; reasons: why the law is what it is.
        accountant: the accountant's assumptions; matches_accountant: whether the loader is
            what the accountant assumed (None without an accountant); mismatches: how not;
            notes: differences that do not change the privacy (e.g. the noise divisor).
        theory: the bracket of the identified sampler (None without sigma and epochs).
        underpowered: tests whose power is below :data:`TARGET_POWER`.
        identification: how the sampler was identified (:class:`Identification`: by its type
            or only by its draws).
        rates: the per-step inclusion rates the bracket is computed at when the sampler was
            identified by its draws and examples are not once per epoch
            (:class:`InclusionRates`: the worst example's rate decides), else None.
    """

    sampler: str
    n: int
    epochs: int
    batches: int
    steps_per_epoch: float
    batch_size: float
    sampling_probability: float
    q_interval: tuple[float, float] | None
    tests: tuple[LoaderTest, ...]
    reasons: tuple[str, ...]
    accountant: AccountantAssumptions | None = None
    matches_accountant: bool | None = None
    mismatches: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    theory: TheoryBracket | None = None
    underpowered: tuple[str, ...] = field(default=())
    identification: Identification | None = None
    rates: InclusionRates | None = None

    def test(self, name: str) -> LoaderTest:
        """The test called ``name``."""
        return next(t for t in self.tests if t.name == name)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["tests"] = {t.name: t.to_dict() for t in self.tests}
        return out

    def summary(self) -> str:
        """The human-readable report of the inspection."""
        lines = [
            f"sampler: {self.sampler}  (n = {self.n}, {self.epochs} epochs, {self.batches} "
            "batches drawn)",
            f"implied: T = {self.steps_per_epoch:g} batches per epoch, b = {self.batch_size:.4g}, "
            f"q = {self.sampling_probability:.6g}"
            + (
                f" ({100 * (1 - ALPHA):g}% interval [{self.q_interval[0]:.6g}, "
                f"{self.q_interval[1]:.6g}])"
                if self.q_interval
                else ""
            ),
            "tests (level per test; power against the alternative at the sizes drawn):",
        ]
        for t in self.tests:
            state = "n/a" if t.holds is None else ("yes" if t.holds else "no")
            power = "" if t.power is None else f", power {t.power:.4f} vs {t.alternative}"
            level = f" (p = {t.p_value:.3g}, alpha = {t.alpha:g})" if t.p_value is not None else ""
            lines.append(f"  {t.name:<17} {state:<4}{level}{power}: {t.detail}")
        lines += [f"  - {r}" for r in self.reasons]
        if self.identification is not None:
            lines.append(f"identified by {self.identification.how}: {self.identification.detail}")
        if self.rates is not None:
            lines.append(f"inclusion rates: {self.rates.describe()}")
        if self.underpowered:
            lines.append(
                f"UNDERPOWERED (power < {TARGET_POWER:g}): {', '.join(self.underpowered)}; draw "
                "more epochs"
            )
        if self.accountant is not None:
            a = self.accountant
            lines.append(
                f"accountant ({a.accountant or 'given'}): Poisson with sample_rate = "
                f"{a.sample_rate}, "
                f"poisson_sampling = {a.poisson_sampling}, noise divided by {a.expected_batch_size}"
            )
            lines.append("matches the loader: " + ("yes" if self.matches_accountant else "NO")
                         + "".join(f"\n  - {m}" for m in self.mismatches))
            lines += [f"  note: {note}" for note in self.notes]
        if self.theory is not None:
            th = self.theory
            lines.append(
                f"theory for {th.sampler} (sigma = {th.sigma:g}, T = {th.steps_per_epoch}, E = "
                f"{th.epochs}, "
                f"delta = {th.delta:g}): {_fmt(th.epsilon_lower)} <= epsilon <= "
                f"{_fmt(th.epsilon_upper)}"
            )
            if th.accountant_epsilon is not None:
                checked = sum(t.holds is not None for t in self.tests)
                where = ("the most drawn example's rate bound" if self.rates is not None
                         else "q's interval end")
                verdict = {
                    "yes": "a guarantee for this loader (its sampler identified by type, no "
                           "test rejects)",
                    "refuted": "NOT a guarantee: below the proven lower bound for this loader",
                    "not shown": "not shown to be a guarantee"
                    + (" (between the bounds)" if th.epsilon_upper is not None
                       else " (no proven bound for this loader)"),
                    "consistent": f"consistent with {th.sampler} on {checked} tests; not a "
                    "guarantee (identified only by its draws"
                    + (f"; the upper bound at {where} is {_fmt(th.epsilon_upper)}"
                       if th.epsilon_upper is not None else "")
                    + ")",
                }[th.guarantee]
                lines.append(f"accountant's epsilon = {th.accountant_epsilon:.4g}: {verdict}")
            lines += [f"  note: {note}" for note in th.notes]
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


# --------------------------------------------------------------------------- drawing


def _batch_source(loader: Any) -> Any:
    """The iterable of index batches behind ``loader`` (a DataLoader's ``batch_sampler``)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None:
        return batch_sampler
    if hasattr(loader, "dataset") and getattr(loader, "batch_size", 0) is None:
        raise ValueError(
            "loader: a DataLoader with batch_size=None (no batch sampler) yields single examples; "
            "inspect a loader with batches (batch_size or batch_sampler)"
        )
    if hasattr(loader, "__iter__"):
        return loader
    raise ValueError(
        f"loader: a {type(loader).__name__} is neither a torch DataLoader nor a batch sampler "
        "(an iterable of index lists); pass the DataLoader given to training"
    )


def loader_size(loader: Any) -> int | None:
    """n, the number of examples ``loader`` draws from, when the loader says it."""
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        return len(dataset)
    source = _batch_source(loader)
    for owner in (source, getattr(source, "sampler", None)):
        if owner is None:
            continue
        weights = getattr(owner, "weights", None)
        if weights is not None:
            return len(weights)
        data_source = getattr(owner, "data_source", None)
        if data_source is not None and hasattr(data_source, "__len__"):
            return len(data_source)
        if type(owner).__name__ == "UniformWithReplacementSampler":
            return int(owner.num_samples)
    return None


MAX_BATCHES_PER_EPOCH = 10_000_000
"""An epoch longer than this is refused (an endless sampler, e.g. of an IterableDataset)."""


def draw_epochs(loader: Any, epochs: int) -> list[list[np.ndarray]]:
    """``epochs`` iterations of the loader's batch sampler: per epoch, the list of index arrays.

    Raises:
        ValueError: a loader over an ``IterableDataset`` (its order lives inside the dataset's
            iterator: there is no sampler to inspect), batches that are not integer indices,
            an epoch without batches or longer than :data:`MAX_BATCHES_PER_EPOCH`.
    """
    from torch.utils.data import IterableDataset

    if isinstance(getattr(loader, "dataset", None), IterableDataset):
        raise ValueError(
            "loader: its dataset is an IterableDataset, whose order is decided inside the "
            "dataset's own "
            "iterator; there is no sampler to inspect (use a map-style Dataset with a sampler)"
        )
    source = _batch_source(loader)
    out = []
    for _ in range(epochs):
        epoch = []
        for batch in source:
            try:
                index = np.asarray(
                    batch.tolist() if hasattr(batch, "tolist") else list(batch), dtype=np.int64
                ).ravel()
            except (TypeError, ValueError):
                raise ValueError(
                    f"loader: a batch is not a list of integer indices ({str(batch)[:60]}); pass "
                    "a DataLoader "
                    "over a map-style Dataset or a batch sampler"
                ) from None
            epoch.append(index)
            if len(epoch) > MAX_BATCHES_PER_EPOCH:
                raise ValueError(
                    f"loader: an epoch yielded more than {MAX_BATCHES_PER_EPOCH} batches (an "
                    "endless sampler?)"
                )
        if not epoch:
            raise ValueError("loader: an epoch yielded no batches")
        out.append(epoch)
    return out


# --------------------------------------------------------------------------- tests


def _log_power_complement(log_miss: float) -> float:
    """1 - exp(log_miss), accurate for log_miss near 0 and very negative."""
    return float(-np.expm1(log_miss)) if log_miss < 0 else 0.0


def _fixed_sizes(epochs: list[list[np.ndarray]], n: int) -> tuple[LoaderTest, bool]:
    sizes = [np.array([b.size for b in e]) for e in epochs]
    body = (
        np.concatenate([s[:-1] for s in sizes])
        if any(s.size > 1 for s in sizes)
        else np.array([], int)
    )
    lasts = np.array([s[-1] for s in sizes])
    common = int(np.bincount(np.concatenate(sizes)).argmax())
    fixed = bool(
        body.size and np.all(body == common) and np.all(lasts == lasts[0]) and lasts[0] <= common
    )
    total = sum(s.size for s in sizes)
    q = min(max(common / n, 1e-12), 1 - 1e-12)
    pmax = float(binom.pmf(np.floor((n + 1) * q), n, q))
    power = _log_power_complement((total - 1) * math.log(max(pmax, 1e-300)))
    last = (
        "" if not fixed or lasts[0] == common else f" (the last batch of each epoch has {lasts[0]})"
    )
    detail = (
        f"every batch has {common} examples{last}"
        if fixed
        else f"sizes vary from {min(int(s.min()) for s in sizes)} to "
             f"{max(int(s.max()) for s in sizes)}"
    )
    return LoaderTest(
        "fixed_sizes", fixed, power, f"Poisson sizes Binomial(n, {q:.4g})", detail
    ), fixed


def _binomial_sizes(
    epochs: list[list[np.ndarray]], n: int, random_sizes: bool
) -> tuple[LoaderTest, float, tuple[float, float]]:
    sizes = np.concatenate([[b.size for b in e] for e in epochs]).astype(float)
    s_count = sizes.size
    q = float(sizes.mean() / n)
    total = int(sizes.sum())
    lo = float(beta_law.ppf(ALPHA / 2, total, n * s_count - total + 1)) if total > 0 else 0.0
    hi = (
        float(beta_law.isf(ALPHA / 2, total + 1, n * s_count - total))
        if total < n * s_count
        else 1.0
    )
    alt = f"variance ratio {DISPERSION_RATIO:g} or 1/{DISPERSION_RATIO:g}"
    if not random_sizes or s_count < 2 or q <= 0 or q >= 1:
        return (
            LoaderTest("binomial_sizes", None, None, alt, "not applicable: fixed sizes"),
            q,
            (lo, hi),
        )
    df = s_count - 1
    d = float(((sizes - sizes.mean()) ** 2).sum() / (n * q * (1 - q)))
    p = float(min(1.0, 2 * min(chi2.cdf(d, df), chi2.sf(d, df))))
    low, high = chi2.ppf(ALPHA / 2, df), chi2.isf(ALPHA / 2, df)
    power = min(
        float(chi2.sf(high / rho, df) + chi2.cdf(low / rho, df))
        for rho in (DISPERSION_RATIO, 1 / DISPERSION_RATIO)
    )
    holds = p > ALPHA
    detail = (f"index of dispersion {d:.1f} on {df} df (sizes: mean {sizes.mean():.3f}, variance "
              f"{sizes.var(ddof=1):.3f}; Binomial(n, q): {n * q * (1 - q):.3f})")
    return LoaderTest("binomial_sizes", holds, power, alt, detail, d, p, ALPHA), q, (lo, hi)


def _once_per_epoch(epochs: list[list[np.ndarray]], n: int, q: float) -> tuple[LoaderTest, bool]:
    ok = all(np.array_equal(np.sort(np.concatenate(e)), np.arange(n)) for e in epochs)
    bad = sum(not np.array_equal(np.sort(np.concatenate(e)), np.arange(n)) for e in epochs)
    steps = len(epochs[0])
    q = min(max(q, 1e-12), 1 - 1e-12)
    # one example exactly once in T Poisson steps
    log_one = math.log(steps * q) + (steps - 1) * math.log1p(-q)
    power = _log_power_complement(min(0.0, n * len(epochs) * log_one))
    detail = ("each epoch uses every example exactly once" if ok
              else f"{bad} of {len(epochs)} epochs do not use every example exactly once")
    return LoaderTest("once_per_epoch", ok, power, f"Poisson sampling at q = {q:.4g}", detail), ok


def _same_order(
    epochs: list[list[np.ndarray]], n: int, once: bool
) -> tuple[LoaderTest, bool, bool]:
    first = np.concatenate(epochs[0])
    same = all(np.array_equal(np.concatenate(e), first) for e in epochs[1:])
    identity = bool(same and np.array_equal(first, np.arange(first.size)))
    log_same = -(len(epochs) - 1) * float(gammaln(n + 1))  # (1/n!)^(E-1)
    power = _log_power_complement(log_same) if len(epochs) > 1 else 0.0
    if not once:
        return LoaderTest("same_order", None, None, "a fresh permutation every epoch",
                          "not applicable: examples are not used once per epoch"), same, identity
    detail = (
        "the same order in every epoch" + (" (0, 1, ..., n-1: sequential)" if identity else "")
        if same
        else "the order changes between epochs"
    )
    return (
        LoaderTest("same_order", same, power, "a fresh uniform permutation every epoch", detail),
        same,
        identity,
    )


def _with_replacement(epochs: list[list[np.ndarray]], n: int) -> tuple[LoaderTest, bool]:
    repeats = sum(int(b.size - np.unique(b).size) for e in epochs for b in e)
    sizes = np.array([b.size for e in epochs for b in e], dtype=np.int64)
    # log P(no repeat in any batch) under uniform draws with replacement: sum_t sum_{i<s_t} log(1 -
    # i/n)
    biggest = int(sizes.max(initial=0))
    if biggest > n:
        log_none = -math.inf
    else:
        cum = np.concatenate([[0.0], np.cumsum(np.log1p(-np.arange(biggest) / n))])
        log_none = float(cum[sizes].sum())
    power = _log_power_complement(log_none) if log_none > -math.inf else 1.0
    detail = (
        f"{repeats} repeated indices within batches"
        if repeats
        else "no index repeats within a batch"
    )
    return LoaderTest(
        "with_replacement", repeats > 0, power, "uniform draws with replacement", detail
    ), repeats > 0


def _weighted(
    epochs: list[list[np.ndarray]], n: int, once: bool, replacement: bool, q: float,
    fixed: bool = False,
) -> tuple[LoaderTest, bool]:
    alt = f"half of the examples at {WEIGHT_RATIO:g}x the others' rate"
    if once:
        return LoaderTest(
            "weighted", False, None, alt, "every example is used once per epoch: equal rates"
        ), False
    counts = np.bincount(np.concatenate([b for e in epochs for b in e]), minlength=n)[:n].astype(
        float
    )
    if counts.size < 2:
        return LoaderTest("weighted", None, None, alt, "not applicable: n < 2"), False
    c_bar = float(counts.mean())
    p = 1.0 / n if replacement else min(q, 1 - 1e-12)
    x = float(((counts - c_bar) ** 2).sum() / (c_bar * (1 - p))) if c_bar > 0 else 0.0
    if fixed and not replacement:
        # fixed sizes: the total is fixed, Cov(c_i, c_j) = -S p (1 - p) / (n - 1), so
        # E sum (c_i - c_bar)^2 = n S p (1 - p): E X = n, rescaled to the chi2(n - 1) mean
        x *= (n - 1) / n
    df = n - 1
    p_value = float(chi2.sf(x, df))
    # relative deviation of each half's rate from the mean
    r = (WEIGHT_RATIO - 1) / (WEIGHT_RATIO + 1)
    lam = n * c_bar * r * r / (1 - p)
    power = float(ncx2.sf(chi2.isf(ALPHA, df), df, lam))
    holds = p_value <= ALPHA
    detail = (
        f"inclusion counts per example: mean {c_bar:.2f}, from {int(counts.min())} to "
        f"{int(counts.max())} "
        f"(the most drawn example {counts.max() / max(c_bar, 1e-12):.3g}x the mean rate); "
        f"chi-square {x:.1f} on {df} df against equal rates"
    )
    return LoaderTest("weighted", holds, power, alt, detail, x, p_value, ALPHA), holds


# ------------------------------------------------------------------ independence, positions

MAX_PAIR_STEPS = 2000
"""Most steps (the first ones) whose pairs the independence test compares (S^2 / 2 overlaps)."""

CANTELLI_K = math.sqrt(1 / ALPHA - 1)
"""Cantelli's one-sided bound P(U - mu >= k sd) <= 1 / (1 + k^2) = ALPHA at
k = sqrt(1/ALPHA - 1)."""


def _falling(x: np.ndarray, k: int) -> np.ndarray:
    out = np.ones_like(x, dtype=float)
    for j in range(k):
        out = out * np.maximum(x - j, 0)
    return out


def _pair_moments(sizes: np.ndarray, n: int, paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of h = C(O, 2), O the overlap of two independent uniform subsets of
    sizes s, s' (all pairs of the distinct sizes): O ~ Hypergeometric(n, s, s'), F_k =
    s_(k) s'_(k) / n_(k) (falling factorials), E C(O,2) = F2/2, E C(O,2)^2 = (F4 + 4F3 + 2F2)/4.
    ``paired``: the alternative of disjoint fixed pairs drawn together: O = 2K, K ~
    Hypergeometric(n/2, s/2, s'/2), E h = 2G2 + G1, E h^2 = 4G4 + 20G3 + 17G2 + G1."""
    if paired:
        m, s = n // 2, sizes // 2
    else:
        m, s = n, sizes
    f = {k: np.outer(_falling(s, k), _falling(s, k)) / max(float(_falling(np.array([m]), k)[0]),
                                                          1e-300) for k in (1, 2, 3, 4)}
    if paired:
        mean = 2 * f[2] + f[1]
        second = 4 * f[4] + 20 * f[3] + 17 * f[2] + f[1]
    else:
        mean = f[2] / 2
        second = (f[4] + 4 * f[3] + 2 * f[2]) / 4
    return mean, np.maximum(second - mean**2, 0.0)


def _pair_sum(values: np.ndarray, index: np.ndarray, groups: np.ndarray | None) -> float:
    """sum over step pairs t < t' (of different groups, when given) of values[index_t, index_t']."""
    counts = np.bincount(index, minlength=values.shape[0]).astype(float)
    total = (counts @ values @ counts - counts @ np.diag(values)) / 2
    if groups is not None:
        for g in np.unique(groups):
            c = np.bincount(index[groups == g], minlength=values.shape[0]).astype(float)
            total -= (c @ values @ c - c @ np.diag(values)) / 2
    return float(total)


def _independence(
    epochs: list[list[np.ndarray]], n: int, applies: bool, within_epochs: bool
) -> tuple[LoaderTest, bool]:
    """Co-occurrence of pairs of examples against independent memberships (module docstring).

    U = sum_{i<j} C(C_ij, 2) = sum_{t<t'} C(O_tt', 2), C_ij the steps holding both i and j,
    O_tt' = |B_t & B_t'|. Given the sizes, independent memberships make each batch a uniform
    subset of its size, independent of the others, so the terms are pairwise independent
    (E[h_tt' | B_t] does not depend on B_t): E U and Var U are exact sums of hypergeometric
    moments, and Cantelli's inequality rejects U >= E U + k sd at level <= ALPHA whatever the
    law of U. Power: Cantelli's lower bound 1 - V1 / (V1 + (M1 - c)^2) under fixed disjoint
    pairs of examples always drawn together (M1, V1 its moments at the same sizes).
    ``within_epochs`` False: only pairs of steps of different epochs (once-per-epoch loaders,
    whose batches of one epoch are disjoint).
    """
    alt = "fixed pairs of examples always drawn together (Cantelli lower bound)"
    if not applies:
        return LoaderTest("independence", None, None, alt,
                          "not applicable: the same batches every epoch"), False
    steps = [(k, b) for k, e in enumerate(epochs) for b in e][:MAX_PAIR_STEPS]
    groups = None if within_epochs else np.array([k for k, _ in steps])
    if groups is not None and np.unique(groups).size < 2:
        return LoaderTest("independence", None, None, alt,
                          "not applicable: one epoch drawn"), False
    from scipy.sparse import csr_matrix

    sizes = np.array([b.size for _, b in steps], dtype=np.int64)
    rows = np.repeat(np.arange(len(steps)), sizes)
    cols = np.concatenate([b for _, b in steps]) if sizes.sum() else np.array([], np.int64)
    x = csr_matrix((np.ones(cols.size), (rows, cols)), shape=(len(steps), n))
    overlap = (x @ x.T).toarray()
    pair_terms = overlap * (overlap - 1) / 2
    mask = np.triu(np.ones_like(overlap, dtype=bool), 1)
    if groups is not None:
        mask &= groups[:, None] != groups[None, :]
    u = float(pair_terms[mask].sum())
    distinct, index = np.unique(sizes, return_inverse=True)
    mean0, var0 = (_pair_sum(v, index, groups) for v in _pair_moments(distinct, n, False))
    mean1, var1 = (_pair_sum(v, index, groups) for v in _pair_moments(distinct, n, True))
    sd0 = math.sqrt(max(var0, 0.0))
    critical = mean0 + CANTELLI_K * sd0
    power = (1 - var1 / (var1 + (mean1 - critical) ** 2)) if mean1 > critical else 0.0
    z = (u - mean0) / sd0 if sd0 > 0 else 0.0
    p_value = 1.0 if z <= 0 else min(1.0, 1 / (1 + z * z))  # Cantelli's bound on the p-value
    rejected = sd0 > 0 and u >= critical
    detail = (f"pairs of examples co-occurring in two steps: {u:.0f} over {int(mask.sum())} "
              f"step pairs, {mean0:.1f} +- {sd0:.1f} under independent memberships "
              f"({z:.1f} sd; rejected above {CANTELLI_K:.1f} sd)")
    return LoaderTest("independence", not rejected, power, alt, detail, z, p_value,
                      ALPHA), bool(rejected)


def _positions(epochs: list[list[np.ndarray]], n: int, applies: bool) -> tuple[LoaderTest, bool]:
    """Each example's step uniform across epochs (once-per-epoch loaders with a new order).

    c_it = epochs placing example i at step t; given the sizes, E c_it = e_t = sum_e s_et / n.
    X = sum_{i,t} (c_it - e_t)^2 / e_t against chi2 with df = E X = n sum_t (1 - sum_e p_et^2 /
    e_t) (exact mean; the statistic's variance is below the chi-square's at few epochs, so the
    test is conservative), rejected above its 1 - ALPHA quantile. Power: noncentral chi2 with
    lambda = sum_{i,t} (E p'_it - e_t)^2 / e_t, half of the examples twice as likely in the
    first half of the steps as in the second (p' proportional to p_t 4/3 and 2/3), the other
    half the reverse.
    """
    alt = "half of the examples 2x as likely in the first half of the epoch as in the second"
    if not applies:
        return LoaderTest("uniform_positions", None, None, alt,
                          "not applicable: not a new once-per-epoch order"), False
    steps = max(len(e) for e in epochs)
    counts = np.zeros((n, steps))
    share = np.zeros((len(epochs), steps))
    for k, e in enumerate(epochs):
        sizes = np.array([b.size for b in e])
        share[k, : sizes.size] = sizes / n
        where = np.repeat(np.arange(sizes.size), sizes)
        counts[np.concatenate(e), where] += 1
    expected = share.sum(axis=0)
    used = expected > 0
    x = float((((counts[:, used] - expected[used]) ** 2) / expected[used]).sum())
    df = float(n * (1 - (share[:, used] ** 2).sum(axis=0) / expected[used]).sum())
    half = steps // 2
    factor = np.ones(steps)
    factor[:half], factor[steps - half:] = 4 / 3, 2 / 3
    p = expected / len(epochs)
    lam = 0.0
    for f in (factor, 2 - factor):
        alt_p = p * f / max((p * f).sum(), 1e-300)
        lam += (n / 2) * len(epochs) * float(((alt_p - p)[used] ** 2 / p[used]).sum())
    p_value = float(chi2.sf(x, df))
    power = float(ncx2.sf(chi2.isf(ALPHA, df), df, lam))
    rejected = p_value <= ALPHA
    detail = (f"chi-square {x:.1f} on {df:.1f} df of the example-by-step counts over "
              f"{len(epochs)} epochs against uniform steps")
    return LoaderTest("uniform_positions", not rejected, power, alt, detail, x, p_value,
                      ALPHA), rejected


def _reused_order(epochs: list[list[np.ndarray]], applies: bool) -> tuple[LoaderTest, bool]:
    """Two consecutive epochs in the same order while the order changes (exact observation;
    power 1 against one permutation used for two consecutive epochs once E >= 3)."""
    alt = "each permutation used for two consecutive epochs"
    if not applies:
        return LoaderTest("reused_order", None, None, alt,
                          "not applicable: not a new once-per-epoch order"), False
    orders = [np.concatenate(e) for e in epochs]
    repeats = sum(np.array_equal(a, b) for a, b in itertools.pairwise(orders))
    detail = (f"{repeats} of {len(orders) - 1} consecutive epochs repeat the previous order"
              if repeats else "no epoch repeats the previous one's order")
    return LoaderTest("reused_order", repeats == 0, 1.0 if len(orders) >= 3 else 0.0, alt,
                      detail), repeats > 0


# ------------------------------------------------------------------ inclusion rates, labels

RATE_PRECISION = 0.25
"""``inspection_epochs=None`` also draws (within :data:`MAX_EPOCHS` and :data:`MAX_INDICES`)
until the upper confidence bound of the most drawn example's rate is within this fraction of the
mean rate (random-size samplers not once per epoch): the bracket's upper end is computed there."""

CLASS_RATIO = 1.2
"""Alternative of the ``class_rates`` test: one class drawn at this multiple of the others'
rate."""

STRATA_BOUNDED = 10
"""The stratified_batches test's P0 is the smallest P(E_k) over this many of the largest
classes (any set of classes bounds P(E); more only tightens it)."""

MIN_CLASS_COUNT = 50
"""The ``class_rates`` chi-square (K > 2 classes) applies once every class expects this many
inclusions (K = 2 is exact at any count)."""

MAX_CLASSES = 1000
"""Labels with more distinct values than this (or than n / 5) are not read as classes."""


@dataclass(frozen=True)
class ClassRate:
    """One class's inclusion rate: ``count`` inclusions of its ``size`` examples over ``steps``
    steps; ``rate`` = count / (size steps) (an estimate) in [``lower``, ``upper``], the
    Clopper-Pearson interval at 1 - ALPHA / K (Bonferroni over the K classes)."""

    label: float
    size: int
    count: int
    rate: float
    lower: float
    upper: float


@dataclass(frozen=True)
class InclusionRates:
    """The per-step inclusion rates the bracket is computed at (random sizes, not once per
    epoch: Poisson-like loaders; and fixed-size independent batches).

    The privacy of an example is decided by its own inclusion rate (the adversarial threat
    model: the other examples' memberships are part of the data), so the loader's epsilon is
    that of its most drawn example. Equal rates are not proven by a test that does not reject;
    the bracket's upper end is therefore at ``worst_upper``, an upper confidence bound of the
    largest rate that holds whatever the rates are: the Clopper-Pearson upper bound of the most
    drawn example's count, at level ALPHA / (2 n) per example (Bonferroni: max_i q_i <=
    max_i upper_i with probability >= 1 - ALPHA / 2). The lower end is at ``worst_lower``, a
    lower bound of the largest rate: the larger of the mean rate's lower end and the classes'
    lower ends (each class's mean rate is at most the largest rate).

    Attributes:
        mean: the mean rate q_bar = (inclusions) / (n steps), an estimate; ``mean_interval`` its
            Clopper-Pearson interval at 1 - ALPHA.
        steps: the steps drawn; most_drawn: the largest per-example inclusion count.
        worst_upper, worst_lower: the bounds above.
        classes: per-class rates when labels were available (empty otherwise).
    """

    mean: float
    mean_interval: tuple[float, float]
    steps: int
    most_drawn: int
    worst_upper: float
    worst_lower: float
    classes: tuple[ClassRate, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        """Which rates the bracket uses, and why (one sentence)."""
        by_class = ""
        if self.classes:
            top = max(self.classes, key=lambda c: c.rate)
            by_class = (f"; by class, the most drawn class ({top.label:g}) at {top.rate:.6g} "
                        f"[{top.lower:.6g}, {top.upper:.6g}]")
        return (
            f"upper bound at q = {self.worst_upper:.6g}, the upper confidence bound of the most "
            f"drawn example's rate ({self.most_drawn} of {self.steps} steps; Clopper-Pearson, "
            "simultaneous over the n examples): the worst example's rate decides, and equal "
            "rates are not proven by a test that does not reject; lower bound at "
            f"q = {self.worst_lower:.6g}, a lower bound of the largest rate (mean rate "
            f"{self.mean:.6g}, interval [{self.mean_interval[0]:.6g}, "
            f"{self.mean_interval[1]:.6g}]{by_class})"
        )


def _cp_upper(count: int | np.ndarray, trials: int, level: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound of a Binomial(trials, p) p at ``level``."""
    count = np.asarray(count)
    out = np.ones(count.shape, dtype=float)
    inside = count < trials
    out[inside] = beta_law.isf(level, count[inside] + 1, trials - count[inside])
    return out


def _cp_lower(count: int | np.ndarray, trials: int, level: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound of a Binomial(trials, p) p at ``level``."""
    count = np.asarray(count)
    out = np.zeros(count.shape, dtype=float)
    inside = count > 0
    out[inside] = beta_law.ppf(level, count[inside], trials - count[inside] + 1)
    return out


def read_labels(loader: Any, n: int) -> np.ndarray | None:
    """The class label of each of the n examples, when the loader's dataset says them.

    Read without loading examples: ``dataset.targets`` or ``.labels`` (torchvision, most
    datasets), a ``TensorDataset``'s last tensor when it is one integer per example, through a
    ``torch.utils.data.Subset``'s indices. None when none is found, or when the values are not
    classes (fewer than 2 or more than min(:data:`MAX_CLASSES`, n / 5) distinct values).
    """
    dataset = getattr(loader, "dataset", None)
    labels = _dataset_labels(dataset)
    if labels is None or labels.size != n:
        return None
    classes = np.unique(labels).size
    if classes < 2 or classes > min(MAX_CLASSES, n / 5):
        return None
    return labels


def _dataset_labels(dataset: Any) -> np.ndarray | None:
    if dataset is None:
        return None
    from torch.utils.data import Subset, TensorDataset

    if isinstance(dataset, Subset):
        inner = _dataset_labels(dataset.dataset)
        return None if inner is None else inner[np.asarray(list(dataset.indices), dtype=np.int64)]
    values: Any = None
    for name in ("targets", "labels"):
        if getattr(dataset, name, None) is not None:
            values = getattr(dataset, name)
            break
    if values is None and isinstance(dataset, TensorDataset) and len(dataset.tensors) > 1:
        values = dataset.tensors[-1]
    if values is None:
        return None
    try:
        array = np.asarray(values.tolist() if hasattr(values, "tolist") else list(values))
    except (TypeError, ValueError):
        return None
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer)
                               or np.issubdtype(array.dtype, np.bool_)):
        return None
    return array.astype(np.int64)


def _inclusion_rates(
    epochs: list[list[np.ndarray]], n: int, labels: np.ndarray | None,
    interval: tuple[float, float],
) -> tuple[InclusionRates, LoaderTest, bool]:
    """The per-step rates (:class:`InclusionRates`) and the ``class_rates`` test.

    ``class_rates`` (labels with K >= 2 classes, examples not once per epoch): class k's
    inclusions C_k of n_k S Bernoulli trials against one common rate, X = sum_k (C_k - n_k S
    q_bar)^2 / (n_k S q_bar (1 - q_bar)) ~ chi2(K - 1) (Pearson's test of homogeneity),
    rejected above its 1 - ALPHA quantile, applied once every class expects at least
    :data:`MIN_CLASS_COUNT` inclusions; K = 2: exact instead (given the total T, equal rates
    make C_0 ~ Hypergeometric(n S, n_0 S, T); two-sided p = 2 min(P(<= C_0), P(>= C_0)));
    power against one class (the largest) at :data:`CLASS_RATIO` times the others' rate:
    noncentral chi2(K - 1) with lambda = sum_k n_k S (p_k - p_bar)^2 / (p_bar (1 - p_bar)) at
    the mean rate seen.
    """
    steps = sum(len(e) for e in epochs)
    counts = np.bincount(np.concatenate([b for e in epochs for b in e]), minlength=n)[:n]
    total = int(counts.sum())
    mean = total / (n * steps)
    most = int(counts.max())
    worst_upper = float(_cp_upper(most, steps, ALPHA / (2 * n)))
    worst_upper = max(worst_upper, interval[1])
    classes: list[ClassRate] = []
    alt = f"one class at {CLASS_RATIO:g}x the others' rate"
    test = LoaderTest("class_rates", None, None, alt, "not applicable: no class labels")
    unequal = False
    if labels is not None:
        values, which = np.unique(labels, return_inverse=True)
        sizes = np.bincount(which, minlength=values.size)
        class_counts = np.bincount(which, weights=counts, minlength=values.size).astype(np.int64)
        level = ALPHA / (2 * values.size)
        for value, size, count in zip(values, sizes, class_counts, strict=True):
            trials = int(size) * steps
            classes.append(ClassRate(float(value), int(size), int(count), int(count) / trials,
                                     float(_cp_lower(int(count), trials, level)),
                                     float(_cp_upper(int(count), trials, level))))
        p = min(max(mean, 1e-12), 1 - 1e-12)
        expected = sizes * steps * p
        x = float(((class_counts - expected) ** 2 / (expected * (1 - p))).sum())
        df = values.size - 1
        if values.size == 2:
            # exact: given the total, equal rates make the inclusions a uniform subset of the
            # n S (example, step) trials, so class 0's count is Hypergeometric(n S, n_0 S, total)
            from scipy.stats import hypergeom

            law = hypergeom(n * steps, int(sizes[0]) * steps, int(class_counts.sum()))
            c0 = int(class_counts[0])
            p_value = float(min(1.0, 2 * min(law.cdf(c0), law.sf(c0 - 1))))
            how = "exact two-sided hypergeometric p given the total"
        elif expected.min() < MIN_CLASS_COUNT:
            return (InclusionRates(mean, interval, steps, most, worst_upper,
                                   max([interval[0], *(c.lower for c in classes)]),
                                   tuple(classes)),
                    LoaderTest("class_rates", None, None, alt,
                               f"not applicable yet: a class expects {expected.min():.1f} < "
                               f"{MIN_CLASS_COUNT} inclusions (the chi-square approximation)"),
                    False)
        else:
            p_value = float(chi2.sf(x, df))
            how = "chi-square p"
        big = int(sizes.argmax())
        rates = np.ones(values.size)
        rates[big] = CLASS_RATIO
        rates *= p * n / float((rates * sizes).sum())  # the same mean rate
        lam = float((sizes * steps * (rates - p) ** 2 / (p * (1 - p))).sum())
        power = float(ncx2.sf(chi2.isf(ALPHA, df), df, lam))
        unequal = p_value <= ALPHA
        top = max(classes, key=lambda c: c.rate)
        low = min(classes, key=lambda c: c.rate)
        detail = (f"{values.size} classes: rates from {low.rate:.6g} (class {low.label:g}) to "
                  f"{top.rate:.6g} (class {top.label:g}); chi-square {x:.1f} on {df} df "
                  f"against one common rate ({how})")
        test = LoaderTest("class_rates", unequal, power, alt, detail, x, p_value, ALPHA)
    worst_lower = max([interval[0], *(c.lower for c in classes)])
    rates_record = InclusionRates(mean, interval, steps, most, worst_upper, worst_lower,
                                  tuple(classes))
    return rates_record, test, unequal


def _stratified(
    epochs: list[list[np.ndarray]], n: int, labels: np.ndarray | None, applies: bool,
) -> tuple[LoaderTest, bool]:
    """Batches stratified by label in a once-per-epoch shuffle (an exact-probability test).

    The event E: in every epoch drawn, every batch but the epoch's last holds each class k in
    proportion, |c_bk - s_b n_k / n| <= 1 (c_bk its count in batch b of size s_b). Under a
    uniform permutation (dynamic_shuffle), given the sizes, batch b's count of class k given the
    earlier batches is Hypergeometric(remaining, class k remaining, s_b), so P(E_k) of one
    epoch is an exact dynamic program over the class-k examples used so far; E is in every E_k
    and the epochs are independent, so P(E) <= prod_epochs min_k P(E_k) =: P0 (k over the
    :data:`STRATA_BOUNDED` largest classes: any fixed set of classes gives a valid bound). The test
    rejects "uniform" when E is seen and P0 <= ALPHA: its level is P0 <= ALPHA (exact, no
    approximation). Power 1 against a stratified shuffle (whose batches hold every class in
    proportion) once P0 <= ALPHA, 0 before.
    """
    alt = "a stratified shuffle (every batch holds each class in proportion)"
    if not applies or labels is None:
        why = ("not applicable: no class labels" if labels is None
               else "not applicable: not a new once-per-epoch order")
        return LoaderTest("stratified_batches", None, None, alt, why), False
    values, which = np.unique(labels, return_inverse=True)
    class_sizes = np.bincount(which, minlength=values.size)
    seen = True
    log_p0 = 0.0
    for epoch in epochs:
        sizes = np.array([b.size for b in epoch[:-1]], dtype=np.int64)
        per_class = np.stack([np.bincount(which[b], minlength=values.size) for b in epoch[:-1]]) \
            if sizes.size else np.zeros((0, values.size), dtype=np.int64)
        mu = sizes[:, None] * class_sizes[None, :] / n
        if sizes.size == 0 or not np.all(np.abs(per_class - mu) <= 1 + 1e-9):
            seen = False
        if sizes.size and log_p0 > math.log(ALPHA) - 50:  # further epochs only tighten P0
            log_p0 += min(_log_balanced(sizes, n, int(class_sizes[k]), mu[:, k])
                          for k in np.argsort(-class_sizes, kind="stable")[:STRATA_BOUNDED])
    p0 = math.exp(log_p0) if log_p0 > -700 else 0.0
    rejected = bool(seen and log_p0 <= math.log(ALPHA))
    power = 1.0 if log_p0 <= math.log(ALPHA) else 0.0
    detail = ((f"every batch but each epoch's last holds every class in proportion (within 1) in "
               f"all {len(epochs)} epochs" if seen else
               "batches do not all hold the classes in proportion")
              + f"; a uniform shuffle does that with probability <= {p0:.3g} ({values.size} "
              "classes)")
    return LoaderTest("stratified_batches", not rejected, power, alt, detail, None,
                      p0 if seen else 1.0, ALPHA), rejected


def _log_balanced(sizes: np.ndarray, n: int, nk: int, mu: np.ndarray) -> float:
    """log P(|c_b - mu_b| <= 1 for every batch b) for one class of nk examples, the batches of
    the given sizes taken in turn from a uniform permutation of n (a dynamic program over the
    class's examples used so far, in log space)."""
    from scipy.stats import hypergeom

    low, logp = 0, np.zeros(1)  # logp[j]: log P(low + j class examples used so far, E so far)
    used_total = 0
    for size, m in zip(sizes.tolist(), mu.tolist(), strict=True):
        c_lo, c_hi = max(0, math.ceil(m - 1 - 1e-9)), math.floor(m + 1 + 1e-9)
        used = low + np.arange(logp.size)
        new = np.full(logp.size + c_hi - c_lo, -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            for c in range(c_lo, c_hi + 1):
                step = hypergeom.logpmf(c, n - used_total, nk - used, size)
                step = np.where(np.isnan(step), -np.inf, step)
                j = c - c_lo
                new[j: j + logp.size] = np.logaddexp(new[j: j + logp.size], logp + step)
        used_total += size
        low, logp = low + c_lo, new
        if not np.isfinite(logp).any():
            return -math.inf
    return float(np.logaddexp.reduce(logp))


# --------------------------------------------------------------------------- identification by type


@dataclass(frozen=True)
class Identification:
    """How the sampler was identified.

    Attributes:
        how: ``"type"`` (the loader's sampler is a class whose law is known: Opacus's
            ``UniformWithReplacementSampler``, torch's ``BatchSampler`` over a
            ``SequentialSampler`` or ``RandomSampler``, the harness's ``EpochBatches``; the
            draws then only check it) or ``"draws"`` (only the draws: consistent with the
            sampler on the tests, never a proof).
        type_name: the class seen (None: none recognised).
        sampler: the registered sampler the type is, or ``"unknown"`` (None: by draws).
        sample_rate: q read from the type (Poisson), else None.
        detail: in words.
    """

    how: str
    type_name: str | None
    sampler: str | None
    sample_rate: float | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _by_type(loader: Any) -> Identification | None:
    """The registered sampler the loader's batch sampler is by its exact type (no subclass:
    a subclass may draw otherwise), or None."""
    from torch.utils.data import (
        BatchSampler,
        RandomSampler,
        SequentialSampler,
        WeightedRandomSampler,
    )

    source = _batch_source(loader)
    name = f"{type(source).__module__}.{type(source).__qualname__}"
    try:
        from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    except ImportError:  # pragma: no cover - opacus is an extra
        UniformWithReplacementSampler = None
    if UniformWithReplacementSampler is not None and type(source) is UniformWithReplacementSampler:
        q = float(source.sample_rate)
        return Identification("type", name, "poisson", q,
                              f"Opacus's UniformWithReplacementSampler: Poisson at q = {q:g}")
    from audit.plugins.torch_loaders import EpochBatches

    if type(source) is EpochBatches and source.law is not None:
        return Identification("type", name, source.law, None,
                              f"the harness's EpochBatches drawing {source.law}")
    if type(source) is BatchSampler:
        inner = source.sampler
        inner_name = type(inner).__qualname__
        if type(inner) is SequentialSampler:
            return Identification("type", f"{name}({inner_name})", "deterministic", None,
                                  f"torch's BatchSampler(SequentialSampler, batch_size = "
                                  f"{source.batch_size}, drop_last = {source.drop_last})")
        if (type(inner) is RandomSampler and not inner.replacement
                and inner.num_samples == len(inner.data_source)):
            return Identification("type", f"{name}({inner_name})", "dynamic_shuffle", None,
                                  f"torch's BatchSampler(RandomSampler, batch_size = "
                                  f"{source.batch_size}, drop_last = {source.drop_last}): a "
                                  "fresh torch.randperm every epoch")
        if type(inner) is WeightedRandomSampler:
            w = np.asarray(inner.weights, dtype=float)
            if w.size and not np.allclose(w, w[0]):
                return Identification(
                    "type", f"{name}({inner_name})", "unknown", None,
                    f"WeightedRandomSampler(replacement = {inner.replacement}) with unequal "
                    f"weights (from {w.min():.3g} to {w.max():.3g}): examples are not equally "
                    "likely, which no registered sampler is")
    return None


# --------------------------------------------------------------------------- identification


REPEATED = (
    "the same batches every epoch: every epoch drawn yielded the first epoch's batches again, in "
    "the same order (the sampler's generator re-created or re-seeded in __iter__?), so the "
    "steps are not fresh draws and no accountant's sampler applies; seed the sampler's "
    "generator once, outside __iter__"
)
"""The reason when every epoch repeats the first epoch's batches."""

REPEATED_MISMATCH = (
    "the same batches every epoch, while every accountant assumes fresh batches at each step"
)
"""The mismatch with any accountant when every epoch repeats the first epoch's batches."""


WOR = "sampled_without_replacement"
"""Fixed-size batches of b drawn uniformly without replacement, independently at each step
(Lebeda et al. 2024; docs/design/samplers.md)."""


def _identify(tests: dict[str, LoaderTest], flags: dict[str, bool]) -> tuple[str, list[str]]:
    """The registered sampler the observed properties single out, or "unknown" and why."""
    against = []
    if flags.get("repeated"):
        against.append(REPEATED)
    if flags["replacement"]:
        against.append(
            "indices repeat within a batch: sampling with replacement, which no registered sampler "
            "does (the Poisson accountants assume each example at most once per step)"
        )
    if flags["weighted"]:
        against.append(
            "examples are drawn at unequal rates (weighted sampling"
            + (", by class: the class_rates test" if flags.get("class_rates") else "")
            + "): the accountant's q is not every example's inclusion probability, and the "
            "mean rate's bounds do not bound the most drawn example's epsilon"
        )
    if flags["dependent"]:
        against.append(
            "memberships are not independent: pairs of examples co-occur in more steps than "
            "independent draws allow (e.g. examples drawn in pairs), so the rates and the batch "
            "sizes alone do not describe the sampler"
        )
    if flags["fixed"] and flags["once"] and not flags["same"]:
        if flags["reused"]:
            against.append(
                "an epoch repeats the previous epoch's order (a permutation reused for two "
                "epochs, then a new one): not a fresh uniform shuffle every epoch"
            )
        if flags.get("stratified"):
            against.append(
                "stratified shuffle: every batch holds each class in proportion to its size (the "
                "stratified_batches test), which a uniform permutation does with the small "
                "probability it states; batch memberships are not uniform over permutations, so "
                "dynamic_shuffle's bounds do not apply and no registered accountant's sampler "
                "does"
            )
        if flags["positions"]:
            against.append(
                "examples' positions within the epoch are not uniform (e.g. "
                "WeightedRandomSampler(replacement=False) with unequal weights): not a uniform "
                "shuffle; the shuffle's bounds do not apply"
            )
    if against:
        return "unknown", [*against, "no registered sampler matches these draws"]
    if flags["fixed"] and flags["once"]:
        if flags["same"]:
            if flags["identity"]:
                return "deterministic", [
                    "fixed batch sizes, every example once per epoch, the same sequential "
                    "order every epoch: deterministic batches"
                ]
            return "persistent_shuffle", [
                "fixed batch sizes, every example once per epoch, one shuffled order "
                "repeated every epoch"
            ]
        return "dynamic_shuffle", [
            "fixed batch sizes, every example once per epoch, a new order every epoch: "
            "shuffling (positions within the epoch consistent with uniform, no order reused)"
        ]
    if flags["fixed"] and flags["drops"]:
        return "unknown", [
            "fixed batch sizes, each epoch a permutation of all but n mod b examples: the last "
            "partial batch is dropped (drop_last=True), a shuffle over a random subset that no "
            "registered sampler is; use drop_last=False or n a multiple of the batch size"
        ]
    if flags["fixed"] and flags.get("all_full"):
        return WOR, [
            "every batch has the same size, examples not once per epoch, no repeats within a "
            "batch, equal inclusion rates, memberships independent across steps: fixed-size "
            "batches drawn without replacement independently at each step"
        ]
    if flags["fixed"]:
        return "unknown", [
            "fixed batch sizes but examples are not used once per epoch (no repeats in a batch) "
            "and the last batch of an epoch is smaller: a fixed-size sampler no registered "
            "sampler matches"
        ]
    binomial = tests["binomial_sizes"].holds
    if flags["once"]:
        if binomial:
            return "balls_and_bins", [
                "random Binomial batch sizes with every example once per epoch: "
                "balls-and-bins (each example's step drawn uniformly every epoch)"
            ]
        return "unknown", [
            "random batch sizes that are not Binomial(n, q), with every example once per epoch"
        ]
    if binomial:
        return "poisson", [
            "random Binomial(n, q) batch sizes, examples not once per epoch, no repeats within "
            "a batch, equal inclusion rates: Poisson sampling"
        ]
    return "unknown", [
        "random batch sizes that are not Binomial(n, q) (e.g. truncated or capped batches): "
        "no registered sampler matches these draws"
    ]


def _powers_reached(tests: Sequence[LoaderTest]) -> tuple[str, ...]:
    return tuple(
        t.name
        for t in tests
        if t.holds is not None and t.power is not None and t.power < TARGET_POWER
    )


def _run_tests(
    epochs: list[list[np.ndarray]], n: int, labels: np.ndarray | None = None
) -> tuple[list[LoaderTest], dict[str, bool], float, tuple[float, float], InclusionRates]:
    for e in epochs:
        for b in e:
            if b.size and (b.min() < 0 or b.max() >= n):
                raise ValueError(
                    f"loader: an index {int(b.min()) if b.min() < 0 else int(b.max())} is outside "
                    f"0..n-1 (n = {n}); pass n= the size of the data set the loader draws from"
                )
    fixed_test, fixed = _fixed_sizes(epochs, n)
    sizes_test, q, interval = _binomial_sizes(epochs, n, not fixed)
    once_test, once = _once_per_epoch(epochs, n, q)
    order_test, same, identity = _same_order(epochs, n, once)
    repl_test, replacement = _with_replacement(epochs, n)
    weight_test, weighted = _weighted(epochs, n, once, replacement, q, fixed)
    rates, class_test, class_unequal = _inclusion_rates(epochs, n, None if once else labels,
                                                        interval)
    shuffled = bool(once and not same and len(epochs) > 1)
    pair_test, dependent = _independence(epochs, n, not (once and same), not once)
    position_test, positions = _positions(epochs, n, shuffled)
    reuse_test, reused = _reused_order(epochs, shuffled)
    strat_test, stratified = _stratified(epochs, n, labels, bool(shuffled and fixed))
    tests = [fixed_test, sizes_test, once_test, order_test, repl_test, weight_test, class_test,
             pair_test, position_test, reuse_test, strat_test]
    size = epochs[0][0].size if epochs[0] else 0
    drops = bool(
        fixed
        and not once
        and size
        and n % size
        and all(
            sum(b.size for b in e) == n - n % size
            and np.unique(np.concatenate(e)).size == n - n % size
            for e in epochs
        )
    )
    # every epoch the same batches, in the same order, when they are not a fixed partition
    # (that is deterministic or persistent_shuffle): an exact observation
    repeated = bool(
        len(epochs) > 1 and not (fixed and once)
        and sum(b.size for b in epochs[0])
        and all(len(e) == len(epochs[0]) and all(np.array_equal(x, y) for x, y in
                                                  zip(e, epochs[0], strict=True))
                for e in epochs[1:])
    )
    all_full = bool(fixed and all(b.size == size for e in epochs for b in e))
    flags = {"fixed": fixed, "once": once, "all_full": all_full, "same": same, "identity": identity,
             "replacement": replacement, "weighted": weighted or class_unequal,
             "class_rates": class_unequal, "stratified": stratified, "drops": drops,
             "dependent": dependent, "positions": positions, "reused": reused,
             "repeated": repeated}
    return tests, flags, q, interval, rates


def _needed(tests: Sequence[LoaderTest], flags: dict[str, bool] | None = None,
            rates: InclusionRates | None = None) -> bool:
    """Whether a test that matters for the identification is still below the target power, or
    (random sizes, not once per epoch) the worst rate's upper bound is more than
    :data:`RATE_PRECISION` above the mean rate."""
    if _powers_reached(tests):
        return True
    return bool(flags is not None and rates is not None and not flags["once"]
                and not flags["replacement"] and not flags["weighted"] and rates.mean > 0
                and rates.worst_upper > (1 + RATE_PRECISION) * rates.mean)


def _inspection_epochs(inspection_epochs: int | None, epochs: int | None) -> int | None:
    """``inspection_epochs``, or the deprecated ``epochs=`` with its warning; checked >= 1."""
    if epochs is not None:
        if inspection_epochs is not None:
            raise ValueError(
                "inspect_loader: pass inspection_epochs= (epochs=, its deprecated spelling, "
                f"not both); got inspection_epochs={inspection_epochs!r}, epochs={epochs!r}"
            )
        warnings.warn(
            "inspect_loader(epochs=...) is deprecated: it means the epochs of batches drawn for "
            "the inspection, not the training's (training_epochs=); pass "
            f"inspection_epochs={epochs!r}",
            DeprecationWarning, stacklevel=3,
        )
        inspection_epochs = epochs
    if inspection_epochs is None:
        return None
    return check_int("inspection_epochs", inspection_epochs, minimum=1)


def inspect_loader(
    loader: Any,
    *,
    inspection_epochs: int | None = None,
    n: int | None = None,
    accountant: AccountantAssumptions | None = None,
    privacy_engine: Any = None,
    optimizer: Any = None,
    noise_multiplier: float | None = None,
    training_epochs: int | None = None,
    delta: float | None = None,
    epochs: int | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
) -> LoaderInspection:
    """Identify the batch sampler of a deployed loader and check it against the accountant.

    Args:
        loader: a torch ``DataLoader`` (as given to training, or as ``make_private`` returned
            it), or a batch sampler (an iterable of index lists, re-iterable once per epoch).
        inspection_epochs: epochs of batches to draw from the loader for the tests (not the
            training's epochs: those are ``training_epochs``); None draws until every
            applicable test has power >= 0.99.
        n: the number of examples (default: ``len(loader.dataset)`` or the sampler's).
        accountant: the accountant's assumptions; or give ``privacy_engine``/``optimizer``
            (Opacus: read with :func:`audit.deployed.claims.opacus_assumptions`).
        noise_multiplier: sigma of the training, for the theory bracket (default: from the
            accountant's assumptions).
        training_epochs: E, the training's epochs, for the bracket (default: likewise).
        delta: the training's delta, for the bracket (default: likewise).
        epochs: deprecated spelling of ``inspection_epochs`` (a DeprecationWarning: it read as
            the training's epochs).
        labels: the class label of each of the n examples (default: read from the loader's
            dataset, :func:`read_labels`; None when it has none): the ``class_rates`` and
            ``stratified_batches`` tests use them.

    Returns:
        :class:`LoaderInspection` (module docstring).

    Raises:
        ValueError: one line naming what is wrong (a loader that is not one, an index outside
            0..n-1, an empty epoch, a bad ``inspection_epochs``; both it and ``epochs``).
    """
    epochs = _inspection_epochs(inspection_epochs, epochs)
    if n is None:
        n = loader_size(loader)
        if n is None:
            raise ValueError("loader: cannot tell how many examples it draws from; pass n=")
    n = check_int("n", n, minimum=1)
    if accountant is None and (privacy_engine is not None or optimizer is not None):
        accountant = opacus_assumptions(
            privacy_engine=privacy_engine,
            optimizer=optimizer,
            loader=loader,
            epochs=training_epochs,
            delta=delta,
        )
    label_array = _check_labels(labels, n) if labels is not None else read_labels(loader, n)
    drawn = draw_epochs(loader, epochs or MIN_EPOCHS)
    tests, flags, q, interval, rates = _run_tests(drawn, n, label_array)
    typed = _by_type(loader)
    # the type states its rate (Opacus's sample_rate): no epochs drawn to bound the worst rate
    rated = typed is not None and typed.sample_rate is not None
    if epochs is None:
        while _needed(tests, flags, None if rated else rates) and len(drawn) < MAX_EPOCHS:
            indices = sum(b.size for e in drawn for b in e)
            if indices * 2 > MAX_INDICES:
                break
            drawn += draw_epochs(loader, min(len(drawn), MAX_EPOCHS - len(drawn)))  # double
            tests, flags, q, interval, rates = _run_tests(drawn, n, label_array)
    sampler, reasons = _identify({t.name: t for t in tests}, flags)
    checked = sum(t.holds is not None for t in tests)  # the tests that applied
    if typed is not None and typed.sampler == "unknown":
        sampler, reasons = "unknown", [typed.detail, *reasons]
    elif typed is not None and typed.sampler != sampler:
        reasons = [f"the type says {typed.sampler} ({typed.detail}) but the draws are "
                   f"{sampler}: the type's law is not what it draws", *reasons]
        sampler = "unknown"
    elif (typed is not None and typed.sample_rate is not None
          and not interval[0] <= typed.sample_rate <= interval[1]):
        reasons = [f"the sampler's sample_rate = {typed.sample_rate:g} is outside the draws' "
                   f"q interval [{interval[0]:.6g}, {interval[1]:.6g}]", *reasons]
        sampler = "unknown"
    if sampler == "unknown":
        identification = Identification(
            "type" if typed else "draws", typed.type_name if typed else None, "unknown", None,
            reasons[0])
    elif typed is not None:
        identification = typed
        reasons.append(f"identified by type: {typed.detail}; the draws agree")
    else:
        identification = Identification(
            "draws", type(_batch_source(loader)).__qualname__, None, None,
            f"consistent with {sampler} on {checked} tests; "
            "the draws cannot prove a sampler")
    batches = sum(len(e) for e in drawn)
    steps = batches / len(drawn)
    sizes = [b.size for e in drawn for b in e]
    b = float(max(set(sizes), key=sizes.count)) if flags["fixed"] else float(np.mean(sizes))
    q_implied = 1.0 / steps if flags["fixed"] and flags["once"] else q
    counts = np.bincount(np.concatenate([x for e in drawn for x in e]), minlength=n)
    max_rate = float(counts.max()) / batches  # the most drawn example's inclusions per step
    matches, mismatches, notes = _compare(sampler, accountant, q, interval, b, flags, max_rate)
    worst: InclusionRates | None = None
    if identification.sample_rate is not None:
        q_range = (identification.sample_rate, identification.sample_rate)
    elif (sampler != "unknown" and _independent_steps(sampler)) or (
            sampler == "unknown" and not flags["once"]):
        # by draws: the worst example's rate decides (InclusionRates)
        worst = rates
        q_range = (rates.worst_lower, rates.worst_upper)
    else:
        q_range = interval  # balls_and_bins: every example once per epoch, rate 1/T each
    theory = _bracket(
        sampler, accountant, n, steps, b, q_range, noise_multiplier, training_epochs, delta,
        identification.how, checked, worst if sampler != "unknown" else None,
    )
    return LoaderInspection(
        sampler=sampler,
        n=n,
        epochs=len(drawn),
        batches=batches,
        steps_per_epoch=steps,
        batch_size=b,
        sampling_probability=q_implied,
        q_interval=None if flags["fixed"] else interval,
        tests=tuple(tests),
        reasons=tuple(reasons),
        accountant=accountant,
        matches_accountant=matches,
        mismatches=tuple(mismatches),
        notes=tuple(notes),
        theory=theory,
        underpowered=_powers_reached(tests),
        identification=identification,
        rates=worst,
    )


def _check_labels(labels: Sequence[int] | np.ndarray, n: int) -> np.ndarray | None:
    """``labels`` as an integer array of length n (a clear error otherwise); None when they
    hold fewer than two classes."""
    try:
        array = np.asarray(labels.tolist() if hasattr(labels, "tolist") else list(labels))
    except TypeError:
        raise ValueError(f"labels: not a sequence of class labels ({str(labels)[:60]})") from None
    if array.ndim != 1 or array.size != n:
        raise ValueError(f"labels: one class label per example is needed (n = {n}); got shape "
                         f"{array.shape}")
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.bool_)):
        raise ValueError(f"labels: integer class labels are needed; got dtype {array.dtype}")
    return array.astype(np.int64) if np.unique(array).size >= 2 else None


def _compare(
    sampler: str, accountant: AccountantAssumptions | None, q: float, interval: tuple[float, float],
    b: float, flags: dict[str, bool], max_rate: float,
) -> tuple[bool | None, list[str], list[str]]:
    """(matches, mismatches that change what the claim is about, notes that do not)."""
    if accountant is None:
        return None, [], []
    out, notes = [], []
    if flags.get("repeated"):
        out.append(REPEATED_MISMATCH)  # the actionable fact first
    if sampler != accountant.sampler:
        out.append(
            f"the accountant assumes {accountant.sampler} sampling; the loader is {sampler}"
            + (
                " (make_private(poisson_sampling=False) keeps this loader and still accounts it "
                "as Poisson)"
                if accountant.poisson_sampling is False
                else ""
            )
        )
    if accountant.sample_rate is not None and sampler == accountant.sampler and not flags["fixed"]:
        lo, hi = interval
        if not lo <= accountant.sample_rate <= hi:
            out.append(
                f"the accountant's sample_rate = {accountant.sample_rate:.6g} is outside the "
                "loader's "
                f"q interval [{lo:.6g}, {hi:.6g}] (q = {q:.6g} estimated)"
            )
    if accountant.sample_rate is not None and flags["weighted"]:
        out.append(
            f"the accountant's sample_rate = {accountant.sample_rate:.6g} is the same for every "
            "example; "
            "the loader's rates differ between examples: the most drawn example was in "
            f"{max_rate:.4g} of "
            f"the batches ({max_rate / accountant.sample_rate:.3g}x the sample_rate)"
        )
    if accountant.expected_batch_size is not None and abs(accountant.expected_batch_size - b) > max(
        1e-9, 0.05 * b
    ):
        notes.append(
            f"the noisy sum is divided by {accountant.expected_batch_size:g} but the batches hold "
            f"{b:.4g} examples on average: a constant divisor rescales the step, not the privacy"
        )
    return not out, out, notes



def _independent_steps(sampler: str) -> bool:
    """Whether a registered sampler draws each step's batch independently (Poisson, fixed-size
    batches without replacement): its examples' rates, not an epoch's order, set the bracket."""
    from audit.sampling import get_sampler

    return get_sampler(sampler).canary_law == "independent_steps"

def _bracket(
    sampler: str,
    accountant: AccountantAssumptions | None,
    n: int,
    steps: float,
    b: float,
    q_range: tuple[float, float],
    sigma: float | None,
    epochs: int | None,
    delta: float | None,
    how: str = "draws",
    checked: int = 0,
    rates: InclusionRates | None = None,
) -> TheoryBracket | None:
    """The identified sampler's bounds at the training's sigma and length (module docstring).

    Fixed-size samplers: b the common size, T the batches per epoch. Poisson: T the batches per
    epoch; the upper bound at the upper end of ``q_range`` and the lower bound at its lower end
    (by type: q read from the sampler, a point; by draws, ``rates`` given: the upper confidence
    bound of the most drawn example's rate and a lower bound of the largest rate,
    :class:`InclusionRates`: the worst example's rate decides, never the mean rate).
    ``sampled_without_replacement``: b the common size, q = b / n; its bracket from
    :func:`audit.theory.sampled_without_replacement.sampled_without_replacement_epsilon_at`
    (upper and lower, zero-out adjacency, adversarial) at T E steps (by draws: the upper end at
    n' = floor(b / q_up), q_up the worst rate's upper bound, the lower end at the loader's n).
    The verdict ``"yes"`` (a guarantee) needs the sampler identified by type; by draws the
    verdict is ``"consistent"`` at best: consistent on the tests, not a guarantee.
    """
    a = accountant or AccountantAssumptions()
    sigma = sigma if sigma is not None else a.noise_multiplier
    epochs = epochs if epochs is not None else a.epochs
    delta = delta if delta is not None else (a.delta if a.delta is not None else None)
    if sigma is None or epochs is None or delta is None:
        return None
    sigma = check_real("noise_multiplier", sigma, minimum=0.0, strict_minimum=True)
    epochs = check_int("training_epochs", epochs, minimum=1)
    delta = check_real(
        "delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    t = max(1, round(steps))
    if sampler == "unknown":
        return TheoryBracket(
            sampler, sigma, t, epochs, delta, None, None, a.epsilon, "not shown",
            ("no proven bound for an unidentified sampler: the accountant's epsilon is no "
             "guarantee for this loader",),
        )
    from audit.core.mechanism import Mechanism
    from audit.sampling import get_sampler
    from audit.stats.binary import curve_epsilon
    from audit.theory import bounds_for

    notes: list[str] = []
    if sampler == WOR:
        upper, lower, wor_notes = _wor_bracket(n, b, t * epochs, sigma, delta, q_range, how)
        notes += wor_notes
    elif get_sampler(sampler).fixed_size:
        size = round(b)
        mech = Mechanism(sampler=sampler, sigma=sigma, steps_per_epoch=t, epochs=epochs,
                         threat_model="adversarial", n=size * t, batch_size=size)
        if size * t != n:
            notes.append(f"the loader's n = {n} is not b T = {size * t} (a smaller last batch); "
                         "the bounds are for n = b T")
        bounds = bounds_for(mech)
        upper = curve_epsilon(bounds.upper, delta)
        lower = curve_epsilon(bounds.lower, delta)
        notes += list(getattr(bounds, "notes", ()) or ())
    else:
        # q = k / 10^6: the rate to 6 decimals, rounded outwards (the theory depends on q and
        # the steps only)
        grid = 10**6
        lo_q, hi_q = q_range
        ends = []
        for q_end, rounding in ((hi_q, math.ceil), (lo_q, math.floor)):
            mech = Mechanism(sampler=sampler, sigma=sigma, steps_per_epoch=t, epochs=epochs,
                             threat_model="adversarial", n=grid,
                             batch_size=min(grid, max(1, rounding(q_end * grid - 1e-9))))
            ends.append((mech, bounds_for(mech)))
            if lo_q == hi_q:
                break
        (mech_hi, bounds_hi), (mech_lo, bounds_lo) = ends[0], ends[-1]
        upper = curve_epsilon(bounds_hi.upper, delta)
        lower = curve_epsilon(bounds_lo.lower, delta)
        if lo_q == hi_q:
            notes.append(f"q = {mech_hi.sampling_probability:.6g} (read from the sampler's type)")
        elif rates is not None:
            notes.append(f"q in [{mech_lo.sampling_probability:.6g}, "
                         f"{mech_hi.sampling_probability:.6g}]: {rates.describe()}")
        else:
            notes.append(
                f"q in [{mech_lo.sampling_probability:.6g}, {mech_hi.sampling_probability:.6g}] "
                f"(the {100 * (1 - ALPHA):g}% Clopper-Pearson interval of the draws): upper "
                "bound at its upper end, lower bound at its lower end")
        notes += list(getattr(bounds_hi, "notes", ()) or ())
    eps = a.epsilon
    if eps is None:
        verdict = "not shown"
    elif how != "type":
        verdict = "consistent"
    elif upper is not None and eps >= upper:
        verdict = "yes"
    elif lower is not None and eps < lower:
        verdict = "refuted"
    else:
        verdict = "not shown"
    if how != "type":
        notes.append(f"sampler identified only by its draws: consistent with {sampler} on "
                     f"{checked} tests, which prove nothing when they do not reject")
    return TheoryBracket(sampler, sigma, t, epochs, delta, lower, upper, eps, verdict, tuple(notes))


def _wor_bracket(
    n: int, b: float, steps: int, sigma: float, delta: float, q_range: tuple[float, float],
    how: str,
) -> tuple[float | None, float | None, list[str]]:
    """(upper, lower, notes) of ``sampled_without_replacement`` (:func:`_bracket`)."""
    try:
        from audit.theory.sampled_without_replacement import (
            sampled_without_replacement_epsilon_at,
        )
    except ImportError:  # pragma: no cover - an older audit.theory
        return None, None, [
            "no bound: this version of audit.theory has no sampled_without_replacement theory"
        ]
    from audit.core.mechanism import Mechanism

    size = round(b)
    n_up = n
    if how != "type" and q_range[1] > size / n:
        n_up = max(size, math.floor(size / q_range[1]))  # q = b / n' at the worst rate's bound

    def mechanism(population: int) -> Mechanism:
        return Mechanism(sampler=WOR, sigma=sigma, steps_per_epoch=steps, epochs=1,
                         threat_model="adversarial", n=population, batch_size=size)

    upper = float(sampled_without_replacement_epsilon_at(mechanism(n_up), delta, "upper"))
    lower = float(sampled_without_replacement_epsilon_at(mechanism(n), delta, "lower"))
    notes = [f"sampled without replacement: b = {size}, n = {n}, q = b/n = {size / n:.6g}, "
             f"{steps} steps"]
    if n_up != n:
        notes.append(f"upper bound at n' = {n_up} (q = {size / n_up:.6g}, at or above the upper "
                     "confidence bound of the most drawn example's rate): the worst example's "
                     "rate decides; lower bound at the loader's n (the mean rate b/n is at most "
                     "the largest rate)")
    return upper, lower, notes
