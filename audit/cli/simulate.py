"""Simulate an audit at the mechanism level (no training) and print the empirical eps lower
bound beside the theory's eps at delta (upper = guarantee, lower = achieved by a known attack).

Observations are drawn by audit.training.simulate in shards of 100,000 trials (seeded per shard from
--seed), scored by the attack, and bounded by audit.stats.binary.epsilon_lower_bound. epsilon_lb is
sound at confidence 1 - alpha; epsilon_optimistic is the naive maximum over thresholds
(optimistic, not a bound); ceiling is the eps_lb an auditor would get with these trials if the
attack attained the theory's lower curve exactly and the error counts were their expectations:
a projection, not a bound (a real audit's eps_lb is often above it).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from audit.core.names import OBSERVATIONS, SAMPLERS, THREAT_MODELS

if TYPE_CHECKING:
    from audit.core.mechanism import Mechanism

HELP = "simulated audit: empirical eps lower bound beside the theory, no training"
SHARD_TRIALS = 100_000
CEILING_LABEL = (
    "projection, not a bound: eps_lb at the expected error counts if the attack attained the "
    "theory's lower curve (a real audit's eps_lb is often above it)"
)


def add_mechanism_arguments(parser: argparse.ArgumentParser) -> None:
    """The mechanism flags shared by ``audit simulate`` and ``audit plan``."""
    parser.add_argument("--sampler", required=True, help=f"one of: {', '.join(SAMPLERS)}")
    parser.add_argument(
        "--threat-model", default="adversarial", help=f"one of: {', '.join(THREAT_MODELS)}"
    )
    parser.add_argument("--sigma", type=float, required=True, help="noise multiplier")
    parser.add_argument("--steps", type=int, required=True, help="T, steps per epoch")
    parser.add_argument("--epochs", type=int, default=1, help="E (default 1)")
    parser.add_argument("--batch-size", type=int, default=None, help="b (Poisson: q = b/n)")
    parser.add_argument("--n", type=int, default=None, help="dataset size (default b*T)")
    parser.add_argument("--max-batch-size", type=int, default=None, help="B for truncated_poisson")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    parser.add_argument("--alpha", type=float, default=0.05, help="1 - confidence (default 0.05)")
    parser.add_argument(
        "--threshold", default="split", help="split (default), bonferroni or multisplit"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mechanism_arguments(parser)
    parser.add_argument(
        "--trials", type=int, default=100_000, help="IN and OUT trials each (default 1e5)"
    )
    parser.add_argument(
        "--attack", default=None, help="attack name (default: the best known for the sampler)"
    )
    parser.add_argument("--seed", type=int, default=0, help="audit seed (default 0)")


def mechanism_from_args(args: argparse.Namespace) -> Mechanism:
    """The mechanism of the flags, checked against its sampler's rules
    (:func:`audit.sampling.validate`)."""
    from audit.core.mechanism import Mechanism
    from audit.sampling import validate

    return validate(Mechanism(
        sampler=args.sampler,
        sigma=args.sigma,
        steps_per_epoch=args.steps,
        epochs=args.epochs,
        threat_model=args.threat_model,
        n=args.n,
        batch_size=args.batch_size,
        max_batch_size=args.max_batch_size,
    ))


def simulated_scores(mechanism: Mechanism, attack, trials: int, seed: int):
    """Scores of ``trials`` simulated IN and OUT trials, drawn in seeded shards."""
    import numpy as np

    from audit.core.observations import Observations
    from audit.training.simulate import simulate_shard

    scores_in, scores_out = [], []
    for shard, start in enumerate(range(0, trials, SHARD_TRIALS)):
        size = min(SHARD_TRIALS, trials - start)
        arrays = simulate_shard(mechanism, seed=seed, shard=shard, trials=size)
        metadata: dict[str, object] = {"source": "simulate"}
        observations = Observations(mechanism=mechanism, metadata=metadata, **arrays)
        s_in, s_out = attack.scores(observations)
        scores_in.append(s_in)
        scores_out.append(s_out)
    return np.concatenate(scores_in), np.concatenate(scores_out)


def _finite(value: float | None) -> float | None:
    """JSON has no inf: an infinite eps (no finite eps reaches delta) is written as null."""
    return value if value is not None and math.isfinite(value) else None


def run(args: argparse.Namespace) -> int:
    import json

    from attacks import default_attack, get_attack
    from audit.core.validation import check_int
    from audit.run.planning import theory_bounds
    from audit.stats.binary import (
        curve_epsilon,
        epsilon_lower_bound,
        gdp_mu_estimate,
        ideal_epsilon_lb,
    )

    trials = check_int("trials", args.trials, minimum=2)
    mechanism = mechanism_from_args(args)
    name = args.attack or default_attack(mechanism, "all_iterates")
    attack = get_attack(name)
    if attack.observation != "all_iterates":
        raise ValueError(
            f"attack={name!r} needs observation={attack.observation!r}; the simulator draws "
            f"{OBSERVATIONS[0]!r} only"
        )
    scores_in, scores_out = simulated_scores(mechanism, attack, trials, args.seed)
    bound = epsilon_lower_bound(
        scores_in,
        scores_out,
        delta=args.delta,
        alpha=args.alpha,
        threshold=args.threshold,
        seed=args.seed,
    )
    gdp = gdp_mu_estimate(
        scores_in, scores_out, alpha=args.alpha, threshold=args.threshold, seed=args.seed
    )
    upper, lower, note = theory_bounds(mechanism)
    ceiling = None
    if lower is not None:
        ceiling = ideal_epsilon_lb(
            lower, trials, delta=args.delta, alpha=args.alpha, threshold=args.threshold
        )
    result = {
        "sampler": mechanism.sampler,
        "threat_model": mechanism.threat_model,
        "sigma": mechanism.sigma,
        "steps": mechanism.steps_per_epoch,
        "epochs": mechanism.epochs,
        "attack": name,
        "trials": trials,
        "alpha": args.alpha,
        "delta": args.delta,
        "threshold": args.threshold,
        "seed": args.seed,
        "epsilon_lb": bound.epsilon_lb,
        "epsilon_optimistic": bound.epsilon_optimistic,
        "epsilon_optimistic_label": bound.optimistic_label,
        "theory": {
            "upper": _finite(curve_epsilon(upper, args.delta)),
            "lower": _finite(curve_epsilon(lower, args.delta)),
        },
        "ceiling": ceiling,
        "ceiling_label": CEILING_LABEL,
        "gdp_mu_estimate": gdp.to_dict(),
        "evidence": bound.to_dict(),
    }
    if note:
        result["theory"]["note"] = note
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    from audit.report.multi_run import format_bound

    def show(value, side):
        return "n/a" if value is None else format_bound(value, side, digits=5)

    print(f"{mechanism.sampler} / {mechanism.threat_model}, sigma={mechanism.sigma:g}, "
          f"T={mechanism.steps_per_epoch}, E={mechanism.epochs}; attack {name}; "
          f"{trials} IN + {trials} OUT simulated trials")
    print(f"  eps lower bound (sound, {1 - args.alpha:.0%} confidence, {args.threshold}): "
          f"{format_bound(bound.epsilon_lb, 'lower', digits=5)} at delta={args.delta:g}")
    print(f"  eps optimistic ({bound.optimistic_label}): {bound.epsilon_optimistic:.4f}")
    print(f"  theory eps at delta: upper (guarantee) {show(result['theory']['upper'], 'upper')}, "
          f"lower (known attack) {show(result['theory']['lower'], 'lower')}")
    print(f"  GDP mu ({gdp.label}): {gdp.mu_point:.4f} (with CP bounds: {gdp.mu:.4f})")
    if ceiling is not None:
        print(f"  ceiling with {trials} trials, same strategy ({CEILING_LABEL}): {ceiling:.4f}")
    if note:
        print(f"  note: {note}")
    return 0
