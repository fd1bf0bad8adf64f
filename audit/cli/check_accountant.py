"""Check a privacy accountant's claimed eps(delta) against proven bounds over a grid.

For every configuration of the grid that the accountant supports, its claim is compared with
the sampler's own theory: the exact value (deterministic), the
tight PLD bracket (Poisson), the truncation coupling (truncated Poisson), the proven lower bounds
of Chua et al. 2024 (shuffles, both threat models) and the random-allocation pair
(balls-and-bins), under the neighbouring relation of --adjacency (zero_out, the harness's,
by default; add_remove is Opacus's and dp_accounting's; replace_one). Each cell gets a verdict:

  unsound     the claim is below a proven lower bound (beyond 1e-3 + 0.1%)
  invalid     nan, negative, not a number, an exception (its message), inf where the
              guarantee is finite, or a second answer that differs from the first
  unverified  between the proven lower and upper bounds, or no upper bound is known
  loose       above the proven upper bound by more than 0.01 + 5%
  ok          at or above the proven upper bound (within 1e-3 + 0.1%), within the margin

and the table gives claim/lower and claim - lower, each cell once, with one sentence per cell
that is not ok. Grids: 'default' (16 cells, fast), 'thorough' (up to 1e5 steps, deltas down
to 1e-10, the same (sigma, q) at growing step counts, small epsilons; asked in a random order
of seed 0, each cell twice, so that a stateful accountant shows), or a file. The theory's
brackets are cached on disk (--theory-cache; keyed by the cell and the code's fingerprint).

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

Exit status: the most severe verdict among those of --fail-on (default: unsound,invalid):
1 unsound, 5 invalid, 6 unverified, 7 loose; 0 when no cell has one of them; 2 on bad input
(3 and 4: the harness's environment and internal errors).
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
        help="'default', 'thorough' or a .toml/.json grid file (entries of Mechanism fields and "
             "delta; lists expand)",
    )
    parser.add_argument(
        "--adjacency", default=None, metavar="RELATION",
        help="neighbouring relation of the check: zero_out (default), add_remove, replace_one",
    )
    parser.add_argument(
        "--fail-on", default="unsound,invalid", metavar="VERDICTS",
        help="comma-separated verdicts that give a non-zero exit status (default "
             "unsound,invalid; also unverified, loose)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None,
        help="ask each cell this many times (default: 2 for thorough, else 1)",
    )
    parser.add_argument(
        "--order-seed", type=int, default=None,
        help="ask the cells in a random order of this seed (default: 0 for thorough, else the "
             "grid's order)",
    )
    parser.add_argument(
        "--theory-cache", default=None, metavar="DIR",
        help="folder of the theory's cached brackets, or 'off' (default: $AUDIT_THEORY_CACHE, "
             "else ~/.cache/dpsgd-audit/theory)",
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

    fail_on = [v.strip() for v in args.fail_on.split(",") if v.strip()]
    cache: object = None
    if args.theory_cache is not None:
        cache = False if args.theory_cache.strip().lower() in ("off", "none", "") else (
            args.theory_cache)
    try:
        report = check_accountant(
            args.name,
            args.grid,
            adjacency=args.adjacency,
            repeats=args.repeats,
            order_seed=args.order_seed,
            fail_on=fail_on,
            cache=cache,  # type: ignore[arg-type]
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
    return report.exit_code()
