"""Benchmark (issue 22 item 3): eps_lb from k canaries per training against one, simulator and
engine.

Simulator (``--mode simulate``): the workload of runs/one-million (Poisson q = 0.01, sigma = 1, T =
100, isolated Dirac canary, the default attack ``poisson_lr``, delta = 1e-5, alpha = 0.05, threshold
``split``), for R trainings a side and k canaries per training, drawn exactly as ``audit run`` draws
them (:func:`audit.training.simulate.simulate_shard`, shards of ``--shard`` trainings, seeded per
shard). For Poisson the k canaries are independent (docs/design.md §8.17), so the k R scores are k R
trials. Prints, per (R, k), the median, 10th percentile and minimum of eps_lb over ``--seeds``
seeds. ``--sampler dynamic_shuffle`` runs the dependent case (per-training bounds) on an isolated
shuffle (``--sampler dynamic_shuffle`` with ``--n --batch-size --epochs --sigma``; default n = 100,
b = 1, E = 1, sigma = 0.5).

Engine (``--mode train``): the same through real DP-SGD trainings (logistic regression on digits, lr
0.5, as runs/one-million), :func:`audit.training.trials.run_shard`; a few seeds at 1e4-1e5
trainings.

Run: ``python bench/many_canaries.py --mode simulate --trainings 100000 --k 1 10 --seeds 8``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.core.observations import Observations
from audit.sampling import canaries_independent
from audit.stats.binary import epsilon_lower_bound
from audit.stats.many_canaries import dependent_epsilon_lower_bound
from audit.training.simulate import simulate_shard

DELTA, ALPHA = 1e-5, 0.05


def mechanism_of(args: argparse.Namespace) -> Mechanism:
    """runs/one-million's mechanism (no ``--sampler``), or ``--sampler`` with the command line's
    (n, b, E, sigma)."""
    if args.sampler is None:
        return Mechanism(
            sampler="poisson", sigma=1.0, epochs=1, threat_model="isolated", n=1000, batch_size=10
        )
    return Mechanism(
        sampler=args.sampler,
        sigma=args.sigma,
        epochs=args.epochs,
        threat_model="isolated",
        n=args.n,
        batch_size=args.batch_size,
    )


def scores_of(
    mode: str, mechanism: Mechanism, trainings: int, k: int, seed: int, shard: int
) -> tuple:
    """The attack's (IN, OUT) scores of ``trainings`` trainings a side with k canaries each."""
    attack = get_attack(default_attack(mechanism, "all_iterates"))
    parts_in, parts_out = [], []
    for index, start in enumerate(range(0, trainings, shard)):
        size = min(shard, trainings - start)
        if mode == "simulate":
            arrays = simulate_shard(mechanism, seed=seed, shard=index, trials=size, cell="bench",
                                    canaries_per_training=k)
        else:
            from audit.training.trials import TrainingConfig, run_shard

            config = TrainingConfig(
                dataset="digits",
                model="logistic",
                sampler=mechanism.sampler,
                threat_model="isolated",
                canary="dirac",
                sigma=mechanism.sigma,
                batch_size=mechanism.batch_size,
                n=mechanism.n,
                epochs=mechanism.epochs,
                lr=0.5,
                clip=1.0,
            )
            arrays = run_shard(
                config, seed=seed, shard=index, trials=size, cell="bench", canaries_per_training=k
            )
        observations = Observations(mechanism=mechanism, y_in=arrays["y_in"], y_out=arrays["y_out"])
        scores_in, scores_out = attack.scores(observations)
        parts_in.append(np.asarray(scores_in))
        parts_out.append(np.asarray(scores_out))
    return np.concatenate(parts_in), np.concatenate(parts_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("simulate", "train"), default="simulate")
    parser.add_argument(
        "--sampler", default=None, help="default: runs/one-million's Poisson mechanism"
    )
    parser.add_argument(
        "--trainings", type=int, nargs="+", default=[100_000], help="R, trainings a side"
    )
    parser.add_argument("--k", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--shard", type=int, default=5000)
    parser.add_argument("--n", type=int, default=100, help="other samplers: n")
    parser.add_argument("--batch-size", type=int, default=1, help="other samplers: b")
    parser.add_argument("--epochs", type=int, default=1, help="other samplers: E")
    parser.add_argument("--sigma", type=float, default=0.5, help="other samplers: sigma")
    args = parser.parse_args()
    mechanism = mechanism_of(args)
    independent = canaries_independent(mechanism.sampler)
    print(
        f"{args.mode}: {mechanism.sampler} isolated, sigma {mechanism.sigma}, T*E "
        f"{mechanism.total_steps}, "
        f"delta {DELTA:g}, alpha {ALPHA}, threshold split; canaries "
        f"{'independent' if independent else 'dependent'}"
    )
    print(
        "trainings a side | k | observations a side | eps_lb median | 10th pct | min | max | s "
        "per seed"
    )
    for trainings in args.trainings:
        for k in args.k:
            values, start = [], time.perf_counter()
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                scores_in, scores_out = scores_of(
                    args.mode, mechanism, trainings, k, seed, args.shard
                )
                if k == 1 or independent:
                    bound = epsilon_lower_bound(
                        scores_in, scores_out, delta=DELTA, confidence=1 - ALPHA, seed=seed,
                        threshold="split",
                    )
                else:
                    bound = dependent_epsilon_lower_bound(
                        scores_in, scores_out, canaries=k, delta=DELTA, confidence=1 - ALPHA,
                        seed=seed,
                    )
                values.append(bound.epsilon_lb)
            v = np.array(values)
            print(f"{trainings:>16,d} | {k:>2d} | {trainings * k:>19,d} | {np.median(v):13.3f} | "
                  f"{np.percentile(v, 10):8.3f} | {v.min():.3f} | {v.max():.3f} | "
                  f"{(time.perf_counter() - start) / args.seeds:.1f}", flush=True)
            print("   per seed: " + " ".join(f"{x:.3f}" for x in v), flush=True)


if __name__ == "__main__":
    main()
