"""Benchmark: draw 10,000 trials of n = 1,000, b = 10, one epoch, for every sampler.

Target (issue 2): under 1 s per sampler on one core. Run: ``python bench/samplers.py``
(options: --trials, --n, --batch-size, --epochs, --repeats). Prints the best of
``--repeats`` wall-clock times per sampler and the array each draw produced.
"""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from audit.core.names import SAMPLERS
from audit.sampling import get_sampler
from audit.sampling.factory import make_sampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cap = args.batch_size + math.ceil(2 * math.sqrt(args.batch_size))
    print(
        f"trials={args.trials} n={args.n} b={args.batch_size} E={args.epochs} (truncated "
        f"B={cap}); best of {args.repeats}"
    )
    print(f"{'sampler':<20}{'seconds':>9}  {'shape':<22}{'MB':>8}  target < 1 s")
    for name in SAMPLERS:
        sampler = make_sampler(
            name,
            n=args.n,
            batch_size=args.batch_size,
            epochs=args.epochs,
            max_batch_size=cap if "max_batch_size" in get_sampler(name).parameters else None,
        )
        times = []
        for repeat in range(args.repeats):
            rng = np.random.default_rng(repeat)
            start = time.perf_counter()
            batches = sampler.sample(rng, args.trials)
            times.append(time.perf_counter() - start)
            shape, megabytes = batches.shape, batches.nbytes / 2**20
            del batches
        best = min(times)
        print(
            f"{name:<20}{best:>9.3f}  {shape!s:<22}{megabytes:>8.1f}  "
            f"{'ok' if best < 1 else 'SLOW'}"
        )


if __name__ == "__main__":
    main()
