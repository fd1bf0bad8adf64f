"""DP-SGD privacy auditing harness (docs/design.md).

``audit.inspect_loader(loader)`` is the entry point for a deployed training's loader
(:mod:`audit.deployed`); ``audit.audit_scores(scores_in, scores_out, delta=...)`` audits attack
scores a user already has (:mod:`audit.report.scores_audit`, ``audit scores FILE``). Both are
imported on first use, so ``import audit`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "audit_scores", "inspect_loader"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml's ``[project] version``, one
    source); a source checkout that was never installed reads it from pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("dpsgd-audit")
    except metadata.PackageNotFoundError:
        import re
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            found = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.MULTILINE)
        except OSError:
            found = None
        return found.group(1) if found else "0+unknown"


_LAZY = {
    "inspect_loader": "audit.deployed.loader_inspection",
    "audit_scores": "audit.report.scores_audit",
}


def __getattr__(name: str) -> Any:
    """``audit.__version__`` (the harness's version, as ``audit --version`` prints it: read on
    first use, since importlib.metadata costs ``import audit`` some 25 ms) and
    ``audit.inspect_loader`` and ``audit.audit_scores``: imported on first use."""
    if name == "__version__":
        version = _version()
        globals()["__version__"] = version  # read once
        return version
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'audit' has no attribute {name!r}")
