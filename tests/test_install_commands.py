"""Every install command in README.md and docs/ runs as written (issue 43 item 1).

The harness is on no package index, so a command that names ``dpsgd-audit`` must install it
from a path (a clone, ``.``) or a git URL, never by bare name; every extra it names exists; and
the local-path form resolves here (``pip install --dry-run``, offline: no index, no build
isolation), so a renamed extra or a broken pyproject shows in CI.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").rglob("*.md"))]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"])
PROJECT = "dpsgd-audit"


def install_commands() -> list[tuple[str, str]]:
    """(file, command) for every ``pip install ...`` in the docs, code spans and blocks alike."""
    found = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            for span in re.findall(r"`([^`]*pip install[^`]*)`", line) or (
                    [line] if "pip install" in line and "`" not in line else []):
                for part in span.split("&&"):
                    if "pip install" in part:
                        found.append((str(path.relative_to(ROOT)), part.strip()))
    return found


def requirements(command: str) -> list[str]:
    words = shlex.split(command.split("pip install", 1)[1])
    return [w for w in words if not w.startswith("-")]


def test_the_docs_have_install_commands():
    files = {file for file, _ in install_commands()}
    assert "README.md" in files and "docs/auditing-your-training.md" in files


@pytest.mark.parametrize(("file", "command"), install_commands())
def test_install_command_names_the_harness_by_path_or_url(file, command):
    for requirement in requirements(command):
        name_part, _, url = requirement.partition(" @ ")
        extras = re.findall(r"\[([^\]]*)\]", name_part)
        for extra in ",".join(extras).split(","):
            if extra:
                assert extra in EXTRAS, f"{file}: {command!r} names extra {extra!r}"
        bare = re.sub(r"\[.*", "", name_part)
        if bare == PROJECT:
            assert url.startswith("git+"), (
                f"{file}: {command!r} installs {PROJECT} by name from an index it is not on")


def test_the_local_path_form_resolves_offline(tmp_path):
    # a copy of what the build reads: pip builds the metadata in the source folder (an
    # egg-info), which left in the checkout would shadow the installed metadata
    source = tmp_path / "dpsgd-audit"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("audit", "attacks"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
         "--no-build-isolation", "--quiet", "--report", str(tmp_path / "report.json"),
         f"{source}[accountants]"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert PROJECT in (tmp_path / "report.json").read_text()
