"""docs/design.md: its sections are numbered, and every citation of it in the code names one.

The code cites the design document as ``docs/design.md §n`` (or ``§n.m``); a renumbered or
deleted section would leave a dangling citation, and a citation of a file outside the
repository (the original design brief) points nowhere for a reader of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
HEADING = re.compile(r"^#{2,3} §(\d+(?:\.\d+)*) ", re.MULTILINE)
CITATION = re.compile(r"docs/design\.md §(\d+(?:\.\d+)*)")
BARE = "DESIGN" + ".md"  # spelt in two parts so that this file does not cite it


def _sources() -> list[Path]:
    """Every text file of the repository outside docs/ that may cite the design document."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for folder in ("audit", "attacks", "tests", "bench", "runs"):
        for suffix in ("*.py", "*.md", "*.toml"):
            files.extend((ROOT / folder).rglob(suffix))
    return sorted(f for f in files if f.is_file())


def _sections() -> list[str]:
    return HEADING.findall(DESIGN.read_text(encoding="utf-8"))


def test_sections_are_numbered_in_order():
    sections = _sections()
    top = [s for s in sections if "." not in s]
    assert top == [str(i) for i in range(1, len(top) + 1)], top
    for sub in (s for s in sections if "." in s):
        parent, _, number = sub.rpartition(".")
        assert parent in sections, f"§{sub} has no parent section §{parent}"
        siblings = [s for s in sections if s.rpartition(".")[0] == parent and "." in s]
        assert siblings == [f"{parent}.{i}" for i in range(1, len(siblings) + 1)], siblings
        assert int(number) >= 1


def test_every_citation_names_an_existing_section():
    sections = set(_sections())
    dangling = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: §{m.group(1)}"
        for path in _sources()
        for text in [path.read_text(encoding="utf-8")]
        for m in CITATION.finditer(text)
        if m.group(1) not in sections
    ]
    assert not dangling, "citations of missing sections of docs/design.md:\n" + "\n".join(dangling)
    assert len([p for p in _sources() if CITATION.search(p.read_text(encoding="utf-8"))]) >= 20


def test_no_citation_of_a_file_outside_the_repository():
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if BARE in line
    ]
    assert not bare, f"{BARE} is not in the repository; cite docs/design.md §n instead:\n" + "\n".join(bare)
