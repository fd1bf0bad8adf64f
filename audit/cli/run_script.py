"""Audit a training script as it is: ``audit run-script mnist.py -- <the script's arguments>``.

Runs the script as ``python mnist.py <arguments>`` would (its ``__main__`` block, its argparse,
its prints), with the harness's canaries put in where the training is made private: an Opacus
script (``PrivacyEngine.make_private`` / ``make_private_with_epsilon``) needs no added line; a
plain torch loop needs the canaries' lines of docs/auditing-your-training.md §0. Prints the
findings of one training with canaries, eps_lb and the verdict against the script's own
accountant, then replays the script once per probe under the same seed
(:mod:`audit.deployed.script_runner`). Exit code 0 when every finding passed, the verdict is
consistent and the replay passed; 1 when one did not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

HELP = "audit a training script as it is (Opacus: no added line): findings, eps_lb, replay"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _options(parser)
    parser.add_argument("script", help="the training script, e.g. mnist.py")
    parser.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="[OPTIONS] -- ARGS",
        help="this command's options may also follow the script; the script's own arguments "
             "come after -- (without --, everything after the script is the script's)",
    )


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--canaries", type=int, default=None,
        help="m, the Dirac canaries (default: the script's DiracCanaries(m), else 1000)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0)")
    parser.add_argument("--delta", type=float, default=1e-5, help="the claim's delta (1e-5)")
    parser.add_argument(
        "--epsilon", type=float, default=None,
        help="the claimed epsilon, when the script's accountant cannot be read",
    )
    parser.add_argument(
        "--clip", type=float, default=None,
        help="C of a plain loop whose DiracCanaries(...) states none (Opacus: read)",
    )
    parser.add_argument("--no-replay", action="store_true", help="skip the replay")
    parser.add_argument("--out", default=None,
                        help="a folder for the one-run report (summary.json, report.md, plot)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON instead of text (the script's own output: to stderr)")


def run(args: argparse.Namespace) -> int:
    from audit.deployed.record_replay import PROBES
    from audit.deployed.script_runner import audit_script

    script_args = list(args.script_args)
    if "--" in script_args:  # audit run-script mnist.py --canaries 1000 -- <the script's>
        # (argparse drops a "--" right after the script itself: then what precedes a later
        # "--" is the script's, which this command's options do not all read)
        cut = script_args.index("--")
        again = argparse.ArgumentParser(prog="audit run-script SCRIPT", add_help=False)
        _options(again)
        mine, unknown = again.parse_known_args(script_args[:cut])
        if not unknown:
            vars(args).update(vars(mine))
            script_args = script_args[cut + 1:]
    # with --json, stdout holds the record only: the script's own prints go to stderr
    where = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with where:
        result = audit_script(
            args.script, script_args, canaries=args.canaries, seed=args.seed,
            delta=args.delta, epsilon=args.epsilon, clip=args.clip,
            replay_probes=None if args.no_replay else PROBES,
        )
    if args.out is not None:
        result.audit.write(args.out)
    if args.json:
        print(json.dumps({
            "passed": result.passed, "script": result.script, "args": list(result.args),
            "instrumented": result.instrumented, "canaries": result.canaries,
            "seed": result.seed, "audit": result.audit.to_dict(),
            "replay": None if result.replay is None else result.replay.to_dict(),
            "notes": list(result.notes),
        }, indent=2, default=str))
    else:
        print(result.summary())
    return 0 if result.passed else 1
