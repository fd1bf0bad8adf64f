"""Black-box attacks on the canary's loss on the final model.

- ``loss``: score = -loss (the canary is fitted better when it was trained on; Yeom et al.
  2018's loss threshold attack).
- ``lira``: a LiRA-style Gaussian likelihood ratio (Carlini et al. 2022, *Membership
  Inference Attacks From First Principles*, arXiv 2112.03570). The loss is mapped to the
  logit-scaled confidence phi = log(p / (1 - p)) with p = exp(-loss), which is close to
  Gaussian across trainings; a Gaussian is fitted to phi on IN and on OUT *reference*
  trainings (separate trials, never the audited ones, else the threshold-selection bias of
  audit.stats.binary comes back through the fit), and the score is
  log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2).
  Use ``get_attack("lira", reference=obs)`` or ``LiRA().fit(obs)``; scoring before fitting
  raises ValueError.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from attacks.base import Attack
from audit.core.mechanism import Mechanism
from audit.core.observations import Observations

__all__ = ["LiRA", "LossAttack", "logit_confidence"]


def logit_confidence(loss: np.ndarray) -> np.ndarray:
    """phi = log(p/(1-p)) with p = exp(-loss): phi = -loss - log(1 - exp(-loss))."""
    loss = np.clip(np.asarray(loss, dtype=np.float64), 1e-12, None)
    return -loss - np.log(-np.expm1(-loss))


class LossAttack(Attack):
    """score = -loss of the canary on the final model."""

    name = "loss"
    observation = "black_box"
    description = "minus the canary's loss on the final model"

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        return -np.asarray(data, dtype=np.float64).ravel()


class LiRA(Attack):
    """Gaussian likelihood ratio of the logit-scaled confidence, fitted on reference trials."""

    name = "lira"
    observation = "black_box"
    description = "LiRA-style Gaussian likelihood ratio fitted on separate reference trials"

    def __init__(self, reference: Observations | None = None) -> None:
        self.fitted: tuple[float, float, float, float] | None = None
        if reference is not None:
            self.fit(reference)

    def fit(self, reference: Observations) -> LiRA:
        """Fit (mu_in, s_in, mu_out, s_out) on reference trials' losses; returns self."""
        self.check(reference)
        loss_in, loss_out = reference.pair("black_box")
        phi_in, phi_out = logit_confidence(loss_in), logit_confidence(loss_out)
        if phi_in.size < 2 or phi_out.size < 2:
            raise ValueError("lira reference needs at least 2 IN and 2 OUT trials")
        floor = 1e-6
        self.fitted = (
            float(phi_in.mean()), max(float(phi_in.std(ddof=1)), floor),
            float(phi_out.mean()), max(float(phi_out.std(ddof=1)), floor),
        )
        return self

    def score(
        self, data: np.ndarray, mechanism: Mechanism, observations: Observations
    ) -> np.ndarray:
        if self.fitted is None:
            raise ValueError(
                "attack 'lira' is not fitted: call LiRA().fit(reference) or get_attack('lira', "
                "reference=...) with Observations of separate reference trials"
            )
        mu_in, s_in, mu_out, s_out = self.fitted
        phi = logit_confidence(data)
        return norm.logpdf(phi, mu_in, s_in) - norm.logpdf(phi, mu_out, s_out)
