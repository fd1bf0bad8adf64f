"""audit.core.exact_confidence.levels: alpha passed on as confidence= only where bit-identical."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from audit.core.confidence import significance
from audit.core.exact_confidence import levels
from audit.stats.binary import epsilon_lower_bound


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1, 0.025, 0.001, 1e-6, 0.3, 0.05 / 2, 0.05 / 4])
def test_typed_alphas_become_confidences_that_give_them_back(alpha):
    confidence, deprecated = levels(alpha)
    assert deprecated is None and confidence is not None
    assert significance(confidence, None, where="test") == alpha  # the same float, bit for bit


@pytest.mark.parametrize("cells", [3, 7, 9])
def test_a_bonferroni_share_stays_alpha(cells):
    # 1 - 0.05 / 3 has more digits than a float near 1 holds: as confidence= it would round
    alpha = 0.05 / cells
    assert levels(alpha) == (None, alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert significance(None, alpha, where="test") == alpha


def test_either_spelling_computes_the_same_bound():
    rng = np.random.default_rng(3)
    scores_in, scores_out = rng.normal(1.0, 1.0, 2000), rng.normal(0.0, 1.0, 2000)
    for alpha in (0.05, 0.05 / 3):
        confidence, deprecated = levels(alpha)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = epsilon_lower_bound(scores_in, scores_out, delta=1e-5, alpha=alpha,
                                      threshold="split", seed=1)
        with warnings.catch_warnings():
            # confidence= never warns; the Bonferroni share keeps the deprecated spelling
            warnings.simplefilter("error" if deprecated is None else "ignore", DeprecationWarning)
            new = epsilon_lower_bound(scores_in, scores_out, delta=1e-5, confidence=confidence,
                                      alpha=deprecated, threshold="split", seed=1)
        assert new.epsilon_lb == old.epsilon_lb


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0])
def test_alpha_outside_the_unit_interval_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        levels(alpha)
