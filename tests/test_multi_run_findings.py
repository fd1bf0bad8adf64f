"""The multi-run path's findings and replay (docs/design/multi-run-diagnostics.md; issue 33
item 3): the canary record a script returns through the contract, the findings from a shard's
or a run's trainings (:mod:`audit.deployed.multi_run`), their level on simulated correct
trainings, and the replay of a script (:mod:`audit.deployed.replay_script`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from audit.deployed.multi_run import MULTI_RUN_FINDINGS, shard_findings, trial_findings
from audit.plugins.contract import (
    CanaryRecord,
    TrainingSetup,
    coerce_result,
    record_arrays,
    records_of,
)

TESTS = Path(__file__).resolve().parent
SCRIPTS = TESTS / "multi_run_scripts.py"


def setup(**changes) -> TrainingSetup:
    values = dict(sampler="poisson", sigma=1.5, clip=1.0, lr=0.5, batch_size=5, n=25, epochs=4,
                  dataset="breast_cancer", model="mlp")
    values.update(changes)
    return TrainingSetup(**values)


def simulate(rng, config: TrainingSetup, trials: int, *, sigma=None, reuse=False, shared=False,
             steps=None, q=None, adversarial=False):
    """Correct DP-SGD's records (module docstring of audit.deployed.multi_run), or a bug."""
    S = config.total_steps if steps is None else steps
    q = config.mechanism.sampling_probability if q is None else q
    sigma = config.sigma if sigma is None else sigma
    included = np.arange(trials) < trials // 2
    common = rng.normal(0, sigma, S)
    records = []
    for i in range(trials):
        slot = (rng.random(S) < q).astype(np.int64)
        rows = slot + rng.binomial(config.n - 1, q, S)
        noise = common.copy() if shared else rng.normal(0, sigma, S)
        if reuse:
            noise[:] = noise[0]
        y = slot * included[i] + noise - (rows - slot if adversarial else 0)
        records.append(CanaryRecord(y=y, slot_rows=slot, batch_rows=rows,
                                    noise_divisor=config.batch_size))
    return records, included


def failed(findings) -> set[str]:
    return {f.name for f in findings if not f.passed}


# ------------------------------------------------------------------ the contract's record


def test_record_travels_through_the_contract_and_old_results_are_unchanged():
    record = {"y": [0.5, -1.0, 2.0], "slot_rows": [0, 1, 0], "batch_rows": [4, 5, 6]}
    result = coerce_result({"final_params": np.zeros(2), "canary_coordinate": 0,
                            "canary_record": record})
    assert isinstance(result.canary_record, CanaryRecord)
    assert result.canary_record.steps == 3
    assert result.canary_record.in_batch.tolist() == [False, True, False]
    assert coerce_result({"final_params": np.zeros(2)}).canary_record is None
    with pytest.raises(ValueError, match="slot_rows has 2 entries"):
        CanaryRecord(y=[0.0, 1.0, 2.0], slot_rows=[0, 1], batch_rows=[1, 1, 1])
    with pytest.raises(ValueError, match="unknown keys \\['ys'\\]"):
        coerce_result({"final_params": np.zeros(2), "canary_record": {**record, "ys": 1}})
    with pytest.raises(ValueError, match="exceeds batch_rows"):
        CanaryRecord(y=[0.0], slot_rows=[2], batch_rows=[1])


def test_record_arrays_round_trip_and_refuse_ragged_steps():
    rng = np.random.default_rng(0)
    records, _ = simulate(rng, setup(), 4)
    arrays = record_arrays(records, "out")
    assert not any(k.endswith(("_in", "_out")) for k in arrays)  # the scoring ignores them
    back = records_of(arrays, "out")
    assert len(back) == 4 and records_of(arrays, "in") == []
    for a, b in zip(records, back, strict=True):
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.batch_rows, b.batch_rows)
        assert b.noise_divisor == 5.0
    short = CanaryRecord(y=[0.0], slot_rows=[0], batch_rows=[3])
    with pytest.raises(ValueError, match="different numbers of optimizer steps"):
        record_arrays([records[0], short], "in")


# ------------------------------------------------------------------ the findings, simulated


@pytest.mark.parametrize("adversarial", [False, True])
def test_findings_hold_their_family_wise_level_on_correct_trainings(adversarial):
    # 400 simulated audits of 30 trainings; Bonferroni over the tests gives P(any fails) <=
    # alpha = 0.1 per audit; the count is binomial, so a bound of alpha + 3 standard errors
    # (0.1 + 3 * 0.015) fails a correct implementation with probability < 0.2%
    rng, runs, alpha = np.random.default_rng(11), 400, 0.1
    config = setup(threat_model="adversarial" if adversarial else "isolated")
    bad = 0
    for _ in range(runs):
        records, included = simulate(rng, config, 30, adversarial=adversarial)
        found = trial_findings(records, included, config, confidence=1 - alpha)
        assert sorted(f.name for f in found) == sorted(MULTI_RUN_FINDINGS)
        bad += bool(failed(found))
    assert bad / runs <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / runs), bad


@pytest.mark.parametrize(
    ("bug", "finding"),
    [
        ({"sigma": 0.5}, "noise_scale"),  # a third of the noise
        ({"reuse": True}, "fresh_noise_steps"),  # the same noise at every step
        ({"shared": True}, "fresh_noise_trials"),  # the same noise in every training
        ({"steps": 40}, "steps_composed"),  # 40 steps taken, the setup composes 20
        ({"q": 0.6}, "sampling_rate"),  # batches three times the accounted q
    ],
)
def test_each_bug_fails_its_finding(bug, finding):
    config = setup()
    records, included = simulate(np.random.default_rng(5), config, 30, **bug)
    found = {f.name: f for f in trial_findings(records, included, config)}
    assert not found[finding].passed, found[finding].message
    assert found[finding].refutes


def test_another_divisor_than_the_setups_is_a_note():
    config = setup()
    records, included = simulate(np.random.default_rng(3), config, 6)
    records = [CanaryRecord(y=r.y, slot_rows=r.slot_rows, batch_rows=r.batch_rows,
                            noise_divisor=4.0) for r in records]
    divisor = trial_findings(records, included, config)[-1]
    assert divisor.name == "noise_divisor" and divisor.passed and not divisor.refutes
    assert divisor.message.startswith("note: the trainings divide the noisy sum by 4")


def test_steps_that_differ_between_trainings_fail_exactly():
    config = setup()
    records, included = simulate(np.random.default_rng(2), config, 6)
    records[0] = CanaryRecord(y=records[0].y[:-3], slot_rows=records[0].slot_rows[:-3],
                              batch_rows=records[0].batch_rows[:-3])
    steps = trial_findings(records, included, config)[0]
    assert steps.name == "steps_composed" and not steps.passed and steps.level == 0.0
    assert "17 to 20" in steps.message


# ------------------------------------------------------------------ scripts, with torch


@pytest.fixture(scope="module")
def scripts():
    pytest.importorskip("torch")
    sys.path.insert(0, str(TESTS))
    import multi_run_scripts

    yield multi_run_scripts
    sys.path.remove(str(TESTS))


SMALL = dict(n=30, epochs=2)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("train", set()),
        ("noise_recreated", {"fresh_noise_steps"}),
        ("noise_constant_seed", {"fresh_noise_trials"}),
        ("noise_quarter", {"noise_scale"}),
    ],
)
def test_script_shards_carry_records_and_their_findings(scripts, name, expected):
    from audit.plugins.contract import run_implementation_shard

    config = setup(**SMALL)
    arrays = run_implementation_shard(getattr(scripts, name), config, seed=3, shard=0, trials=6)
    assert records_of(arrays, "in") and records_of(arrays, "out")
    found = shard_findings(arrays, config)
    assert expected <= failed(found), [f.message for f in found if not f.passed]
    if not expected:  # fixed seed: the correct script passes every finding here
        assert failed(found) == set(), [f.message for f in found if not f.passed]


def test_a_script_without_records_has_no_findings():
    from audit.plugins.contract import run_implementation_shard

    config = setup(**SMALL, model="logistic")
    arrays = run_implementation_shard("numpy-reference", config, seed=1, shard=0, trials=2)
    assert not any(k.startswith("canary_record.") for k in arrays)
    assert shard_findings(arrays, config) == []


def test_replay_of_a_script_passes_correct_clipping_and_names_per_tensor_clipping(scripts):
    from audit.deployed.replay_script import replay_script

    config = setup(n=30, epochs=2)  # seed 3: the slot is in 3 of the 12 batches
    correct = replay_script(scripts.train, config, seed=3)
    assert correct.passed, correct.message
    assert correct.probes[0].tested_steps == 3
    assert correct.reproducible and correct.control_flow_independent
    assert correct.sensitivity <= 1 + correct.tolerance
    buggy = replay_script(f"{SCRIPTS}:per_tensor_clipping", config, seed=3, probes=("crafted",))
    assert not buggy.passed and buggy.first_failure is not None
    assert "per-tensor clipping" in buggy.message
    assert buggy.sensitivity > 1.5  # sqrt(4 tensors) C = 2 C


def test_replay_of_a_script_not_reproducible_from_its_seed(scripts):
    from audit.deployed.replay_script import replay_script

    result = replay_script(scripts.unseeded_init, setup(n=30, epochs=1), seed=0)
    assert not result.passed and not result.reproducible
    assert "not reproducible from the seed" in result.message and result.runs == 2


def test_replay_of_a_script_without_canaries_is_refused(scripts):
    from audit.deployed.replay_script import replay_script

    with pytest.raises(ValueError, match="constructed no DiracCanaries"):
        replay_script("numpy-reference", setup(**SMALL, model="logistic"), seed=0,
                      probes=("crafted",))


def test_stand_in_replaces_only_the_first_construction(scripts):
    from audit.deployed.instrument import DiracCanaries, stand_in

    mine = DiracCanaries(3, clip=1.0, seed=2)
    with stand_in(mine) as holder:
        first = DiracCanaries(1, included=[True])
        second = DiracCanaries(1, included=[False])
    assert first is mine and first.m == 3 and holder.used
    assert second is not mine and second.m == 1
    assert DiracCanaries(2).m == 2


# ------------------------------------------------------------------ a run folder


def test_multi_run_findings_of_a_run_folder(scripts, audit_toml, implementation_spec, run_folder):
    """The shards written as the runner writes them (compute_shard's plug-in source, the
    fingerprint stamp), then read back by the run folder's findings."""
    from audit.deployed.multi_run import multi_run_findings
    from audit.plugins.contract import run_implementation_shard
    from audit.run.fingerprint import encode, shard_fingerprint
    from audit.run.spec import load_spec
    from audit.run.store import FINGERPRINT_KEY, SHARDS_DIR, plan, write_atomically

    text = audit_toml(
        implementation_spec, implementation=f"{SCRIPTS}:noise_recreated", samplers=["poisson"],
        attacks=["default"], trials_in=6, trials_out=6, shard_size=3, store="observations",
        claim=3.0, model="mlp", training={"n": 30, "batch_size": 5, "epochs": 2, "sigma": 1.5},
    )
    folder = run_folder(text)
    spec = load_spec(folder / "audit.toml")
    (folder / SHARDS_DIR).mkdir()
    stamp = np.array(encode(shard_fingerprint(spec)))
    for task in plan(spec):
        arrays = run_implementation_shard(
            spec.experiment.implementation, spec.training_config(task.key),
            seed=spec.experiment.seed, shard=task.index, trials=task.trials, cell=task.key.name,
        )
        write_atomically(folder / SHARDS_DIR / task.filename, {**arrays, FINGERPRINT_KEY: stamp})
    found = multi_run_findings(folder)
    assert sorted(f.name for f in found) == sorted(MULTI_RUN_FINDINGS)
    assert "fresh_noise_steps" in failed(found)
