"""One-run audits with input canaries (ood, mislabeled): rows, last-iterate scores, the engine,
Opacus as deployed, the spec's canary/observation rules and the report end to end.

The signal tests compare IN and OUT canaries of one training by Welch's z = (mean difference)
/ its standard error, both estimated from the m canaries. Were there no signal, z would be
about N(0, 1): z > 4 then passes with probability 3e-5, z > 3 with 1.3e-3. ``ood`` canaries
(sigma 0.3, 5 epochs, b/n = 1/40: about 5 participations per IN canary, each moving its own
private column, against noise of sd sigma sqrt(S) ~ 4 on the projection) give z of 8 or more
(engine, seeds 0-3); ``mislabeled`` canaries are fought by the real data (half of the n = 400
rows here), so they get a smaller step size, more epochs and less noise (``MISLABELED``) and the
bar z > 3 (engine, seeds 0-3: loss z = 4.2, 3.5, 5.7, 3.9).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from audit.core.data import load_training_rows
from audit.run.spec import parse_spec
from audit.stats.one_run import canary_membership
from audit.training.one_run_canaries import canary_rows, last_iterate_scores

STRONG = {
    "dataset": "digits",
    "sigma": 0.3,
    "clip": 1.0,
    "lr": 0.5,
    "batch_size": 10,
    "n": 400,
    "epochs": 5,
}
MISLABELED = {**STRONG, "sigma": 0.1, "lr": 1.0, "epochs": 10}
SETTINGS = {"ood": (STRONG, 4.0), "mislabeled": (MISLABELED, 3.0)}
M = 200


def welch_z(lower: np.ndarray, higher: np.ndarray) -> float:
    """(mean(higher) - mean(lower)) / sqrt(var_h / n_h + var_l / n_l)."""
    se = np.sqrt(higher.var(ddof=1) / higher.size + lower.var(ddof=1) / lower.size)
    return float((higher.mean() - lower.mean()) / se)


def test_canary_rows_ood_and_mislabeled():
    rows = load_training_rows("digits", 50, seed=0)
    x, y, features = canary_rows(rows, 5, "ood", label=3, scale=7.0)
    d = rows.features
    assert x.shape == (50, d + 5) and np.all(features == d + np.arange(5))
    assert np.all(x[:5, :d] == 0) and np.all(x[np.arange(5), d + np.arange(5)] == 7.0)
    # real rows never touch the canaries' features
    assert np.all(x[5:, d:] == 0) and np.all(x[5:, :d] == rows.x[5:])
    assert np.all(y[:5] == 3) and np.all(y[5:] == rows.y[5:])
    x, y, features = canary_rows(rows, 5, "mislabeled")
    assert features is None and np.all(x == rows.x)
    assert np.all(y[:5] == (rows.y[:5] + 1) % 10) and np.all(y[5:] == rows.y[5:])
    with pytest.raises(ValueError, match=r"input_canary.*ood, mislabeled"):
        canary_rows(rows, 5, "dirac")
    with pytest.raises(ValueError, match="canaries"):
        canary_rows(rows, 50, "ood")
    with pytest.raises(ValueError, match="canary_label"):
        canary_rows(rows, 5, "ood", label=10)


def test_last_iterate_scores_project_on_normalised_gradients():
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(7, 12))
    displacement = rng.normal(size=12)
    whole = last_iterate_scores(lambda i: grads[i], displacement, 7, chunk=3)
    np.testing.assert_allclose(whole, grads @ displacement / np.linalg.norm(grads, axis=1))
    cols = lambda j: np.array([j, j + 1])  # noqa: E731
    part = last_iterate_scores(lambda i: grads[i], displacement, 7, private=cols)
    expected = [
        grads[j, [j, j + 1]] @ displacement[[j, j + 1]] / np.linalg.norm(grads[j, [j, j + 1]])
        for j in range(7)
    ]
    np.testing.assert_allclose(part, expected)
    grads[2] = 0.0
    with pytest.raises(ValueError, match="canary 2 has zero gradient"):
        last_iterate_scores(lambda i: grads[i], displacement, 7)


@pytest.mark.parametrize(
    "kind, sampler", [("ood", "poisson"), ("ood", "deterministic"), ("mislabeled", "poisson")]
)
def test_engine_in_canaries_end_with_lower_loss(kind, sampler):
    """The engine, one training of m = 200 input canaries: IN ones have lower loss (black box)
    and, for ood, a higher last-iterate projection; OUT ood projections are pure noise,
    N(0, sigma^2 S) (their private columns see no data): sd within 20% of sigma sqrt(S) (the
    sample sd of ~100 normals is within 20% with probability > 0.99)."""
    from audit.run.one_run_trials import run_one_run_shard
    from audit.training.trials import TrainingConfig

    setting, bar = SETTINGS[kind]
    config = TrainingConfig(
        model="logistic", sampler=sampler, canary="input", input_canary=kind, **setting
    )
    out = run_one_run_shard(config, seed=3, shard=0, trials=M, cell="c", canaries=M, shard_size=M)
    coins = canary_membership(3, "c", M)
    assert out["loss_in"].shape == (coins.sum(),) and out["logits_out"].shape == (
        (~coins).sum(),
        10,
    )
    assert welch_z(out["loss_in"], out["loss_out"]) > bar
    if kind == "ood":
        assert welch_z(out["final_out"], out["final_in"]) > 4
        steps = config.mechanism.total_steps
        assert out["final_out"].std(ddof=1) == pytest.approx(
            STRONG["sigma"] * np.sqrt(steps), rel=0.2
        )


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"canary": "input"},
            "canary='input' observes last_iterate or black_box; got observation='all_iterates', "
            "which needs canary='dirac'",
        ),
        (
            {"observation": "black_box"},
            "canary='dirac' observes all_iterates or last_iterate; got "
            "observation='black_box', which needs canary='input'",
        ),
        (
            {"canary": "input", "observation": "black_box", "input_canary": "far"},
            "input_canary.*ood, mislabeled",
        ),
        ({"input_canary": "ood"}, "input_canary='ood' describes canary='input'"),
        ({"canary": "gradient"}, "canary.*dirac, input"),
        ({"implementation": "opacus", "model": "mlp"}, "canary='dirac' trains model='logistic'"),
        (
            {"canary": "input", "observation": "black_box", "samplers": ["dynamic_shuffle"]},
            "isolated",
        ),
    ],
)
def test_one_run_spec_canary_rules(change, match):
    base = {
        "mode": "train",
        "seed": 3,
        "audit": "one_run",
        "canaries": 100,
        "samplers": ["poisson"],
        "threat_models": ["isolated"],
        "shard_size": 100,
        "claim": 0.5,
        "training": {"sigma": 0.5, "batch_size": 10, "n": 200, "lr": 0.1},
    }
    with pytest.raises(ValueError, match=match):
        parse_spec({**base, **change})


def test_one_run_spec_input_canaries_accepted():
    base = {
        "mode": "train",
        "seed": 3,
        "audit": "one_run",
        "canaries": 100,
        "samplers": ["poisson", "deterministic"],
        "threat_models": ["isolated"],
        "shard_size": 100,
        "claim": 0.5,
        "canary": "input",
        "training": {"sigma": 0.5, "batch_size": 10, "n": 200, "lr": 0.1},
    }
    for kind in (None, "ood", "mislabeled"):
        for observation in ("black_box", "last_iterate"):
            for implementation in (None, "opacus"):
                extra = {
                    k: v
                    for k, v in (("input_canary", kind), ("implementation", implementation))
                    if v
                }
                spec = parse_spec({**base, **extra, "observation": observation, "model": "mlp"})
                assert spec.training_config(spec.training_keys()[0]).input_canary == (kind or "ood")


@pytest.mark.parametrize(
    "observation, attack", [("black_box", "loss"), ("last_iterate", "final_projection")]
)
def test_engine_input_one_run_audit_end_to_end(tmp_path: Path, observation: str, attack: str):
    """ood canaries through `audit run`: the summary's one-run keys, a positive bound that
    stays below the theory's upper eps (a sound lower bound cannot exceed it, at 95%)."""
    from audit.report import run_audit

    lines = [
        'mode = "train"',
        "seed = 3",
        'audit = "one_run"',
        f"canaries = {M}",
        'samplers = ["poisson"]',
        'threat_models = ["isolated"]',
        'canary = "input"',
        'input_canary = "ood"',
        f'observation = "{observation}"',
        f"shard_size = {M}",
        'claim = "poisson"',
        "[training]",
        "sigma = 0.3",
        "batch_size = 10",
        "n = 400",
        "lr = 0.5",
        "epochs = 5",
    ]
    (tmp_path / "audit.toml").write_text("\n".join(lines) + "\n")
    run_audit(tmp_path, progress=False, plots=False)
    entry = json.loads((tmp_path / "summary.json").read_text())["cells"][0]
    assert entry["attack"] == attack and entry["observation"] == observation
    assert {
        "canaries",
        "guesses",
        "correct",
        "epsilon_lb",
        "theory_upper_epsilon",
        "verdict",
        "roc",
    } <= entry.keys()
    assert entry["canaries"] == M
    assert 0 < entry["epsilon_lb"] <= entry["theory_upper_epsilon"]


@pytest.mark.slow
def test_opacus_in_canaries_end_with_lower_loss():
    """Opacus as deployed (make_private, nothing injected), one training of m = 200 input canaries
    each (deterministic batches, Opacus's fastest loader): IN ones end with lower loss and, for ood,
    a higher last-iterate projection (Welch z, see the module docstring); OUT ood projections are
    pure noise (sd within 20% of sigma sqrt(S))."""
    pytest.importorskip("opacus")
    from audit.run.one_run_trials import run_opacus_one_run_shard
    from audit.training.trials import TrainingConfig

    for kind in ("ood", "mislabeled"):
        setting, bar = SETTINGS[kind]
        config = TrainingConfig(
            model="logistic", sampler="deterministic", canary="input", input_canary=kind, **setting
        )
        out = run_opacus_one_run_shard(
            config, seed=3, shard=0, trials=M, cell="c", canaries=M, shard_size=M
        )
        assert out["loss_in"].size + out["loss_out"].size == M
        assert welch_z(out["loss_in"], out["loss_out"]) > bar
        if kind == "ood":
            assert welch_z(out["final_out"], out["final_in"]) > 4
            steps = config.mechanism.total_steps
            assert out["final_out"].std(ddof=1) == pytest.approx(
                STRONG["sigma"] * np.sqrt(steps), rel=0.2
            )


@pytest.mark.slow
def test_opacus_input_one_run_audit_end_to_end(tmp_path: Path):
    """`audit run` of Opacus with m = 200 ood canaries, black box, against Opacus's own
    accountant: the one-run keys, and a bound below the theory's upper eps."""
    pytest.importorskip("opacus")
    from audit.report import run_audit

    lines = [
        'mode = "train"',
        "seed = 3",
        'audit = "one_run"',
        'implementation = "opacus"',
        f"canaries = {M}",
        'samplers = ["deterministic"]',
        'threat_models = ["isolated"]',
        'canary = "input"',
        'input_canary = "ood"',
        'observation = "black_box"',
        f"shard_size = {M}",
        'claim = "implementation"',
        "[training]",
        "sigma = 0.3",
        "batch_size = 10",
        "n = 400",
        "lr = 0.5",
        "epochs = 5",
    ]
    (tmp_path / "audit.toml").write_text("\n".join(lines) + "\n")
    run_audit(tmp_path, progress=False, plots=False)
    entry = json.loads((tmp_path / "summary.json").read_text())["cells"][0]
    assert entry["attack"] == "loss" and entry["canaries"] == M and entry["correct"] >= 0
    assert 0 < entry["epsilon_lb"] <= entry["theory_upper_epsilon"]


@pytest.mark.parametrize("trainer", ["engine", "opacus"])
def test_mlp_input_canaries_run(trainer: str):
    """The MLP takes input canaries in both trainers: one value per canary, all finite, and
    the pure-noise check on OUT ood projections (sd within 20% of sigma sqrt(S); the engine's
    private columns start non-negative, Opacus's as torch draws them: either way only the
    canary and the noise move them)."""
    if trainer == "opacus":
        pytest.importorskip("opacus")
    from audit.run.one_run_trials import run_one_run_shard, run_opacus_one_run_shard
    from audit.training.trials import TrainingConfig

    run = run_opacus_one_run_shard if trainer == "opacus" else run_one_run_shard
    for kind in ("ood", "mislabeled"):
        config = TrainingConfig(
            model="mlp", sampler="deterministic", canary="input", input_canary=kind, **STRONG
        )
        out = run(config, seed=3, shard=0, trials=M, cell="c", canaries=M, shard_size=M)
        values = np.concatenate(
            [out["loss_in"], out["loss_out"], out["final_in"], out["final_out"]]
        )
        assert values.size == 2 * M and np.all(np.isfinite(values))
        if kind == "ood":
            steps = config.mechanism.total_steps
            assert out["final_out"].std(ddof=1) == pytest.approx(
                STRONG["sigma"] * np.sqrt(steps), rel=0.2
            )
