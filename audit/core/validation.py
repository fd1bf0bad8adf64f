"""Input validation with errors a user can act on.

Every public entry point checks its arguments here, so that bad input fails with a
``ValueError`` that names the field, the value received and what is allowed, instead of
a stack trace from deep inside numpy or torch, or a silently wrong number.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import math
import numbers
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "check_choice",
    "check_int",
    "check_probability",
    "check_real",
    "closest",
    "import_from_cwd",
    "load_callable",
    "load_source_file",
    "source_module_name",
]


def closest(value: str, allowed: Iterable[str]) -> str | None:
    """The allowed name closest to ``value`` (difflib ratio >= 0.5), or None."""
    matches = difflib.get_close_matches(str(value), list(allowed), n=1, cutoff=0.5)
    return matches[0] if matches else None


def check_choice(field: str, value: object, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``; else raise naming the closest name."""
    allowed = tuple(allowed)
    if isinstance(value, str) and value in allowed:
        return value
    hint = closest(str(value), allowed) if isinstance(value, str) else None
    suggestion = f" Did you mean {hint!r}?" if hint else ""
    raise ValueError(
        f"{field}={value!r} is not valid; allowed: {', '.join(allowed)}.{suggestion}"
    )


def check_int(
    field: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Return ``value`` as an int if it is an integer in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{field}={value!r} must be an integer")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{field}={value} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{field}={value} must be <= {maximum}")
    return value


def check_real(
    field: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    strict_minimum: bool = False,
    strict_maximum: bool = False,
) -> float:
    """Return ``value`` as a finite float in the stated range (bounds open if strict)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field}={value!r} must be a real number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{field}={value!r} must be finite")
    if minimum is not None:
        if strict_minimum and value <= minimum:
            raise ValueError(f"{field}={value!r} must be > {minimum}")
        if not strict_minimum and value < minimum:
            raise ValueError(f"{field}={value!r} must be >= {minimum}")
    if maximum is not None:
        if strict_maximum and value >= maximum:
            raise ValueError(f"{field}={value!r} must be < {maximum}")
        if not strict_maximum and value > maximum:
            raise ValueError(f"{field}={value!r} must be <= {maximum}")
    return value


def check_probability(field: str, value: object, *, open_interval: bool = True) -> float:
    """Return ``value`` if it lies in (0, 1) (or [0, 1] when ``open_interval`` is False)."""
    return check_real(
        field,
        value,
        minimum=0.0,
        maximum=1.0,
        strict_minimum=open_interval,
        strict_maximum=open_interval,
    )


def source_module_name(path: str | Path) -> str:
    """The ``sys.modules`` name under which a source file is loaded: one per resolved path."""
    resolved = Path(path).resolve()
    return "_audit_source_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:16] + "_" + \
        "".join(c if c.isalnum() else "_" for c in resolved.stem)


def load_source_file(field: str, spec: str, file: str) -> ModuleType:
    """The module of Python source file ``file`` (a user's script), loaded once per resolved path.

    The script's folder is put first on ``sys.path`` while it runs, so its own sibling imports
    work; the module is registered in ``sys.modules`` (its ``__file__`` is the script, which
    is what :func:`audit.run.fingerprint.implementation_source` hashes).
    """
    path = Path(file)
    if not path.is_file():
        raise ValueError(
            f"{field}={spec!r}: no such file {str(path)!r} (relative paths are from {Path.cwd()})"
        )
    name = source_module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path.resolve())
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"{field}={spec!r}: cannot load {str(path)!r} as Python source")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def import_from_cwd(module_name: str) -> ModuleType:
    """Import ``module_name`` with the current folder first on ``sys.path``, as pytest and
    uvicorn do.

    The ``audit`` console script runs with its own folder (the venv's ``bin``) as
    ``sys.path[0]``, not the folder the user types in, so ``audit check-accountant
    mypackage.accounting:my_epsilon`` run beside ``mypackage/`` would not find it. The current
    folder is put first for the import only (a package already imported stays as it is) and
    removed again, so nothing else is shadowed afterwards.
    """
    cwd = os.getcwd()
    added = sys.path[:1] != [cwd] and sys.path[:1] != [""]
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def load_callable(
    field: str, path: str, *, hint: Callable[[ImportError], str] | None = None
) -> Callable[..., Any]:
    """The callable at import path ``path`` = ``"package.module:attribute"`` or
    ``"path/to/file.py:attribute"`` (a source file, :func:`load_source_file`); the attribute
    may be dotted, e.g. ``module:Class.method``. A module path is imported from the current
    folder first (:func:`import_from_cwd`), so a package beside the user's shell is found
    whether ``audit`` runs as a console script or as ``python -m audit.cli``.

    Raises ``ValueError`` naming ``field``: a path without ``module:attribute``, a module that
    cannot be imported (plus ``hint(error)``, e.g. the extra to install), a missing attribute,
    or one that is not callable.
    """
    text = str(path)
    # 'path/to/file.py:function' (a user's script) or 'package.module:function'
    module_name, _, attribute = text.rpartition(":") if ".py:" in text else text.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"{field}={path!r}: an import path must look like 'package.module:function' or "
            "'path/to/file.py:function'"
        )
    try:
        module = load_source_file(field, path, module_name) if module_name.endswith(".py") else \
            import_from_cwd(module_name)
    except ImportError as error:
        extra = hint(error) if hint is not None else ""
        raise ValueError(
            f"{field}={path!r}: cannot import {module_name!r}: {error}{extra}"
        ) from error
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(
                f"{field}={path!r}: module {module_name!r} has no attribute {attribute!r}"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{field}={path!r}: {attribute!r} is not callable")
    return target
