"""The design document: its sections are numbered, and every citation of it in the code names one.

The design document is ``docs/design.md``, an index, and the files ``docs/design/*.md`` it
lists, one per stage. The code cites it as ``docs/design.md §n`` (or ``§n.m``); a renumbered
or deleted section would leave a dangling citation, and a citation of a file outside the
repository (the original design brief) points nowhere for a reader of the repository.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
DESIGN_PARTS = ROOT / "docs" / "design"
INDEX_ROW = re.compile(r"^\| §(\d+) [^|]*\|[^|]*\| \[design/([\w-]+\.md)\]", re.MULTILINE)
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


def _parts() -> list[Path]:
    """The files of the design document in the order of its index (docs/design.md)."""
    order: list[Path] = []
    for _, name in INDEX_ROW.findall(DESIGN.read_text(encoding="utf-8")):
        if DESIGN_PARTS / name not in order:
            order.append(DESIGN_PARTS / name)
    return order


def design_text() -> str:
    """The whole design document: the index, then its parts in the index's order."""
    texts = [DESIGN.read_text(encoding="utf-8")]
    texts += [part.read_text(encoding="utf-8") for part in _parts()]
    return "\n".join(texts)


def _sections() -> list[str]:
    return HEADING.findall(design_text())


def test_index_maps_every_section_to_the_file_that_holds_it():
    index = INDEX_ROW.findall(DESIGN.read_text(encoding="utf-8"))
    assert index, "docs/design.md has no table of sections"
    on_disk = sorted(DESIGN_PARTS.glob("*.md"))
    assert sorted(set(_parts())) == on_disk, "a file of docs/design/ is missing from the index"
    for number, name in index:
        text = (DESIGN_PARTS / name).read_text(encoding="utf-8")
        assert re.search(rf"^## §{number} ", text, re.MULTILINE), (number, name)
    top = [s for s in _sections() if "." not in s]
    assert sorted(top, key=int) == sorted((n for n, _ in index), key=int), top


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
    assert not bare, (
        f"{BARE} is not in the repository; cite docs/design.md §n instead:\n" + "\n".join(bare)
    )


# The public API of issue 12 item 4: each documents its arguments, its result and its errors in
# Google style. ``bounds_for`` raises only for a sampler registered without theory (the sampler
# registry, audit.sampling), which its "Raises:" section says. The plug-in contract is
# ``train(data, canary, setup, seed)``, a user's callable: its contract lives in the docstring of
# ``audit.plugins.contract``.
def _public_api() -> dict[str, object]:
    import audit.plugins.contract
    from attacks.base import Attack
    from audit.accounting.adapters import get_accountant
    from audit.report import run_audit
    from audit.stats.binary import epsilon_lower_bound, verdict
    from audit.theory.bounds import bounds_for, privacy_bounds
    from audit.theory.calibration import sigma_for

    return {
        "privacy_bounds": privacy_bounds,
        "bounds_for": bounds_for,
        "epsilon_lower_bound": epsilon_lower_bound,
        "verdict": verdict,
        "sigma_for": sigma_for,
        "Attack.score": Attack.score,
        "get_accountant": get_accountant,
        "run_audit": run_audit,
        "plug-in contract (audit.plugins.contract)": audit.plugins.contract,
    }


RAISES_NOTHING: set[str] = set()
"""Public functions that raise no exception of their own (each says so in its docstring)."""


def _section_lines(doc: str, header: str) -> list[str]:
    """The lines of section ``header`` of a Google-style docstring (up to the next header)."""
    lines = inspect.cleandoc(doc).splitlines()
    start = [i for i, line in enumerate(lines) if line.strip() == header]
    if not start:
        return []
    indent = len(lines[start[0]]) - len(lines[start[0]].lstrip())
    body = []
    for line in lines[start[0] + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return [line for line in body if line.strip()]


def test_public_api_docstrings_have_args_returns_raises():
    missing = []
    for name, obj in _public_api().items():
        doc = inspect.getdoc(obj) or ""
        headers = ["Args:", "Returns:"] + ([] if name in RAISES_NOTHING else ["Raises:"])
        missing += [f"{name}: no {h!r} section" for h in headers if not _section_lines(doc, h)]
        if name in RAISES_NOTHING:
            assert "Raises:" not in doc and "raises no exception" in doc, name
    assert not missing, "\n".join(missing)


def test_documented_args_are_the_parameters():
    """Every parameter of a public function is named in its Args section (as an entry
    ``name:`` or ``a, b:``, or as ``name`` in a neighbour's entry), and every entry names a
    parameter: a renamed or added parameter must be documented."""
    for name, obj in _public_api().items():
        if inspect.ismodule(obj):
            continue
        params = {p for p in inspect.signature(obj).parameters if p != "self"}
        args = _section_lines(inspect.getdoc(obj) or "", "Args:")
        indent = min(len(line) - len(line.lstrip()) for line in args)
        entries = {
            part.strip()
            for line in args
            if len(line) - len(line.lstrip()) == indent
            for part in line.strip().partition(":")[0].split(",")
        }
        text = "\n".join(args)
        assert entries <= params, (name, sorted(entries - params))
        undocumented = sorted(p for p in params - entries if f"``{p}``" not in text)
        assert not undocumented, (name, undocumented)
