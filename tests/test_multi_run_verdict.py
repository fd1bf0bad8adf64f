"""A refuting finding of a multi-run audit flips its cells' verdict to ``violated`` in
summary.json, cells.csv and report.md, for the Python API and ``audit run``
(audit/run/summary.py ``with_findings``; docs/design/multi-run-diagnostics.md), and a
score_family cell's report sentence says how its statistic was chosen. A tiny plug-in run of
tests/multi_run_scripts.py (12 trainings of 12 steps, about 5 s each)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from audit.cli import main

SCRIPTS = Path(__file__).parent / "multi_run_scripts.py"


def _spec(audit_toml, implementation_spec, name: str, **more) -> str:
    keys = dict(
        implementation=f"{SCRIPTS}:{name}", samplers=["poisson"], attacks=["default"],
        trials_in=6, trials_out=6, shard_size=3, store="observations", claim=3.0, model="mlp",
        training={"n": 30, "batch_size": 5, "epochs": 2, "sigma": 1.5},
    )
    return audit_toml(implementation_spec, **{**keys, **more})


def _cells_csv(folder: Path) -> list[dict[str, str]]:
    with (folder / "cells.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_refuting_finding_violates_the_cell_through_the_python_api(
        audit_toml, implementation_spec, run_folder):
    pytest.importorskip("torch")
    from audit.report import run_audit

    folder = run_folder(_spec(audit_toml, implementation_spec, "noise_recreated"))
    result = run_audit(folder, progress=False, plots=False)
    summary = json.loads((folder / "summary.json").read_text())
    failed = {f["name"] for f in summary["findings"] if not f["passed"]}
    assert "fresh_noise_steps" in failed  # the noise re-created at every step
    keys = {c.cell.training.name for c in result.cells}
    assert {f["training"] for f in summary["findings"]} == keys
    assert list(summary).index("findings") < list(summary).index("cells")
    for cell, record in zip(summary["cells"], result.cells, strict=True):
        tests = cell["verdict_tests"]
        # the scores alone do not refute the claim (12 trainings): the findings do
        assert not tests["curve"] and not tests["epsilon"] and cell["epsilon_lb"] < 3.0
        assert tests["findings"] and cell["verdict"] == "violated" == record.verdict
        assert "fresh_noise_steps" in tests["reason"]
        assert "Bonferroni over the three" in tests["level"]
        # the findings accuse at 1e-3 family-wise, not the bound's alpha (findings_level)
        assert record.verdict_tests.findings_alpha == pytest.approx(1e-3)
    assert [row["verdict"] for row in _cells_csv(folder)] == ["violated"] * len(summary["cells"])
    assert {row["verdict_tests.findings"] for row in _cells_csv(folder)} == {"True"}
    report = (folder / "report.md").read_text()
    first = report.index("VIOLATED: fresh_noise_steps")
    assert first < report.index("| sampler |")  # the findings before the table
    assert "violated** by the multi-run findings" in report


def test_a_correct_script_keeps_its_verdict_and_states_the_score_family_choice(
        audit_toml, implementation_spec, run_folder):
    """The spec's ``score_family = true`` adds the score_family cell; its choice is stated."""
    pytest.importorskip("torch")
    from audit.report import run_audit
    from audit.run.scoring import read_selection

    # 12 a side: the score family's confirmation half (6) holds the planned threshold's pilot
    folder = run_folder(_spec(audit_toml, implementation_spec, "train", trials_in=12,
                              trials_out=12, shard_size=6, score_family=True))
    result = run_audit(folder, progress=False, plots=False)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["findings"]  # computed, none refuting (a fixed seed)
    assert not [f for f in summary["findings"] if not f["passed"] and f["refutes"]]
    for cell in summary["cells"]:
        tests = cell["verdict_tests"]
        assert not tests["findings"] and tests["reason"] is None
        assert cell["verdict"] == ("violated" if tests["curve"] or tests["epsilon"]
                                   else "consistent")
    family = [c for c in result.cells if c.cell.attack == "score_family"]
    assert family, "the score family adds a score_family cell"
    report = (folder / "report.md").read_text()
    for cell in family:
        selection = read_selection(folder, cell.cell)
        assert selection is not None and selection.sentence() in report
    assert report.index("Findings from the trainings' canary records") < report.index("| sampler")


def test_audit_run_prints_the_violated_verdict_from_the_summary(
        audit_toml, implementation_spec, run_folder, capsys, monkeypatch):
    """``audit run`` reads the findings from the results (nothing recomputed) and prints the
    failed ones before the epsilon, the cell ``-> violated: refuted by ... the findings ...``."""
    pytest.importorskip("torch")
    import audit.run.multi_run_findings as findings
    import audit.run.summary as summary

    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return findings.key_findings(*args, **kwargs)

    monkeypatch.setattr(summary, "key_findings", counted)
    folder = run_folder(_spec(audit_toml, implementation_spec, "noise_recreated"))
    assert main(["run", str(folder), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    violation = next(i for i, line in enumerate(lines) if "VIOLATED: fresh_noise_steps" in line)
    epsilon = next(i for i, line in enumerate(lines) if "eps_lb" in line)
    # the verdict line says why (issue 41 item 7): the refuting finding
    assert violation < epsilon and "-> violated: refuted by " in lines[epsilon]
    assert "the findings fresh_noise_steps" in lines[epsilon]
    assert len(calls) == 1  # once, by the summary
    stored = json.loads((folder / "findings.json").read_text())
    summary_findings = json.loads((folder / "summary.json").read_text())["findings"]
    assert stored == summary_findings
