"""Audit a training script as it is: no refactor, no ``train(canaries, seed)`` to write
(docs/design.md §14.8; the path for a user is docs/auditing-your-training.md, "Audit a script as
it is").

:func:`audit_script` runs the user's script as ``python script.py <args>`` would (its
``if __name__ == "__main__":`` block, its argparse reading ``args``, its prints), with the
harness patching the points it needs for the time of the run:

- ``opacus.PrivacyEngine.make_private`` and ``make_private_with_epsilon`` (instrumented before
  it calibrates sigma, so sigma is calibrated at the q of the loader that trains): before the
  original runs, the canaries are attached to the model (:meth:`DiracCanaries.attach`, their
  block added to the optimizer's last parameter group), the loader is rebuilt over the dataset
  with the canary slots appended (:meth:`DiracCanaries.wrap`: the same batch size, order,
  collate function and workers); after it, the canaries are hooked on what it returned
  (:meth:`DiracCanaries.opacus`) and the engine is kept as the claim. An Opacus script needs
  no added line. Only the first ``make_private`` of a run is instrumented (a script that
  trains several models audits its first); one called on a model that already holds the
  canaries (the script's own lines) is left as it is and only its engine is kept;
- ``DiracCanaries(...)``: a script with the documented lines of a plain torch loop
  (``wrap``, ``attach``, ``plain``, ``inject``, ``privatized``) gets the runner's canaries
  from its first construction (:func:`audit.deployed.instrument.stand_in`): the script's
  ``m`` and ``clip`` are used unless the runner was given its own;
- ``dp_accounting.PrivacyAccountant.compose``: the accountant a plain loop composes its events
  on is the claim (when exactly one is composed; else give ``epsilon``).

The runs: torch's, numpy's and Python's global generators are seeded with ``seed`` before each
run (a script that seeds itself keeps its own seeds). The first run trains once with the
canaries and gives :func:`audit.deployed.deployed_audit.one_run_audit` its findings, eps_lb and
verdict; the replay (:func:`audit.deployed.record_replay.replay`) re-executes the script once
per probe under the same seed with as many canary slots as the audit had, so the data set, q
and Opacus's divisor are the audit's (C and b read from the first run). The replay's runs are
quiet (their prints are kept and shown only when one fails). A script that fails names the run
(the audited training, or the replay's run k and its probe), the exception and the line of
the script it came from.

:func:`audit_training` is the same for a function of the user's (``main`` of a module already
imported, a notebook's cell wrapped in a function): it is called once per run. :func:`audited`
is a ``with`` block around a training in this process: the one-run audit only (a block runs
once; the replay needs a function or a script to run again).
"""

from __future__ import annotations

import contextlib
import io
import random
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from audit.core.errors import AuditInputError
from audit.core.validation import check_int, check_real
from audit.deployed.deployed_audit import DeployedAudit, one_run_audit
from audit.deployed.instrument import CANARY_MODULE, DiracCanaries, stand_in
from audit.deployed.record_replay import PROBES, ReplayResult, replay

__all__ = [
    "DEFAULT_CANARIES", "AuditedBlock", "ScriptAudit", "audit_script", "audit_training", "audited",
]

DEFAULT_CANARIES = 1000
"""The canaries of an Opacus script when none are given (a plain loop's script states its own
``DiracCanaries(m, ...)``)."""


@dataclass(frozen=True)
class ScriptAudit:
    """What :func:`audit_script` found.

    Attributes:
        script: the script (or the function's name) audited; ``args`` its arguments.
        seed: the seed of every run.
        instrumented: ``make_private`` (the runner instrumented Opacus's ``make_private``) or
            ``script`` (the script's own canary lines).
        canaries: m, the Dirac canaries of the audited training.
        audit: the one-run audit (findings, eps_lb, verdict, :class:`DeployedAudit`).
        replay: the record-replay's :class:`ReplayResult` (None when not run).
        notes: what the runner assumed or left alone, one sentence each.
    """

    script: str
    args: tuple[str, ...]
    seed: int
    instrumented: str
    canaries: int
    audit: DeployedAudit
    replay: ReplayResult | None
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """No failed finding, a consistent verdict and (when run) a passed replay."""
        return (not self.audit.failed and self.audit.verdict == "consistent"
                and (self.replay is None or self.replay.passed))

    def summary(self) -> str:
        """The findings, the epsilon sentence and the replay, the verdict first."""
        audit = self.audit
        head = "PASSED" if self.passed else "FAILED"
        lines = [
            f"{head}: {self.script} audited ({self.instrumented}; {self.canaries} canaries, "
            f"seed {self.seed}): {len(audit.failed)} failed finding(s), verdict "
            f"{audit.verdict}, replay "
            + ("not run" if self.replay is None else
               "passed" if self.replay.passed else "FAILED")
        ]
        lines.append("findings (one training with canaries):")
        for finding in audit.findings:
            status = ("inconclusive" if finding.name in audit.inconclusive else
                      "passed" if finding.passed else "FAILED")
            lines.append(f"  {status} {finding.name}: {finding.message}")
        lines.append(audit.sentence())
        if self.replay is not None:
            lines.append("replay (the script re-run under the same seed, one per probe):")
            lines.extend("  " + line for line in self.replay.summary().splitlines())
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


# -- one run of the user's training, with the points the audit needs patched ---------------


class _RunnerCanaries(DiracCanaries):
    """The runner's canaries: when the script constructs ``DiracCanaries(m, clip=..., ...)``
    (:func:`stand_in` hands it this object), they are set up again with the script's arguments,
    the runner's m and clip overriding where the runner was given them."""

    runner_m: int | None = None
    runner_clip: float | None = None
    script_arguments: dict[str, Any] | None = None

    @classmethod
    def given(cls, canaries: int | None, clip: float | None, seed: int) -> _RunnerCanaries:
        """The first run's canaries from the runner's arguments (checked by name): m (default
        :data:`DEFAULT_CANARIES`) and C where given, each overriding the script's."""
        m = None if canaries is None else check_int("canaries", canaries, minimum=1)
        given_clip = None if clip is None else check_real("clip", clip, minimum=0.0,
                                                           strict_minimum=True)
        first = cls(m or DEFAULT_CANARIES, clip=given_clip, seed=seed)
        first.runner_m, first.runner_clip = m, given_clip
        return first

    def __init__(self, m: int, **kwargs: Any) -> None:
        if not self.__dict__.pop("_standing_in", False):
            super().__init__(m, **kwargs)
            return
        self.script_arguments = {"m": m, **kwargs}
        chosen = dict(kwargs)
        if self.runner_clip is not None:
            chosen["clip"] = self.runner_clip
        size = m if self.runner_m is None else self.runner_m
        if size != m:
            chosen.pop("included", None)  # drawn again for the runner's m
        chosen.setdefault("seed", self.seed)
        super().__init__(size, **chosen)


@dataclass
class _Run:
    """One run's canaries and what the patches saw."""

    canaries: DiracCanaries
    label: str
    private_calls: int = 0
    busy: bool = False
    instrumented: str | None = None
    engine: Any = None
    accountants: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002  # the script's legacy global generator
    random.seed(seed)


def _rebuilt_loader(loader: Any, dataset: Any) -> Any:
    """A ``DataLoader`` as ``loader`` over ``dataset`` (the canary slots appended): the same
    batch size, order (sequential or shuffled, with its generator), collate function, workers."""
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

    if not isinstance(loader, DataLoader):
        raise AuditInputError(
            f"make_private(data_loader=...): a {type(loader).__name__}, not a torch DataLoader; "
            "the runner rebuilds the loader over the dataset with the canary slots",
            culprit="data_loader",
            fix="add the canaries' lines yourself (docs/auditing-your-training.md §0, Opacus)",
        )
    sampler = loader.sampler
    if loader.batch_size is None or not isinstance(sampler, (SequentialSampler, RandomSampler)):
        kind = type(loader.batch_sampler if loader.batch_size is None else sampler).__name__
        raise AuditInputError(
            f"make_private(data_loader=...): a loader with a custom sampler ({kind}) cannot be "
            "rebuilt over the dataset with the canary slots",
            culprit="data_loader",
            fix="use DataLoader(dataset, batch_size=..., shuffle=...), or add the canaries' "
                "lines yourself (docs/auditing-your-training.md §0, Opacus)",
        )
    shuffle = isinstance(sampler, RandomSampler)
    if isinstance(sampler, RandomSampler) and (sampler.replacement
                                               or sampler._num_samples is not None):
        raise AuditInputError(
            "make_private(data_loader=...): a RandomSampler with replacement or num_samples "
            "cannot be rebuilt over the dataset with the canary slots", culprit="data_loader",
            fix="add the canaries' lines yourself (docs/auditing-your-training.md §0, Opacus)",
        )
    generator = loader.generator if loader.generator is not None else (
        sampler.generator if isinstance(sampler, RandomSampler) else None)
    extra: dict[str, Any] = {}
    if loader.num_workers > 0:
        extra = {"prefetch_factor": loader.prefetch_factor,
                 "persistent_workers": loader.persistent_workers}
    return DataLoader(
        dataset, batch_size=loader.batch_size, shuffle=shuffle, generator=generator,
        drop_last=loader.drop_last, collate_fn=loader.collate_fn,
        num_workers=loader.num_workers, pin_memory=loader.pin_memory, timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, **extra,
    )


def _instrument_arguments(canaries: DiracCanaries, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``make_private``'s arguments with the canaries attached, added to the optimizer and
    their slots appended to the loader's dataset."""
    for name in ("module", "optimizer", "data_loader"):
        if name not in kwargs:
            raise AuditInputError(f"make_private() was called without {name}=", culprit=name)
    if kwargs.get("clipping", "flat") != "flat":
        raise AuditInputError(
            f"make_private(clipping={kwargs['clipping']!r}): the runner instruments flat "
            "clipping only (per-layer clipping needs a clip for the canary block)",
            culprit="clipping",
            fix="add the canaries' lines yourself (docs/auditing-your-training.md §0, Opacus: "
                "give max_grad_norm one clip per parameter, the canary block's included)",
        )
    model = canaries.attach(kwargs["module"])
    optimizer = kwargs["optimizer"]
    if not getattr(optimizer, "param_groups", None):
        raise AuditInputError(
            f"make_private(optimizer=...): a {type(optimizer).__name__} without param_groups",
            culprit="optimizer",
        )
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if id(canaries.parameter) not in held:
        optimizer.param_groups[-1]["params"].append(canaries.parameter)
    loader = kwargs["data_loader"]
    dataset = canaries.wrap(loader.dataset)
    return {**kwargs, "module": model, "data_loader": _rebuilt_loader(loader, dataset)}


def _instrumenting(run: _Run, original: Callable[..., Any], method: str) -> Callable[..., Any]:
    """Opacus's ``method`` (``make_private`` or ``make_private_with_epsilon``) instrumenting
    ``run``'s canaries on its first call (module docstring). ``make_private_with_epsilon``
    is instrumented before it calibrates sigma, so sigma is calibrated on the loader with the
    canary slots (the q that trains); the ``make_private`` it calls is then left alone."""

    def instrumented(engine: Any, *args: Any, **kwargs: Any) -> Any:
        if run.busy:  # make_private called by an instrumented make_private_with_epsilon
            return original(engine, *args, **kwargs)
        run.private_calls += 1
        module = kwargs.get("module")
        if run.private_calls > 1:
            if run.private_calls == 2:
                run.notes.append(
                    f"{method} was called more than once (several trainings); the first one "
                    "was audited, the others ran as they are")
            return original(engine, *args, **kwargs)
        if args or module is None or hasattr(module, CANARY_MODULE):
            # the script's own canary lines (or a call the runner cannot read): as it is
            run.engine = engine
            return original(engine, *args, **kwargs)
        run.busy = True
        try:
            out = original(engine, **_instrument_arguments(run.canaries, kwargs))
        finally:
            run.busy = False
        run.canaries.opacus(out[0], out[1], out[-1])
        run.engine, run.instrumented = engine, "make_private"
        if getattr(engine, "secure_mode", False):
            run.notes.append(
                "the PrivacyEngine runs in secure_mode: its noise is not reproducible from a "
                "seed, so the replay cannot compare runs (run the audit without it)")
        return out

    return instrumented


@contextlib.contextmanager
def _patched(run: _Run) -> Iterator[None]:
    """Opacus's ``make_private`` and dp_accounting's ``compose`` patched for ``run`` (module
    docstring); restored on exit."""
    restore: list[tuple[Any, str, Any]] = []
    try:
        from opacus import PrivacyEngine
    except ImportError:  # a plain torch script: no Opacus to patch
        PrivacyEngine = None
    if PrivacyEngine is not None:
        for method in ("make_private", "make_private_with_epsilon"):
            original = getattr(PrivacyEngine, method)
            setattr(PrivacyEngine, method, _instrumenting(run, original, method))
            restore.append((PrivacyEngine, method, original))
    try:
        import dp_accounting
    except ImportError:
        dp_accounting = None
    if dp_accounting is not None:
        base = dp_accounting.PrivacyAccountant
        compose = base.compose

        def composing(accountant: Any, *args: Any, **kwargs: Any) -> Any:
            if all(a is not accountant for a in run.accountants):
                run.accountants.append(accountant)
            return compose(accountant, *args, **kwargs)

        base.compose = composing
        restore.append((base, "compose", compose))
    try:
        yield
    finally:
        for owner, name, value in reversed(restore):
            setattr(owner, name, value)


def _where(error: BaseException, script: str | None) -> str:
    """The innermost line of the user's script (else the innermost line) in the traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if script is not None and Path(f.filename) == Path(script)]
    if not (mine or frames):
        return ""
    frame = (mine or frames)[-1]
    return f" (at {Path(frame.filename).name} line {frame.lineno}, in {frame.name})"


def _execute(
    training: Callable[[], Any], run: _Run, *, seed: int, name: str, script: str | None,
    quiet: bool,
) -> None:
    """Run the user's training once for ``run``; a failure names the run, the exception and
    the script's line."""
    _seed_everything(seed)
    out = io.StringIO()
    quietly = (contextlib.redirect_stdout(out) if quiet else contextlib.nullcontext())
    errors = (contextlib.redirect_stderr(out) if quiet else contextlib.nullcontext())
    try:
        with stand_in(run.canaries) as holder, _patched(run), quietly, errors:
            try:
                training()
            except SystemExit as stop:
                if stop.code not in (None, 0):
                    raise AuditInputError(
                        f"{name} exited with status {stop.code} in {run.label}"
                        + (" (its argparse refused the arguments? pass the script's "
                           "arguments after --)" if stop.code == 2 else "")
                        + _tail(out), culprit=name,
                    ) from None
    except AuditInputError as error:
        if str(error).startswith(name):
            raise
        raise AuditInputError(f"{name}: {run.label}: {error}", culprit=name) from error
    except Exception as error:
        raise AuditInputError(
            f"{name} failed in {run.label}: {type(error).__name__}: {error}"
            f"{_where(error, script)}{_tail(out)}",
            culprit=name, fix="audit --debug ... prints the traceback",
        ) from error
    if holder.used and run.instrumented is None:
        run.instrumented = "script"


def _tail(out: io.StringIO, lines: int = 5) -> str:
    text = out.getvalue().strip().splitlines()
    return ("; its last output: " + " | ".join(text[-lines:])) if text else ""


def _label(canaries: DiracCanaries, counter: list[int]) -> str:
    """The replay run's name: its number and probe."""
    counter[0] += 1
    probe = canaries.replay
    what = "zeroed" if probe is None or probe.slot == "zero" else f"probe {probe.slot}"
    if type(canaries).__name__ == "_AbsentCanaries":
        what = "probe absent"
    elif probe is not None and probe.cobatch:
        what += ", co-batch"
    return f"replay run {counter[0]} ({what})"


def _claim(run: _Run, epsilon: float | None, name: str) -> Any:
    """The claim: ``epsilon`` when given, else the engine ``make_private`` was called on, else
    the one dp_accounting accountant the script composed on."""
    if epsilon is not None:
        return float(check_real("epsilon", epsilon, minimum=0.0))
    if run.engine is not None:
        return run.engine
    if len(run.accountants) == 1:
        return run.accountants[0]
    if len(run.accountants) > 1:
        raise AuditInputError(
            f"{name} composed events on {len(run.accountants)} dp_accounting accountants: "
            "the runner cannot tell which one is the training's claim", culprit="epsilon",
            fix="give the claimed epsilon (--epsilon, or epsilon=)",
        )
    raise AuditInputError(
        f"{name}: no claim to audit: no Opacus PrivacyEngine made the training private and no "
        "dp_accounting accountant was composed", culprit="epsilon",
        fix="give the claimed epsilon (--epsilon, or epsilon=)",
    )


def _audited_run(run: _Run, label: str, *, epsilon: float | None, delta: float,
                 confidence: float | None) -> DeployedAudit:
    """The one-run audit of ``run`` once it trained; refused by name when nothing was
    instrumented."""
    if run.instrumented is None:
        raise AuditInputError(
            f"{label}: nothing to audit: it never called opacus.PrivacyEngine.make_private (nor "
            "make_private_with_epsilon) and constructed no DiracCanaries", culprit=label,
            fix="an Opacus script needs no line; a plain torch loop needs the canaries' lines "
                "of docs/auditing-your-training.md §0 (DiracCanaries(m, clip=C), wrap, attach, "
                "plain, inject, privatized)",
        )
    trained = run.canaries
    if trained.model is None or trained.observed_at == "none":
        raise AuditInputError(
            f"{label}: the canaries were constructed but never instrumented the training "
            "(attach the model, then canaries.plain(...) or canaries.opacus(...))",
            culprit=label,
        )
    claim = _claim(run, epsilon, label)
    try:
        return one_run_audit(trained, claim, delta=delta, confidence=confidence)
    except ValueError as error:
        raise AuditInputError(f"{label}: the one-run audit of {run.label}: {error}",
                              culprit=label) from error


def audit_training(
    training: Callable[[], Any],
    *,
    name: str | None = None,
    canaries: int | None = None,
    clip: float | None = None,
    seed: int = 0,
    delta: float = 1e-5,
    epsilon: float | None = None,
    replay_probes: Sequence[str] | None = PROBES,
    script: str | None = None,
    args: Sequence[str] = (),
    quiet_replay: bool = True,
    confidence: float | None = None,
) -> ScriptAudit:
    """Audit the DP-SGD training ``training()`` runs (module docstring): one run with the
    canaries (findings, eps_lb, verdict against the claim), then the replay, one run per probe.

    Args:
        training: a function of no argument that trains (an Opacus ``make_private``, or a plain
            loop with the canaries' lines); called once per run, its return value unused.
        name: how the messages name it (default: its ``__name__``).
        canaries: m (default: the script's own ``DiracCanaries(m)``, else
            :data:`DEFAULT_CANARIES`).
        clip: C for a plain loop whose script does not state it (Opacus: read from the
            optimizer).
        seed: the seed of every run (torch's, numpy's and Python's global generators).
        delta: the claim's delta.
        epsilon: the claimed epsilon, when the claim is not Opacus's engine nor a single
            dp_accounting accountant.
        replay_probes: the replay's probes (:data:`audit.deployed.record_replay.PROBES`);
            None or empty: no replay.
        script: the script's path (to name its line when it fails); ``args``: its arguments
            (reported).
        quiet_replay: the replay's runs print nothing (shown when one fails).
        confidence: the one-run audit's confidence (default 0.95).

    Raises:
        AuditInputError: nothing to audit (no ``make_private``, no ``DiracCanaries``), the
            training failed (naming the run and the script's line), no claim.
    """
    label = str(name or getattr(training, "__name__", "training"))
    seed = check_int("seed", seed, minimum=0)
    first = _RunnerCanaries.given(canaries, clip, seed)
    run = _Run(first, "the audited training (run 1)")
    _execute(training, run, seed=seed, name=label, script=script, quiet=False)
    audit = _audited_run(run, label, epsilon=epsilon, delta=delta, confidence=confidence)
    trained = run.canaries
    notes = list(run.notes)
    result: ReplayResult | None = None
    probes = tuple(replay_probes or ())
    if probes:
        counter = [0]

        def again(replay_canaries: DiracCanaries, replay_seed: int) -> None:
            this = _Run(replay_canaries, _label(replay_canaries, counter))
            _execute(training, this, seed=replay_seed, name=label, script=script,
                     quiet=quiet_replay)

        divisor = trained.noise_divisor
        assert trained.clip is not None and divisor is not None  # instrumented above
        result = replay(again, seed=seed, clip=float(trained.clip),
                        noise_divisor=float(divisor), slots=trained.m, probes=probes)
    return ScriptAudit(
        script=label, args=tuple(args), seed=seed, instrumented=str(run.instrumented),
        canaries=trained.m, audit=audit, replay=result, notes=tuple(notes),
    )


def audit_script(
    script: str | Path,
    args: Sequence[str] = (),
    **options: Any,
) -> ScriptAudit:
    """Audit the script at ``script`` run as ``python script <args>`` (module docstring); the
    ``options`` are :func:`audit_training`'s.

    The script runs as ``__main__`` (its ``if __name__ == "__main__":`` block runs), with
    ``sys.argv = [script, *args]`` and its folder first on ``sys.path`` (as ``python`` sets
    them), restored afterwards; once for the audit and once per replay probe.
    """
    path = Path(script)
    if path.suffix != ".py" or not path.is_file():
        raise AuditInputError(
            f"script={str(script)!r}: " + ("not a file" if not path.is_file() else
                                           "not a Python file (.py)"),
            culprit="script",
        )
    path = path.resolve()
    argv = [str(path), *[str(a) for a in args]]

    def training() -> None:
        saved_argv, saved_path = sys.argv, list(sys.path)
        sys.argv = list(argv)
        sys.path.insert(0, str(path.parent))
        try:
            runpy.run_path(str(path), run_name="__main__")
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path

    return audit_training(training, name=path.name, script=str(path), args=tuple(args),
                          **options)


@dataclass
class AuditedBlock:
    """What :func:`audited` yields: ``result`` (a :class:`ScriptAudit` without replay) is set
    when the block ends without an exception."""

    result: ScriptAudit | None = None

    @property
    def audit(self) -> DeployedAudit:
        """The one-run audit of the block's training."""
        if self.result is None:
            raise ValueError("the audited block has not ended (or raised): no audit yet")
        return self.result.audit


@contextlib.contextmanager
def audited(
    *,
    canaries: int | None = None,
    clip: float | None = None,
    seed: int = 0,
    delta: float = 1e-5,
    epsilon: float | None = None,
    confidence: float | None = None,
    name: str = "the audited block",
) -> Iterator[AuditedBlock]:
    """Audit the training a ``with`` block runs, in this process (a notebook, a script's own
    ``main()``): ``with audited(canaries=1000) as block: main()``, then ``block.audit``.

    The same instrumentation as :func:`audit_script` (Opacus's ``make_private`` patched, the
    script's ``DiracCanaries(...)`` handed the block's canaries, the claim from the engine or
    the one dp_accounting accountant composed), with torch's, numpy's and Python's generators
    seeded with ``seed`` on entry; one training, hence the one-run audit only: the replay
    re-runs the training, which a block cannot (use :func:`audit_training` with a function).
    An exception in the block propagates as it is, and no audit is made.
    """
    seed = check_int("seed", seed, minimum=0)
    first = _RunnerCanaries.given(canaries, clip, seed)
    run = _Run(first, name)
    block = AuditedBlock()
    _seed_everything(seed)
    with stand_in(run.canaries) as holder, _patched(run):
        yield block
    if holder.used and run.instrumented is None:
        run.instrumented = "script"
    audit = _audited_run(run, name, epsilon=epsilon, delta=delta, confidence=confidence)
    block.result = ScriptAudit(
        script=name, args=(), seed=seed, instrumented=str(run.instrumented),
        canaries=run.canaries.m, audit=audit, replay=None, notes=tuple(run.notes),
    )
