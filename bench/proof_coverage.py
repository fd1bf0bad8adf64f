"""Benchmark: coverage of every sound statement (issue 22, 'Done when'): how often a bound lies
above the truth, per strategy and regime, over >= 500 repetitions.

Scores whose trade-off curve is exactly a known curve C (:func:`audit.run.planning.curve_scores`:
every threshold's error counts are those of an attack attaining C), so the truth is exact:
eps* = curve_epsilon(C, delta). A bound "fails" when eps_lb > eps*; a verdict fails when it
calls the true curve C violated. Each must fail in at most a fraction alpha of repetitions; the
table gives the failure count, its frequency, and the largest count that is consistent with a
failure probability of alpha, binom.ppf(1 - 1e-3, reps, alpha) (a sound statement exceeds it
with probability <= 1e-3).

Regimes: ``rr_1``, ``rr_half``: the (eps0, 0)-DP curve f(x) = max(0, 1 - e^eps0 x,
e^-eps0 (1 - x)) with eps0 = 1 (1000 trials a side) and 0.5 (5,000 a side): every test on the
linear part has TPR = e^eps0 FPR exactly, so the bounds sit near the truth and coverage is
tested where it is tight; ``gdp``: mu = 1 (500 a side, the deterministic regime); ``poisson``:
the Poisson lower curve (q = 0.01, sigma = 1, T = 100; 5,000 a side).

Strategies: ``split``, ``multisplit``, ``bonferroni``, ``planned`` (planned from the true curve,
the most aggressive plan), ``band`` (the whole-curve band's eps, :mod:`audit.stats.curve_evidence`),
``verdict:planned`` and ``verdict:band`` (the claim = the true curve).

Run: ``python bench/proof_coverage.py [--reps 500] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.stats import binom

from audit.core.mechanism import Mechanism
from audit.run.planning import curve_scores
from audit.stats.binary import (
    STRATEGY_TYPES,
    _sound_choice,
    curve_epsilon,
    epsilon_from_rates,
)
from audit.stats.curve_evidence import NoEvidence, curve_verdict
from audit.stats.thresholds import plan_threshold, planned_epsilon_lower_bound, planned_verdict
from audit.theory import bounds_for
from audit.theory.curve import TradeOffCurve

DELTA = 1e-5
ALPHA = 0.05
STRATEGIES = (
    "split",
    "multisplit",
    "bonferroni",
    "planned",
    "band",
    "verdict:planned",
    "verdict:band",
)


def pure_dp_curve(eps0: float) -> TradeOffCurve:
    """The (eps0, 0)-DP trade-off curve (randomised response's), as a guarantee-shaped curve."""
    return TradeOffCurve.from_privacy_profile(
        [eps0],
        [0.0],
        sampler="poisson",
        threat_model="isolated",
        kind="upper",
        method=f"({eps0:g}, 0)-DP",
    )


def regimes() -> dict[str, tuple[object, int]]:
    poisson = bounds_for(
        Mechanism(sampler="poisson", sigma=1.0, steps_per_epoch=100, threat_model="isolated")
    ).lower
    return {
        "rr_1": (pure_dp_curve(1.0), 1000),
        "rr_half": (pure_dp_curve(0.5), 5_000),
        "gdp": (
            TradeOffCurve.from_gdp(
                1.0, sampler="deterministic", threat_model="isolated", kind="exact"
            ),
            500,
        ),
        "poisson": (poisson, 5_000),
    }


def failures(curve, n: int, reps: int, strategies: tuple[str, ...]) -> dict[str, int]:
    """Per strategy, the repetitions whose statement is false (module docstring)."""
    truth = curve_epsilon(curve, DELTA)
    eps_plan = plan_threshold(curve, n, n, alpha=ALPHA, delta=DELTA, source="given")
    claim_plan = plan_threshold(curve, n, n, alpha=ALPHA, claim=curve, source="given")

    def objective(fpr_hi, fnr_hi):
        return epsilon_from_rates(fpr_hi, fnr_hi, DELTA)

    out = dict.fromkeys(strategies, 0)
    for r in range(reps):
        scores_in, scores_out = curve_scores(curve, n, np.random.default_rng([2022, r]))
        for strategy in strategies:
            if strategy in STRATEGY_TYPES and not STRATEGY_TYPES[strategy].needs_plan:
                value = _sound_choice(
                    scores_in,
                    scores_out,
                    alpha=ALPHA,
                    threshold=strategy,
                    seed=r,
                    grid_size=40,
                    objective=objective,
                ).value
                out[strategy] += value > truth
            elif strategy in STRATEGY_TYPES:  # planned: the plan's joint test
                bound, _ = planned_epsilon_lower_bound(
                    scores_in,
                    scores_out,
                    eps_plan,
                    delta=DELTA,
                    alpha=ALPHA,
                    seed=r,
                    optimistic=False,
                )
                out[strategy] += bound.epsilon_lb > truth
            elif strategy == "verdict:planned":
                out[strategy] += planned_verdict(
                    scores_in, scores_out, curve, claim_plan, alpha=ALPHA, seed=r
                )[0].violated
            else:
                try:
                    result = curve_verdict(scores_in, scores_out, curve, ALPHA, delta=DELTA)
                except NoEvidence:
                    continue  # no statement, no failure
                out[strategy] += (
                    (result.epsilon_lb > truth) if strategy == "band" else result.violated
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    args = parser.parse_args()
    allowed = int(binom.ppf(1 - 1e-3, args.reps, ALPHA))
    print(
        f"alpha = {ALPHA}, delta = {DELTA:g}, {args.reps} repetitions; a sound statement fails at "
        "most "
        f"{allowed} times except with probability 1e-3"
    )
    print("| regime | trials a side | truth eps | strategy | failures | frequency |")
    print("|---|---|---|---|---|---|")
    for name, (curve, n) in regimes().items():
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        counts = failures(curve, n, args.reps, tuple(args.strategies))
        truth = curve_epsilon(curve, DELTA)
        for strategy, count in counts.items():
            flag = "" if count <= allowed else "  <-- above the tolerance"
            print(
                f"| {name} | {n} | {truth:.3f} | {strategy} | {count} | {count / args.reps:.3f} "
                f"|{flag}",
                flush=True,
            )
        print(f"  ({name}: {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
