"""audit.report.multi_run's printed numbers: bounds rounded toward their safe side, confidence
stated per statement, plot legends that say what the boxes are, sentences that do not over-claim.

Fixed seeds throughout; tolerances derived in comments.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from audit.run.planning import curve_scores
from audit.run.results import CellResult, Confidence, VerdictTests
from audit.run.spec import Cell
from audit.stats.binary import Verdict, epsilon_lower_bound, verdict
from audit.theory.curve import TradeOffCurve


def _result(*, evidence: dict | Verdict, **fields: object) -> CellResult:
    """A cell's record with the ``fields`` given (the rest: a 1000/1000-trial poisson cell)."""
    if isinstance(evidence, dict):  # the verdict's numbers the test names, the rest any
        base = {
            "violated": False,
            "threshold": 0.0,
            "strategy": "split",
            "alpha": 0.05,
            "false_positives": 0,
            "false_negatives": 0,
            "n_eval_in": 500,
            "n_eval_out": 500,
            "fpr_hi": 0.0,
            "fnr_hi": 0.0,
            "f_of_fpr_hi": 0.0,
            "alpha_per_rate": 0.025,
        }
        evidence = Verdict(**{**base, **evidence})
    rng = np.random.default_rng(0)
    bound = epsilon_lower_bound(rng.normal(1.0, 1.0, 200), rng.normal(0.0, 1.0, 200), delta=1e-5,
        threshold="split")
    record = {
        "cell": Cell("poisson", "isolated", "lr"),
        "observation": "all_iterates",
        "trials_in": 1000,
        "trials_out": 1000,
        "delta": 1e-5,
        "alpha": 0.05,
        "confidence": Confidence(0.95, "cell", 0.05, 1),
        "epsilon_lb": bound.epsilon_lb,
        "epsilon_optimistic": bound.epsilon_optimistic,
        "claim": "1",
        "claim_description": "an explicit",
        "claimed_epsilon": 1.0,
        "theory_upper_epsilon": None,
        "theory_lower_epsilon": None,
        "theory_upper_method": None,
        "theory_lower_method": None,
        "violated": evidence.violated,
        "verdict_tests": VerdictTests(curve=evidence.violated, epsilon=False),
        "evidence": evidence,
        "bound": bound,
        "roc": {},
        "plot": "t.png",
    }
    return CellResult(**{**record, **fields})

# ----------------------------------------------------------------------------- plot labels


def test_plot_box_label_says_per_rate(
    monkeypatch: pytest.MonkeyPatch, tmp_path, explicit_claim
) -> None:
    """Boxes are CP at alpha/2 on each side of each rate: 1 - alpha per rate, >= 1 - 2 alpha
    jointly; the legend must not call them (1 - alpha) boxes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from audit.report.multi_run import plot_tradeoff

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), real_close(fig)))
    rng = np.random.default_rng(4)
    scores_in, scores_out = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    claim_curve = explicit_claim(1.0)
    entry = _result(
        cell=Cell("poisson", "isolated", "max"),
        epsilon_lb=0.5,
        evidence={"fpr_hi": 0.1, "fnr_hi": 0.5},
    )
    claim = types.SimpleNamespace(name="1", curve=claim_curve, epsilon=1.0)
    bounds = types.SimpleNamespace(upper=claim_curve)
    plot_tradeoff(tmp_path / "t.png", entry, scores_in, scores_out, bounds, claim)
    labels = [
        text.get_text() for fig in figures for legend in fig.legends for text in legend.get_texts()
    ]
    boxes = [label for label in labels if "Clopper-Pearson" in label]
    assert boxes and all("per rate" in label for label in boxes), labels


# ----------------------------------------------------------------------------- printed digits


def test_printed_bounds_round_toward_their_safe_side() -> None:
    """A lower bound printed to 3 digits must not exceed the computed one (2.8572 -> 2.85,
    not 2.86), an upper bound not fall below it (0.0036821 -> 0.00369, not 0.00368)."""
    from audit.report.multi_run import format_bound

    for value in (
        2.8572005943137193,
        3.5876287148191324,
        0.003682083896865672,
        1234.6,
        9.9996,
        1e-7,
        2.85,
    ):
        assert float(format_bound(value, "lower")) <= value
        assert float(format_bound(value, "upper")) >= value
        assert float(format_bound(value, "lower", digits=5)) <= value
    assert format_bound(2.8572005943137193, "lower") == "2.85"
    assert format_bound(0.003682083896865672, "upper") == "0.00369"
    assert format_bound(None, "lower") == "n/a"
    assert format_bound("inf", "upper") == "∞"
    with pytest.raises(ValueError, match="side"):
        format_bound(1.0, "nearest")


def test_report_sentence_uses_directed_rounding() -> None:
    """cell_sentence: eps_lb down, FPR_hi/FNR_hi up, f(FPR_hi) down, theory lower down/upper up."""
    from audit.report.multi_run import cell_sentence

    entry = _result(
        epsilon_lb=2.8572,
        evidence={"violated": True, "fpr_hi": 0.0036821, "fnr_hi": 0.41234, "f_of_fpr_hi": 0.98768},
        theory_lower_epsilon=2.5678,
        theory_upper_epsilon=3.1234,
    )
    text = cell_sentence(entry)
    assert "ε ≥ 2.85 " in text
    assert "FPR ≤ 0.00369 " in text and "FNR is ≤ 0.413," in text and "below the 0.987 " in text
    assert "at least 2.56 " in text and "at most 3.13 " in text


def test_markdown_says_confidence_is_per_statement() -> None:
    """Each cell's bound and verdict hold at 1 - alpha alone; over k cells up to k alpha may
    fail."""
    from audit.report.multi_run import render_markdown
    from audit.run.results import AuditResult
    from audit.run.spec import parse_spec

    spec = parse_spec(
        {
            "mode": "simulate",
            "samplers": ["poisson"],
            "trials_in": 10,
            "trials_out": 10,
            "training": {"n": 10, "batch_size": 1, "sigma": 1.0},
        },
        name="m",
    )
    result = AuditResult(spec, Confidence(0.95, "cell", 0.05, 1), {}, None, ())
    text = render_markdown(result)
    assert "95% confidence holds for each statement alone" in text


def test_eps_bound_above_the_claim_makes_the_cell_violated(explicit_claim) -> None:
    """eps_lb and the curve test choose their thresholds by different objectives (log ratio vs
    absolute margin), so eps_lb can exceed the claimed eps while the curve test does not refute
    the claim (split, mu = 1.5 GDP scores, claim (3, 1e-5)-DP: 4 of 100 audits; repetition 24 is
    one). The cell is then violated (issue 23: the verdict and eps_lb never contradict), by the
    epsilon test, and the sentence says so and states the level of the union (1 - 2 alpha)."""
    from audit.report.multi_run import cell_sentence
    from audit.run.summary import verdict_tests

    curve = TradeOffCurve.from_gdp(
        1.5, sampler="deterministic", threat_model="isolated", kind="exact"
    )
    scores_in, scores_out = curve_scores(curve, 20_000, np.random.default_rng([9, 24]))
    bound = epsilon_lower_bound(scores_in, scores_out, delta=1e-5, seed=24, threshold="split")
    decision = verdict(scores_in, scores_out, explicit_claim(3.0), confidence=0.95, seed=24,
        threshold="split")
    assert bound.epsilon_lb > 3.0 and not decision.violated
    tests = verdict_tests(decision.violated, bound.epsilon_lb, 3.0)
    assert tests.epsilon and not tests.curve
    entry = _result(
        cell=Cell("deterministic", "isolated", "lr"),
        trials_in=20_000,
        trials_out=20_000,
        epsilon_lb=bound.epsilon_lb,
        claim_description="an explicit (3, 1e-05)-DP",
        claimed_epsilon=3.0,
        evidence=decision,
        violated=tests.violated,
        verdict_tests=tests,
    )
    assert entry.verdict == "violated" and entry.to_json()["verdict_tests"]["epsilon"] is True
    text = cell_sentence(entry)
    assert "**violated**: ε_lb exceeds the claimed ε" in text and "90%" in text
    assert not verdict_tests(False, 2.5, 3.0).epsilon
    assert not verdict_tests(False, float("inf"), None).epsilon
