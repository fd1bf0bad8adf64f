"""Run the documented path on every zoo entry over seeds; write README.md's tables.

Per entry and seed, in the order docs/auditing-your-training.md gives a user:

1. ``inspect_loader`` on the training's loader (``make_loader``) against the accountant's
   assumptions (Poisson at the claim's q, the noise divisor, sigma, epochs);
2. ``audit.deployed.replay`` of ``train`` (record-replay sensitivity);
3. ``train(canaries, seed)`` with m Dirac canaries, then ``one_run_audit(canaries,
   accountant, delta=...)``: the findings, then eps_lb and the verdict.

An entry is *found* at a seed when the loader does not match the accountant, the replay
fails, a finding fails or the verdict is violated. The correct trainings' failures are
counted per check (each against its level).

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
    violated: bool = False


def divisor(module, n: int) -> float:
    """The b the training divides its noisy sum by for n rows (Opacus: expected_batch_size)."""
    return float(module.noise_divisor(n)) if hasattr(module, "noise_divisor") else module.BATCH


def audit_once(module, seed: int, report: Path | None = None, title: str = "") -> Outcome:
    """The documented path on ``module`` at ``seed`` (module docstring); ``report``: write the
    canaries-form one-run audit's report there, the outcome's sentence as its first line."""
    from audit.deployed import DiracCanaries, inspect_loader, one_run_audit, replay
    from audit.deployed.claims import AccountantAssumptions

    # 3. (trained first: the loader is compared with the accountant the training returns)
    canaries = DiracCanaries(M, clip=module.CLIP, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accountant = module.train(canaries, seed)
        audit = one_run_audit(canaries, accountant, delta=DELTA)
    claim = audit.claim
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
    # 2. replay
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = replay(module.train, seed=seed, clip=module.CLIP,
                        noise_divisor=divisor(module, module.N + 64))
    failed = [f for f in audit.failed]
    mismatch = inspection is not None and (
        inspection.matches_accountant is False or inspection.sampler == "unknown"
    )
    out = Outcome(
        found=False, sentence="", what="",
        failed_findings=[f.name for f in failed], replay_failed=result.failed,
        loader_mismatch=mismatch, violated=audit.verdict == "violated",
    )
    out.found = mismatch or out.replay_failed or bool(failed) or out.violated
    sentences = []
    if mismatch:
        assert inspection is not None
        why = "; ".join(dict.fromkeys([*inspection.mismatches, *inspection.reasons[:1]]))
        sizes = inspection.test("fixed_sizes")
        sentences.append(
            f"inspect-loader: the loader is {inspection.sampler} ({why}; batch sizes: "
            f"{sizes.detail})"
        )
    if out.replay_failed:
        sentences.append(f"replay: {result.message}")
    sentences += [f"finding {f.name}: {f.message}" for f in failed]
    if out.violated and not failed:
        sentences.append(audit.sentence())
    out.sentence = (sentences[0] if sentences else
                    "No bug found: the loader matches the accountant, the replay passed, no "
                    "finding failed, and the one-run audit is consistent with the claim.")
    parts = []
    if inspection is not None:
        parts.append(f"inspect-loader: {inspection.sampler}, "
                     f"{'matches' if not mismatch else 'DOES NOT match'} the accountant")
    parts.append(f"replay {'passed' if result.passed else 'FAILED: ' + result.message}")
    parts.append("findings failed: " + (", ".join(out.failed_findings) or "none"))
    parts.append(f"verdict {audit.verdict} (eps_lb {audit.epsilon_lb:.2f})")
    out.what = "; ".join(parts)
    if report is not None:
        audit.write(report, title=title or f"Bug zoo, seed {seed}",
                    notes=tuple(f"- {p}" for p in parts))
        text = (report / "report.md").read_text(encoding="utf-8")
        (report / "report.md").write_text(out.sentence + "\n\n" + text, encoding="utf-8")
    return out


def diff_line(name: str) -> str:
    bug = zoo.BUGS[name]
    cite = f" ([issue]({bug.cite}))" if bug.cite else ""
    return f"`{bug.old}` → `{bug.new}` in {bug.base}{cite}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    seeds = int(argv[argv.index("--seeds") + 1]) if "--seeds" in argv else 5
    correct_seeds = (int(argv[argv.index("--correct-seeds") + 1])
                     if "--correct-seeds" in argv else 10)
    only = argv[argv.index("--only") + 1:] if "--only" in argv else None
    zoo.write_bugs()
    bug_rows, correct_rows = [], []
    for name in zoo.CORRECT:
        if only and name not in only:
            continue
        module = load(zoo.correct_path(name))
        start = time.process_time()
        report = HERE / "reports" / "correct" if name == "plain" else None
        results = [audit_once(module, s, report if s == 0 else None, f"Correct training {name}")
                   for s in range(correct_seeds)]
        cpu = (time.process_time() - start) / correct_seeds
        counts: dict[str, int] = {}
        for r in results:
            for f in r.failed_findings:
                counts[f] = counts.get(f, 0) + 1
        row = (f"| {name} | {zoo.correct_path(name).relative_to(HERE)} | "
               f"{sum(r.found for r in results)} of {correct_seeds} | "
               f"{sum(r.loader_mismatch for r in results)} | "
               f"{sum(r.replay_failed for r in results)} | "
               f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none'} | "
               f"{sum(r.violated for r in results)} | {cpu:.1f} |")
        correct_rows.append(row)
        print(row, flush=True)
    for name, bug in zoo.BUGS.items():
        if only and name not in only:
            continue
        module = load(HERE / "bugs" / f"{name}.py")
        start = time.process_time()
        report = HERE / "reports" / name
        results = [audit_once(module, s, report if s == 0 else None, f"Bug zoo: {name}, seed 0")
                   for s in range(seeds)]
        cpu = (time.process_time() - start) / seeds
        found = sum(r.found for r in results)
        row = (f"| {name} | {cell(diff_line(name))} | {cell(bug.kind)} | "
               f"{cell(results[0].sentence)} | {found} of {seeds} | {cpu:.1f} |")
        bug_rows.append(row)
        print(row, flush=True)
    if only:
        return
    text = "\n".join([
        "# Bug zoo (issue 33 item 4)",
        "",
        "Each bug is a correct training with one line changed (`zoo.py`; the files in `bugs/`,",
        "the generated correct variants in `correct/`). Generated by",
        f"`python examples/bug_zoo/run_zoo.py --seeds {seeds} --correct-seeds {correct_seeds}`",
        f"(m = {M} Dirac canaries, δ = {DELTA:g}, 95% confidence; CPU seconds per seed, one",
        "thread, the whole path). Each seed runs the documented path",
        "(docs/auditing-your-training.md) in its order: `inspect_loader` on the training's",
        "loader against the accountant, `audit.deployed.replay`, then `one_run_audit(canaries,",
        "accountant, delta=...)` (its findings first, then eps_lb and the verdict). 'found' counts",
        "seeds where the loader does not match the accountant, the replay failed, a finding",
        "failed or the verdict is violated. `reports/<bug>/report.md`: seed 0's report, its first",
        "line the sentence to act on; `reports/correct/`: the plain training's.",
        "",
        f"## Correct trainings ({correct_seeds} seeds each)",
        "",
        "Levels: each inspect-loader test 1e-3 (nine tests); each finding 0.05 / K (K = the",
        "diagnostics, Bonferroni) or exact (level 0); the replay's checks are exact up to the",
        "float rounding allowance and its fresh-noise check is at 1e-6.",
        "",
        "| training | file | any check failed | loader mismatch | replay failed | "
        "findings failed (count) | verdict violated | CPU s |",
        "|---|---|---|---|---|---|---|---|",
        *correct_rows,
        "",
        f"## Bugs ({seeds} seeds each)",
        "",
        "| bug | one-line diff | expected finding | what the path reports first (seed 0) | "
        "found | CPU s |",
        "|---|---|---|---|---|---|",
        *bug_rows,
        "",
    ])
    (HERE / "README.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
