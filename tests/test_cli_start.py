"""The ``audit`` command starts fast: what it imports, not how long it takes (docs/design.md §2.7).

Issue 25 asks for ``audit --help`` under 0.3 s and ``audit curves`` under 1.5 s; the times are
measured by ``bench/cli_start.py`` (speed belongs in bench/). These tests guard the property that
gives them, in a fresh interpreter each: building the parser (every subcommand's arguments and
help) imports none of the heavy libraries, and ``audit curves`` without ``--plot`` imports neither
torch nor matplotlib, nor scipy.stats and dp_accounting when its curves need no privacy loss
distribution.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "torch", "matplotlib", "numba", "opacus", "dask", "ray", "dp_accounting", "prv_accountant",
    "PLD_accounting", "scipy", "numpy", "pandas", "statsmodels", "sklearn", "joblib", "tqdm",
)
"""Libraries that each take from a tenth of a second to seconds to import."""


def _imported_after(code: str) -> list[str]:
    """The modules of ``HEAVY`` (and scipy.stats) imported once ``code`` has run, in a fresh
    interpreter started in the repository root (so that this checkout is imported)."""
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"heavy = {HEAVY!r}\n"
        "found = {m for m in sys.modules if m.split('.')[0] in heavy}\n"
        "print(json.dumps(sorted(m for m in found if m.count('.') == 0 or m == 'scipy.stats')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_parser_and_every_help_import_nothing_heavy():
    code = (
        "import contextlib, io\n"
        "from audit.cli import COMMANDS, build_parser, main\n"
        "build_parser()\n"
        "for argv in [['--help'], *([name, '--help'] for name in COMMANDS)]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
    )
    assert _imported_after(code) == []


def test_curves_without_a_plot_imports_no_torch_matplotlib_or_pld():
    # The README's example without its plot: GDP upper bound and the one-epoch max test, both
    # from scipy.special's normal kernels; no privacy loss distribution (dp_accounting).
    code = (
        "import contextlib, io\n"
        "from audit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(['curves', '--sampler', 'dynamic_shuffle', '--sigma', '0.8',\n"
        "                 '--steps', '1000', '--delta', '1e-6'])\n"
        "assert code == 0\n"
    )
    imported = _imported_after(code)
    assert {"numpy", "scipy"} <= set(imported)  # the curves themselves
    for module in ("torch", "matplotlib", "dp_accounting", "scipy.stats", "pandas", "numba"):
        assert module not in imported, imported
