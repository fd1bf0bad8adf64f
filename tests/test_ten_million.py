"""runs/ten-million in CI: its tiny version on a local Dask cluster, against loky, and resumed.

The committed spec (1e7 trainings, ``backend = "dask"`` with no scheduler, ``store = "scores"``)
runs here with 40 IN and 40 OUT trials in shards of 10: the same training key, attack, seed and
store, so the same code paths at a size of seconds. Shards are pure functions of (spec, key,
index), so the scores and the summary must be equal bit for bit whatever the backend and however
often the run was interrupted (issue 16 item 4: "same result as loky for the same seed").

The local cluster is the runner's own (no ``scheduler``: :func:`audit.run.runner.run_audit` starts a
``distributed.LocalCluster`` of ``n_jobs`` workers), with ``processes=False`` added so its two
workers are threads of this process: the shards still go through the Dask scheduler, the joblib
Dask backend and the workers, without the several seconds of starting two Python processes that
import torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from audit.report import run_audit
from audit.run.spec import Mode, load_spec
from audit.run.store import SCORES_DIR, SHARDS_DIR

TEN_MILLION = Path(__file__).resolve().parents[1] / "runs" / "ten-million" / "audit.toml"

RunFolder = Callable[..., Path]


def tiny_text(backend: str) -> str:
    """The committed spec, 40 + 40 trials in shards of 10, on ``backend`` with 2 workers."""
    text = TEN_MILLION.read_text()
    text = re.sub(r"(?m)^(trials_in|trials_out) = \d+", r"\1 = 40", text)
    text = re.sub(r'(?m)^backend = "\w+"', f'backend = "{backend}"\nshard_size = 10', text)
    assert "shard_size = 10" in text and "trials_in = 40" in text
    return text


def _scores(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for path in sorted((folder / SCORES_DIR).glob("*.npz")):
        with np.load(path) as data:
            out.update(
                {
                    f"{path.stem}/{name}": data[name]
                    for name in data.files
                    if name.startswith("scores_")
                }
            )
    return out


def _summary(folder: Path) -> dict:
    """summary.json without what may differ between equal runs: the run folder's name, the timings
    and the backend."""
    summary = json.loads((folder / "summary.json").read_text())
    del summary["run"], summary["name"], summary["spec"]["name"]
    for key in ("backend", "n_jobs", "scheduler"):
        summary["spec"].pop(key, None)
    return summary


def _same(a: Path, b: Path) -> None:
    sa, sb = _scores(a), _scores(b)
    assert sa and sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)  # bit-identical, not close
    assert _summary(a) == _summary(b)


def test_committed_spec_is_ten_million_dask_scores() -> None:
    spec = load_spec(TEN_MILLION.parent)
    assert spec.evidence.trials_in + spec.evidence.trials_out == 10_000_000
    assert (
        spec.mode,
        spec.execution.backend,
        spec.execution.scheduler,
        spec.execution.n_jobs,
        spec.evidence.store,
    ) == (Mode.TRAIN, "dask", None, 2, "scores")


def test_dask_local_cluster_equals_loky_and_resumes(
    run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    distributed = pytest.importorskip("distributed")
    loky = run_folder(tiny_text("loky"), "loky")
    assert run_audit(loky, progress=False, plots=False).shards_computed == 4

    cluster = distributed.LocalCluster
    monkeypatch.setattr(distributed, "LocalCluster", lambda **kw: cluster(processes=False, **kw))
    dask = run_folder(tiny_text("dask"), "dask")
    first = run_audit(dask, progress=False, plots=False)
    assert (first.shards_computed, first.shards_reused) == (4, 0)
    assert load_spec(dask).evidence.store == "scores"
    _same(loky, dask)

    # Delete two shards (as if the run had been killed before they were written): a re-run
    # recomputes those two only and gives the same scores and summary.
    shards = sorted((dask / SHARDS_DIR).glob("*.npz"))
    assert len(shards) == 4
    for path in shards[1::2]:
        path.unlink()
    again = run_audit(dask, progress=False, plots=False)
    assert (again.shards_computed, again.shards_reused) == (2, 2)
    assert json.loads((dask / "run.json").read_text())["shards_reused"] == 2
    assert sorted((dask / SHARDS_DIR).glob("*.npz")) == shards
    _same(loky, dask)
