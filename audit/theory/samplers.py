"""The built-in samplers' theories, registered in :data:`audit.theory.registry.THEORIES`.

- ``deterministic``: :func:`~audit.theory.bounds.deterministic_bounds`, the exact mu-GDP eps
  (:func:`~audit.theory.calibration.deterministic_epsilon_at`) and sigma in closed form
  (:func:`~audit.theory.calibration.gdp_sigma_for`);
- the shuffles: :func:`~audit.theory.shuffle.shuffle_bounds`, eps by
  :func:`~audit.theory.calibration.shuffle_epsilon_at`;
- ``poisson``: :func:`~audit.theory.bounds.poisson_bounds`, eps of its PLD
  (:func:`~audit.theory.calibration.poisson_epsilon_at`);
- ``truncated_poisson``: :func:`~audit.theory.bounds.truncated_poisson_bounds`;
- ``balls_and_bins``: :func:`~audit.theory.balls_and_bins.balls_and_bins_bounds`;
- ``sampled_without_replacement``:
  :func:`~audit.theory.sampled_without_replacement.sampled_without_replacement_bounds` (zero-out),
  under each adjacency
  :func:`~audit.theory.sampled_without_replacement.sampled_without_replacement_bounds_for`, and
  the revealed pair's eps in closed form
  (:func:`~audit.theory.sampled_without_replacement.sampled_without_replacement_epsilon_at`).

Where no fast eps is named the calibration reads the curves, and where no closed form is named it
bisects on eps(sigma) (§6.6). Registered by :mod:`audit.theory` on import (docs/design.md §3.3, §6).
"""

from __future__ import annotations

from audit.sampling.balls_and_bins import BallsAndBins
from audit.sampling.deterministic import Deterministic
from audit.sampling.dynamic_shuffle import DynamicShuffle
from audit.sampling.persistent_shuffle import PersistentShuffle
from audit.sampling.poisson import Poisson
from audit.sampling.sampled_without_replacement import SampledWithoutReplacement
from audit.sampling.truncated_poisson import TruncatedPoisson
from audit.theory.balls_and_bins import balls_and_bins_bounds
from audit.theory.bounds import deterministic_bounds, poisson_bounds, truncated_poisson_bounds
from audit.theory.calibration import (
    deterministic_epsilon_at,
    gdp_sigma_for,
    poisson_epsilon_at,
    shuffle_epsilon_at,
)
from audit.theory.registry import THEORIES, SamplerTheory
from audit.theory.sampled_without_replacement import (
    sampled_without_replacement_bounds,
    sampled_without_replacement_bounds_for,
    sampled_without_replacement_epsilon_at,
)
from audit.theory.shuffle import shuffle_bounds

__all__ = ["register_builtin_theories"]


def register_builtin_theories() -> None:
    """Attach each built-in sampler's curves and calibration routes (idempotent)."""
    shuffle = SamplerTheory(shuffle_bounds, epsilon_at=shuffle_epsilon_at)
    builtins = {
        Deterministic: SamplerTheory(
            deterministic_bounds,
            epsilon_at=deterministic_epsilon_at,
            sigma_closed_form=gdp_sigma_for,
        ),
        PersistentShuffle: shuffle,
        DynamicShuffle: shuffle,
        Poisson: SamplerTheory(poisson_bounds, epsilon_at=poisson_epsilon_at),
        TruncatedPoisson: SamplerTheory(truncated_poisson_bounds),
        BallsAndBins: SamplerTheory(balls_and_bins_bounds),
        SampledWithoutReplacement: SamplerTheory(
            sampled_without_replacement_bounds,
            epsilon_at=sampled_without_replacement_epsilon_at,
            adjacency_bounds=sampled_without_replacement_bounds_for,
        ),
    }
    for sampler, theory in builtins.items():
        THEORIES.register(sampler, theory, replace=True)
