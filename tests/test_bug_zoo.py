"""The bug zoo (examples/bug_zoo, issue 33 item 4): each bug is one line from plain.py, and
the documented path runs on a reduced zoo (one seed)."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[1] / "examples" / "bug_zoo"
sys.path.insert(0, str(ZOO))
import zoo  # noqa: E402


def _changed(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.mark.parametrize("name", sorted(zoo.BUGS))
def test_each_bug_is_one_line_from_the_correct_file(name: str) -> None:
    correct = (ZOO / zoo.BUGS[name].base).read_text(encoding="utf-8")
    committed = (ZOO / "bugs" / f"{name}.py").read_text(encoding="utf-8")
    assert committed == zoo.bug_source(name)  # the committed file is what zoo.py generates
    assert len(_changed(correct, committed)) == 2  # one line removed, one added


def test_at_least_twelve_bugs() -> None:
    assert len(zoo.BUGS) >= 12


def test_the_zoo_grew_by_eight_kinds() -> None:
    """Issue 42 item 7: at least 8 kinds beyond the 17 of issue 33, each with its leak named."""
    assert len(zoo.BUGS) >= 17 + 8
    assert all(bug.kind for bug in zoo.BUGS.values())
    assert set(zoo.LEAKS) == set(zoo.BUGS)  # every bug says what it leaks


def test_a_bug_line_must_occur_once() -> None:
    zoo.BUGS["_bad"] = zoo.Bug("no such line", "x", "none")
    try:
        with pytest.raises(ValueError, match="occurs 0 times"):
            zoo.bug_source("_bad")
    finally:
        del zoo.BUGS["_bad"]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("path", "bug"),
    [
        ("plain.py", False),
        ("bugs/noise_over_sqrt_b.py", True),
        ("bugs/shuffle_accounted_poisson.py", True),
        ("bugs/augmentation_copies_clipped_alone.py", True),
        ("bugs/batch_statistics_mixing.py", True),
        ("bugs/one_person_two_rows.py", True),
    ],
)
def test_the_documented_path_on_a_reduced_zoo(path: str, bug: bool) -> None:
    """One seed each (about 2 s each): the correct loop is clean, each bug found."""
    run = _load(ZOO / "run_zoo.py")
    out = run.audit_once(_load(ZOO / path), 0)
    assert out.found == bug, out.what


def test_a_crash_of_the_path_is_reported_not_found() -> None:
    """A step that raises is printed where the sentence goes, and never counts as found."""
    run = _load(ZOO / "run_zoo.py")
    broken = type("Broken", (), {"CLIP": 1.0, "train": None})  # train is not callable
    out = run.audit_or_crash(broken, 0, None, "")
    assert not out.found
    assert out.sentence.startswith("the path CRASHED: TypeError")


def test_the_readme_lists_entries_not_yet_run() -> None:
    """A regeneration stopped midway leaves no stale row: what is not run yet is named."""
    run = _load(ZOO / "run_zoo.py")
    text = run.readme(5, 10, [], [], ["noise_bfloat16"])
    assert "Not yet run in this regeneration: noise_bfloat16." in text
    assert "Not yet run" not in run.readme(5, 10, [], [], [])
