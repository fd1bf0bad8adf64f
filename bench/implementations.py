"""Speed of the plug-in implementations against the batched engine, on one configuration.

Trainings per second (one torch thread) of the built-in ``opacus`` implementation (Poisson
and shuffling loaders), of the ``numpy-reference`` implementation, and of the engine's
``run_shard``, for logistic regression on digits (n = 1000, b = 10, T = 100, one epoch,
isolated Dirac canary). The Opacus claim (PRV accountant) is computed once per process
and timed separately.

    python bench/implementations.py [--trials 20]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from audit.accounting.adapters import opacus_epsilon
from audit.plugins.contract import run_implementation_shard
from audit.plugins.opacus import claimed_epsilon
from audit.training.trials import TrainingConfig, run_shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=20, help="IN and OUT trainings per implementation"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    base = dict(
        dataset="digits", model="logistic", sigma=1.0, clip=1.0, lr=0.1, batch_size=10, n=1000
    )
    rows = []
    for sampler in ("poisson", "dynamic_shuffle"):
        config = TrainingConfig(sampler=sampler, **base)
        start = time.perf_counter()
        claimed_epsilon(config, 1e-5)
        claim_seconds = time.perf_counter() - start
        for name in ("opacus", "numpy-reference"):
            start = time.perf_counter()
            run_implementation_shard(name, config, seed=0, shard=0, trials=args.trials)
            seconds = time.perf_counter() - start
            rows.append((name, sampler, 2 * args.trials / seconds))
        start = time.perf_counter()
        run_shard(config, seed=0, shard=0, trials=250)
        rows.append(("engine (K = 500)", sampler, 500 / (time.perf_counter() - start)))
        print(f"opacus PRV claim for {sampler}: {claim_seconds:.1f} s once per process")
    opacus_epsilon.cache_clear()
    print(f"{'implementation':<18} {'sampler':<16} {'trainings/s':>12}")
    for name, sampler, rate in rows:
        print(f"{name:<18} {sampler:<16} {rate:>12.1f}")


if __name__ == "__main__":
    main()
