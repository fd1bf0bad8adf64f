"""The block-size bit-identity tests under OpenBLAS kernels other than this CPU's default
(docs/design.md §12.4; issue 32 item 3), so that a CPU we do not have cannot fail them.

OpenBLAS picks its kernel at load time from ``OPENBLAS_CORETYPE`` (DYNAMIC_ARCH builds, as
numpy's and scipy's wheels are), so each module runs in a fresh interpreter with the variable
set; one module per kernel keeps the cost to a few seconds each. (``Zen`` loads the Haswell
kernel in current OpenBLAS builds; it is kept for the builds that tell them apart.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KERNEL_MODULES: tuple[tuple[str, str], ...] = (
    ("Haswell", "tests/test_compiled_mlp.py"),
    ("SkylakeX", "tests/test_philox.py"),
    ("Zen", "tests/test_compiled_cnn.py"),
)


@pytest.mark.slow
@pytest.mark.parametrize(("coretype", "module"), KERNEL_MODULES)
def test_block_size_tests_pass_under_another_openblas_kernel(coretype: str, module: str) -> None:
    env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", module],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
