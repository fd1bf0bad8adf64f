"""The theory attached to each sampler: its curves and calibration routes (docs/design.md §3.3, §6).

A sampler's law lives in :mod:`audit.sampling`; its theory lives here, registered in
:data:`THEORIES` against the sampler's class (:class:`audit.sampling.attachments.Attachments`), so
that an editor and the import contracts follow each entry to its function; a sampler registered at
run time brings its theory with ``THEORIES.register(SamplerClass, SamplerTheory(...))``.
:func:`audit.theory.bounds.bounds_for` and :func:`audit.theory.calibration.sigma_for` read this
table; the built-ins' entries are registered by :mod:`audit.theory.samplers` when
:mod:`audit.theory` is imported, and tests/test_theory_registry.py checks that every registered
sampler has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from audit.core.mechanism import Mechanism
from audit.core.names import ADJACENCIES
from audit.core.validation import check_choice
from audit.sampling import get_sampler
from audit.sampling.attachments import Attachments
from audit.theory.types import Bounds

__all__ = ["THEORIES", "SamplerTheory", "bounds_under", "theory_for"]


@dataclass(frozen=True)
class SamplerTheory:
    """What the theory knows of one sampler.

    Attributes:
        bounds: ``f(mechanism) -> Bounds``, the upper (guarantee) and lower (achieved) curves.
        epsilon_at: a fast ``f(mechanism, delta, bound) -> eps`` for calibration (None: the
            calibration reads the curves of ``bounds``).
        sigma_closed_form: ``f(epsilon, delta, T, E) -> sigma`` where the calibration is
            closed-form (None: bisection on eps(sigma)).
        adjacency_bounds: ``f(mechanism, adjacency) -> Bounds`` under each neighbouring
            relation of :data:`audit.core.names.ADJACENCIES` (None: zero-out only, ``bounds``);
            read by :func:`bounds_under`.
    """

    bounds: Callable[[Mechanism], Bounds]
    epsilon_at: Callable[[Mechanism, float, str], float] | None = None
    sigma_closed_form: Callable[[float, float, int, int], float] | None = None
    adjacency_bounds: Callable[[Mechanism, str], Bounds] | None = None


THEORIES: Attachments[SamplerTheory] = Attachments("theory (upper/lower trade-off curves)")
"""The theory of each sampler class (a sampler without one is refused by name)."""


def theory_for(sampler: str) -> SamplerTheory:
    """The theory of the registered sampler ``sampler``.

    Raises:
        ValueError: an unknown sampler (naming the allowed ones), or one without theory
            ("sampler 'x' has no theory (upper/lower trade-off curves)").
    """
    return THEORIES.get(sampler)


def bounds_under(mechanism: Mechanism, adjacency: str = "zero_out") -> Bounds:
    """The curves of ``mechanism`` under ``adjacency`` (``zero_out``, ``add_remove``,
    ``replace_one``): the sampler's ``adjacency_bounds`` where it has one, its zero-out
    ``bounds`` for ``zero_out`` otherwise.

    Raises:
        ValueError: an unknown adjacency (naming the allowed ones), or a sampler without theory
            under it ("sampler 'x' has no theory under adjacency='add_remove' ...").
    """
    adjacency = check_choice("adjacency", adjacency, ADJACENCIES)
    theory = theory_for(mechanism.sampler)
    if theory.adjacency_bounds is not None:
        return theory.adjacency_bounds(mechanism, adjacency)
    if adjacency == "zero_out":
        return theory.bounds(mechanism)
    raise get_sampler(mechanism.sampler).missing(
        f"theory under adjacency={adjacency!r}", "only zero_out is known for it here"
    )
