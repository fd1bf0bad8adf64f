"""Benchmark: peak memory, time and disk of ``audit run`` against the trial count (issue 16 items
3-4).

``audit run`` keeps, with ``store = "scores"``, one score per training and attack on disk and
computes the statistics from sorted score files (:mod:`audit.stats.score_files`), so the peak
resident memory of its main process should not grow with the trial count. This script runs the real
command, ``python -m audit.cli run DIR --quiet`` (the ``audit run`` of this checkout), on copies of
``runs/ten-million/audit.toml`` with fewer trainings (``--trainings``; trials_in = trials_out =
half; ``--backend``/``--n-jobs`` default loky and 2), or on a given run folder (``--run``, e.g. the
ten-million run itself on its local Dask cluster), and reports:

- **peak RSS of the main process**: its own ``getrusage(RUSAGE_SELF).ru_maxrss``, written at exit
  by a three-line wrapper that runs ``audit.cli`` as ``python -m`` does (exact: the kernel's
  high-water mark of that process alone; ``/usr/bin/time -v`` reports the largest of the process
  and its reaped children, which would mix in the workers); for a process killed before its
  exit handlers run, the last sample of its ``VmHWM``;
- **peak RSS of each worker**: the kernel's ``VmHWM`` (/proc/<pid>/status) of every descendant
  process (loky workers, Dask worker processes), sampled every 0.2 s with psutil's process tree
  (the high-water mark only grows, so the figure is exact up to the last sample before the worker
  exits);
- wall time, CPU seconds of the whole process tree (user + system of the main process and its
  reaped descendants, from ``os.wait4``), the 1-minute load average before and after (the machine
  may be shared), the disk used by ``shards/`` and ``scores/``, and the runner's run.json.

``--interrupt-after S`` sends SIGINT (Ctrl-C) to the main process after S seconds, waits for it,
then runs the same command again (the runner resumes: run.json's ``shards_reused``).

Measured 2026-11-30 (the 2-core machine shared with other engineers' jobs: 1-minute load 6 during
these runs, so the times are slow; the memory figures do not depend on the load). The ten-million
workload (logistic on digits, n 100, Poisson b 10, T 10, isolated Dirac canary, sigma 0.8,
store = "scores", shards of 5000 trials sized from the memory estimate), loky, n_jobs = 2:

=============  ======  ==============  ===================  ========  =======  ============
trainings      shards  peak RSS main   peak RSS per worker  wall      CPU      disk shards
=============  ======  ==============  ===================  ========  =======  ============
1e4            1       539 MiB         629 MiB              26.0 s    11.5 s   0.08 MiB
1e5            10      539 MiB         682, 634 MiB         60.2 s    25.8 s   0.79 MiB
1e6            100     547 MiB         741, 734 MiB         268.8 s   117.9 s  7.9 MiB
=============  ======  ==============  ===================  ========  =======  ============

Issue 16's audit workload (``--n 1000``: T = 100 steps, the same sigma 0.8), loky, n_jobs = 2,
load 1.7-3.2:

=============  ======  ==============  =======================  ========  =======  ============
trainings      shards  peak RSS main   peak RSS per worker      wall      CPU      disk shards
=============  ======  ==============  =======================  ========  =======  ============
1e5            10      494 MiB         935, 880 MiB             91.2 s    93.3 s   0.79 MiB
1e6            100     492 MiB         989, 968, 955, 943 MiB   741.1 s   816.5 s  7.9 MiB
=============  ======  ==============  =======================  ========  =======  ============

(four workers at 1e6: loky's memory-leak guard restarted both workers once, "A worker stopped
while some jobs were given to the executor": with psutil installed, loky ends a worker whose
resident size exceeds its size after its first task by 300 MB).

The main process stays at 539-547 MiB from 1e4 to 1e6 trainings of the ten-million workload and
at 492-494 MiB at 1e5 and 1e6 of the issue's (torch, matplotlib and the harness imported account
for about 360 MiB; the theory curves and the report for the rest). 1e7 trainings on the local
Dask cluster (runs/ten-million/README.md): main 570 MiB (569 MiB at 1e5 on the same cluster: the
Dask scheduler and client run in it), workers 665 and 663 MiB.

Run: ``python bench/run_memory.py --trainings 10000 100000 1000000`` (``--n 1000`` for the issue's
workload) or
``python bench/run_memory.py --run runs/ten-million --interrupt-after 120 --json FILE``
(needs psutil, installed with the ``distributed`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
TEN_MILLION = ROOT / "runs" / "ten-million" / "audit.toml"
SAMPLE_SECONDS = 0.2

# Runs `audit.cli` as `python -m audit.cli` does, then writes this process's own peak RSS (KiB).
WRAPPER = (
    "import atexit, resource, runpy, sys\n"
    "out = sys.argv.pop(1)\natexit.register(lambda: open(out, "
    "'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))\n"
    "sys.argv[0] = 'audit'\nrunpy.run_module('audit.cli', run_name='__main__', alter_sys=True)\n"
)


@dataclass
class Measurement:
    """One ``audit run`` command, measured (sizes in MiB, times in seconds)."""

    command: str
    exit_code: int
    wall_s: float
    cpu_s: float
    main_peak_rss_mib: float
    worker_peak_rss_mib: list[float] = field(default_factory=list)
    load_before: float = 0.0
    load_after: float = 0.0
    interrupted: bool = False


RUN_KEYS = (
    "shards_total", "shards_computed", "shards_reused", "compute_seconds", "backend", "n_jobs"
)
"""The keys of the runner's run.json that the report prints."""


def _hwm_kib(pid: int) -> int | None:
    """The kernel's peak resident set size of one process (VmHWM, KiB), or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def measure(
    run_dir: Path, *, interrupt_after: float | None = None, extra: tuple[str, ...] = ()
) -> Measurement:
    """Run ``audit run run_dir --quiet`` once and measure it (module docstring)."""
    with tempfile.NamedTemporaryFile("r", suffix=".maxrss") as peak_file:
        argv = [
            sys.executable,
            "-c",
            WRAPPER,
            peak_file.name,
            "run",
            str(run_dir),
            "--quiet",
            *extra,
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        # SIGINT back to its default in the child: a shell's background job starts with it ignored,
        # and Python then installs no KeyboardInterrupt handler (Ctrl-C would be lost).
        main = subprocess.Popen(
            argv, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
        )
        process = psutil.Process(main.pid)
        workers: dict[int, int] = {}
        main_hwm, interrupted = 0, False
        while True:
            pid, status, usage = os.wait4(main.pid, os.WNOHANG)
            if pid:
                break
            main_hwm = max(main_hwm, _hwm_kib(main.pid) or 0)
            try:
                for child in process.children(recursive=True):
                    if (hwm := _hwm_kib(child.pid)) is not None:
                        workers[child.pid] = max(workers.get(child.pid, 0), hwm)
            except psutil.NoSuchProcess:
                pass
            if (
                interrupt_after is not None
                and not interrupted
                and time.perf_counter() - start > interrupt_after
            ):
                main.send_signal(signal.SIGINT)
                interrupted = True
            time.sleep(SAMPLE_SECONDS)
        main.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        # its own figure at exit; the last sample if it was killed before writing it
        main_kib = max(int(Path(peak_file.name).read_text() or 0), main_hwm)
    return Measurement(
        command=" ".join(["audit", "run", str(run_dir), "--quiet", *extra]),
        exit_code=main.returncode,
        wall_s=round(wall, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
        main_peak_rss_mib=round(main_kib / 1024, 1),
        worker_peak_rss_mib=sorted(
            (round(k / 1024, 1) for k in workers.values() if k > 50 * 1024), reverse=True
        ),
        load_before=round(load_before, 2),
        load_after=round(os.getloadavg()[0], 2),
        interrupted=interrupted,
    )


def disk_mib(folder: Path) -> float:
    """Bytes of the regular files under ``folder``, in MiB."""
    return (
        round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 2)
        if folder.exists()
        else 0.0
    )


def scaled_spec(trainings: int, backend: str, n_jobs: int, n: int = 100) -> str:
    """runs/ten-million/audit.toml with ``trainings`` in all (half IN, half OUT) on ``backend``,
    and ``n`` examples (T = n / 10 steps)."""
    if trainings % 2:
        raise ValueError(f"--trainings {trainings}: must be even (trials_in = trials_out = half)")
    text = re.sub(r"(?m)^n = 100 ", f"n = {n} ", TEN_MILLION.read_text())
    text = re.sub(
        r"(?m)^(trials_in|trials_out) = \d+", lambda m: f"{m.group(1)} = {trainings // 2}", text
    )
    text = re.sub(r'(?m)^backend = "\w+"', f'backend = "{backend}"', text)
    return re.sub(r"(?m)^n_jobs = \d+", f"n_jobs = {n_jobs}", text)


def report(run_dir: Path, measurements: list[Measurement]) -> dict:
    """Everything measured for one run folder, printed and returned."""
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    result = {
        "run_dir": str(run_dir),
        "commands": [asdict(m) for m in measurements],
        "wall_s_total": round(sum(m.wall_s for m in measurements), 1),
        "cpu_s_total": round(sum(m.cpu_s for m in measurements), 1),
        "disk_shards_mib": disk_mib(run_dir / "shards"),
        "disk_scores_mib": disk_mib(run_dir / "scores"),
        "run_json": run,
    }
    for m in measurements:
        workers = ", ".join(f"{w:.0f}" for w in m.worker_peak_rss_mib) or "none"
        print(
            f"{m.command}{' (interrupted)' if m.interrupted else ''}: exit {m.exit_code}, wall "
            f"{m.wall_s:.1f} s, "
            f"CPU {m.cpu_s:.1f} s, peak RSS main {m.main_peak_rss_mib:.0f} MiB, workers "
            f"[{workers}] MiB, load {m.load_before:.2f} -> {m.load_after:.2f}"
        )
    print(
        f"  disk: shards {result['disk_shards_mib']} MiB, scores {result['disk_scores_mib']} MiB; "
        f"run.json: {json.dumps({k: run.get(k) for k in RUN_KEYS})}"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainings", type=int, nargs="*", default=[10_000, 100_000],
                        help="trainings in all (IN + OUT) of each scaled copy of runs/ten-million")
    parser.add_argument("--backend", default="loky", help="joblib backend of the scaled copies")
    parser.add_argument("--n-jobs", type=int, default=2, help="workers of the scaled copies")
    parser.add_argument(
        "--n",
        type=int,
        default=100,
        help="examples of the scaled copies (T = n / 10): 100 as runs/ten-million, 1000 as issue "
             "16's audit",
    )
    parser.add_argument(
        "--run", type=Path, help="measure this run folder instead (e.g. runs/ten-million)"
    )
    parser.add_argument(
        "--interrupt-after", type=float, help="Ctrl-C after this many seconds, then resume"
    )
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()
    results = []
    if args.run is not None:
        first = measure(args.run, interrupt_after=args.interrupt_after)
        runs = [first] if not first.interrupted else [first, measure(args.run)]
        results.append(report(args.run, runs))
    else:
        with tempfile.TemporaryDirectory(prefix="run_memory.") as tmp:
            for trainings in args.trainings:
                folder = Path(tmp) / f"t{trainings}"
                folder.mkdir()
                (folder / "audit.toml").write_text(
                    scaled_spec(trainings, args.backend, args.n_jobs, args.n)
                )
                runs = [measure(folder, interrupt_after=args.interrupt_after)]
                if runs[0].interrupted:
                    runs.append(measure(folder))
                results.append({"trainings": trainings, **report(folder, runs)})
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
