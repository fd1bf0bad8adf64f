"""A pytest plugin: one test per grid cell of an accountant's check (docs/design.md §11.5).

Installed with the harness (entry point ``audit.accounting.pytest_plugin`` in group
``pytest11``); inert unless an accountant is named::

    pytest --accountant mypackage.accounting:my_epsilon --accountant-grid thorough

or in the ini file (``pytest.ini``, ``[tool.pytest.ini_options]``)::

    accountant = mypackage.accounting:my_epsilon
    accountant_grid = thorough            # default | thorough | path/to/grid.toml
    accountant_adjacency = add_remove     # zero_out (default) | add_remove | replace_one
    accountant_cache = .theory-cache      # default: .pytest_cache/d/dpsgd-audit-theory

Each cell is one test, its id naming the cell (``accountant[poisson-adversarial-s1-T100-E10-
d1e-05]``), asked in the grid's order (``thorough``: a random order of seed 0, each cell asked
twice). A cell fails when its verdict is ``unsound`` or ``invalid`` (the message is the cell's
sentence: the mechanism, by how much, at which delta), is skipped when the accountant answers
Unsupported, and passes otherwise (``unverified`` and ``loose`` are counted in the summary).
The theory's brackets are cached on disk and reused across processes
(:class:`audit.accounting.reference.TheoryCache`).

Inside a user's own tests, the ``accountant_check`` fixture (or the
``@pytest.mark.accountant_grid(grid, adjacency=...)`` marker with it) runs the whole check and
returns the :class:`audit.accounting.check.CheckReport`.

This module imports only pytest at import time: the harness is loaded when an accountant is
named, so the plugin costs nothing in a pytest run that does not use it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

__all__ = ["AccountantCellItem", "accountant_check"]

_STASH_COUNTS = "_dpsgd_audit_accountant_counts"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accountant", "accountant checker (dpsgd-audit)")
    group.addoption("--accountant", default=None, metavar="MODULE:FN",
                    help="check this accountant (module:function, a path.py:function or a "
                         "registered name): one test per grid cell")
    group.addoption("--accountant-grid", default=None, metavar="GRID",
                    help="default | thorough | a .toml/.json grid file (default: default)")
    group.addoption("--accountant-adjacency", default=None, metavar="RELATION",
                    help="zero_out (default) | add_remove | replace_one")
    group.addoption("--accountant-cache", default=None, metavar="DIR",
                    help="folder of the theory's cached brackets, or 'off'")
    parser.addini("accountant", "accountant to check (module:function)", default="")
    parser.addini("accountant_grid", "grid of the accountant check", default="default")
    parser.addini("accountant_adjacency", "neighbouring relation of the check", default="")
    parser.addini("accountant_cache", "folder of the theory's cached brackets, or 'off'",
                  default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "accountant_grid(grid, adjacency=None): the grid (and relation) of the accountant_check "
        "fixture",
    )


def _setting(config: pytest.Config, option: str, ini: str) -> str | None:
    value = config.getoption(option)
    if value is None:
        value = config.getini(ini) or None
    return None if value is None else str(value)


def _cache(config: pytest.Config) -> Any:
    value = _setting(config, "accountant_cache", "accountant_cache")
    if value is not None:
        if value.strip().lower() in ("off", "none"):
            return False
        path = Path(value)
        return path if path.is_absolute() else Path(config.rootpath) / path
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("dpsgd-audit-theory")
    return None


class AccountantCellItem(pytest.Item):
    """One grid cell of the accountant check, as a test."""

    def __init__(self, *, cell: Any, spec: Any, adjacency: str, repeats: int, cache: Any,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cell = cell
        self.spec = spec
        self.adjacency = adjacency
        self.repeats = repeats
        self.cache = cache
        self.result: Any = None

    def runtest(self) -> None:
        from audit.accounting.check import check_accountant

        report = check_accountant(self.spec, [self.cell], adjacency=self.adjacency,
                                  repeats=self.repeats, cache=self.cache)
        counts = self.config.stash.setdefault(_COUNTS, Counter())
        if report.unsupported:
            counts["unsupported"] += 1
            pytest.skip(f"unsupported: {report.unsupported[0].reason}")
        (self.result,) = report.cells
        counts[self.result.status] += 1
        self.user_properties.append(("verdict", self.result.status))
        if self.result.status in ("unsound", "invalid"):
            raise AccountantCellFailure(f"[{self.result.status}] {self.result.sentence()}")

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, AccountantCellFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"accountant cell {self.name}"


class AccountantCellFailure(AssertionError):
    """A cell's verdict is unsound or invalid (the message is its sentence)."""


_COUNTS = pytest.StashKey[Counter]()


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to the cells too
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    name = _setting(config, "accountant", "accountant")
    if not name:
        return
    from audit.accounting.adapters import get_accountant
    from audit.accounting.check import resolve_grid

    grid_name = _setting(config, "accountant_grid", "accountant_grid") or "default"
    grid_path = Path(grid_name)
    if grid_name not in ("default", "thorough") and not grid_path.is_absolute():
        grid_path = Path(config.rootpath) / grid_path
    grid = resolve_grid(grid_name if grid_name in ("default", "thorough") else grid_path)
    adjacency = _setting(config, "accountant_adjacency", "accountant_adjacency") or "zero_out"
    spec = get_accountant(name)
    cache = _cache(config)
    cells = list(grid.cells)
    if grid.order_seed is not None:
        from audit.core.seeding import rng_for

        order = rng_for(grid.order_seed, "check-accountant-order", 0).permutation(len(cells))
        cells = [cells[i] for i in order.tolist()]
    for cell in cells:
        items.append(AccountantCellItem.from_parent(
            session, name=f"accountant[{cell.cell_id()}]", cell=cell, spec=spec,
            adjacency=adjacency, repeats=grid.repeats, cache=cache,
        ))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    counts = config.stash.get(_COUNTS, None)
    if counts:
        order = ("unsound", "invalid", "unverified", "loose", "ok", "unsupported")
        terminalreporter.write_line(
            "accountant check: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in order)
        )


@pytest.fixture
def accountant_check(request: pytest.FixtureRequest) -> Any:
    """``accountant_check(accountant)`` -> the :class:`~audit.accounting.check.CheckReport`
    of ``accountant`` over the marker's grid (``@pytest.mark.accountant_grid(...)``; default
    ``default``), the theory cached as the plugin's."""
    from audit.accounting.check import check_accountant

    marker = request.node.get_closest_marker("accountant_grid")
    grid = marker.args[0] if marker and marker.args else "default"
    adjacency = marker.kwargs.get("adjacency") if marker else None
    cache = _cache(request.config)

    def run(accountant: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("adjacency", adjacency)
        kwargs.setdefault("cache", cache)
        return check_accountant(accountant, grid, **kwargs)

    return run
