"""Plan an audit: how many trials (IN and OUT each) are needed to show a claimed eps violated
(eps_lb > claim) with probability 0.9 at confidence 1 - alpha, if the best known attack
attains the theory's lower curve for the mechanism (audit.run.planning). With ``--threshold
planned`` the projection is the planned rule itself (the rank the audit plans from the curve
and the trial counts, and its joint test); the output says which strategy it projects."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from audit.cli.simulate import add_mechanism_arguments, mechanism_from_args

if TYPE_CHECKING:
    from audit.core.mechanism import Mechanism
    from audit.theory.curve import TradeOffCurve

HELP = "trials an audit needs to show a claimed eps violated (or certify an eps)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mechanism_arguments(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--claim", type=float, help="a claimed eps (at --delta) to show violated (eps_lb > claim)"
    )
    target.add_argument(
        "--certify", type=float, help="an eps (at --delta) to certify (eps_lb >= it)"
    )
    target.add_argument("--size-for", type=float, metavar="EPS",
                        help="isolated shuffles: the rounds M and dataset size N = b M that give "
                             "(EPS, --delta) under the tighter of the Berry-Esseen linear "
                             "composition and the numerical random-allocation guarantee "
                             "(--steps is ignored; b = --batch-size, default 10)")
    parser.add_argument(
        "--power", type=float, default=0.9, help="probability of success (default 0.9)"
    )
    parser.add_argument(
        "--one-run",
        action="store_true",
        help="size m, the canaries of a one-run audit (audit = 'one_run'), instead of the trials",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from audit.run.planning import theory_bounds, trials_needed

    if args.size_for is not None:
        return _size_for(args)
    mechanism = mechanism_from_args(args)
    _upper, lower, note = theory_bounds(mechanism)
    if lower is None:
        raise ValueError(
            f"no theory lower curve for sampler={mechanism.sampler!r}, "
            f"threat_model={mechanism.threat_model!r}"
            + (f" ({note})" if note else "")
            + "; cannot plan without the curve a known attack attains"
        )
    certify = args.claim is None
    target = args.certify if certify else args.claim
    if args.one_run:
        return _one_run(args, mechanism, lower, target)
    plan = trials_needed(
        lower,
        target,
        delta=args.delta,
        alpha=args.alpha,
        power=args.power,
        threshold=args.threshold,
        goal="certify" if certify else "violate",
    )
    result = {
        "sampler": mechanism.sampler,
        "threat_model": mechanism.threat_model,
        "sigma": mechanism.sigma,
        "steps": mechanism.steps_per_epoch,
        "epochs": mechanism.epochs,
        "claim": args.claim,
        "certify": args.certify,
        **plan.to_dict(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{mechanism.sampler} / {mechanism.threat_model}, sigma={mechanism.sigma:g}, "
          f"T={mechanism.steps_per_epoch}, E={mechanism.epochs}: the known attack's curve has "
          f"eps = {plan.curve_epsilon:.4f} at delta = {args.delta:g}")
    if plan.reachable:
        goal = (
            f"certify eps >= {target:g}" if certify else f"show the claim eps = {target:g} violated"
        )
        print(
            f"  to {goal} with probability {args.power:g} at confidence "
            f"{1 - args.alpha:.0%} ({args.threshold}): about {plan.trials} IN and {plan.trials} "
            "OUT trials"
        )
        print(f"  projected: {plan.projection}")
        print(f"  ({plan.note})")
    else:
        print(f"  not reachable: {plan.note}")
    return 0


def _one_run(
    args: argparse.Namespace, mechanism: Mechanism, lower: TradeOffCurve, target: float
) -> int:
    """``--one-run``: the canaries m whose projected one-run eps_lb reaches the target, the
    rule planned from the theory curve at that m and what the default rule family costs
    against it (:func:`audit.run.planning.rule_family_price`)."""
    import json

    from audit.run.planning import canaries_needed

    plan = canaries_needed(lower, target, delta=args.delta, alpha=args.alpha, power=args.power)
    if args.json:
        print(json.dumps({"sampler": mechanism.sampler, "threat_model": mechanism.threat_model,
                          "one_run": True, **plan.to_dict()}, indent=2))
        return 0
    print(
        f"{mechanism.sampler} / {mechanism.threat_model}, sigma={mechanism.sigma:g}, "
        f"T={mechanism.steps_per_epoch}, "
        f"E={mechanism.epochs}, one run:"
    )
    if plan.reachable:
        print(
            f"  eps_lb >= {target:g} at delta = {args.delta:g}, confidence {1 - args.alpha:.0%}, "
            "with probability "
            f"about {args.power:g}: about {plan.canaries} canaries in one training ({plan.note})"
        )
    else:
        print(f"  {plan.note}")
    price = plan.price
    if price is not None:
        print(
            f"  planned rule (fixed now from the theory curve, tested at alpha; audit.toml: "
            f"guesses = [{price.planned_k_plus}, {price.planned_k_minus}]): projected eps_lb "
            f"{price.planned_epsilon_lb:.3f} at m = {price.canaries}; the default "
            f"{price.candidates}-rule family (each at alpha/{price.candidates}) projects "
            f"{price.family_epsilon_lb:.3f}: it costs {100 * price.cost:.0f}% of eps_lb at this "
            "setting"
        )
        print(
            f"  GDP family (mu_lb; its eps is an estimate under the Gaussian-shape assumption): "
            f"planned rule [{price.gdp_k_plus}, {price.gdp_k_minus}] projects mu_lb "
            f"{price.planned_mu_lb:.3f}, the {price.candidates}-rule family "
            f"{price.family_mu_lb:.3f}: it costs {100 * price.mu_cost:.0f}% of mu_lb (correct "
            f"counts at their {price.quantile:.2g}-quantile in both)"
        )
    return 0


def _size_for(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from audit.theory.calibration import shuffle_rounds

    if args.threat_model != "isolated":
        raise ValueError("--size-for needs --threat-model isolated (the random-allocation pair)")
    plan = shuffle_rounds(args.sigma, args.delta, args.epochs, epsilon=args.size_for,
                          batch_size=args.batch_size or 10, sampler=args.sampler)
    if args.json:
        print(json.dumps({"sampler": args.sampler, "sigma": args.sigma, "epochs": args.epochs,
                          "epsilon": args.size_for, "delta": args.delta, **asdict(plan)}, indent=2))
        return 0
    print(f"{args.sampler} / isolated, sigma={args.sigma:g}, E={args.epochs}: "
          f"(eps, delta) = ({args.size_for:g}, {args.delta:g}) needs")
    print(f"  Berry-Esseen, linear composition: M = {plan.berry_esseen or 'out of reach'}")
    print(
        "  random allocation (numerical):    M = "
        f"{plan.random_allocation or 'above 1e7 or not computable'}"
    )
    if plan.rounds is not None:
        print(
            f"  tighter ({plan.bound}): M = {plan.rounds}, N = b M = {plan.examples} (b = "
            f"{plan.batch_size})"
        )
    return 0
