"""Run the documented path on every zoo entry over seeds; write README.md's tables.

Per entry and seed, in the order docs/auditing-your-training.md gives a user:

1. ``inspect_loader`` on the training's loader (``make_loader``) against the accountant's
   assumptions (Poisson at the claim's q, the noise divisor, sigma, epochs), and
   ``inspect_dataset`` on the training's dataset (the unit of privacy: one row, one person?),
   as ``audit inspect-loader`` runs both;
2. ``audit.deployed.replay`` of ``train`` (record-replay sensitivity);
3. ``train(canaries, seed)`` with m Dirac canaries, then ``one_run_audit(canaries,
   accountant, delta=...)``: the findings, then eps_lb and the verdict.

An entry is *found* at a seed when the loader does not match the accountant, the dataset's
``unit_of_privacy`` finding fails, the replay fails (``ReplayResult.failed``: an inconclusive
replay is not a failure), a finding fails or the verdict is violated. The correct trainings'
failures are counted per check (each against its level).

    python examples/bug_zoo/run_zoo.py [--seeds 5] [--correct-seeds 10] [--only NAME ...]
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import zoo  # noqa: E402

M, DELTA = 200, 1e-5


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@dataclass
class Outcome:
    """One seed of one entry: what each step of the path said."""

    found: bool
    sentence: str  # the first thing a user should act on (or 'no bug found')
    what: str  # every step's result, one line
    failed_findings: list[str] = field(default_factory=list)
    replay_failed: bool = False
    loader_mismatch: bool = False
    unit_failed: bool = False
    violated: bool = False
    crashed: str = ""  # a step that raised: the exception, else ''


def divisor(module, n: int) -> float:
    """The b the training divides its noisy sum by for n rows (Opacus: expected_batch_size)."""
    return float(module.noise_divisor(n)) if hasattr(module, "noise_divisor") else module.BATCH


def audit_once(module, seed: int, report: Path | None = None, title: str = "") -> Outcome:
    """The documented path on ``module`` at ``seed`` (module docstring); ``report``: write the
    canaries-form one-run audit's report there, the outcome's sentence as its first line."""
    from audit.deployed import DiracCanaries, inspect_loader, one_run_audit, replay
    from audit.deployed.claims import AccountantAssumptions, claim_from
    from audit.deployed.dataset_inspection import inspect_dataset

    # 3. (trained first: the loader is compared with the accountant the training returns);
    # a step that raises is reported as a crash and the other steps still run
    canaries = DiracCanaries(M, clip=module.CLIP, seed=seed)
    crashed = ""
    audit = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accountant = module.train(canaries, seed)
        try:
            audit = one_run_audit(canaries, accountant, delta=DELTA)
        except Exception as exc:  # reported in the table, never hidden
            crashed = f"one-run audit CRASHED: {crash_text(exc)}"
    claim = audit.claim if audit is not None else claim_from(accountant, DELTA)
    # 1. inspect-loader
    inspection = None
    if hasattr(module, "make_loader"):
        n = module.N + M
        wrapped = DiracCanaries(M, clip=module.CLIP, seed=seed).wrap(module.Blobs(module.N, seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = module.make_loader(wrapped, seed)
        assumptions = AccountantAssumptions(
            sampler=getattr(module, "ACCOUNTED_SAMPLER", "poisson"),  # the false-alarm suite's
            sample_rate=claim.sample_rate,
            expected_batch_size=divisor(module, n), noise_multiplier=claim.noise_multiplier,
            epochs=module.EPOCHS, delta=DELTA, epsilon=claim.epsilon,
            accountant=claim.accountant,
        )
        inspection = inspect_loader(loader, accountant=assumptions)
    # 1b. the unit of privacy: the user's dataset (without the canary slots, which copy rows)
    units = inspect_dataset(
        module.Blobs(module.N, seed), epsilon=claim.epsilon, delta=DELTA,
        noise_multiplier=claim.noise_multiplier, sample_rate=claim.sample_rate, steps=claim.steps,
    )
    # 2. replay
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = replay(module.train, seed=seed, clip=module.CLIP,
                        noise_divisor=divisor(module, module.N + 64))
    failed = list(audit.failed) if audit is not None else []
    mismatch = inspection is not None and (
        inspection.matches_accountant is False or inspection.sampler == "unknown"
    )
    out = Outcome(
        found=False, sentence="", what="",
        failed_findings=[f.name for f in failed], replay_failed=result.failed,
        loader_mismatch=mismatch, unit_failed=not units.finding.passed,
        violated=audit is not None and audit.verdict == "violated", crashed=crashed,
    )
    out.found = (mismatch or out.unit_failed or out.replay_failed or bool(failed)
                 or out.violated)
    sentences = []
    if mismatch:
        assert inspection is not None
        why = "; ".join(dict.fromkeys([*inspection.mismatches, *inspection.reasons[:1]]))
        sizes = inspection.test("fixed_sizes")
        sentences.append(
            f"inspect-loader: the loader is {inspection.sampler} ({why}; batch sizes: "
            f"{sizes.detail})"
        )
    if out.unit_failed:
        sentences.append(f"inspect-loader: unit of privacy FAILED: {units.sentence()}")
    if out.replay_failed:
        sentences.append(f"replay: {result.message}")
    sentences += [f"finding {f.name}: {f.message}" for f in failed]
    if out.violated and not failed:
        assert audit is not None
        sentences.append(audit.sentence())
    if crashed:
        sentences.append(crashed)
    out.sentence = (sentences[0] if sentences else
                    "No bug found: the loader matches the accountant, the replay passed, no "
                    "finding failed, and the one-run audit is consistent with the claim.")
    parts = []
    if inspection is not None:
        parts.append(f"inspect-loader: {inspection.sampler}, "
                     f"{'matches' if not mismatch else 'DOES NOT match'} the accountant")
    parts.append(f"unit of privacy {'FAILED' if out.unit_failed else 'ok'} (k = {units.k})")
    parts.append("replay " + ("FAILED: " + result.message if result.failed else
                              "passed" if result.passed else "inconclusive: " + result.message))
    parts.append("findings failed: " + (", ".join(out.failed_findings) or "none"))
    parts.append(f"verdict {audit.verdict} (eps_lb {audit.epsilon_lb:.2f})" if audit is not None
                 else crashed)
    out.what = "; ".join(parts)
    if report is not None and audit is not None:
        audit.write(report, title=title or f"Bug zoo, seed {seed}",
                    notes=tuple(f"- {p}" for p in parts))
        text = (report / "report.md").read_text(encoding="utf-8")
        (report / "report.md").write_text(out.sentence + "\n\n" + text, encoding="utf-8")
    return out


def crash_text(exc: BaseException) -> str:
    """``Type: message at file:line`` of the innermost frame (where it was raised)."""
    where = exc.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    at = (f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}"
          if where is not None else "")
    return f"{type(exc).__name__}: {exc}{at}"


def audit_or_crash(module, seed: int, report: Path | None, title: str) -> Outcome:
    """:func:`audit_once`, or, when a step of the path raises, an outcome that says so (not
    found: a crash is no finding; the README prints the exception where the sentence goes)."""
    try:
        return audit_once(module, seed, report, title)
    except Exception as exc:  # reported in the table, never hidden
        text = f"the path CRASHED: {crash_text(exc)}"
        return Outcome(found=False, sentence=text, what=text, crashed=text)


def diff_line(name: str) -> str:
    bug = zoo.BUGS[name]
    cite = f" ([issue]({bug.cite}))" if bug.cite else ""
    return f"`{bug.old}` → `{bug.new}` in {bug.base}{cite}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def correct_row(name: str, results: list[Outcome], cpu: float) -> str:
    """The correct-trainings table's row of ``name`` (failures per check over the seeds)."""
    counts: dict[str, int] = {}
    for r in results:
        for f in r.failed_findings:
            counts[f] = counts.get(f, 0) + 1
    crashed = sum(bool(r.crashed) for r in results)
    return (f"| {name} | {zoo.correct_path(name).relative_to(HERE)} | "
            f"{sum(r.found for r in results)} of {len(results)}"
            f"{f' ({crashed} CRASHED)' if crashed else ''} | "
            f"{sum(r.loader_mismatch for r in results)} | "
            f"{sum(r.unit_failed for r in results)} | "
            f"{sum(r.replay_failed for r in results)} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none'} | "
            f"{sum(r.violated for r in results)} | {cpu:.1f} |")


def bug_row(name: str, results: list[Outcome], cpu: float) -> str:
    """The bugs table's row of ``name``: its diff, leak, expected finding, seed 0's first
    sentence, the seeds found."""
    bug = zoo.BUGS[name]
    found = sum(r.found for r in results)
    return (f"| {name} | {cell(diff_line(name))} | {cell(zoo.LEAKS.get(name, ''))} | "
            f"{cell(bug.kind)} | {cell(results[0].sentence)} | "
            f"{found} of {len(results)}{'' if found else ' (NOT FOUND)'} | {cpu:.1f} |")


def readme(seeds: int, correct_seeds: int, correct_rows: list[str], bug_rows: list[str],
           pending: list[str]) -> str:
    """README.md's text; ``pending``: entries not yet run in this regeneration (listed as such
    while the run is under way, so a stopped run leaves no stale row)."""
    waiting = ([f"Not yet run in this regeneration: {', '.join(pending)}.", ""]
               if pending else [])
    return "\n".join([
        "# Bug zoo (issue 33 item 4, issue 42 item 7)",
        "",
        "Each bug is a correct training with one line changed (`zoo.py`; the files in `bugs/`,",
        "the generated correct variants in `correct/`): the 17 of issue 33, then the kinds of",
        "issue 42 (noise missing on some tensors, the example's data used outside the clipped",
        "gradients, one person in several rows, low-precision noise, sparse noise, micro-batch",
        "means; from the issue's classes and from Opacus's and TensorFlow Privacy's trackers,",
        "linked where a thread reports the pattern). Generated by",
        f"`python examples/bug_zoo/run_zoo.py --seeds {seeds} --correct-seeds {correct_seeds}`",
        f"(m = {M} Dirac canaries, δ = {DELTA:g}, 95% confidence; CPU seconds per seed, one",
        "thread, the whole path). Each seed runs the documented path",
        "(docs/auditing-your-training.md) in its order: `inspect_loader` on the training's",
        "loader against the accountant and `inspect_dataset` on its dataset (the unit of",
        "privacy, as `audit inspect-loader` runs both), `audit.deployed.replay`, then",
        "`one_run_audit(canaries, accountant, delta=...)` (its findings first, then eps_lb and",
        "the verdict). plain.py, the base of most bugs, marks where its privatized gradient is",
        "made (`canaries.privatized()`, docs §0); accumulate.py and augment.py do not (the audit",
        "then reads `p.grad` at `optimizer.step()`). 'found' counts seeds where the loader does",
        "not match the accountant, the",
        "`unit_of_privacy` finding failed, the replay failed (`ReplayResult.failed`; an",
        "inconclusive replay is not a failure), a finding failed or the verdict is violated. A",
        "step that raises is printed as `CRASHED` with the exception in the every-step line the",
        "run prints, and as the sentence when no other step found the bug (never counted as",
        "found).",
        "NOT FOUND: no seed found it; the sentence is then what the path printed.",
        "`reports/<bug>/report.md`: seed 0's report, its first line the sentence to act on;",
        "`reports/correct/`: the plain training's.",
        "",
        *waiting,
        f"## Correct trainings ({correct_seeds} seeds each)",
        "",
        "Levels: each inspect-loader test 1e-3 (nine tests); the unit of privacy is exact (level",
        "0: no two rows of these datasets are identical); the findings accuse at 1e-3",
        "family-wise (each of the K diagnostics at 1e-3 / K, Bonferroni) or exact (level 0);",
        "the replay's checks are exact up to the",
        "float rounding allowance and its noise checks are at 1e-6.",
        "",
        "| training | file | any check failed | loader mismatch | unit of privacy failed | "
        "replay failed | findings failed (count) | verdict violated | CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
        *correct_rows,
        "",
        f"## Bugs ({seeds} seeds each)",
        "",
        "| bug | one-line diff | the leak | expected finding | what the path reports first "
        "(seed 0) | found | CPU s |",
        "|---|---|---|---|---|---|---|",
        *bug_rows,
        "",
    ])


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    seeds = int(argv[argv.index("--seeds") + 1]) if "--seeds" in argv else 5
    correct_seeds = (int(argv[argv.index("--correct-seeds") + 1])
                     if "--correct-seeds" in argv else 10)
    only = argv[argv.index("--only") + 1:] if "--only" in argv else None
    zoo.write_bugs()
    bug_rows: list[str] = []
    correct_rows: list[str] = []
    issue33 = list(zoo.BUGS)[:17]
    order = [*zoo.CORRECT, *[n for n in zoo.BUGS if n not in issue33], *issue33]
    pending = [n for n in order if not only or n in only]

    def done(name: str) -> None:
        pending.remove(name)
        if not only:  # the README holds whole regenerations only, written as they go
            text = readme(seeds, correct_seeds, correct_rows, bug_rows, pending)
            (HERE / "README.md").write_text(text, encoding="utf-8")

    for name in zoo.CORRECT:
        if (only and name not in only) or correct_seeds < 1:
            continue
        module = load(zoo.correct_path(name))
        start = time.process_time()
        report = HERE / "reports" / "correct" if name == "plain" else None
        results = [audit_or_crash(module, s, report if s == 0 else None,
                                  f"Correct training {name}")
                   for s in range(correct_seeds)]
        row = correct_row(name, results, (time.process_time() - start) / correct_seeds)
        correct_rows.append(row)
        print(row, flush=True)
        done(name)
    for name in order[len(zoo.CORRECT):]:  # issue 42's kinds first, then the 17 of issue 33
        if (only and name not in only) or seeds < 1:
            continue
        module = load(HERE / "bugs" / f"{name}.py")
        start = time.process_time()
        report = HERE / "reports" / name
        results = [audit_or_crash(module, s, report if s == 0 else None,
                                  f"Bug zoo: {name}, seed 0")
                   for s in range(seeds)]
        row = bug_row(name, results, (time.process_time() - start) / seeds)
        bug_rows.append(row)
        print(row, flush=True)
        print(f"  seed 0, every step: {results[0].what}", flush=True)
        done(name)


if __name__ == "__main__":
    main(sys.argv[1:])
