"""Statistics from sorted score files (issue 16 item 3): bit-identical to the in-memory ones.

The scores are rounded to 2 decimals so that ties are frequent (ties are where a merge or a
split could go wrong), and the chunk and merge-block sizes are shrunk so that a few tens of
thousands of scores make dozens of sorted runs. Equality is exact (dataclass ==): the sorted
files hold the same multisets as :func:`audit.stats.binary.split_scores`'s halves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from audit.stats import binary as stats
from audit.stats import error_rates, score_files
from audit.stats.binary import (
    empirical_tradeoff,
    epsilon_lower_bound,
    roc_summary,
    split_scores,
    verdict,
)
from audit.stats.score_files import plotted_tradeoff, read_chunks, selection_mask, sorted_scores


def _claim(alphas: np.ndarray) -> np.ndarray:
    """(1, 1e-5)-DP's trade-off curve."""
    alphas = np.asarray(alphas, dtype=float)
    return np.maximum.reduce(
        [np.zeros_like(alphas), 1 - 1e-5 - np.e * alphas, (1 - 1e-5 - alphas) / np.e]
    )


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(score_files, "CHUNK", 1000)
    monkeypatch.setattr(score_files, "MERGE_BLOCK", 37)
    # the optimistic maximum and U in many blocks
    monkeypatch.setattr(stats, "THRESHOLD_BLOCK", 777)  # U (binary)
    monkeypatch.setattr(error_rates, "THRESHOLD_BLOCK", 777)  # the optimistic maximum


def _store(
    tmp_path: Path, n_in: int, n_out: int, seed: int = 4
) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scores_in = np.round(rng.normal(1.0, 1.0, n_in), 2)
    scores_out = np.round(rng.normal(0.0, 1.0, n_out), 2)
    path = tmp_path / "cell.npz"
    np.savez(path, scores_in=scores_in, scores_out=scores_out)
    return path, scores_in, scores_out


@pytest.mark.parametrize(("n_in", "n_out"), [(30001, 29998), (41, 50)])
@pytest.mark.parametrize("threshold", ["split", "bonferroni", "multisplit"])
def test_statistics_are_bit_identical(
    tmp_path: Path, small_chunks: None, n_in: int, n_out: int, threshold: str
) -> None:
    path, scores_in, scores_out = _store(tmp_path, n_in, n_out)
    s_in, s_out = sorted_scores(path, "scores_in"), sorted_scores(path, "scores_out")
    assert s_in.presorted and np.array_equal(np.asarray(s_in), np.sort(scores_in))
    for seed in (0, 9):
        a = epsilon_lower_bound(
            scores_in, scores_out, delta=1e-5, confidence=0.95, threshold=threshold, seed=seed
        )
        b = epsilon_lower_bound(s_in, s_out, delta=1e-5, confidence=0.95, threshold=threshold,
            seed=seed)
        assert a == b
        assert verdict(
            scores_in, scores_out, _claim, confidence=0.95, threshold=threshold, seed=seed
        ) == verdict(s_in, s_out, _claim, confidence=0.95, threshold=threshold, seed=seed)
    # the AUROC counted from the files
    assert roc_summary(scores_in, scores_out) == roc_summary(s_in, s_out)
    assert not list(tmp_path.glob(".sort-*"))  # sort folders removed; the maps keep their data


def test_halves_are_those_of_split_scores(tmp_path: Path, small_chunks: None) -> None:
    path, scores_in, _ = _store(tmp_path, 5001, 10)
    select, evaluate = sorted_scores(path, "scores_in").halves(3)
    want_select, want_evaluate = split_scores(scores_in, 3)
    assert np.array_equal(np.asarray(select), np.sort(want_select))
    assert np.array_equal(np.asarray(evaluate), np.sort(want_evaluate))
    mask = selection_mask(5001, 3)
    assert mask.sum() == 2500 and np.array_equal(np.sort(scores_in[mask]), np.sort(want_select))


def test_chunks_nan_and_plots(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "f32.npz"
    values = np.arange(2500, dtype=np.float32)
    np.savez(path, scores_in=values, scores_out=np.array([1.0, np.nan]))
    chunks = list(read_chunks(path, "scores_in"))
    assert [c.size for c in chunks] == [1000, 1000, 500] and np.array_equal(
        np.concatenate(chunks), values
    )
    with pytest.raises(ValueError, match="scores_out contains NaN"):
        sorted_scores(path, "scores_out")
    with pytest.raises(ValueError, match="no array 'missing'"):
        sorted_scores(path, "missing")
    _, scores_in, scores_out = _store(tmp_path, 300, 200)
    exact = empirical_tradeoff(scores_in, scores_out)  # up to 8000 scores: the same points
    plotted = plotted_tradeoff(scores_in, scores_out)
    assert np.array_equal(exact.thresholds, plotted.thresholds)
    assert np.array_equal(exact.false_positives, plotted.false_positives)


def test_searchsorted_and_order_statistics_read_the_file(
    tmp_path: Path, small_chunks: None
) -> None:
    path, scores_in, _ = _store(tmp_path, 4321, 10)
    s_in, want = sorted_scores(path, "scores_in"), np.sort(scores_in)
    keys = np.array([2.5, -9.0, 0.13, 0.13, 9.0, -0.5])  # unsorted, with ties and both ends
    for side in ("left", "right"):
        assert np.array_equal(
            np.searchsorted(s_in, keys, side=side), np.searchsorted(want, keys, side=side)
        )
    many = np.concatenate(
        [np.round(np.random.default_rng(1).normal(0.5, 1.2, 9000), 2), want[::7], [np.inf, -np.inf]]
    )
    # many keys (every score as a threshold), ties with the block edges
    for side in ("left", "right"):
        assert np.array_equal(
            np.searchsorted(s_in, many, side=side), np.searchsorted(want, many, side=side)
        )
    ranks = np.array([0, 5, 4320, -1, 17])
    assert np.array_equal(s_in[ranks], want[ranks]) and type(s_in[ranks]) is np.ndarray
    with pytest.raises(IndexError):
        s_in[np.array([4321])]
