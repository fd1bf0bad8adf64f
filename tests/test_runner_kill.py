"""A killed audit loses only the shards in flight: SIGKILL mid-run, re-run, same result.

`audit run` runs in a child process (n_jobs = 1, so the process that writes shards is the
one killed); once at least two shards are on disk it gets SIGKILL, with no chance to clean
up. The re-run must reuse every finished shard, compute the rest, and produce exactly the
cells of an uninterrupted run in another folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SPEC = """\
mode = "simulate"
seed = 11
samplers = ["dynamic_shuffle", "poisson"]
threat_models = ["isolated"]
trials_in = 3000
trials_out = 3000
shard_size = 300
claim = 2.0
n_jobs = 1
backend = "loky"

[training]
sigma = 0.8
batch_size = 5
n = 1000
epochs = 10
"""
# epochs = 10 (2000 steps): each shard takes a sizeable fraction of a second, so the poll
# below sees two shards on disk long before the twentieth (with one epoch the simulator
# became fast enough to finish every shard between two polls on an idle machine)


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "audit.toml").write_text(SPEC)
    return folder


def _audit(folder: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "audit.cli", "run", str(folder), "--quiet", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _cells(folder: Path) -> list[dict]:
    cells = json.loads((folder / "summary.json").read_text())["cells"]
    return sorted(cells, key=lambda c: c["cell"])


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    killed = _folder(tmp_path, "killed")
    child = _audit(killed, "--no-report")
    shards = killed / "shards"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if len(list(shards.glob("*.npz"))) >= 2:
            break
        time.sleep(0.01)
    if child.poll() is not None:
        pytest.fail(
            f"the audit finished before it could be killed: {child.stderr.read().decode()[-500:]}"
        )
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    survivors = sorted(p.name for p in shards.glob("*.npz"))
    assert 2 <= len(survivors) < 20, survivors
    mtimes = {name: (shards / name).stat().st_mtime_ns for name in survivors}

    resumed = _audit(killed)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()[-1000:]
    for name, mtime in mtimes.items():  # finished shards were reused, not recomputed
        assert (shards / name).stat().st_mtime_ns == mtime
    assert not list(shards.glob(".*.tmp"))

    clean = _folder(tmp_path, "clean")
    whole = _audit(clean)
    assert whole.wait(timeout=300) == 0, whole.stderr.read().decode()[-1000:]
    keys = (
        "cell",
        "epsilon_lb",
        "epsilon_optimistic",
        "claimed_epsilon",
        "verdict",
        "evidence",
        "trials_in",
    )
    assert [{k: c[k] for k in keys} for c in _cells(killed)] == [
        {k: c[k] for k in keys} for c in _cells(clean)
    ]
