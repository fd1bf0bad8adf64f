"""audit.core.exact_confidence: alpha passed on as confidence= bit for bit, without a warning."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from audit.core.confidence import ExactConfidence, significance
from audit.core.exact_confidence import exact_confidence
from audit.stats.binary import epsilon_lower_bound

TYPED = [0.05, 0.01, 0.1, 0.025, 0.001, 1e-6, 0.3, 0.05 / 2, 0.05 / 4]
SHARES = [0.05 / 3, 0.05 / 7, 0.05 / 9]  # 1 - alpha has more digits than a float near 1 holds


@pytest.mark.parametrize("alpha", TYPED + SHARES)
def test_the_confidence_gives_alpha_back_bit_for_bit(alpha):
    confidence = exact_confidence(alpha)
    assert isinstance(confidence, float) and isinstance(confidence, ExactConfidence)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # confidence= never warns
        assert significance(confidence, None, where="test") == alpha
    assert float(confidence) == pytest.approx(1 - alpha, abs=1e-16)
    assert pickle.loads(pickle.dumps(confidence)).alpha == alpha  # into joblib workers


@pytest.mark.parametrize("alpha", TYPED)
def test_a_typed_alpha_is_the_plain_decimal_confidence(alpha):
    # the float is the one a user types (0.95 for 0.05): the same alpha either way
    plain = float(exact_confidence(alpha))
    assert significance(plain, None, where="test") == alpha


def test_a_plain_float_would_lose_a_bonferroni_share():
    # why the class exists: 1 - 0.05 / 3 as a float does not map back to 0.05 / 3
    alpha = 0.05 / 3
    assert significance(float(exact_confidence(alpha)), None, where="test") != alpha


def test_either_spelling_computes_the_same_bound():
    rng = np.random.default_rng(3)
    scores_in, scores_out = rng.normal(1.0, 1.0, 2000), rng.normal(0.0, 1.0, 2000)
    for alpha in (0.05, 0.05 / 3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = epsilon_lower_bound(scores_in, scores_out, delta=1e-5, alpha=alpha,
                                      threshold="split", seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            new = epsilon_lower_bound(scores_in, scores_out, delta=1e-5,
                                      confidence=exact_confidence(alpha), threshold="split",
                                      seed=1)
        assert new.epsilon_lb == old.epsilon_lb


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0, float("nan")])
def test_alpha_outside_the_unit_interval_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        exact_confidence(alpha)
