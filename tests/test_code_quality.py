"""The code base stays ruff-clean and keeps its import layers (configuration in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it comes with the 'test' extra)")
    result = subprocess.run(
        [ruff, "check", "--quiet", "audit", "attacks", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_kept():
    """The one direction of flow (docs/design.md §2): import-linter's contracts in
    pyproject.toml ([tool.importlinter]) hold, function-local imports included (about 2 s)."""
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (it comes with the 'test' extra)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [lint, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_sampler_name_branches_outside_the_samplers():
    """A sampler is a type (docs/design.md §3.3): outside audit/sampling/ and audit/names.py no
    code compares a sampler's name with a built-in name (``sampler == "persistent_shuffle"``,
    ``kind != "poisson"``, ``x in ("dynamic_shuffle", ...)``); it asks the registry. The
    exceptions are not sampler branches: the claim kind ``"poisson"`` (claims.py) and the
    Gaussian-step class ``"poisson"`` of :meth:`audit.sampling.Sampler.gaussian_steps`."""
    import re

    from audit.names import SAMPLERS

    names = "|".join(SAMPLERS)
    branch = re.compile(rf"""(==|!=|\bin\b)\s*[(\[{{]?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    allowed = {("audit/claims.py", "spec.claim == "), ("audit/accountants.py", "steps[0] != "),
               ("audit/accountants.py", "if kind == ")}
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in ("audit", "attacks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if "sampling" not in path.parts and path.name != "names.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if branch.search(line)
        and not any(path.relative_to(ROOT).as_posix() == file and text in line for file, text in allowed)
    ]
    assert not found, "\n".join(found)
