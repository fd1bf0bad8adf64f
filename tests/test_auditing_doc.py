"""Every code block of docs/auditing-your-training.md runs as the page says.

The page's first Python block is the user's script ``mytrain.py``: it is written to a fresh
folder, the folder becomes the working directory and joins ``sys.path`` (as for a user who runs
Python where the script is), the page's other Python blocks run there in order in one
namespace (their own asserts check what the page states: the correct loop passes the loader
inspection, the replay and the findings), each ``audit ...`` line of its bash blocks runs as a
command (exit code 0; ``--json`` output parses), and its TOML block is read as a spec with the
script it names (examples/opacus_poisson/train.py, copied). About 10-20 s on one core: the
script trains 21 steps per run, the replay 7 runs, and the three commands start a Python each.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("dp_accounting")

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "auditing-your-training.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    """The page's fenced blocks of ``language``, in order."""
    return [body for lang, body in FENCE.findall(DOC.read_text(encoding="utf-8"))
            if lang == language]


def audit_command() -> list[str]:
    """The ``audit`` console script beside this Python, else the one on PATH."""
    beside = Path(sys.executable).with_name("audit")
    found = str(beside) if beside.exists() else shutil.which("audit")
    if found is None:
        pytest.skip("the audit console script is not installed")
    return [found]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A folder holding the page's mytrain.py, as the working directory and on sys.path."""
    script = blocks("python")[0]
    assert script.startswith("# mytrain.py"), "the page's first Python block is mytrain.py"
    (tmp_path / "mytrain.py").write_text(script, encoding="utf-8")
    # "Audit a script as it is" runs the third-party-shaped example from the user's folder
    shutil.copy(ROOT / "examples" / "third_party_mnist" / "mnist.py", tmp_path / "mnist.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mytrain", None)
    yield tmp_path
    sys.modules.pop("mytrain", None)


def test_the_page_has_its_blocks():
    assert len(blocks("python")) >= 5
    assert any("audit replay" in b for b in blocks("bash"))
    assert len(blocks("toml")) == 1


def test_python_blocks_run_in_order(user_folder):
    namespace: dict[str, object] = {"__name__": "auditing_doc"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, block in enumerate(blocks("python")[1:], start=1):
            try:
                exec(compile(block, f"{DOC.name}[python block {i}]", "exec"), namespace)
            except Exception as error:  # pragma: no cover - the failure message
                raise AssertionError(f"python block {i} of {DOC.name} failed:\n{block}") from error
    assert (user_folder / "audit-report" / "report.md").is_file()


def test_shell_commands_run(user_folder):
    audit = audit_command()
    lines = [line.strip() for block in blocks("bash") for line in block.splitlines()
             if line.strip().startswith("audit ")]
    assert lines
    for line in lines:
        argv = shlex.split(line.split("#")[0])[1:]
        done = subprocess.run([*audit, *argv], cwd=user_folder, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{line}:\n{done.stdout}\n{done.stderr}"
        if "--json" in argv:
            json.loads(done.stdout)


def test_toml_block_is_a_spec(tmp_path):
    from audit.run.spec import load_spec

    spec_text = blocks("toml")[0]
    name = re.search(r'^implementation = "([^":]+):', spec_text, re.M)
    assert name is not None
    shutil.copy(ROOT / "examples" / "opacus_poisson" / "train.py", tmp_path / name.group(1))
    (tmp_path / "audit.toml").write_text(spec_text, encoding="utf-8")
    spec = load_spec(tmp_path)
    assert spec.training_keys()
