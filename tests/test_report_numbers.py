"""audit.report.multi_run's printed numbers: bounds rounded toward their safe side, confidence
stated per statement, plot legends that say what the boxes are, sentences that do not over-claim.

Fixed seeds throughout; tolerances derived in comments.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from audit.run.planning import curve_scores
from audit.stats.binary import epsilon_lower_bound, verdict
from audit.theory.curve import TradeOffCurve

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
    entry = {
        "alpha": 0.05,
        "delta": 1e-5,
        "sampler": "poisson",
        "threat_model": "isolated",
        "attack": "max",
        "epsilon_lb": 0.5,
        "claimed_epsilon": 1.0,
        "verdict": "consistent",
        "evidence": {"fpr_hi": 0.1, "fnr_hi": 0.5},
    }
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

    entry = {
        "alpha": 0.05,
        "delta": 1e-5,
        "sampler": "poisson",
        "threat_model": "isolated",
        "attack": "lr",
        "trials_in": 1000,
        "trials_out": 1000,
        "epsilon_lb": 2.8572,
        "claim_description": "an explicit",
        "claimed_epsilon": 1.0,
        "verdict": "violated",
        "evidence": {"fpr_hi": 0.0036821, "fnr_hi": 0.41234, "f_of_fpr_hi": 0.98768},
        "theory_lower_epsilon": 2.5678,
        "theory_upper_epsilon": 3.1234,
    }
    text = cell_sentence(entry)
    assert "ε ≥ 2.85 " in text
    assert "FPR ≤ 0.00369 " in text and "FNR is ≤ 0.413," in text and "below the 0.987 " in text
    assert "at least 2.56 " in text and "at most 3.13 " in text


def test_markdown_says_confidence_is_per_statement() -> None:
    """Each cell's bound and verdict hold at 1 - alpha alone; over k cells up to k alpha may
    fail."""
    from audit.report.multi_run import render_markdown

    summary = {
        "name": "m", "description": "", "mode": "simulate", "alpha": 0.05, "delta": 1e-5, "seed": 0,
        "run": None, "cells": [],
        "spec": {"training": {"n": 10, "batch_size": 1, "epochs": 1, "sigma": 1.0}, "canary": "c",
                 "observation": "all_iterates", "threshold": "split"},
    }
    text = render_markdown(summary)
    assert "95% confidence holds for each statement alone" in text


def test_consistent_verdict_beside_a_refuting_eps_bound_is_explained(explicit_claim) -> None:
    """eps_lb and the verdict choose their thresholds by different objectives (log ratio vs
    absolute margin), so eps_lb can exceed the claimed eps while the verdict is consistent
    (split, mu = 1.5 GDP scores, claim (3, 1e-5)-DP: 4 of 100 audits; repetition 24 is one).
    The sentence must then not say that no sound threshold refutes the claim."""
    from audit.report.multi_run import cell_sentence

    curve = TradeOffCurve.from_gdp(
        1.5, sampler="deterministic", threat_model="isolated", kind="exact"
    )
    scores_in, scores_out = curve_scores(curve, 20_000, np.random.default_rng([9, 24]))
    bound = epsilon_lower_bound(scores_in, scores_out, delta=1e-5, seed=24)
    decision = verdict(scores_in, scores_out, explicit_claim(3.0), 0.05, seed=24)
    assert bound.epsilon_lb > 3.0 and not decision.violated
    entry = {
        "alpha": 0.05,
        "delta": 1e-5,
        "sampler": "deterministic",
        "threat_model": "isolated",
        "attack": "lr",
        "trials_in": 20_000,
        "trials_out": 20_000,
        "epsilon_lb": bound.epsilon_lb,
        "claim_description": "an explicit (3, 1e-05)-DP",
        "claimed_epsilon": 3.0,
        "verdict": "consistent",
        "evidence": decision.to_dict(),
        "theory_lower_epsilon": None,
        "theory_upper_epsilon": None,
    }
    text = cell_sentence(entry)
    assert "no soundly chosen threshold refutes" not in text
    assert "yet ε_lb exceeds the claimed ε" in text and "90%" in text
    entry["epsilon_lb"] = 2.5
    assert "yet ε_lb exceeds" not in cell_sentence(entry)
