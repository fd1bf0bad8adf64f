"""Benchmark: how fast the ``audit`` command starts (issue 25 item 3).

Targets (issue 25): ``audit --help`` under 0.3 s and ``audit curves`` under 1.5 s of wall time on
the 2-core development machine. The CLI gets there by importing each command's stages inside the
command (docs/design.md §2.7): building the parser imports no numpy, scipy, torch or matplotlib,
and ``audit curves`` imports the theory (numpy, scipy) but neither torch nor matplotlib unless
``--plot`` is given.

Each command runs ``--runs`` times in a fresh interpreter (``python -m audit.cli``, as the console
script does, from the repository root), and the median, minimum and maximum wall times are
printed beside the target, with the 1-minute load average before and after (the machine may be
shared: wall times grow with the load). ``--importtime`` also prints the largest cumulative
imports of each command from ``python -X importtime``.

The first ``curves`` invocation is the README's, without its plot: dynamic shuffling against the
adversarial pair, sigma = 0.8, T = 1000, delta = 1e-6 (Gaussian DP upper bound, max-test lower
bound); the second is a Poisson-subsampled one, whose curves come from dp_accounting's privacy
loss distributions (the heaviest imports of any ``audit curves``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CURVES_ARGS: tuple[str, ...] = (
    "curves", "--sampler", "dynamic_shuffle", "--sigma", "0.8", "--steps", "1000",
    "--delta", "1e-6",
)
"""The README's ``audit curves`` example without ``--plot``."""

POISSON_CURVES_ARGS: tuple[str, ...] = (
    "curves", "--sampler", "poisson", "--sigma", "1.0", "--steps", "100", "--n", "1000",
)
"""Poisson subsampling (q = 1/T = 0.01, 100 steps): its curves are privacy loss distributions,
so this command imports dp_accounting and scipy.stats and composes two PLDs."""

COMMANDS: dict[str, tuple[tuple[str, ...], float]] = {
    "audit --help": (("--help",), 0.3),
    "audit " + " ".join(CURVES_ARGS): (CURVES_ARGS, 1.5),
    "audit " + " ".join(POISSON_CURVES_ARGS): (POISSON_CURVES_ARGS, 1.5),
}
"""Label -> (arguments of ``python -m audit.cli``, target wall seconds of issue 25)."""


def wall_seconds(argv: tuple[str, ...]) -> float:
    """Wall time of one ``python -m audit.cli argv`` in a fresh interpreter (output discarded)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "audit.cli", *argv], cwd=ROOT, check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def top_imports(argv: tuple[str, ...], count: int) -> list[tuple[int, str]]:
    """The ``count`` largest cumulative import times (microseconds, module) of one command, from
    ``python -X importtime`` (a module's time includes the modules it imports)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "audit.cli", *argv], cwd=ROOT, check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument(
        "--importtime", type=int, default=0, metavar="K",
        help="also print the K largest cumulative imports of each command",
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average before: {os.getloadavg()[0]:.2f}")
    for label, (argv, target) in COMMANDS.items():
        wall_seconds(argv)  # warm the file cache
        times = [wall_seconds(argv) for _ in range(args.runs)]
        median = statistics.median(times)
        verdict = "met" if median < target else "MISSED"
        print(f"{label}\n  median {median:.3f} s (min {min(times):.3f}, max {max(times):.3f}, "
              f"{args.runs} runs); target < {target} s: {verdict}")
        if args.importtime:
            for microseconds, name in top_imports(argv, args.importtime):
                print(f"    {microseconds / 1e3:9.1f} ms  {name.strip()}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
