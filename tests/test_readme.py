"""The README stays true: short, its set-up commands first and matching CI, its examples real.

The README holds what the harness is, the two set-up commands and the three uses; the rest of
the manual is docs/guide.md (commands, the plug-in contract and its example) and
docs/results.md (what the numbers mean); both are checked here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from audit.plugins.contract import TrainingSetup, run_implementation_shard

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GUIDE = (ROOT / "docs" / "guide.md").read_text()
MANUAL = README + "\n" + GUIDE
README_LIMIT = 12_000  # characters (issue 34 item 6)
FIRST_SCREEN = 40  # lines a new user sees before scrolling


def code_blocks(language: str, text: str = MANUAL) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_readme_is_short_and_starts_with_the_setup_commands():
    assert len(README) <= README_LIMIT, len(README)
    first_screen = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "## Set up on a fresh machine" in first_screen
    assert "audit run runs/quickstart" in first_screen
    assert ".venv/bin/python -m pytest" in first_screen


def test_readme_links_point_at_existing_files():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert {"docs/guide.md", "docs/results.md", "docs/design.md"} <= set(links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_readme_spec_example_is_a_valid_spec(tmp_path):
    from audit.run.spec import load_spec

    (spec,) = code_blocks("toml", README)
    (tmp_path / "audit.toml").write_text(spec)
    loaded = load_spec(tmp_path / "audit.toml")
    assert loaded.execution.backend == "dask"


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, flags=re.S)
    assert len(commands) == 2
    assert all(c.strip().count("\n") == 0 for c in commands)
    assert "audit run runs/quickstart" in commands[0]
    # .ci/run runs the README's test command verbatim, as its last line (the OpenBLAS-kernel
    # reruns are tests of that suite: tests/test_openblas_kernels.py)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1].strip()


def test_the_implementation_example_runs():
    (example,) = [
        block for block in code_blocks("python") if "def train(data, canary, setup, seed)" in block
    ]
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/guide.md", "exec"), namespace)
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
