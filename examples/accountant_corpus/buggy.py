"""Buggy accountants, each one realistic mistake on top of a correct computation.

Every function is an accountant as ``audit check-accountant`` takes it,
``(mechanism, delta) -> eps | Unsupported`` (docs/design.md §11), built from
dp_accounting's primitives the way an accountant's author would write it, with ONE bug, named
in its docstring. ``BUGS`` lists them with the relation their claims are checked under.
``run_corpus.py`` checks each on ``--grid thorough``; tests/test_accountant_corpus.py runs a
reduced version in CI.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

from audit.accounting.adapters import Unsupported, dp_accounting_pld, poisson_for_shuffle
from audit.core.mechanism import Mechanism

__all__ = ["BUGS"]


def _poisson_only(mechanism: Mechanism) -> Unsupported | None:
    if mechanism.sampler != "poisson":
        return Unsupported("this accountant handles Poisson sampling only")
    return None


@lru_cache(maxsize=256)
def _pld_eps(sigma: float, q: float, steps: int, delta: float, discretisation: float = 1e-4,
             pessimistic: bool = True) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pld = pld_lib.from_gaussian_mechanism(
            standard_deviation=sigma, sampling_prob=q, pessimistic_estimate=pessimistic,
            value_discretization_interval=discretisation, use_connect_dots=pessimistic,
        )
        if steps > 1:
            pld = pld.self_compose(steps)
    return float(pld.get_epsilon_for_delta(delta))


def _rdp(sigma: float, q: float, steps: int):  # type: ignore[no-untyped-def]
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512]
    return orders, [steps * r for r in rdp._compute_rdp_poisson_subsampled_gaussian(
        q, sigma, orders)]


# -- the bugs --------------------------------------------------------------------------


def sensitivity_doubled(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Noise taken as sigma * 2C: the author divides by the clipping norm twice (replace-one
    sensitivity 2C assumed in the noise, add/remove sensitivity C in the accounting)."""
    return _poisson_only(mechanism) or _pld_eps(
        2 * mechanism.sigma, mechanism.sampling_probability, mechanism.total_steps, delta)


def noise_five_percent_high(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """sigma taken 5% too large (the noise std read from a per-layer clipping norm that is
    not the total one)."""
    return _poisson_only(mechanism) or _pld_eps(
        1.05 * mechanism.sigma, mechanism.sampling_probability, mechanism.total_steps, delta)


def rdp_conversion_alpha(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """RDP to (eps, delta) with log(1/delta) / alpha instead of / (alpha - 1)."""
    if (bad := _poisson_only(mechanism)) is not None:
        return bad
    orders, rdps = _rdp(mechanism.sigma, mechanism.sampling_probability, mechanism.total_steps)
    return max(0.0, min(r + math.log(1 / delta) / a for a, r in zip(orders, rdps, strict=True)))


def epochs_as_steps(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Composes E times instead of T * E (the loop's counter is the epoch)."""
    return _poisson_only(mechanism) or _pld_eps(
        mechanism.sigma, mechanism.sampling_probability, mechanism.epochs, delta)


def wrong_n(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """q = b / n with n counting the validation split too (10% more examples)."""
    return _poisson_only(mechanism) or _pld_eps(
        mechanism.sigma, mechanism.sampling_probability / 1.1, mechanism.total_steps, delta)


def optimistic_discretisation(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """The optimistic PLD (losses rounded down) at discretisation 1e-3: each step's rounding
    adds up over the steps."""
    return _poisson_only(mechanism) or _pld_eps(
        mechanism.sigma, mechanism.sampling_probability, mechanism.total_steps, delta,
        discretisation=1e-3, pessimistic=False)


_STALE: dict[tuple[float, float, float], float] = {}


def stale_cache(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """A cache keyed by (sigma, q, delta) that forgets the step count."""
    if (bad := _poisson_only(mechanism)) is not None:
        return bad
    key = (mechanism.sigma, mechanism.sampling_probability, delta)
    if key not in _STALE:
        _STALE[key] = _pld_eps(mechanism.sigma, mechanism.sampling_probability,
                               mechanism.total_steps, delta)
    return _STALE[key]


def overflow_past_5000(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """A step counter held in a 16-bit-style buffer of 5000 slots: past 5000 steps the
    composition count wraps (steps mod 5000)."""
    if (bad := _poisson_only(mechanism)) is not None:
        return bad
    steps = mechanism.total_steps % 5000 if mechanism.total_steps > 5000 else mechanism.total_steps
    if steps == 0:
        return 0.0
    return _pld_eps(mechanism.sigma, mechanism.sampling_probability, steps, delta)


def nan_at_small_delta(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """log(1 - delta) computed in float32, then a 0/0 where delta < 1e-8: nan there, correct
    elsewhere."""
    if (bad := _poisson_only(mechanism)) is not None:
        return bad
    if delta < 1e-8:
        return math.nan
    return _pld_eps(mechanism.sigma, mechanism.sampling_probability, mechanism.total_steps, delta)


def shuffle_as_poisson(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Shuffled (and fixed-size, deterministic) batches accounted as Poisson with q = b/n."""
    return poisson_for_shuffle(mechanism, delta)


def under_report_0_3_percent(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """0.3% below the PLD (a conversion that rounds down)."""
    eps = dp_accounting_pld(mechanism, delta)
    return eps if isinstance(eps, Unsupported) else 0.997 * eps


def under_report_1_percent(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """1% below the PLD."""
    eps = dp_accounting_pld(mechanism, delta)
    return eps if isinstance(eps, Unsupported) else 0.99 * eps


class _Composer:
    """Keeps one accountant and composes every call's event into it (never reset)."""

    def __init__(self) -> None:
        self.accountant = None

    def __call__(self, mechanism: Mechanism, delta: float) -> float | Unsupported:
        if (bad := _poisson_only(mechanism)) is not None:
            return bad
        import dp_accounting
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        if self.accountant is None:
            self.accountant = rdp.RdpAccountant()
        event = dp_accounting.PoissonSampledDpEvent(
            mechanism.sampling_probability, dp_accounting.GaussianDpEvent(mechanism.sigma))
        self.accountant.compose(event, mechanism.total_steps)  # type: ignore[attr-defined]
        return float(self.accountant.get_epsilon(delta))  # type: ignore[attr-defined]


stateful_composer = _Composer()
stateful_composer.__name__ = "stateful_composer"  # type: ignore[attr-defined]
stateful_composer.__doc__ = _Composer.__doc__


def wrong_delta(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """eps evaluated at delta * n_epochs-style confusion: at 10 delta."""
    eps = dp_accounting_pld(mechanism, min(10 * delta, 0.5))
    return eps


def early_stopped_bisection(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """eps found by bisection on delta(eps) that returns the LOWER end of its last bracket,
    stopping at width 0.05."""
    if (bad := _poisson_only(mechanism)) is not None:
        return bad
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = pld_lib.from_gaussian_mechanism(
        standard_deviation=mechanism.sigma, sampling_prob=mechanism.sampling_probability,
        value_discretization_interval=1e-4)
    pld = pld.self_compose(mechanism.total_steps) if mechanism.total_steps > 1 else pld
    lo, hi = 0.0, 100.0
    while hi - lo > 0.05:
        mid = (lo + hi) / 2
        if pld.get_delta_for_epsilon(mid) > delta:
            lo = mid
        else:
            hi = mid
    return lo


def add_remove_for_replace_one(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """States replace-one claims but computes add/remove (the library default relation)."""
    return dp_accounting_pld(mechanism, delta)


add_remove_for_replace_one.adjacency = "replace_one"  # type: ignore[attr-defined]


def gdp_clt(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Opacus's GaussianAccountant (the CLT mu = q sqrt(T (e^{1/sigma^2} - 1)): an
    approximation reported as a guarantee."""
    from audit.accounting.adapters import opacus_gdp

    return opacus_gdp(mechanism, delta)


BUGS: tuple[tuple[str, object, str], ...] = (
    ("sensitivity_doubled", sensitivity_doubled, "zero_out"),
    ("noise_five_percent_high", noise_five_percent_high, "zero_out"),
    ("rdp_conversion_alpha", rdp_conversion_alpha, "zero_out"),
    ("epochs_as_steps", epochs_as_steps, "zero_out"),
    ("wrong_n", wrong_n, "zero_out"),
    ("optimistic_discretisation", optimistic_discretisation, "zero_out"),
    ("stale_cache", stale_cache, "zero_out"),
    ("overflow_past_5000", overflow_past_5000, "zero_out"),
    ("nan_at_small_delta", nan_at_small_delta, "zero_out"),
    ("shuffle_as_poisson", shuffle_as_poisson, "zero_out"),
    ("under_report_0_3_percent", under_report_0_3_percent, "zero_out"),
    ("under_report_1_percent", under_report_1_percent, "zero_out"),
    ("stateful_composer", stateful_composer, "zero_out"),
    ("wrong_delta", wrong_delta, "zero_out"),
    ("early_stopped_bisection", early_stopped_bisection, "zero_out"),
    ("add_remove_for_replace_one", add_remove_for_replace_one, "replace_one"),
    ("gdp_clt", gdp_clt, "zero_out"),
)
"""(name, accountant, the relation its claims are checked under)."""
