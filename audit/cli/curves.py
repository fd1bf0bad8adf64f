"""Theoretical trade-off curves of one mechanism: eps at delta for every bound, and a plot.

For the chosen sampler and threat model, prints each known curve -- ``upper`` (guarantee),
``lower`` (achieved by a known pair of datasets), ``exact`` where computed -- with how it
was computed and its epsilon at the given delta. ``--plot FILE.png`` draws all curves on
(FPR, FNR) axes beside a panel with a log-scale FPR axis for the small-FPR region, saved as every
plot of the harness is (:func:`audit.report.formatting.save_figure`: the PNG at 150 dpi, and with
``--format png,svg,pdf`` the same figure beside it as ``FILE.svg`` / ``FILE.pdf``).

Isolated shuffles also list, side by side: the Berry-Esseen bound alone, the random-
allocation upper bound (:mod:`audit.theory.random_allocation`, where that module exists)
and the Edgeworth ``approximation`` (dashed; an approximation, not a bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports its stages lazily (fast start); these are for the checker
    from pathlib import Path

    from audit.theory.curve import TradeOffCurve
    from audit.theory.types import Bounds

HELP = "theoretical trade-off curves (upper/lower/exact) of a sampler, eps at delta, plot"


@dataclass(frozen=True)
class CurveRow:
    """One listed curve: its roles (``upper``, ``lower``, ``exact`` or a side-by-side extra), its
    label, kind and method, and its epsilon at ``delta``; a ``curves`` entry of ``--json``."""

    roles: tuple[str, ...]
    label: str
    kind: str
    method: str
    epsilon: float
    delta: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sampler", required=True, help="batch sampler (e.g. poisson, dynamic_shuffle)"
    )
    parser.add_argument("--sigma", type=float, required=True, help="noise multiplier sigma")
    parser.add_argument("--steps", type=int, required=True, help="steps per epoch T")
    parser.add_argument("--epochs", type=int, default=1, help="epochs E (default 1)")
    parser.add_argument(
        "--threat-model",
        default="adversarial",
        help="isolated or adversarial (default adversarial)",
    )
    parser.add_argument("--delta", type=float, default=1e-5, help="delta for eps (default 1e-5)")
    parser.add_argument(
        "--n", type=int, default=None, help="dataset size (Poisson q = b/n; truncated Poisson)"
    )
    parser.add_argument("--max-batch-size", type=int, default=None, help="B for truncated_poisson")
    parser.add_argument(
        "--plot", default=None, metavar="FILE.png", help="write a plot of all curves (a .png)"
    )
    from audit.cli import add_format_argument

    add_format_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from audit.core.validation import check_probability
    from audit.sampling import get_sampler
    from audit.theory import privacy_bounds

    delta = check_probability("delta", args.delta)

    from audit.cli import plot_formats

    formats = plot_formats(args)  # before any work
    if args.plot:
        from audit.cli import output_path

        output_path("--plot", args.plot, ".png")
    bounds = privacy_bounds(
        args.sampler, sigma=args.sigma, steps_per_epoch=args.steps, epochs=args.epochs,
        threat_model=args.threat_model, n=args.n, max_batch_size=args.max_batch_size,
    )
    rows = [
        CurveRow(tuple(roles), curve.label, curve.kind, curve.method,
                 float(np.asarray(curve.epsilon(np.array([delta])))[0]), delta)
        for roles, curve in _listed(bounds)
    ]
    m = bounds.mechanism
    summary = {
        "sampler": m.sampler,
        "threat_model": m.threat_model,
        "sigma": m.sigma,
        "steps_per_epoch": m.steps_per_epoch,
        "epochs": m.epochs,
        "sampling_probability": None
        if get_sampler(m.sampler).fixed_size
        else m.sampling_probability,
        "curves": [dataclasses.asdict(row) for row in rows],
        "notes": list(bounds.notes),
    }
    written: list[str] = []
    if args.plot:
        written = [str(path) for path in _plot(bounds, args.plot, delta, formats)]
        summary["plot"] = args.plot
    if args.json:
        print(json.dumps(summary, indent=2, default=_json_float))
        return 0
    print(f"{m.sampler} / {m.threat_model}: sigma={m.sigma:g}, T={m.steps_per_epoch}, E={m.epochs}"
          + (f", q={m.sampling_probability:.4g}" if summary["sampling_probability"] else ""))
    for row in rows:
        joined = "=".join(row.roles)
        print(f"  {joined:<18} eps({delta:g}) = {row.epsilon:<10.5g} {row.method}")
    for note in bounds.notes:
        print(f"  note: {note}")
    if written:
        print(f"  plot: {', '.join(written)}")
    return 0


def _json_float(value: object) -> object:
    return str(value)


def _listed(bounds: Bounds) -> list[tuple[list[str], TradeOffCurve]]:
    """(roles, curve) for every distinct curve: the bounds, then the side-by-side extras."""
    from audit.sampling import get_sampler

    out = [
        ([r for r in ("upper", "lower", "exact") if getattr(bounds, r) is curve], curve)
        for curve in bounds.curves()
    ]
    m = bounds.mechanism
    if m.threat_model == "isolated" and get_sampler(m.sampler).isolated_needs_dirac:  # the shuffles
        from audit.theory.shuffle_isolated import berry_esseen_curve

        extras: list[tuple[str, TradeOffCurve | None]] = [("berry_esseen", berry_esseen_curve(
            m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler))]
        try:  # the random-allocation bound, where its module exists
            from audit.theory.random_allocation import random_allocation_curves
        except ImportError:
            pass
        else:
            if not get_sampler(m.sampler).same_step_every_epoch:  # dynamic shuffling
                upper, _ = random_allocation_curves(m.sigma, m.steps_per_epoch, m.epochs)
                extras.append(("random_allocation", upper))
        extras.append(("approximation", bounds.approximation))
        for role, curve in extras:
            if curve is not None and all(curve is not c for _, c in out):
                out.append(([role], curve))
    return out


def _plot(bounds: Bounds, path: str, delta: float, formats: tuple[str, ...]) -> list[Path]:
    """Draw every listed curve and save it (:func:`audit.report.formatting.save_figure`); the
    files written."""
    import numpy as np

    from audit.report.figures import legend_below
    from audit.report.formatting import pyplot, save_figure

    plt = pyplot()
    styles = {"upper": ("tab:blue", "-"), "lower": ("tab:red", "--"), "exact": ("k", ":"),
              "berry_esseen": ("tab:cyan", "-"), "random_allocation": ("tab:purple", "-"),
              "approximation": ("tab:orange", "--")}
    listed = _listed(bounds)
    fig, (lin, log) = plt.subplots(1, 2, figsize=(11, 6.5), layout="constrained")
    lin_a = np.linspace(0.0, 1.0, 1001)
    log_a = np.logspace(-8, 0, 1001)
    for roles, curve in listed:
        colour, ls = styles[roles[0] if roles else curve.kind]
        eps = float(np.asarray(curve.epsilon(np.array([delta])))[0])
        label = f"{curve.label}, eps({delta:g})={eps:.3g}"
        if curve.kind == "approximation":
            label += " (approximation, not a bound)"
        lin.plot(lin_a, curve(lin_a), color=colour, ls=ls, label=label)
        log.plot(log_a, curve(log_a), color=colour, ls=ls, label=label)
    lin.plot(lin_a, 1 - lin_a, color="0.7", lw=0.8, label="random guessing")
    log.plot(log_a, 1 - log_a, color="0.7", lw=0.8)
    for ax in (lin, log):
        ax.set_xlabel("FPR (alpha)")
        ax.set_ylabel("FNR (beta)")
        ax.set_ylim(0, 1)
    lin.set_xlim(0, 1)
    lin.set_title("trade-off curves")
    log.set_xscale("log")
    log.set_xlim(1e-8, 1)
    log.set_title("small FPR (log scale)")
    m = bounds.mechanism
    fig.suptitle(
        f"{m.sampler} / {m.threat_model}: sigma={m.sigma:g}, T={m.steps_per_epoch}, E={m.epochs}"
    )
    legend_below(fig, lin, ncol=2, fontsize=8)
    written = save_figure(fig, path, formats)
    plt.close(fig)
    return written
