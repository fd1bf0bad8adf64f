"""run_shard / run_trials / TrainingConfig / audit train: reproducibility, shapes, errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from audit.cli import main
from audit.core.observations import Observations
from audit.training.trials import run_shard, run_trials, shard_sizes

KEYS = ("y_in", "y_out", "final_in", "final_out", "loss_in", "loss_out")


@pytest.fixture
def small_config(training_config):
    """conftest's ``training_config`` with n = 60 (T = 6)."""
    return lambda **changes: training_config(**{"n": 60, **changes})


def test_run_shard_shapes_and_determinism(small_config):
    config = small_config(epochs=2)
    a = run_shard(config, seed=5, shard=3, trials=4, cell="c")
    b = run_shard(config, seed=5, shard=3, trials=4, cell="c")
    for key in KEYS:
        assert key in a
        assert np.array_equal(a[key], b[key])
    assert a["y_in"].shape == a["y_out"].shape == (4, 12)
    assert a["final_in"].shape == a["loss_out"].shape == (4,)
    assert all(isinstance(v, np.ndarray) for v in a.values())
    assert "params_in" not in a
    other = run_shard(config, seed=5, shard=4, trials=4, cell="c")
    assert not np.array_equal(a["y_in"], other["y_in"])
    assert not np.array_equal(
        a["y_in"], run_shard(config, seed=5, shard=3, trials=4, cell="d")["y_in"]
    )


def test_run_shard_params_and_mlp(small_config):
    config = small_config(
        model="mlp", hidden=6, activation="tanh", record_params=True, canary="input"
    )
    out = run_shard(config, seed=1, shard=0, trials=3)
    size = (65 * 6 + 6) + (6 * 10 + 10)
    assert out["params_in"].shape == out["params_out"].shape == (3, size)
    assert out["logits_in"].shape == (3, 10)


def test_run_trials_same_whatever_n_jobs(small_config):
    config = small_config()
    one = run_trials(config, trials=7, seed=2, n_jobs=1, shard_size=3, progress=False)
    two = run_trials(config, trials=7, seed=2, n_jobs=2, shard_size=3, progress=False)
    assert isinstance(one, Observations)
    assert one.mechanism == config.mechanism
    assert set(one.available) == {"all_iterates", "last_iterate", "black_box"}
    for key in KEYS:
        assert np.array_equal(getattr(one, key), getattr(two, key))
    # Shards are concatenated in order: shard 1 alone reproduces rows 3..5.
    alone = run_shard(config, seed=2, shard=1, trials=3)
    assert np.array_equal(one.y_in[3:6], alone["y_in"])
    assert one.y_in.shape == (7, 6)
    assert shard_sizes(7, 3) == [3, 3, 1]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": 0.0}, "sigma"),
        ({"clip": 0.0}, "clip"),
        ({"lr": 0.0}, "lr"),
        ({"lr": -0.1}, "lr"),
        ({"model": "resnet"}, "model"),
        ({"dataset": "mnist"}, "dataset"),
        ({"canary": "gradient"}, "canary"),
        ({"threat_model": "isolatd"}, "isolated"),
        ({"sampler": "poison"}, "poisson"),
        ({"n": 5000}, "larger than dataset"),
        ({"n": 65}, "multiple of batch_size"),
        ({"activation": "gelu"}, "activation"),
        ({"sampler": "truncated_poisson"}, "max_batch_size"),
        ({"canary_label": 10}, "canary_label"),
        # the shuffles' isolated theory needs the Dirac canary
        # (audit.sampling.check_canary_isolation)
        (
            {"canary": "input", "sampler": "persistent_shuffle"},
            r"canary='input' with threat_model='isolated' and sampler='persistent_shuffle' is "
            r"refused",
        ),
    ],
)
def test_bad_inputs_give_clear_errors(changes, message, small_config):
    with pytest.raises(ValueError, match=message):
        small_config(**changes)


def test_max_batch_size_ignored_with_warning(small_config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = small_config(max_batch_size=20)
    assert config.max_batch_size is None
    assert any("ignored" in str(w.message) for w in caught)
    truncated = small_config(sampler="truncated_poisson", max_batch_size=12)
    assert truncated.mechanism.max_batch_size == 12
    assert run_shard(truncated, seed=0, shard=0, trials=2)["y_in"].shape == (2, 6)


def test_cli_train_writes_npz(tmp_path, capsys):
    out = tmp_path / "obs.npz"
    args = [
        "train",
        "--dataset",
        "breast_cancer",
        "--model",
        "mlp",
        "--hidden",
        "4",
        "--sampler",
        "dynamic_shuffle",
        "--sigma",
        "1",
        "--clip",
        "1",
        "--lr",
        "0.1",
        "--batch-size",
        "10",
        "--n",
        "50",
        "--epochs",
        "2",
        "--canary",
        "input",
        "--threat-model",
        "adversarial",
        "--trials",
        "3",
        "--seed",
        "4",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    data = np.load(out)
    for key in KEYS:
        assert key in data
    assert data["y_in"].shape == (3, 10)
    meta = json.loads(str(data["config"]))
    assert meta["config"]["dataset"] == "breast_cancer" and meta["seed"] == 4
    assert meta["mechanism"]["sampler"] == "dynamic_shuffle"
    bad = [*args[:-2], "--out", str(tmp_path / "x.npz")]
    bad[bad.index("--sigma") + 1] = "-1"
    assert main(bad) == 2
    assert "sigma" in capsys.readouterr().err


def test_cli_train_refuses_input_canary_with_isolated_shuffle(tmp_path, capsys, small_config):
    # `audit train` validates through TrainingConfig: exit 2, the error names the three fields;
    # the input canary stays allowed under 'isolated' for Poisson (worst-case curves).
    args = [
        "train",
        "--dataset",
        "breast_cancer",
        "--model",
        "logistic",
        "--seed",
        "0",
        "--sampler",
        "dynamic_shuffle",
        "--sigma",
        "1",
        "--clip",
        "1",
        "--lr",
        "0.1",
        "--batch-size",
        "10",
        "--n",
        "50",
        "--canary",
        "input",
        "--threat-model",
        "isolated",
        "--trials",
        "2",
        "--quiet",
        "--out",
        str(tmp_path / "x.npz"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "canary='input'" in err and "threat_model='isolated'" in err and "dynamic_shuffle" in err
    assert small_config(canary="input", sampler="poisson").canary == "input"
