"""The README stays true: its set-up commands match CI, its code example runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from audit.plugins.contract import TrainingSetup, run_implementation_shard

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, flags=re.S)
    assert len(commands) == 2
    assert all(c.strip().count("\n") == 0 for c in commands)
    assert "audit run runs/quickstart" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1].strip()


def test_the_implementation_example_runs():
    (example,) = [
        block for block in code_blocks("python") if "def train(data, canary, setup, seed)" in block
    ]
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    setup = TrainingSetup(
        sampler="poisson", sigma=1.0, clip=1.0, lr=0.5, batch_size=5, n=20,
        dataset="breast_cancer", observation="last_iterate",
    )
    out = run_implementation_shard(
        namespace["train"], setup, seed=3, shard=0, trials=4, cell="readme"
    )
    assert out["final_in"].shape == out["final_out"].shape == (4,)
    assert np.isfinite(out["final_in"]).all()


def test_every_documented_command_exists():
    from audit.cli import COMMANDS

    shell = "\n".join(code_blocks("bash"))
    documented = set(re.findall(r"^\s*(?:\.venv/bin/)?audit ([a-z-]+)", shell, flags=re.M))
    documented |= set(re.findall(r"&& \.venv/bin/audit ([a-z-]+)", shell))
    assert documented <= set(COMMANDS), documented - set(COMMANDS)
    assert {
        "run",
        "report",
        "curves",
        "simulate",
        "plan",
        "train",
        "samplers",
        "check-accountant",
    } <= documented
