"""``store = "scores"``: shards keep the attacks' scores, not the observations (issue 16 item 2).

Tiny simulated audits (about a second each). Scores are compared bit for bit with those of
``store = "observations"``: every attack scores each trial from its own observations, so a
shard's scores are exactly the rows of the scores of the concatenated observations.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from audit.cli import main
from audit.report import run_audit
from audit.report.multi_run import REPORT_FILE
from audit.run.fingerprint import changes, shard_fingerprint
from audit.run.spec import load_spec, parse_spec
from audit.run.store import SCORES_DIR, SHARDS_DIR, stored_fingerprint

STORE_AUDIT = {
    "seed": 11,
    "samplers": ["deterministic", "poisson"],
    "trials_in": 120,
    "trials_out": 100,
    "shard_size": 50,
}
"""Changes to the tiny audit (conftest ``audit_toml``): two samplers, shards of 50, 50, 20."""

RunFolder = Callable[..., Path]


def _scores(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for path in sorted((folder / SCORES_DIR).glob("*.npz")):
        with np.load(path) as data:
            out[path.stem] = np.concatenate([data["scores_in"], data["scores_out"]])
    return out


def test_scores_store_keeps_only_scores_and_equals_observations(
    audit_toml: Callable[..., str], run_folder: RunFolder
) -> None:
    full = run_folder(audit_toml(STORE_AUDIT, store="observations"), "full")
    lean = run_folder(audit_toml(STORE_AUDIT, store="scores"), "lean")
    a, b = (
        run_audit(full, progress=False, plots=False),
        run_audit(lean, progress=False, plots=False),
    )
    assert [(c.name, c.epsilon_lb, c.verdict) for c in a.cells] == [
        (c.name, c.epsilon_lb, c.verdict) for c in b.cells
    ]
    sa, sb = _scores(full), _scores(lean)
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)  # bit-identical
    spec = load_spec(lean)
    for path in (lean / SHARDS_DIR).glob("*.npz"):
        with np.load(path) as data:
            arrays = sorted(n for n in data.files if not n.startswith("_"))
        attacks = {"deterministic": "known_step", "poisson": "poisson_lr"}[path.name.split("-")[0]]
        assert arrays == [
            f"scores_{side}.{a}" for side in ("in", "out") for a in sorted([attacks, "max"])
        ]
        assert changes(stored_fingerprint(path), shard_fingerprint(spec)) == []  # fingerprinted
    lean_bytes = sum(p.stat().st_size for p in (lean / SHARDS_DIR).glob("*.npz"))
    full_bytes = sum(p.stat().st_size for p in (full / SHARDS_DIR).glob("*.npz"))
    assert lean_bytes < full_bytes
    assert 'store = "scores"' in (lean / REPORT_FILE).read_text()


def test_an_attack_not_stored_is_named(
    audit_toml: Callable[..., str], run_folder: RunFolder, capsys: pytest.CaptureFixture
) -> None:
    lean = run_folder(audit_toml(STORE_AUDIT, store="scores"), "lean")
    run_audit(lean, progress=False, plots=False)
    toml = lean / "audit.toml"
    toml.write_text(
        toml.read_text().replace('attacks = ["default", "max"]', 'attacks = ["default", "sum"]')
    )
    assert main(["report", str(lean)]) == 2
    err = capsys.readouterr().err
    assert "attack 'sum': its scores were not stored" in err and 'store = "observations"' in err


def test_store_is_part_of_the_shard_identity(
    audit_toml: Callable[..., str], run_folder: RunFolder
) -> None:
    folder = run_folder(audit_toml(STORE_AUDIT, store="observations"), "run")
    run_audit(folder, progress=False, report=False)
    toml = folder / "audit.toml"
    toml.write_text(toml.read_text().replace('store = "observations"', 'store = "scores"'))
    with pytest.raises(ValueError, match="store: 'observations' -> 'scores'"):
        run_audit(folder, progress=False, report=False)
    run_audit(folder, progress=False, report=False, fresh=True)


def _parse(mode: str, trials: int, **extra: object) -> str:
    data = {"mode": mode, "samplers": ["poisson"], "trials_in": trials, "trials_out": 2,
            "training": {"sigma": 1.0, "batch_size": 1, "n": 20, "lr": 0.1}, **extra}
    return parse_spec(data).evidence.store


def test_store_default_and_validation() -> None:
    assert _parse("train", 100_001) == "scores"
    assert _parse("train", 100_000) == "observations"
    # issue 23: simulated audits keep scores by default
    assert _parse("simulate", 10**6) == "scores"
    assert _parse("simulate", 10) == "scores"
    assert _parse("simulate", 10, store="observations") == "observations"
    assert _parse("train", 10**6, store="observations") == "observations"
    with pytest.raises(ValueError, match="store"):
        _parse("train", 10, store="everything")


TRAIN = """\
mode = "train"
seed = 2
samplers = ["poisson"]
threat_models = ["isolated"]
attacks = ["default", "sum"]
observation = "all_iterates"
trials_in = 30
trials_out = 30
shard_size = 16
claim = 3.0
{store}

[training]
sigma = 1.0
batch_size = 2
n = 20
lr = 0.1
"""


def test_scores_store_in_train_mode_is_bit_identical(tmp_path: Path) -> None:
    """Real trainings (tiny): the scores kept per shard equal those of the stored observations."""
    folders = []
    for store in ("observations", "scores"):
        folder = tmp_path / store
        folder.mkdir()
        (folder / "audit.toml").write_text(TRAIN.format(store=f'store = "{store}"'))
        run_audit(folder, progress=False, report=False)
        folders.append(folder)
    full, lean = (_scores(f) for f in folders)
    assert full.keys() == lean.keys() and all(np.array_equal(full[k], lean[k]) for k in full)
