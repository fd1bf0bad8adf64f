"""Benchmark: how much each sound strategy proves from the same trials (issue 22, item 1).

Per regime and per threshold strategy, the distribution over seeds of the sound eps lower
bound at delta = 1e-5, confidence 95%: median, 10th percentile and minimum (docs/design.md
§3.8: a random quantity is a distribution over seeds), beside the ceiling, the theory's eps
at delta (lower: achieved by a known attack; upper: the guarantee).

Regimes (the mechanism simulator, :mod:`audit.training.simulate`, and the sampler's default attack,
the exact likelihood ratio on all iterates):

- ``poisson``: Poisson q = 0.01, sigma = 1, T = 100, isolated, 500,000 trials a side (1e6);
- ``poisson_2e6``: the same with 1e6 trials a side (2e6);
- ``deterministic``: deterministic batches, sigma = 1, T = 100, white box, 500 a side (1e3
  trainings);
- ``deterministic_k900``: the same 1e3 trainings, each with ``canaries_per_training = 900``
  Dirac canaries (docs/design.md §8.17: under deterministic batches the 900 observations of a
  training are independent, so 500 x 900 = 450,000 trials a side);
- ``dynamic_shuffle``: adversarial dynamic shuffling, sigma = 1, T = 100, 10,000 a side (2e4);
- ``one_run_1e3``, ``one_run_1e4``: one run with m = 1e3 / 1e4 Dirac canaries, deterministic,
  sigma = 1, T = 100 (each canary IN with probability 1/2; f-DP bound, §8.10).

One run also reports ``planned-gdp``: the eps at delta of the strongest mu-GDP claim the f-DP
recursion refutes with a rule planned from the theory (:mod:`audit.stats.one_run_gdp`): mu_lb is
sound for any mechanism; its eps is an estimate that assumes the implementation's curve is
exactly Gaussian, not a bound on eps (a footnote under the printed table says so).

Strategies: ``split``, ``multisplit``, ``bonferroni`` and ``planned`` (the rank planned from
the theory's lower curve before any score is drawn, :mod:`audit.stats.thresholds`); one run:
``bonferroni`` and ``split`` over guessing rules, and ``planned`` (a rule (k+, k-) fixed from
the theory, tested at alpha). The plan is made once per regime, before the seeds.

Run: ``python bench/tightness.py [--seeds 30] [--scale 1.0] [--only NAME ...] [--curve NAME ...]``;
``--scale`` multiplies every trial count (CPU is shared: 0.1 while developing); ``--curve``
draws a multi-run regime's scores from the theory's exact curve instead of simulating
(:func:`curve_law_scores`: the same law for every rank statistic here, about 100 times
cheaper; the README table says which rows used it).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.run.planning import curve_scores
from audit.sampling.base import canaries_independent
from audit.stats.binary import (
    _sound_choice,
    curve_epsilon,
    epsilon_from_rates,
    threshold_strategy,
)
from audit.stats.one_run import one_run_epsilon_lb
from audit.stats.one_run_gdp import one_run_gdp_lower_bound, plan_gdp_guesses
from audit.stats.thresholds import plan_guesses, plan_threshold, planned_epsilon_lower_bound
from audit.theory import bounds_for
from audit.theory.curve import gdp_epsilon
from audit.training.simulate import simulate_observations

DELTA = 1e-5
ALPHA = 0.05
"""1 - confidence: the per-test building blocks (plans, planned tests) take it as alpha; the
bounds take ``confidence=1 - ALPHA`` (exactly 0.95, so the same bits)."""
CHUNK = 50_000
"""Trials simulated and scored at once (memory: CHUNK x T x 4 bytes per side)."""

MULTI_STRATEGIES = ("split", "multisplit", "bonferroni", "planned")
ONE_RUN_STRATEGIES = ("bonferroni", "split", "planned", "planned-gdp")
"""``planned-gdp``: eps of mu_lb-GDP at delta (an estimate assuming a Gaussian curve; no bound)."""


@dataclass(frozen=True)
class Regime:
    """One row group of the table: a mechanism, trials a side (multi-run) or canaries (one run)."""

    name: str
    mechanism: Mechanism
    trials: int
    one_run: bool = False
    canaries_per_training: int = 1
    """k independent canaries per training (multi-run): trials a side = trials x k."""


def regimes(scale: float) -> list[Regime]:
    """The regimes of the module docstring, trial counts multiplied by ``scale``."""
    def n(value: int) -> int:
        return max(20, round(value * scale))

    poisson = Mechanism(sampler="poisson", sigma=1.0, steps_per_epoch=100, threat_model="isolated")
    deterministic = Mechanism(
        sampler="deterministic", sigma=1.0, steps_per_epoch=100, threat_model="isolated"
    )
    shuffle = Mechanism(
        sampler="dynamic_shuffle", sigma=1.0, steps_per_epoch=100, threat_model="adversarial"
    )
    return [
        Regime("poisson", poisson, n(500_000)),
        Regime("poisson_2e6", poisson, n(1_000_000)),
        Regime("deterministic", deterministic, n(500)),
        Regime("deterministic_k900", deterministic, n(500), canaries_per_training=900),
        Regime("dynamic_shuffle", shuffle, n(10_000)),
        Regime("one_run_1e3", deterministic, n(1_000), one_run=True),
        Regime("one_run_1e4", deterministic, n(10_000), one_run=True),
    ]


def curve_law_scores(
    mechanism: Mechanism, n_in: int, n_out: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Scores with exactly the theory's lower curve (:func:`audit.run.planning.curve_scores`): every
    threshold's error counts jointly as those of the exact likelihood-ratio attack, whose curve
    the lower curve is (Poisson, isolated: lower and upper agree to 2e-6 in eps). Every
    statistic here depends on the scores through their ranks only, so this is the simulated
    attack's law at a hundredth of the cost (100 steps per trial are not drawn)."""
    lower = bounds_for(mechanism).lower
    n = max(n_in, n_out)
    scores_in, scores_out = curve_scores(lower, n, np.random.default_rng([seed, 22]))
    return scores_in[:n_in], scores_out[:n_out]


def simulated_scores(
    mechanism: Mechanism, n_in: int, n_out: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the default attack on ``n_in`` IN and ``n_out`` OUT simulated trials, in chunks."""
    attack = get_attack(default_attack(mechanism, "all_iterates"))
    rng = np.random.default_rng([seed, 22])
    parts_in, parts_out = [], []
    left_in, left_out = n_in, n_out
    while left_in > 0 or left_out > 0:
        k = max(min(CHUNK, max(left_in, left_out)), 1)
        observations = simulate_observations(mechanism, k, rng)
        s_in, s_out = attack.scores(observations)
        parts_in.append(np.asarray(s_in)[: max(left_in, 0)])
        parts_out.append(np.asarray(s_out)[: max(left_out, 0)])
        left_in, left_out = left_in - k, left_out - k
    return np.concatenate(parts_in), np.concatenate(parts_out)


def multi_run_bounds(regime: Regime, seeds: int, source: str) -> tuple[dict[str, list[float]], str]:
    """eps_lb per strategy and seed (the optimistic maximum is not computed: not a bound)."""
    lower = bounds_for(regime.mechanism).lower
    if regime.canaries_per_training > 1 and not canaries_independent(regime.mechanism.sampler):
        raise ValueError(f"{regime.name}: the sampler's canaries are not independent (§8.17)")
    n = regime.trials * regime.canaries_per_training  # independent canaries: each a trial
    plan = plan_threshold(lower, n, n, alpha=ALPHA, delta=DELTA, source="theory")

    def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
        return epsilon_from_rates(fpr_hi, fnr_hi, DELTA)

    out: dict[str, list[float]] = {s: [] for s in MULTI_STRATEGIES}
    for seed in range(seeds):
        draw = simulated_scores if source == "simulate" else curve_law_scores
        scores_in, scores_out = draw(regime.mechanism, n, n, seed)
        for strategy in MULTI_STRATEGIES:
            if threshold_strategy(strategy).needs_plan:  # the plan's joint test
                bound, _ = planned_epsilon_lower_bound(
                    scores_in,
                    scores_out,
                    plan,
                    delta=DELTA,
                    alpha=ALPHA,
                    seed=seed,
                    optimistic=False,
                )
                out[strategy].append(bound.epsilon_lb)
                continue
            chosen = _sound_choice(
                scores_in,
                scores_out,
                alpha=ALPHA,
                threshold=strategy,
                seed=seed,
                grid_size=40,
                objective=objective,
            )
            out[strategy].append(chosen.value)
    return out, plan.describe()


def one_run_bounds(regime: Regime, seeds: int) -> tuple[dict[str, list[float]], str]:
    """One-run eps_lb per guessing strategy and seed: m canaries, each IN with probability 1/2."""
    m = regime.trials
    lower = bounds_for(regime.mechanism).lower
    plan = plan_guesses(lower, m, delta=DELTA, alpha=ALPHA)
    gdp_plan = plan_gdp_guesses(lower, m, alpha=ALPHA)
    out: dict[str, list[float]] = {s: [] for s in ONE_RUN_STRATEGIES}
    for seed in range(seeds):
        included = np.random.default_rng([seed, 23]).random(m) < 0.5
        n_in = int(included.sum())
        scores_in, scores_out = simulated_scores(regime.mechanism, n_in, m - n_in, seed)
        scores = np.empty(m)
        scores[included], scores[~included] = scores_in, scores_out
        gdp = one_run_gdp_lower_bound(
            scores, included, confidence=1 - ALPHA, guesses=(gdp_plan.k_plus, gdp_plan.k_minus)
        )
        out["planned-gdp"].append(float(gdp_epsilon(DELTA, gdp.mu_lb)) if gdp.mu_lb > 0 else 0.0)
        for strategy in ONE_RUN_STRATEGIES[:-1]:
            guesses = (plan.k_plus, plan.k_minus) if strategy == "planned" else strategy
            bound = one_run_epsilon_lb(
                scores, included, delta=DELTA, confidence=1 - ALPHA, guesses=guesses, seed=seed
            )
            out[strategy].append(bound.epsilon_lb)
    return (
        out,
        f"planned rule (k+, k-) = ({plan.k_plus}, {plan.k_minus}), expected "
        f"{plan.expected_epsilon_lb:.3f}; GDP rule ({gdp_plan.k_plus}, {gdp_plan.k_minus}), "
        f"expected mu_lb {gdp_plan.expected_mu_lb:.3f}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every trial count")
    parser.add_argument("--only", nargs="*", default=None, help="regime names")
    parser.add_argument(
        "--curve",
        nargs="*",
        default=[],
        help="multi-run regimes whose scores are drawn from "
        "the exact curve (curve_law_scores) instead of simulated",
    )
    args = parser.parse_args()
    rows = []
    print(f"delta = {DELTA:g}, alpha = {ALPHA:g}, {args.seeds} seeds, scale {args.scale:g}")
    for regime in regimes(args.scale):
        if args.only and regime.name not in args.only:
            continue
        start = time.perf_counter()
        bounds = bounds_for(regime.mechanism)
        lower_eps, upper_eps = (
            curve_epsilon(bounds.lower, DELTA),
            curve_epsilon(bounds.upper, DELTA),
        )
        if regime.one_run:
            values, note = one_run_bounds(regime, args.seeds)
            size = f"m = {regime.trials}"
        else:
            source = "curve" if regime.name in args.curve else "simulate"
            values, note = multi_run_bounds(regime, args.seeds, source)
            k = regime.canaries_per_training
            per = f" x {k} canaries" if k > 1 else ""
            size = f"{regime.trials}{per} a side ({source})"
        for strategy, v in values.items():
            a = np.asarray(v)
            rows.append(
                (
                    regime.name,
                    size,
                    strategy,
                    np.median(a),
                    np.percentile(a, 10),
                    a.min(),
                    lower_eps,
                    upper_eps,
                )
            )
            print(
                f"  {regime.name:16s} {size:16s} {strategy:11s} median {np.median(a):.3f}  p10 "
                f"{np.percentile(a, 10):.3f}  min {a.min():.3f}   theory {lower_eps:.3f} - "
                f"{upper_eps:.3f}",
                flush=True,
            )
        print(f"  ({regime.name}: {note}; {time.perf_counter() - start:.0f} s)", flush=True)
    print()
    print(
        "| regime | trials | strategy | median eps_lb | 10th pct | min | theory eps (lower - "
        "upper) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, size, strategy, med, p10, low, lo_eps, up_eps in rows:
        print(
            f"| {name} | {size} | {strategy} | {med:.3f} | {p10:.3f} | {low:.3f} | {lo_eps:.3f} - "
            f"{up_eps:.3f} |"
        )
    if any(strategy == "planned-gdp" for _, _, strategy, *_ in rows):
        print(
            "\nplanned-gdp: eps at delta of the strongest mu-GDP claim refuted (mu_lb sound); an "
            "estimate that assumes the implementation's curve is exactly Gaussian, NOT a bound "
            "on eps (docs/design.md §8.19)"
        )


if __name__ == "__main__":
    main()
