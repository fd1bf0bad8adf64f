"""A griffe extension: Sphinx roles in docstrings become cross-reference links in the API reference.

The docstrings cite other objects the way a reader of the source expects, with Sphinx roles
(``:func:`audit.stats.binary.epsilon_lower_bound```, ``:class:`Bounds```, ``:mod:`audit.theory```,
``:meth:`~Curve.delta```). mkdocstrings renders Google-style docstrings as Markdown, where a role
is raw text. Before the docstrings are parsed, this extension rewrites each role into an
mkdocs-autorefs reference ``<autoref identifier="..." optional><code>...</code></autoref>``:

* the target is resolved the way Sphinx resolves it: a full path (``audit.x.y``) as is; a
  relative one against the object's class, then its module, then each enclosing package, then
  the names its module imports (``from audit.x import y`` makes ``y`` mean ``audit.x.y``);
* ``~`` shows only the last component as the title, a leading ``.`` is dropped, ``!`` (no link)
  and a title ``text <target>`` are honoured;
* an Args/Attributes entry that names several items at once (``epsilon, delta: the claim``,
  the numpydoc habit) becomes one entry per name with the shared description, so the table
  has a row per name (griffe's Google parser would make ``epsilon,`` a name of type ``delta``);
* the reference is ``optional``: a target that is not on any page (a private helper, another
  library's object such as :class:`torch.nn.Module`) renders as code with its full name as a
  tooltip instead of failing the strict build; everything on a page becomes a link.

Registered in mkdocs.yml under the python handler's ``extensions``; tests/test_api_reference.py
checks the built HTML for raw roles.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>func|class|mod|meth|attr|data|exc|obj|const|type):"
    r"`(?P<body>[^`]+)`"
)
"""A Sphinx role in a docstring: ``:func:`target```, ``:py:class:`~a.b```,
``:mod:`title <a.b>```."""


def _title_and_target(body: str) -> tuple[str, str, bool]:
    """(title, target, link) of a role's body: ``title <target>``, ``~a.b``, ``!a.b``, ``.a.b``."""
    body = body.strip()
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)
    if explicit:
        return explicit["title"], explicit["target"].lstrip("~.!"), not body.startswith("!")
    link = not body.startswith("!")
    target = body.lstrip("!")
    short = target.startswith("~")
    target = target.lstrip("~").lstrip(".")
    title = target.rsplit(".", 1)[-1] if short else target
    if title.endswith("()"):
        target = target[:-2]
    return title, target, link


def _lookup(collection: Any, path: str) -> str | None:
    """The canonical path of ``path`` in the loaded modules, or None where it is not there."""
    try:
        found = collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    try:
        return str(found.canonical_path if found.is_alias else found.path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None  # an import of another library's object: resolved below by its import


def _resolve(obj: griffe.Object, target: str) -> str:
    """The identifier autorefs looks up for ``target`` as written in ``obj``'s docstring."""
    collection = obj.modules_collection
    scopes: list[griffe.Object] = []
    scope: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    while scope is not None:
        scopes.append(scope)
        scope = scope.parent
    head = target.split(".", 1)[0]
    for scope in scopes:
        found = _lookup(collection, f"{scope.path}.{target}")
        if found:
            return found
        member = scope.members.get(head)
        if member is not None and member.is_alias:
            try:
                imported = str(member.target_path)
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            rest = target[len(head):]
            return _lookup(collection, imported + rest) or imported + rest
    return _lookup(collection, target) or target


SECTION = re.compile(
    r"^(?P<indent>\s*)(?:Args|Arguments|Parameters|Attributes|Other Parameters|Keyword Args|"
    r"Keyword Arguments):\s*$"
)
"""The header of a Google docstring section whose entries are ``name (type): description``."""
JOINT = re.compile(r"^(?P<names>\w+(?:\s*,\s*\w+)+)(?P<rest>(?:\s*\([^)]*\))?\s*:.*)$")
"""An entry naming several items at once: ``a, b (float): description``."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_joint_entries(text: str) -> str:
    """``text`` with each ``a, b: description`` entry of an Args/Attributes section split into
    ``a: description`` and ``b: description`` (continuation lines repeated under each)."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        header = SECTION.match(lines[i])
        out.append(lines[i])
        i += 1
        if not header:
            continue
        base = len(header["indent"])
        item: int | None = None
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            line = lines[i]
            if item is None and line.strip():
                item = _indent(line)
            joint = JOINT.match(line.strip()) if line.strip() and _indent(line) == item else None
            if joint is None:
                out.append(line)
                i += 1
                continue
            body = [line]
            i += 1
            while i < len(lines) and lines[i].strip() and item is not None and \
                    _indent(lines[i]) > item:
                body.append(lines[i])
                i += 1
            pad = " " * (item or 0)
            for name in re.split(r"\s*,\s*", joint["names"]):
                out.append(pad + name + joint["rest"])
                out.extend(body[1:])
    return "\n".join(out)


def rewrite_roles(text: str, obj: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs reference."""

    def replace(match: re.Match[str]) -> str:
        title, target, link = _title_and_target(match["body"])
        code = f"<code>{html.escape(title)}</code>"
        if not link:
            return code
        identifier = html.escape(_resolve(obj, target), quote=True)
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a loaded package (see the module doc)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite once the whole package is loaded, so relative targets can be resolved."""
        self._walk(pkg, seen=set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = split_joint_entries(rewrite_roles(obj.docstring.value, obj))
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]
