"""Every built-in accountant on the default grid: statuses and time.

Runs ``check_accountant`` for each built-in adapter in one process (so the theory curves,
cached per mechanism, are computed once, during the first accountant that needs them) and
prints per accountant the status counts, the wall and CPU seconds, and the unsound cells.
``audit check-accountant NAME`` in a fresh process also pays for its imports and for the theory
of the cells NAME supports.

    python bench/check_accountants.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

from audit.accounting.adapters import BUILTIN_ACCOUNTANTS
from audit.accounting.check import check_accountant, load_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write every report to this JSON file")
    args = parser.parse_args()
    print(f"default grid: {len(load_grid())} cells")
    reports = []
    for spec in BUILTIN_ACCOUNTANTS:
        wall, cpu = time.perf_counter(), time.process_time()
        report = check_accountant(spec.name)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        counts = report.counts()
        print(
            f"{spec.name:20s} " + " ".join(f"{k} {v:2d}" for k, v in counts.items())
            + f"   {wall:5.1f} s wall, {cpu:5.1f} s CPU"
        )
        for cell in report.unsound:
            m = cell.cell.mechanism
            print(
                f"    unsound: {m.sampler}/{m.threat_model} sigma={m.sigma:g} "
                f"T={m.steps_per_epoch} "
                f"E={m.epochs} delta={cell.cell.delta:g}: claimed {cell.claimed:.4g} < lower "
                f"{cell.lower:.4g}"
            )
        reports.append(report.to_dict())
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(reports, handle, indent=2)


if __name__ == "__main__":
    main()
