"""``noise_precision``'s level at scale and its power (issue 42 item 4; docs/design/deployed.md,
"Low-precision noise"): simulated correct trainings (tests/test_noise_precision.py's
``simulate``: the step in float32, the noise drawn in float32 or float64, read back as the
instrument does) at level 0.1, and the rate at which their pure-noise values count as on the
bfloat16 lattice against the bound ``lattice_probability`` uses; then noise drawn in bfloat16
and float16 (found on every training).

    python bench/noise_precision_levels.py                  # 500 trainings per row, ~1 min
    python bench/noise_precision_levels.py --trainings 100
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_noise_precision import simulate

from audit.stats.diagnostics import _noise, noise_precision
from audit.stats.float_collisions import lattice_probability, on_lattice

LEVEL = 0.1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trainings", type=int, default=500)
    args = parser.parse_args(argv)
    cap = int(stats.binom.ppf(0.999, args.trainings, LEVEL))
    print(f"level {LEVEL}: at most {cap} failures of {args.trainings} (binomial 0.999 quantile); "
          f"bound on the bfloat16-lattice rate {lattice_probability('bfloat16'):.3g}")
    start = time.perf_counter()
    for noise in ("float32", "float64", "bfloat16", "float16"):
        for sigma, clip in ((1.0, 1.0), (0.6, 3.0)):
            fails, on, total = 0, 0, 0
            for seed in range(args.trainings):
                obs = simulate(seed, m=500, steps=100, q=0.02, real=4500, noise=noise,
                               sigma=sigma, clip=clip)
                z = _noise(obs)
                f = noise_precision(obs, z, sigma, LEVEL)
                fails += (not f.passed) and f.refutes
                v = z[np.isfinite(z)]
                on += int(on_lattice(v / sigma, "bfloat16").sum())
                total += v.size
            print(f"{noise:8s} sigma {sigma} C {clip}: {fails} of {args.trainings} failed, "
                  f"bfloat16-lattice rate {on / total:.3g} "
                  f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
