"""Replay your training with a canary slot IN and zeroed under one seed, and check its sensitivity.

``audit replay mytrain.py:train --seed 0 --clip 1.0 --noise-divisor 64`` (or
``pkg.mod:train``) calls ``train(canaries, seed)`` several times (the user's training with the
canaries' lines of docs/auditing-your-training.md) and compares what the optimizer receives at
every step: with the same noise, a slot's clipped contribution divided by b must stay within
C / b. It also checks reproducibility from the seed, that the batches and the control flow do
not depend on the slot, and fresh noise at every step (docs/design.md §14.7). With Opacus,
``--clip`` and ``--noise-divisor`` are optional: C, b and sigma are read from its optimizer
(a given value that disagrees is named, and Opacus's is used). Exit code 1 when it found a
bug, else 0: passed, or inconclusive (nothing could be compared: not reproducible from the
seed, the slot in no batch; the first line says INCONCLUSIVE and why, ``--json`` has
``"inconclusive": true``), which is no bug found.
"""

from __future__ import annotations

import argparse
import json

HELP = (
    "replay a training with a canary slot IN and zeroed; check its sensitivity against C / b, "
    "the noise on every trained tensor and any use of the data outside the clipped gradients"
)

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "train", help="'path/to/file.py:train' or 'pkg.mod:train', called as train(canaries, seed)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0)")
    parser.add_argument(
        "--clip", type=float, default=None,
        help="C, the clipping norm (required for a plain loop; Opacus: read from its optimizer)",
    )
    parser.add_argument(
        "--noise-divisor", type=float, default=None,
        help="b, what the noisy sum is divided by (default: Opacus's expected_batch_size read "
        "from its optimizer, or the noise_divisor of canaries.plain)",
    )
    parser.add_argument(
        "--slots", type=int, default=64, help="canary slots appended to the dataset (default 64)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from audit.core.validation import load_callable
    from audit.deployed.record_replay import replay

    train = load_callable("train", args.train)
    result = replay(
        train, seed=args.seed, clip=args.clip, noise_divisor=args.noise_divisor, slots=args.slots
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.summary())
    return 1 if result.failed else 0
