"""No stale results: shards and scores carry the fingerprint of the spec and the code that made
them.

Issue 11, items 3 and 4: ``audit report`` used the stored scores of an older spec (sigma = 0.6
scores under a sigma = 3 report, calling a correct mechanism violated), and a resumed run reused
shards of another code version. Each test is a tiny simulated audit (or a numpy plug-in with a
handful of trainings), a second or two. Changed code is simulated by monkeypatching
:func:`audit.run.fingerprint.harness_source_hash` / :func:`audit.run.fingerprint.package_version`;
the real hash is tested on a copy of the source tree.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import audit.run.fingerprint as fingerprint
from audit.cli import main
from audit.report import run_audit
from audit.report.multi_run import SUMMARY_FILE, write_report
from audit.run.spec import load_spec
from audit.run.store import MANIFEST, SCORES_DIR, SHARDS_DIR, stored_fingerprint

ROOT = Path(__file__).resolve().parents[1]

# The reproduction of issue 11 item 3: a deterministic-batch mechanism whose canary is seen
# once, mu = 1/sigma; at sigma = 0.6 the attack shows eps >= 2.09, far above the sigma = 3
# mechanism's worst case of 1.27, so a report mixing the two calls a correct claim violated.
REPRO = """\
mode = "simulate"
seed = 7
samplers = ["deterministic"]
threat_models = ["adversarial"]
trials_in = 1000
trials_out = 1000
shard_size = 500
claim = "sampler"

[training]
sigma = 0.6
batch_size = 1
n = 20
"""

RunFolder = Callable[..., Path]


def _edit(folder: Path, old: str, new: str) -> None:
    path = folder / "audit.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI always draws the plots (a second each); these tests read numbers only."""
    monkeypatch.setattr("audit.report.multi_run.plot_tradeoff", lambda *args, **kwargs: None)
    monkeypatch.setattr("audit.report.multi_run.plot_overview", lambda *args, **kwargs: None)


def _code_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate another version of audit/ or attacks/ (the real hash: test_source_hash_*)."""
    monkeypatch.setattr(fingerprint, "harness_source_hash", lambda: "0" * 64)


def test_report_refuses_the_scores_of_an_older_spec(
    run_folder: RunFolder, capsys: pytest.CaptureFixture[str], no_plots: None
) -> None:
    """Issue 11 item 3, exactly: run at sigma = 0.6, edit audit.toml to sigma = 3.0, `audit report`.

    Before: exit 0 and a report stating sigma = 3 with the sigma = 0.6 scores (eps_lb 2.09
    beside a worst-case eps of 1.27: a correct mechanism called violated)."""
    folder = run_folder(REPRO)
    assert main(["run", str(folder), "--quiet"]) == 0
    before = (folder / SUMMARY_FILE).read_text()
    capsys.readouterr()
    _edit(folder, "sigma = 0.6", "sigma = 3.0")
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err  # one clean line
    assert "training.sigma: 0.6 -> 3.0" in err and "audit run" in err and "--fresh" in err
    assert (folder / SUMMARY_FILE).read_text() == before  # nothing rewritten from stale data
    # `audit run` refuses the same edit, naming it; --fresh recomputes, then the report agrees.
    assert main(["run", str(folder), "--quiet"]) == 2
    assert "training.sigma: 0.6 -> 3.0" in capsys.readouterr().err
    assert main(["run", str(folder), "--quiet", "--fresh"]) == 0
    assert main(["report", str(folder)]) == 0
    (cell,) = json.loads((folder / SUMMARY_FILE).read_text())["cells"]
    assert cell["verdict"] == "consistent" and cell["epsilon_lb"] < cell["theory_upper_epsilon"]


def test_changed_harness_code_is_refused_by_run_and_report(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, plots=False)
    _code_changed(monkeypatch)
    with pytest.raises(
        ValueError, match=r"changed since its shards were computed: harness code.*--fresh"
    ):
        run_audit(folder, progress=False, plots=False)
    with pytest.raises(ValueError, match=r"computed by another version \(harness code.*--fresh"):
        write_report(folder, plots=False)
    result = run_audit(folder, progress=False, plots=False, fresh=True)
    assert result.shards_computed == 6 and result.shards_reused == 0
    assert (
        stored_fingerprint(next((folder / SHARDS_DIR).glob("*.npz")))["harness_source"] == "0" * 64
    )


def test_changed_package_version_is_refused(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, report=False)
    monkeypatch.setattr(fingerprint, "package_version", lambda: "99.0")
    with pytest.raises(ValueError, match=r"package version .* -> 99\.0"):
        run_audit(folder, progress=False, report=False)


def test_partly_deleted_shards_and_changed_code_never_mix(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two shards deleted, then the code changes: nothing is built from the four old shards,
    even once the manifest is rewritten for the new code (each shard carries its own
    fingerprint); --fresh gives exactly the result of a clean run of the new code."""
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, plots=False)
    shards = sorted((folder / SHARDS_DIR).glob("*.npz"))
    for path in shards[:2]:
        path.unlink()
    _code_changed(monkeypatch)
    with pytest.raises(ValueError, match="harness code"):
        run_audit(folder, progress=False, plots=False)
    with pytest.raises(ValueError, match="harness code"):
        write_report(folder, plots=False)
    manifest = folder / SHARDS_DIR / MANIFEST
    stored = json.loads(manifest.read_text())
    stored["fingerprint"]["harness_source"] = "0" * 64  # a manifest rewritten by hand
    manifest.write_text(json.dumps(stored))
    with pytest.raises(
        ValueError, match=r"\.npz: shard computed by another version \(harness code"
    ):
        run_audit(folder, progress=False, plots=False)
    assert len(list((folder / SHARDS_DIR).glob("*.npz"))) == 4  # nothing computed beside them

    fresh = run_audit(folder, progress=False, plots=False, fresh=True)
    clean = run_audit(run_folder(tiny_audit, "clean"), progress=False, plots=False)
    assert fresh.shards_computed == 6 and fresh.cells == clean.cells


def test_stale_scores_are_rescored_from_valid_shards(
    tiny_audit: str, run_folder: RunFolder
) -> None:
    """Fewer OUT trials: the shards stay valid, the stored scores (of 100/90 trials) do not;
    the report rescores instead of reading them (before: it read the 100/90-trial scores)."""
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, plots=False)
    _edit(folder, "trials_out = 90", "trials_out = 60")
    result = write_report(folder, plots=False)
    assert {(c.trials_in, c.trials_out) for c in result.cells} == {(100, 60)}
    for path in (folder / SCORES_DIR).glob("*.npz"):
        assert stored_fingerprint(path)["scoring"]["trials_out"] == 60


def test_scores_of_older_code_without_shards_rebuild_the_report_saying_so(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 8: a committed run keeps its scores, not its shards, and the code moves on;
    `audit report` rebuilds the report from complete scores of one older version (the same
    cells), naming that version; a spec change still refuses them (the test above)."""
    folder = run_folder(tiny_audit)
    before = [cell.to_json() for cell in run_audit(folder, progress=False, plots=False).cells]
    shutil.rmtree(folder / SHARDS_DIR)
    _code_changed(monkeypatch)
    result = write_report(folder, plots=False)
    assert [cell.to_json() for cell in result.cells] == before
    assert result.scores_version is not None
    assert (
        "harness code" in result.scores_version.text
        and "older version" in result.scores_version.text
    )


def test_scores_written_before_fingerprints_are_not_trusted(
    tiny_audit: str, run_folder: RunFolder
) -> None:
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, plots=False)
    shutil.rmtree(folder / SHARDS_DIR)
    for path in (folder / SCORES_DIR).glob("*.npz"):
        with np.load(path) as data:
            # no fingerprint
            np.savez(path, scores_in=data["scores_in"], scores_out=data["scores_out"])
    with pytest.raises(ValueError, match=r"no fingerprint \(stored before fingerprints"):
        write_report(folder, plots=False)


def test_report_of_a_committed_run_without_shards_says_what_is_missing(
    tmp_path: Path,
    tiny_audit: str,
    run_folder: RunFolder,
    capsys: pytest.CaptureFixture[str],
    no_plots: None,
) -> None:
    """runs/*/ in git hold the spec and the outputs, never shards/ or scores/ (.gitignore)."""
    folder = tmp_path / "shuffle-vs-poisson"
    folder.mkdir()
    shutil.copy(ROOT / "runs" / "shuffle-vs-poisson" / "audit.toml", folder)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert (
        "no stored scores (scores/) and no shards (shards/)" in err and f"audit run {folder}" in err
    )
    # Shards of one training key only: the report names the missing shards.
    one = run_folder(tiny_audit)
    run_audit(one, progress=False, report=False)
    shutil.rmtree(one / SCORES_DIR)
    for path in (one / SHARDS_DIR).glob("dynamic_shuffle-*.npz"):
        path.unlink()
    with pytest.raises(
        ValueError, match=r"3 of the 3 shards of dynamic_shuffle-adversarial are missing.*audit run"
    ):
        write_report(one, plots=False)




def test_changed_implementation_source_is_refused(
    tmp_path: Path,
    run_folder: RunFolder,
    monkeypatch: pytest.MonkeyPatch,
    audit_toml: Callable[..., str],
    implementation_spec: dict,
) -> None:
    module = tmp_path / "tiny_impl.py"
    module.write_text(textwrap.dedent("""\
        from audit.plugins.broken import correct

        def train(data, canary, setup, seed):
            return correct(data, canary, setup, seed)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tiny_impl", raising=False)
    folder = run_folder(
        audit_toml(
            implementation_spec,
            implementation="tiny_impl:train",
            trials_in=4,
            trials_out=4,
            shard_size=2,
            claim=2.0,
        )
    )
    run_audit(folder, progress=False, plots=False)
    manifest = json.loads((folder / SHARDS_DIR / MANIFEST).read_text())
    files = manifest["fingerprint"]["implementation"]["files"]  # no absolute path (issue 32)
    assert [Path(f).name for f in files] == [module.name] and not Path(files[0]).is_absolute()
    (next((folder / SHARDS_DIR).glob("*.npz"))).unlink()  # one shard left to compute on resume
    module.write_text(module.read_text() + "\n# a changed implementation\n")
    with pytest.raises(
        ValueError, match=r"implementation tiny_impl:train source \(.*tiny_impl\.py\).*--fresh"
    ):
        run_audit(folder, progress=False, plots=False)
    with pytest.raises(ValueError, match=r"implementation tiny_impl:train source"):
        write_report(folder, plots=False)
    assert run_audit(folder, progress=False, plots=False, fresh=True).shards_computed == 2


def test_family_confidence_divides_alpha_by_the_cell_count(
    tiny_audit: str, run_folder: RunFolder, capsys: pytest.CaptureFixture[str], no_plots: None
) -> None:
    """confidence = "family": each of the 4 cells at alpha / 4 (Bonferroni), so every eps_lb
    holds at once at 95%; a report only (the shards do not depend on it), stated per cell, in
    the CLI output and beside the report's table."""
    from audit.run.spec import Cell
    from audit.run.store import load_scores
    from audit.stats.binary import epsilon_lower_bound

    folder = run_folder(tiny_audit)
    # split: its bound at alpha / 4 is at most its bound at alpha (a plan may move with alpha)
    _edit(folder, "claim = 3.0", 'claim = 3.0\nthreshold = "split"')
    assert main(["run", str(folder), "--quiet"]) == 0
    assert 'confidence: 95% per cell (confidence = "cell"' in capsys.readouterr().out
    per_cell = json.loads((folder / SUMMARY_FILE).read_text())["cells"]
    _edit(folder, "claim = 3.0", 'claim = 3.0\nconfidence = "family"')
    assert main(["report", str(folder)]) == 0  # the shards and scores stay valid
    out = capsys.readouterr().out
    assert "95% for all 4 cells at once" in out and "0.0125 per cell" in out
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    assert summary["confidence"] == {"level": 0.95, "scope": "family", "alpha": 0.0125, "cells": 4}
    spec = load_spec(folder)
    for old, new in zip(per_cell, summary["cells"], strict=True):
        assert old["confidence"] == {"level": 0.95, "scope": "cell", "alpha": 0.05, "cells": 1}
        assert new["confidence"] == summary["confidence"] and new["alpha"] == 0.0125
        cell = Cell(new["sampler"], new["threat_model"], new["attack"])
        expected = epsilon_lower_bound(
            *load_scores(folder, cell),
            delta=spec.claim.delta,
            confidence=1 - 0.05 / 4,
            threshold=spec.claim.threshold,
            seed=spec.experiment.seed,
        )
        assert new["epsilon_lb"] == expected.epsilon_lb <= old["epsilon_lb"]
        assert new["evidence"]["alpha"] == new["bound"]["alpha"] == 0.0125  # the verdict too
    assert any(
        new["epsilon_lb"] < old["epsilon_lb"]
        for old, new in zip(per_cell, summary["cells"], strict=True)
    )
    report = (folder / "report.md").read_text()
    table = report.index("| sampler |")
    assert "95% for all 4 cells at once" in report[report.rindex("\n\n", 0, table - 2) : table]
    assert "ε_lb (sound, 95% all cells at once)" in report


def test_source_hash_hashes_every_python_file_of_the_harness(tmp_path: Path) -> None:
    """The real mechanism: a copy of audit/ and attacks/ hashes as the running harness does;
    editing, adding or renaming one .py file under either changes the hash."""
    for package in fingerprint.HARNESS_PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    base = fingerprint.source_hash(tmp_path)
    assert base == fingerprint.harness_source_hash() == fingerprint.source_hash(ROOT)
    (tmp_path / "attacks" / "__init__.py").write_text(
        (tmp_path / "attacks" / "__init__.py").read_text() + "\n"
    )
    edited = fingerprint.source_hash(tmp_path)
    (tmp_path / "audit" / "extra.py").write_text("")
    added = fingerprint.source_hash(tmp_path)
    (tmp_path / "audit" / "extra.py").rename(tmp_path / "audit" / "extra2.py")
    renamed = fingerprint.source_hash(tmp_path)
    (tmp_path / "audit" / "notes.txt").write_text("not code")
    assert len({base, edited, added, renamed}) == 4 and fingerprint.source_hash(tmp_path) == renamed


# --------------------------------------------------------------------------- issue 32 item 5

SHARD_ENTRY_POINTS = (
    "audit.run.runner",  # compute_shard, the sequential runner
    "audit.run.scoring",  # shard_scores, score_key
    "audit.training.simulate",  # simulate_shard
    "audit.training.trials",  # the engine's trainings
    "audit.training.engine",
    "audit.training.func_engine",
    "audit.training.compiled",
    "audit.plugins.contract",  # load_implementation
    "audit.deployed.instrument",  # DiracCanaries, which a user's training script trains with
    "attacks",
)
"""The modules a shard or a score is computed by (each imports what it calls)."""

STATISTICS_ONLY = {"audit/run/summary.py", "audit/run/results.py", "audit/run/proof_report.py",
                   "audit/run/preflight.py"}  # the pre-flight record, read by the summary
"""Modules of :data:`audit.run.fingerprint.NOT_SHARD_CODE` the runner imports, to decide when a
sequential audit stops (how many shards, never what a shard holds)."""


def test_every_module_the_shard_computation_imports_is_hashed() -> None:
    """The rule behind ``harness_source``: in a fresh interpreter, import the shard computation's
    entry points; every module of audit/ or attacks/ it loads is hashed, except the statistics
    modules the runner reads for a sequential stop; none of the CLI or the report is loaded."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {SHARD_ENTRY_POINTS!r}: importlib.import_module(name)\n"
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    loaded = set()
    for file in json.loads(out.splitlines()[-1]):
        if file is None:
            continue
        path = Path(file).resolve()
        packages = fingerprint.HARNESS_PACKAGES
        if path.is_relative_to(ROOT) and path.parts[len(ROOT.parts)] in packages:
            loaded.add(path.relative_to(ROOT).as_posix())
    hashed = {relative for relative, _ in fingerprint.hashed_files(ROOT)}
    assert "audit/training/engine.py" in loaded and "attacks/__init__.py" in loaded
    assert loaded - hashed <= STATISTICS_ONLY, loaded - hashed
    assert not any(f.startswith(("audit/report/", "audit/cli/")) for f in loaded)
    assert not any(f.startswith(("audit/report/", "audit/cli/")) for f in hashed)
    assert all(f in hashed for f in ("audit/training/simulate.py", "audit/run/runner.py"))


def _tree_copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for package in fingerprint.HARNESS_PACKAGES:
        shutil.copytree(ROOT / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _append(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.write_text(path.read_text() + text)


def test_a_docstring_edit_in_the_report_keeps_the_shards_and_a_training_edit_does_not(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 32, done when: editing a docstring in audit/report/ keeps a tiny audit's shards;
    editing audit/training/ does not (the hash of an edited copy of the source tree stands in
    for the running harness's)."""
    tree = _tree_copy(tmp_path)
    monkeypatch.setattr(fingerprint, "harness_source_hash", lambda: fingerprint.source_hash(tree))
    folder = run_folder(tiny_audit)
    first = run_audit(folder, progress=False, report=False)
    assert first.shards_computed == 6
    _append(tree, "audit/report/multi_run.py", '\n\ndef _doc() -> None:\n    """Edited."""\n')
    _append(tree, "audit/cli/report.py", "\n# a comment\n")
    again = run_audit(folder, progress=False, report=False)
    assert again.shards_computed == 0 and again.shards_reused == 6
    _append(tree, "audit/training/simulate.py", '\n"""A docstring edit."""\n')
    with pytest.raises(ValueError, match=r"harness code.*--fresh"):
        run_audit(folder, progress=False, report=False)


def test_the_manifest_names_the_library_versions(
    tiny_audit: str, run_folder: RunFolder
) -> None:
    """Issue 32, done when: a tiny audit's shards/manifest.json names the torch version it ran
    on (and numpy's, scipy's, numba's, opacus's, dp-accounting's; "absent" when not installed)."""
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, report=False)
    manifest = (folder / SHARDS_DIR / MANIFEST).read_text()
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "absent"
    assert f'"torch":"{torch}"' in manifest.replace(" ", "").replace('\\"', '"')
    libraries = stored_fingerprint(next((folder / SHARDS_DIR).glob("*.npz")))["libraries"]
    assert set(libraries) == set(fingerprint.LIBRARIES) and libraries["torch"] == torch
    assert libraries["numpy"] == np.__version__


def test_a_library_version_change_is_named_and_an_older_run_still_rebuilds(
    tiny_audit: str, run_folder: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume across a library upgrade is refused naming it, as a spec change is; a committed
    run (scores, no shards) computed by another library version, or by a version that recorded
    no library versions, still rebuilds its report (§15.5), saying what changed."""
    folder = run_folder(tiny_audit)
    run_audit(folder, progress=False, plots=False)
    upgraded = {**fingerprint.library_versions(), "torch": "99.0"}
    monkeypatch.setattr(fingerprint, "library_versions", lambda: upgraded)
    with pytest.raises(ValueError, match=r"library torch .* -> 99\.0.*--fresh"):
        run_audit(folder, progress=False, report=False)
    shutil.rmtree(folder / SHARDS_DIR)
    result = write_report(folder, plots=False)
    assert result.scores_version is not None and "library torch" in result.scores_version.text
    current = fingerprint.shard_fingerprint(load_spec(folder / "audit.toml"))
    older = {k: v for k, v in current.items() if k != "libraries"}  # before issue 32
    assert fingerprint.changes(older, current) == [
        "library versions (not recorded by the version that computed them)"
    ]


def test_an_implementation_fingerprint_names_no_absolute_path() -> None:
    """summary.json carries the fingerprint: its implementation files are relative to the
    repository root (or bare file names), never a path of the machine that wrote it."""
    source = fingerprint.implementation_source("numpy-reference")
    assert source["files"] and all(not Path(f).is_absolute() for f in source["files"])
    assert all(not f.startswith(("/work", "/root", "/tmp")) for f in source["files"])


def test_an_older_versions_absolute_paths_are_not_written_to_the_summary() -> None:
    """A committed run's scores were stamped by an older version with the absolute paths of its
    machine (runs/opacus-shuffle: /work/wt-reliability/...): the rebuilt summary's
    ``scores_version`` states them relative, from the package folder on."""
    from audit.run.results import ScoresVersion

    stamp = {
        "package_version": "0.1.0", "harness_source": "0" * 64, "engine": {},
        "implementation": {"name": "opacus", "sha256": "1" * 64,
                           "files": ["/work/wt-reliability/audit/implementations/opacus.py"]},
    }
    text = json.dumps(ScoresVersion.of(stamp, ["harness code"]).to_json())
    assert "audit/implementations/opacus.py" in text and "/work" not in text
    assert fingerprint.portable_path(ROOT / "audit" / "plugins" / "opacus.py") == (
        "audit/plugins/opacus.py"
    )


def test_committed_summaries_carry_no_absolute_path() -> None:
    """Issue 32 item 5: no summary.json or run.json under runs/ or examples/ names a path of the
    machine that wrote it."""
    import re

    pattern = re.compile(r'"(/work|/root|/tmp|/home)/')
    found = [
        path.relative_to(ROOT).as_posix()
        for folder in ("runs", "examples")
        for name in ("summary.json", "run.json")
        for path in (ROOT / folder).rglob(name)
        if pattern.search(path.read_text())
    ]
    assert not found, found
