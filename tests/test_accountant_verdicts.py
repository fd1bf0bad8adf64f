"""Issue 45: verdicts per cell, invalid answers, repeated asks, margins, grids, exit codes.

The bracket is injected (``reference=``) where the verdict logic is under test, so the numbers
are known exactly; the thorough grid's shape is checked without its theory.
"""

from __future__ import annotations

import json
import math

import pytest

from audit.accounting.adapters import Unsupported
from audit.accounting.check import (
    DEFAULT_GRID,
    EXIT_CODES,
    Grid,
    GridCell,
    Reference,
    check_accountant,
    load_grid,
    resolve_grid,
)
from audit.cli import main
from audit.core.mechanism import Mechanism

POISSON = Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=10)
LONG = Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=100)
DETERMINISTIC = Mechanism("deterministic", sigma=1.0, steps_per_epoch=100, epochs=1)
SHUFFLE = Mechanism("dynamic_shuffle", sigma=1.0, steps_per_epoch=100, epochs=1)


def bracket(mechanism: Mechanism, delta: float) -> Reference:
    """lower = 1 + E/10, upper = lower + 0.01: a narrow bracket that grows with the epochs."""
    lower = 1.0 + mechanism.epochs / 10
    return Reference(lower, lower + 0.01, "stand-in lower", "stand-in upper")


GRID = [GridCell(POISSON, 1e-5), GridCell(LONG, 1e-5), GridCell(POISSON, 1e-10),
        GridCell(DETERMINISTIC, 1e-5), GridCell(SHUFFLE, 1e-5)]


def misbehaving(mechanism: Mechanism, delta: float):
    """nan at delta 1e-10, an exception for deterministic, Unsupported for shuffles, else the
    stand-in's upper bound."""
    if mechanism.sampler == "dynamic_shuffle":
        return Unsupported("no shuffles")
    if mechanism.sampler == "deterministic":
        raise ZeroDivisionError("float division by zero")
    if delta < 1e-8:
        return math.nan
    return bracket(mechanism, delta).upper


def test_invalid_cells_do_not_stop_the_check():
    report = check_accountant(misbehaving, GRID, reference=bracket)
    verdicts = {(c.cell.mechanism.sampler, c.cell.mechanism.epochs, c.cell.delta): c.status
                for c in report.cells}
    assert verdicts == {("poisson", 10, 1e-5): "ok", ("poisson", 100, 1e-5): "ok",
                        ("poisson", 10, 1e-10): "invalid", ("deterministic", 1, 1e-5): "invalid"}
    assert [u.reason for u in report.unsupported] == ["no shuffles"]
    errors = {c.cell.mechanism.sampler + str(c.cell.delta): c.error for c in report.invalid}
    assert errors["poisson1e-10"] == "returned nan"
    assert errors["deterministic1e-05"] == "raised ZeroDivisionError: float division by zero"
    assert report.exit_code() == EXIT_CODES["invalid"] == 5
    sentence = next(c for c in report.invalid if c.cell.delta == 1e-10).sentence()
    assert "delta 1e-10" in sentence and "nan" in sentence and "poisson" in sentence
    json.dumps(report.to_dict())  # nan claims serialise


@pytest.mark.parametrize(
    ("answer", "message"),
    [(-0.5, "negative"), (math.inf, "inf where the proven guarantee is finite"),
     ("1.0", "not a float"), (None, "not a float"), (True, "not a float")],
)
def test_bad_answers_are_invalid_with_their_reason(answer, message):
    report = check_accountant(lambda m, d: answer, [GridCell(POISSON, 1e-5)], reference=bracket)
    (cell,) = report.cells
    assert cell.status == "invalid"
    assert message in cell.error


def test_inf_is_ok_where_no_finite_guarantee_is_known():
    report = check_accountant(lambda m, d: math.inf, [GridCell(POISSON, 1e-5)],
                              reference=lambda m, d: Reference(1.0, None))
    assert report.cells[0].status == "ok"


def test_a_stateful_accountant_is_invalid_with_both_values():
    calls = []

    def composing(mechanism, delta):  # composes every call into one running total
        calls.append(mechanism.total_steps)
        return 1.0 + 0.001 * sum(calls)

    report = check_accountant(composing, [GridCell(POISSON, 1e-5)], reference=bracket,
                              repeats=2)
    (cell,) = report.cells
    assert cell.status == "invalid"
    assert len(cell.answers) == 2 and cell.answers[0] != cell.answers[1]
    assert repr(cell.answers[0]) in cell.error and repr(cell.answers[1]) in cell.error


def test_a_cache_that_ignores_the_step_count_is_unsound_in_a_random_order():
    """Asked in a random order, a cache keyed without the step count answers every later cell
    with the first one's eps: some longer run is then below its lower bound, unless the first
    cell asked was the longest (probability 1/k for k step counts; 1/k^2 with two deltas
    cached apart, as in the thorough grid). Exactly that, for ten order seeds."""
    cells = [GridCell(POISSON.with_(epochs=e), 1e-5) for e in (1, 10, 50, 100)]
    for seed in range(10):
        stale: dict[float, float] = {}
        first: list[int] = []

        def cached(mechanism, delta, stale=stale, first=first):
            if not stale:
                first.append(mechanism.epochs)
            return stale.setdefault(mechanism.sigma, bracket(mechanism, delta).upper)

        report = check_accountant(cached, cells, reference=bracket, order_seed=seed)
        assert bool(report.unsound) == (first[0] != 100), f"order seed {seed}"
        assert bool(report.loose) == (first[0] != 1)
    # the order is reproducible from its seed
    asked: list[int] = []
    check_accountant(lambda m, d: asked.append(m.epochs) or 5.0, cells, reference=bracket,
                     order_seed=3, repeats=2)
    again: list[int] = []
    check_accountant(lambda m, d: again.append(m.epochs) or 5.0, cells, reference=bracket,
                     order_seed=3, repeats=2)
    assert asked == again and sorted(asked) == sorted([1, 10, 50, 100] * 2)


def test_margins_and_the_failing_sentence():
    report = check_accountant(lambda m, d: 1.9, [GridCell(POISSON, 1e-5)], reference=bracket)
    (cell,) = report.cells
    assert cell.status == "unsound"  # lower 2.0
    assert cell.ratio == pytest.approx(0.95)
    assert cell.difference == pytest.approx(-0.1)
    sentence = cell.sentence()
    for part in ("poisson batches", "sigma = 1", "1000 steps", "q = 0.01", "adversarial",
                 "zero_out adjacency", "delta 1e-05", "0.1 below the proven lower bound 2",
                 "5% under", "claim/lower = 0.95"):
        assert part in sentence, (part, sentence)
    table = report.table()
    assert "claim/lower" in table and "0.95000" in table and "-0.1" in table
    data = report.to_dict()["cells"][0]
    assert data["claim_over_lower"] == pytest.approx(0.95)
    assert data["claim_minus_lower"] == pytest.approx(-0.1)


def test_a_cell_listed_twice_is_checked_once():
    cells = load_grid([(POISSON, 1e-5), {"sampler": "poisson", "sigma": 1.0,
                                         "steps_per_epoch": 100, "epochs": [10, 100],
                                         "delta": 1e-5}])
    assert cells == [GridCell(POISSON, 1e-5), GridCell(LONG, 1e-5)]


def test_thorough_grid_shape():
    grid = resolve_grid("thorough")
    assert grid.repeats == 2 and grid.order_seed == 0
    cells = grid.cells
    assert len(cells) == len(set(cells))
    assert set(load_grid("default")) <= set(cells)
    assert max(c.mechanism.total_steps for c in cells) >= 100_000
    assert min(c.delta for c in cells) <= 1e-10
    # the same (sigma, q) at growing step counts, on both sides of 5000 steps
    steps = sorted({c.mechanism.total_steps for c in cells
                    if c.mechanism.sampler == "poisson" and c.mechanism.sigma == 1.0
                    and c.mechanism.steps_per_epoch == 100})
    assert steps[0] <= 1000 and any(s > 5000 for s in steps) and steps[-1] >= 100_000
    assert len(steps) >= 4
    # small epsilons: high noise over few steps
    assert any(c.mechanism.sigma >= 5 for c in cells)
    from audit.sampling import registered_samplers
    from audit.theory.registry import THEORIES

    with_theory = {s.name for s in registered_samplers() if THEORIES.find(s.name) is not None}
    assert with_theory <= {c.mechanism.sampler for c in cells}
    assert resolve_grid("default") == Grid("default", tuple(load_grid(list(DEFAULT_GRID))))


def test_cli_exit_codes_follow_fail_on(monkeypatch, capsys, tmp_path):
    from audit.accounting import check as accountant_check

    monkeypatch.setenv("AUDIT_THEORY_CACHE", "off")
    monkeypatch.setattr(accountant_check, "theory_reference", lambda m, d, **kw: bracket(m, d))
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 100,
                                 "epochs": [10, 100], "delta": 1e-5}]))
    module = tmp_path / "between.py"
    module.write_text("def claim(m, d):\n    return 2.005 if m.epochs == 10 else 100.0\n")
    base = ["check-accountant", f"{module}:claim", "--grid", str(grid), "--quiet"]
    assert main(base) == 0  # unverified and loose do not fail by default
    out = capsys.readouterr().out
    assert "1 unverified" in out and "1 loose" in out and "[unverified]" in out
    assert main([*base, "--fail-on", "unsound,invalid,unverified,loose"]) == 6
    assert main([*base, "--fail-on", "loose"]) == 7
    capsys.readouterr()
    assert main([*base, "--fail-on", "unsond"]) == 2
    assert "Did you mean 'unsound'" in capsys.readouterr().err
    assert main([*base, "--adjacency", "add-remove"]) == 2
    assert "Did you mean 'add_remove'" in capsys.readouterr().err


def test_assert_accountant_sound_fails_on_invalid_answers():
    from audit.accounting.testing import AccountantUnsoundError, assert_accountant_sound

    with pytest.raises(AccountantUnsoundError, match="invalid answers on 1 of 3") as info:
        assert_accountant_sound(misbehaving, GRID[:3:2] + GRID[1:2], reference=bracket)
    assert "returned nan" in str(info.value)
