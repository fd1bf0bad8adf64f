"""The unit of privacy (issue 42 item 3): one person in several rows is found and its
epsilon stated; distinct rows, and the few identical rows of natural low-dimensional data, fail
nothing (never cry wolf).

The group's epsilon is checked against independent references: k = 1 is the row-level
Poisson PLD (audit.theory.poisson); one step of a group of k = 2 against the mixture pair's
hockey-stick divergence in closed form (a root of the monotone likelihood ratio and Gaussian
survival functions).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.datasets import load_digits, load_iris
from torch.utils.data import TensorDataset

from audit.deployed.dataset_inspection import inspect_dataset
from audit.theory.group_privacy import group_epsilon_generic, group_epsilon_poisson
from audit.theory.poisson import poisson_pld


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    d = load_digits()
    return torch.tensor(d.data, dtype=torch.float32), torch.tensor(d.target)


def test_distinct_rows_pass():
    x, y = _digits()
    found = inspect_dataset(TensorDataset(x, y))
    assert found.finding.passed and found.k == 1 and found.finding.level == 0.0


def test_a_natural_identical_pair_is_a_note_not_a_failure():
    d = load_iris()  # two different flowers with the same four measurements (rows 101, 142)
    found = inspect_dataset(TensorDataset(torch.tensor(d.data), torch.tensor(d.target)),
                            epsilon=2.0, delta=1e-5)
    assert found.finding.passed and found.k == 2 and (101, 142) in found.examples
    assert found.sentence().startswith("note:") and "proves nothing" in found.sentence()


def test_a_dataset_stored_twice_with_jitter_fails_with_k_2():
    x, y = _digits()
    g = torch.Generator().manual_seed(0)
    # jitter of 1e-3 per pixel: within the tolerance (1e-3 of the data's std, about 6)
    copies = TensorDataset(torch.cat([x, x + 1e-3 * torch.randn(x.shape, generator=g)]),
                           torch.cat([y, y]))
    found = inspect_dataset(copies, epsilon=2.0, delta=1e-5)
    assert not found.finding.passed and found.typical_k == 2
    assert "stored as k = 2 rows" in found.sentence()
    assert found.group_epsilon is not None and found.group_epsilon.epsilon == 4.0


def test_exact_copies_are_found_whole():
    x, y = _digits()
    found = inspect_dataset(TensorDataset(torch.cat([x, x, x]), torch.cat([y, y, y])),
                            near_tolerance=0)
    assert not found.finding.passed and found.k == 3 and found.exact_groups == len(x)


def test_a_user_key_gives_k_exactly():
    x, y = _digits()
    found = inspect_dataset(TensorDataset(x, y), user_key=lambda i: i // 3)
    assert not found.finding.passed and found.k == 3 and found.by_user_key
    with pytest.raises(ValueError, match="user_key: 5 keys for 1797 rows"):
        inspect_dataset(TensorDataset(x, y), user_key=[0] * 5)


def test_group_of_one_is_the_row_level_poisson_pld():
    # the same mechanism through two dp_accounting constructions (mixture with k = 1 at
    # discretisation 1e-3, the subsampled Gaussian at 1e-4): both pessimistic, so both are upper
    # bounds; they differ by the coarser discretisation only (1e-3 per step in the loss)
    row = poisson_pld(0.05, 1.5, 20).get_epsilon_for_delta(1e-5)
    group = group_epsilon_poisson(1.5, 0.05, 20, 1, 1e-5).epsilon
    assert row <= group <= row + 20 * 1e-3


def _hockey_stick(eps: float, sigma: float, q: float, k: int) -> float:
    """max over both directions of E_Q[(P/Q - e^eps)_+] for P = sum_j Bin(j; k, q) N(j, s^2),
    Q = N(0, s^2), in closed form: P/Q(t) = sum_j w_j exp((2 j t - j^2) / (2 s^2)) increases in
    t, so each direction's set is a half-line whose end a root finder gives (scipy brentq), and
    the divergence is a sum of Gaussian tails (survival functions: no 1 - Phi cancellation)."""
    from scipy import optimize

    w = stats.binom.pmf(np.arange(k + 1), k, q)
    j = np.arange(k + 1)

    def log_ratio(t: float) -> float:
        return float(np.log(np.sum(w * np.exp((2 * j * t - j * j) / (2 * sigma**2)))))

    lo, hi = -60 * sigma - k, 60 * sigma + k
    remove = add = 0.0
    if log_ratio(hi) > eps:
        t1 = optimize.brentq(lambda t: log_ratio(t) - eps, lo, hi, xtol=1e-14)
        remove = float(np.sum(w * stats.norm.sf((t1 - j) / sigma))
                       - math.exp(eps) * stats.norm.sf(t1 / sigma))
    if log_ratio(lo) < -eps:
        t2 = optimize.brentq(lambda t: log_ratio(t) + eps, lo, hi, xtol=1e-14)
        add = float(stats.norm.cdf(t2 / sigma)
                    - math.exp(eps) * np.sum(w * stats.norm.cdf((t2 - j) / sigma)))
    return max(remove, add)


def test_group_of_two_one_step_matches_the_closed_form():
    sigma, q, k, delta = 3.0, 0.2, 2, 1e-4
    eps = group_epsilon_poisson(sigma, q, 1, k, delta, discretisation=1e-3).epsilon
    # an upper bound: the true delta at eps is at most delta ...
    assert _hockey_stick(eps, sigma, q, k) <= delta * (1 + 1e-6)
    # ... and tight up to the discretisation (1e-3 in the loss): 1e-2 below it, the true delta
    # exceeds delta
    assert _hockey_stick(eps - 1e-2, sigma, q, k) > delta


def test_generic_group_privacy_in_log_space():
    out = group_epsilon_generic(1.0, 1e-5, 3)
    assert out.epsilon == 3.0 and out.delta == pytest.approx(3 * math.exp(2) * 1e-5, rel=1e-12)
    assert group_epsilon_generic(10.0, 1e-5, 5).delta == 1.0  # proves nothing: capped, said


def test_inspect_loader_cli_prints_the_unit_of_privacy(tmp_path):
    script = tmp_path / "copies.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "def make_loader():\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    x = torch.randn(100, 5, generator=g)\n"
        "    return DataLoader(TensorDataset(torch.cat([x, x]), torch.zeros(200)),"
        " batch_size=20, shuffle=True)\n")
    done = subprocess.run(
        [sys.executable, "-m", "audit.cli", "inspect-loader", f"{script}:make_loader",
         "--inspection-epochs", "20"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unit of privacy: FAILED: each example appears to be stored as k = 2 rows" in done.stdout
