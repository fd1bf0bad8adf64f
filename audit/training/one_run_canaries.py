"""Input canaries of a one-run audit: m examples in one training, and their last-iterate scores.

Examples 0..m-1 of the n training rows (:func:`audit.core.data.load_training_rows`) are the
canaries, each IN with probability 1/2 (:func:`audit.stats.one_run.canary_membership`); an OUT
canary keeps its slot with weight 0 (zero-out adjacency, as every multi-run input canary:
:meth:`audit.plugins.contract.Canary.place`). Two kinds, the one-run versions of
:mod:`audit.training.canaries`' input canaries:

- ``ood``: canary j is ``x_j = scale * e_{D+j}`` with label ``canary_label``, on one of m
  input features appended after the D features of the rows (0 for every real example), so the
  first-layer weights leaving feature D+j (canary j's *private column*) are moved by canary
  j and the noise only, as the multi-run ``ood`` canary's private row;
- ``mislabeled``: canary j is real example j with the next label, (y_j + 1) mod classes.

Observations (docs/design.md §3.5, one per canary):

- black box: canary j's cross-entropy on its label under the final parameters (lower = IN),
  and its logits;
- last iterate: ``final_j = (b / (lr C)) <theta_0 - theta_S, u_j>`` with u_j = g_j / ||g_j||,
  g_j canary j's loss gradient at theta_0, restricted to its private column for ``ood`` (as
  the multi-run ``ood`` u) and whole for ``mislabeled`` (real data move along it too, which
  only weakens the score). Each SGD step on an IN canary moves theta along -clip(g_j), so
  ``final_j`` is higher for IN canaries (:class:`attacks.simple.FinalProjection`).

Any score is sound for the one-run bounds (Steinke, Nasr, Jagielski 2023, Theorem 3.1: the
guesses may be any function of the training's output); these are the ones with the signal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from audit.core.data import Dataset
from audit.core.names import INPUT_CANARIES
from audit.core.validation import check_choice, check_int, check_real

__all__ = ["ONE_RUN_INPUT_CANARIES", "ONE_RUN_OBSERVATIONS", "canary_rows", "last_iterate_scores"]

ONE_RUN_INPUT_CANARIES: tuple[str, ...] = INPUT_CANARIES
"""Kinds of one-run input canary (``input_canary``): the multi-run ones,
:data:`audit.core.names.INPUT_CANARIES`."""

ONE_RUN_OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "dirac": ("all_iterates", "last_iterate"),
    "input": ("last_iterate", "black_box"),
}
"""What a one-run audit observes of each canary kind: a Dirac canary's own coordinate at every
step or at the end (white box); an input canary's last-iterate projection or its loss on the
final model (black box). Unlike a multi-run audit, one run records no per-step projection of
an input canary (m gradient directions at every step) and no loss for a Dirac canary (an
injected gradient, with no input of its own)."""

def canary_rows(
    rows: Dataset, m: int, kind: str, *, label: int = 0, scale: float = 10.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The n training rows ``(x, y, features)`` with canaries 0..m-1 in place.

    ``ood``: x gets m more columns (0 for real rows), canary j is ``scale * e_{D+j}`` with
    label ``label``; ``features[j] = D + j`` (its input feature). ``mislabeled``: x unchanged,
    y_j -> (y_j + 1) mod classes; ``features`` is None.

    Raises:
        ValueError: ``kind`` not in :data:`ONE_RUN_INPUT_CANARIES`, m not in [1, n - 1],
            ``label`` not in [0, classes - 1], ``scale`` <= 0.
    """
    kind = check_choice("input_canary", kind, ONE_RUN_INPUT_CANARIES)
    m = check_int("canaries", m, minimum=1, maximum=rows.n - 1)
    y = rows.y.copy()
    if kind == "mislabeled":
        y[:m] = (y[:m] + 1) % rows.classes
        return rows.x.copy(), y, None
    label = check_int("canary_label", label, minimum=0, maximum=rows.classes - 1)
    scale = check_real("canary_scale", scale, minimum=0.0, strict_minimum=True)
    d = rows.features
    x = np.concatenate([rows.x, np.zeros((rows.n, m), dtype=rows.x.dtype)], axis=1)
    x[:m] = 0.0
    x[np.arange(m), d + np.arange(m)] = scale
    y[:m] = label
    return x, y, d + np.arange(m)


def last_iterate_scores(
    gradients: Callable[[np.ndarray], np.ndarray],
    displacement: np.ndarray,
    m: int,
    *,
    private: Callable[[int], np.ndarray] | None = None,
    chunk: int = 64,
) -> np.ndarray:
    """``final_j = <displacement, u_j>`` for the m canaries, u_j = g_j / ||g_j|| (restricted).

    Args:
        gradients: maps canary indices (k,) to their loss gradients at theta_0, (k, P).
        displacement: (P,) ``(b / (lr C)) (theta_0 - theta_S)``.
        m: the number of canaries.
        private: maps canary j to the flat indices of its private column (``ood``); None
            keeps the whole gradient (``mislabeled``).
        chunk: canaries per call of ``gradients`` (memory chunk * P).

    Returns:
        (m,) float64.

    Raises:
        ValueError: a canary's (restricted) gradient is 0 at theta_0 (its direction is
            undefined; as the multi-run canary, change canary_label or canary_scale).
    """
    displacement = np.asarray(displacement, dtype=np.float64)
    out = np.empty(m)
    for start in range(0, m, chunk):
        index = np.arange(start, min(m, start + chunk))
        grads = np.asarray(gradients(index), dtype=np.float64)
        for row, j in zip(grads, index, strict=True):
            where = private(int(j)) if private is not None else slice(None)
            g = row[where]
            norm = float(np.linalg.norm(g))
            if norm == 0.0:
                raise ValueError(
                    f"one-run input canary {int(j)} has zero gradient at theta_0 (its direction "
                    "is undefined); change canary_label or canary_scale"
                )
            out[j] = float(displacement[where] @ g) / norm
    return out
