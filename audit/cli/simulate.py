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
import sys
from typing import TYPE_CHECKING

from audit.core.names import (
    DEFAULT_THRESHOLD,
    OBSERVATIONS,
    SAMPLERS,
    THREAT_MODELS,
    THRESHOLD_STRATEGIES,
)

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
        "--threshold",
        default=DEFAULT_THRESHOLD,
        help=f"{', '.join(THRESHOLD_STRATEGIES)} (default {DEFAULT_THRESHOLD}, the spec's: fixed "
        "before the scores are seen, from the theory's lower curve, else from a pilot)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mechanism_arguments(parser)
    parser.set_defaults(threat_model=None)  # per sampler: default_threat_model
    for action in parser._actions:
        if action.dest == "threat_model":
            action.help = (
                f"one of: {', '.join(THREAT_MODELS)} (default: the sampler's worst case, "
                "isolated for Poisson-like samplers, adversarial for the shuffles and "
                "sampled_without_replacement)"
            )
    parser.add_argument(
        "--trials", type=int, default=100_000, help="IN and OUT trials each (default 1e5)"
    )
    parser.add_argument(
        "--attack", default=None, help="attack name (default: the best known for the sampler)"
    )
    parser.add_argument("--seed", type=int, default=0, help="audit seed (default 0)")


def default_threat_model(sampler: str) -> str:
    """The threat model whose theory is ``sampler``'s worst case, so that a simulated audit
    tests the strongest claim: ``isolated`` for a sampler whose curves are worst-case guarantees
    under both threat models (Poisson: there the isolated test's eps_lb is far above the
    adversarial one's), ``adversarial`` for the shuffles and sampling without replacement, whose
    isolated pair is not their worst case (:attr:`audit.sampling.Sampler.isolated_needs_dirac`,
    :attr:`audit.sampling.Sampler.adversarial_worst`)."""
    from audit.sampling import get_sampler

    chosen = get_sampler(sampler)
    worst = chosen.isolated_needs_dirac or chosen.adversarial_worst
    return "adversarial" if worst else "isolated"


def mechanism_from_args(args: argparse.Namespace) -> Mechanism:
    """The mechanism of the flags, checked against its sampler's rules
    (:func:`audit.sampling.validate`); without --threat-model, the sampler's worst case
    (:func:`default_threat_model`)."""
    from audit.core.mechanism import Mechanism
    from audit.sampling import validate

    threat_model = args.threat_model
    if threat_model is None:
        threat_model = default_threat_model(args.sampler)
    return validate(Mechanism(
        sampler=args.sampler,
        sigma=args.sigma,
        steps_per_epoch=args.steps,
        epochs=args.epochs,
        threat_model=threat_model,
        n=args.n,
        batch_size=args.batch_size,
        max_batch_size=args.max_batch_size,
    ))


def simulated_scores(mechanism: Mechanism, attack, trials: int, seed: int):
    """Scores of ``trials`` simulated IN and OUT trials, drawn in seeded shards (in memory:
    16 bytes per trial; :func:`streamed_scores` is the bounded-memory form)."""
    import numpy as np

    scores_in, scores_out = [], []
    for s_in, s_out in _shard_scores(mechanism, attack, trials, seed):
        scores_in.append(s_in)
        scores_out.append(s_out)
    return np.concatenate(scores_in), np.concatenate(scores_out)


def _shard_scores(mechanism, attack, trials: int, seed: int, progress: bool = False):
    """(scores_in, scores_out) of each shard of :data:`SHARD_TRIALS` trials, in order."""
    from tqdm.auto import tqdm

    from audit.core.observations import Observations
    from audit.training.simulate import simulate_shard

    shards = range(0, trials, SHARD_TRIALS)
    for shard, start in enumerate(
        tqdm(
            shards,
            desc="audit simulate",
            unit="shard",
            disable=not progress or None,
            leave=False,
            file=sys.stderr,
        )
    ):
        size = min(SHARD_TRIALS, trials - start)
        arrays = simulate_shard(mechanism, seed=seed, shard=shard, trials=size)
        metadata: dict[str, object] = {"source": "simulate"}
        observations = Observations(mechanism=mechanism, metadata=metadata, **arrays)
        yield attack.scores(observations)


BYTES_PER_TRIAL_DISK = 64
"""Scratch disk per IN + OUT trial pair while streaming: the two raw score files and the score file
(8 bytes per score each, 48), and the sorted copies and split halves that exist at one time (16)."""
BYTES_PER_TRIAL_MEMORY = 5
"""Memory per trial of the ``split`` halves (audit.stats.score_files: the permutation and the
mask)."""


def check_simulation_fits(trials: int, folder: str) -> None:
    """Refuse (one line naming --trials and the estimate) a simulation whose scratch disk in
    ``folder`` or whose memory exceeds what this machine has, before drawing anything."""
    import shutil

    from audit.core.errors import AuditInputError
    from audit.run.resources import available_memory, format_bytes
    from audit.stats.score_files import CHUNK

    disk, free = BYTES_PER_TRIAL_DISK * trials, shutil.disk_usage(folder).free
    memory, available = BYTES_PER_TRIAL_MEMORY * trials + 64 * CHUNK, available_memory()
    if disk > free:
        raise AuditInputError(
            f"--trials={trials}: the scores need about {format_bytes(disk)} of scratch disk in "
            f"{folder}, "
            f"but {format_bytes(free)} is free",
            culprit="--trials",
            fix="lower --trials, or set TMPDIR to a larger disk",
        )
    if memory > available:
        raise AuditInputError(
            f"--trials={trials}: the statistics need about {format_bytes(memory)} of memory, "
            f"but {format_bytes(available)} is available", culprit="--trials", fix="lower --trials",
        )


def streamed_scores(mechanism, attack, trials: int, seed: int, folder: str, progress: bool = False):
    """(scores_in, scores_out) of ``trials`` simulated trials as sorted score files on disk in
    ``folder`` (:class:`audit.stats.score_files.SortedScores`): memory bounded whatever ``trials``
    (the shard in flight, the sort's chunks and the split halves' 5 bytes per trial), and the
    statistics bit-identical to those of :func:`simulated_scores` (docs/design.md §8)."""
    from pathlib import Path

    import numpy as np

    from audit.run.store import write_streamed
    from audit.stats.score_files import CHUNK, sorted_scores

    work = Path(folder)
    raw = {side: work / f"{side}.f8" for side in ("scores_in", "scores_out")}
    with raw["scores_in"].open("wb") as out_in, raw["scores_out"].open("wb") as out_out:
        for s_in, s_out in _shard_scores(mechanism, attack, trials, seed, progress):
            np.asarray(s_in, dtype=float).tofile(out_in)
            np.asarray(s_out, dtype=float).tofile(out_out)

    def chunks(path: Path):
        with path.open("rb") as handle:
            while (chunk := np.fromfile(handle, dtype=float, count=CHUNK)).size:
                yield chunk

    scores = work / "scores.npz"
    write_streamed(scores, {side: (trials, chunks(path)) for side, path in raw.items()}, "")
    for path in raw.values():
        path.unlink()
    return sorted_scores(scores, "scores_in", work), sorted_scores(scores, "scores_out", work)


def _finite(value: float | None) -> float | None:
    """JSON has no inf: an infinite eps (no finite eps reaches delta) is written as null."""
    return value if value is not None and math.isfinite(value) else None


def run(args: argparse.Namespace) -> int:
    import tempfile

    from attacks import default_attack, get_attack
    from audit.core.validation import check_int

    trials = check_int("trials", args.trials, minimum=2)
    mechanism = mechanism_from_args(args)
    name = args.attack or default_attack(mechanism, "all_iterates")
    attack = get_attack(name)
    if attack.observation != "all_iterates":
        raise ValueError(
            f"attack={name!r} needs observation={attack.observation!r}; the simulator draws "
            f"{OBSERVATIONS[0]!r} only"
        )
    with tempfile.TemporaryDirectory(prefix="audit-simulate-") as folder:
        check_simulation_fits(trials, folder)
        scores_in, scores_out = streamed_scores(
            mechanism, attack, trials, args.seed, folder, progress=True
        )
        return _report(args, mechanism, name, trials, scores_in, scores_out)


def _report(
    args: argparse.Namespace, mechanism, name: str, trials: int, scores_in, scores_out
) -> int:
    import json

    from audit.core.exact_confidence import exact_confidence
    from audit.run.planning import theory_bounds
    from audit.stats.binary import (
        curve_epsilon,
        epsilon_lower_bound,
        gdp_mu_estimate,
        ideal_epsilon_lb,
        threshold_strategy,
    )

    upper, lower, note = theory_bounds(mechanism)
    confidence = exact_confidence(args.alpha)  # --alpha, bit for bit
    plan = None
    if threshold_strategy(args.threshold).needs_plan:  # fixed from the theory (§8.12)
        from audit.stats.thresholds import plan_threshold

        if lower is not None:
            plan = plan_threshold(
                lower, trials, trials, alpha=args.alpha, delta=args.delta, source="theory"
            )
        else:  # as a spec does (audit.run.proof_report): a pilot, left out of the test
            from audit.stats.thresholds import take_pilot

            taken = take_pilot(scores_in, scores_out, args.seed)
            scores_in, scores_out = taken.test_in, taken.test_out
            plan = plan_threshold(
                taken.curve, scores_in.size, scores_out.size, alpha=args.alpha,
                delta=args.delta, source="pilot", curve_name=taken.name, pilot=taken.sizes,
            )
    bound = epsilon_lower_bound(
        scores_in,
        scores_out,
        delta=args.delta,
        confidence=confidence,
        threshold=args.threshold,
        seed=args.seed,
        plan=plan,
    )
    gdp = gdp_mu_estimate(
        scores_in, scores_out, confidence=confidence, threshold=args.threshold,
        seed=args.seed, plan=plan,
    )
    ceiling = None
    if lower is not None:
        ceiling = ideal_epsilon_lb(
            lower, trials, delta=args.delta, confidence=confidence, threshold=args.threshold,
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
