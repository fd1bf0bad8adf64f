"""The summary's new keys (audit.run.proof_report): threshold = "planned" states its plan and its
source, whole-curve evidence and the labelled estimates sit beside the existing keys, and a
refusal is recorded as a message, never a number (docs/design.md §8.12 - §8.14)."""

from __future__ import annotations

import json

import numpy as np

from audit.run.proof_report import Estimates, PlannedStatements, Refusal
from audit.run.spec import Cell, parse_spec
from audit.run.summary import cell_result
from audit.stats.binary import epsilon_lower_bound

SPEC = {
    "mode": "simulate",
    "seed": 5,
    "samplers": ["deterministic"],
    "threat_models": ["isolated"],
    "trials_in": 400,
    "trials_out": 400,
    "claim": 0.5,
    "training": {"sigma": 1.0, "batch_size": 1, "n": 10},
}


def test_planned_is_the_default_and_plans_from_the_theory_for_the_default_attack() -> None:
    spec = parse_spec({**SPEC, "attacks": ["default"]})
    assert spec.claim.threshold == "planned"
    rng = np.random.default_rng(0)
    scores = (rng.normal(np.sqrt(10), 1.0, 400), rng.normal(0.0, 1.0, 400))  # mu = sqrt(T)/sigma
    result = cell_result(spec, Cell("deterministic", "isolated", "known_step"), *scores, {})
    assert isinstance(result.planned, PlannedStatements) and isinstance(result.estimates, Estimates)
    entry = result.to_json()
    planned = entry["planned"]
    assert planned["source"] == "theory" and planned["epsilon_lb"]["plan"]["pilot_in"] == 0
    assert "theory's lower curve" in planned["epsilon_lb"]["plan"]["description"]
    assert (
        entry["bound"]["strategy"] == "planned"
        and entry["epsilon_lb"] == planned["epsilon_lb"]["test"]["epsilon_lb"]
    )
    assert entry["verdict"] == "violated" and planned["verdict"]["test"]["p_value"] <= 0.05
    assert entry["curve_evidence"]["violated"] and entry["curve_evidence"]["label"].startswith(
        "sound"
    )
    estimates = entry["estimates"]
    assert all("estimate" in part["label"] for part in
               [estimates["bayesian_epsilon"], estimates["auroc"], *estimates["tpr_at_fpr"]])
    json.dumps(entry, allow_nan=False)  # strict JSON


def test_another_attack_plans_from_a_pilot_left_out_of_the_test() -> None:
    spec = parse_spec({**SPEC, "attacks": ["max"]})
    rng = np.random.default_rng(1)
    scores = (rng.normal(2.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    entry = cell_result(spec, Cell("deterministic", "isolated", "max"), *scores, {}).to_json()
    plan = entry["planned"]["epsilon_lb"]["plan"]
    assert entry["planned"]["source"] == "pilot" and (plan["pilot_in"], plan["pilot_out"]) == (
        40,
        40,
    )
    assert (plan["n_in"], plan["n_out"]) == (360, 360) and "left out of the test" in plan[
        "description"
    ]
    assert entry["bound"]["n_eval_in"] == 360


def test_existing_strategies_keep_their_numbers_and_refusals_are_messages() -> None:
    spec = parse_spec({**SPEC, "attacks": ["max"], "threshold": "split"})
    rng = np.random.default_rng(2)
    null = (rng.normal(0.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    result = cell_result(spec, Cell("deterministic", "isolated", "max"), *null, {})
    assert result.planned is None and isinstance(result.curve_evidence, Refusal)
    entry = result.to_json()
    assert "planned" not in entry
    assert (
        entry["epsilon_lb"]
        == epsilon_lower_bound(*null, delta=1e-5, confidence=0.95, threshold="split",
            seed=5).epsilon_lb
    )
    assert (
        set(entry["curve_evidence"]) == {"refused"}
        and "no evidence" in entry["curve_evidence"]["refused"]
    )
    assert set(entry["estimates"]["gdp_fit"]) == {"refused"}
