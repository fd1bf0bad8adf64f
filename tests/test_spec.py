"""The audit spec: defaults, the grid of cells, the shard hash, and every promised error."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import tomllib

from audit.run.spec import AuditSpec, Mode, load_spec, parse_spec

GOOD = {
    "mode": "simulate",
    "seed": 3,
    "samplers": ["poisson", "dynamic_shuffle"],
    "threat_models": ["adversarial", "isolated"],
    "attacks": ["default", "max"],
    "trials_in": 250,
    "trials_out": 200,
    "shard_size": 100,
    "claim": "poisson",
    "training": {"sigma": 0.8, "batch_size": 1, "n": 20, "epochs": 2},
}


def _with(**changes: object) -> dict:
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if key.startswith("training."):
            data["training"][key.split(".", 1)[1]] = value
        else:
            data[key] = value
    return data


def _without(*keys: str) -> dict:
    data = copy.deepcopy(GOOD)
    for key in keys:
        if key.startswith("training."):
            del data["training"][key.split(".", 1)[1]]
        else:
            del data[key]
    return data


def test_good_spec_defaults_and_grid() -> None:
    spec = parse_spec(GOOD, name="t")
    assert isinstance(spec, AuditSpec)
    assert (
        spec.claim.delta == 1e-5 and spec.claim.alpha == 0.05 and spec.execution.backend == "loky"
    )
    assert spec.claim.confidence == "cell" and spec.cell_alpha(8) == 0.05
    # Bonferroni over 8 cells
    assert parse_spec(_with(confidence="family")).cell_alpha(8) == 0.05 / 8
    assert spec.experiment.observation == "all_iterates" and spec.experiment.canary == "dirac"
    assert [k.name for k in spec.training_keys()] == [
        "poisson-adversarial",
        "poisson-isolated",
        "dynamic_shuffle-adversarial",
        "dynamic_shuffle-isolated",
    ]
    assert len(spec.cells()) == 8
    assert spec.cells()[1].name == "poisson-adversarial-max"
    assert spec.trials == 250 and spec.shard_sizes() == [100, 100, 50]
    mech = spec.mechanism(spec.training_keys()[2])
    assert (mech.sampler, mech.steps_per_epoch, mech.epochs, mech.threat_model) == (
        "dynamic_shuffle", 20, 2, "adversarial"
    )


def test_shard_hash_ignores_execution_and_scoring_keys() -> None:
    base = parse_spec(GOOD).shard_hash()
    for change in (
        {"n_jobs": 2}, {"backend": "threading"}, {"alpha": 0.01}, {"delta": 1e-6},
        {"claim": 1.0}, {"trials_in": 1000}, {"attacks": ["max"]}, {"samplers": ["poisson"]},
        {"threshold": "bonferroni"}, {"confidence": "family"},
    ):
        assert parse_spec(_with(**change)).shard_hash() == base, change
    for change in (
        {"seed": 4},
        {"training.sigma": 0.9},
        {"shard_size": 50},
        {"mode": "train", "training.lr": 0.1},
    ):
        assert parse_spec(_with(**change)).shard_hash() != base, change


def test_load_spec_from_folder(tmp_path: Path) -> None:
    (tmp_path / "audit.toml").write_text(
        'mode = "simulate"\nsamplers = ["poisson"]\ntrials_in = 10\ntrials_out = 10\n'
        "[training]\nsigma = 1.0\nbatch_size = 2\nn = 10\n"
    )
    spec = load_spec(tmp_path)
    assert spec.name == tmp_path.name and spec.training.n == 10


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # 1. unknown top-level key, with the closest valid one
        (_with(sampler=["poisson"]), r"unknown key 'sampler'.*Did you mean 'samplers'"),
        # 2. unknown key inside [training]
        (
            _with(**{"training.sigmaa": 1.0}),
            r"unknown key 'sigmaa' at \[training\].*Did you mean 'sigma'",
        ),
        # 3. a training key at the top level: where it belongs
        (_with(sigma=1.0), r"'sigma' does not belong at the top level; move it under \[training\]"),
        # 4. wrong types
        (_with(trials_in="100"), r"trials_in='100' must be an integer"),
        (_with(**{"training.sigma": "0.8"}), r"training.sigma='0.8' must be a number"),
        (_with(samplers="poisson"), r"samplers='poisson' must be a list"),
        # 5. unknown names, with the closest valid one
        (_with(samplers=["poison"]), r"samplers\[0\]='poison'.*Did you mean 'poisson'"),
        (
            _with(threat_models=["adversary"]),
            r"threat_models\[0\]='adversary'.*Did you mean 'adversarial'",
        ),
        (_with(mode="simulation"), r"mode='simulation'.*Did you mean 'simulate'"),
        (_with(claim="posson"), r"claim='posson'.*Did you mean 'poisson'"),
        (_with(backend="dsk"), r"backend='dsk'.*Did you mean 'dask'"),
        (_with(threshold="bonferoni"), r"threshold='bonferoni'.*Did you mean 'bonferroni'"),
        (
            _with(confidence="families"),
            r"confidence='families' is not valid; allowed: cell, family.*Did you mean 'family'",
        ),
        # 6. out of range
        (_with(delta=1.5), r"delta=1.5 must be < 1"),
        (_with(alpha=0.0), r"alpha=0.0 must be > 0"),
        (_with(**{"training.sigma": -1.0}), r"training.sigma=-1.0 must be > 0"),
        (_with(claim=-1.0), r"explicit epsilon must be finite and > 0"),
        (_with(n_jobs=0), r"n_jobs=0 must be >= 1, or -1"),
        # 7. missing keys
        (_without("samplers"), r"missing key 'samplers'"),
        (_without("training.sigma"), r"missing key 'sigma' in \[training\]"),
        # 8. impossible combinations
        (
            _with(**{"training.batch_size": 3}),
            r"need training.n to be a multiple of training.batch_size.*n=18",
        ),
        (_with(samplers=["truncated_poisson"]), r"needs training.max_batch_size"),
        (
            _with(**{"training.max_batch_size": 4}),
            r"max_batch_size=4 is only used by sampler 'truncated_poisson'",
        ),
        (_with(observation="black_box"), r"mode='simulate' records only observation all_iterates"),
        (
            _with(implementation="opacus"),
            r"implementation='opacus' trains models, so it needs mode='train'",
        ),
        (_with(scheduler="tcp://h:8786"), r"needs backend='dask' or 'ray'"),
        (_with(hidden=16), r"hidden and activation describe an MLP"),
        (_with(**{"training.batch_size": 40}), r"batch_size=40 must be <= training.n=20"),
        # 9. duplicates
        (_with(samplers=["poisson", "poisson"]), r"lists a name twice"),
        (_with(attacks=["max", "max"]), r"lists an attack twice"),
    ],
)
def test_bad_specs_name_the_key_and_the_fix(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_spec(data, source="runs/x/audit.toml")
    assert str(info.value).startswith("runs/x/audit.toml: ")


def test_input_canary_refuses_isolated_shuffles() -> None:
    # The shuffles' isolated curves assume that no other example moves the canary's
    # parameters, which only the Dirac canary guarantees: refused, naming the three keys.
    train = {"mode": "train", "canary": "input", "training.lr": 0.1}
    with pytest.raises(
        ValueError,
        match=r"canary='input' with 'isolated' in threat_models and samplers "
        r"dynamic_shuffle is refused.*Allowed: canary='dirac'",
    ):
        parse_spec(_with(**train), source="runs/x/audit.toml")
    # Allowed: the Dirac canary; the input canary under 'adversarial' only, or with samplers whose
    # isolated curves are worst-case guarantees; simulate mode (the Dirac pair is drawn directly).
    assert parse_spec(_with(**{**train, "canary": "dirac"})).experiment.canary == "dirac"
    assert parse_spec(_with(**train, threat_models=["adversarial"])).experiment.canary == "input"
    assert (
        parse_spec(_with(**train, samplers=["poisson", "deterministic"])).experiment.canary
        == "input"
    )
    assert parse_spec(_with(canary="input")).mode is Mode.SIMULATE


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no audit\.toml"):
        load_spec(tmp_path)
    (tmp_path / "audit.toml").write_text("samplers = [poisson\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_spec(tmp_path)


@pytest.mark.parametrize(
    "name",
    sorted(
        p.parent.name for p in (Path(__file__).resolve().parents[1] / "runs").glob("*/audit.toml")
    ),
)
def test_committed_example_specs_are_valid(name: str) -> None:
    folder = Path(__file__).resolve().parents[1] / "runs" / name
    if not (folder / "audit.toml").exists():
        pytest.skip(f"runs/{name}/audit.toml not written yet")
    with (folder / "audit.toml").open("rb") as handle:
        assert tomllib.load(handle)
    spec = load_spec(folder)
    assert spec.name == name
    from audit.run.scoring import check_runnable

    # a GPU spec on a machine without one
    if spec.execution.device == "cuda" and not torch_cuda_available():
        with pytest.raises(
            ValueError, match=r"device='cuda' but torch\.cuda\.is_available\(\) is False"
        ):
            check_runnable(spec)
        spec = dataclasses.replace(
            spec, execution=dataclasses.replace(spec.execution, device="cpu")
        )  # checked on the CPU
    check_runnable(spec)  # every training config builds, every attack exists and fits


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    ("backend", "module", "extra"), [("ray", "ray", "ray"), ("dask", "distributed", "distributed")]
)
def test_cluster_backend_without_its_package_names_the_extra(monkeypatch, backend, module, extra):
    """The spec parses (`audit report` needs no backend); running shards names the extra (exit
    3)."""
    from audit.core.errors import AuditEnvironmentError
    from audit.run.runner import check_backend_installed

    monkeypatch.setitem(__import__("sys").modules, module, None)  # import fails as if not installed
    assert parse_spec(_with(backend=backend)).execution.backend == backend
    with pytest.raises(
        AuditEnvironmentError,
        match=rf"backend='{backend}' needs the {extra} extra.*pip install 'dpsgd-audit\[{extra}\]'",
    ):
        check_backend_installed(backend)


def test_ray_backend_accepts_a_cluster_address():
    pytest.importorskip("ray")
    spec = parse_spec(_with(backend="ray", scheduler="auto"))
    assert spec.execution.backend == "ray" and spec.execution.scheduler == "auto"
    assert spec.with_execution(backend="loky").execution.scheduler is None
