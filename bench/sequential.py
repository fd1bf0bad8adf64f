"""Benchmark (issue 22 item 5): a sequential audit against the fixed-size audit it replaces.

Regime: adversarial dynamic shuffling, n = 1000, b = 1 (T = 1000), E = 2, sigma = 0.7 (the
mechanism of runs/shuffle-vs-poisson), audited against the Poisson accountant's claim
(eps = 0.743 at delta = 1e-5; the shuffle's own lower curve reaches eps 8.9), alpha = 0.05,
the default attack (``shuffle_adversarial_lr``), mechanism simulated.

- Fixed size: for N trials a side on a grid, the fraction of seeds whose verdict (split,
  multisplit, bonferroni; :func:`audit.stats.binary.verdict`) is ``violated``. A fixed-size audit
  "needs" the smallest N of the grid refuting the claim in at least 90% of the seeds (the
  power a user plans an audit for; ``audit plan`` also uses 0.9), and the 50% point is shown.
- Sequential (``stop = "decided"``, docs/design.md §8.18): the same seeds' trials in shards of
  ``--shard-size`` (the first is the pilot), stopped at the first decided look
  (:func:`audit.stats.sequential_audit.sequential_outcome`); the trainings used per seed (median,
  90th percentile, maximum) and the fraction refuted.

Seeds are independent simulations (seed s: numpy default_rng(s)). Run:
``python bench/sequential.py [--seeds 30] [--shard-size 10] [--budget 2000]``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.run.claims import cell_bounds
from audit.stats.binary import curve_epsilon, verdict
from audit.stats.sequential_audit import sequential_outcome
from audit.training.simulate import simulate_observations

GRID = (25, 50, 75, 100, 125, 150, 175, 200, 250, 300, 400, 600, 800, 1000)
STRATEGIES = ("split", "multisplit", "bonferroni")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--shard-size", type=int, default=10)
    parser.add_argument(
        "--budget", type=int, default=2000, help="max_trials a side of the sequential audit"
    )
    parser.add_argument("--sigma", type=float, default=0.7)
    args = parser.parse_args()
    mechanism = Mechanism(
        sampler="dynamic_shuffle",
        sigma=args.sigma,
        epochs=2,
        threat_model="adversarial",
        n=1000,
        batch_size=1,
    )
    claim = cell_bounds(mechanism.with_(sampler="poisson", max_batch_size=None), {}).upper
    delta, confidence = 1e-5, 0.95
    attack = get_attack(default_attack(mechanism, "all_iterates"))
    print(
        f"dynamic_shuffle adversarial, sigma {args.sigma}, T 1000, E 2; Poisson claim eps = "
        f"{curve_epsilon(claim, delta):.3f} at delta {delta:g}; attack {attack.name}; "
        f"{args.seeds} seeds"
    )
    fixed = {s: np.zeros(len(GRID)) for s in STRATEGIES}
    used, refuted = [], 0
    for seed in range(args.seeds):
        observations = simulate_observations(
            mechanism, max(args.budget, GRID[-1]), np.random.default_rng(seed)
        )
        scores_in, scores_out = attack.scores(observations)
        for j, n in enumerate(GRID):
            for strategy in STRATEGIES:
                v = verdict(
                    scores_in[:n], scores_out[:n], claim, confidence=confidence, threshold=strategy,
                    seed=seed,
                )
                fixed[strategy][j] += v.violated
        outcome = sequential_outcome(scores_in[: args.budget], scores_out[: args.budget], claim,
                                     shard_size=args.shard_size, confidence=confidence,
                                     delta=delta)
        used.append(2 * outcome.trials_used)
        refuted += outcome.verdict.violated
    print("\nfixed size: fraction of seeds refuting, by trials a side (trainings = 2x)")
    print("strategy     " + " ".join(f"{n:>6d}" for n in GRID) + "   needs (90%)  (50%)")
    needs = {}
    for strategy in STRATEGIES:
        power = fixed[strategy] / args.seeds
        n90 = next((n for n, p in zip(GRID, power, strict=True) if p >= 0.9), None)
        n50 = next((n for n, p in zip(GRID, power, strict=True) if p >= 0.5), None)
        needs[strategy] = n90
        print(f"{strategy:<12} " + " ".join(f"{p:6.2f}" for p in power)
              + f"   {_trainings(n90):>11}  {_trainings(n50):>5}")
    used_arr = np.array(used)
    print(
        f"\nsequential (shards of {args.shard_size}, pilot = first shard, budget {args.budget} a "
        "side): "
        f"refuted in {refuted}/{args.seeds} seeds; trainings used: median "
        f"{np.median(used_arr):.0f}, "
        f"90th percentile {np.percentile(used_arr, 90):.0f}, max {used_arr.max()}, min "
        f"{used_arr.min()}"
    )
    best = min((n for n in needs.values() if n is not None), default=None)
    if best is not None:
        print(
            f"fixed size needs {2 * best} trainings (best strategy, 90% power); sequential median "
            "/ that = "
            f"{np.median(used_arr) / (2 * best):.2f}, 90th percentile / that = "
            f"{np.percentile(used_arr, 90) / (2 * best):.2f}"
        )


def _trainings(n: int | None) -> str:
    return "-" if n is None else str(2 * n)


if __name__ == "__main__":
    main()
