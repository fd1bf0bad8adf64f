"""Check a privacy accountant's claimed eps(delta) against proven bounds over a grid.

For every configuration of the grid that the accountant supports, its claim is compared with
the sampler's own theory: the exact value (deterministic), the
tight PLD bracket (Poisson), the truncation coupling (truncated Poisson), the proven lower bounds
of Chua et al. 2024 (shuffles, both threat models) and the random-allocation pair
(balls-and-bins). Each cell is ``unsound`` (claim below a proven lower bound beyond numerical
tolerance), ``loose`` (above the best upper bound by more than the stated margin) or ``ok``.

NAME is a built-in adapter (dp-accounting-pld, dp-accounting-rdp, opacus-rdp, opacus-prv,
opacus-gdp, prv-accountant, poisson-for-shuffle, pld-accounting-random-allocation), a
registered name, or an import path
``package.module:function`` of a callable ``(mechanism, delta) -> eps | Unsupported``.

A grid file (.toml or .json) lists cells of Mechanism fields and delta; a list value stands for
all its values (Cartesian product), e.g. in TOML:

    [[cells]]
    sampler = "poisson"
    sigma = [0.8, 1.0]
    steps_per_epoch = 100
    epochs = 10
    delta = 1e-5

    [[cells]]
    sampler = ["persistent_shuffle", "dynamic_shuffle"]
    threat_model = ["adversarial", "isolated"]
    sigma = 0.8
    steps_per_epoch = 1000
    delta = 1e-6

Exit status: 0 when no cell is unsound, 1 when some cell is, 2 on bad input.
"""

from __future__ import annotations

import argparse

HELP = (
    "check an accountant's claimed eps against exact values, PLD brackets and proven lower bounds"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the TOML example's lines
    parser.add_argument(
        "name", metavar="NAME", help="accountant: built-in name or package.module:function"
    )
    parser.add_argument(
        "--grid",
        default="default",
        help="'default' or a .toml/.json grid file (entries of Mechanism fields and delta; lists "
             "expand)",
    )
    parser.add_argument(
        "--empirical", type=int, default=None, metavar="TRIALS",
        help="confirm unsound cells with a simulated audit of TRIALS IN and TRIALS OUT runs",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="1 - confidence of the empirical bound (default 0.05)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="audit seed of the simulations (default 0)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON (cells, unsupported, counts) instead of a table",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-cell progress on stderr")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from audit.accounting.adapters import MissingAccountantDependency
    from audit.accounting.check import check_accountant

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        report = check_accountant(
            args.name,
            args.grid,
            empirical_trials=args.empirical,
            alpha=args.alpha,
            seed=args.seed,
            progress=None if args.quiet or not sys.stderr.isatty() else progress,
        )
    except MissingAccountantDependency as error:
        raise ValueError(str(error)) from error
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.table())
    return 1 if report.unsound else 0
