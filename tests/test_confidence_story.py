"""One confidence story (issue 41 item 7): report.md's header and every cell's sentence state
the same level, for eps_lb and for a violated verdict (per cell, or for all cells at once with
the Bonferroni share spelled out), and the CLI's verdict line says why (which test refuted the
claim, or that none did). Small simulated runs (about 1-2 s each)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from audit.cli import main
from audit.report.formatting import bound_level, verdict_level
from audit.run.results import Confidence

MULTI_FAMILY = """
mode = "simulate"
seed = 5
samplers = ["deterministic", "dynamic_shuffle"]
attacks = ["max"]
trials_in = 400
trials_out = 400
claim = 0.5
confidence = "family"
[training]
sigma = 1.0
batch_size = 1
n = 10
"""

ONE_RUN = """
mode = "simulate"
audit = "one_run"
canaries = 500
seed = 3
samplers = ["deterministic"]
threat_models = ["isolated"]
attacks = ["default"]
claim = {claim}
[training]
n = 600
batch_size = 600
sigma = 0.5
"""

HEADER = re.compile(
    r"\*\*Confidence of every ε_lb below: (?P<bound>.+?); of every `violated` verdict: "
    r"(?P<verdict>.+?)\.\*\*"
)


def _run(folder: Path, spec: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    folder.mkdir()
    (folder / "audit.toml").write_text(spec)
    assert main(["run", str(folder), "--quiet"]) == 0
    return (folder / "report.md").read_text(), capsys.readouterr().out.splitlines()


def _story(report: str) -> tuple[str, str, list[str]]:
    """(eps_lb's level, a violated verdict's level) from the header; the cells' sentences."""
    header = HEADER.search(report)
    assert header is not None, report[:600]
    cells = [line for line in report.splitlines() if line.startswith("- **")]
    return header["bound"], header["verdict"], cells


def test_family_wise_levels_are_the_same_in_header_cells_and_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, out = _run(tmp_path / "family", MULTI_FAMILY, capsys)
    bound, verdict, cells = _story(report)
    # 95% for both cells at once, each cell's share spelled out: alpha / 2 = 0.025
    assert bound == bound_level(Confidence(0.95, "family", 0.025, 2))
    assert "95% for all 2 cells at once" in bound and "α / 2 = 0.025 per cell" in bound
    # a violated verdict is the union of 2 tests per cell at 0.025 each: 1 - 2 (0.05) = 90%
    assert verdict.startswith("90% for all 2 cells at once")
    assert len(cells) == 2
    for sentence in cells:
        assert f"({bound})" in sentence  # eps_lb at the header's level
        assert "**violated**" in sentence  # claim 0.5 against a 4.4-eps mechanism
        assert f"the verdict holds at {verdict}" in sentence
    assert f"so the verdicts hold at {verdict}" in report  # the closing paragraph agrees
    confidence = next(line for line in out if line.startswith("confidence:"))
    assert verdict in confidence
    lines = [line for line in out if "eps_lb" in line]
    assert len(lines) == 2
    for line in lines:  # the verdict line names the test that refuted the claim
        assert "-> violated: refuted by the " in line
        assert "ε_lb test: ε_lb = " in line or "curve test: at FPR ≤ " in line


@pytest.mark.parametrize(("claim", "violated"), [(0.2, True), (50.0, False)])
def test_per_cell_levels_of_a_one_run_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], claim: float, violated: bool
) -> None:
    report, out = _run(tmp_path / "one", ONE_RUN.format(claim=claim), capsys)
    bound, verdict, cells = _story(report)
    assert bound == "95% confidence per cell"
    assert verdict.startswith("90% confidence per cell")
    (sentence,) = cells
    assert f"({bound})" in sentence
    assert ("**violated**" in sentence) == violated
    assert (f"the verdict holds at {verdict}" in sentence) == violated
    (line,) = [line for line in out if "eps_lb" in line]
    if violated:  # eps 10 mechanism, claim 0.2: refuted, and the line says by which test
        assert "-> violated: refuted by the " in line
    else:
        assert "-> consistent: no test refutes the claim at 95% confidence per cell" in line


def test_verdict_level_is_the_bonferroni_union() -> None:
    """1 - 2 alpha per cell (curve test and eps_lb test), 1 - 2 alpha for all K cells at once
    when each cell's tests are at alpha / K, less the findings' alpha_f where they count."""
    assert verdict_level(Confidence(0.95, "cell", 0.05, 1)).startswith("90% confidence per cell")
    family = verdict_level(Confidence(0.95, "family", 0.0125, 4))
    assert family.startswith("90% for all 4 cells at once") and "α / 4 = 0.0125" in family
    with_findings = verdict_level(Confidence(0.95, "cell", 0.05, 1), findings_alpha=0.05)
    assert with_findings.startswith("85% confidence per cell")
    assert "the findings at α = 0.05 for the whole run" in with_findings


@pytest.mark.parametrize("path", ["plain.py", "bugs/accountant_epochs.py"])
def test_deployed_sentence_states_the_audits_verdict_and_why(path: str) -> None:
    """DeployedAudit.sentence() says the audit's verdict (findings included), not the scores'
    alone: the zoo's accountant composing epochs is refuted by ``steps_composed`` while its
    scores are consistent with the (too small) claim; the correct loop is consistent. One
    training each (about 1 s)."""
    import importlib.util
    import sys
    import warnings

    from audit.deployed import DiracCanaries, one_run_audit

    zoo = Path(__file__).resolve().parents[1] / "examples" / "bug_zoo"
    spec = importlib.util.spec_from_file_location(f"zoo_{Path(path).stem}", zoo / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    canaries = DiracCanaries(200, clip=module.CLIP, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audit = one_run_audit(canaries, module.train(canaries, 0), delta=1e-5)
    sentence = audit.sentence()
    assert ("**violated**" in sentence) == (audit.verdict == "violated")
    assert ("**consistent**" in sentence) == (audit.verdict == "consistent")
    if audit.verdict == "violated":  # the bug: named by the refuting finding, with the level
        refuting = [f.name for f in audit.failed if f.refutes]
        assert "steps_composed" in refuting
        assert f"the findings {', '.join(refuting)} refute the claimed mechanism" in sentence
        assert "the verdict holds at " in sentence and "the findings at α = " in sentence
    else:
        assert path == "plain.py"
