"""The newest diagnostics of a deployed training (docs/design.md §14.5; issue 33 item 1):
``noise_multiplier``, ``batch_sizes`` and ``batch_alignment``, through ``diagnose`` as
``one_run_audit`` calls it (audit/deployed/deployed_audit.py ``_diagnostics``).

Synthetic canary observations in units of C / b (the module docstring of
``audit.deployed.diagnostics``): canary j at step t reads
``1[j IN and in step t's batch] * signal + noise``; correct DP-SGD has signal 1 and noise
N(0, sigma^2), Poisson batches at q (each of the n rows in a batch with probability q, so the
batch sizes are Binomial(n, q)) and one loader batch per optimizer step. Each bug below changes
one of these as the bug zoo's trainings do (examples/bug_zoo): the noise divided twice by b, by
sqrt(b), drawn without C; the sum divided by b / 2 or the example clipped to 2 C; fixed batch
sizes (shuffling accounted as Poisson); over-dispersed sizes; two loader batches per step.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from audit.deployed.diagnostics import DIAGNOSTICS, Observed, diagnose
from audit.deployed.findings import Finding

M, STEPS, Q, REAL, SIGMA = 100, 30, 0.1, 900, 1.0
N = REAL + M  # rows the loader samples from, canary slots included
NEW = ("noise_multiplier", "batch_sizes", "batch_alignment")


def observed(
    seed: int,
    *,
    noise: float = SIGMA,
    signal: float = 1.0,
    scale: float = 1.0,
    sizes: np.ndarray | None = None,
    batches: int = STEPS,
    clip: float = 1.0,
    divisor: float = 10.0,
) -> Observed:
    """One training's observations: y = scale * (signal * IN-in-batch + noise * z)."""
    rng = np.random.default_rng([seed, 33])
    included = np.arange(M) < M // 2
    in_batch = rng.random((M, STEPS)) < Q  # Poisson: each slot in each batch w.p. q
    y = scale * (signal * (in_batch & included[:, None]) + noise * rng.standard_normal((M, STEPS)))
    if sizes is None:  # the real rows' Binomial(REAL, q) plus the canary slots drawn above
        sizes = rng.binomial(REAL, Q, STEPS) + in_batch.sum(axis=0)
    return Observed(
        y=y, in_batch=in_batch, included=included, batch_sizes=np.asarray(sizes), n=N,
        batches_recorded=batches, clip=clip, divisor=divisor,
    )


def findings(obs: Observed, alpha: float = 0.05) -> dict[str, Finding]:
    found = diagnose(obs, sigma=SIGMA, q=Q, composed=STEPS, alpha=alpha)
    return {f.name: f for f in found}


def interval(message: str, what: str) -> tuple[float, float, float]:
    """(estimate, lo, hi) printed as ``<what> <est> [<lo>, <hi>]`` in a finding's message."""
    match = re.search(re.escape(what) + r" ([-\d.e]+) \[([-\d.e]+), ([-\d.e]+)\]", message)
    assert match is not None, message
    est, lo, hi = (float(v) for v in match.groups())
    return est, lo, hi


# -- levels: Monte Carlo over correct trainings -------------------------------------------

R = 300
ALPHA = 0.9  # family-wise; each diagnostic at ALPHA / K = 0.1: enough false alarms to count


def test_levels_hold_on_correct_trainings() -> None:
    """Each new diagnostic fails at most at its level on R seeded correct trainings.

    The failure count of a test at level ``level`` is at most Binomial(R, level) (exactly that
    law for an exact-level test, stochastically smaller for a conservative one), so it exceeds
    the Binomial(R, level) 1 - 1e-3 quantile with probability <= 1e-3 (per diagnostic): the
    bound is derived from the law, not tuned. batch_alignment is exact (level 0): 0 failures."""
    level = ALPHA / len(DIAGNOSTICS)
    bound = int(stats.binom.ppf(1 - 1e-3, R, level))
    failed = dict.fromkeys(NEW, 0)
    for seed in range(R):
        found = findings(observed(seed), alpha=ALPHA)
        for name in NEW:
            f = found[name]
            assert f.level == (0.0 if name == "batch_alignment" else level)
            failed[name] += not f.passed
    assert failed["batch_alignment"] == 0
    assert failed["noise_multiplier"] <= bound, (failed, bound)
    assert failed["batch_sizes"] <= bound, (failed, bound)


def test_a_correct_training_passes_every_new_finding() -> None:
    found = findings(observed(0))
    for name in NEW:
        assert found[name].passed, found[name].message
    assert "against the claim's sigma" in found["noise_multiplier"].message
    assert "dispersion index" in found["batch_sizes"].message
    assert found["batch_alignment"].message == f"{STEPS} batches for {STEPS} optimizer steps"


# -- noise_multiplier: which of sigma, the divisor and C is off ----------------------------


@pytest.mark.parametrize(
    ("noise", "clip", "divisor", "cause"),
    [
        (SIGMA / 10, 1.0, 10.0, "the noise divided by b twice"),  # (sum + z / b) / b
        (SIGMA / 4, 1.0, 16.0, "the noise divided by sqrt(b)"),  # (sum + z / sqrt(b)) / b
        (SIGMA / 4, 4.0, 10.0, "the noise drawn without C"),  # sigma z, not sigma C z
    ],
)
def test_too_little_noise_names_its_cause(
    noise: float, clip: float, divisor: float, cause: str
) -> None:
    f = findings(observed(1, noise=noise, clip=clip, divisor=divisor))["noise_multiplier"]
    assert not f.passed and f.refutes, f.message
    assert "< the claim's sigma" in f.message
    # the example's signal is 1 C/b: C and the divisor are as declared, sigma is off
    assert "sigma is off" in f.message
    assert cause in f.message
    # the ratio it names: 1 / r for r = noise / (sigma C)
    assert f"1 / r = {SIGMA / noise:.3g}" in f.message


def test_divisor_off_with_the_noise_multiplier_right_is_a_note() -> None:
    # the noisy sum divided by b / 2: signal and noise both doubled; the noise multiplier is
    # sigma (the privacy is as claimed), the divisor is off by 2
    f = findings(observed(2, scale=2.0))["noise_multiplier"]
    assert f.passed and not f.refutes, f.message
    assert "the divisor or C is off by" in f.message
    # the intervals (each at 1 - level / 2) hold the truth: signal 2 C/b, multiplier sigma
    _, lo, hi = interval(f.message, "one clipped example's signal")
    assert lo <= 2.0 <= hi and lo > 1.0
    _, lo, hi = interval(f.message, "noise multiplier")
    assert lo <= SIGMA <= hi


def test_example_clipped_to_2c_with_noise_of_c_fails_naming_the_divisor_or_c() -> None:
    # per-example sensitivity 2 C under noise sigma C: the noise multiplier is sigma / 2
    f = findings(observed(3, signal=2.0))["noise_multiplier"]
    assert not f.passed and f.refutes, f.message
    assert "the divisor or C is off as well" in f.message
    _, lo, hi = interval(f.message, "noise multiplier")
    assert lo <= SIGMA / 2 <= hi < SIGMA


# -- batch_sizes: Fisher's dispersion index against Poisson sampling -----------------------


def test_fixed_batch_sizes_when_poisson_is_claimed() -> None:
    f = findings(observed(4, sizes=np.full(STEPS, int(Q * N))))["batch_sizes"]
    assert not f.passed, f.message
    assert "dispersion index 0 " in f.message
    assert "fixed batch sizes" in f.message and "poisson_sampling=True" in f.message


def test_over_dispersed_batch_sizes() -> None:
    # half the steps at q n / 2, half at 3 q n / 2: variance (q n / 2)^2 >> n q (1 - q)
    sizes = np.where(np.arange(STEPS) % 2 == 0, Q * N / 2, 3 * Q * N / 2).astype(int)
    f = findings(observed(5, sizes=sizes))["batch_sizes"]
    assert not f.passed, f.message
    assert "vary more than Poisson" in f.message


def test_batch_sizes_not_compared_without_n() -> None:
    obs = observed(6)
    bare = Observed(y=obs.y, in_batch=obs.in_batch, included=obs.included)
    f = findings(bare)["batch_sizes"]
    assert f.passed and "not compared" in f.message


# -- batch_alignment: exact -----------------------------------------------------------------


def test_batches_recorded_against_steps_is_exact() -> None:
    f = findings(observed(7, batches=2 * STEPS))["batch_alignment"]
    assert not f.passed and f.level == 0.0
    assert f"yielded {STEPS} batches that no optimizer step took ({2 * STEPS} batches" in f.message
    assert "never stepped on" in f.message
    one_more = findings(observed(7, batches=STEPS + 1))["batch_alignment"]
    assert not one_more.passed  # exact: a single extra batch is seen
