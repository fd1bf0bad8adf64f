"""The theory attached to each sampler (audit.theory.registry): every registered sampler has an
entry, each entry names callables, and the dispatchers refuse a sampler without one by name."""

from __future__ import annotations

import pytest

from audit.core.mechanism import Mechanism
from audit.sampling import Sampler, registered_samplers
from audit.sampling.attachments import Attachments
from audit.sampling.deterministic import Deterministic
from audit.theory.registry import THEORIES, SamplerTheory, theory_for


def test_every_registered_sampler_has_a_theory():
    for sampler in registered_samplers():
        theory = THEORIES.find(sampler)
        assert isinstance(theory, SamplerTheory), sampler.name
        assert callable(theory.bounds), sampler.name
        for route in (theory.epsilon_at, theory.sigma_closed_form):
            assert route is None or callable(route), sampler.name


def test_entries_follow_the_class_and_refuse_by_name():
    """A subclass inherits its parent's entry until it registers its own (as a method would);
    a sampler without one is refused naming the sampler and the capability."""

    class Relabelled(Deterministic):
        name = "relabelled"

    assert THEORIES.find(Relabelled()) is THEORIES.find(Deterministic())

    class Bare(Sampler):
        name = "bare"

    table: Attachments[int] = Attachments("widget")
    table.register(Deterministic, 1)
    with pytest.raises(ValueError, match="already has a widget"):
        table.register(Deterministic, 2)
    with pytest.raises(ValueError, match="register a Sampler subclass"):
        table.register(int, 3)  # type: ignore[arg-type]
    assert table.find(Relabelled()) == 1 and table.find(Bare()) is None
    with pytest.raises(ValueError, match=r"sampler 'bare' has no widget \(why\)"):
        table.get(Bare(), "why")
    with pytest.raises(ValueError, match="sampler='nope'"):
        theory_for("nope")


def test_the_registered_curves_are_the_dispatchers():
    from audit.theory import bounds_for

    m = Mechanism("deterministic", sigma=1.0, steps_per_epoch=10, epochs=2)
    direct = theory_for("deterministic").bounds(m)
    assert float(bounds_for(m).upper.epsilon(1e-5)) == float(direct.upper.epsilon(1e-5))
