"""Installing the harness beside an existing training stack leaves that stack alone.

The README's "install beside your stack" promise: in an environment that already holds torch,
Opacus and numpy, ``pip install ".[accountants]"`` installs the harness and nothing else -- no
other torch, Opacus or numpy version is pulled in (pyproject.toml's ranges admit the installed
ones). Checked with pip's own resolver, offline and without installing anything::

    pip install --dry-run --report r.json --no-index --no-build-isolation ".[accountants]"

run in the repository root with the test environment's pip: ``r.json``'s ``install`` list (what
pip would install or replace) must name only ``dpsgd-audit``. About 2 s (it prepares the
project's metadata with the installed setuptools). Skipped where pip has no ``--report``
(pip < 22.2) or where the stack (torch, opacus and the other requirements of the
``accountants`` extra) is not installed here: offline, pip could not resolve it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STACK = ("torch", "opacus", "numpy")
"""The distributions of a user's training stack that the install must not touch."""

EXTRA = ("opacus", "prv-accountant", "pld-accounting")
"""The ``accountants`` extra's requirements (pyproject.toml), installed here or the test skips."""


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pip_has_report() -> bool:
    version = _version("pip")
    if version is None:
        return False
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= (22, 2)  # --report arrived in pip 22.2


def test_install_with_accountants_extra_changes_nothing_of_the_stack(tmp_path):
    if not _pip_has_report():
        pytest.skip(f"pip {_version('pip')} has no --dry-run --report (pip >= 22.2 needed)")
    missing = [name for name in (*STACK, *EXTRA) if _version(name) is None]
    if missing:
        pytest.skip(f"not installed here, so pip --no-index cannot resolve the stack: {missing}")
    report = tmp_path / "r.json"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--report", str(report),
         "--no-index", "--no-build-isolation", "--quiet", ".[accountants]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"pip could not resolve offline:\n{done.stderr[-3000:]}"
    planned = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    touched = {name: planned[name] for name in STACK if name in planned}
    assert not touched, (
        f"installing the harness would replace the stack: {touched} "
        f"(installed: { {name: _version(name) for name in touched} })"
    )
    assert set(planned) == {"dpsgd-audit"}, f"pip would also install {planned}"
