"""The ``audit`` command line: one subcommand per module in :mod:`audit.cli`.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``, and keeps its heavy imports inside ``run`` so that ``audit --help``
stays fast. Every failure is printed as one line naming its culprit, with the exit code of
:mod:`audit.core.errors` (2 bad input, 3 environment and I/O, 4 internal error, 130 interrupted),
never as a stack trace unless ``--debug`` is given (before or after the subcommand).

The library's messages go through :mod:`logging` (the ``audit`` logger and its children,
``logging.getLogger(__name__)`` in each module); :func:`main` sends them to stderr as the one line
users see, ``audit: <message>`` (:func:`configure_logging`): INFO and above by default, WARNING
and above with ``audit --quiet``, DEBUG with ``audit --verbose`` (given before the subcommand: a
subcommand's own ``--quiet`` silences its progress bar only). A program that imports the library
configures logging itself; the library adds no handler.
"""

from __future__ import annotations

import argparse
import decimal
import importlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

__all__ = ["COMMANDS", "configure_logging", "integer", "main", "output_path"]

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
    "replay": "audit.cli.replay",
    "run-script": "audit.cli.run_script",
    "scores": "audit.cli.scores",
}
"""Subcommand name -> module implementing it."""


def integer(text: str) -> int:
    """An integer option's value: ``1000000``, ``1e6``, ``1_000_000`` or ``2.5e3`` (read exactly,
    as a decimal, so ``1e12`` is 10**12); a value with a fraction is refused."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = decimal.Decimal(text.replace("_", ""))
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    return int(value)


integer.__name__ = "int"  # argparse names the type in its errors: "invalid int value"


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--format png,svg,pdf``: the plots' file formats (:func:`plot_formats` reads it)."""
    parser.add_argument(
        "--format",
        dest="formats",
        default="png",
        metavar="FORMATS",
        help="plot formats, comma-separated: png (always, 150 dpi), svg, pdf; e.g. png,svg",
    )


def plot_formats(args: argparse.Namespace) -> tuple[str, ...]:
    """The formats ``--format`` names (:func:`audit.core.plot_formats.check_formats`), checked
    before any work without importing the report stage.

    Raises:
        AuditInputError: one line naming ``--format``, the allowed formats and the closest.
    """
    from audit.core.errors import AuditInputError
    from audit.core.plot_formats import check_formats

    try:
        return check_formats(args.formats, name="--format")
    except ValueError as error:
        raise AuditInputError(str(error), culprit="--format") from None


def output_path(option: str, path: str, suffix: str | None = None) -> Path:
    """The file an option names for writing, checked before any work: its folder must exist
    (never created silently) and be a folder, and it must end in ``suffix`` when given.

    Raises:
        AuditInputError: naming the option, the path and what to do.
    """
    from audit.core.errors import AuditInputError

    out = Path(path)
    if suffix is not None and out.suffix != suffix:
        raise AuditInputError(f"{option}={path!r} must end in {suffix}", culprit=option)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise AuditInputError(
            f"{option}={path!r}: the folder {folder} does not exist", culprit=option,
            fix=f"create it first (mkdir -p {folder}) or give another path",
        )
    if out.is_dir():
        raise AuditInputError(f"{option}={path!r} is a folder; give a file name", culprit=option)
    return out


LOGGER = "audit"
"""The logger every library module logs under (``logging.getLogger(__name__)``)."""


class _OneLine(logging.Formatter):
    """``audit: <message>``, the form of the harness's lines on stderr; a message that already
    names its command (``audit ...``) is left as it is, and newlines are folded. A logged
    exception adds its last line (``Type: message``), or its whole traceback with
    ``tracebacks`` (``--debug``)."""

    def __init__(self, *, tracebacks: bool = False) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(record.getMessage().splitlines())
        text = text if text.startswith(("audit:", "audit ")) else f"audit: {text}"
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            text += "\n" + trace if self.tracebacks else f" ({trace.splitlines()[-1]})"
        return text


class _Stderr(logging.StreamHandler):
    """A handler writing to the ``sys.stderr`` of the moment (a test's captured stream, a
    redirected one), not to the one of the handler's creation."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    *, quiet: bool = False, verbose: bool = False, debug: bool = False
) -> logging.Handler:
    """Send the ``audit`` loggers' messages to stderr, one line each (:class:`_OneLine`): INFO
    and above, WARNING and above with ``quiet``, DEBUG with ``verbose``; ``debug`` keeps a logged
    exception's traceback. Replaces the handler an earlier call installed (one handler whatever
    the number of calls); returns it."""
    logger = logging.getLogger(LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, _Stderr)]:
        logger.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(_OneLine(tracebacks=debug))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    logger.propagate = False  # printed once, here, even where the root logger has a handler
    return handler


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="audit",
        description="Empirical privacy auditing of DP-SGD under every batch sampler.",
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of a failure")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("--quiet", "-q", dest="log_quiet", action="store_true",
                          help="print warnings and errors only, not the library's notes")
    loudness.add_argument("--verbose", "-v", dest="log_verbose", action="store_true",
                          help="also print the library's debug messages")
    from audit import __version__

    parser.add_argument("--version", action="version", version=f"audit {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(
            name, help=module.HELP, description=module.__doc__, parents=[common]
        )
        module.add_arguments(command)
        for action in command._actions:  # every integer option reads 1e6-style integers too
            if action.type is int:
                action.type = integer
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``audit`` console script."""
    from audit.core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, exit_code, one_line

    parser = build_parser()
    args = parser.parse_args(argv)
    logger = logging.getLogger(LOGGER)
    before = (logger.level, logger.propagate)
    handler = configure_logging(quiet=args.log_quiet, verbose=args.log_verbose, debug=args.debug)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends a run as Ctrl-C does
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"audit {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`audit ... | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
    except Exception as error:  # every failure: one line and its exit code (audit.core.errors)
        if args.debug:
            traceback.print_exc()
        code = exit_code(error)
        hint = "; this is a bug of the harness: please report it" if code == EXIT_INTERNAL else ""
        debug = "" if args.debug else " (--debug for the traceback)"
        print(
            f"audit {args.command}: error: "
            f"{one_line(error)}{hint}{debug if code == EXIT_INTERNAL else ''}",
            file=sys.stderr,
        )
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)
        # a program (or a test) that calls main() finds its logging as it was
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM raises KeyboardInterrupt: the run stops as on Ctrl-C (finished shards kept,
    joblib's workers shut down, the run folder's lock released)."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
