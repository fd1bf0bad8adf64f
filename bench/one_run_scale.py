"""Benchmark: one run at the papers' scale, m = 1e3 to 1e6 canaries (issue 44, items 1 and 2).

The idealised Gaussian setting of the one-run literature (Steinke, Nasr, Jagielski 2023;
Mahloujifar, Melis, Chaudhuri 2024): m canaries, each IN with probability 1/2 (independent
fair coins), the auditor sees one score per canary, N(mu, 1) if IN and N(0, 1) if OUT -- the
output of a mu-GDP Gaussian mechanism seen through its likelihood ratio, so the mechanism's
true eps at delta is eps(mu-GDP, delta) (Dong, Roth, Su, Cor. 2.13). delta = 1e-5, confidence
95%. Per (mu, m), over seeds (10 at m <= 1e5, 3 at m = 1e6 by default), median and 10th
percentile of:

- ``f-DP``: the sound eps bound of ``one_run_epsilon_lb`` (Mahloujifar et al.'s recursion with
  the (eps, delta) curve), the default 20-rule ``bonferroni`` family, and ``f-DP planned``: the
  rule ``plan_guesses`` fixes from the theory curve before the run, tested at alpha;
- ``SNJ``: Steinke-Nasr-Jagielski's (eps, delta) theorem on the same family (``method="snj"``;
  ``snj_p_value`` is their p-value, checked against the theorem written out in
  tests/test_one_run.py);
- ``GDP est.``: eps at delta of mu_lb-GDP with the rule ``plan_gdp_guesses`` fixes (and ``GDP
  est. 20 rules``: with the default family): mu_lb is a sound refutation of mu-GDP claims, its
  eps an estimate that assumes the curve is exactly Gaussian (not a bound), labelled so;
- CPU seconds (``time.process_time``, one thread) per seed of each bound, and of the planning
  at each (mu, m): ``plan_guesses``, ``plan_gdp_guesses`` and ``rule_family_price`` (the price
  of the 20-rule family against the planned rules, projected at the 0.1-quantile of the
  correct counts).

Run: ``python bench/one_run_scale.py [--mu 0.5 1 2] [--m 1000 10000 100000 1000000]
[--seeds 10] [--seeds-1e6 3] [--markdown]``. About 3 minutes of CPU on one core for the
whole table.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from audit.run.planning import rule_family_price
from audit.stats.one_run import one_run_epsilon_lb
from audit.stats.one_run_gdp import one_run_gdp_lower_bound, plan_gdp_guesses
from audit.stats.thresholds import plan_guesses
from audit.theory.curve import TradeOffCurve, gdp_epsilon

DELTA, CONFIDENCE = 1e-5, 0.95
COLUMNS = ("f-DP", "f-DP planned", "SNJ", "GDP est. 20 rules", "GDP est.")


def canaries(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores N(mu, 1) for the IN canaries and N(0, 1) for the OUT ones, bits fair coins."""
    rng = np.random.default_rng([seed, m, round(1000 * mu)])
    included = rng.random(m) < 0.5
    return rng.normal(mu * included, 1.0), included


def timed(f):
    start = time.process_time()
    out = f()
    return out, time.process_time() - start


def setting(mu: float, m: int, seeds: int) -> dict[str, object]:
    """Bounds over seeds and CPU seconds at one (mu, m)."""
    curve = TradeOffCurve.from_gdp(mu, sampler="deterministic", threat_model="isolated")
    (plan, gdp_plan, price), t_plan = timed(lambda: (
        plan_guesses(curve, m, delta=DELTA, alpha=1 - CONFIDENCE),
        plan_gdp_guesses(curve, m, alpha=1 - CONFIDENCE),
        rule_family_price(curve, m, delta=DELTA, alpha=1 - CONFIDENCE),
    ))
    values: dict[str, list[float]] = {c: [] for c in COLUMNS}
    seconds: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for seed in range(seeds):
        s, b = canaries(mu, m, seed)
        runs = {
            "f-DP": lambda s=s, b=b: one_run_epsilon_lb(
                s, b, delta=DELTA, confidence=CONFIDENCE).epsilon_lb,
            "f-DP planned": lambda s=s, b=b: one_run_epsilon_lb(
                s, b, delta=DELTA, confidence=CONFIDENCE,
                guesses=(plan.k_plus, plan.k_minus)).epsilon_lb,
            "SNJ": lambda s=s, b=b: one_run_epsilon_lb(
                s, b, delta=DELTA, confidence=CONFIDENCE, method="snj").epsilon_lb,
            "GDP est. 20 rules": lambda s=s, b=b: _gdp_eps(one_run_gdp_lower_bound(
                s, b, confidence=CONFIDENCE).mu_lb),
            "GDP est.": lambda s=s, b=b: _gdp_eps(one_run_gdp_lower_bound(
                s, b, confidence=CONFIDENCE, guesses=(gdp_plan.k_plus, gdp_plan.k_minus)).mu_lb),
        }
        for name, run in runs.items():
            value, t = timed(run)
            values[name].append(value)
            seconds[name].append(t)
    return {
        "mu": mu, "m": m, "seeds": seeds, "theory": float(gdp_epsilon(DELTA, mu)),
        "values": values, "seconds": seconds, "plan_seconds": t_plan,
        "plan": (plan.k_plus, plan.k_minus), "gdp_plan": (gdp_plan.k_plus, gdp_plan.k_minus),
        "price": price,
    }


def _gdp_eps(mu_lb: float) -> float:
    return float(gdp_epsilon(DELTA, mu_lb)) if mu_lb > 0 else 0.0


def cell(v: list[float]) -> str:
    a = np.asarray(v)
    return f"{np.median(a):.3f} ({np.percentile(a, 10):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mu", type=float, nargs="*", default=[0.5, 1.0, 2.0])
    parser.add_argument("--m", type=int, nargs="*", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--seeds", type=int, default=10, help="seeds at m <= 1e5")
    parser.add_argument("--seeds-1e6", type=int, default=3, help="seeds at m > 1e5")
    parser.add_argument("--markdown", action="store_true", help="print the docs/results.md rows")
    args = parser.parse_args()
    rows = []
    for mu in args.mu:
        for m in args.m:
            row = setting(mu, m, args.seeds if m <= 100_000 else args.seeds_1e6)
            rows.append(row)
            secs = {k: float(np.median(v)) for k, v in row["seconds"].items()}
            price = row["price"]
            print(
                f"mu {mu:g} m {m:>8d} ({row['seeds']} seeds) theory {row['theory']:.3f} | "
                + " | ".join(f"{c} {cell(row['values'][c])}" for c in COLUMNS)
                + " | CPU s/seed: " + ", ".join(f"{c} {secs[c]:.2f}" for c in COLUMNS)
                + f"; plans + price {row['plan_seconds']:.2f} | planned {row['plan']}, GDP "
                f"{row['gdp_plan']}; family costs {100 * price.cost:.0f}% eps_lb, "
                f"{100 * price.mu_cost:.0f}% mu_lb (projected)",
                flush=True,
            )
    if args.markdown:
        print()
        print("| mu (theory eps) | m | seeds | f-DP, 20 rules | f-DP, planned rule | SNJ, 20 rules "
              "| GDP family, 20 rules (estimate) | GDP family, planned (estimate) "
              "| family's price (eps_lb, mu_lb) "
              "| CPU s: f-DP / SNJ / GDP per seed, planning |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for row in rows:
            secs = {k: float(np.median(v)) for k, v in row["seconds"].items()}
            price = row["price"]
            print(
                f"| {row['mu']:g} ({row['theory']:.3f}) | {row['m']:.0e} | {row['seeds']} | "
                + " | ".join(cell(row["values"][c]) for c in COLUMNS)
                + f" | {100 * price.cost:.0f}%, {100 * price.mu_cost:.0f}% | "
                f"{secs['f-DP']:.2f} / {secs['SNJ']:.2f} / {secs['GDP est.']:.2f}, "
                f"{row['plan_seconds']:.2f} |"
            )


if __name__ == "__main__":
    main()
