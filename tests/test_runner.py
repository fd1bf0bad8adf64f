"""The runner: shards on disk, resumption, --fresh, a changed spec, n_jobs and backends.

Every audit here is a tiny simulated one (mode = "simulate", a few hundred trials of a
20-step mechanism, samplers whose theory is in closed form, an explicit eps claim), so each
run takes about a second; equality of results is exact (shards are pure functions of the
seed, the training key and the shard index).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from audit.cli import main
from audit.report import run_audit
from audit.run.scoring import load_observations
from audit.run.spec import load_spec
from audit.run.store import MANIFEST, SCORES_DIR, SHARDS_DIR, plan

RunFolder = Callable[..., Path]


@pytest.fixture
def tiny(tiny_audit: str) -> str:
    """The shared tiny audit with one joblib job on loky (the backend tests replace these lines),
    keeping the observations (a simulated audit keeps only scores by default)."""
    return tiny_audit.replace(
        "\n[training]", 'n_jobs = 1\nbackend = "loky"\nstore = "observations"\n\n[training]'
    )


def _scores(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for path in sorted((folder / SCORES_DIR).glob("*.npz")):
        with np.load(path) as data:
            out[path.stem + "/in"] = data["scores_in"]
            out[path.stem + "/out"] = data["scores_out"]
    return out


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _cells(folder: Path) -> list[dict]:
    return json.loads((folder / "summary.json").read_text())["cells"]


def test_tiny_audit_end_to_end(tiny: str, run_folder: RunFolder) -> None:
    folder = run_folder(tiny)
    result = run_audit(folder, progress=False)
    spec = load_spec(folder)
    # 2 training keys x shards of 40, 40, 20 (trials = max(100, 90))
    assert result.shards_total == 6 and result.shards_computed == 6 and result.shards_reused == 0
    assert sorted(p.name for p in (folder / SHARDS_DIR).glob("*.npz")) == sorted(
        t.filename for t in plan(spec)
    )
    obs = load_observations(spec, folder, spec.training_keys()[0])
    assert obs.y_in.shape == (100, 20) and obs.y_out.shape == (90, 20)
    cells = _cells(folder)
    assert [c["cell"] for c in cells] == [
        "deterministic-adversarial-known_step", "deterministic-adversarial-max",
        "dynamic_shuffle-adversarial-shuffle_adversarial_lr", "dynamic_shuffle-adversarial-max",
    ]
    for cell in cells:
        assert (cell["trials_in"], cell["trials_out"]) == (100, 90)
        assert cell["verdict"] in ("violated", "consistent")
        assert (folder / cell["plot"]).exists()
    assert (folder / "report.md").exists() and (folder / "overview.png").exists()

    # A re-run computes nothing and gives the same summary.
    again = run_audit(folder, progress=False, plots=False)
    assert again.shards_computed == 0 and again.shards_reused == 6
    assert [cell.to_json() for cell in again.cells] == cells


def test_interrupted_then_resumed_equals_uninterrupted(tiny: str, run_folder: RunFolder) -> None:
    whole = run_folder(tiny, "whole")
    run_audit(whole, progress=False, plots=False)

    broken = run_folder(tiny, "broken")
    seen = []

    def interrupt(task: object) -> None:
        seen.append(task)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audit(broken, progress=False, plots=False, on_shard=interrupt)
    stored = sorted((broken / SHARDS_DIR).glob("*.npz"))
    assert len(stored) == 2
    # A process killed while writing leaves at most a hidden temporary file: never a shard.
    (broken / SHARDS_DIR / ".deterministic-adversarial.00002.n20.npz.999.tmp").write_bytes(b"half")
    # another n_jobs: same result
    resumed = run_audit(broken, progress=False, plots=False, n_jobs=2)
    assert resumed.shards_computed == 4 and resumed.shards_reused == 2
    assert not list((broken / SHARDS_DIR).glob(".*.tmp"))
    _same(_scores(whole), _scores(broken))
    assert _cells(whole) == _cells(broken)


def test_threading_backend_gives_identical_shards(tiny: str, run_folder: RunFolder) -> None:
    a = run_folder(tiny, "a")
    b = run_folder(tiny, "b")
    run_audit(a, progress=False, report=False)
    run_audit(b, progress=False, report=False, n_jobs=2, backend="threading")
    _same(_scores(a), _scores(b))


def test_changed_spec_refuses_to_resume_and_fresh_starts_over(
    tiny: str, run_folder: RunFolder
) -> None:
    folder = run_folder(tiny)
    run_audit(folder, progress=False, report=False)
    (folder / "audit.toml").write_text(tiny.replace("sigma = 0.5", "sigma = 0.6"))
    with pytest.raises(
        ValueError,
        match=r"changed since its shards were computed: spec key training\.sigma: 0\.5 -> "
              r"0\.6.*--fresh",
    ):
        run_audit(folder, progress=False, report=False)
    result = run_audit(folder, progress=False, report=False, fresh=True)
    assert result.shards_computed == 6
    manifest = json.loads((folder / SHARDS_DIR / MANIFEST).read_text())
    assert manifest["identity"]["training"]["sigma"] == 0.6


def test_more_trials_reuse_finished_shards(tiny: str, run_folder: RunFolder) -> None:
    folder = run_folder(tiny)
    run_audit(folder, progress=False, report=False)
    (folder / "audit.toml").write_text(tiny.replace("trials_in = 100", "trials_in = 120"))
    # trials 120 = shards 40, 40, 40: the first two are reused per key, the third is new
    result = run_audit(folder, progress=False, report=False)
    assert (result.shards_reused, result.shards_computed) == (4, 2)


def test_cli_run_and_report(
    tiny: str, run_folder: RunFolder, capsys: pytest.CaptureFixture[str]
) -> None:
    one_cell = tiny.replace('["deterministic", "dynamic_shuffle"]', '["dynamic_shuffle"]').replace(
        '"default", "max"', '"default"'
    )
    folder = run_folder(one_cell)
    assert main(["run", str(folder), "--quiet"]) == 0
    first = (folder / "summary.json").read_text()
    (folder / "summary.json").unlink()
    shutil.rmtree(folder / SCORES_DIR)  # the report scores from the shards when scores are gone
    assert main(["report", str(folder)]) == 0
    assert json.loads((folder / "summary.json").read_text())["cells"] == json.loads(first)["cells"]
    assert "report:" in capsys.readouterr().out
    (folder / "audit.toml").write_text(one_cell.replace("samplers", "sampler"))
    assert main(["run", str(folder)]) == 2
    assert "Did you mean 'samplers'" in capsys.readouterr().err


def test_dask_local_cluster_gives_the_same_summary(tiny: str, run_folder: RunFolder) -> None:
    distributed = pytest.importorskip("distributed")
    loky = run_folder(tiny, "loky")
    run_audit(loky, progress=False, plots=False)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        text = tiny.replace(
            'backend = "loky"', f'backend = "dask"\nscheduler = "{cluster.scheduler_address}"'
        )
        dask = run_folder(text, "dask")
        run_audit(dask, progress=False, plots=False)
    _same(_scores(loky), _scores(dask))
    assert _cells(loky) == _cells(dask)


def test_ray_local_cluster_gives_the_same_summary(tiny: str, run_folder: RunFolder) -> None:
    """joblib's Ray backend (the optional ``ray`` extra; skipped where Ray is not installed)."""
    pytest.importorskip("ray")
    loky = run_folder(tiny, "loky")
    run_audit(loky, progress=False, plots=False)
    ray_run = run_folder(
        tiny.replace('backend = "loky"', 'backend = "ray"\nn_jobs = 2').replace("n_jobs = 1\n", ""),
        "ray",
    )
    run_audit(ray_run, progress=False, plots=False)
    _same(_scores(loky), _scores(ray_run))
    assert _cells(loky) == _cells(ray_run)


def test_implementation_key_dispatches_to_the_plug_in(tiny: str, run_folder: RunFolder) -> None:
    from audit.plugins.contract import run_implementation_shard

    text = tiny.replace('mode = "simulate"', 'mode = "train"\nimplementation = "numpy-reference"')
    text = text.replace("trials_in = 100", "trials_in = 6").replace(
        "trials_out = 90", "trials_out = 6"
    )
    text = text.replace("shard_size = 40", "shard_size = 6").replace(
        '"default", "max"', '"default"'
    )
    text = text.replace('["deterministic", "dynamic_shuffle"]', '["dynamic_shuffle"]')
    text = text.replace("n = 20", "n = 10\nlr = 0.1")
    folder = run_folder(text)
    run_audit(folder, progress=False, report=False)
    spec = load_spec(folder)
    key = spec.training_keys()[0]
    direct = run_implementation_shard(
        "numpy-reference",
        spec.training_config(key),
        seed=spec.experiment.seed,
        shard=0,
        trials=6,
        cell=key.name,
    )
    stored = load_observations(spec, folder, key)
    np.testing.assert_array_equal(stored.y_in, direct["y_in"])
    np.testing.assert_array_equal(stored.y_out, direct["y_out"])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"default", "max"',
            '"default", "max_test"',
            r"attack='max_test' is not valid.*Did you mean 'max'",
        ),
        (
            'mode = "simulate"',
            'mode = "train"\ndataset = "digit"',
            r"dataset='digit'.*Did you mean 'digits'",
        ),
        (
            'mode = "simulate"',
            'mode = "train"\nobservation = "last_iterate"',
            r"'max' reads observation 'all_iterates'.*observation='last_iterate'",
        ),
    ],
)
def test_engine_and_attack_errors_come_before_any_shard(
    tiny: str, run_folder: RunFolder, old: str, new: str, message: str
) -> None:
    text = tiny.replace(old, new).replace("n = 20", "n = 20\nlr = 0.1")
    folder = run_folder(text)
    with pytest.raises(ValueError, match=message):
        run_audit(folder, progress=False)
    assert not (folder / SHARDS_DIR).exists()
