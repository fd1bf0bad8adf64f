"""The report: the claim of each kind, the summary.json contract, report.md, the plots.

Scores are synthetic (seeded normals), so every statistic is exact arithmetic on fixed
numbers; the theory of the Poisson claim is injected through the report's cache (its own
tests live with audit.theory), so nothing here computes a PLD.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from audit.report.multi_run import SUMMARY_FILE, format_bound, render_markdown, write_report
from audit.run.claims import claim_for
from audit.run.spec import Cell, TrainingKey, parse_spec
from audit.run.store import write_scores
from audit.run.summary import cell_result, summarize
from audit.theory import Bounds, TradeOffCurve

SPEC = {
    "mode": "simulate",
    "seed": 5,
    "samplers": ["deterministic", "dynamic_shuffle"],
    "attacks": ["max"],
    "trials_in": 400,
    "trials_out": 400,
    "claim": "poisson",
    "training": {"sigma": 1.0, "batch_size": 1, "n": 10},
}

CONTRACT_KEYS = {
    "sampler", "threat_model", "attack", "trials_in", "trials_out", "delta", "alpha",
    "epsilon_lb", "epsilon_optimistic", "claimed_epsilon", "theory_upper_epsilon",
    "theory_lower_epsilon", "verdict", "evidence",
}


def _gdp(mu: float, sampler: str = "poisson") -> TradeOffCurve:
    return TradeOffCurve.from_gdp(mu, sampler=sampler, threat_model="adversarial", kind="upper")


def _poisson_cache(spec, mu: float = 0.5) -> dict:
    """The report's theory cache with a stand-in Poisson upper curve (mu-GDP) per key."""
    cache = {}
    for key in spec.training_keys():
        poisson = spec.mechanism(key).with_(sampler="poisson", max_batch_size=None)
        cache[poisson] = Bounds(poisson, _gdp(mu), None)
    return cache


def test_poisson_claim_is_the_poisson_upper_curve_of_the_same_q_sigma_steps() -> None:
    spec = parse_spec(SPEC)
    mechanism = spec.mechanism(TrainingKey("dynamic_shuffle", "adversarial"))
    cache = _poisson_cache(spec, mu=0.5)
    claim = claim_for(spec, mechanism, cache)
    poisson = mechanism.with_(sampler="poisson")
    assert (poisson.sampling_probability, poisson.sigma, poisson.total_steps) == (0.1, 1.0, 10)
    assert claim.curve is cache[poisson].upper
    assert claim.epsilon == pytest.approx(float(_gdp(0.5).epsilon(1e-5)))


def test_sampler_claim_is_the_samplers_own_upper_curve() -> None:
    spec = parse_spec({**SPEC, "claim": "sampler"})
    mechanism = spec.mechanism(TrainingKey("deterministic", "adversarial"))
    claim = claim_for(spec, mechanism, {})
    # deterministic: exact mu-GDP with mu = sqrt(E)/sigma = 1 (docs/design.md §6.1)
    assert claim.epsilon == pytest.approx(float(_gdp(1.0).epsilon(1e-5)), rel=1e-6)


def test_explicit_claim_is_the_eps_delta_curve() -> None:
    spec = parse_spec({**SPEC, "claim": 1.0})
    claim = claim_for(spec, spec.mechanism(TrainingKey("deterministic", "adversarial")), {})
    eps, delta = 1.0, 1e-5
    alphas = np.array([0.0, 1e-3, 0.05, 0.2, 0.5, 0.9, 1.0])
    expected = np.maximum.reduce(
        [
            np.zeros_like(alphas),
            1 - delta - np.exp(eps) * alphas,
            np.exp(-eps) * (1 - delta - alphas),
        ]
    )
    np.testing.assert_allclose(claim.curve(alphas), expected, atol=1e-12)
    assert claim.epsilon == 1.0


def test_cell_summary_contract_and_verdicts() -> None:
    spec = parse_spec({**SPEC, "claim": 0.5})
    rng = np.random.default_rng(0)
    separated = (rng.normal(3.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    null = (rng.normal(0.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    cell = Cell("deterministic", "adversarial", "max")
    strong = cell_result(spec, cell, *separated, {})
    assert CONTRACT_KEYS <= strong.to_json().keys()
    assert (strong.trials_in, strong.trials_out, strong.delta, strong.alpha) == (
        400,
        400,
        1e-5,
        0.05,
    )
    # N(3,1) vs N(0,1) is 3-GDP: at 200 held-out trials a side, a threshold near 1.5 has
    # FPR, FNR ~ 0.07, CP upper bounds ~ 0.11, far below the (0.5, 1e-5)-DP curve's ~0.55
    assert strong.verdict == "violated" and strong.epsilon_lb > 0.5
    assert strong.evidence.fnr_hi < strong.evidence.f_of_fpr_hi
    assert 0 <= strong.epsilon_lb <= strong.epsilon_optimistic
    # identical laws: a sound test refutes nothing (holds with prob >= 1 - alpha; fixed seed)
    weak = cell_result(spec, cell, *null, {})
    assert weak.verdict == "consistent" and weak.epsilon_lb < 0.5
    # theory of the deterministic cell is exact: upper = lower = mu-GDP, mu = 1
    assert weak.theory_upper_epsilon == pytest.approx(weak.theory_lower_epsilon)


def test_threshold_strategy_reaches_the_statistics() -> None:
    from audit.stats.binary import epsilon_lower_bound

    rng = np.random.default_rng(2)
    scores = (rng.normal(2.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    cell = Cell("deterministic", "adversarial", "max")
    for strategy in ("split", "bonferroni"):
        spec = parse_spec({**SPEC, "claim": 0.5, "threshold": strategy})
        result = cell_result(spec, cell, *scores, {})
        expected = epsilon_lower_bound(*scores, delta=1e-5, confidence=0.95, threshold=strategy,
            seed=5)
        assert result.bound.strategy == result.evidence.strategy == strategy
        assert result.epsilon_lb == expected.epsilon_lb


def _write_scores(folder: Path, spec, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    for cell in spec.cells():  # stored with the fingerprint of the spec and this code
        write_scores(folder, spec, cell, rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400))


def test_write_report_files_and_strict_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec(SPEC, name="r")
    (tmp_path / "audit.toml").write_text("")  # the spec is passed in; the folder only holds outputs
    _write_scores(tmp_path, spec)
    cache = _poisson_cache(spec, mu=0.2)

    def cached(m, theory):
        return cache[m] if m in cache else _real_bounds(m)

    monkeypatch.setattr("audit.run.claims.cell_bounds", cached)  # the claim's curves
    monkeypatch.setattr("audit.run.summary.cell_bounds", cached)  # the summary's theory columns
    summary = write_report(tmp_path, spec).to_json()
    text = (tmp_path / SUMMARY_FILE).read_text()

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds the non-JSON constant {constant}")

    loaded = json.loads(text, parse_constant=refuse)
    assert loaded == summary
    names = [c["cell"] for c in loaded["cells"]]
    assert names == ["deterministic-adversarial-max", "dynamic_shuffle-adversarial-max"]
    for c in loaded["cells"]:
        assert CONTRACT_KEYS <= c.keys()
        assert (tmp_path / f"tradeoff_{c['cell']}.png").stat().st_size > 1000
        assert c["claimed_epsilon"] == pytest.approx(float(_gdp(0.2).epsilon(1e-5)))
    assert (tmp_path / "overview.png").stat().st_size > 1000
    report = (tmp_path / "report.md").read_text()
    assert "| sampler | threat model | attack |" in report
    assert report.count("\n- **") == len(names)  # one sentence per cell
    assert "optimistic" in report and "not a bound" in report


def _real_bounds(mechanism):
    from audit.theory import bounds_for

    return bounds_for(mechanism)


def test_markdown_sentences_say_what_was_shown(tmp_path: Path) -> None:
    spec = parse_spec({**SPEC, "claim": 0.5, "samplers": ["deterministic"]}, name="m")
    _write_scores(tmp_path, spec)
    result = summarize(spec, tmp_path)
    text = render_markdown(result)
    cell = result.cells[0]
    # printed rounded down: still a lower bound
    assert f"ε ≥ {format_bound(cell.epsilon_lb, 'lower')}" in text
    assert ("**violated**" in text) == (cell.verdict == "violated")
    assert "95% confidence" in text
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in cell.to_json().values())
