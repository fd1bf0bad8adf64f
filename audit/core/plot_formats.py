"""The file formats a plot can be written in, and the check of a user's list of them.

Here, below every stage, so that a CLI command checks ``--format`` before any work without
importing the report stage (numpy, scipy, matplotlib: ``audit curves`` without a plot imports
none of them, tests/test_cli_start.py); :mod:`audit.report.formatting` re-exports both.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PLOT_FORMATS", "check_formats"]

PLOT_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")
"""The file formats a plot can be written in. PNG is always written (report.md shows it); SVG and
PDF (vector, for papers) beside it, with the same name and their suffix, when asked for."""


def check_formats(formats: str | Sequence[str], *, name: str = "formats") -> tuple[str, ...]:
    """The plot formats ``formats`` names (``"png,svg"`` or a sequence; case and spaces ignored),
    PNG first and always, each once.

    Raises:
        ValueError: naming the field (``name``: the argument, or the CLI's ``--format``), the
            unknown format, the allowed ones and the closest.
    """
    import difflib

    names = formats.split(",") if isinstance(formats, str) else list(formats)
    chosen = ["png"]
    for raw in names:
        each = str(raw).strip().lower().lstrip(".")
        if not each:
            continue
        if each not in PLOT_FORMATS:
            close = difflib.get_close_matches(each, PLOT_FORMATS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{name}: unknown plot format {raw!r}; allowed: {', '.join(PLOT_FORMATS)}{hint}"
            )
        if each not in chosen:
            chosen.append(each)
    return tuple(chosen)
