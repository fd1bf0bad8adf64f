"""Diagnostics of a deployed training from its canaries' observations (docs/design.md §14.5):
simulated observations y = 1[IN and in batch] + N(0, sigma^2), no torch training."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from audit.deployed.claims import DeployedClaim
from audit.deployed.deployed_audit import one_run_audit
from audit.deployed.diagnostics import DIAGNOSTICS, Observed, diagnose
from audit.deployed.findings import Finding

M, S, Q, SIGMA, REAL = 200, 40, 0.1, 2.0, 50


def simulate(rng: np.random.Generator, *, sigma: float = SIGMA, reuse: bool = False,
             signal: float = 1.0, shared: bool = False) -> Observed:
    included = rng.random(M) < 0.5
    in_batch = rng.random((M, S)) < Q
    noise = rng.normal(0, sigma, (M, S))
    if reuse:
        noise[:] = noise[:, :1]
    if shared:
        noise[:] = rng.normal(0, sigma, (1, S))
    y = signal * (in_batch & included[:, None]) + noise
    return Observed(y=y, in_batch=in_batch, included=included)


@dataclass
class FakeCanaries:
    """The attributes of DiracCanaries the audit reads."""

    obs: Observed
    real: int = REAL
    batches: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.batches = [REAL + np.flatnonzero(self.obs.in_batch[:, t]) for t in range(S)]

    @property
    def observations(self) -> np.ndarray:
        return self.obs.y

    @property
    def included(self) -> np.ndarray:
        return self.obs.included

    def scores(self, sigma=None, sampling_probability=None) -> np.ndarray:
        return self.obs.y.sum(axis=1)


def claim(steps: int = S) -> DeployedClaim:
    return DeployedClaim(1.0, 1e-5, "test", ("t",), sample_rate=Q, noise_multiplier=SIGMA,
                         steps=steps)


def by_name(fs: tuple[Finding, ...]) -> dict[str, Finding]:
    return {f.name: f for f in fs}


def test_correct_training_passes_and_reports():
    audit = one_run_audit(FakeCanaries(simulate(np.random.default_rng(0))), claim(), delta=1e-5)
    names = {f.name for f in audit.findings}
    assert set(DIAGNOSTICS) | {"steps_composed"} == names
    assert all(f.passed for f in audit.findings), [f.message for f in audit.findings]
    assert audit.verdict == "consistent"


@pytest.mark.parametrize(
    ("kwargs", "steps", "name"),
    [
        ({"sigma": SIGMA / 2}, S, "noise_scale"),
        ({"reuse": True}, S, "fresh_noise_steps"),
        ({"shared": True}, S, "fresh_noise_coordinates"),
        ({"signal": 2.0}, S, "canary_signal"),
        ({}, S // 10, "steps_composed"),
    ],
)
def test_bug_is_a_failed_finding_first(kwargs, steps, name, tmp_path):
    audit = one_run_audit(
        FakeCanaries(simulate(np.random.default_rng(1), **kwargs)), claim(steps), delta=1e-5
    )
    assert not by_name(audit.findings)[name].passed
    assert audit.verdict == "violated"
    assert audit.sentence().startswith("Finding ")
    text = (audit.write(tmp_path) / "report.md").read_text()
    assert "FAILED" in text and name in text


def test_scores_form_stays():
    rng = np.random.default_rng(2)
    a = one_run_audit(rng.normal(size=100), rng.random(100) < 0.5, 1.0, delta=1e-5)
    assert a.findings == () and a.verdict == "consistent"


def test_levels_hold_on_simulated_correct_trainings():
    """Each diagnostic fails at most at its level alpha / K over R correct trainings.

    Tolerance: the failure count is Binomial(R, p <= level); we accept counts up to the
    binomial's 1 - 1e-3 quantile at p = level (a false alarm of this test with prob <= 1e-3
    per diagnostic)."""
    from scipy import stats

    R, alpha = 500, 0.05
    rng = np.random.default_rng(3)
    level = alpha / len(DIAGNOSTICS)
    fails = dict.fromkeys(DIAGNOSTICS, 0)
    for _ in range(R):
        for f in diagnose(simulate(rng), sigma=SIGMA, q=Q, composed=S, alpha=alpha):
            if f.name in fails:
                fails[f.name] += not f.passed
    cap = stats.binom.ppf(1 - 1e-3, R, level)
    assert all(v <= cap for v in fails.values()), (fails, cap)


def test_findings_accuse_at_the_accusation_level_by_default():
    """A finding accuses the training: by default the statistical ones share 1e-3 (Bonferroni),
    not the bound's 0.05; ``findings_level=`` sets it, an impossible one is refused by name."""
    from audit.stats.diagnostics import ACCUSATION_LEVEL

    canaries = FakeCanaries(simulate(np.random.default_rng(0)))
    audit = one_run_audit(canaries, claim(), delta=1e-5)
    levels = [f.level for f in audit.findings if f.level > 0]
    assert levels and max(levels) == pytest.approx(ACCUSATION_LEVEL / len(DIAGNOSTICS))
    assert sum(levels) <= ACCUSATION_LEVEL * (1 + 1e-12)
    assert audit.result.alpha == pytest.approx(0.05)  # the bound keeps its confidence
    wide = one_run_audit(canaries, claim(), delta=1e-5, findings_level=0.05)
    assert max(f.level for f in wide.findings) == pytest.approx(0.05 / len(DIAGNOSTICS))
    strict = one_run_audit(canaries, claim(), delta=1e-5, confidence=0.9999)
    assert max(f.level for f in strict.findings) == pytest.approx(1e-4 / len(DIAGNOSTICS))
    with pytest.raises(ValueError, match="findings_level"):
        one_run_audit(canaries, claim(), delta=1e-5, findings_level=0.0)


def test_a_chance_deviation_at_the_bounds_level_is_no_accusation():
    """Pure noise whose scale reads z = -3 low (chi^2 p about 1.5e-3, a 1-in-700 event for a
    correct training) failed noise_scale at 0.05 / K = 0.005; at the accusation level 1e-4 it
    passes. The scale is set so the chi^2 statistic sits at its 1.5e-3 quantile exactly."""
    from scipy import stats

    rng = np.random.default_rng(4)
    obs = simulate(rng)
    pure = ~(obs.in_batch & obs.included[:, None])
    n = int(pure.sum())
    z = obs.y[pure]
    target = stats.chi2.ppf(1.5e-3, n) * SIGMA**2 / n  # the chi^2 at its 1.5e-3 quantile
    y = obs.y.copy()
    y[pure] = z * np.sqrt(target / np.mean(z**2))
    low = FakeCanaries(Observed(y=y, in_batch=obs.in_batch, included=obs.included))
    assert not by_name(one_run_audit(low, claim(), delta=1e-5, findings_level=0.05)
                       .findings)["noise_scale"].passed
    assert by_name(one_run_audit(low, claim(), delta=1e-5).findings)["noise_scale"].passed
