"""The ``audit`` command line: one subcommand per module in :mod:`audit.cli`.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``, and keeps its heavy imports inside ``run`` so that ``audit --help``
stays fast. A ``ValueError`` from bad input is printed as one clear line (exit code 2),
never as a stack trace.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, str] = {
    "samplers": "audit.cli.samplers",
    "check-accountant": "audit.cli.check_accountant",
    "train": "audit.cli.train",
    "simulate": "audit.cli.simulate",
    "plan": "audit.cli.plan",
    "run": "audit.cli.run",
    "report": "audit.cli.report",
    "curves": "audit.cli.curves",
    "inspect-loader": "audit.cli.inspect_loader",
}
"""Subcommand name -> module implementing it."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="audit",
        description="Empirical privacy auditing of DP-SGD under every batch sampler.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``audit`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ValueError as error:
        print(f"audit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"audit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
