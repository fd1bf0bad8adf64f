"""The API reference (mkdocs.yml, docs/api/) covers every public module and builds from the
docstrings with warnings as errors, so a docstring whose Args do not match its signature fails
CI (issue 34 item 6).

Coverage rule. A *public module* is a module under ``audit/`` or ``attacks/`` whose source
assigns ``__all__`` at module level. Each must appear as ``::: <module>`` on a page of
docs/api/, by convention its stage's page (``audit.<stage>.x`` on ``docs/api/<stage>.md``,
``attacks.x`` on ``docs/api/attacks.md``), except a *re-export*: a module none of whose
``__all__`` names is defined in its own source (by a ``def``, ``class`` or assignment at module
level). A re-export only imports names defined elsewhere, as a package's facade does
(``audit/deployed/__init__.py``, ``audit/report/__init__.py``) or a shim left at a moved
module's old path (``audit/deployed/findings.py`` re-exports :mod:`audit.core.findings`); its
names are documented where they are defined. A module whose ``__all__`` is not a literal list
of strings counts as public (it cannot be checked, so it must be documented).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _page_for(module: str) -> str:
    """The page a module belongs on: its stage package's (``audit.<stage>`` or ``attacks``)."""
    parts = module.split(".")
    if parts[0] == "attacks":
        return "docs/api/attacks.md"
    return f"docs/api/{parts[1]}.md" if len(parts) > 1 else "docs/api/index.md"


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, those inside a top-level ``if`` / ``try`` included."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out.extend(_top_level(node.body) + _top_level(node.orelse))
        elif isinstance(node, ast.Try):
            out.extend(_top_level(node.body + node.orelse + node.finalbody))
            for handler in node.handlers:
                out.extend(_top_level(handler.body))
    return out


def _targets(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _exported(statements: list[ast.stmt]) -> set[str] | None:
    """The names of a literal ``__all__`` (None when it is computed)."""
    for node in statements:
        if "__all__" in _targets(node) and isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
            ):
                return {e.value for e in value.elts if isinstance(e, ast.Constant)}
            return None
    return None


def public_modules() -> tuple[list[str], list[str]]:
    """(public modules, re-exports) under audit/ and attacks/, by the rule of the docstring."""
    public: list[str] = []
    reexports: list[str] = []
    for package in ("audit", "attacks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            statements = _top_level(ast.parse(path.read_text(encoding="utf-8")).body)
            own = set().union(*(_targets(node) for node in statements))
            if "__all__" not in own:
                continue
            exported = _exported(statements)
            if exported is not None and not exported & (own - {"__all__"}):
                reexports.append(_module_name(path))
            else:
                public.append(_module_name(path))
    return public, reexports


def documented_modules() -> dict[str, str]:
    """Module -> the docs/api page whose ``::: module`` directive documents it."""
    found: dict[str, str] = {}
    for page in sorted(API.glob("*.md")):
        for module in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            found.setdefault(module, f"docs/api/{page.name}")
    return found


def test_every_public_module_is_in_the_api_reference() -> None:
    public, reexports = public_modules()
    assert len(public) >= 100, public  # the scan found the packages (115 modules in 0.3.0)
    # the rule's two kinds of re-export, as the docstring names them
    assert {"audit.deployed", "audit.report"} <= set(reexports), reexports
    for name in ("audit.stats.error_rates", "audit.report.scores_audit",
                 "audit.report.scores_input", "audit.core.confidence"):
        assert name in public, name
    documented = documented_modules()
    missing = [m for m in public if m not in documented]
    assert not missing, "public modules (they define __all__) missing from the API reference; " \
        "add a line '::: <module>' to its page:\n" + "\n".join(
            f"  ::: {m}   ->  {_page_for(m)}" for m in missing)


def test_api_reference_documents_only_modules_that_exist() -> None:
    public, reexports = public_modules()
    stale = {m: page for m, page in documented_modules().items() if m not in public}
    assert not stale, "docs/api directives naming no public module (moved, removed, or a " \
        f"re-export: document the module the names moved to instead): {stale}; " \
        f"re-exports: {reexports}"


def test_index_links_every_page() -> None:
    index = (API / "index.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in sorted(API.glob("*.md"))
                if p.name != "index.md" and f"]({p.name})" not in index]
    assert not unlinked, f"docs/api/index.md does not link: {unlinked}"


@pytest.mark.slow
def test_api_reference_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    start = time.perf_counter()
    # no -q: mkdocs -q logs errors only, and --strict counts only the warnings it logs, so
    # `mkdocs build --strict -q` passes with griffe's docstring warnings (checked: rc 0 with 4)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, "\n".join(
        line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("INFO"))
    for page in sorted(API.glob("*.md")):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / name).exists(), name
    assert seconds < 60, f"mkdocs build took {seconds:.1f} s (the budget is 60 s)"
    _check_rendered_html(tmp_path / "site")


RAW_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`?")
JOINT_NAME = re.compile(r"<td><code>\w+,</code>|<code>\w+,</code>\s*</td>")


def _check_rendered_html(site: Path) -> None:
    """The built pages hold no raw Sphinx role (docs/griffe_roles.py turns each into a link)
    and no table row named ``a,`` (a joint ``a, b:`` entry split into one row per name)."""
    links = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text()
        visible = re.sub(r"<[^>]+>", "", text)
        raw = RAW_ROLE.findall(visible)
        assert not raw, f"{page.relative_to(site)}: {len(raw)} raw roles, e.g. {raw[:3]}"
        joint = JOINT_NAME.findall(text)
        assert not joint, f"{page.relative_to(site)}: table rows named {joint[:3]}"
        links += text.count('class="autorefs autorefs-internal"')
    assert links > 1000, f"only {links} cross-reference links in the API reference"


def test_roles_become_optional_references() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from griffe_roles import _title_and_target, split_joint_entries
    finally:
        sys.path.remove(str(ROOT / "docs"))
    assert _title_and_target("~audit.theory.curve.TradeOffCurve") == (
        "TradeOffCurve", "audit.theory.curve.TradeOffCurve", True)
    assert _title_and_target("the curve <audit.theory.curve>") == (
        "the curve", "audit.theory.curve", True)
    assert _title_and_target("!numpy.ndarray")[2] is False
    text = "Attributes:\n    a, b (float): shared\n        more.\n    c: own.\n\nAfter."
    assert split_joint_entries(text).splitlines() == [
        "Attributes:", "    a (float): shared", "        more.", "    b (float): shared",
        "        more.", "    c: own.", "", "After."]
