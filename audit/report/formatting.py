"""Numbers and figures for printing: bounds rounded to their own side, matplotlib on Agg.

Shared by :mod:`audit.report.multi_run` and :mod:`audit.report.one_run` (below both). A printed
lower bound is rounded down and an upper bound up, exactly in decimal, so the printed digits are
still a bound of the stated side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

from audit.core.plot_formats import PLOT_FORMATS, check_formats

__all__ = [
    "PLOT_DPI",
    "PLOT_FORMATS",
    "check_formats",
    "fmt",
    "format_bound",
    "pyplot",
    "round_directed",
    "save_figure",
]

PLOT_DPI = 150
"""Resolution of every PNG plot (dots per inch): a 12 x 6.2 inch trade-off plot is 1800 x 930
pixels, readable on a screen and in print (it was 80 dpi, 960 x 496, before issue 34)."""

def fmt(value: Any, digits: int = 3, side: str | None = None) -> str:
    """``value`` to ``digits`` significant digits (integers from 1000 on).

    ``side="lower"`` rounds down and ``side="upper"`` rounds up, so that a printed lower bound
    is never above the computed one, nor a printed upper bound below it (nearest otherwise).
    """
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return "∞" if value == "inf" else value
    if value == math.inf:  # as summary.json's "inf"
        return "∞"
    if side is not None and math.isfinite(value) and value != 0:
        return fmt(round_directed(float(value), digits, up=side == "upper"), digits)
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def format_bound(value: Any, side: str, digits: int = 3) -> str:
    """A bound for printing: ``side="lower"`` rounds down, ``side="upper"`` rounds up (to
    ``digits`` significant digits), so the printed number is still a bound of that side."""
    if side not in ("lower", "upper"):
        raise ValueError(f"side={side!r} must be one of: lower, upper")
    return fmt(value, digits, side=side)


def round_directed(value: float, digits: int, *, up: bool) -> float:
    """``value`` rounded up or down to ``digits`` significant digits (to an integer from 1000
    on), exactly in decimal, so that its printed digits lie on the stated side of ``value``."""
    exact = Decimal(value)
    places = 0 if abs(value) >= 1000 else exact.adjusted() - digits + 1
    rounded = exact.quantize(
        Decimal(1).scaleb(places), rounding=ROUND_CEILING if up else ROUND_FLOOR
    )
    return float(rounded)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed); imported here, on first use,
    so that the reports' numbers do not need matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Save ``fig`` at ``path`` (a ``.png``, at :data:`PLOT_DPI`) and, for each other format of
    ``formats`` (:func:`check_formats`), beside it with that suffix; the paths written."""
    path = Path(path)
    written = []
    for name in check_formats(formats):
        target = path if name == "png" else path.with_suffix(f".{name}")
        # SVG and PDF are vector formats: dpi only sets the resolution of any raster in them
        fig.savefig(target, dpi=PLOT_DPI, format=name)
        written.append(target)
    return written
