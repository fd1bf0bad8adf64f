"""Which way the scores separate: a warning for scores whose members score lower (issue 41 item 6).

Every bound of :mod:`audit.stats.binary` reads higher scores as "member" (the rule "IN iff score
>= t"). Losses, distances and many attack outputs are the other way round (lower = member):
audited as given, a perfect separation gives eps_lb 0. The direction is *declared*
(``higher_is_member``; ``audit scores --lower-is-member``): the scores of a declared lower-is-member
audit are negated before any statistic sees them.

**Detection only warns.** Choosing the direction on the same scores that are then bounded is a
data-dependent choice; this module never changes the direction, and the bound is always computed
for the declared one. It tests, one-sidedly, whether the declared members score *lower* than the
non-members: the Mann-Whitney U test of "IN stochastically smaller than OUT" (scipy's
``mannwhitneyu``, ``alternative="less"``, ties counted 1/2), at level :data:`WARNING_LEVEL` =
1e-3 (or the audit's alpha if smaller): null scores (no separation) trigger it in one audit in a
thousand, so a warning is not cried on scores that merely do not separate. A p-value at or
below that level says so (with the AUROC of the declared direction, an estimate). A user who
re-runs in the other direction *because of the warning* has tried two directions: the better of
the two bounds holds at 1 - 2 alpha (Bonferroni over the two directions, docs/results.md, "Score
direction"); declaring the direction from how the score is made (a loss: lower = member) costs
nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import mannwhitneyu

__all__ = ["WARNING_LEVEL", "ScoreDirection", "oriented_scores", "score_direction"]

WARNING_LEVEL = 1e-3
"""The level of the reversed-separation test (or the audit's alpha where smaller)."""


@dataclass(frozen=True)
class ScoreDirection:
    """The declared direction and whether the scores separate the other way (module docstring).

    ``higher_is_member``: the declared direction; ``auroc``: Pr[IN > OUT] + Pr[IN = OUT] / 2 in
    the declared direction (an estimate; below 1/2 means members score lower than declared);
    ``p_value``: the one-sided Mann-Whitney p-value of "members score lower than declared";
    ``alpha``: the level it is compared with (:data:`WARNING_LEVEL`, or the audit's alpha
    where smaller); ``reversed``: ``p_value <= alpha``.
    """

    higher_is_member: bool
    auroc: float
    p_value: float
    alpha: float

    @property
    def reversed(self) -> bool:
        """Whether the scores separate significantly the other way than declared."""
        return bool(self.p_value <= self.alpha)

    @property
    def declared(self) -> str:
        """The declared direction in words."""
        return "higher = member" if self.higher_is_member else "lower = member"

    def warning(self) -> str | None:
        """The warning printed (and written in report.md) for a reversed separation, else None."""
        if not self.reversed:
            return None
        # a p-value below the smallest double is printed as such, never as 0
        p_text = "< 1e-300" if self.p_value < 1e-300 else f"= {self.p_value:.2g}"
        other, option = (
            ("lower", "--lower-is-member (Python: higher_is_member=False)")
            if self.higher_is_member
            else ("higher", "no --lower-is-member (Python: higher_is_member=True)")
        )
        return (
            f"WARNING: reversed separation: members score {other} than non-members (AUROC "
            f"{self.auroc:.3g} for the declared {self.declared}, an estimate; one-sided "
            f"Mann-Whitney p {p_text} <= {self.alpha:g}). The bound and the verdict are the "
            f"declared direction's. If {other} scores mean member (losses: lower), "
            f"declare it with {option}; chosen because of this warning, the better of the two "
            "directions holds at 1 - 2 alpha (two directions tried)"
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        out["reversed"] = self.reversed
        out["declared"] = self.declared
        return out


def oriented_scores(scores: np.ndarray, higher_is_member: bool) -> np.ndarray:
    """``scores`` as every statistic reads them (higher = member): negated when the declared
    direction is lower = member."""
    array = np.asarray(scores, dtype=float)
    return array if higher_is_member else -array


def score_direction(
    scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, higher_is_member: bool = True
) -> ScoreDirection:
    """The one-sided test of a reversed separation (module docstring) on scores *already
    oriented* (higher = member, :func:`oriented_scores`), one per trial, at
    min(:data:`WARNING_LEVEL`, ``alpha``)."""
    s_in = np.asarray(scores_in, dtype=float).ravel()
    s_out = np.asarray(scores_out, dtype=float).ravel()
    result = mannwhitneyu(s_in, s_out, alternative="less")
    auroc = float(result.statistic) / (s_in.size * s_out.size)
    level = min(WARNING_LEVEL, float(alpha))
    return ScoreDirection(bool(higher_is_member), auroc, float(result.pvalue), level)
