"""``audit scores FILE`` and ``audit.audit_scores``: given attack scores in, a summary.json cell out
(issue 34 item 4).

The soundness of the numbers is the statistics' (tests/test_stats_coverage.py,
tests/test_proof_coverage.py cover epsilon_lower_bound and the planned joint test); here: the
command prints exactly what :func:`audit.stats.binary.epsilon_lower_bound` computes on the same
scores with the same threshold (and, for ``planned``, the same pilot), a CSV with a label column
gives what the .npz gives, missing columns are refused naming what the file has, and ``--out``
writes its files. Also the CLI's logging configuration (issue 34 item 5).
"""

from __future__ import annotations

import csv
import json
import logging

import numpy as np
import pandas  # statsmodels depends on it
import pytest

import audit
from audit.cli import configure_logging, main
from audit.report.scores_input import read_scores
from audit.run.results import SCHEMA_VERSION
from audit.stats.binary import epsilon_lower_bound
from audit.stats.thresholds import plan_threshold, take_pilot

N = 1500  # per side: a planned bound in well under a second


@pytest.fixture(scope="module")
def scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2024)
    return rng.normal(1.5, 1.0, N), rng.normal(0.0, 1.0, N)


@pytest.fixture(scope="module")
def npz(tmp_path_factory, scores):
    path = tmp_path_factory.mktemp("scores") / "s.npz"
    np.savez(path, scores_in=scores[0], scores_out=scores[1])
    return path


def _csv(path, scores, *, score="score", label="label", values=("1", "0")):
    """IN and OUT rows interleaved (each side keeps its order, as the .npz has it)."""
    rows = []
    for s_in, s_out in zip(*scores, strict=True):
        rows += [(repr(float(s_in)), values[0]), (repr(float(s_out)), values[1])]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([score, "id", label])
        for k, (s, lab) in enumerate(rows):
            writer.writerow([s, k, lab])
    return path


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _planned_reference(s_in, s_out, delta, alpha=0.05, seed=0) -> float:
    """epsilon_lower_bound with threshold="planned" on the test trials, planned on the pilot
    that audit scores takes (take_pilot, seed 0)."""
    taken = take_pilot(s_in, s_out, seed)
    plan = plan_threshold(taken.curve, taken.test_in.size, taken.test_out.size, alpha=alpha,
                          delta=delta, source="pilot", curve_name=taken.name, pilot=taken.sizes)
    return epsilon_lower_bound(taken.test_in, taken.test_out, delta=delta, threshold="planned",
                               plan=plan).epsilon_lb


def test_npz_json_is_epsilon_lower_bound_on_the_same_scores(capsys, npz, scores):
    cell = _json(capsys, ["scores", str(npz), "--delta", "1e-5", "--threshold", "planned",
                          "--json"])
    expected = _planned_reference(*scores, 1e-5)
    assert cell["epsilon_lb"] == expected  # the same computation: bit-identical
    assert expected > 0.5  # these scores refute small eps: the comparison is not 0 == 0
    assert cell["planned"]["source"] == "pilot"
    assert cell["planned"]["epsilon_lb"]["plan"]["pilot_in"] == round(0.1 * N)
    assert cell["verdict"] is None and cell["claim"] is None  # no claim, no verdict
    assert cell["trials_in"] == cell["trials_out"] == N
    for key in ("epsilon_optimistic", "confidence", "bound", "roc", "estimates", "delta", "alpha"):
        assert key in cell
    # epsilon_lower_bound's own default (planned, no plan=) takes the same pilot
    assert epsilon_lower_bound(*scores, delta=1e-5).epsilon_lb == cell["epsilon_lb"]


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_other_thresholds_are_epsilon_lower_bound(capsys, npz, scores, threshold):
    cell = _json(capsys, ["scores", str(npz), "--delta", "1e-5", "--threshold", threshold,
                          "--alpha", "0.1", "--json"])
    expected = epsilon_lower_bound(*scores, delta=1e-5, threshold=threshold, confidence=0.9)
    assert cell["epsilon_lb"] == expected.epsilon_lb
    assert cell["alpha"] == 0.1 and "planned" not in cell


def test_csv_with_a_label_column_gives_what_the_npz_gives(capsys, tmp_path, npz, scores):
    from_npz = _json(capsys, ["scores", str(npz), "--delta", "1e-5", "--claim", "1", "--json"])
    table = _csv(tmp_path / "s.csv", scores, label="is_member", values=("true", "False"))
    from_csv = _json(capsys, ["scores", str(table), "--delta", "1e-5", "--claim", "1", "--json"])
    for key in ("epsilon_lb", "epsilon_optimistic", "verdict", "verdict_tests", "bound",
                "evidence", "planned", "roc"):
        assert from_csv.get(key) == from_npz.get(key), key
    assert from_npz["verdict"] == "violated"  # eps 1 is refuted by scores that show eps > 1
    named = _csv(tmp_path / "t.csv", scores, score="lira", label="in_training")
    custom = _json(capsys, ["scores", str(named), "--delta", "1e-5", "--claim", "1",
                            "--score-column", "lira", "--label-column", "IN_TRAINING", "--json"])
    assert custom["epsilon_lb"] == from_npz["epsilon_lb"]


def test_python_call_is_the_command(capsys, npz, scores):
    cell = _json(capsys, ["scores", str(npz), "--delta", "1e-5", "--claim", "50", "--json"])
    result = audit.audit_scores(*scores, delta=1e-5, confidence=0.95, claim=50.0)
    assert result.epsilon_lb == cell["epsilon_lb"]
    assert result.verdict == cell["verdict"] == "consistent"
    assert result.claimed_epsilon == pytest.approx(50.0)
    assert json.loads(json.dumps(result.to_json()))["epsilon_lb"] == cell["epsilon_lb"]
    quick = audit.audit_scores(*scores, delta=1e-5, claim=50.0, estimates=False)
    assert quick.epsilon_lb == result.epsilon_lb and "estimates" not in quick.to_json()


def test_missing_columns_are_named_with_what_the_file_has(capsys, tmp_path, scores):
    table = _csv(tmp_path / "s.csv", scores, label="group")
    assert main(["scores", str(table), "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert "no label column" in err and "'group'" in err and "'score'" in err
    assert "--label-column" in err and "Traceback" not in err
    assert main(["scores", str(table), "--delta", "1e-5", "--score-column", "scroe"]) == 2
    err = capsys.readouterr().err
    assert "no column 'scroe'" in err and "did you mean 'score'" in err
    bad = tmp_path / "bad.npz"
    np.savez(bad, member_scores=scores[0])
    assert main(["scores", str(bad), "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert "'member_scores'" in err and "scores_in and scores_out" in err
    tiny = tmp_path / "tiny.npz"
    np.savez(tiny, scores_in=[1.0, 2.0, 3.0], scores_out=[0.0, 0.5, 1.0])
    # too few for a pilot and a test
    assert main(["scores", str(tiny), "--delta", "1e-5", "--threshold", "planned"]) == 2
    err = capsys.readouterr().err
    assert "too few for a pilot" in err and "'split'" in err
    labels = _csv(tmp_path / "l.csv", scores, values=("1", "maybe"))
    with pytest.raises(ValueError, match="line 3: label 'maybe' in 'label'"):
        read_scores(labels)


def test_out_writes_the_report_the_plot_and_the_json(capsys, tmp_path, npz):
    out = tmp_path / "report"
    assert main(["scores", str(npz), "--delta", "1e-5", "--claim", "gdp:1", "--out",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert "trial counts alone" in printed  # the default: planned_ranks
    assert "eps lower bound (sound, 95% confidence" in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "cells.csv", "report.md", "result.json", "tradeoff.png"]
    assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "trial counts alone" in report and "![trade-off](tradeoff.png)" in report
    cell = json.loads((out / "result.json").read_text())
    assert cell["claim"] == "gdp:1" and cell["verdict"] in ("violated", "consistent")
    assert cell["schema_version"] == SCHEMA_VERSION
    table = pandas.read_csv(out / "cells.csv")
    assert len(table) == 1 and table["schema_version"][0] == SCHEMA_VERSION
    # the flat row is the JSON's scalars: eps_lb read back to the same float (repr round trip)
    assert table["epsilon_lb"][0] == cell["epsilon_lb"] and table["verdict"][0] == cell["verdict"]
    assert main(["scores", str(npz), "--delta", "1e-5", "--out",
                 str(tmp_path / "no" / "such")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture
def audit_logger():
    """The ``audit`` logger, its level and propagation restored after the test."""
    logger = logging.getLogger("audit")
    before = (logger.level, logger.propagate, list(logger.handlers))
    yield logger
    logger.setLevel(before[0])
    logger.propagate = before[1]
    for handler in logger.handlers[:]:
        if handler not in before[2]:
            logger.removeHandler(handler)


def test_logging_prints_one_line_per_message_and_obeys_quiet(capsys, audit_logger):
    configure_logging()
    log = logging.getLogger("audit.run.store")
    log.info("scores/x.npz: damaged; moved to damaged/x")
    log.debug("not shown at INFO")
    assert capsys.readouterr().err == "audit: scores/x.npz: damaged; moved to damaged/x\n"
    configure_logging(quiet=True)
    log.info("a note")
    log.warning("audit run: a warning")
    assert capsys.readouterr().err == "audit run: a warning\n"
    configure_logging(verbose=True)
    log.debug("shown")
    try:
        raise OSError("disk full")
    except OSError:
        log.exception("could not write")
    assert capsys.readouterr().err == "audit: shown\naudit: could not write (OSError: disk full)\n"
    stderr = [h for h in audit_logger.handlers if type(h).__name__ == "_Stderr"]
    assert len(stderr) == 1  # replaced, never stacked


def test_main_configures_logging_for_its_run_only(capsys, npz, audit_logger, monkeypatch):
    import audit.cli.scores as command

    def noisy(args):
        logging.getLogger("audit.report.scores_audit").info("a note")
        logging.getLogger("audit.report.scores_audit").warning("a warning")
        return 0

    monkeypatch.setattr(command, "run", noisy)
    assert main(["scores", str(npz), "--delta", "1e-5"]) == 0
    assert capsys.readouterr().err == "audit: a note\naudit: a warning\n"
    assert main(["--quiet", "scores", str(npz), "--delta", "1e-5"]) == 0
    assert capsys.readouterr().err == "audit: a warning\n"
    assert not [h for h in audit_logger.handlers if type(h).__name__ == "_Stderr"]
    assert audit_logger.propagate  # as it was: a program's own logging sees the messages again
