"""Package hygiene (issue 34 item 1): one version, printed by ``audit --version``; the license
and the PEP 561 marker beside the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import audit
from audit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _pyproject_version() -> str:
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    return found.group(1)


def test_version_is_pyprojects() -> None:
    assert audit.__version__ == _pyproject_version()


def test_cli_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"audit {_pyproject_version()}"


def test_license_changelog_and_marker_exist() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "audit" / "py.typed").exists()
    assert f"## [{_pyproject_version()}]" in (ROOT / "CHANGELOG.md").read_text()
    assert f"version: {_pyproject_version()}" in (ROOT / "CITATION.cff").read_text()
