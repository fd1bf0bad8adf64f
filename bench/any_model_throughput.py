"""Benchmark: the torch.func engine (any nn.Module) against an Opacus per-model loop.

Issue 25 targets, on the 2-core machine, in the same run: the built-in ``cnn`` on digits and the
tiny ``transformer`` on the synthetic ``sequences`` task, n = 1000, b = 10, T = 100, one epoch,
Poisson sampling, sigma = 1, C = 1, lr = 0.5, isolated Dirac canary: at least 50x (CNN) and 30x
(transformer) Opacus's trainings per second (issue 14 asked 20x and 10x). The engine is timed with
each of ``--methods`` (:data:`audit.training.func_engine.GRADIENT_METHODS`: ``compiled``, the
default, one numba loop over models and examples for the convolutional networks it covers,
with Philox noise, :mod:`audit.training.compiled_cnn` (the transformer falls back to
``batched``); ``batched``, the K models' forward by hand-batched layers and one autograd
backward, :mod:`audit.training.batched_layers`; ``ghost``, the same per-example norms from each
layer's input and output gradient with a vmapped forward and backward,
:mod:`audit.training.ghost_norms`; ``vmap``, torch.func's materialised per-example gradients),
between two Opacus runs of every
``grad_sample_mode`` (:data:`OPACUS_MODES`; the ratio is against the fastest). The problem is
rebuilt for every method (it is cached per config: before 2026-12-01 22:00 every method ran the
first one built, so the earlier ghost/vmap pairs were one method twice).

Measured 2026-12-02 with the compiled kernel: bench/README.md (CNN 58x and more, met). Before it,
measured 2026-12-01, 22:00-22:20 UTC (``--trials 500 --opacus-trainings 2``: 1000 engine trainings
per method in one shard, 4 Opacus trainings per mode; the shared 2-core AMD EPYC under a load of
1.7-2, the other core busy with another benchmark, so per CPU second is the fair ratio; freed
memory kept in the heap on both sides, :mod:`audit.training.heap`), trainings per CPU second,
two runs per model (bench/README.md has the table): CNN: fastest Opacus ExpandedWeights 1.09
and 1.55 (hooks 0.82-0.99, ghost 0.74-0.75, functorch 0.56-0.76), engine batched 26.0 and 32.6
(23.9x and 21.1x), ghost 22.6 and 27.2, vmap 18.1; transformer: fastest Opacus hooks 0.66 and
0.79 (ghost 0.54, functorch 0.38-0.41, ExpandedWeights cannot run it), engine batched 25.3 and
26.2 (38.5x and 33.4x), ghost 19.3 and 20.8, vmap 23.7. Opacus's rate moves with the load as
much as the engine's. The transformer's 30x is met; the CNN's 50x is missed (0.42-0.48 of it):
one step of 1,000 CNN models spends about 30% of the batched method's CPU time in the forward
(the convolutions, GroupNorms, head), 20% in the backward, 30% in the per-layer norms (the
second convolution's formed per-example gradients, E small (16 x 16) @ (16 x 72) GEMMs, and its
unfolded patches), 10% in the clipped sums and 10% outside them (the noise, 26 ms of a
300-400 ms step); docs/design.md §12.4. Run it as ``python bench/any_model_throughput.py`` from
the repository root.

A *training* is one model trained for T steps (an audit trial is an IN/OUT pair). The engine
is timed through ``run_trials`` (sampling, training, observations) after a warm-up; the
Opacus loop builds the same network (the factory's module, same initial parameters, without
the engine's canary wrapper, which Opacus has no per-sample rule for), calls
``PrivacyEngine.make_private`` (Poisson sampling) and trains it on the same data, reading
one parameter after every step. Both sides run with one torch thread; the speed-up is
given per wall-clock second and per CPU second of this process (the machine may be shared:
CPU seconds are the fairer ratio), both measured in this run. Peak memory: the maximum
resident set size of this process (``getrusage``) and, with ``--device cuda``, the peak
CUDA memory allocated by torch.

Run: ``python bench/any_model_throughput.py`` (options: --models, --trials,
--opacus-trainings, --opacus-modes, --methods, --shard-size, --n-jobs, --device).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import time
import warnings

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from audit.core.data import input_shape, load_dataset
from audit.plugins.opacus import DEFAULT_ACCOUNTANT
from audit.training import func_engine, trials
from audit.training.heap import retain_freed_memory
from audit.training.torch_models import build_canary_model, load_factory
from audit.training.trials import TrainingConfig, build_problem, run_trials

warnings.filterwarnings("ignore", message="Full backward hook is firing")

TARGETS = {"cnn": 50.0, "transformer": 30.0}
"""Issue 25's targets (issue 14's were 20x and 10x)."""
DATASETS = {"cnn": "digits", "transformer": "sequences"}


def config_for(model: str, device: str) -> TrainingConfig:
    return TrainingConfig(
        dataset=DATASETS[model], model=model, sampler="poisson", sigma=1.0, clip=1.0, lr=0.5,
        batch_size=10, n=1000, epochs=1, canary="dirac", threat_model="isolated", device=device,
    )


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def engine(
    config: TrainingConfig, trials: int, n_jobs: int, shard_size: int
) -> tuple[float, float]:
    """(trainings per wall-clock second, per CPU second of this process), after a warm-up of two
    steps on full-size shards: the first run's heap growth (page faults as the process's memory
    grows by 300 MiB, counted in its CPU time) cost whichever method was timed first 15-25%."""
    warm = dataclasses.replace(config, n=2 * config.batch_size)  # T = 2 steps, same shard shapes
    run_trials(warm, trials=min(trials, shard_size), seed=99, n_jobs=n_jobs,
               shard_size=shard_size, progress=False)
    _sync(config.device)
    start, cpu = time.perf_counter(), time.process_time()
    observations = run_trials(
        config, trials=trials, seed=1, n_jobs=n_jobs, shard_size=shard_size, progress=False
    )
    _sync(config.device)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert observations.y_in.shape == (trials, config.mechanism.total_steps)
    return 2 * trials / elapsed, 2 * trials / cpu


OPACUS_MODES = ("hooks", "functorch", "ew", "ghost")
"""Opacus's ``grad_sample_mode`` values timed: its default per-layer hooks, torch.func per-sample
gradients, ExpandedWeights, and ghost clipping (two backward passes, no per-sample gradients;
``make_private`` then also returns the loss wrapper that runs them). The speed-up is stated
against the fastest that runs the network."""


def opacus(config: TrainingConfig, trainings: int, mode: str) -> tuple[float, float]:
    """(trainings per wall-clock second, per CPU second) of the Opacus per-model loop with
    ``grad_sample_mode=mode``: Opacus's Poisson loader (:func:`audit.plugins.opacus_loaders.
    opacus_loader`, as :func:`audit.plugins.opacus.make_private` builds it), SGD, one parameter
    read after every step."""
    from opacus import PrivacyEngine
    from torch.utils.data import TensorDataset

    from audit.plugins.opacus_loaders import opacus_loader

    problem = build_problem(config)
    shape = input_shape(config.dataset)
    data = load_dataset(config.dataset, config.n, seed=config.data_seed)
    device = torch.device(config.device)
    dataset = TensorDataset(
        torch.as_tensor(data.x).reshape(-1, *shape).to(device), torch.as_tensor(data.y).to(device)
    )
    initial = torch.as_tensor(problem.theta0[problem.model.private_width :])
    factory = load_factory(config.model)
    torch.manual_seed(0)
    start, cpu = time.perf_counter(), time.process_time()
    for k in range(trainings):
        net = build_canary_model(factory, shape, data.classes, seed=0).inner
        torch.nn.utils.vector_to_parameters(initial, net.parameters())
        net = net.to(device).train()
        plan = opacus_loader(
            config.sampler, dataset, batch_size=config.batch_size, epochs=config.epochs,
            generator=torch.Generator().manual_seed(k), rng=np.random.default_rng(k),
        )
        optimizer = torch.optim.SGD(net.parameters(), lr=config.lr)
        criterion = torch.nn.CrossEntropyLoss()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            private = PrivacyEngine(accountant=DEFAULT_ACCOUNTANT).make_private(
                module=net, optimizer=optimizer, criterion=criterion, data_loader=plan.loader,
                noise_multiplier=config.sigma, max_grad_norm=config.clip,
                poisson_sampling=plan.poisson_sampling, grad_sample_mode=mode,
                noise_generator=torch.Generator(device=device).manual_seed(k),
            )
        if mode == "ghost":
            net, optimizer, criterion, loader = private
        else:
            net, optimizer, loader = private
        assert optimizer.expected_batch_size == config.batch_size
        first = next(net.parameters())
        observed = []
        for xb, yb in loader:
            optimizer.zero_grad()
            criterion(net(xb), yb).backward()
            optimizer.step()
            observed.append(float(first.detach().reshape(-1)[0]))
    _sync(config.device)
    return trainings / (time.perf_counter() - start), trainings / (time.process_time() - cpu)


def opacus_modes(
    config: TrainingConfig, trainings: int, modes: list[str]
) -> dict[str, tuple[float, float] | str]:
    """Each mode's (wall, CPU) rates, or why it did not run."""
    out: dict[str, tuple[float, float] | str] = {}
    for mode in modes:
        try:
            out[mode] = opacus(config, trainings, mode)
        except Exception as error:  # a mode without a rule for one of the layers
            out[mode] = f"{type(error).__name__}: {' '.join(str(error).split())[:100]}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,transformer")
    parser.add_argument(
        "--trials", type=int, default=500, help="audit trials per engine run (2x trainings)"
    )
    parser.add_argument("--opacus-trainings", type=int, default=4)
    parser.add_argument(
        "--shard-size", type=int, default=500, help="trials per shard (2x models at once)"
    )
    parser.add_argument(
        "--n-jobs", type=int, default=1, help="engine workers (1: CPU seconds are comparable)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    parser.add_argument(
        "--opacus-modes", default=",".join(OPACUS_MODES), help="Opacus grad_sample_mode values"
    )
    parser.add_argument(
        "--methods", default="compiled,batched",
        help="the engine's per-example gradient methods to time (compiled, batched, ghost, vmap)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    # the engine keeps freed memory in the heap (its models' .on() calls this); set it before
    # the first Opacus run, so that both sides run with the same allocator settings
    retained = retain_freed_memory()
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores, one torch thread, device {args.device}"
    )
    print("config: n=1000 b=10 T=100 E=1 poisson sigma=1 C=1 lr=0.5, isolated Dirac canary")
    print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()}")
    print(f"freed memory kept in the heap (glibc mallopt, both sides): {retained}")
    for model in args.models.split(","):
        config = config_for(model, args.device)
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        modes = args.opacus_modes.split(",")
        before = opacus_modes(config, args.opacus_trainings, modes)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        timings = {}
        default = func_engine.GRADIENT_METHOD
        for method in args.methods.split(","):
            func_engine.GRADIENT_METHOD = method  # torch_model's models (n_jobs = 1: this process)
            # the problem (and its model) is cached per config: rebuild it with this method
            # (before 2026-12-01 22:00 it was not, and every method ran the first one built)
            trials._build_problem.cache_clear()
            built = build_problem(config).model
            assert isinstance(built, func_engine.TorchModel) and built.method == method
            timings[method] = engine(config, args.trials, args.n_jobs, args.shard_size)
        func_engine.GRADIENT_METHOD = default
        trials._build_problem.cache_clear()
        rss_engine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        after = opacus_modes(config, args.opacus_trainings, modes)  # the load may change
        size = build_problem(config).model.size
        print(f"\n{model} on {config.dataset} ({size} parameters with the canary weights): "
              f"{2 * args.trials} engine trainings per method, {2 * args.opacus_trainings} "
              f"Opacus trainings per mode (before and after the engine); load average now "
              f"{os.getloadavg()}")
        rates = {}
        for mode in modes:
            first, second = before[mode], after[mode]
            if isinstance(first, str) or isinstance(second, str):
                why = first if isinstance(first, str) else second
                print(f"  Opacus {mode:<9} did not run: {why}")
                continue
            rates[mode] = ((first[0] + second[0]) / 2, (first[1] + second[1]) / 2)
            print(f"  Opacus {mode:<9} {rates[mode][0]:8.2f} trainings/s wall, "
                  f"{rates[mode][1]:8.2f} per CPU-s")
        best = max(rates, key=lambda mode: rates[mode][1])
        op_wall, op_cpu = rates[best]
        print(f"  fastest Opacus mode per CPU-s: {best}")
        target = TARGETS[model]
        for method, (wall, cpu) in timings.items():
            tag = " (the default)" if method == default else ""
            print(f"  engine {method:<6} {wall:8.2f} trainings/s wall, {cpu:8.2f} per CPU-s "
                  f"(n_jobs={args.n_jobs}, {2 * args.shard_size} models per shard){tag}")
        for method, (wall, cpu) in timings.items():
            ratio_wall, ratio_cpu = wall / op_wall, cpu / op_cpu
            print(
                f"  RATIO {model} engine {method} / fastest Opacus ({best}): {ratio_cpu:.1f}x per "
                f"CPU-s ({ratio_wall:.1f}x wall) against the target {target:.0f}x: "
                f"{'met' if ratio_cpu >= target else 'MISSED'} "
                f"({ratio_cpu / target:.2f} of the target)"
            )
        if args.device == "cuda":
            print(
                f"  peak CUDA memory allocated: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
            )
        print(
            f"  peak RSS of this process: {rss_before:.0f} MiB before the engine run, "
            f"{rss_engine:.0f} MiB after it (n_jobs > 1: workers' peak "
            f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB)",
            flush=True,
        )


if __name__ == "__main__":
    main()
