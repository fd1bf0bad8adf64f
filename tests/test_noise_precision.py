"""Noise drawn in low precision (issue 42 item 4; docs/design/deployed.md, "Low-precision
noise"): ``noise_precision`` finds noise on the bfloat16 / float16 lattice and names it first,
holds its level on correct float32 / float64 noise, calls a gradient stored in bfloat16 a note;
``fresh_noise_steps`` leaves the low precision to it; the score family's ``off_lattice`` moves
eps_lb on such noise and not on correct noise; the multi-run path sees it too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from attacks.score_family import DEFAULT_FAMILY, ScoreContext, off_lattice
from audit.plugins.contract import CanaryRecord, TrainingSetup
from audit.run.multi_run_findings import trial_findings
from audit.stats.diagnostics import DIAGNOSTICS, Observed, _noise, diagnose, noise_precision
from audit.stats.float_collisions import lattice_probability, on_lattice
from audit.stats.one_run import one_run_epsilon_lb

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def simulate(
    seed: int, *, m: int = 200, steps: int = 100, q: float = 0.05, real: int = 1800,
    sigma: float = 1.0, clip: float = 1.0, noise: str = "float32", scaled: bool = False,
    grad: str = "float32",
) -> Observed:
    """One training's recorded canary block: the step ``(C 1[IN, in batch] + noise) / b``
    computed in ``grad``'s dtype, the noise drawn in ``noise``'s dtype, either N(0, (sigma
    C)^2) directly or (``scaled``) a standard normal multiplied by sigma C in ``grad``'s dtype,
    read back in float64 times b / C as the instrument does."""
    rng = np.random.default_rng([seed, 42])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    n = real + m
    b = q * n
    included = np.arange(m) < m // 2
    in_batch = rng.random((m, steps)) < q
    gd = DTYPES[grad]
    if scaled:
        z = torch.randn((m, steps), generator=gen, dtype=DTYPES[noise]).to(gd) * (sigma * clip)
    else:
        z = torch.normal(0.0, sigma * clip, (m, steps), generator=gen,
                         dtype=DTYPES[noise]).to(gd)
    summed = torch.from_numpy(clip * (in_batch & included[:, None])).to(gd)
    y = ((summed + z) / torch.tensor(b, dtype=gd)).double().numpy() * b / clip
    return Observed(y=y, in_batch=in_batch, included=included, n=n, batches_recorded=steps,
                    clip=clip, divisor=b)


def findings(obs: Observed, sigma: float = 1.0, alpha: float = 0.05):
    return diagnose(obs, sigma=sigma, q=0.05, composed=obs.y.shape[1], alpha=alpha)


# -- found, and named first ---------------------------------------------------------------


@pytest.mark.parametrize("noise", ["bfloat16", "float16"])
@pytest.mark.parametrize("sigma, clip, scaled", [(1.0, 1.0, False), (3.0, 2.7, False),
                                                 (0.8, 1.3, True)])
def test_low_precision_noise_is_found_and_named_first(
    noise: str, sigma: float, clip: float, scaled: bool
) -> None:
    found = findings(simulate(1, noise=noise, sigma=sigma, clip=clip, scaled=scaled), sigma)
    failed = [f for f in found if not f.passed]
    assert failed and failed[0].name == "noise_precision", [f.message for f in failed]
    first = failed[0]
    assert first.refutes and first.message.startswith("low-precision noise")
    assert f"drawn in {noise}" in first.message and "float32 or float64" in first.message
    # fresh_noise_steps no longer names low precision as a cause of its own
    fresh = next(f for f in found if f.name == "fresh_noise_steps")
    assert fresh.passed and noise in fresh.message, fresh.message


def test_a_reused_draw_on_the_lattice_is_still_a_repeat() -> None:
    obs = simulate(2, noise="bfloat16")
    signal = (obs.in_batch & obs.included[:, None]).astype(float)
    y = signal + (obs.y - signal)[:, :1]  # one bfloat16 draw for every step
    found = {f.name: f for f in findings(Observed(y=y, in_batch=obs.in_batch,
                                                  included=obs.included))}
    assert not found["fresh_noise_steps"].passed
    assert "re-created or re-seeded" in found["fresh_noise_steps"].message


@pytest.mark.parametrize("noise", ["float32", "bfloat16"])
def test_gradient_stored_in_bfloat16_is_a_note(noise: str) -> None:
    """The whole step in bfloat16 (a model in bfloat16): noise and signal rounded alike after
    the noise, post-processing: a note, never a refutation."""
    found = findings(simulate(3, noise=noise, grad="bfloat16"))
    f = next(f for f in found if f.name == "noise_precision")
    assert f.passed and not f.refutes and "stored in bfloat16" in f.message, f.message
    assert all(f.passed for f in found), [f.message for f in found if not f.passed]


# -- the level on correct noise ------------------------------------------------------------

R, ALPHA = 200, 0.9  # each finding at 0.09: enough failures to count


def tolerated(trainings: int, level: float) -> int:
    """The Binomial(trainings, level) 0.999 quantile: a finding at its level fails more
    often with probability at most 1e-3."""
    return int(stats.binom.ppf(0.999, trainings, level))


def test_the_chance_bound_covers_torch_float32_noise() -> None:
    """The empirical rate of float32 Gaussian values counted on the bfloat16 lattice (about
    8.7e-5, measured over 4e6 values) is below the bound (3.6e-4, module docstring)."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.normal(0.0, 0.7, (400_000,), generator=gen) / 37).double().numpy() * 37
    for fmt in ("bfloat16", "float16"):
        k = int(on_lattice(x, fmt).sum())
        # the count's upper 0.999 quantile under the bound stays above the observed count
        assert k <= stats.binom.ppf(0.999, x.size, lattice_probability(fmt)), (fmt, k)


@pytest.mark.parametrize("noise", ["float32", "float64"])
def test_correct_noise_holds_the_level(noise: str) -> None:
    """noise_precision on R correct trainings at level ALPHA / K (each): its failures stay
    within the binomial 0.999 quantile (bench-sized: 500 trainings, m = 1000, S = 200, in
    docs/design/deployed.md)."""
    level = ALPHA / len(DIAGNOSTICS)
    fails = 0
    for seed in range(R):
        obs = simulate(seed, m=40, steps=30, noise=noise, q=0.1, real=360)
        f = noise_precision(obs, _noise(obs), 1.0, level)
        fails += (not f.passed) and f.refutes
    assert fails <= tolerated(R, level), fails


# -- the score family ----------------------------------------------------------------------


def _eps(scores: np.ndarray, included: np.ndarray) -> float:
    return float(one_run_epsilon_lb(scores, included, delta=1e-5, confidence=0.95).epsilon_lb)


def test_off_lattice_moves_eps_lb_on_bfloat16_noise_only() -> None:
    """m = 1000 canaries, 100 steps, q = 0.05, sigma = 2 (claim eps 1.22 at delta 1e-5, RDP):
    on bfloat16 noise an OUT canary scores 0 and an IN one its participations off the lattice,
    eps_lb about 3.8 (the m = 1000 ceiling); on float32 noise eps_lb 0; the likelihood ratio
    sees neither."""
    bad = simulate(0, m=1000, steps=100, real=19000, noise="bfloat16", sigma=2.0)
    good = simulate(0, m=1000, steps=100, real=19000, noise="float32", sigma=2.0)
    context = ScoreContext(sigma=2.0, q=0.05)
    assert _eps(off_lattice(bad.y, context), bad.included) > 3.0
    assert _eps(off_lattice(good.y, context), good.included) == 0.0
    assert _eps(DEFAULT_FAMILY.only(["likelihood_ratio"]).scores(bad.y, context)
                ["likelihood_ratio"], bad.included) < 0.5
    # the OUT canaries all score 0 on bfloat16 noise, the IN ones their participations that
    # left the lattice (each about half of them at sigma = 2: 76% of the IN score > 0 here)
    s = off_lattice(bad.y, ScoreContext(sigma=2.0, reference=bad.y))
    assert s[~bad.included].max() == 0 and (s[bad.included] > 0).mean() > 0.5


# -- the multi-run path --------------------------------------------------------------------


def _records(noise: str, trials: int = 60, seed: int = 0):
    config = TrainingSetup(sampler="poisson", sigma=1.5, clip=1.0, lr=0.5, batch_size=5, n=25,
                           epochs=4, dataset="breast_cancer", model="mlp")
    obs = simulate(seed, m=trials, steps=config.total_steps, q=0.2, real=20, sigma=1.5,
                   noise=noise)
    records = []
    for i in range(trials):
        slot = obs.in_batch[i].astype(np.int64)
        records.append(CanaryRecord(y=obs.y[i], slot_rows=slot, batch_rows=slot + 1,
                                    noise_divisor=5))
    return records, obs.included, config


@pytest.mark.parametrize("noise", ["bfloat16", "float16"])
def test_multi_run_path_names_low_precision_noise(noise: str) -> None:
    records, included, config = _records(noise)
    found = trial_findings(records, included, config, confidence=0.95)
    failed = [f for f in found if not f.passed and f.refutes]
    assert failed and failed[0].name == "noise_precision", [f.message for f in failed]
    assert failed[0].message.startswith("low-precision noise")
    ok = trial_findings(*_records("float32"), confidence=0.95)
    assert next(f for f in ok if f.name == "noise_precision").passed
