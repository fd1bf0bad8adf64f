"""numba is optional (issue 34 item 2; the ``fast`` extra): with numba unimportable the harness
falls back to its torch/numpy routes and gives the compiled routes' results.

A subprocess runs with ``sys.modules["numba"] = None`` (what an environment without the extra
looks like to ``import numba``): a tiny engine training and ``audit simulate``. This process,
with numba, runs the same training on the ``compiled`` route (the compiled kernel with torch's
noise, so that both draw the same noise) and the same ``audit simulate``.

Tolerances: the training's routes agree up to float32 summation order (tests/test_compiled.py
derives 1e-5 relative, 1e-6 absolute over 10 steps; a wrong term moves parameters by ~lr/b =
5e-2); the Dirac canary's observations are bit for bit (real rows add exactly 0 to its
coordinate on every route). ``audit simulate`` has no compiled arithmetic but the Poisson
sampler's row sort, whose integers are the same (a sort has one answer), so its JSON is
identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from audit.training import compiled

SIMULATE = [
    "simulate", "--sampler", "poisson", "--sigma", "1.0", "--steps", "20", "--batch-size", "2",
    "--trials", "2000", "--seed", "3", "--json",
]

TRAINING = """
import numpy as np, torch
from audit.sampling.factory import make_sampler
from audit.training.engine import train
from audit.training.trials import TrainingConfig, build_problem

def tiny(route):
    config = TrainingConfig(dataset="digits", model="logistic", sampler="poisson", sigma=1.0,
                            clip=1.0, lr=0.5, batch_size=10, n=100, canary="dirac",
                            threat_model="isolated")
    problem = build_problem(config)
    batches = make_sampler("poisson", n=100, batch_size=10, epochs=1).sample(
        np.random.default_rng(11), 16)
    streams = [(torch.Generator().manual_seed(i), 8) for i in range(2)]
    return train(problem, batches, np.arange(16) % 2 == 0, streams, route=route)
"""

BLOCKED = TRAINING + """
import sys, io, contextlib, json
from audit.cli import main
from audit.sampling.compiled_rows import available
from audit.training.compiled import default_routes

assert not available() and "numba" not in [m for m in sys.modules if sys.modules[m] is not None]
out = tiny(None)  # the default route without numba
np.savez(sys.argv[1] + "/blocked.npz", theta=out.theta, y=out.y, loss=out.loss)
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    main(SIMULATE)
json.dump({"routes": default_routes(), "simulate": json.loads(printed.getvalue())},
          open(sys.argv[1] + "/blocked.json", "w"))
"""


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where the numba-less subprocess left its results."""
    folder = tmp_path_factory.mktemp("no_numba")
    script = "import sys\nsys.modules['numba'] = None\n" + f"SIMULATE = {SIMULATE!r}\n" + BLOCKED
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(folder)],
        check=True, timeout=240, cwd=Path(__file__).resolve().parents[1],
    )
    return folder


def test_without_numba_the_default_routes_are_torchs(blocked: Path) -> None:
    routes = json.loads((blocked / "blocked.json").read_text())["routes"]
    assert routes == {"logistic": "grouped", "mlp": "grouped", "torch": "batched"}


@pytest.mark.skipif(not compiled.available(), reason="numba not installed")
def test_training_without_numba_is_the_compiled_route_up_to_rounding(blocked: Path) -> None:
    namespace: dict[str, object] = {}
    exec(TRAINING, namespace)  # the same tiny training, here with numba
    fused = namespace["tiny"]("compiled")  # type: ignore[operator]
    fallback = np.load(blocked / "blocked.npz")
    np.testing.assert_allclose(fused.theta, fallback["theta"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused.loss, fallback["loss"], rtol=1e-5, atol=1e-6)
    assert np.array_equal(fused.y, fallback["y"])  # the Dirac canary's observations, bit for bit


def test_simulate_without_numba_is_identical(
    blocked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from audit.cli import main

    main(SIMULATE)
    here = json.loads(capsys.readouterr().out)
    assert here == json.loads((blocked / "blocked.json").read_text())["simulate"]
    assert here["epsilon_lb"] >= 0
