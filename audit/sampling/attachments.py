"""What a stage attaches to a sampler: one table per stage, keyed by the sampler's type.

A :class:`~audit.sampling.base.Sampler` owns its law (draws, inclusion probability, co-batch
moments, simulator signal). What another stage builds on that law lives with that stage, in
an :class:`Attachments` table filled where the stage's code is (docs/design.md §3.3):

- the theory's curves and calibration: :data:`audit.theory.registry.THEORIES`;
- the accountants' events: :data:`audit.accounting.events.EVENTS`;
- the Opacus DataLoader: :data:`audit.plugins.opacus_loaders.OPACUS_LOADERS`;
- the default attack: :data:`attacks.defaults.DEFAULT_ATTACKS`.

The key is the sampler's class, so an editor and the import contracts follow each entry to
the code it names; a lookup walks the class's method resolution order, as a method would be
inherited (a subclass of ``Poisson`` registered under another name gets Poisson's entries
until it registers its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from audit.sampling.base import Sampler, get_sampler

__all__ = ["Attachments"]

V = TypeVar("V")


class Attachments(Generic[V]):
    """One stage's table: a value per :class:`Sampler` class.

    Args:
        what: what the table holds, as the refusal names it (e.g. ``"theory (upper/lower
            trade-off curves)"``: "sampler 'x' has no theory (...)").
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[type[Sampler], V] = {}

    def register(self, sampler: type[Sampler], value: V, *, replace: bool = False) -> V:
        """Attach ``value`` to the sampler class ``sampler`` (ValueError if it has one already,
        unless ``replace``)."""
        if not (isinstance(sampler, type) and issubclass(sampler, Sampler)):
            raise ValueError(f"{self.what}: register a Sampler subclass, got {sampler!r}")
        if sampler in self._entries and not replace:
            raise ValueError(f"sampler {sampler.name!r} already has a {self.what}")
        self._entries[sampler] = value
        return value

    def unregister(self, sampler: type[Sampler]) -> None:
        """Remove the entry of ``sampler`` (tests)."""
        self._entries.pop(sampler, None)

    def find(self, sampler: Sampler | str) -> V | None:
        """The entry of ``sampler`` (a registered name or a :class:`Sampler`), or None.

        The first class of the sampler's method resolution order that has one."""
        chosen = get_sampler(sampler) if isinstance(sampler, str) else sampler
        for cls in type(chosen).__mro__:
            if cls in self._entries:
                return self._entries[cls]
        return None

    def get(self, sampler: Sampler | str, detail: str = "") -> V:
        """The entry of ``sampler``; ValueError naming the sampler and what it lacks otherwise."""
        value = self.find(sampler)
        if value is None:
            raise self.missing(sampler, detail)
        return value

    def missing(self, sampler: Sampler | str, detail: str = "") -> ValueError:
        """The error for a sampler without an entry: "sampler 'x' has no <what> (<detail>)"
        (:meth:`Sampler.missing`)."""
        chosen = get_sampler(sampler) if isinstance(sampler, str) else sampler
        return chosen.missing(self.what, detail)

    def __iter__(self) -> Iterator[type[Sampler]]:
        """The sampler classes with an entry, in registration order."""
        return iter(tuple(self._entries))
