"""Sequential audits (docs/design.md §8.18): anytime-valid confidence sequences, the e-process
verdict, the spec keys and the runner's stop = "decided".

Coverage tests simulate R independent sequences and count those on which the statement fails
at *any* look. The failure count is Binomial(R, p_fail) with p_fail <= alpha when the method is
valid; the test fails only if the count exceeds the 0.999 quantile of Binomial(R, alpha), so a
valid method fails it with probability < 0.001 (fixed seeds: it either always passes or never).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import ndtr, ndtri
from scipy.stats import binom

from audit.report import run_audit
from audit.run.spec import parse_spec
from audit.stats.sequential import CLAIM_GRID, BetaBinomialCS, support_line
from audit.stats.sequential_audit import sequential_outcome
from tests.conftest import spec_toml


def _tolerated(repetitions: int, alpha: float) -> int:
    """Largest failure count a valid level-alpha method shows with probability >= 0.999."""
    return int(binom.ppf(0.999, repetitions, alpha))


def _ever_excluded(cs: BetaBinomialCS, paths: np.ndarray, truth: float, every: int) -> int:
    """Paths (rows of [0, 1] observations) whose running-intersection CS excludes ``truth`` at some
    look."""
    totals = np.cumsum(paths, axis=1)[:, every - 1 :: every]
    looks = np.arange(every, paths.shape[1] + 1, every)
    lower, upper = np.zeros(paths.shape[0]), np.ones(paths.shape[0])
    for j, n in enumerate(looks):
        lo, hi = cs.bounds(totals[:, j], n)
        lower, upper = np.maximum(lower, lo), np.minimum(upper, hi)
    return int(np.count_nonzero((truth < lower) | (truth > upper)))


@pytest.mark.parametrize("p, prior", [(0.3, (0.5, 0.5)), (0.02, (1.5, 60.0)), (0.02, (0.5, 0.5))])
def test_confidence_sequence_is_anytime_valid_for_bernoulli(p, prior):
    alpha, repetitions, length = 0.1, 2000, 300
    rng = np.random.default_rng(22)
    paths = (rng.random((repetitions, length)) < p).astype(float)
    failures = _ever_excluded(BetaBinomialCS(*prior, alpha=alpha), paths, p, every=5)
    assert failures <= _tolerated(repetitions, alpha), failures


def test_confidence_sequence_is_anytime_valid_for_fractions_of_dependent_canaries():
    # [0, 1] observations: per training, the fraction of k = 5 canaries in error, strongly
    # correlated (a shared Bernoulli(0.05) switches all five on with probability 0.8).
    alpha, repetitions, length, k = 0.1, 2000, 300, 5
    rng = np.random.default_rng(23)
    shared = rng.random((repetitions, length, 1)) < 0.05
    own = rng.random((repetitions, length, k)) < 0.01
    on = (shared & (rng.random((repetitions, length, k)) < 0.8)) | own
    truth = 0.05 * 0.8 + 0.01 - 0.05 * 0.8 * 0.01
    failures = _ever_excluded(BetaBinomialCS(alpha=alpha), on.mean(axis=2), truth, every=5)
    assert failures <= _tolerated(repetitions, alpha), failures


def test_confidence_sequence_bounds_and_errors():
    cs = BetaBinomialCS(alpha=0.05)
    lower, upper = cs.bounds(0, 0)
    assert (float(lower), float(upper)) == (0.0, 1.0)
    lower, upper = cs.bounds(5, 100)
    assert 0 < lower < 0.05 < upper < 0.3
    # the sequence is wider than the fixed-size Clopper-Pearson interval (it holds at every n)
    from audit.stats.binary import clopper_pearson_upper

    assert upper > clopper_pearson_upper(5, 100, 0.05)
    with pytest.raises(ValueError, match="total must lie in"):
        cs.bounds(5, 4)
    with pytest.raises(ValueError, match="alpha"):
        BetaBinomialCS(alpha=0.7)


def _gdp(mu: float):
    def curve(x):
        x = np.asarray(x, dtype=float)
        return ndtr(ndtri(1.0 - np.clip(x, 0.0, 1.0)) - mu)  # Phi(Phi^-1(1 - x) - mu)

    return curve


def test_support_line_lies_below_the_claim():
    claim = _gdp(1.0)
    xs = np.concatenate([np.random.default_rng(0).random(20000), np.geomspace(1e-12, 1, 5000)])
    for fpr in (1e-4, 0.01, 0.2, 0.7):
        slope, intercept = support_line(claim, fpr)
        assert slope >= 0
        assert np.all(claim(xs) + slope * xs >= intercept - 1e-12)
        assert intercept <= claim(np.array([fpr]))[0] + slope * fpr  # the tangent, from below
    assert CLAIM_GRID[0] == 0.0 and CLAIM_GRID[-1] == 1.0


def test_sequential_verdict_refutes_a_true_claim_at_most_alpha_of_the_time():
    # Scores N(mu, 1) IN vs N(0, 1) OUT have exactly the GDP(mu) trade-off curve: the claim
    # GDP(mu) holds with equality at every threshold, the hardest true claim to keep.
    alpha, repetitions, mu, shard, trials = 0.1, 200, 1.0, 20, 300
    claim = _gdp(mu)
    rng = np.random.default_rng(5)
    violated = 0
    for _ in range(repetitions):
        scores_in = rng.normal(mu, 1.0, trials)
        scores_out = rng.normal(0.0, 1.0, trials)
        outcome = sequential_outcome(
            scores_in, scores_out, claim, shard_size=shard, confidence=1 - alpha, delta=1e-5
        )
        violated += outcome.verdict.violated
    assert violated <= _tolerated(repetitions, alpha), violated


def test_sequential_verdict_stops_early_on_a_false_claim():
    rng = np.random.default_rng(6)
    scores_in, scores_out = rng.normal(3.0, 1.0, 2000), rng.normal(0.0, 1.0, 2000)
    outcome = sequential_outcome(
        scores_in, scores_out, _gdp(1.0), shard_size=25, confidence=0.95, delta=1e-5
    )
    assert outcome.verdict.violated and outcome.verdict.decided
    assert outcome.trials_used < 500
    assert outcome.verdict.log_wealth >= np.log(20)


BASE = {
    "mode": "simulate",
    "seed": 3,
    "samplers": ["dynamic_shuffle"],
    "threat_models": ["adversarial"],
    "shard_size": 25,
    "claim": "poisson",
    "training": {"n": 1000, "batch_size": 1, "epochs": 2, "sigma": 0.7},
}


def test_spec_keys_of_a_sequential_audit():
    spec = parse_spec({**BASE, "stop": "decided", "max_trials": 500})
    assert (
        spec.evidence.stop,
        spec.evidence.max_trials,
        spec.evidence.trials_in,
        spec.evidence.trials_out,
    ) == ("decided", 500, 500, 500)
    fixed = parse_spec({**BASE, "trials_in": 500, "trials_out": 500})
    assert spec.shard_hash() == fixed.shard_hash()  # the same shards: a sequential run is a prefix
    assert (
        fixed.until_decided().evidence.stop == "decided"
        and fixed.until_decided().evidence.max_trials == 500
    )
    with pytest.raises(ValueError, match="needs max_trials"):
        parse_spec({**BASE, "stop": "decided"})
    with pytest.raises(ValueError, match="max_trials is the budget"):
        parse_spec({**BASE, "trials_in": 10, "trials_out": 10, "max_trials": 50})
    with pytest.raises(ValueError, match="remove trials_in"):
        parse_spec({**BASE, "stop": "decided", "max_trials": 50, "trials_in": 10})
    with pytest.raises(ValueError, match="stop="):
        parse_spec({**BASE, "stop": "early", "max_trials": 50})
    with pytest.raises(ValueError, match="must exceed"):
        parse_spec({**BASE, "stop": "decided", "max_trials": 25})


def test_runner_stops_when_decided(tmp_path):
    keys = {
        **BASE,
        "stop": "decided",
        "max_trials": 1000,
        "attacks": ["default"],
        "trials_in": None,
        "trials_out": None,
    }
    (tmp_path / "audit.toml").write_text(spec_toml(keys))
    result = run_audit(tmp_path, progress=False, plots=False)
    cell = result.cells[0].to_json()
    seq = cell["sequential"]
    assert cell["verdict"] == "violated" and seq["decided"] and seq["outcome"] == "refuted"
    assert seq["trainings_used"] == 2 * cell["trials_in"] < 2 * 1000
    assert result.shards_computed == seq["shards_used"] < 1000 // 25
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["trials_used_per_side"] == cell["trials_in"]
    # the report alone (audit report) reads the same shards again
    from audit.report.multi_run import write_report

    again = write_report(tmp_path, plots=False).cells[0].to_json()
    assert again["sequential"] == seq and again["epsilon_lb"] == cell["epsilon_lb"]
    # Issue 32 item 2: every statement of the cell holds at the stopping time, or is refused, or
    # labelled not anytime-valid: no fixed-size band, no fixed-size interval with a confidence.
    summary = json.loads((tmp_path / "summary.json").read_text())
    (entry,) = summary["cells"]
    assert set(entry["curve_evidence"]) == {"refused"}
    assert "not computed for a sequential cell" in entry["curve_evidence"]["refused"]
    assert "sound" not in json.dumps(entry["curve_evidence"])
    assert "not anytime-valid" in entry["roc"]["label"]
    assert all(
        not {"tpr_lo", "tpr_hi", "confidence"} & set(row) for row in entry["roc"]["tpr_at_fpr"]
    )
    assert "not anytime-valid" in entry["estimates"]["label"] and "planned" not in entry
    labels = summary["labels"]
    assert "any stopping time" in labels["epsilon_lb"] and "any stopping time" in labels["verdict"]
    assert "sound" not in labels["curve_evidence"] and "not anytime-valid" in labels["roc"]
    report = (tmp_path / "report.md").read_text()
    assert "at any stopping time" in report and "not anytime-valid" in report
    assert "band" not in report.replace("whole-curve band is not computed", "")


def test_until_decided_then_the_report_alone(tmp_path):
    """``audit run --until-decided`` on a fixed-size spec: the run stops early, run.json records
    the trials used, and the report written again later (audit report) reads the same shards
    (the spec on disk has no stop: run.json says the last run was sequential)."""
    keys = {**BASE, "trials_in": 1000, "trials_out": 1000, "attacks": ["default"]}
    (tmp_path / "audit.toml").write_text(spec_toml(keys))
    result = run_audit(tmp_path, progress=False, plots=False, until_decided=True)
    cell = result.cells[0]
    assert cell.sequential is not None and cell.sequential.decided
    assert cell.sequential.trials_used_per_side == cell.trials_in < 1000
    from audit.report.multi_run import cell_sentence, write_report

    again = write_report(tmp_path, plots=False).cells[0]
    assert again.sequential == cell.sequential and again.epsilon_lb == cell.epsilon_lb
    assert "sequential audit" in cell_sentence(again)
