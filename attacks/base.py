"""The interface every attack implements: observations in, one score per trial out.

An :class:`Attack` declares the observation kind it needs (``all_iterates``,
``last_iterate`` or ``black_box``) and the samplers it is built for, and turns an
:class:`audit.core.observations.Observations` into ``(scores_in, scores_out)``, higher meaning
"canary IN". It reads the mechanism (sigma, q, T, E, sampler) from ``observations.mechanism``
and refuses a wrong observation kind or an incompatible sampler with a ``ValueError``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from audit.core.mechanism import Mechanism
from audit.core.observations import Observations
from audit.sampling import get_sampler, sampler_names

__all__ = ["CHUNK_ROWS", "Attack", "epochs_view"]

CHUNK_ROWS = 1 << 16
"""Trials scored at once, to bound the memory of temporaries on 1e6-trial audits."""


class _SupportedSamplers:
    """``Attack.samplers``: the registered samplers whose canary law the attack is built on."""

    def __get__(self, obj: object, cls: type[Attack]) -> tuple[str, ...]:
        return tuple(name for name in sampler_names() if cls.supports(name))


class Attack:
    """Base class: subclasses set ``name``, ``observation``, ``samplers`` and implement
    ``score``."""

    name: ClassVar[str] = "abstract"
    observation: ClassVar[str] = "all_iterates"
    samplers = _SupportedSamplers()
    canary_laws: ClassVar[tuple[str, ...] | None] = None
    """The canary laws (:attr:`audit.sampling.Sampler.canary_law`) the attack is built on (None:
    any)."""

    @classmethod
    def supports(cls, sampler: str) -> bool:
        """Whether the attack is built for ``sampler``'s canary law (ValueError: unknown
        sampler)."""
        return cls.canary_laws is None or get_sampler(sampler).canary_law in cls.canary_laws
    description: ClassVar[str] = ""

    def check(self, observations: Observations) -> None:
        """Raise ValueError if this attack cannot score ``observations``."""
        if not isinstance(observations, Observations):
            raise ValueError(
                f"attack {self.name!r} needs an audit.core.observations.Observations, got "
                f"{type(observations).__name__}"
            )
        sampler = observations.mechanism.sampler
        if not self.supports(sampler):
            raise ValueError(
                f"attack {self.name!r} is built for sampler in ({', '.join(self.samplers)}), "
                f"not sampler={sampler!r}; use attacks.default_attack(mechanism) for the best one"
            )
        if self.observation not in observations.available:
            have = ", ".join(observations.available) or "none"
            raise ValueError(
                f"attack {self.name!r} needs observation={self.observation!r}; these observations "
                f"have: {have}"
            )

    def scores(self, observations: Observations) -> tuple[np.ndarray, np.ndarray]:
        """(scores_in, scores_out), one float per trial, higher = "canary IN"."""
        self.check(observations)
        data_in, data_out = observations.pair(self.observation)
        mechanism = observations.mechanism
        return (
            self._score_chunked(np.asarray(data_in), mechanism, observations),
            self._score_chunked(np.asarray(data_out), mechanism, observations),
        )

    def _score_chunked(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        if data.ndim >= 1 and data.shape[0] > CHUNK_ROWS:
            return np.concatenate(
                [
                    self.score(data[i : i + CHUNK_ROWS], mechanism, observations)
                    for i in range(0, data.shape[0], CHUNK_ROWS)
                ]
            )
        return self.score(data, mechanism, observations)

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        """Scores of the trials in ``data`` (one observation array of one side).

        The method every attack implements (docs/design.md §7): a likelihood ratio of the
        cell's pair (§7.1), a simple statistic (§7.2) or a black-box score (§7.3). Callers use
        :meth:`scores`, which checks the observations first and calls this on chunks of at most
        :data:`CHUNK_ROWS` trials; a score must therefore depend on its own trial only.

        Args:
            data: one side's observation array of kind :attr:`observation`, one row per trial:
                ``all_iterates`` (trials, T*E) projections y_t in units of C with the
                attacker's add-back (docs/design.md §3.5), ``last_iterate`` (trials,),
                ``black_box`` (trials,) losses.
            mechanism: the audited :class:`audit.core.mechanism.Mechanism` (sigma, q, T, E, sampler,
                threat model), which the attack reads its parameters from.
            observations: the whole :class:`audit.core.observations.Observations`, for attacks that
                need more than ``data`` (e.g. ``known_step`` reads the recorded canary steps).

        Returns:
            float64 array (trials,): one score per row of ``data``, higher meaning "canary IN".

        Raises:
            NotImplementedError: on the base class (a subclass must override it).
            ValueError: in subclasses, ``data`` of the wrong shape for the mechanism (e.g.
                all iterates not of shape (trials, T*E)) or missing what the attack needs
                (e.g. ``lira`` not fitted on reference trainings, invalid recorded canary
                steps); the message names the attack.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, observation={self.observation!r})"


def epochs_view(y: np.ndarray, mechanism: Mechanism) -> np.ndarray:
    """All-iterates ``(trials, T*E)`` as ``(trials, E, T)``; a clear error on a wrong shape."""
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[1] != mechanism.total_steps:
        raise ValueError(
            "all_iterates observations must have shape (trials, "
            f"total_steps={mechanism.total_steps}) "
            f"for steps_per_epoch={mechanism.steps_per_epoch}, epochs={mechanism.epochs}; got "
            f"{y.shape}"
        )
    return y.reshape(y.shape[0], mechanism.epochs, mechanism.steps_per_epoch)
