"""audit.inspect_loader / ``audit inspect-loader``: the sampler of a deployed loader
(docs/design.md §14.1).

Each loader's law is identified from whole epochs of index batches; the tests are exact
observations (sizes, once per epoch, order, repeats) or chi-square tests at level
ALPHA = 1e-3 with their power against a named alternative, at least 0.99 at the sizes
drawn (``epochs=None`` draws until it is). Seeds are fixed; a chi-square test of a true
law rejects with probability 1e-3, so a fixed seed that passes is not a tuned one.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

import audit
from audit.cli import main
from audit.deployed.loader_inspection import ALPHA, TARGET_POWER, inspect_loader

N = 400
B = 40


def dataset(n: int = N) -> TensorDataset:
    return TensorDataset(torch.randn(n, 3), torch.zeros(n, dtype=torch.long))


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def check_powers(result) -> None:
    """Every applicable test states its power, and it is at least 0.99."""
    assert result.underpowered == ()
    for test in result.tests:
        if test.holds is not None and test.power is not None:
            assert test.power >= TARGET_POWER, test
        if test.p_value is not None:
            assert test.alpha == ALPHA


def test_shuffling_loader_is_dynamic_shuffle():
    result = audit.inspect_loader(
        DataLoader(dataset(), batch_size=B, shuffle=True, generator=generator())
    )
    assert result.sampler == "dynamic_shuffle"
    assert result.batch_size == B and result.steps_per_epoch == N / B
    assert result.test("once_per_epoch").holds and not result.test("same_order").holds
    check_powers(result)


def test_sequential_loader_is_deterministic():
    result = inspect_loader(DataLoader(dataset(), batch_size=B))
    assert result.sampler == "deterministic"
    assert result.test("same_order").holds
    check_powers(result)


def test_one_permutation_every_epoch_is_persistent_shuffle():
    order = np.random.default_rng(1).permutation(N)
    batches = [order[i : i + B].tolist() for i in range(0, N, B)]
    result = inspect_loader(DataLoader(dataset(), batch_sampler=batches))
    assert result.sampler == "persistent_shuffle"


def test_opacus_poisson_loaders_are_poisson():
    from opacus.data_loader import DPDataLoader
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    loader = DPDataLoader.from_data_loader(
        DataLoader(dataset(), batch_size=B), generator=generator(2)
    )
    result = inspect_loader(loader)
    assert result.sampler == "poisson"
    lo, hi = result.q_interval
    assert lo <= B / N <= hi
    check_powers(result)
    sampler = UniformWithReplacementSampler(num_samples=N, sample_rate=0.05, generator=generator(3))
    result = inspect_loader(sampler)  # a batch sampler alone: n from its num_samples
    assert result.sampler == "poisson" and result.n == N
    check_powers(result)


def test_weighted_sampler_is_unknown_with_reasons():
    weights = torch.ones(N)
    weights[: N // 2] = 10.0  # class balancing: half the examples 10x as likely
    loader = DataLoader(
        dataset(),
        batch_size=B,
        sampler=WeightedRandomSampler(weights, N, replacement=True, generator=generator(4)),
    )
    result = inspect_loader(loader)
    assert result.sampler == "unknown"
    assert result.test("weighted").holds and result.test("with_replacement").holds
    assert any("unequal rates" in r for r in result.reasons)
    check_powers(result)


def test_balls_and_bins_batches():
    steps = 10

    class BallsAndBins:
        def __init__(self) -> None:
            self.rng = np.random.default_rng(5)

        def __iter__(self):
            where = self.rng.integers(0, steps, N)
            for t in range(steps):
                yield np.flatnonzero(where == t).tolist()

    result = inspect_loader(BallsAndBins(), n=N)
    assert result.sampler == "balls_and_bins"
    check_powers(result)


def test_accountant_comparison_and_theory_bracket():
    from opacus import PrivacyEngine

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            poisson_sampling=False,
            data_loader=DataLoader(dataset(), batch_size=B, shuffle=True, generator=generator(6)),
        )
    result = inspect_loader(
        loader, privacy_engine=engine, optimizer=optimizer, training_epochs=2, delta=1e-5
    )
    assert result.sampler == "dynamic_shuffle"
    assert result.matches_accountant is False
    assert result.accountant.sample_rate == pytest.approx(B / N)
    assert result.accountant.poisson_sampling is False
    theory = result.theory
    # Opacus's Poisson epsilon is below the shuffle's proven lower bound (fixed sizes reveal the
    # step)
    assert theory.accountant_epsilon < theory.epsilon_lower <= theory.epsilon_upper
    assert theory.guarantee == "refuted"


def test_fixed_epochs_report_low_power():
    steps = 10

    def poisson_epochs():
        rng = np.random.default_rng(7)

        class Draws:
            def __iter__(self):
                for _ in range(steps):
                    yield np.flatnonzero(rng.random(N) < 0.1).tolist()

        return Draws()

    result = inspect_loader(poisson_epochs(), n=N, inspection_epochs=3)
    assert result.epochs == 3
    assert "binomial_sizes" in result.underpowered


def test_cli_json_and_errors(tmp_path, capsys):
    script = tmp_path / "loaders.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "def make_loader():\n"
        f"    ds = TensorDataset(torch.randn({N}, 2))\n"
        f"    return DataLoader(ds, batch_size={B}, shuffle=True)\n"
        "def broken():\n    return 3\n"
    )
    assert main(["inspect-loader", f"{script}:make_loader", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sampler"] == "dynamic_shuffle"
    assert all(t["power"] is None or t["power"] >= TARGET_POWER for t in out["tests"].values())
    assert main(["inspect-loader", f"{script}:make_loader", "--inspection-epochs", "2"]) == 0
    assert "sampler: dynamic_shuffle" in capsys.readouterr().out
    # --epochs: the deprecated spelling, still working (a logged warning)
    assert main(["inspect-loader", f"{script}:make_loader", "--epochs", "2"]) == 0
    assert "sampler: dynamic_shuffle" in capsys.readouterr().out
    assert main(["inspect-loader", f"{script}:broken"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "neither a torch DataLoader nor a batch sampler" in err
    assert main(["inspect-loader", f"{tmp_path}/missing.py:make_loader"]) == 2
    assert "no such file" in capsys.readouterr().err


def _poisson_epochs(rng, rates: np.ndarray, steps: int) -> list[list[np.ndarray]]:
    """One epoch of ``steps`` Poisson batches, example i drawn with probability rates[i]."""
    return [[np.flatnonzero(rng.random(rates.size) < rates) for _ in range(steps)]]


def test_stated_power_and_level_match_simulation():
    """The stated powers (noncentral chi-square, scaled chi-square) and the level against
    simulated draws: 400 repetitions each, tolerance 4 Monte Carlo sd (sqrt(p(1-p)/400))
    plus 0.03 for the chi-square approximations (seen: 0.006 and 0.009 at 2000 repetitions)."""
    from scipy.stats import betabinom, chi2

    from audit.deployed.loader_inspection import _binomial_sizes, _weighted

    rng = np.random.default_rng(11)
    reps, n, steps, q = 400, 400, 30, 0.05
    # half of the examples at twice the others' rate
    rates = np.repeat([2 * q / 3, 4 * q / 3], n // 2)
    stated = _weighted(_poisson_epochs(rng, np.full(n, q), steps), n, False, False, q)[0].power
    hits = [
        _weighted(_poisson_epochs(rng, rates, steps), n, False, False, q)[0].holds
        for _ in range(reps)
    ]
    assert 0.1 < stated < 0.9  # a design where the power is informative
    assert abs(np.mean(hits) - stated) <= 4 * np.sqrt(stated * (1 - stated) / reps) + 0.03
    null = [
        _weighted(_poisson_epochs(rng, np.full(n, q), steps), n, False, False, q)[0].holds
        for _ in range(reps)
    ]
    assert np.mean(null) <= ALPHA + 4 * np.sqrt(ALPHA / reps) + 0.005
    size_n, size_q, batches = 400, 0.1, 120
    extra = 0.5 / (size_n - 1)  # beta-binomial with variance ratio 1 + (n - 1) extra = 1.5
    a, b = size_q * (1 / extra - 1), (1 - size_q) * (1 / extra - 1)

    def sizes_test(sizes):
        epoch = [[np.arange(int(s)) for s in sizes]]
        return _binomial_sizes(epoch, size_n, True)[0]

    df = batches - 1
    low, high = chi2.ppf(ALPHA / 2, df), chi2.isf(ALPHA / 2, df)
    at_ratio = chi2.sf(high / 1.5, df) + chi2.cdf(low / 1.5, df)  # the power at variance ratio 1.5
    stated = sizes_test(rng.binomial(size_n, size_q, batches)).power
    assert stated <= at_ratio + 1e-12  # the stated power is the smaller of the ratios 1.5 and 1/1.5
    hits = [sizes_test(betabinom.rvs(size_n, a, b, size=batches, random_state=rng)).holds is False
            for _ in range(reps)]
    assert 0.1 < at_ratio < 0.9
    assert abs(np.mean(hits) - at_ratio) <= 4 * np.sqrt(at_ratio * (1 - at_ratio) / reps) + 0.03


def test_unsupported_loaders_get_one_line_reasons():
    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(10)

    with pytest.raises(ValueError, match="IterableDataset"):
        inspect_loader(DataLoader(Stream(), batch_size=2), n=10)
    with pytest.raises(ValueError, match="not a list of integer indices"):
        inspect_loader([["a", "b"]], n=2)
    with pytest.raises(ValueError, match="outside"):
        inspect_loader([[0, 5]], n=3)
    with pytest.raises(ValueError, match="epochs"):
        inspect_loader(DataLoader(dataset(), batch_size=B), inspection_epochs=0)


def test_weighted_sampler_against_its_sample_rate():
    """Opacus issue #813: a WeightedRandomSampler under make_private: q describes no example."""
    from audit.deployed.claims import AccountantAssumptions

    weights = torch.ones(N)
    weights[:4] = 500.0  # four examples drawn ~ 500x as often as the others
    loader = DataLoader(
        dataset(),
        batch_size=B,
        sampler=WeightedRandomSampler(weights, N, replacement=True, generator=generator(9)),
    )
    result = inspect_loader(loader, accountant=AccountantAssumptions(sample_rate=1 / len(loader)))
    assert result.sampler == "unknown" and result.matches_accountant is False
    assert any("x the sample_rate" in m for m in result.mismatches)


def test_drop_last_is_named():
    result = inspect_loader(DataLoader(dataset(N + 3), batch_size=B, shuffle=True, drop_last=True,
                                       generator=generator(10)))
    assert result.sampler == "unknown"
    assert any("drop_last=True" in r for r in result.reasons)


class _Paired:
    """The issue's paired loader: Binomial sizes, rates q, pairs (2i, 2i+1) in or out together."""

    def __init__(self, n: int, q: float, steps: int, seed: int) -> None:
        self.n, self.q, self.steps, self.rng = n, q, steps, np.random.default_rng(seed)

    def __iter__(self):
        for _ in range(self.steps):
            pairs = np.flatnonzero(self.rng.random(self.n // 2) < self.q)
            yield np.sort(np.concatenate([2 * pairs, 2 * pairs + 1])).tolist()


def test_paired_loader_is_rejected_as_dependent():
    from audit.deployed.claims import AccountantAssumptions

    acc = AccountantAssumptions(sample_rate=0.01, noise_multiplier=1.0, epochs=1, delta=1e-5,
                                epsilon=1.214)
    result = inspect_loader(_Paired(1000, 0.01, 100, 12), n=1000, inspection_epochs=3,
                            accountant=acc)
    assert result.test("independence").holds is False
    assert result.sampler == "unknown"
    assert "a guarantee for this loader" not in result.summary()
    assert any("not independent" in r for r in result.reasons)


def test_reused_permutation_is_unknown():
    rng = np.random.default_rng(13)

    class Reused:
        def __init__(self) -> None:
            self.k, self.order = 0, rng.permutation(N)

        def __iter__(self):
            if self.k % 2 == 0:
                self.order = rng.permutation(N)
            self.k += 1
            for i in range(0, N, B):
                yield self.order[i : i + B].tolist()

    result = inspect_loader(Reused(), n=N)
    assert result.sampler == "unknown"
    assert any("reused" in r for r in result.reasons)
    assert "below the proven lower bound" not in result.summary()


def test_weighted_without_replacement_is_unknown():
    weights = torch.ones(N)
    weights[: N // 2] = 5.0
    loader = DataLoader(dataset(), batch_size=B, sampler=WeightedRandomSampler(
        weights, N, replacement=False, generator=generator(14)))
    result = inspect_loader(loader, inspection_epochs=6)
    assert result.sampler == "unknown"
    assert result.test("uniform_positions").holds is False
    assert any("WeightedRandomSampler" in r for r in result.reasons)


def test_poisson_at_a_larger_q_is_no_guarantee():
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    from audit.deployed.claims import AccountantAssumptions

    acc = AccountantAssumptions(sample_rate=0.01, noise_multiplier=1.0, epochs=1, delta=1e-5,
                                epsilon=0.7281)
    typed = UniformWithReplacementSampler(num_samples=1000, sample_rate=0.0104,
                                          steps=100, generator=generator(15))
    result = inspect_loader(typed, inspection_epochs=3, accountant=acc)
    assert result.identification.how == "type" and result.sampler == "poisson"
    assert result.theory.epsilon_upper > 0.7281 and result.theory.guarantee != "yes"
    drawn = _Poisson(1000, 0.0104, 100, 16)
    result = inspect_loader(drawn, n=1000, inspection_epochs=3, accountant=acc)
    assert result.identification.how == "draws" and result.theory.guarantee == "consistent"
    assert "not a guarantee" in result.summary()


class _Poisson:
    def __init__(self, n: int, q: float, steps: int, seed: int) -> None:
        self.n, self.q, self.steps, self.rng = n, q, steps, np.random.default_rng(seed)

    def __iter__(self):
        for _ in range(self.steps):
            yield np.flatnonzero(self.rng.random(self.n) < self.q).tolist()


def test_epochs_is_the_deprecated_spelling_of_inspection_epochs():
    """inspect_loader(epochs=) (inspection epochs, read as the training's) still works, warns and
    draws the same epochs; both spellings at once are refused."""
    def draws():
        rng = np.random.default_rng(3)

        class Draws:
            def __iter__(self):
                for _ in range(10):
                    yield np.flatnonzero(rng.random(N) < 0.1).tolist()

        return Draws()

    with pytest.warns(DeprecationWarning, match="inspection_epochs=3"):
        old = inspect_loader(draws(), n=N, epochs=3)
    new = inspect_loader(draws(), n=N, inspection_epochs=3)
    assert old == new and new.epochs == 3
    with pytest.raises(ValueError, match="not both"):
        inspect_loader(draws(), n=N, epochs=3, inspection_epochs=3)


class _ReseededPoisson:
    """Poisson batches whose generator is re-seeded in __iter__: every epoch the same batches
    (the bug zoo's sampler_repeats_batches)."""

    def __init__(self, n: int, q: float, seed: int) -> None:
        self.n, self.q, self.seed = n, q, seed

    def __len__(self) -> int:
        return round(1 / self.q)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(len(self)):
            yield torch.nonzero(torch.rand(self.n, generator=g) < self.q).flatten().tolist()


def test_same_batches_every_epoch_lead_the_reasons_and_the_mismatches():
    from audit.deployed.claims import AccountantAssumptions

    loader = DataLoader(dataset(), batch_sampler=_ReseededPoisson(N, B / N, 3))
    result = inspect_loader(loader, accountant=AccountantAssumptions(
        sampler="poisson", sample_rate=B / N, noise_multiplier=1.0))
    assert result.sampler == "unknown" and result.matches_accountant is False
    assert result.reasons[0].startswith("the same batches every epoch")
    assert result.mismatches[0].startswith("the same batches every epoch")
    # a fixed partition repeated every epoch is a registered sampler, not this finding
    fixed = inspect_loader(DataLoader(dataset(), batch_size=B))
    assert not any("the same batches every epoch" in r for r in fixed.reasons)
