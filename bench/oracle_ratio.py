"""Benchmark: scores without a theory curve against the oracle joint test (issue 44 item 3).

Gaussian scores, IN ~ N(mu, 1) and OUT ~ N(0, 1), N a side, delta 1e-5, 95%. For each seed
(``np.random.default_rng(seed)``: N IN draws, then N OUT draws) the ratio eps_lb / oracle, where

- **oracle**: the joint test (docs/design.md §8.12, ``planned_epsilon_lower_bound``) on all the
  scores at the one rank r* (side ``out``) chosen with knowledge of the true distributions:
  r* maximises the *expected* eps_lb, computed here from the exact law of the count, not by the
  code's planner: U ~ Beta(r, N - r + 1) the true FPR of the r-th largest OUT score, S ~
  Binomial(N, TPR(U)) with TPR(u) = Phi(mu + Phi^{-1}(u)), Pr[S = s] averaged over 400 quantile
  midpoints of U, and eps_lb(s) the joint test's bound at rank r for every count s (a 400-cell
  projection of the p-value; the test itself uses 2000 cells). Ranks: 24 geometric in 1..N/2,
  then up to 12 between the best one's neighbours;
- ``planned_ranks`` (the family fixed by N alone: ranks 1, 4, 16, ... <= N/8 on both tails,
  each at alpha / K) and ``planned`` without a theory curve (a seeded pilot of a tenth plans
  the rank; what ``audit_scores`` used by default before).

Printed per (N, mu): r*, the oracle's median eps_lb, and for each strategy the median, 10th
percentile and minimum of the per-seed ratio (a seed whose oracle is 0 counts as ratio 1).
The goal: median >= 0.85 and 10th percentile >= 0.65 at N = 1e3 for mu 0.5, 1, 2 (20 seeds);
N = 1e4 checks that large N does not regress.

Run: ``python bench/oracle_ratio.py [--n 1000 10000] [--mu 0.5 1 2] [--seeds 20]``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.stats import beta as beta_law
from scipy.stats import binom, norm

from audit.stats.binary import threshold_strategy
from audit.stats.thresholds import (
    PlannedThreshold,
    _eps_bound,
    _largest_rejected,
    joint_p_value,
    planned_epsilon_lower_bound,
)

DELTA, ALPHA = 1e-5, 0.05


def count_law(r: int, n: int, mu: float, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(support, pmf) of S = #{IN > r-th largest OUT} for N(mu, 1) against N(0, 1), n a side."""
    u = beta_law.ppf((np.arange(points) + 0.5) / points, r, n - r + 1)
    tpr = norm.cdf(mu + norm.ppf(u))
    lo = int(max(binom.ppf(1e-8, n, tpr).min() - 1, 0))
    hi = int(min(binom.isf(1e-8, n, tpr).max() + 1, n))
    support = np.arange(lo, hi + 1)
    pmf = binom.pmf(support[None, :], n, tpr[:, None]).mean(axis=0)
    return support, pmf / pmf.sum()


def expected_eps(r: int, n: int, mu: float) -> float:
    """E[eps_lb] of the joint test at rank r (side out) under the true law (400-cell p-value)."""
    support, pmf = count_law(r, n, mu)
    bound = _eps_bound(DELTA)
    eps = _largest_rejected(
        lambda e: joint_p_value(support, n, r, n, bound(e), cells=400), ALPHA,
        rows=support.size, tolerance=1e-3,
    )
    return float((pmf * eps).sum())


def oracle_rank(n: int, mu: float) -> int:
    """The rank maximising the expected eps_lb (module docstring)."""
    coarse = np.unique(np.round(np.geomspace(1, n / 2, 24)).astype(int))
    values = [expected_eps(int(r), n, mu) for r in coarse]
    i = int(np.argmax(values))
    lo, hi = int(coarse[max(i - 1, 0)]), int(coarse[min(i + 1, coarse.size - 1)])
    fine = np.unique(np.round(np.linspace(lo, hi, min(hi - lo + 1, 12))).astype(int))
    fine_values = [expected_eps(int(r), n, mu) for r in fine]
    return int(fine[int(np.argmax(fine_values))])


def at_rank(s_in: np.ndarray, s_out: np.ndarray, rank: int) -> float:
    plan = PlannedThreshold("out", rank, s_in.size, s_out.size, "given", f"rank {rank}",
                            "eps_lb", 0.0)
    return planned_epsilon_lower_bound(
        s_in, s_out, plan, delta=DELTA, alpha=ALPHA, optimistic=False
    )[0].epsilon_lb


def strategy_bound(name: str, s_in: np.ndarray, s_out: np.ndarray, seed: int) -> float:
    return threshold_strategy(name).epsilon_bound(
        s_in, s_out, delta=DELTA, alpha=ALPHA, seed=seed, optimistic=False
    ).epsilon_lb


def ratios(bounds: np.ndarray, oracle: np.ndarray) -> np.ndarray:
    return np.where(oracle > 0, bounds / np.maximum(oracle, 1e-300), 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--mu", type=float, nargs="*", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--strategies", nargs="*", default=["planned_ranks", "planned"])
    args = parser.parse_args()
    print(f"Gaussian scores, delta {DELTA:g}, {100 * (1 - ALPHA):g}%, seeds 0..{args.seeds - 1}; "
          f"ratio = eps_lb / oracle per seed: median (10th percentile, minimum); "
          f"load {os.getloadavg()[0]:.2f}")
    for n in args.n:
        for mu in args.mu:
            start = time.process_time()
            rank = oracle_rank(n, mu)
            oracle, found = [], {name: [] for name in args.strategies}
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                s_in, s_out = rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)
                oracle.append(at_rank(s_in, s_out, rank))
                for name in args.strategies:
                    found[name].append(strategy_bound(name, s_in, s_out, seed))
            truth = np.array(oracle)
            cells = []
            for name in args.strategies:
                q = ratios(np.array(found[name]), truth)
                cells.append(f"{name} {np.median(q):.3f} ({np.quantile(q, 0.1):.3f}, "
                             f"{q.min():.3f})")
            print(f"N {n:>6} mu {mu:g}: oracle rank {rank}, oracle median "
                  f"{np.median(truth):.3f}; " + "; ".join(cells)
                  + f"  [{time.process_time() - start:.0f} CPU s]", flush=True)


if __name__ == "__main__":
    main()
