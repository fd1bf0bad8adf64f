"""Issue 45 item 6: the pytest plugin, run in a subprocess on a tiny user test folder.

The plugin is loaded with ``-p audit.accounting.pytest_plugin`` (what the ``pytest11`` entry
point does once the harness is installed). The grid holds cheap cells (deterministic batches:
closed-form theory) so that each run takes a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # seconds per test (theory, subprocesses)

ROOT = Path(__file__).resolve().parents[1]

ACCOUNTANTS = '''
import math
from scipy.stats import norm
from audit.accounting.adapters import Unsupported


def _gdp_eps(mu, delta):
    f = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)
    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > delta else (lo, mid)
    return hi


def good(mechanism, delta):
    if mechanism.sampler != "deterministic":
        return Unsupported("deterministic only")
    return _gdp_eps(math.sqrt(mechanism.epochs) / mechanism.sigma, delta)


def bad(mechanism, delta):
    eps = good(mechanism, delta)
    return eps if isinstance(eps, Unsupported) else 0.9 * eps
'''

GRID = [{"sampler": "deterministic", "sigma": 1.0, "steps_per_epoch": 10, "epochs": [1, 4],
         "delta": 1e-5},
        {"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 10, "delta": 1e-5}]


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "audit.accounting.pytest_plugin", "-q",
         "-rA", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def user_folder(tmp_path):
    (tmp_path / "myaccountant.py").write_text(ACCOUNTANTS)
    (tmp_path / "grid.json").write_text(json.dumps(GRID))
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naccountant = myaccountant:good\naccountant_grid = grid.json\n"
        "accountant_cache = theory-cache\n"
    )
    return tmp_path


def test_one_test_per_cell_from_the_ini(user_folder):
    run = _run(user_folder)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "2 passed, 1 skipped" in out
    assert "accountant[deterministic-adversarial-s1-T10-E1-d1e-05]" in out
    assert "accountant[deterministic-adversarial-s1-T10-E4-d1e-05]" in out
    assert "unsupported: deterministic only" in out
    assert "accountant check: 0 unsound, 0 invalid, 0 unverified, 0 loose, 2 ok" in out
    cached = sorted((user_folder / "theory-cache").rglob("*.json"))
    assert len(cached) == 2  # one bracket per supported cell (no theory for unsupported ones)
    # a second process reads the brackets from disk (same files, same verdicts)
    again = _run(user_folder)
    assert again.returncode == 0 and "2 passed, 1 skipped" in again.stdout
    assert sorted((user_folder / "theory-cache").rglob("*.json")) == cached


def test_a_buggy_accountant_fails_its_cells_with_the_sentence(user_folder):
    run = _run(user_folder, "--accountant", "myaccountant:bad")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 1 skipped" in out
    assert "below the proven lower bound" in out and "delta 1e-05" in out
    assert "10% under" in out


def test_the_marker_and_fixture_in_a_users_own_test(user_folder):
    (user_folder / "pytest.ini").write_text("[pytest]\naccountant_cache = off\n")
    (user_folder / "test_mine.py").write_text(
        "import pytest\nfrom myaccountant import good, bad\n\n"
        "@pytest.mark.accountant_grid('grid.json')\n"
        "def test_good(accountant_check):\n"
        "    report = accountant_check(good)\n"
        "    assert not report.unsound and len(report.cells) == 2\n\n"
        "@pytest.mark.accountant_grid('grid.json')\n"
        "def test_bad(accountant_check):\n"
        "    assert len(accountant_check(bad).unsound) == 2\n"
    )
    run = _run(user_folder)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_inert_without_an_accountant(tmp_path):
    """Loaded but not asked for: the user's tests run alone and the checker is never
    imported (the plugin adds nothing to a project's own pytest runs)."""
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\ndef test_plain():\n"
        "    assert 'audit.accounting.check' not in sys.modules\n"
        "    assert 'audit.theory' not in sys.modules\n"
    )
    run = _run(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "accountant check" not in run.stdout
