"""Record-replay sensitivity of a multi-run script (``implementation = "script.py:train"``),
docs/design/multi-run-diagnostics.md "Replay of a script", after
:mod:`audit.deployed.record_replay`.

A multi-run script trains one model per call ``train(data, canary, setup, seed)`` and builds its
own canaries, ``DiracCanaries(1, included=[canary.is_in], ...)``
(:mod:`audit.plugins.contract`). :func:`replay_script` replays it as
:func:`audit.deployed.record_replay.replay` replays ``train(canaries, seed)``: each run calls
the script with the same ``seed`` under :func:`audit.deployed.instrument.stand_in`, so the
``DiracCanaries(...)`` the script constructs is the replay's (``slots`` canary slots, one by
default as in the audit, and the probe of the run: the slot IN with a crafted gradient g C v,
g > 1, spread over every parameter tensor; its real example; a co-batch; the slot absent; or
zeroed). Nothing else in the script changes; the result it returns is discarded.

The checks are the replay's: at every step ||received_IN - received_zeroed|| <= C / b
(C = ``setup.clip``, b = ``setup.batch_size``, beyond float rounding; a script training with
Opacus has both read from its optimizer, and a setup value that disagrees is named in the
result's ``notes``); the batches and the
control flow independent of the slot; two identical runs equal (reproducible from the seed);
fresh noise on the canary block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from audit.deployed.instrument import DiracCanaries, stand_in
from audit.deployed.record_replay import PROBES, ReplayResult, replay
from audit.plugins.contract import (
    TrainingSetup,
    load_implementation,
    make_canary,
    setup_from,
    training_data,
)

__all__ = ["NoCanariesError", "replay_script"]


class NoCanariesError(ValueError):
    """The script constructed no ``DiracCanaries``: the replay has nothing to drive (a
    built-in implementation, or a script that builds its canaries outside ``train``)."""


def replay_script(
    implementation: str | Callable[..., Any],
    setup: object,
    *,
    seed: int,
    slots: int = 1,
    probes: Sequence[str] = PROBES,
    wrapped: list[Any] | None = None,
) -> ReplayResult:
    """Replay a multi-run script with its canary slot IN and zeroed (module docstring).

    Args:
        implementation: the script's ``train(data, canary, setup, seed)``, or its name as the
            spec's ``implementation`` (``"path/to/train.py:train"``, ``"pkg.module:train"``).
        setup: the :class:`audit.plugins.contract.TrainingSetup` (or anything
            :func:`audit.plugins.contract.setup_from` reads: the engine's ``TrainingConfig``, a
            mapping) the script is given; its ``clip`` is C and its ``batch_size`` b.
        seed: the seed of every run (the script must derive all its randomness from it).
        slots: the canary slots of the replay's canaries (the script's ``wrap`` appends them).
            1, the contract's, keeps the script's data set at the setup's n rows: more slots
            grow it, and what the script derives from its size changes with it (Opacus's
            Poisson q = 1 / len(loader) and expected batch size, so its divisor would no
            longer be ``setup.batch_size``: with 64 slots on examples/opacus_poisson, n = 60,
            b = 5, Opacus divides by 4 and the replay reads 1.25 C). With one slot only the
            steps whose batch holds it are tested (about q S; none fails as "nothing was
            tested": give more epochs or another seed).
        probes: a subset of :data:`audit.deployed.record_replay.PROBES`.
        wrapped: when given, the dataset the script hands to ``canaries.wrap`` in the first
            run is appended to it (what its trainings train on: the pre-flight inspects it).

    Returns:
        The replay's :class:`audit.deployed.record_replay.ReplayResult`.

    Raises:
        NoCanariesError: the script constructed no ``DiracCanaries`` (it must build its
            canaries inside ``train``, as the contract's example does).
        ValueError: a bad argument.
    """
    train = load_implementation(implementation)
    config: TrainingSetup = setup if isinstance(setup, TrainingSetup) else setup_from(setup)
    data = training_data(config)
    canary = make_canary(config, data, is_in=True)
    name = getattr(train, "__name__", type(train).__name__)

    def run(canaries: DiracCanaries, run_seed: int) -> None:
        if wrapped is not None and not wrapped:
            original = canaries.wrap

            def wrap(dataset: Any) -> Any:
                if not wrapped:
                    wrapped.append(dataset)
                return original(dataset)

            canaries.__dict__["wrap"] = wrap  # this run's object only: the dataset it is given
        with stand_in(canaries) as holder:
            train(data, canary, config, run_seed)
        if not holder.used:
            raise NoCanariesError(
                f"implementation {name!r} constructed no DiracCanaries: the replay hands the "
                "script its canaries through DiracCanaries(...) inside train "
                "(docs/auditing-your-training.md §5)"
            )

    return replay(
        run, seed=seed, clip=float(config.clip), noise_divisor=float(config.batch_size),
        slots=slots, probes=probes,
    )
