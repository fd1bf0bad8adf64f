"""Simple test statistics on all-iterates and last-iterate observations.

- ``known_step`` (deterministic batches): the attacker knows the canary's step in every
  epoch, so the sum of y over those steps is sufficient (Gaussian shift, mu-GDP with
  mu = sqrt(E)/sigma: docs/design.md §6.1). The steps come from ``observations.metadata
  ["canary_steps"]`` (indices into the T*E steps) when the producer records them, else the
  convention of the simulator and the engine: the canary is example 0, hence in batch 0 of
  every epoch (steps 0, T, 2T, ...).
- ``max``: max_t y_t (Chua et al. 2024's max test; persistent shuffle: after averaging the
  epochs per step index, as its theory does).
- ``sum``: sum_t y_t (optimal against a known total participation, e.g. deterministic).
- ``final_projection`` (last iterate): the last iterate's displacement along the canary
  direction, in the units of :class:`audit.core.observations.Observations` (``final`` =
  (b / (lr C)) <theta_0 - theta_T, u> + the known co-batch part, which for plain SGD equals
  sum_t y_t): gradient descent moves the parameters against the canary gradient C u, so a
  larger ``final`` means "IN".
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, epochs_view
from attacks.likelihood_ratio import fold_epochs
from audit.core.mechanism import Mechanism
from audit.core.observations import Observations

__all__ = ["CANARY_STEP", "FinalProjection", "KnownStep", "MaxTest", "SumTest", "canary_steps"]

CANARY_STEP = 0
"""Step index (within each epoch) of the canary under deterministic batches (example 0)."""


def canary_steps(observations: Observations) -> np.ndarray:
    """Indices of the steps that hold the canary under deterministic batching."""
    mechanism = observations.mechanism
    recorded = observations.metadata.get("canary_steps")
    if recorded is not None:
        steps = np.asarray(recorded, dtype=np.int64).ravel()
        if steps.size == 0 or steps.min() < 0 or steps.max() >= mechanism.total_steps:
            raise ValueError(
                f"metadata canary_steps={steps.tolist()} must be non-empty indices in [0, "
                f"{mechanism.total_steps})"
            )
        return steps
    return CANARY_STEP + mechanism.steps_per_epoch * np.arange(mechanism.epochs)


class KnownStep(Attack):
    """Sum of y at the canary's known steps (deterministic batching)."""

    name = "known_step"
    observation = "all_iterates"
    canary_laws = ("known_steps",)
    description = "sum of the observations at the canary's known steps"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        y = epochs_view(data, mechanism).reshape(data.shape[0], -1)
        return y[:, canary_steps(observations)].sum(axis=1, dtype=np.float64)


class MaxTest(Attack):
    """max_t y_t (persistent shuffle: max over step index of the epoch average)."""

    name = "max"
    observation = "all_iterates"
    description = "maximum observation over steps"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        epochs, _ = fold_epochs(data, mechanism)
        return epochs.reshape(epochs.shape[0], -1).max(axis=1).astype(np.float64)


class SumTest(Attack):
    """sum_t y_t."""

    name = "sum"
    observation = "all_iterates"
    description = "sum of the observations over all steps"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        return epochs_view(data, mechanism).reshape(data.shape[0], -1).sum(axis=1, dtype=np.float64)


class FinalProjection(Attack):
    """The last iterate's normalised displacement along the canary direction (higher = IN)."""

    name = "final_projection"
    observation = "last_iterate"
    description = (
        "the last iterate's normalised displacement along the canary direction (sum of the "
        "updates' canary components)"
    )

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        return np.asarray(data, dtype=np.float64).reshape(data.shape[0], -1)[:, 0]
