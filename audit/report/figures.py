"""Legends a reader can read whole: wrapped labels, a legend outside the data, and the check.

A plot's legend states what each line is (the theory curve's method, the claim's epsilon and
delta, the confidence of the boxes); a legend cut mid-number (``q = 0.0…``) or drawn over the
data hides the very number a reader looks for. Every figure of the report stage therefore

* wraps each label at :data:`LABEL_WIDTH` characters (:func:`wrap_label`), never cuts it;
* puts the legend outside the axes, below them, in a figure laid out by matplotlib's
  constrained layout (:func:`legend_below`), so the axes shrink to make room;
* can be checked (:func:`legend_problems`): every legend inside the figure, overlapping no axes,
  its texts the full labels. tests/test_figures.py checks every plot of the report stage.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

__all__ = ["LABEL_WIDTH", "legend_below", "legend_problems", "wrap_label"]

LABEL_WIDTH = 60
"""Characters per line of a wrapped legend label."""


def wrap_label(text: str, width: int = LABEL_WIDTH) -> str:
    """``text`` wrapped at ``width`` characters on spaces (a word longer than the width stays
    whole): the whole label, on as many lines as it needs."""
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False,
                                   break_on_hyphens=False)) or text


def legend_below(fig: Any, axes: Sequence[Any] | Any, *, ncol: int = 2,
                 fontsize: float = 7) -> Any:
    """One legend for ``fig`` with the distinct labelled artists of ``axes``, wrapped
    (:func:`wrap_label`), below the axes: ``fig`` must use the constrained layout
    (``plt.subplots(..., layout="constrained")``), which makes room for it."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes if isinstance(axes, Sequence) else [axes]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    return fig.legend(handles, [wrap_label(label) for label in labels],
                      loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False)


def legend_problems(fig: Any, labels: Sequence[str] | None = None) -> list[str]:
    """What is wrong with ``fig``'s legends, in words (empty when nothing is): a legend text
    cut with an ellipsis or, given ``labels``, not one of them in full; a legend outside the
    figure or over an axes' data area."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    figure_box = fig.bbox
    problems: list[str] = []
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        if (box.x0 < figure_box.x0 - 1 or box.y0 < figure_box.y0 - 1
                or box.x1 > figure_box.x1 + 1 or box.y1 > figure_box.y1 + 1):
            problems.append(f"a legend reaches outside the figure ({box.bounds})")
        for ax in fig.axes:
            if box.overlaps(ax.get_window_extent(renderer)):
                problems.append(f"a legend overlaps the axes {ax.get_title() or ax.get_xlabel()!r}")
        for text in legend.get_texts():
            shown = " ".join(text.get_text().split())
            if "…" in shown or shown.endswith("..."):
                problems.append(f"a legend text is cut: {shown!r}")
            if labels is not None and shown not in [" ".join(label.split()) for label in labels]:
                problems.append(f"a legend text is not a full label: {shown!r}")
    return problems
