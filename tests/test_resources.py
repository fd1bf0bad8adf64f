"""Sizes a machine cannot hold are refused before any work (issue 16 item 6).

Shards are planned lazily (arithmetic on the shard index), the disk and memory of a spec are
estimated (:mod:`audit.run.resources`) and compared with the machine's, and ``audit run --dry-run``
prints the estimate without computing. Every run here is a tiny simulated audit (about a second).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from audit.cli import main
from audit.report import run_audit
from audit.run import resources
from audit.run.resources import check_fits, estimate_resources
from audit.run.spec import parse_spec
from audit.run.store import SHARDS_DIR, plan

RESOURCES_AUDIT = {"seed": 3, "samplers": ["poisson"], "attacks": None}
"""Changes to the tiny audit (conftest ``audit_toml``): Poisson, default attacks."""

RunFolder = Callable[..., Path]

TRILLION = 1_000_000_000_000


_SMALL = {
    "mode": "simulate",
    "samplers": ["poisson"],
    "trials_out": 3,
    "training": {"sigma": 1.0, "batch_size": 1, "n": 20},
}


def test_shards_are_planned_lazily_at_a_trillion_trials() -> None:
    spec = parse_spec({**_SMALL, "trials_in": TRILLION, "shard_size": 7})
    assert spec.shard_count() == -(-TRILLION // 7)
    assert spec.shard_trials(spec.shard_count() - 1) == TRILLION % 7
    assert spec.shard_trials(0) == 7
    first = list(itertools.islice(plan(spec), 3))  # no list of every shard is built
    assert [t.index for t in first] == [0, 1, 2] and all(t.trials == 7 for t in first)
    with pytest.raises(ValueError, match="shard index"):
        spec.shard_trials(spec.shard_count())
    sizes = spec.shard_sizes()  # a lazy sequence, constant memory
    assert len(sizes) == spec.shard_count() and sizes[-1] == TRILLION % 7 and sizes[:2] == [7, 7]
    small = parse_spec({**_SMALL, "trials_in": 250, "shard_size": 100}).shard_sizes()
    assert small == [100, 100, 50] and list(small) == [100, 100, 50] and small != [100, 100]


def test_a_trillion_trials_is_refused_before_any_work(
    audit_toml: Callable[..., str], run_folder: RunFolder
) -> None:
    folder = run_folder(audit_toml(RESOURCES_AUDIT, trials_in=TRILLION, trials_out=TRILLION))
    with pytest.raises(ValueError, match=r"trials_in=1000000000000.*of disk \(estimate"):
        run_audit(folder, progress=False)
    assert not (folder / SHARDS_DIR).exists()  # refused before anything was written


def test_dry_run_prints_the_estimate_and_computes_nothing(
    audit_toml: Callable[..., str], run_folder: RunFolder, capsys: pytest.CaptureFixture
) -> None:
    folder = run_folder(audit_toml(RESOURCES_AUDIT, trials_in=TRILLION, trials_out=TRILLION))
    assert main(["run", str(folder), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for words in (
        "shards: 25000000000",
        "trainings: 2000000000000",
        "disk:",
        "peak memory per worker",
        "store: scores",
        "would be refused",
    ):
        assert words in out
    assert sorted(p.name for p in folder.iterdir()) == ["audit.toml"]


def test_memory_is_refused_naming_shard_size(
    audit_toml: Callable[..., str], run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = run_folder(audit_toml(RESOURCES_AUDIT, trials_in=100, trials_out=100))
    monkeypatch.setattr(resources, "available_memory", lambda: 10 * 2**20)
    with pytest.raises(ValueError, match=r"shard_size=40 needs about .* per worker"):
        run_audit(folder, progress=False)


def test_disk_estimate_matches_a_real_run(
    audit_toml: Callable[..., str], run_folder: RunFolder
) -> None:
    """The observations a small run leaves on disk agree with the estimate: the formula counts
    the arrays exactly and a fixed 4 kB per shard for the zip headers and the fingerprint, so
    the measured size lies within 10% (the per-shard overhead is the only approximation)."""
    folder = run_folder(
        audit_toml(RESOURCES_AUDIT, trials_in=400, trials_out=400, store="observations")
    )
    run_audit(folder, progress=False, report=False)
    spec = parse_spec(
        {
            "mode": "simulate",
            "samplers": ["poisson"],
            "threat_models": ["adversarial"],
            "trials_in": 400,
            "trials_out": 400,
            "shard_size": 40,
            "store": "observations",
            "training": {"sigma": 0.5, "batch_size": 1, "n": 20},
        }
    )
    est = estimate_resources(spec)
    on_disk = sum(p.stat().st_size for p in folder.rglob("*.npz"))
    assert abs(on_disk - est.disk_bytes) <= 0.1 * est.disk_bytes, (on_disk, est.disk_bytes)
    assert check_fits(spec, folder) == est


def test_auto_shard_size_from_the_memory_estimate():
    """A train spec without shard_size gets the largest shard (multiple of 100, at most 5000)
    whose worker estimate fits the fixed budget; an explicit shard_size is kept."""
    base = {"mode": "train", "samplers": ["poisson"], "threat_models": ["isolated"],
            "trials_in": 500_000, "trials_out": 500_000,
            "training": {"sigma": 1.0, "batch_size": 10, "n": 1000, "lr": 0.5}}
    spec = parse_spec(base)
    assert spec.evidence.shard_size == 5000
    assert estimate_resources(spec).worker_bytes <= resources.AUTO_SHARD_WORKER_BYTES
    long = parse_spec({**base, "training": {**base["training"], "batch_size": 100, "epochs": 5}})
    assert 100 <= long.evidence.shard_size < 5000 and long.evidence.shard_size % 100 == 0
    assert estimate_resources(long).worker_bytes <= resources.AUTO_SHARD_WORKER_BYTES
    bigger = parse_spec(
        {
            **base,
            "training": {**base["training"], "batch_size": 100, "epochs": 5},
            "shard_size": long.evidence.shard_size + 100,
        }
    )
    assert estimate_resources(bigger).worker_bytes > resources.AUTO_SHARD_WORKER_BYTES
    assert parse_spec({**base, "trials_in": 50, "trials_out": 50}).evidence.shard_size == 50
    assert parse_spec({**base, "shard_size": 300}).evidence.shard_size == 300


def test_release_freed_memory_trims_only_past_the_growth_rule(monkeypatch):
    """The first call trims and records the size; later calls trim only past TRIM_GROWTH_BYTES."""
    from audit.run import resources

    trims: list[int] = []
    sizes = iter(
        [100, 100, 100 + resources.TRIM_GROWTH_BYTES, 100 + resources.TRIM_GROWTH_BYTES + 1, 100]
    )
    monkeypatch.setattr(resources, "_rss_after_first_trim", [])
    monkeypatch.setattr(resources, "_resident_bytes", lambda: next(sizes))
    monkeypatch.setattr(resources, "_malloc_trim", lambda: trims.append)
    resources.release_freed_memory()  # first call: trims, then records 100
    assert trims == [0] and resources._rss_after_first_trim == [100]
    resources.release_freed_memory()  # grown exactly the allowance: no trim
    assert trims == [0]
    resources.release_freed_memory()  # one byte past it: trims
    assert trims == [0, 0]
