"""Multi-epoch isolated shuffling: linear Berry-Esseen composition vs the random-allocation bound.

Prints (issue 15 item 2), for dynamic shuffling under the isolated threat model:

1. eps at delta = 1e-5 for M in {1e3, 1e4, 1e5}, sigma in {1, 2}, E in {1, 10, 100} under
   (a) linear composition f^E(a) >= (1 - delta_BE)^E - a (eps = 0 if 1 - (1 - delta_BE)^E <=
   delta, else infinite), (b) the numerical random-allocation bounds (upper: a guarantee;
   lower: achieved), (c) the exact lattice curve (one epoch by FFT, composed by a dominated
   lattice PLD; where its lattice fits), each with its time;
2. the rounds M and dataset size N = b M (b = 10) each guarantee needs for a target:
   (eps, delta) = (0, 1e-2) (van Dijk & Ertan's setting) and (1, 1e-5).

Run: PYTHONPATH=. python bench/random_allocation.py [--quick | --sizes]. Measured on the
2-core dev machine: part 1 about 45 s of CPU (each random-allocation pair 0.2 to 6 s, gap
upper/lower 0.6% to 3.5%), part 2 about 6 minutes of CPU (each search 2 to 135 s); wall time
is longer when the machine is shared. --quick: part 1 without M = 1e5; --sizes: part 2 only.
"""

from __future__ import annotations

import math
import sys
import time

from audit.theory.calibration import berry_esseen_rounds, shuffle_rounds
from audit.theory.random_allocation import random_allocation_curves
from audit.theory.shuffle_isolated import berry_esseen_applies, delta_be, isolated_exact_curve

DELTA = 1e-5


def _fmt(x: float) -> str:
    return "inf" if not math.isfinite(x) else f"{x:.4f}"


def eps_table(rounds: list[int]) -> None:
    print(f"eps at delta = {DELTA:g}, dynamic shuffle, isolated")
    print(f"{'M':>7} {'sigma':>5} {'E':>4} | {'linear BE':>9} {'(delta_tot)':>11} | "
          f"{'RA lower':>8} {'RA upper':>8} {'gap':>6} {'time':>6} | {'exact':>8} {'time':>6}")
    for m in rounds:
        for sigma in (1.0, 2.0):
            for epochs in (1, 10, 100):
                if berry_esseen_applies(sigma, m):
                    d = delta_be(sigma, m)
                    tot = -math.expm1(epochs * math.log1p(-d)) if d < 1 else 1.0
                    linear = 0.0 if tot <= DELTA else math.inf
                else:
                    tot, linear = math.nan, math.inf
                t0 = time.process_time()
                try:
                    upper, lower = random_allocation_curves(sigma, m, epochs)
                    up, lo = float(upper.epsilon(DELTA)), float(lower.epsilon(DELTA))
                except ValueError:
                    up = lo = math.nan
                t_ra = time.process_time() - t0
                t0 = time.process_time()
                try:
                    ex = float(isolated_exact_curve(sigma, m, epochs).epsilon(DELTA))
                except ValueError:
                    ex = math.nan
                t_ex = time.process_time() - t0
                gap = up / lo - 1 if lo > 0 else math.nan
                print(f"{m:>7} {sigma:>5g} {epochs:>4} | {_fmt(linear):>9} {tot:>11.3g} | "
                      f"{_fmt(lo):>8} {_fmt(up):>8} {gap:>6.2%} {t_ra:>5.1f}s | {_fmt(ex):>8} "
                      f"{t_ex:>5.1f}s", flush=True)


def size_table() -> None:
    print("\nrounds M (N = 10 M) for a target, dynamic shuffle, isolated")
    print(f"{'eps':>4} {'delta':>6} {'sigma':>5} {'E':>4} | {'linear BE M':>14} | "
          f"{'random allocation M':>19} {'time':>6}")
    for eps, delta in ((0.0, 1e-2), (1.0, 1e-5)):
        for sigma in (1.0, 2.0):
            for epochs in (1, 10, 100):
                try:
                    be = berry_esseen_rounds(sigma, delta, epochs).rounds
                except ValueError:
                    be = None
                t0 = time.process_time()
                ra = shuffle_rounds(sigma, delta, epochs, epsilon=eps, max_rounds=10**6,
                                    max_cells=2**22).random_allocation
                t = time.process_time() - t0
                print(f"{eps:>4g} {delta:>6g} {sigma:>5g} {epochs:>4} | {be or 'n/a':>14} | "
                      f"{ra or 'not reached':>19} {t:>5.0f}s", flush=True)


if __name__ == "__main__":
    quick, sizes = "--quick" in sys.argv, "--sizes" in sys.argv
    start = time.time()
    if not sizes:
        eps_table([1000, 10_000] if quick else [1000, 10_000, 100_000])
    if not quick:
        size_table()
    print(f"\ntotal {time.time() - start:.0f} s")
