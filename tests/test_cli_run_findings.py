"""`audit run` prints the multi-run path's findings before the epsilon and writes findings.json
(audit/cli/run.py, docs/design/multi-run-diagnostics.md §16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main

SCRIPTS = Path(__file__).parent / "multi_run_scripts.py"


def _spec(audit_toml, implementation_spec, name: str) -> str:
    return audit_toml(
        implementation_spec, implementation=f"{SCRIPTS}:{name}", samplers=["poisson"],
        attacks=["default"], trials_in=6, trials_out=6, shard_size=3, store="observations",
        claim=3.0, model="mlp", training={"n": 30, "batch_size": 5, "epochs": 2, "sigma": 1.5},
    )


def test_audit_run_prints_a_failed_finding_first_and_writes_findings_json(
        audit_toml, implementation_spec, run_folder, capsys):
    pytest.importorskip("torch")
    folder = run_folder(_spec(audit_toml, implementation_spec, "noise_recreated"))
    assert main(["run", str(folder), "--quiet"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first_violation = next(
        i for i, line in enumerate(lines) if "VIOLATED: fresh_noise_steps" in line)
    first_epsilon = next(i for i, line in enumerate(lines) if "eps_lb" in line)
    assert first_violation < first_epsilon
    stored = json.loads((folder / "findings.json").read_text())
    assert any(f["name"] == "fresh_noise_steps" and not f["passed"] for f in stored)


def test_audit_run_of_the_engine_writes_no_findings(tiny_audit, run_folder, capsys):
    folder = run_folder(tiny_audit)
    assert main(["run", str(folder), "--quiet", "--no-report"]) == 0
    assert "findings:" not in capsys.readouterr().out
    assert not (Path(folder) / "findings.json").exists()
