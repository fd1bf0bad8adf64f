"""claim = "implementation": the audited code's own accountant is the claim.

A user's implementation reports its epsilon through a ``claimed_epsilon(setup, delta)``
attribute. Here the implementation is the correct numpy DP-SGD on deterministic batches
(exactly mu-GDP with mu = sqrt(E)/sigma = 1, so eps(1e-5) = 4.4 from the closed form),
and its "accountant" reports either a far too small epsilon (0.05: an accountant bug) or a
generous one (8). With 500 trials a side the known-step test separates N(1, 1) from N(0, 1)
well enough to refute eps = 0.05 (at FPR ~ 0.3 the claim needs FNR >= 0.66, the attack
has FNR ~ 0.24, a gap of over 7 binomial standard deviations on 250 held-out trials) and
never an eps above the truth.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from audit.report import run_audit
from audit.run.spec import parse_spec


@pytest.fixture
def spec(audit_toml, implementation_spec) -> str:
    """500 trainings a side of ``user_dpsgd:train``, its own claim (conftest ``audit_toml``)."""
    return audit_toml(implementation_spec, trials_in=500, trials_out=500, shard_size=250,
                      claim="implementation", n_jobs=1, training={"clip": 1.0})


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    def write(claimed: float) -> None:
        (tmp_path / "user_dpsgd.py").write_text(textwrap.dedent(f"""\
            from audit.plugins.broken import correct

            def train(data, canary, setup, seed):
                return correct(data, canary, setup, seed)

            def claimed_epsilon(setup, delta):
                return {claimed!r}

            train.claimed_epsilon = claimed_epsilon
            """))
        sys.modules.pop("user_dpsgd", None)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    sys.modules.pop("user_dpsgd", None)


@pytest.mark.parametrize(("claimed", "expected"), [(0.05, "violated"), (8.0, "consistent")])
def test_implementation_claim(tmp_path, user_module, spec, claimed, expected):
    user_module(claimed)
    run = tmp_path / "run"
    run.mkdir()
    (run / "audit.toml").write_text(spec)
    (cell,) = run_audit(run, progress=False, plots=False).cells
    assert cell.claim == "implementation"
    assert cell.claimed_epsilon == pytest.approx(claimed)
    assert cell.verdict == expected


def test_implementation_claim_needs_an_implementation(spec):
    text = spec.replace('implementation = "user_dpsgd:train"\n', "")
    with pytest.raises(ValueError, match=r"claim='implementation'.*needs implementation"):
        parse_spec(__import__("tomllib").loads(text))


def test_implementation_without_claimed_epsilon_is_a_clear_error(tmp_path, spec):
    run = tmp_path / "run"
    run.mkdir()
    (run / "audit.toml").write_text(spec.replace("user_dpsgd:train", "numpy-reference"))
    with pytest.raises(ValueError, match=r"reports no claimed epsilon"):
        run_audit(run, progress=False, plots=False)
    # nothing trained
    assert not (run / "shards").exists() or not any((run / "shards").glob("*.npz"))
