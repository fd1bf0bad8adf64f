"""Draw every batch sampler many times and show its laws beside the exact values.

For each sampler: the number of real examples per batch (and the slot count), and the
law of one example's number of participations over the run, measured from ``--draws``
independent runs beside the exact law (Chua et al. 2024, arXiv 2411.04205, §2).
"""

from __future__ import annotations

import argparse
import json

HELP = "show each batch sampler's batch-size and participation laws (measured vs exact)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=1000, help="dataset size (default 1000)")
    parser.add_argument(
        "--batch-size", type=int, default=10, help="(expected) batch size b (default 10)"
    )
    parser.add_argument("--epochs", type=int, default=1, help="epochs E (default 1)")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="B for truncated_poisson (default: b + 2 sqrt(b), rounded up)",
    )
    parser.add_argument(
        "--sampler", action="append", default=None, help="only these samplers (repeatable)"
    )
    parser.add_argument(
        "--draws", type=int, default=2000, help="independent runs to measure (default 2000)"
    )
    parser.add_argument(
        "--example", type=int, default=0, help="the example whose participations are counted"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    import math

    from audit.core.seeding import rng_for
    from audit.core.validation import check_int
    from audit.sampling import get_sampler, sampler_names
    from audit.sampling.batches import (
        PADDING,
        batch_size_pmf,
        participation_counts,
        participation_pmf,
    )
    from audit.sampling.factory import make_sampler

    draws = check_int("draws", args.draws, minimum=1)
    names = [get_sampler(s).name for s in (args.sampler or sampler_names())]  # aliases resolved
    n = check_int("n", args.n, minimum=1)
    b = check_int("batch_size", args.batch_size, minimum=1, maximum=n)
    truncation = args.max_batch_size
    if truncation is None:  # b + 2 sqrt(b), at most n (a batch holds at most every example)
        truncation = min(n, b + math.ceil(2 * math.sqrt(b)))
    truncation = check_int("max_batch_size", truncation, minimum=b, maximum=n)
    example = check_int("example", args.example, minimum=0, maximum=n - 1)
    results = []
    for name in names:
        padded = "max_batch_size" in get_sampler(name).parameters
        sampler = make_sampler(
            name,
            n=args.n,
            batch_size=b,
            epochs=args.epochs,
            max_batch_size=truncation if padded else None,
        )
        batches = sampler.sample(rng_for(args.seed, "samplers", name), draws)
        sizes = (batches != PADDING).sum(axis=2).ravel()
        counts = participation_counts(batches, example)
        size_support, size_pmf = batch_size_pmf(sampler)
        part_support, part_pmf = participation_pmf(sampler)
        results.append(
            {
                "sampler": name,
                "n": sampler.n,
                "batch_size": sampler.batch_size,
                "epochs": sampler.epochs,
                "steps_per_epoch": sampler.steps_per_epoch,
                "total_steps": sampler.total_steps,
                "max_batch_size": truncation if padded else None,
                "slots": int(batches.shape[2]),
                "draws": draws,
                "batch_size_law": _summary(sizes, size_support, size_pmf),
                "participations_law": _summary(counts, part_support, part_pmf, pmf_top=True),
                "participation_example": example,
            }
        )
        if padded:
            results[-1]["p_full_batch"] = {
                "measured": float((sizes == truncation).mean()),
                "exact": float(size_pmf[support_index(size_support, truncation)]),
            }
    if args.json:
        print(json.dumps({"samplers": results}, indent=2))
    else:
        print(_table(results))
    return 0


def support_index(support, value: int) -> int:
    """Position of ``value`` in a sorted integer support."""
    return int(value - support[0])


def _summary(values, support, pmf, pmf_top: bool = False) -> dict:
    """Measured mean, sd and frequencies beside the exact ones."""
    import numpy as np

    mean = float(support @ pmf)
    sd = float(np.sqrt(max(0.0, (support**2) @ pmf - mean**2)))
    out: dict[str, object] = {
        "measured_mean": float(values.mean()),
        "exact_mean": mean,
        "measured_sd": float(values.std()),
        "exact_sd": sd,
        "min": int(values.min()),
        "max": int(values.max()),
    }
    if pmf_top:
        keep = pmf > 1e-4
        measured = np.bincount(values, minlength=int(support.max()) + 1)[support[keep]] / len(
            values
        )
        out["pmf"] = [
            {"k": int(k), "measured": float(m), "exact": float(p)}
            for k, m, p in zip(support[keep], measured, pmf[keep], strict=True)
        ]
    return out


def _table(results: list[dict]) -> str:
    first = results[0]
    width = max(20, *(len(r["sampler"]) + 2 for r in results))  # the longest name, then 2 spaces
    lines = [
        f"n={first['n']}  b={first['batch_size']}  T={first['steps_per_epoch']}  "
        f"E={first['epochs']}  draws={first['draws']} runs (measured)  vs exact",
        "",
        f"{'sampler':<{width}}{'slots':>6}  {'batch size mean (meas/exact)':>30}  "
        f"{'sd (meas/exact)':>18}  {'participations mean':>22}  {'sd':>14}",
    ]
    for r in results:
        s, p = r["batch_size_law"], r["participations_law"]
        lines.append(
            f"{r['sampler']:<{width}}{r['slots']:>6}  {s['measured_mean']:>14.3f} / "
            f"{s['exact_mean']:<13.3f}  {s['measured_sd']:>7.3f} / {s['exact_sd']:<8.3f}"
            f"  {p['measured_mean']:>9.3f} / {p['exact_mean']:<10.3f}"
            f"  {p['measured_sd']:>5.3f} / {p['exact_sd']:<6.3f}"
        )
    for r in results:
        if "p_full_batch" in r:
            full = r["p_full_batch"]
            lines.append(
                f"{r['sampler']}: P(batch size = B = {r['max_batch_size']}) = "
                f"{full['measured']:.4f} measured / {full['exact']:.4f} exact (= P(Bin(n, q) >= B))"
            )
    lines.append("")
    lines.append(
        f"Law of example {first['participation_example']}'s participations, P(k) measured / exact:"
    )
    for r in results:
        cells = "  ".join(
            f"{e['k']}: {e['measured']:.3f}/{e['exact']:.3f}"
            for e in r["participations_law"]["pmf"][:8]
        )
        more = " ..." if len(r["participations_law"]["pmf"]) > 8 else ""
        lines.append(f"  {r['sampler']:<{width}}{cells}{more}")
    return "\n".join(lines)
