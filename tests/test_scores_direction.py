"""``audit scores`` / ``audit_scores``: the score direction, one score per trial, and the verdict
line (issue 41 items 4, 6, 7).

- Losses (lower = member) audited as given get a WARNING in the text output and report.md, and
  the bound of the declared direction; declared (``--lower-is-member``,
  ``higher_is_member=False``) they give the bound of the negated scores.
- Several values per trial (2-D arrays) are refused naming the shape, or reduced per row.
- The verdict line says which test decided, with its numbers and levels.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

import audit
from audit.cli import main
from audit.stats.binary import epsilon_lower_bound

N = 400  # per side


@pytest.fixture(scope="module")
def losses() -> tuple[np.ndarray, np.ndarray]:
    """Perfectly separating losses: members' losses in [0, 0.1), non-members' in [1, 2)."""
    rng = np.random.default_rng(41)
    return rng.random(N) * 0.1, 1.0 + rng.random(N)


def test_losses_are_warned_about_and_declared(capsys, tmp_path, losses) -> None:
    path = tmp_path / "losses.npz"
    np.savez(path, scores_in=losses[0], scores_out=losses[1])
    out = tmp_path / "report"
    assert main(["scores", str(path), "--delta", "1e-5", "--threshold", "split",
                 "--no-estimates", "--out", str(out), "--no-plot"]) == 0
    text = capsys.readouterr().out
    assert "higher = member (declared)" in text
    assert "WARNING: reversed separation: members score lower" in text
    assert "--lower-is-member" in text
    assert "reversed separation" in (out / "report.md").read_text()
    assert main(["scores", str(path), "--delta", "1e-5", "--threshold", "split",
                 "--no-estimates", "--lower-is-member"]) == 0
    text = capsys.readouterr().out
    assert "lower = member (declared)" in text and "WARNING" not in text
    expected = epsilon_lower_bound(-losses[0], -losses[1], delta=1e-5, threshold="split")
    assert expected.epsilon_lb > 1.0
    result = audit.audit_scores(*losses, delta=1e-5, threshold="split", estimates=False,
                                higher_is_member=False)
    assert result.epsilon_lb == expected.epsilon_lb
    document = result.to_json()
    assert document["higher_is_member"] is False
    assert document["direction"]["reversed"] is False


def test_a_declared_direction_that_is_wrong_is_warned_about(losses) -> None:
    """Scores that are higher for members, declared lower = member: the warning names the
    other way (no --lower-is-member); the bound stays the declared direction's (0 here)."""
    result = audit.audit_scores(-losses[0], -losses[1], delta=1e-5, threshold="split",
                                estimates=False, higher_is_member=False)
    warning = result.direction.warning()
    assert warning is not None and "members score higher" in warning
    assert "no --lower-is-member" in warning
    assert result.epsilon_lb == 0.0


def test_several_values_per_trial_are_refused_or_reduced(capsys, tmp_path) -> None:
    rng = np.random.default_rng(7)
    rows_in, rows_out = rng.normal(size=(60, 20)), rng.normal(size=(60, 20))
    with pytest.raises(ValueError, match=r"shape \(60, 20\): 20 values for each of 60 trials"):
        audit.audit_scores(rows_in, rows_out, delta=1e-5, estimates=False)
    with pytest.raises(ValueError, match=r"reduce="):
        epsilon_lower_bound(rows_in, rows_out, delta=1e-5, threshold="split")
    with pytest.raises(ValueError, match=r"reduce='avg' is not one of mean, max, min"):
        audit.audit_scores(rows_in, rows_out, delta=1e-5, estimates=False, reduce="avg")
    result = audit.audit_scores(rows_in, rows_out, delta=1e-5, threshold="split",
                                estimates=False, reduce="max")
    assert (result.trials_in, result.trials_out) == (60, 60)
    assert result.to_json()["reduce"] == "max"
    # a column (n, 1) is n trials, nothing to reduce
    column = audit.audit_scores(rows_in[:, :1], rows_out[:, :1], delta=1e-5, threshold="split",
                                estimates=False)
    assert column.trials_in == 60 and column.to_json()["reduce"] is None
    path = tmp_path / "rows.npz"
    np.savez(path, scores_in=rows_in, scores_out=rows_out)
    assert main(["scores", str(path), "--delta", "1e-5", "--no-estimates"]) == 2
    error = capsys.readouterr().err
    assert "shape (60, 20)" in error and "--reduce" in error
    assert main(["scores", str(path), "--delta", "1e-5", "--no-estimates", "--threshold",
                 "split", "--reduce", "mean"]) == 0
    text = capsys.readouterr().out
    assert "60 IN and 60 OUT trials" in text and "reduced to their mean" in text


def test_reduced_rows_of_identical_laws_do_not_cry_wolf() -> None:
    """The issue's pseudo-replication case, reduced per trial: IN and OUT rows of 20 values of
    the same law (no privacy loss), 40 audits: eps_lb > 0 in at most binom.isf(1e-3, 40, 0.05)
    = 8 of them (probability <= 1e-3 for a sound bound at 0.05)."""
    rng = np.random.default_rng(27)
    positive = 0
    for _ in range(40):
        rows_in, rows_out = rng.normal(size=(200, 20)), rng.normal(size=(200, 20))
        bound = audit.audit_scores(rows_in, rows_out, delta=1e-5, threshold="split",
                                   estimates=False, reduce="mean")
        positive += bound.epsilon_lb > 0
    assert positive <= binom.isf(1e-3, 40, 0.05)


def test_the_verdict_line_says_why(capsys, tmp_path) -> None:
    rng = np.random.default_rng(3)
    path = tmp_path / "s.npz"
    np.savez(path, scores_in=rng.normal(4.0, 1.0, N), scores_out=rng.normal(0.0, 1.0, N))
    assert main(["scores", str(path), "--delta", "1e-5", "--no-estimates", "--threshold",
                 "bonferroni", "--claim", "0.1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "verdict:" in x).strip()
    assert line.startswith("verdict: violated: eps_lb ")
    assert "> claim 0.1 at delta = 1e-05" in line
    assert "95% each test, 90% the verdict; bonferroni threshold" in line
    assert main(["scores", str(path), "--delta", "1e-5", "--no-estimates", "--threshold",
                 "bonferroni", "--claim", "8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "verdict:" in x).strip()
    assert line.startswith("verdict: consistent: eps_lb ")
    assert "<= claim 8 at delta = 1e-05, and the curve test did not refute it (FNR_hi" in line
    assert line.endswith("consistent does not prove the claim")
