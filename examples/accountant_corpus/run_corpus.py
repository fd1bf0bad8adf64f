"""Check every accountant of the corpus on a grid and write the table (results.md).

    python examples/accountant_corpus/run_corpus.py                      # --grid thorough
    python examples/accountant_corpus/run_corpus.py --grid default --only buggy

A buggy accountant is *caught* when some cell is ``unsound`` or ``invalid``; a correct one
must have no ``unsound`` cell. Prints one line per accountant (verdict counts, wall and CPU
seconds, the first finding) and exits 1 if a bug is missed or a correct one is unsound.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from buggy import BUGS  # noqa: E402
from correct import CORRECT  # noqa: E402

from audit.accounting.check import check_accountant  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # RDP orders that fail to converge
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grid", default="thorough")
    parser.add_argument("--only", choices=["buggy", "correct"], default=None)
    parser.add_argument("--names", nargs="*", default=None)
    parser.add_argument("--cache", default=None, help="theory cache folder (default: the user's)")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    rows = []
    failures = 0
    groups = [("buggy", BUGS), ("correct", CORRECT)]
    for kind, corpus in groups:
        if args.only and kind != args.only:
            continue
        for name, accountant, adjacency in corpus:
            if args.names and name not in args.names:
                continue
            start, cpu = time.perf_counter(), time.process_time()
            report = check_accountant(accountant, args.grid, adjacency=adjacency,
                                      cache=args.cache)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            counts = report.counts()
            bad = counts["unsound"] + counts["invalid"]
            ok = bad > 0 if kind == "buggy" else counts["unsound"] == 0
            failures += not ok
            first = next((c.sentence() for c in report.cells
                          if c.status in ("unsound", "invalid")), "")
            summary = ", ".join(f"{counts[k]} {k}" for k in counts if counts[k])
            if kind == "buggy":
                result = "caught" if ok else "MISSED"
            else:
                result = "not unsound" if ok else "UNSOUND"
            line = (f"| {kind} | {name} | {adjacency} | {summary} | {result} | "
                    f"{wall:.1f} / {cpu:.1f} | {first} |")
            print(line, flush=True)
            rows.append(line)
    if args.out:
        header = ("| kind | accountant | adjacency | verdicts | result | wall / CPU s | first "
                  "finding |\n|---|---|---|---|---|---|---|\n")
        Path(args.out).write_text(f"Grid: {args.grid}\n\n" + header + "\n".join(rows) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
