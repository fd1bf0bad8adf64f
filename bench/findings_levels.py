"""The one-run findings' levels at scale (issue 41 item 2; docs/design/deployed.md, "Levels at
scale"): each finding's failure rate over simulated correct trainings against its stated level.

A simulated training records what :class:`audit.deployed.instrument.DiracCanaries` records:
m Dirac canaries (half IN) over S optimizer steps, Poisson batches at q over n = real + m rows;
at step t the canary block of the gradient is ``(C [j IN and in batch t] + N(0, (sigma C)^2)) /
b`` computed in the training's dtype (torch's CPU generator draws the noise in that dtype, the
division rounds in it), read back in float64 and multiplied by b / C, as the instrument does.

Variants (all correct DP-SGD, so every finding must hold its level): ``plain``; ``more-noise``
(noise 1.3 sigma: a loose claim); ``less-signal`` (each tensor clipped to C / 2, as Opacus's
per-layer clipping whose per-layer norms total C: the canary's signal is 1/2); ``divisor``
(the noisy sum divided by b / 1.07 while the instrument is told b: signal and noise 1.07 x).
bfloat16 / float16 noise is not a correct training (issue 42: the noise is drawn in low
precision): its rows show what the findings say of it, no level applies.

Also: the equal-draw probability of torch's float32 generator against pi_24 (the bound
``audit.stats.float_collisions`` uses, x 4), and the batch-size finding's level at few steps
(its exact conditional test) and at many (the moment-matched chi-square).

    python bench/findings_levels.py                 # 50 trainings, m = 1000, S = 1000, q = 0.01
    python bench/findings_levels.py --trainings 10 --variants plain --dtypes float32
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch
from scipy import stats

from audit.stats.diagnostics import DIAGNOSTICS, Observed, _batch_sizes, diagnose
from audit.stats.float_collisions import equal_draw_probability

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
VARIANTS = {  # noise factor, signal factor, divisor factor (module docstring)
    "plain": (1.0, 1.0, 1.0),
    "more-noise": (1.3, 1.0, 1.0),
    "less-signal": (1.0, 0.5, 1.0),
    "divisor": (1.0, 1.0, 1.07),
}


def simulate(
    seed: int, *, m: int = 1000, steps: int = 1000, q: float = 0.01, real: int = 9000,
    sigma: float = 1.0, clip: float = 1.0, dtype: str = "float32", variant: str = "plain",
) -> Observed:
    """One correct training's recorded observations (module docstring)."""
    noise_f, signal_f, divisor_f = VARIANTS[variant]
    rng = np.random.default_rng([seed, 41])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    n = real + m
    b = q * n  # the expected batch size, the divisor the instrument is told
    included = np.arange(m) < m // 2
    in_batch = rng.random((m, steps)) < q
    sizes = rng.binomial(real, q, steps) + in_batch.sum(axis=0)
    tdtype = DTYPES[dtype]
    noise = torch.normal(0.0, sigma * clip * noise_f, (m, steps), generator=gen, dtype=tdtype)
    summed = torch.from_numpy(signal_f * clip * (in_batch & included[:, None])).to(tdtype)
    grad = (summed + noise) / torch.tensor(b / divisor_f, dtype=tdtype)
    y = grad.double().numpy() * b / clip
    return Observed(y=y, in_batch=in_batch, included=included, batch_sizes=sizes, n=n,
                    batches_recorded=steps, clip=clip, divisor=b)


def failure_counts(
    trainings: int, *, alpha: float, sigma: float = 1.0, q: float = 0.01, seed0: int = 0,
    **kwargs: object,
) -> tuple[dict[str, int], float]:
    """Failed (refuting) findings over ``trainings`` simulated trainings, by name; the level
    of each statistical finding (alpha / K)."""
    failed = dict.fromkeys(("steps_composed", *DIAGNOSTICS), 0)
    steps = int(kwargs.get("steps", 1000))  # type: ignore[call-overload]
    for i in range(trainings):
        obs = simulate(seed0 + i, sigma=sigma, q=q, **kwargs)  # type: ignore[arg-type]
        for f in diagnose(obs, sigma=sigma, q=q, composed=steps, alpha=alpha):
            failed[f.name] += (not f.passed) and f.refutes
    return failed, alpha / len(DIAGNOSTICS)


def tolerated(trainings: int, level: float, false_alarm: float = 1e-3) -> int:
    """The most failures a finding at ``level`` may show over ``trainings`` before a check
    says its level is exceeded: the Binomial(trainings, level) 1 - false_alarm quantile (a
    finding at level <= level fails at most Binomial(trainings, level) times, stochastically)."""
    return int(stats.binom.ppf(1 - false_alarm, trainings, level))


def measured_equal_draws(pairs_root: int = 200_000, reps: int = 3) -> list[tuple[str, float]]:
    """Equal pairs between two independent samples of torch's float32 noise, x std / b as a
    training computes it, over pi_24 (the bound is 4)."""
    out = []
    gen = torch.Generator().manual_seed(0)
    for std, b in ((1.0, 1), (3.0, 10), (0.7, 37), (1.3, 64)):
        equal = 0.0
        for _ in range(reps):
            a = (torch.normal(0.0, std, (pairs_root,), generator=gen) / b).double().numpy()
            c = (torch.normal(0.0, std, (pairs_root,), generator=gen) / b).double().numpy()
            ua, ca = np.unique(a, return_counts=True)
            uc, cc = np.unique(c, return_counts=True)
            _, ia, ic = np.intersect1d(ua, uc, return_indices=True)
            equal += float(np.sum(ca[ia].astype(float) * cc[ic]))
        rate = equal / (reps * pairs_root**2)
        out.append((f"std {std}, / {b}", rate / equal_draw_probability(24)))
    return out


def batch_size_levels(reps: int, level: float) -> list[tuple[int, int, float, str]]:
    """The batch-size finding's failure rate on Binomial(n, q) sizes at few and many steps,
    and how often its p-values were exact (else the moment-matched chi-square)."""
    out = []
    for steps, n, q in ((3, 1000, 0.01), (3, 1000, 0.1), (5, 1000, 0.01), (10, 1000, 0.01),
                        (3, 100_000, 0.01), (30, 10_000, 0.01),
                        (1000, 10_000, 0.01)):
        rng = np.random.default_rng([steps, n, 7])
        fails, exact = 0, 0
        for _ in range(reps):
            sizes = rng.binomial(n, q, steps)
            obs = Observed(y=np.zeros((1, steps)), in_batch=np.zeros((1, steps), bool),
                           included=np.zeros(1, bool), batch_sizes=sizes, n=n)
            f = _batch_sizes(obs, q, level)
            fails += not f.passed
            exact += "exact" in f.message
        out.append((steps, int(n * q), fails / reps, f"exact for {exact / reps:.0%}"))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trainings", type=int, default=50)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--q", type=float, default=0.01)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64", "bfloat16"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--batch-reps", type=int, default=4000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    print("equal draws of torch's float32 noise / pi_24 (the bound is 4):")
    for label, ratio in measured_equal_draws():
        print(f"  {label}: {ratio:.2f}")

    level = args.alpha / len(DIAGNOSTICS)
    print(f"\nbatch_sizes at level {level:.4g} ({args.batch_reps} samples each):")
    for steps, nq, rate, how in batch_size_levels(args.batch_reps, level):
        print(f"  S = {steps:5d}, n q = {nq:4d}: failure rate {rate:.4f} ({how})")

    for dtype in args.dtypes:
        for variant in args.variants if dtype in ("float32", "float64") else ["plain"]:
            t0 = time.perf_counter()
            failed, level = failure_counts(
                args.trainings, alpha=args.alpha, q=args.q, m=args.m, steps=args.steps,
                dtype=dtype, variant=variant,
            )
            cap = tolerated(args.trainings, level)
            print(f"\n{dtype} {variant}: {args.trainings} trainings, m = {args.m}, "
                  f"S = {args.steps}, q = {args.q} ({time.perf_counter() - t0:.0f} s); "
                  f"each finding at level {level:.4g} (Binomial 0.999 quantile: {cap})")
            for name, count in failed.items():
                stated = 0.0 if name in ("steps_composed", "batch_alignment") else level
                print(f"  {name:24s} failed {count:3d} / {args.trainings} "
                      f"(rate {count / args.trainings:.3f}, stated {stated:.4g})")


if __name__ == "__main__":
    main()
