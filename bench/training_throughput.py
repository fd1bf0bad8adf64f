"""Benchmark: batched DP-SGD trainings per second against an Opacus per-model loop.

Issue 4 target, on the 2-core machine: logistic regression on digits, n = 1000, b = 10,
T = 100, one epoch, Poisson, isolated Dirac canary: at least 100x the trainings per second
of an Opacus per-model loop of the same configuration, measured in the same run; for the
64-32-10 MLP (64 digits features + the engine's always-zero extra feature, 32 hidden ReLU
units, 10 classes), at least 10x.

A *training* is one model trained for T*E steps; one audit trial is a pair of trainings (canary IN
and OUT), so trials/s = trainings/s / 2. The engine is timed through ``run_trials`` (sampling,
training, observations) after a warm-up call that starts the joblib workers; the Opacus loop builds
each model, calls ``PrivacyEngine.make_private`` (Poisson sampling; the opacus plug-in's
:func:`audit.plugins.opacus.make_private`) and trains it on the same data, reading the Dirac
coordinate after every step. Peak memory is the maximum resident set size (``getrusage``) of this
process and, for n_jobs = 2, of the largest worker.

Run: ``python bench/training_throughput.py`` (options: --trials, --opacus-trainings,
--shard-size, --models).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from audit.plugins.opacus import make_private
from audit.training.trials import TrainingConfig, build_problem, run_trials

# Opacus's hooks warn on every model built by the per-model loop; the warning is harmless here.
warnings.filterwarnings("ignore", message="Full backward hook is firing")

TARGETS = {"logistic": 100.0, "mlp": 10.0}


def config_for(model: str) -> TrainingConfig:
    return TrainingConfig(
        dataset="digits", model=model, hidden=32, activation="relu", sampler="poisson",
        sigma=1.0, clip=1.0, lr=0.5, batch_size=10, n=1000, epochs=1,
        canary="dirac", threat_model="isolated",
    )


def engine_trainings_per_second(
    config: TrainingConfig, trials: int, n_jobs: int, shard_size: int
) -> tuple[float, float]:
    """(trainings per wall-clock second, per CPU second of this process; the latter is
    meaningful for n_jobs = 1 only)."""
    run_trials(config, trials=min(trials, 4), seed=99, n_jobs=n_jobs, shard_size=2, progress=False)
    start, cpu = time.perf_counter(), time.process_time()
    observations = run_trials(
        config, trials=trials, seed=1, n_jobs=n_jobs, shard_size=shard_size, progress=False
    )
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert observations.y_in.shape == (trials, config.mechanism.total_steps)
    return 2 * trials / elapsed, 2 * trials / cpu


def opacus_trainings_per_second(
    config: TrainingConfig, trainings: int
) -> tuple[float, float, float]:
    """(trainings per wall-clock second, per CPU second, steps/s excluding setup) of the
    Opacus per-model loop."""
    from torch.utils.data import TensorDataset

    problem = build_problem(config)
    model = problem.model
    x, y = torch.as_tensor(problem.x), torch.as_tensor(problem.y)
    dataset = TensorDataset(x, y)
    init = [b[0] for b in model.blocks(torch.as_tensor(problem.theta0).reshape(1, -1))]
    column = int(np.flatnonzero(problem.canary.u)[0])
    torch.manual_seed(0)
    total, stepping, steps = 0.0, 0.0, 0
    cpu = time.process_time()
    for k in range(trainings):
        start = time.perf_counter()
        if config.model == "logistic":
            net = torch.nn.Linear(model.features, model.classes)
            params = [net.weight, net.bias]
        else:
            net = torch.nn.Sequential(
                torch.nn.Linear(model.features, config.hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(config.hidden, model.classes),
            )
            params = [net[0].weight, net[0].bias, net[2].weight, net[2].bias]
        with torch.no_grad():
            for p, value in zip(params, init, strict=True):
                p.copy_(value.T if value.dim() == 2 else value)
        _, net, optimizer, loader = make_private(
            net,
            dataset,
            sampler=config.sampler,
            batch_size=config.batch_size,
            epochs=config.epochs,
            lr=config.lr,
            sigma=config.sigma,
            clip=config.clip,
            seeds=(k, k, k, k),
        )
        first = net._module.weight if config.model == "logistic" else net._module[0].weight
        observed = []
        step_start = time.perf_counter()
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(xb), yb).backward()
            optimizer.step()
            observed.append(float(first.reshape(-1)[column]))
            steps += 1
        end = time.perf_counter()
        stepping += end - step_start
        total += end - start
    cpu = time.process_time() - cpu
    return trainings / total, trainings / cpu, steps / stepping


def peak_rss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=1000, help="audit trials per engine run (2x trainings)"
    )
    parser.add_argument("--mlp-trials", type=int, default=500)
    parser.add_argument("--opacus-trainings", type=int, default=6)
    parser.add_argument("--shard-size", type=int, default=500)
    parser.add_argument("--models", default="logistic,mlp")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, one torch thread per worker")
    print("config: digits n=1000 b=10 T=100 E=1 poisson sigma=1 C=1 lr=0.5, isolated Dirac canary")
    rows = []
    for model in args.models.split(","):
        config = config_for(model)
        trials = args.trials if model == "logistic" else args.mlp_trials
        opacus_wall, opacus_cpu, opacus_steps = opacus_trainings_per_second(
            config, args.opacus_trainings
        )
        one, one_cpu = engine_trainings_per_second(config, trials, 1, args.shard_size)
        rss_self = peak_rss_mib(resource.RUSAGE_SELF)
        two, _ = engine_trainings_per_second(config, trials, 2, args.shard_size)
        rows.append(rss_self)
        target = TARGETS[model]
        print(
            f"\n{model}: {2 * trials} engine trainings per run, {args.opacus_trainings} Opacus "
            "trainings"
        )
        print(
            f"  Opacus loop        {opacus_wall:9.2f} trainings/s wall, {opacus_cpu:9.2f} per "
            f"CPU-s ({opacus_steps:.0f} steps/s without make_private)"
        )
        print(f"  engine n_jobs=1    {one:9.1f} trainings/s wall ({one / 2:.1f} trials/s, "
              f"{one * config.mechanism.total_steps:.0f} model-steps/s), {one_cpu:9.1f} per CPU-s")
        print(f"  engine n_jobs=2    {two:9.1f} trainings/s wall ({two / 2:.1f} trials/s)")
        step_only = opacus_steps / config.mechanism.total_steps
        best = max(one, two)
        print(
            f"  speed-up: {best / opacus_wall:.0f}x wall, {one_cpu / opacus_cpu:.0f}x per CPU-s, "
            f"{best / step_only:.0f}x against Opacus's steps alone; target >= {target:.0f}x: "
            f"{'ok' if min(best / opacus_wall, one_cpu / opacus_cpu) >= target else 'MISSED'}",
            flush=True,
        )
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)
    print(
        f"peak RSS: main process {peak_rss_mib(resource.RUSAGE_SELF):.0f} MiB "
        f"(after the n_jobs=1 runs: {max(rows):.0f} MiB), "
        f"largest joblib worker {peak_rss_mib(resource.RUSAGE_CHILDREN):.0f} MiB "
        f"(shard size {args.shard_size}: {2 * args.shard_size} models per shard)"
    )


if __name__ == "__main__":
    main()
