"""Identify the batch sampler of your training's DataLoader and check it against the accountant.

``audit inspect-loader pkg.mod:make_loader`` (or ``path/to/train.py:make_loader``) calls
``make_loader()`` and inspects what it returns: a torch DataLoader or batch sampler, the tuple
``make_private`` returns (privacy engine, model, optimizer and loader in any order), or a dict
with ``loader`` and optionally ``privacy_engine``, ``optimizer``, ``n``, ``noise_multiplier``,
``epochs`` (the training's) and ``delta``. It draws epochs of index batches (no data is
loaded; ``--inspection-epochs`` of them, default until every test has power >= 0.99), names
the sampler (a registered name or "unknown") with eleven stated tests and their power (five
exact observations: fixed sizes, once per epoch, the same order, with replacement, a reused
order; six statistical tests at level 1e-3 each: Binomial sizes, equal rates, equal rates by
class, independence of memberships, uniform positions, batches stratified by class; the two
class tests read the labels of the loader's dataset), the q or b it implies, whether that is
what the accountant assumed, and the theory bracket for the training, at the most drawn
example's rate, never the mean (docs/design/deployed.md §14.1). "A guarantee" is
printed only for a sampler identified by its type with no test rejecting; a loader identified
only by its draws is "consistent with" a sampler, never guaranteed. Then the loader's dataset is
checked for the unit of privacy (one person in several rows: identical or near-identical rows,
:mod:`audit.deployed.dataset_inspection`; ``--no-dataset-check`` skips it).

``--epochs`` is the deprecated spelling of ``--inspection-epochs`` (it read as the training's
epochs, which are ``--training-epochs`` or the factory's ``epochs``); it still works, with a
warning.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.deployed.dataset_inspection import DatasetInspection

HELP = "identify the batch sampler of a training's DataLoader and check it against its accountant"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "factory",
        help="'pkg.mod:make_loader' or 'path/to/file.py:make_loader' (called with no arguments)",
    )
    parser.add_argument(
        "--inspection-epochs", type=int, default=None,
        help="epochs of batches to draw for the tests (default: until every test has power >= "
        "0.99); not the training's epochs (--training-epochs)",
    )
    parser.add_argument("--epochs", type=int, default=None, dest="deprecated_epochs",
                        help="deprecated spelling of --inspection-epochs")
    parser.add_argument(
        "--n", type=int, default=None, help="examples the loader draws from (default: len(dataset))"
    )
    parser.add_argument(
        "--training-epochs",
        type=int,
        default=None,
        help="epochs the training runs (theory bracket)",
    )
    parser.add_argument(
        "--noise-multiplier", type=float, default=None, help="sigma (default: the optimizer's)"
    )
    parser.add_argument(
        "--delta", type=float, default=None, help="delta of the claim (theory bracket)"
    )
    parser.add_argument(
        "--no-dataset-check", action="store_true",
        help="skip the unit-of-privacy check of the loader's dataset (identical or "
        "near-identical rows: one person in several rows)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _unpack(made: object) -> dict:
    """The loader and the accountant's objects from what the factory returned."""
    from collections.abc import Mapping

    if isinstance(made, Mapping):
        if "loader" not in made:
            raise ValueError(
                f"the factory returned a dict without 'loader'; its keys: {sorted(made)}"
            )
        allowed = {
            "loader",
            "privacy_engine",
            "optimizer",
            "n",
            "noise_multiplier",
            "epochs",
            "delta",
        }
        unknown = set(made) - allowed
        if unknown:
            raise ValueError(
                f"the factory returned unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        return dict(made)
    if isinstance(made, tuple):
        out: dict = {}
        for item in made:
            if hasattr(item, "make_private") and hasattr(item, "accountant"):
                out["privacy_engine"] = item
            elif hasattr(item, "expected_batch_size") and hasattr(item, "noise_multiplier"):
                out["optimizer"] = item
            elif hasattr(item, "batch_sampler"):
                out["loader"] = item
        if "loader" not in out:
            raise ValueError("the factory returned a tuple without a DataLoader")
        return out
    return {"loader": made}


def run(args: argparse.Namespace) -> int:
    from audit.core.validation import load_callable
    from audit.deployed.loader_inspection import inspect_loader

    inspection_epochs = args.inspection_epochs
    if args.deprecated_epochs is not None:
        if inspection_epochs is not None:
            raise ValueError("pass --inspection-epochs (or the deprecated --epochs), not both")
        import logging

        logging.getLogger(__name__).warning(
            "--epochs is deprecated: it is the epochs drawn for the inspection; pass "
            "--inspection-epochs %d (the training's epochs are --training-epochs)",
            args.deprecated_epochs,
        )
        inspection_epochs = args.deprecated_epochs
    factory = load_callable("factory", args.factory)
    made = _unpack(factory())
    epochs = made.pop("epochs", None)
    options = {
        "n": args.n if args.n is not None else made.get("n"),
        "noise_multiplier": args.noise_multiplier
        if args.noise_multiplier is not None
        else made.get("noise_multiplier"),
        "training_epochs": args.training_epochs if args.training_epochs is not None else epochs,
        "delta": args.delta if args.delta is not None else made.get("delta"),
    }
    result = inspect_loader(
        made["loader"],
        inspection_epochs=inspection_epochs,
        privacy_engine=made.get("privacy_engine"),
        optimizer=made.get("optimizer"),
        **options,
    )
    dataset = getattr(made["loader"], "dataset", None)
    units = None if args.no_dataset_check or dataset is None else _unit_of_privacy(
        dataset, result, options["delta"])
    if args.json:
        out = result.to_dict()
        if units is not None:
            out["unit_of_privacy"] = units.finding.to_dict() | {
                "k": units.k, "rows_in_groups": units.rows_in_groups}
        print(json.dumps(out, indent=2))
    else:
        print(result.summary())
        if units is not None:
            status = "ok" if units.finding.passed else "FAILED"
            print(f"unit of privacy: {status}: {units.sentence()}")
    return 0


def _unit_of_privacy(dataset: object, result: object, delta: float | None) -> DatasetInspection:
    """The loader's dataset checked for one person in several rows
    (:func:`audit.deployed.dataset_inspection.inspect_dataset`), with the accountant's numbers
    for the group's epsilon where the inspection found them."""
    from audit.deployed.dataset_inspection import inspect_dataset

    accountant = getattr(result, "accountant", None)
    theory = getattr(result, "theory", None)
    sigma = getattr(accountant, "noise_multiplier", None) or getattr(theory, "sigma", None)
    q = getattr(accountant, "sample_rate", None)
    epochs = getattr(accountant, "epochs", None) or getattr(theory, "epochs", None)
    per_epoch = getattr(accountant, "steps_per_epoch", None) or getattr(theory, "steps_per_epoch",
                                                                         None)
    steps = epochs * per_epoch if epochs and per_epoch else None
    delta = delta if delta is not None else getattr(accountant, "delta", None) or 1e-5
    return inspect_dataset(dataset, epsilon=getattr(accountant, "epsilon", None), delta=delta,
                           noise_multiplier=sigma, sample_rate=q, steps=steps)
