"""Multi-epoch isolated shuffling: linear Berry-Esseen composition vs the random-allocation bound.

Prints (issue 15 item 2), for dynamic shuffling under the isolated threat model:

1. eps at delta = 1e-5 for M in {1e3, 1e4, 1e5}, sigma in {1, 2}, E in {1, 10, 100} under
   (a) linear composition f^E(a) >= (1 - delta_BE)^E - a (eps = 0 if 1 - (1 - delta_BE)^E <=
   delta, else infinite), (b) the numerical random-allocation bounds (upper: a guarantee;
   lower: achieved), (c) the exact lattice curve (one epoch by FFT, composed by a dominated
   lattice PLD; where its lattice fits), each with its time;
2. the rounds M and dataset size N = b M (b = 10) each guarantee needs for a target:
   (eps, delta) = (0, 1e-2) (van Dijk & Ertan's setting) and (1, 1e-5).

3. (issue 26, ``--low-noise``) the octave-lattice guarantee (docs/design.md §6.9) across
   sigma in {0.3, 0.4, 0.5, 0.6, 0.7}, T in {10, 100, 1000, 1e4}, E in {1, 10} (dynamic
   shuffling: E compositions; persistent rows: one epoch at sigma / sqrt(E)) beside
   pld-accounting's eps(1e-5) bracket, computed in a subprocess with a time limit
   (``--reference-timeout``, default 600 s) or read from ``--reference FILE`` (JSON lines
   {"sigma", "T", "E", "upper", "lower", "cpu_s"} as this script writes them with
   ``--write-reference FILE``). Columns: ours, its CPU time, the bracket, ours / its upper
   - 1, and whether ours stays above its lower end (both are sound: it must). Measured
   (docs/design.md §6.9): ours 0.0 to 11 s of CPU per curve, never below pld-accounting's
   lower end, at most 0.5% above its upper end; pld-accounting took 2 to 118 s of CPU per cell
   where it finished and ran past 300 to 600 s of wall time (shared machine) at most cells
   with T >= 100 and E = 10 and at T = 1e4.

Run: PYTHONPATH=. python bench/random_allocation.py [--quick | --sizes | --low-noise]. Measured on
the 2-core dev machine: part 1 about 45 s of CPU (each random-allocation pair 0.2 to 6 s, gap
upper/lower 0.6% to 3.5%), part 2 about 6 minutes of CPU (each search 2 to 135 s); wall time is
longer when the machine is shared. --quick: part 1 without M = 1e5; --sizes: part 2 only.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

from audit.sampling import get_sampler
from audit.theory.calibration import berry_esseen_rounds, shuffle_rounds
from audit.theory.random_allocation import random_allocation_curves
from audit.theory.random_allocation_octave import octave_allocation_upper
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


LOW_SIGMAS = (0.3, 0.4, 0.5, 0.6, 0.7)
LOW_ROUNDS = (10, 100, 1000, 10_000)
LOW_EPOCHS = (1, 10)
_REFERENCE = (
    "import json, sys, time, warnings; warnings.simplefilter('ignore'); "
    "from PLD_accounting import gaussian_allocation_epsilon_range as f; "
    "s, t, e = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); c = time.process_time(); "
    "u, l = f(delta=1e-5, sigma=s, num_steps=t, num_epochs=e); "
    "print(json.dumps({'sigma': s, 'T': t, 'E': e, 'upper': u, 'lower': l, "
    "'cpu_s': time.process_time() - c}))"
)


def _option(name: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def _reference(sigma: float, rounds: int, epochs: int, cache: dict, timeout: float) -> dict | None:
    """pld-accounting's bracket for (sigma, T, E compositions), cached; None past the timeout."""
    key = (round(sigma, 12), rounds, epochs)
    if key not in cache:
        try:
            out = subprocess.run(
                [sys.executable, "-c", _REFERENCE, repr(sigma), str(rounds), str(epochs)],
                capture_output=True, text=True, timeout=timeout, check=True,
            )
            cache[key] = json.loads(out.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
            cache[key] = None
    return cache[key]


def low_noise_table() -> None:
    """Part 3 (module docstring)."""
    timeout = float(_option("--reference-timeout", "600") or 600)
    cache: dict = {}
    source = _option("--reference")
    if source and Path(source).exists():
        for line in Path(source).read_text().splitlines():
            row = json.loads(line) if line.startswith("{") else None
            if row and "upper" in row:
                cache[(round(row["sigma"], 12), row["T"], row["E"])] = row
    print(f"\nlow noise: octave-lattice guarantee vs pld-accounting, eps at delta = {DELTA:g}")
    print(f"{'sampler':<18} {'sigma':>5} {'T':>6} {'E':>3} | {'ours':>9} {'cpu':>6} | "
          f"{'pld-acc lower':>13} {'upper':>9} {'cpu':>6} | {'ours/up-1':>9} {'>=low':>5}")
    written = []
    for sampler in ("dynamic_shuffle", "persistent_shuffle"):
        for epochs in LOW_EPOCHS:
            persistent = get_sampler(sampler).same_step_every_epoch
            if persistent and epochs == 1:
                continue  # the same as dynamic shuffling's E = 1
            for rounds in LOW_ROUNDS:
                for sigma in LOW_SIGMAS:
                    start = time.process_time()
                    ours = float(octave_allocation_upper(
                        sigma, rounds, epochs, sampler=sampler).epsilon(DELTA))
                    cpu = time.process_time() - start
                    eff = sigma / math.sqrt(epochs) if persistent else sigma
                    ref = _reference(eff, rounds, 1 if persistent else epochs, cache, timeout)
                    if ref is None:
                        tail = f"{'(over ' + format(timeout, 'g') + ' s)':>31} | {'':>9} {'':>5}"
                    else:
                        written.append(ref)
                        ratio = ours / ref["upper"] - 1
                        ok = "yes" if ours >= ref["lower"] else "NO"
                        tail = (f"{ref['lower']:>13.4f} {ref['upper']:>9.4f} {ref['cpu_s']:>5.0f}s"
                                f" | {ratio:>+9.2%} {ok:>5}")
                    print(f"{sampler:<18} {sigma:>5g} {rounds:>6} {epochs:>3} | {ours:>9.4f} "
                          f"{cpu:>5.1f}s | {tail}", flush=True)
    target = _option("--write-reference")
    if target:
        Path(target).write_text("".join(json.dumps(r) + "\n" for r in written))


if __name__ == "__main__":
    if "--low-noise" in sys.argv:
        low_noise_table()
        sys.exit(0)
    quick, sizes = "--quick" in sys.argv, "--sizes" in sys.argv
    start = time.time()
    if not sizes:
        eps_table([1000, 10_000] if quick else [1000, 10_000, 100_000])
    if not quick:
        size_table()
    print(f"\ntotal {time.time() - start:.0f} s")
