"""Issue 45: the corpus of accountants (examples/accountant_corpus/) on a reduced grid.

Every buggy accountant is caught (a cell ``unsound`` or ``invalid``) and no correct one is
``unsound``. The full check is ``python examples/accountant_corpus/run_corpus.py`` (``--grid
thorough``, results in examples/accountant_corpus/results.md); this grid keeps the cells
that catch each bug there at a fraction of the cost: Poisson (sigma 1, q 0.01) at 100, 1000
and 6000 steps (both sides of 5000: the wrapping counter; several step counts: the stale
cache, asked twice in the thorough order), deltas 1e-5 and 1e-10 (nan below 1e-8), 10^4 steps
at delta 1e-10 (the RDP conversion's error shows at large eps and small delta), and one
deterministic cell (samplers reported as Poisson; the replace-one relation). No tolerance is
tuned here: the verdicts are the checker's, with its stated allowances.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.accounting.check import Grid, load_grid
from audit.core.mechanism import Mechanism

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "accountant_corpus"
sys.path.insert(0, str(CORPUS))

from buggy import BUGS  # noqa: E402
from correct import CORRECT  # noqa: E402

from audit.accounting.check import check_accountant  # noqa: E402

pytestmark = pytest.mark.slow  # seconds per test (theory, subprocesses)

CELLS = tuple(load_grid([
    {"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 100, "epochs": [1, 10, 60],
     "delta": [1e-5, 1e-10]},
    (Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=100), 1e-10),
    (Mechanism("deterministic", sigma=1.0, steps_per_epoch=100, epochs=1), 1e-5),
]))
GRID = Grid("corpus", CELLS, repeats=2, order_seed=0)


@pytest.mark.parametrize(("name", "accountant", "adjacency"), BUGS, ids=[b[0] for b in BUGS])
def test_every_bug_is_caught(name, accountant, adjacency):
    report = check_accountant(accountant, GRID, adjacency=adjacency)
    assert report.unsound or report.invalid, report.table()
    assert report.exit_code() in (1, 5)


@pytest.mark.parametrize(("name", "accountant", "adjacency"),
                         [c for c in CORRECT if c[0] != "pld-accounting-random-allocation"],
                         ids=[c[0] for c in CORRECT if c[0] != "pld-accounting-random-allocation"])
def test_no_correct_accountant_is_unsound(name, accountant, adjacency):
    grid = GRID
    if name == "prv-accountant":  # its delta_error = delta/1000 is slow at delta 1e-10
        grid = Grid("corpus", tuple(c for c in CELLS if c.delta == 1e-5), repeats=2,
                    order_seed=0)
    report = check_accountant(accountant, grid, adjacency=adjacency)
    assert not report.unsound and not report.invalid, report.table()
    assert report.cells, "vacuous: no supported cell"
