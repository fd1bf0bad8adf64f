"""What numba (the ``fast`` extra) buys: the same tiny audit workloads timed with numba and with
numba made unimportable (``sys.modules["numba"] = None``, as an environment without the extra),
each in a fresh process (so the compiled kernels' first-call cost, from numba's on-disk cache,
is counted as a user would meet it).

    .venv/bin/python bench/optional_numba.py [--trials 200]

Prints one line per workload: seconds with numba, without, and the ratio. The workloads are the
quickstart's training (logistic regression on digits, n = 1000, b = 1, Poisson, adversarial
Dirac canary) at fewer trials and one epoch, and ``audit simulate`` (Poisson).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], *, numba: bool) -> float:
    """Wall seconds of ``audit <argv>`` in a new process, with or without numba."""
    block = "" if numba else "import sys; sys.modules['numba'] = None; "
    code = f"{block}from audit.cli import main; main({argv!r})"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workloads = {
            f"train logistic digits n=1000 b=1 E=1 poisson, {args.trials} trials a side": [
                "train", "--dataset", "digits", "--model", "logistic", "--sampler", "poisson",
                "--sigma", "0.7", "--clip", "1", "--lr", "0.05", "--batch-size", "1",
                "--n", "1000", "--canary", "dirac", "--threat-model", "adversarial",
                "--trials", str(args.trials), "--seed", "0", "--quiet",
                "--out", str(Path(folder) / "o.npz"),
            ],
            "simulate poisson sigma=1 T=1000, 1e5 trials a side": [
                "simulate", "--sampler", "poisson", "--sigma", "1", "--steps", "1000",
                "--json",
            ],
        }
        for name, argv in workloads.items():
            timed(argv, numba=True)  # fills numba's on-disk cache
            fast, slow = timed(argv, numba=True), timed(argv, numba=False)
            print(f"{name}: with numba {fast:.1f} s, without {slow:.1f} s ({slow / fast:.2f}x)")


if __name__ == "__main__":
    main()
