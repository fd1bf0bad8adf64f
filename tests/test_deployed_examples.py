"""Tiny versions of the worked examples under examples/ (docs/auditing-your-training.md).

(a) Opacus with a shuffling DataLoader accounted as Poisson: inspect-loader flags it and the
theory shows the claim is no guarantee; the multi-run over the user's script
(``implementation = "examples/opacus_shuffle/train.py:train"``) runs, resumes from its stored
shards (fingerprinted by the script's source). (b) the same with Poisson sampling: the
inspection matches the accountant and the claim is a guarantee. The full-size verdicts
(a: violated, b: consistent) are in examples/*/report.md; (c) runs in
tests/test_deployed_instrument.py. Sizes here: 3 IN and 3 OUT trainings of 20 steps.
"""

from __future__ import annotations

from pathlib import Path

from audit.core.validation import load_callable
from audit.deployed.loader_inspection import inspect_loader
from audit.report import run_audit

ROOT = Path(__file__).resolve().parents[1]


def inspect(example: str):
    made = load_callable("factory", f"{ROOT}/examples/{example}/train.py:make_loader")()
    return inspect_loader(
        made["loader"],
        privacy_engine=made["privacy_engine"],
        optimizer=made["optimizer"],
        training_epochs=made["epochs"],
        delta=made["delta"],
    )


def test_example_a_inspection_flags_the_shuffling_loader():
    result = inspect("opacus_shuffle")
    assert result.sampler == "dynamic_shuffle"
    assert result.matches_accountant is False
    # Opacus's epsilon is below the shuffle's lower bound
    assert result.theory.guarantee == "refuted"
    assert result.underpowered == ()


def test_example_b_inspection_matches_the_accountant():
    result = inspect("opacus_poisson")
    assert result.sampler == "poisson"
    assert result.matches_accountant is True
    assert result.theory.guarantee == "yes"


def test_multi_run_over_the_users_script(tmp_path):
    example = "opacus_shuffle"  # (b)'s script differs by poisson_sampling=True only
    spec = (ROOT / "examples" / example / "audit.toml").read_text()
    tiny = (
        spec.replace("trials_in = 500", "trials_in = 3")
        .replace("trials_out = 500", "trials_out = 3")
        .replace("shard_size = 50", "shard_size = 3")
        .replace("n_jobs = 2", "n_jobs = 1")
        .replace(
            f'"examples/{example}/train.py:train"', f'"{ROOT}/examples/{example}/train.py:train"'
        )
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "audit.toml").write_text(tiny)
    first = run_audit(run, progress=False, plots=False)
    (cell,) = first.cells
    assert cell.trials_in == 3 and cell.verdict in ("violated", "consistent")
    again = run_audit(run, progress=False, plots=False)  # resumable: the stored shard is reused
    assert again.cells[0].epsilon_lb == cell.epsilon_lb
    stored = next((run / "shards").rglob("*.json"), None) or next((run / "shards").rglob("*.npz"))
    assert stored is not None


def test_a_scripts_fingerprint_covers_its_folder(tmp_path):
    from audit.run.fingerprint import implementation_source

    (tmp_path / "helper_for_fingerprint.py").write_text("SCALE = 1\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import helper_for_fingerprint\n\ndef train(data, canary, setup, seed):\n    return {}\n"
    )
    first = implementation_source(f"{script}:train")
    assert {Path(f).name for f in first["files"]} == {"train.py", "helper_for_fingerprint.py"}
    (tmp_path / "helper_for_fingerprint.py").write_text("SCALE = 2\n")
    assert implementation_source(f"{script}:train")["sha256"] != first["sha256"]
