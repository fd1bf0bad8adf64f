"""Numbers, levels and figures for printing: bounds rounded to their own side, the confidence
of every statement in one wording, matplotlib on Agg.

Shared by :mod:`audit.report.multi_run` and :mod:`audit.report.one_run` (below both). A printed
lower bound is rounded down and an upper bound up, exactly in decimal, so the printed digits are
still a bound of the stated side.

One confidence story (docs/design.md §8.7, §9.1): :func:`bound_level` is the level of every
eps_lb and :func:`verdict_level` that of every ``violated`` verdict, in the words report.md's
header, each cell's sentence and the CLI all print. A cell's eps_lb and each of its verdict's
two tests (the curve test, eps_lb above the claimed eps) are computed at the cell's alpha
(alpha, or alpha / K for K cells with ``confidence = "family"``); a verdict is violated when
either test refutes (or, with findings, a finding at family-wise alpha_f), so by Bonferroni a
correct claim is called violated with probability at most 2 alpha + alpha_f, per cell or for
all cells at once as the scope says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

from audit.core.plot_formats import PLOT_FORMATS, check_formats
from audit.run.results import Confidence

__all__ = [
    "PLOT_DPI",
    "PLOT_FORMATS",
    "bound_level",
    "check_formats",
    "fmt",
    "format_bound",
    "pyplot",
    "round_directed",
    "save_figure",
    "verdict_level",
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


def percent(level: float) -> str:
    """A confidence level in percent, rounded down to 4 significant digits (``95%``,
    ``85.55%``), so the printed level is never above the one that holds; float noise (1 - 2
    x 0.05 = 0.8999...) is removed first, at 10 digits."""
    value = 100 * float(f"{level:.10g}")
    return f"{round_directed(value, 4, up=False):g}%" if value > 0 else f"{value:g}%"


def bound_level(confidence: Confidence) -> str:
    """The confidence of every eps_lb, as report.md's header and each cell's sentence state it:
    ``95% confidence per cell`` or ``95% for all 4 cells at once, confidence = "family":
    Bonferroni α / 4 = 0.0125 per cell``."""
    if not confidence.family:
        return f"{percent(confidence.level)} confidence per cell"
    return (
        f"{percent(confidence.level)} for all {confidence.cells} cells at once, confidence = "
        f'"family": Bonferroni α / {confidence.cells} = {confidence.alpha:.3g} per cell'
    )


def verdict_level(confidence: Confidence, findings_alpha: float = 0.0) -> str:
    """The confidence of every ``violated`` verdict: the union of the curve test and the eps_lb
    test, each at the cell's alpha, and (``findings_alpha`` > 0) the findings at family-wise
    ``findings_alpha``, so 1 - 2 alpha - alpha_f (Bonferroni), per cell or, with
    ``confidence = "family"`` (each cell's tests at alpha / K), for all K cells at once."""
    # eps_lb's alpha: the cell's (scope cell; a deployed audit's, over its score statistics) or
    # the family's, split as alpha / K over the K cells
    alpha = 1 - confidence.level
    level = max(0.0, 1 - 2 * alpha - findings_alpha)
    tests = (
        f"its curve test and its ε_lb test each at α = {alpha:.3g}"
        if not confidence.family
        else f"each cell's curve test and ε_lb test at α / {confidence.cells} = "
             f"{confidence.alpha:.3g}"
    )
    findings = (
        f", the findings at α = {findings_alpha:.3g} for the whole run" if findings_alpha else ""
    )
    scope = (
        "confidence per cell" if not confidence.family
        else f"for all {confidence.cells} cells at once"
    )
    return f"{percent(level)} {scope} ({tests}{findings}; Bonferroni)"
