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
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [lint, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_types_checked():
    """mypy passes on audit/ and attacks/ at the strictness stated in pyproject.toml
    ([tool.mypy], docs/design.md §2.5): about 40 s of CPU, a few seconds with a warm cache."""
    pytest.importorskip("mypy", reason="mypy is not installed (it comes with the 'test' extra)")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_sampler_name_branches_outside_the_samplers():
    """A sampler is a type (docs/design.md §3.3): outside audit/sampling/ and audit/core/names.py no
    code (in audit/, attacks/ or bench/) compares a value with a built-in sampler name:
    ``sampler == "persistent_shuffle"``, ``kind != "poisson"``, ``x in ("dynamic_shuffle",
    ...)`` over any number of lines, ``match``/``case "poisson"``; it asks the registry. Read
    with :mod:`ast`, so a tuple of names split over lines is seen too. The exceptions are not
    sampler branches: the claim kind ``"poisson"`` (claims.py) and the Gaussian-step class
    ``"poisson"`` of :func:`audit.accounting.events.gaussian_steps` (accountants.py and the
    dp_accounting row of bench/theory.py)."""
    import ast

    from audit.core.names import SAMPLERS

    def names_in(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in SAMPLERS
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_in(e) for e in node.elts)
        return False

    allowed = {
        ("audit/run/claims.py", "spec.claim.claim"),
        ("audit/accounting/adapters.py", "steps[0]"),
        ("audit/accounting/adapters.py", "kind"),
        ("bench/theory.py", "steps[0]"),
    }
    found = []
    for package in ("audit", "attacks", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            file = path.relative_to(ROOT).as_posix()
            if "sampling" in path.parts or path.name == "names.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=file)):
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    if any(names_in(side) for side in sides):
                        other = next((side for side in sides if not names_in(side)), node.left)
                        if (file, ast.unparse(other)) not in allowed:
                            found.append(f"{file}:{node.lineno}: {ast.unparse(node)}")
                elif isinstance(node, ast.match_case) and any(
                    isinstance(p, ast.MatchValue) and names_in(p.value)
                    for p in ast.walk(node.pattern)
                ):
                    found.append(f"{file}:{node.pattern.lineno}: case {ast.unparse(node.pattern)}")
    assert not found, "\n".join(found)
