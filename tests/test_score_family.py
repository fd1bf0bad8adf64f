"""The score family and its sound choice (attacks.score_family, audit.run.score_selection;
issue 33 item 3): the statistics, the selection record, the one-run audit's default path, and
the power against a reused noise that the likelihood ratio alone misses.

Observations are simulated directly (no training): y_{j,t} = x_{j,t} + n_{j,t} in units of C,
x_{j,t} = 1 when canary j is IN and in step t's Poisson batch (probability Q), n the noise."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from attacks.score_family import (
    DEFAULT_FAMILY,
    STATISTICS,
    ScoreContext,
    ScoreFamily,
    step_differences,
    step_ranks,
    whitened,
)
from audit.deployed.claims import DeployedClaim
from audit.deployed.deployed_audit import one_run_audit
from audit.run.score_selection import (
    ScoreSelection,
    choose_trials,
    split_halves,
)

M, S, Q, SIGMA = 200, 40, 0.1, 2.0


def participations(rng: np.random.Generator, *, m: int = M, steps: int = S, reuse: bool = False,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y (m, steps), included, x): correct DP-SGD, or the noise drawn once and reused at every
    step (a generator re-created inside the loop)."""
    included = rng.random(m) < 0.5
    x = (rng.random((m, steps)) < Q) & included[:, None]
    noise = rng.normal(0, SIGMA, (m, 1 if reuse else steps))
    return x + noise, included, x


def simulate(rng: np.random.Generator, **kwargs: object) -> tuple[np.ndarray, np.ndarray]:
    y, included, _ = participations(rng, **kwargs)  # type: ignore[arg-type]
    return y, included


@dataclass
class Canaries:
    """The attributes of DiracCanaries the audit reads (no recorded batches: no diagnostics,
    so the test sees the scores alone)."""

    observations: np.ndarray
    included: np.ndarray
    real: int | None = None
    batches: tuple[np.ndarray, ...] = ()

    def scores(self, sigma=None, sampling_probability=None) -> np.ndarray:
        q, z = sampling_probability, (self.observations - 0.5) / sigma**2
        return np.logaddexp(np.log1p(-q), np.log(q) + z).sum(axis=1)


def claim(epsilon: float = 1.0) -> DeployedClaim:
    return DeployedClaim(epsilon, 1e-5, "test", ("t",), sample_rate=Q, noise_multiplier=SIGMA,
                         steps=S)


# ------------------------------------------------------------------------------- statistics


def test_every_statistic_scores_each_row():
    y, _ = simulate(np.random.default_rng(0))
    context = ScoreContext(SIGMA, Q, reference=y)
    scores = DEFAULT_FAMILY.scores(y, context)
    assert tuple(scores) == DEFAULT_FAMILY.names == tuple(s.name for s in STATISTICS)
    for name, s in scores.items():
        assert s.shape == (M,) and s.dtype == np.float64 and np.isfinite(s).all(), name
    # a row's score does not depend on the other rows scored (only on the reference)
    for name, s in scores.items():
        alone = DEFAULT_FAMILY.only([name]).scores(y[:7], context)[name]
        np.testing.assert_allclose(alone, s[:7], rtol=1e-12, err_msg=name)


def test_reused_noise_cancels_in_step_differences():
    y, included, x = participations(np.random.default_rng(1), reuse=True)
    d = step_differences(y, ScoreContext())
    assert np.all(d[~included] < 1e-9)  # OUT: the same noise at every step
    changes = np.abs(np.diff(x.astype(int), axis=1)).sum(axis=1)
    np.testing.assert_allclose(d[included], changes[included], atol=1e-9)  # IN: x's changes


def test_step_ranks_cancel_a_shared_draw():
    rng = np.random.default_rng(2)
    y, _ = simulate(rng)
    shifted = y + rng.normal(0, 10, (1, S))  # one draw added to every canary at each step
    a = step_ranks(y, ScoreContext(reference=y))
    b = step_ranks(shifted, ScoreContext(reference=shifted))
    np.testing.assert_allclose(a, b)


def test_whitened_reads_the_directions_without_noise():
    y, included, x = participations(np.random.default_rng(3), reuse=True)
    s = whitened(y, ScoreContext(q=Q, reference=y))
    varied = included & x.any(axis=1) & ~x.all(axis=1)  # IN with a participation change
    assert s[varied].min() > s[~included].max()
    with pytest.raises(ValueError, match="needs reference"):
        DEFAULT_FAMILY.only(["whitened"]).statistics[0](y, ScoreContext(q=Q))


def test_family_members_and_errors():
    assert ScoreFamily().applicable(ScoreContext()).names == (
        "total", "maximum", "step_differences", "off_lattice")
    with pytest.raises(ValueError, match="Did you mean 'maximum'"):
        DEFAULT_FAMILY.only(["maximun"])
    with pytest.raises(ValueError, match="unique"):
        ScoreFamily(STATISTICS[:1] * 2)
    with pytest.raises(ValueError, match="q="):
        ScoreContext(q=1.5)


def test_split_halves_are_disjoint_whole_groups_and_fixed():
    a, b = split_halves(30, 7, group=3)
    assert sorted(np.concatenate([a, b])) == list(range(30)) and a.size == 15
    assert all(set(range(3 * (i // 3), 3 * (i // 3) + 3)) <= set(a) for i in a)
    np.testing.assert_array_equal(split_halves(30, 7, group=3)[0], a)
    with pytest.raises(ValueError, match="whole groups"):
        split_halves(10, 0, group=3)


# ------------------------------------------------------------------------------- one-run audit


def test_reused_noise_is_refuted_by_the_family_not_by_the_likelihood_ratio():
    """The power test: the same noise at every step (a total leak). The likelihood ratio alone
    (today's score) leaves eps_lb below the claim on every seed; the family refutes it."""
    for seed in range(3):
        y, included = simulate(np.random.default_rng(10 + seed), reuse=True)
        single = one_run_audit(Canaries(y, included), claim(), delta=1e-5, family=None)
        family = one_run_audit(Canaries(y, included), claim(), delta=1e-5)
        assert single.verdict == "consistent" and single.epsilon_lb < 1.0, seed
        assert family.verdict == "violated" and family.epsilon_lb > 1.0, seed
        assert family.selection is not None
        assert family.selection.chosen in ("step_differences", "whitened")


def test_family_of_one_is_the_single_statistic():
    y, included = simulate(np.random.default_rng(4))
    c = Canaries(y, included)
    single = one_run_audit(c, claim(), delta=1e-5, family=None)
    one = one_run_audit(c, claim(), delta=1e-5, family=DEFAULT_FAMILY.only(["likelihood_ratio"]))
    scores = one_run_audit(c.scores(SIGMA, Q), included, claim(), delta=1e-5)
    assert single.epsilon_lb == one.epsilon_lb == scores.epsilon_lb
    assert single.result.guesses == one.result.guesses == scores.result.guesses
    assert single.selection is None and isinstance(one.selection, ScoreSelection)
    assert one.selection.alpha_each == pytest.approx(0.05)


def test_report_and_json_state_the_choice(tmp_path):
    y, included = simulate(np.random.default_rng(5), reuse=True)
    audit = one_run_audit(Canaries(y, included), claim(), delta=1e-5)
    text = (audit.write(tmp_path) / "report.md").read_text()
    k = len(DEFAULT_FAMILY)  # 7 with off_lattice (issue 42)
    assert f"Score statistic: {audit.selection.chosen}, the best of {k}" in text
    assert f"family-wise over the {k} score statistics" in text and "95% confidence" in text
    record = audit.to_dict()["score_selection"]
    assert record["method"] == "bonferroni" and record["alpha_each"] == pytest.approx(0.05 / k)
    assert audit.result.confidence.alpha == pytest.approx(0.05 / k)


def test_split_selection_states_the_held_out_half():
    y, included = simulate(np.random.default_rng(6), reuse=True)
    audit = one_run_audit(Canaries(y, included), claim(), delta=1e-5, selection="split",
                          split_seed=3)
    sel = audit.selection
    assert sel.method == "split" and sel.selection_size == sel.confirmation_size == M // 2
    assert audit.result.canaries == M // 2 and sel.alpha_each == pytest.approx(0.05)
    assert audit.epsilon_lb > 0.5  # 100 confirmation canaries, a total leak
    with pytest.raises(ValueError, match="selection="):
        one_run_audit(Canaries(y, included), claim(), delta=1e-5, selection="best")


def test_confidence_and_deprecated_alpha():
    y, included = simulate(np.random.default_rng(7), reuse=True)
    c = Canaries(y, included)
    a = one_run_audit(c, claim(), delta=1e-5, confidence=0.9)
    with pytest.warns(DeprecationWarning, match="one_run_audit"):
        b = one_run_audit(c, claim(), delta=1e-5, alpha=0.1)
    assert a.epsilon_lb == b.epsilon_lb and a.result.alpha == pytest.approx(0.1)
    with pytest.raises(ValueError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one_run_audit(c, claim(), delta=1e-5, confidence=0.9, alpha=0.1)


# ------------------------------------------------------------------------------- multi-run


def test_trials_choice_scores_the_confirmation_half_with_a_fixed_function():
    rng = np.random.default_rng(8)
    n = 200
    noise_in, noise_out = rng.normal(0, SIGMA, (n, 1)), rng.normal(0, SIGMA, (n, 1))
    y_in = (rng.random((n, S)) < Q) + noise_in  # each trial: its own noise, reused every step
    y_out = np.broadcast_to(noise_out, (n, S)).copy()
    choice = choose_trials(y_in, y_out, ScoreContext(SIGMA, Q), delta=1e-5, alpha=0.05)
    assert choice.scores_in.size == choice.scores_out.size == n - n // 2
    assert choice.selection.method == "split" and choice.selection.chosen != "likelihood_ratio"
    assert np.mean(choice.scores_in > choice.scores_out.max()) > 0.9


def test_multi_run_score_family_cell(tiny_audit: str, run_folder):
    """The multi-run path: opt-in (the spec's cells unchanged without it); with it every
    training key gets a score_family cell, scored on the confirmation half, its choice in
    scores/<cell>.selection.json, and the summary reads it once the spec says
    ``score_family = true`` (the spec's own cells keep their results)."""
    import json

    import audit.run.scoring as scoring
    from audit.report import run_audit
    from audit.run.spec import load_spec
    from audit.run.store import SCORES_DIR, load_scores

    text = tiny_audit.replace("\n[training]", '\nstore = "observations"\n\n[training]')
    folder = run_folder(text)
    before = run_audit(folder, progress=False)
    spec = load_spec(folder)
    assert not any(c.cell.attack == "score_family" for c in before.cells)
    cells = scoring.score_all(spec, folder, family=True)
    family_cells = [c for c in cells if c.attack == "score_family"]
    assert len(family_cells) == len(spec.training_keys())
    for cell in family_cells:
        selection = json.loads((folder / SCORES_DIR / f"{cell.name}.selection.json").read_text())
        assert selection["method"] == "split" and selection["chosen"] in DEFAULT_FAMILY.names
        record = scoring.read_selection(folder, cell)
        assert record is not None and record.to_json() == selection
        assert record.sentence().startswith(f"Score statistic: {record.chosen}")
        scores_in, scores_out = load_scores(folder, cell)
        assert scores_in.size == spec.evidence.trials_in - spec.evidence.trials_in // 2
        assert scores_out.size == spec.evidence.trials_out - spec.evidence.trials_out // 2
    (folder / "audit.toml").write_text(
        text.replace("\n[training]", "\nscore_family = true\n\n[training]"))
    after = run_audit(folder, progress=False)
    by_name = {c.cell.name: c for c in after.cells}
    for c in before.cells:  # the spec's own cells: the same results
        assert by_name[c.cell.name].epsilon_lb == c.epsilon_lb
    assert {c.name for c in family_cells} <= set(by_name)


def test_spec_reads_score_family(tiny_audit: str, run_folder):
    """``[experiment] score_family = true`` reaches the spec (it was silently dropped by the
    parser before 0.4.0); a non-boolean is refused by name."""
    from audit.run.scoring import family_enabled
    from audit.run.spec import load_spec

    assert not family_enabled(load_spec(run_folder(tiny_audit)))
    on = tiny_audit.replace("\n[training]", "\nscore_family = true\n\n[training]")
    assert family_enabled(load_spec(run_folder(on, "on")))
    bad = tiny_audit.replace("\n[training]", '\nscore_family = "yes"\n\n[training]')
    with pytest.raises(ValueError, match="score_family='yes' must be true or false"):
        load_spec(run_folder(bad, "bad"))
