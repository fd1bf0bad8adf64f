"""DP-SGD privacy auditing harness (docs/design.md).

``audit.inspect_loader(loader)`` is the entry point for a deployed training's loader
(:mod:`audit.deployed`); it is imported on first use, so ``import audit`` stays cheap.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"inspect_loader": "audit.deployed.loader_inspection"}


def __getattr__(name: str) -> Any:
    """``audit.inspect_loader``: imported on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'audit' has no attribute {name!r}")
