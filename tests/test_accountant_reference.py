"""Issue 45 items 4 and 7: the relations' theory, the Python reference and its disk cache.

Independent references: the closed form of Gaussian DP (deterministic batches, and Poisson at
q = 1, where the replace-one pair is N(1, s^2) vs N(-1, s^2): mu = 2 sqrt(steps) / sigma) and
dp_accounting's PLD under each NeighboringRelation. Tolerances: the closed form is exact to
1e-9 after bisection; the lattice curves are exact for the stored curve, off the true one by
the discretisation (1e-4 per step, pessimistic for the upper, dominated for the lower), so
brackets are checked to contain the reference and to be narrow (width < 1e-3 at these cells,
measured 2e-5).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from audit.accounting.adjacency import ADJACENCIES, adjacent_bounds
from audit.accounting.check import check_accountant
from audit.accounting.reference import (
    Bracket,
    TheoryCache,
    delta_bracket,
    epsilon_bracket,
    mechanism_epsilon_bracket,
)
from audit.core.mechanism import Mechanism
from audit.theory import bounds_for
from audit.theory.curve import gdp_epsilon

POISSON = Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=10)


def eps(curve, delta):
    return float(curve.epsilon(np.array([delta]))[0])


def test_epsilon_bracket_of_the_poisson_reference_cell():
    b = epsilon_bracket("poisson", sigma=1.0, q=0.01, steps=1000, delta=1e-5, cache=False)
    assert isinstance(b, Bracket) and b.quantity == "epsilon" and b.adjacency == "zero_out"
    assert b.lower <= 1.8282 + 1e-3 and b.upper >= 1.8282 - 1e-3  # REFERENCES.md: PLD 1.8282
    assert 0 <= b.width < 1e-3
    assert b == epsilon_bracket(POISSON, delta=1e-5, cache=False)


def test_delta_bracket_inverts_the_epsilon_bracket():
    b = epsilon_bracket(POISSON, delta=1e-5, cache=False)
    d = delta_bracket(POISSON, epsilon=b.upper, cache=False)
    assert d.quantity == "delta" and d.lower <= 1e-5 * (1 + 1e-6) and d.upper <= 1e-5 * 1.001
    d_low = delta_bracket(POISSON, epsilon=b.lower, cache=False)
    assert d_low.upper >= 1e-5 * (1 - 1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"q": 0.03, "steps": 100}, "1/T for an integer T"),
     ({"q": 0.01, "steps": 150}, "multiple of steps_per_epoch"),
     ({"q": 0.01, "steps": 100, "adjacency": "add-remove"}, "Did you mean 'add_remove'"),
     ({"q": 0.01, "steps": 100, "delta": 0.0}, "delta")],
)
def test_reference_input_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        epsilon_bracket("poisson", sigma=1.0, cache=False, **{"delta": 1e-5, **kwargs})


def test_add_remove_equals_zero_out_for_independent_participation():
    zero = bounds_for(POISSON)
    added = adjacent_bounds(POISSON, "add_remove")
    assert added.upper is zero.upper and added.lower is zero.lower
    bb = Mechanism("balls_and_bins", sigma=1.0, steps_per_epoch=10, epochs=3)
    assert adjacent_bounds(bb, "add_remove").upper is bounds_for(bb).upper


def test_add_remove_without_known_guarantee_is_lower_only():
    shuffle = Mechanism("dynamic_shuffle", sigma=1.0, steps_per_epoch=10, epochs=2)
    adversarial = adjacent_bounds(shuffle, "add_remove")
    assert adversarial.upper is None and adversarial.lower is not None
    assert adversarial.lower is bounds_for(shuffle.with_(threat_model="isolated")).lower
    assert "no guarantee is known" in " ".join(adversarial.notes)
    isolated = adjacent_bounds(shuffle.with_(threat_model="isolated"), "add_remove")
    assert isolated.upper is bounds_for(shuffle.with_(threat_model="isolated")).upper
    # deterministic, adversarial: how n - 1 examples are laid into batches is not fixed
    det = Mechanism("deterministic", sigma=1.0, steps_per_epoch=100, epochs=1)
    assert adjacent_bounds(det, "add_remove").upper is None


def test_replace_one_deterministic_and_shuffles_are_gaussian_dp_with_double_sensitivity():
    det = Mechanism("deterministic", sigma=2.0, steps_per_epoch=100, epochs=10)
    exact = float(gdp_epsilon(1e-5, 2 * math.sqrt(10) / 2.0))
    bounds = adjacent_bounds(det, "replace_one")
    assert eps(bounds.lower, 1e-5) == pytest.approx(exact, abs=1e-6)
    assert eps(bounds.upper, 1e-5) == pytest.approx(exact, abs=1e-6)
    shuffle = Mechanism("persistent_shuffle", sigma=2.0, steps_per_epoch=100, epochs=10)
    sb = adjacent_bounds(shuffle, "replace_one")
    assert eps(sb.upper, 1e-5) == pytest.approx(exact, abs=1e-6)
    assert sb.lower is bounds_for(shuffle).lower  # the zero-out pair is a replace-one pair


def test_poisson_replace_one_at_q_one_is_the_closed_form():
    # q = 1 (T = 1): N(1, s^2) vs N(-1, s^2) per step, 10 steps: mu = 2 sqrt(10) / sigma
    m = Mechanism("poisson", sigma=2.0, steps_per_epoch=1, epochs=10)
    b = mechanism_epsilon_bracket(m, 1e-5, adjacency="replace_one", cache=False)
    exact = float(gdp_epsilon(1e-5, 2 * math.sqrt(10) / 2.0))
    assert b.lower <= exact + 1e-9 <= b.upper + 2e-9
    assert b.width < 1e-3


def test_poisson_replace_one_brackets_dp_accounting():
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.privacy_accountant import NeighboringRelation

    m = Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=1)
    b = mechanism_epsilon_bracket(m, 1e-5, adjacency="replace_one", cache=False)
    reference = pld_lib.from_gaussian_mechanism(
        1.0, sampling_prob=0.01, value_discretization_interval=1e-4,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
    ).self_compose(100).get_epsilon_for_delta(1e-5)
    assert b.lower - 1e-9 <= reference <= b.upper + 1e-3
    zero = mechanism_epsilon_bracket(m, 1e-5, cache=False)
    assert b.lower > zero.upper  # replacing is worse than zeroing


@pytest.mark.parametrize("sampler", ["deterministic", "poisson", "persistent_shuffle",
                                     "dynamic_shuffle", "balls_and_bins"])
@pytest.mark.parametrize("threat_model", ["adversarial", "isolated"])
def test_every_relation_has_a_lower_bound(sampler, threat_model):
    m = Mechanism(sampler, sigma=1.0, steps_per_epoch=10, epochs=2, threat_model=threat_model)
    for adjacency in ADJACENCIES:
        bounds = adjacent_bounds(m, adjacency)
        assert bounds.lower is not None, adjacency
        if bounds.upper is not None:
            assert eps(bounds.lower, 1e-5) <= eps(bounds.upper, 1e-5) + 1e-3, adjacency


def test_mismatch_is_named_and_add_remove_claims_fail_replace_one():
    def add_remove_pld(mechanism, delta):
        from audit.accounting.adapters import dp_accounting_pld

        return dp_accounting_pld(mechanism, delta)

    add_remove_pld.adjacency = "add_remove"
    cell = [(Mechanism("deterministic", sigma=2.0, steps_per_epoch=100, epochs=10), 1e-5)]
    report = check_accountant(add_remove_pld, cell, adjacency="replace_one")
    assert report.mismatch and "add_remove" in report.mismatch and "replace_one" in report.mismatch
    assert report.cells[0].status == "unsound"
    assert "replace_one adjacency" in report.cells[0].sentence()
    assert report.to_dict()["claimed_adjacency"] == "add_remove"
    assert check_accountant("dp-accounting-pld", cell).mismatch  # builtins state add_remove
    assert check_accountant("dp-accounting-pld", cell, adjacency="add_remove").mismatch is None


def test_disk_cache_round_trip_and_reuse_across_processes(tmp_path):
    cache = TheoryCache(tmp_path)
    first = mechanism_epsilon_bracket(POISSON, 1e-5, cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    assert mechanism_epsilon_bracket(POISSON, 1e-5, cache=cache) == first
    assert cache.hits == 1
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["key"]["code"] and data["key"]["adjacency"] == "zero_out"
    # another process reads it (no theory computed: the curve module is never imported)
    code = (
        "import sys, json\n"
        "from audit.accounting.reference import TheoryCache, mechanism_epsilon_bracket\n"
        "from audit.core.mechanism import Mechanism\n"
        f"c = TheoryCache({str(tmp_path)!r})\n"
        "b = mechanism_epsilon_bracket(Mechanism('poisson', sigma=1.0, steps_per_epoch=100,"
        " epochs=10), 1e-5, cache=c)\n"
        "print(json.dumps([c.hits, b.lower, b.upper, 'dp_accounting.pld.pld_pmf' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    hits, lower, upper, composed = json.loads(out)
    assert (hits, lower, upper, composed) == (1, first.lower, first.upper, False)
    # a damaged file is recomputed, not trusted
    files[0].write_text("{not json")
    assert mechanism_epsilon_bracket(POISSON, 1e-5, cache=TheoryCache(tmp_path)) == first


def test_a_sampler_registered_later_is_checked_without_an_entry():
    """A sampler with theory registered at run time gets cells in the thorough grid and the
    generic relations (no entry in audit.accounting.adjacency or check.py)."""
    from audit.accounting.check import load_grid
    from audit.sampling import register_sampler
    from audit.sampling.base import Sampler, unregister_sampler
    from audit.theory.bounds import deterministic_bounds
    from audit.theory.registry import THEORIES, SamplerTheory

    class KnownFixed(Sampler):  # one known step per epoch, the deterministic theory
        name = "known_fixed_test"
        fixed_size = True
        canary_law = "known_steps"

    register_sampler(KnownFixed())
    THEORIES.register(KnownFixed, SamplerTheory(bounds=deterministic_bounds))
    try:
        cells = [c for c in load_grid("thorough") if c.mechanism.sampler == "known_fixed_test"]
        assert {c.mechanism.threat_model for c in cells} == {"adversarial", "isolated"}
        assert min(c.delta for c in cells) == 1e-10
        m = cells[0].mechanism
        replace = adjacent_bounds(m, "replace_one")
        mu = 2 * math.sqrt(m.epochs) / m.sigma
        assert eps(replace.upper, 1e-5) == pytest.approx(float(gdp_epsilon(1e-5, mu)), abs=1e-6)
        removal = adjacent_bounds(m.with_(threat_model="adversarial"), "add_remove")
        assert removal.upper is None and removal.lower is not None
    finally:
        THEORIES.unregister(KnownFixed)
        unregister_sampler("known_fixed_test")
