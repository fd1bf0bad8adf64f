"""The multi-run pre-flight (issue 42 item 6; docs/design/multi-run-diagnostics.md §16.6): ``audit
run`` on a script implementation replays the script once per training key and checks its
dataset for the unit of privacy, writes ``preflight.json`` (fingerprinted, reused on a re-run,
recomputed when the script changes), and the summary turns a failed replay into a refuting
``replay`` finding of the key (its cells ``violated``, the sentence naming the cause) and a
dataset holding each person twice into the ``unit_of_privacy`` note with its k.

Tiny plug-in runs of tests/multi_run_scripts.py (MLP on breast_cancer, Poisson b = 5, n = 30,
2 epochs: 12 steps; 6 IN + 6 OUT trainings; the replay about 12 trainings more). Everything here
is exact or at the replay's level 1e-6 (fixed seeds): the replay of a correct training differs
from C / b only by float rounding, a missing noise is an exact zero, duplicated rows are exact
copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from audit.cli import main

SCRIPTS = Path(__file__).parent / "multi_run_scripts.py"


def _spec(audit_toml, implementation_spec, implementation: str, **more) -> str:
    keys = dict(
        implementation=implementation, samplers=["poisson"], attacks=["default"],
        trials_in=6, trials_out=6, shard_size=6, store="observations", claim=3.0, model="mlp",
        training={"n": 30, "batch_size": 5, "epochs": 2, "sigma": 1.5},
    )
    return audit_toml(implementation_spec, **{**keys, **more})


def _run(folder: Path, capsys, *flags: str) -> tuple[dict, str]:
    assert main(["run", str(folder), "--quiet", *flags]) == 0
    out = capsys.readouterr().out
    return json.loads((folder / "summary.json").read_text()), out


def _named(summary: dict, name: str) -> list[dict]:
    return [f for f in summary["findings"] if f["name"] == name]


def test_a_correct_script_passes_the_preflight_and_keeps_its_verdict(
        audit_toml, implementation_spec, run_folder, capsys):
    pytest.importorskip("torch")
    folder = run_folder(_spec(audit_toml, implementation_spec, f"{SCRIPTS}:train"))
    summary, out = _run(folder, capsys)
    replay, = _named(summary, "replay")
    unit, = _named(summary, "unit_of_privacy")
    assert replay["passed"] and replay["refutes"] and replay["training"] == "poisson-isolated"
    assert "sensitivity at most 1.0000 C" in replay["message"]
    assert unit["passed"] and "one row per person" in unit["message"]
    for cell in summary["cells"]:
        assert not cell["verdict_tests"]["findings"], cell["verdict_tests"]["reason"]
    assert "pre-flight (replay + unit of privacy" in out and "replay passed" in out
    record = json.loads((folder / "preflight.json").read_text())
    assert [k["training"] for k in record["keys"]] == ["poisson-isolated"]


def test_noise_missing_on_the_bias_violates_the_cells_naming_it(
        audit_toml, implementation_spec, run_folder, capsys):
    """The canary block is noised, so no canary-record finding sees it; the replay's noise
    probe does (an exact zero on 0.bias and 2.bias)."""
    pytest.importorskip("torch")
    folder = run_folder(_spec(audit_toml, implementation_spec, f"{SCRIPTS}:bias_no_noise"))
    summary, out = _run(folder, capsys)
    replay, = _named(summary, "replay")
    assert not replay["passed"] and replay["refutes"]
    assert "0.bias, 2.bias stepped without noise" in replay["message"]
    record_findings = [f for f in summary["findings"] if f["name"] != "replay"
                       and not f["passed"] and f["refutes"]]
    assert not record_findings  # the canary block alone shows nothing
    for cell in summary["cells"]:
        tests = cell["verdict_tests"]
        assert cell["verdict"] == "violated" and tests["findings"]
        assert "replay: parameters 0.bias, 2.bias stepped without noise" in tests["reason"]
    report = (folder / "report.md").read_text()
    assert "**VIOLATED: replay**: parameters 0.bias, 2.bias stepped without noise" in report
    assert "violated** by the multi-run findings (replay" in report
    assert "VIOLATED: replay: parameters 0.bias" in out
    assert "refuted by the findings replay" in out


def test_each_person_stored_twice_is_the_unit_of_privacy_note_with_k(
        audit_toml, implementation_spec, run_folder, capsys):
    """The script's dataset (seen at canaries.wrap) holds each row twice: k = 2 and the
    person's epsilon (Poisson mixture, group of 2); a note: the row-level claim stands."""
    pytest.importorskip("torch")
    folder = run_folder(_spec(audit_toml, implementation_spec, f"{SCRIPTS}:rows_twice"))
    summary, out = _run(folder, capsys)
    unit, = _named(summary, "unit_of_privacy")
    assert not unit["passed"] and not unit["refutes"]
    assert "k = 2 rows" in unit["message"] and "a person with 2 rows has epsilon" in unit["message"]
    replay, = _named(summary, "replay")
    assert replay["passed"]
    for cell in summary["cells"]:
        assert "unit_of_privacy" not in (cell["verdict_tests"]["reason"] or "")
    assert "note: unit_of_privacy: each example appears to be stored as k = 2 rows" in out


def test_the_record_is_reused_and_recomputed_when_the_script_changes(
        audit_toml, implementation_spec, run_folder, tmp_path, monkeypatch):
    """No training: run_preflight alone. A second call reuses the stored key; a changed script
    (its source hash in the fingerprint) recomputes it, and the summary never reads a stale
    record; ``replay=False`` records the skip and gives no finding."""
    pytest.importorskip("torch")
    import audit.deployed.multi_run_preflight as preflight
    from audit.run.preflight import preflight_findings, read_record
    from audit.run.spec import load_spec

    script = tmp_path / "user_script.py"
    shutil.copy(SCRIPTS, script)
    folder = run_folder(_spec(audit_toml, implementation_spec, f"{script}:bias_no_noise"))
    calls: list[str] = []
    original = preflight.preflight_key

    def counted(spec, key, options=None):
        calls.append(key.name)
        return original(spec, key, options)

    monkeypatch.setattr(preflight, "preflight_key", counted)
    first = preflight.run_preflight(folder)
    assert first.computed == ("poisson-isolated",) and calls == ["poisson-isolated"]
    again = preflight.run_preflight(folder)
    assert again.reused == ("poisson-isolated",) and not again.computed and len(calls) == 1
    assert again.record == first.record  # read back equal: the typed record round-trips
    spec = load_spec(folder)
    found = preflight_findings(spec, folder)["poisson-isolated"]
    assert [f.name for f in found] == ["replay", "unit_of_privacy"] and not found[0].passed

    script.write_text(script.read_text() + "\n# changed\n")
    assert preflight_findings(load_spec(folder), folder) == {}  # stale: never used
    changed = preflight.run_preflight(folder)
    assert changed.computed == ("poisson-isolated",) and len(calls) == 2
    assert any("source" in reason for reason in changed.stale), changed.stale

    skipped = preflight.run_preflight(folder, replay=False)
    assert skipped.computed and not skipped.record.options.replay
    stored = read_record(folder)
    assert stored is not None and stored.keys[0].findings == ()
    assert preflight_findings(load_spec(folder), folder) == {}
    assert "skipped (--no-replay)" in skipped.lines()[0]


def test_a_second_optimizer_on_the_head_is_named_and_a_missed_slot_is_replayed_again(
        audit_toml, implementation_spec, run_folder):
    """The head stepped by a plain SGD on the batch's loss after the private step: the replay's
    data probe (the slot's rows changed in the dataset) names 2.weight and 2.bias. With one slot
    (q = 1/6, S = 12) the slot is in no batch of a replay with probability (5/6)^12 = 11%: the
    pre-flight then replays with the next seed (audit seed 2 here needs two)."""
    pytest.importorskip("torch")
    from dataclasses import replace

    from audit.deployed.multi_run_preflight import preflight_key
    from audit.run.spec import load_spec

    folder = run_folder(_spec(audit_toml, implementation_spec, f"{SCRIPTS}:second_optimizer"))
    base = load_spec(folder)
    replays = []
    for seed in range(4):
        spec = replace(base, experiment=replace(base.experiment, seed=seed))
        done = preflight_key(spec, spec.training_keys()[0])
        replay = done.findings[0]
        assert done.replay == "failed" and not replay.passed and replay.refutes
        assert replay.message.startswith("parameters 2.weight, 2.bias stepped without "
                                         "clipping/noise"), replay.message
        replays.append(done.replays)
    assert replays == [1, 1, 2, 1]


def test_an_interrupted_preflight_keeps_its_finished_keys(
        audit_toml, implementation_spec, run_folder, monkeypatch):
    """The record is written after each key: Ctrl-C in the second key keeps the first, and the
    next call computes the second only."""
    pytest.importorskip("torch")
    import audit.deployed.multi_run_preflight as preflight
    from audit.run.preflight import read_record

    folder = run_folder(_spec(audit_toml, implementation_spec, f"{SCRIPTS}:train",
                              threat_models=["isolated", "adversarial"]))
    original, calls = preflight.preflight_key, []

    def interrupted(spec, key, options=None):
        calls.append(key.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(spec, key, options)

    monkeypatch.setattr(preflight, "preflight_key", interrupted)
    with pytest.raises(KeyboardInterrupt):
        preflight.run_preflight(folder)
    stored = read_record(folder)
    assert stored is not None and [k.training for k in stored.keys] == ["poisson-isolated"]
    resumed = preflight.run_preflight(folder)
    assert resumed.reused == ("poisson-isolated",)
    assert resumed.computed == ("poisson-adversarial",)
    assert [k.training for k in resumed.record.keys] == ["poisson-isolated", "poisson-adversarial"]
