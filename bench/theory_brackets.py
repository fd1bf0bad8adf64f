"""Every committed run's theory brackets: lower, upper, the width and the time to compute.

For each ``runs/**/audit.toml`` and each of its (sampler, threat model) cells, the mechanism's
``bounds_for`` curves (docs/design.md §6) are read at the spec's delta: eps of the ``lower`` curve
(achieved: the true eps is at least this) and of the ``upper`` curve (a guarantee: at most this),
the width upper / lower - 1 in percent, and the CPU seconds ``bounds_for`` took (one core; every
cache in audit.* emptied before each cell, so each time is a cold one). Cells wider than 5% are
marked ``open`` with the reason (docs/design.md §6.3, §6.8 - §6.10) and the theory's notes.

Run: PYTHONPATH=. python bench/theory_brackets.py [--runs DIR] [--json OUT]
This does not recompute any report: it prints the brackets the current theory gives.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from audit.run.spec import load_spec
from audit.sampling import get_sampler
from audit.theory.bounds import bounds_for

OPEN_WIDTH = 0.05
"""A bracket wider than this (upper / lower - 1) is listed as open."""


def _reason(sampler: str, threat_model: str) -> str:
    """Why a cell's bracket can stay open (docs/design.md)."""
    chosen = get_sampler(sampler)
    one_step = chosen.canary_law == "uniform_step_per_epoch"
    if one_step and threat_model == "adversarial":
        return ("adversarial shuffle: no guarantee below the deterministic curve is known for "
                "the pair MoG(2) vs MoG(1) under zero-out (docs/design.md §6.10)")
    if "max_batch_size" in chosen.parameters:
        return ("truncated Poisson: the count-revealing pair (a guarantee for every co-batch) "
                "vs the isolated pair's achieved curve; no achieved curve above the isolated "
                "one is known (docs/design.md §6.3)")
    if one_step:
        return ("random-allocation pair: the lower curve is the max test where the linear "
                "lattice does not fit (docs/design.md §6.9)")
    return "see docs/design.md §6"


def _clear_caches() -> None:
    """Empty every functools cache in audit.* so each cell's time is a cold computation."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("audit") or module is None:
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


def _specs(root: Path) -> list[Path]:
    return sorted(root.glob("**/audit.toml"))


def brackets(root: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for path in _specs(root):
        try:
            spec = load_spec(path)
        except Exception as err:  # a spec this checkout cannot load: say so, go on
            print(f"{path}: not loaded ({type(err).__name__}: {err})", flush=True)
            continue
        delta = float(spec.claim.delta)
        for key in spec.training_keys():
            row: dict[str, object] = {
                "run": str(path.parent.relative_to(root)), "sampler": key.sampler,
                "threat_model": key.threat_model, "delta": delta,
            }
            try:
                mechanism = spec.mechanism(key)
                _clear_caches()
                start = time.process_time()
                bounds = bounds_for(mechanism)
                seconds = time.process_time() - start
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {err}"
                rows.append(row)
                print(_format(row), flush=True)
                continue
            lower = float(bounds.lower.epsilon(delta)) if bounds.lower is not None else math.nan
            upper = float(bounds.upper.epsilon(delta)) if bounds.upper is not None else math.nan
            width = upper / lower - 1 if lower > 0 else math.inf
            row |= {
                "sigma": mechanism.sigma, "steps_per_epoch": mechanism.steps_per_epoch,
                "epochs": mechanism.epochs, "lower": lower, "upper": upper, "width": width,
                "seconds": seconds, "notes": list(bounds.notes),
            }
            if width > OPEN_WIDTH:
                row["open"] = _reason(key.sampler, key.threat_model)
            rows.append(row)
            print(_format(row), flush=True)
    return rows


def _format(row: dict[str, object]) -> str:
    head = f"{row['run']:<32} {row['sampler']:<19} {row['threat_model']:<11}"
    if "error" in row:
        return f"{head} error: {row['error']}"
    cell = f"s={row['sigma']:<5g} T={row['steps_per_epoch']:<6} E={row['epochs']:<3}"
    width = float(row["width"])  # type: ignore[arg-type]
    text = (f"{head} {cell} [{row['lower']:8.4f}, {row['upper']:8.4f}] "
            f"{100 * width:7.2f}% {row['seconds']:6.1f}s")
    if "open" in row:
        text += f"  OPEN: {row['open']}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs", help="folder holding the committed runs")
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    print(f"{'run':<32} {'sampler':<19} {'threat':<11} {'cell':<24} "
          f"{'[lower, upper] eps':<22} {'width':>8} {'time':>7}")
    rows = brackets(Path(args.runs))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
