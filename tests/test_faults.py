"""Fault injection (issue 23): every fault ends in its exit code and one line naming the culprit,
and a run that resumes after a fault gives the results of an uninterrupted run.

Each test runs the ``audit`` command in this process (``audit.cli.main``, so each takes seconds)
on tiny simulated specs, except the kill -9 test, which needs a separate process to kill. The
faults: a truncated, an empty and a bit-flipped shard, a damaged manifest and score file, a
full disk (a patched write), a temporary file left by a write killed midway, two runs on one
folder, a model factory, an implementation and an accountant that raise, a diverging training,
malformed arguments of every command, and kill -9 of ``audit run`` with its loky workers.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit.cli import main
from audit.core.errors import AuditEnvironmentError, AuditInputError, exit_code

SPEC = """\
mode = "simulate"
seed = 5
samplers = ["poisson"]
threat_models = ["isolated"]
trials_in = 400
trials_out = 400
shard_size = 100
claim = 2.0
n_jobs = 1
backend = "loky"

[training]
sigma = 0.8
batch_size = 5
n = 100
epochs = 1
"""

TRAIN_SPEC = """\
mode = "train"
seed = 1
dataset = "digits"
model = "{model}"
samplers = ["poisson"]
threat_models = ["adversarial"]
canary = "dirac"
observation = "all_iterates"
trials_in = 4
trials_out = 4
shard_size = 2
claim = "poisson"
n_jobs = 1
backend = "loky"
{extra}
[training]
n = 50
batch_size = 5
epochs = 1
sigma = 0.7
clip = 1.0
lr = {lr}
"""

PLUGIN = '''\
from audit.plugins.broken import correct


def factory(input_shape, num_classes):
    raise RuntimeError("factory exploded")


def explodes(data, canary, setup, seed):
    raise RuntimeError("implementation exploded")


def accountant(mechanism, delta):
    raise RuntimeError("accountant exploded")
'''


def _folder(root: Path, name: str, spec: str = SPEC) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "audit.toml").write_text(spec)
    return folder


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """(exit code, stderr) of ``audit *argv`` in this process (argparse's exit included)."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = int(stop.code or 0)
    return code, capsys.readouterr().err


def _one_line_error(err: str) -> str:
    """The error line of stderr: exactly one line starting 'audit <command>: error:', no
    traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def _cells(folder: Path) -> list[dict]:
    return json.loads((folder / "summary.json").read_text())["cells"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The cells of an uninterrupted run of SPEC."""
    folder = _folder(tmp_path_factory.mktemp("faults"), "reference")
    assert main(["run", str(folder), "--quiet"]) == 0
    return _cells(folder)


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 3]))
    elif how == "empty":
        path.write_bytes(b"")
    else:  # a bit flip inside the first array's data (its CRC-32 no longer matches)
        data[len(data) // 4] ^= 0x10
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "empty", "bitflip"])
def test_damaged_shard_is_named_moved_aside_and_recomputed(
    tmp_path, capsys, reference, how
) -> None:
    folder = _folder(tmp_path, "run")
    assert main(["run", str(folder), "--quiet", "--no-report"]) == 0
    shard = folder / "shards" / "poisson-isolated.00001.n100.npz"
    _damage(shard, how)
    others = {p.name: p.stat().st_mtime_ns for p in (folder / "shards").glob("*.npz") if p != shard}
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 0, err
    assert str(shard) in err and "moved to" in err and "Traceback" not in err
    moved = list((folder / "damaged").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith("shards.poisson-isolated.00001.n100.npz")
    kept = {name: (folder / "shards" / name).stat().st_mtime_ns for name in others}
    assert kept == others  # the good shards were kept, not recomputed
    assert _cells(folder) == reference


def test_damaged_manifest_and_score_file_recover(tmp_path, capsys, reference) -> None:
    folder = _folder(tmp_path, "run")
    assert main(["run", str(folder), "--quiet"]) == 0
    (folder / "shards" / "manifest.json").write_text("{not json")
    code, err = _audit(capsys, "run", str(folder), "--quiet", "--no-report")
    assert code == 0 and "manifest.json: damaged" in err, err
    score = next((folder / "scores").glob("*.npz"))
    _damage(score, "truncated")
    code, err = _audit(capsys, "report", str(folder))
    assert code == 0 and str(score) in err, err
    assert _cells(folder) == reference


def test_damaged_score_file_without_shards_names_what_to_run(tmp_path, capsys) -> None:
    folder = _folder(tmp_path, "run")
    assert main(["run", str(folder), "--quiet"]) == 0
    for shard in (folder / "shards").glob("*.npz"):
        shard.unlink()
    _damage(next((folder / "scores").glob("*.npz")), "empty")
    code, err = _audit(capsys, "report", str(folder))
    assert code == 2
    assert "missing" in _one_line_error(err) and f"audit run {folder}" in err


def test_full_disk_leaves_nothing_half_written_and_resumes(
    tmp_path, capsys, monkeypatch, reference
) -> None:
    import audit.run.store

    folder = _folder(tmp_path, "run")
    real_save, calls = audit.run.store._save, []

    def save(handle, arrays):  # the third shard's write finds the disk full midway
        calls.append(1)
        if len(calls) == 3:
            handle.write(b"PK\x03\x04 partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(handle, arrays)

    monkeypatch.setattr(audit.run.store, "_save", save)
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 3
    line = _one_line_error(err)
    assert "No space left on device" in line and "poisson-isolated.00002.n100.npz" in line
    assert "nothing was left half-written" in line
    shards = folder / "shards"
    assert (
        not list(shards.glob(".*.tmp"))
        and not (shards / "poisson-isolated.00002.n100.npz").exists()
    )
    assert len(list(shards.glob("*.npz"))) == 2
    monkeypatch.setattr(audit.run.store, "_save", real_save)
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 0, err
    assert _cells(folder) == reference


def test_a_write_killed_midway_leaves_only_a_temporary_file(tmp_path, capsys, reference) -> None:
    """kill -9 mid-write: what remains is a temporary file (the target appears only by rename);
    the next run removes it and computes the shard."""
    folder = _folder(tmp_path, "run")
    assert main(["run", str(folder), "--quiet", "--no-report"]) == 0
    shard = folder / "shards" / "poisson-isolated.00003.n100.npz"
    tmp = shard.with_name(f".{shard.name}.99999.tmp")
    tmp.write_bytes(shard.read_bytes()[:100])
    shard.unlink()
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 0, err
    assert not tmp.exists() and shard.exists()
    assert _cells(folder) == reference


def test_second_run_on_a_locked_folder_names_the_holder(tmp_path, capsys) -> None:
    from audit.run.lock import run_lock

    folder = _folder(tmp_path, "run")
    with run_lock(folder):  # another open file description: flock refuses it as another process
        for command in ("run", "report"):
            code, err = _audit(
                capsys, command, str(folder), *(["--quiet"] if command == "run" else [])
            )
            assert code == 3
            line = _one_line_error(err)
            assert (
                "another audit run holds this run folder" in line and f"pid {os.getpid()}" in line
            )
    assert not (folder / "shards").exists()  # nothing was computed under the other's lock
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 0, err  # released: the next run takes it


@pytest.mark.slow
def test_concurrent_runs_one_computes(tmp_path) -> None:
    """Two `audit run` processes on one folder: one runs, the other stops at once with exit 3."""
    folder = _folder(tmp_path, "run")
    command = [sys.executable, "-m", "audit.cli", "run", str(folder), "--quiet"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (folder / ".lock").exists() or not (folder / ".lock").read_text():
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    first.communicate(timeout=300)
    assert first.returncode == 0
    if second.returncode == 0:  # the first had finished before the second started: nothing to test
        pytest.skip("the first run finished before the second one started")
    assert second.returncode == 3
    assert f"pid {first.pid}" in _one_line_error(second.stderr)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "faultplug.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "faultplug"


def test_model_factory_that_raises(tmp_path, capsys, plugin) -> None:
    folder = _folder(
        tmp_path, "run", TRAIN_SPEC.format(model=f"{plugin}:factory", extra="", lr=0.1)
    )
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 2
    line = _one_line_error(err)
    assert "faultplug:factory raised RuntimeError: factory exploded" in line


def test_implementation_that_raises_names_shard_and_trial(tmp_path, capsys, plugin) -> None:
    spec = TRAIN_SPEC.format(
        model="logistic", extra=f'implementation = "{plugin}:explodes"\n', lr=0.1
    )
    folder = _folder(tmp_path, "run", spec)
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 2
    line = _one_line_error(err)
    assert "poisson-adversarial shard 0" in line and "trial 0 (IN)" in line
    assert "faultplug:explodes" in line and "implementation exploded" in line


def test_accountant_that_raises_is_an_invalid_cell_not_a_crash(capsys, plugin) -> None:
    """Issue 45 item 2: an accountant that raises makes each cell it raises on ``invalid``
    with the message (exit 5), and every other cell is still checked (no traceback)."""
    capsys.readouterr()
    code = main(["check-accountant", f"{plugin}:accountant", "--quiet"])
    captured = capsys.readouterr()
    assert code == 5
    assert "raised RuntimeError: accountant exploded" in captured.out
    from audit.accounting.check import load_grid

    cells = len(load_grid("default"))  # every cell of the default grid, none stopping the check
    assert f"{cells} invalid" in captured.out and "Traceback" not in captured.err


def test_diverging_training_is_refused_naming_shard_and_keys(tmp_path, capsys) -> None:
    folder = _folder(tmp_path, "run", TRAIN_SPEC.format(model="logistic", extra="", lr=1e300))
    with pytest.warns(RuntimeWarning):  # numpy's overflow warning from the engine
        code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 2
    line = _one_line_error(err)
    assert "poisson-adversarial shard 0" in line and "diverged" in line and "lr = 1e+300" in line


def test_debug_prints_the_traceback(tmp_path, capsys) -> None:
    code, err = _audit(capsys, "--debug", "samplers", "--n", "0")
    assert code == 2 and "Traceback" in err and "n=0 must be >= 1" in err


MISSING = "/nonexistent-audit-folder"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["samplers", "--n", "0"], "n=0"),
        (["samplers", "--n", "10", "--batch-size", "11"], "batch_size=11"),
        (["samplers", "--n", "1.5"], "--n"),
        (
            [
                "curves",
                "--sampler",
                "poisson",
                "--sigma",
                "1",
                "--steps",
                "10",
                "--plot",
                f"{MISSING}/x.png",
            ],
            "--plot",
        ),
        (["curves", "--sampler", "nosuch", "--sigma", "1", "--steps", "10"], "sampler"),
        (
            ["simulate", "--sampler", "poisson", "--sigma", "1", "--steps", "10", "--trials", "1"],
            "trials",
        ),
        (
            [
                "simulate",
                "--sampler",
                "poisson",
                "--sigma",
                "1",
                "--steps",
                "10",
                "--trials",
                "1e30",
            ],
            "--trials",
        ),
        (
            ["plan", "--sampler", "poisson", "--sigma", "-1", "--steps", "10", "--claim", "1"],
            "sigma",
        ),
        (
            [
                "train",
                "--dataset",
                "digits",
                "--model",
                "logistic",
                "--sampler",
                "poisson",
                "--sigma",
                "1",
                "--clip",
                "1",
                "--lr",
                "0.1",
                "--batch-size",
                "5",
                "--n",
                "50",
                "--canary",
                "dirac",
                "--threat-model",
                "adversarial",
                "--trials",
                "2",
                "--seed",
                "0",
                "--out",
                f"{MISSING}/x.npz",
            ],
            "--out",
        ),
        (["run", MISSING], MISSING),
        (["report", MISSING], MISSING),
        (["check-accountant", "nosuch"], "nosuch"),
    ],
)
def test_malformed_arguments_exit_2_with_one_named_line(capsys, argv, named) -> None:
    code, err = _audit(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"audit {argv[0]}: error:") or last.startswith("audit: error:"), err
    assert named in last, err


def test_errors_survive_pickling_and_map_to_exit_codes() -> None:
    """A worker process raises, the parent re-raises: the class, message, culprit and fix
    survive."""
    error = pickle.loads(pickle.dumps(AuditInputError("bad", culprit="lr", fix="lower it")))
    assert isinstance(error, ValueError) and str(error) == "bad; lower it" and error.culprit == "lr"
    assert exit_code(error) == 2 and exit_code(AuditEnvironmentError("disk")) == 3
    assert exit_code(OSError(errno.ENOSPC, "full")) == 3 and exit_code(RuntimeError("bug")) == 4


KILL_SPEC = (
    SPEC.replace("trials_in = 400", "trials_in = 3000")
    .replace("trials_out = 400", "trials_out = 3000")
    .replace("shard_size = 100", "shard_size = 300")
    .replace("n_jobs = 1", "n_jobs = 2")
    .replace("n = 100\nepochs = 1", "n = 1000\nepochs = 10")
)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, needs pgrep")
def test_kill_9_ends_the_workers_and_the_run_resumes(tmp_path) -> None:
    """kill -9 of `audit run` (n_jobs = 2, loky): its worker processes end within seconds (the
    watchdog, audit.run.watchdog), and the re-run gives the cells of an uninterrupted run."""
    killed = _folder(tmp_path, "killed", KILL_SPEC)
    child = subprocess.Popen([sys.executable, "-m", "audit.cli", "run", str(killed), "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and child.poll() is None:
        if list((killed / "shards").glob("*.npz")) and len(_children(child.pid)) >= 2:
            break
        time.sleep(0.05)
    if child.poll() is not None:
        pytest.fail(
            f"the audit ended before it could be killed: {child.stderr.read().decode()[-500:]}"
        )
    workers = _children(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 15  # the watchdog polls every 0.5 s; a busy machine is slower
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "workers outlived the killed run"
    resumed = subprocess.run([sys.executable, "-m", "audit.cli", "run", str(killed), "--quiet"],
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    fresh = _folder(tmp_path, "fresh", KILL_SPEC)
    assert main(["run", str(fresh), "--quiet", "--n-jobs", "1"]) == 0
    assert _cells(killed) == _cells(fresh)


def test_report_rebuilds_from_complete_scores_of_an_older_version(
    tmp_path, capsys, monkeypatch, reference
) -> None:
    """Committed runs keep their scores, not their shards; the code moves on. `audit report`
    rebuilds the report from complete scores of one older version, saying which (the same cells),
    while `audit run` still refuses to resume shards across versions."""
    import audit.run.fingerprint

    folder = _folder(tmp_path, "run")
    # the older code
    monkeypatch.setattr(audit.run.fingerprint, "harness_source_hash", lambda: "0" * 64)
    assert main(["run", str(folder), "--quiet"]) == 0
    monkeypatch.undo()
    # shards of the older version: refused
    code, err = _audit(capsys, "run", str(folder), "--quiet")
    assert code == 2 and "harness code" in _one_line_error(err)
    for shard in (folder / "shards").glob("*.npz"):
        shard.unlink()
    (folder / "shards" / "manifest.json").unlink()
    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "older version of the code" in out and "000000000000" in out
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["scores_version"]["harness_source"] == "0" * 64
    assert "older version of the code" in (folder / "report.md").read_text()
    assert summary["cells"] == reference


def test_report_refuses_scores_of_another_spec(tmp_path, capsys) -> None:
    folder = _folder(tmp_path, "run")
    assert main(["run", str(folder), "--quiet"]) == 0
    for shard in (folder / "shards").glob("*.npz"):
        shard.unlink()
    spec = folder / "audit.toml"
    spec.write_text(spec.read_text().replace("trials_in = 400", "trials_in = 300"))
    code, err = _audit(capsys, "report", str(folder))
    assert code == 2 and "missing" in _one_line_error(err)
