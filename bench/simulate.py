"""Benchmark: the mechanism simulator's speed, and the tightness of the best attacks at 1e6 trials.

Speed (issue 5 item 3): ``simulate_observations`` for 1e6 IN + 1e6 OUT trials of T*E = 100
steps, every sampler x threat model; target < 20 s each.

Tightness (issue 5 item 5): for deterministic, Poisson (isolated: for Poisson the isolated
pair is the worst case, the adversarial co-batch only adds variance) and both shuffles
(adversarial) at configurations whose theory eps at delta = 1e-5 is 3 to 5, simulate 1e6
trials, score with the default (best known) attack, and bound eps soundly (split, alpha 0.05).
Reports eps_lb, the ceiling (audit.stats.binary.ideal_epsilon_lb: what an auditor would certify with
the same trials and strategy if the scores followed the theory's lower curve exactly), the
theory eps (lower: achieved by a known attack; upper: guarantee), and the two ratios
eps_lb / ceiling (target >= 0.9) and eps_lb / theory lower; then the same bound and
ceiling with the bonferroni strategy. Where audit.theory has no
shuffle lower curve yet, the Chua et al. (2024) max-test curve is computed here (one epoch,
persistent = one epoch at sigma / sqrt(E)) and labelled so.

Run: ``python bench/simulate.py [--trials N] [--speed-only | --tightness-only] [--only NAME]``.
Each tightness configuration takes about 10 to 40 s and up to ~3 GB of memory at 1e6 trials.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.stats import norm

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.core.names import SAMPLERS, THREAT_MODELS
from audit.run.planning import theory_bounds
from audit.sampling import get_sampler
from audit.stats.binary import curve_epsilon, epsilon_lower_bound, ideal_epsilon_lb
from audit.training.simulate import simulate_observations

DELTA = 1e-5

# name: (sampler, threat model, sigma, T, E)
CONFIGS: dict[str, tuple[str, str, float, int, int]] = {
    "deterministic": ("deterministic", "adversarial", 1.1, 100, 1),
    "poisson": ("poisson", "isolated", 0.6, 100, 1),
    "poisson_adversarial": ("poisson", "adversarial", 0.6, 100, 1),
    "persistent_shuffle": ("persistent_shuffle", "adversarial", 1.0, 100, 1),
    "dynamic_shuffle": ("dynamic_shuffle", "adversarial", 1.0, 100, 1),
    "persistent_shuffle_E4": ("persistent_shuffle", "adversarial", 2.0, 25, 4),
    "dynamic_shuffle_E4": ("dynamic_shuffle", "adversarial", 1.4, 25, 4),
}


def max_test_curve(sigma: float, steps: int):
    """Chua et al. (2024) max test on MoG_T(2) vs MoG_T(1): F_m(C) = Phi((C-m)/s) Phi(C/s)^(T-1),
    FPR = 1 - F_1(C), FNR = F_2(C), as a callable alpha -> beta (interpolated on 4e4 thresholds)."""
    c = np.linspace(-5 * sigma, 2 + 12 * sigma, 40001)
    rest = (steps - 1) * norm.logcdf(c / sigma)
    fpr = -np.expm1(norm.logcdf((c - 1) / sigma) + rest)
    fnr = np.exp(norm.logcdf((c - 2) / sigma) + rest)
    order = np.argsort(fpr)
    return lambda a: np.interp(a, fpr[order], fnr[order])


def speed(trials: int) -> None:
    print(
        f"speed: simulate_observations, {trials} IN + {trials} OUT trials, T*E = 100 steps "
        "(target < 20 s)"
    )
    for sampler in SAMPLERS:
        for threat in THREAT_MODELS:
            extra = (
                {"max_batch_size": 12}
                if "max_batch_size" in get_sampler(sampler).parameters
                else {}
            )
            mechanism = Mechanism(
                sampler, sigma=1.0, steps_per_epoch=100, batch_size=10, threat_model=threat, **extra
            )
            start = time.perf_counter()
            try:
                observations = simulate_observations(mechanism, trials, np.random.default_rng(0))
            except ValueError as refusal:  # a sampler without a simulator law for this pair
                print(f"  {sampler:<20}{threat:<13}refused: {refusal}")
                continue
            elapsed = time.perf_counter() - start
            print(
                f"  {sampler:<20}{threat:<13}{elapsed:7.2f} s   "
                f"{observations.y_in.nbytes * 2 / 2**20:7.0f} MB"
            )
            del observations


def tightness(trials: int, only: str | None) -> None:
    print(
        f"tightness: {trials} IN + {trials} OUT simulated trials, delta = {DELTA:g}, alpha = "
        "0.05, split"
    )
    header = (
        f"  {'config':<24}{'attack':<24}{'eps_lb':>8}{'ceiling':>9}{'lower':>8}{'upper':>8}"
        f"{'lb/ceil':>9}{'lb/lower':>9}{'bonf lb':>9}{'ceil':>7}{'ratio':>7}{'sim s':>7}"
        f"{'score s':>8}  lower curve"
    )
    print(header)
    for name, (sampler, threat, sigma, steps, epochs) in CONFIGS.items():
        if only and name != only:
            continue
        mechanism = Mechanism(sampler, sigma=sigma, steps_per_epoch=steps, epochs=epochs,
                              threat_model=threat, batch_size=10)
        upper, lower, _ = theory_bounds(mechanism)
        label = "audit.theory"
        kind = get_sampler(sampler)
        # the max test is the adversarial pair of a fixed-size sampler whose canary is in one
        # uniform step, the same in every epoch (or E = 1): sigma / sqrt(E) in one round
        if lower is None and kind.fixed_size and kind.canary_law == "uniform_step_per_epoch" and (
            epochs == 1 or kind.same_step_every_epoch
        ):
            lower = max_test_curve(sigma / np.sqrt(epochs), steps)
            label = "max test (Chua et al. 2024), computed here"
        start = time.perf_counter()
        observations = simulate_observations(mechanism, trials, np.random.default_rng(2024))
        simulated = time.perf_counter() - start
        attack = default_attack(mechanism)
        start = time.perf_counter()
        s_in, s_out = get_attack(attack).scores(observations)
        scored = time.perf_counter() - start
        del observations
        bound = epsilon_lower_bound(s_in, s_out, delta=DELTA, seed=0, threshold="split")
        bonferroni = epsilon_lower_bound(
            s_in, s_out, delta=DELTA, threshold="bonferroni"
        ).epsilon_lb
        if lower is not None:
            ceiling = ideal_epsilon_lb(lower, trials, delta=DELTA, threshold="split")
            bonferroni_ceiling = ideal_epsilon_lb(
                lower, trials, delta=DELTA, threshold="bonferroni"
            )
            eps_lower = curve_epsilon(lower, DELTA, grid=40_000)
        else:
            ceiling = eps_lower = bonferroni_ceiling = float("nan")
            label = "none available"
        eps_upper = float(upper.epsilon(DELTA)) if upper is not None else float("nan")
        print(
            f"  {name:<24}{attack:<24}{bound.epsilon_lb:8.3f}{ceiling:9.3f}"
            f"{eps_lower:8.3f}{eps_upper:8.3f}"
            f"{bound.epsilon_lb / ceiling:9.3f}{bound.epsilon_lb / eps_lower:9.3f}"
            f"{bonferroni:9.3f}{bonferroni_ceiling:7.3f}{bonferroni / bonferroni_ceiling:7.3f}"
            f"{simulated:7.1f}{scored:8.1f}  {label}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--tightness-only", action="store_true")
    parser.add_argument("--only", choices=list(CONFIGS), default=None)
    args = parser.parse_args()
    if not args.tightness_only:
        speed(args.trials)
    if not args.speed_only:
        tightness(args.trials, args.only)


if __name__ == "__main__":
    main()
