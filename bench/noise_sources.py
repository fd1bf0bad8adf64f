"""Benchmark: the same audit with torch's noise and with the compiled route's Philox noise.

The ``compiled_philox`` route (docs/design.md §12.3) draws another stream of the same law as
torch's ``normal_``, so an audit's numbers change draw by draw but must agree within their
sampling error. This runs the workload of ``runs/one-million`` (logistic regression on digits,
n = 1000, Poisson b = 10, T = 100, sigma = 1, isolated Dirac canary, every iterate observed, the
default attack) at a smaller size (``--trials`` IN and as many OUT) for several audit seeds,
once with the default route and once with ``AUDIT_COMPILED=0`` (the ``grouped`` torch route:
torch's noise stream, the same arithmetic up to float32 rounding), and prints per seed and
noise source eps_lb (a 95% lower bound), the optimistic eps (not a bound) and the AUROC, then
their median, 10th percentile and minimum over seeds, and a two-sample comparison of the AUROCs
(Welch's t on the per-seed values: a difference of the law would show as a shift larger than the
seed-to-seed spread).

Measured 2026-12-01 with the ziggurat stream (``philox4x32-10-ziggurat256``; 10,000 trainings per
audit, seeds 1-14, the shared 2-core machine): AUROC philox median 0.5355 (0.5236-0.5448) against
torch 0.5344 (0.5288-0.5441), mean difference -0.0002 (Welch t = -0.09, p = 0.93; paired by
seed, p = 0.94; seed-to-seed sd 0.0051 and 0.0046: 14 seeds a side detect a shift of 0.0052 with
80% power at the 5% level); eps_lb (95% lower bounds) medians 0.150 and 0.134 (Mann-Whitney p =
0.35, two-sample KS p = 0.64). Seeds 1-6 alone gave -0.0063 (p = 0.03) and seeds 7-14 +0.0044
(p = 0.05): single runs of 5-6 seeds swing by that much. The first Philox stream (Box-Muller),
seeds 1-5: AUROC median 0.5367 against 0.5386, difference -0.0037 (p = 0.15).

Again after the stream's third version (``philox4x32-10-ziggurat256-f32-classmajor``: the
ziggurat's core in float32, variate j to the kernel's class-major position j), ``--seeds 14``,
the shared machine: AUROC philox median 0.5348 (10th percentile 0.5268) against torch 0.5343
(0.5314), mean difference -0.0015 (Welch t = -0.74, p = 0.47; seed-to-seed sd 0.0047); eps_lb
medians 0.160 and 0.134, 10th percentiles 0.044 and 0.052, minima 0.037 and 0.036.

Run: ``python bench/noise_sources.py`` (options: --trials, --seeds, --first-seed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from scipy import stats

from audit.run.runner import run_audit
from audit.training.compiled import default_routes

SPEC = """mode = "train"
seed = {seed}
dataset = "digits"
model = "logistic"
samplers = ["poisson"]
threat_models = ["isolated"]
canary = "dirac"
observation = "all_iterates"
attacks = ["default"]
trials_in = {trials}
trials_out = {trials}
shard_size = {trials}
delta = 1e-5
alpha = 0.05
claim = "poisson"
n_jobs = 1
store = "scores"

[training]
n = 1000
batch_size = 10
epochs = 1
sigma = 1.0
clip = 1.0
lr = 0.5
"""


def audit_numbers(folder: Path, seed: int, trials: int) -> tuple[dict[str, float], float]:
    """(eps_lb, epsilon_optimistic, auroc) of the audit of ``seed`` run in ``folder``, and its
    wall-clock seconds."""
    folder.mkdir()
    (folder / "audit.toml").write_text(SPEC.format(seed=seed, trials=trials))
    start = time.perf_counter()
    run_audit(folder, progress=False)
    seconds = time.perf_counter() - start
    cell = json.loads((folder / "summary.json").read_text())["cells"][0]
    return {
        "eps_lb": cell["epsilon_lb"],
        "eps_opt": cell["epsilon_optimistic"],
        "auroc": cell["roc"]["auroc"],
    }, seconds


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    tenth = ordered[max(0, round(0.1 * (len(ordered) - 1)))]
    return f"median {statistics.median(values):.4f}, 10th pct {tenth:.4f}, min {ordered[0]:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=5000, help="trainings IN (and as many OUT) per audit"
    )
    parser.add_argument("--seeds", type=int, default=5, help="audit seeds F..F+S-1")
    parser.add_argument("--first-seed", type=int, default=1, help="the first audit seed F")
    args = parser.parse_args()
    sources = {"philox (compiled_philox)": "1", "torch normal_ (grouped, AUDIT_COMPILED=0)": "0"}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    print(
        f"runs/one-million's workload at {2 * args.trials:,} trainings per audit, seeds "
        f"{args.first_seed}..{args.first_seed + args.seeds - 1}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for name, flag in sources.items():
                os.environ["AUDIT_COMPILED"] = flag
                numbers, seconds = audit_numbers(
                    Path(scratch) / f"{flag}-{seed}", seed, args.trials
                )
                results[name].append(numbers)
                print(
                    f"  seed {seed} {name:<44} eps_lb {numbers['eps_lb']:.4f}  eps_opt "
                    f"{numbers['eps_opt']:.4f}  "
                    f"AUROC {numbers['auroc']:.4f}  ({seconds:.0f} s, route "
                    f"{default_routes()['logistic']})",
                    flush=True,
                )
    os.environ.pop("AUDIT_COMPILED")
    for key in ("eps_lb", "eps_opt", "auroc"):
        for name in sources:
            print(f"{key:>7} {name:<44} {summary([r[key] for r in results[name]])}")
    philox_auroc, torch_auroc = ([r["auroc"] for r in results[name]] for name in sources)
    test = stats.ttest_ind(philox_auroc, torch_auroc, equal_var=False)
    print(
        "AUROC, philox - torch: "
        f"{statistics.mean(philox_auroc) - statistics.mean(torch_auroc):+.4f} "
        f"(Welch t = {test.statistic:.2f}, p = {test.pvalue:.2f}; seed-to-seed sd "
        f"{statistics.stdev(torch_auroc):.4f})"
    )


if __name__ == "__main__":
    main()
