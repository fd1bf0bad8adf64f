"""The ``audit curves`` command."""

from __future__ import annotations

import json

import pytest

from audit.cli import main


def test_curves_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "curves.png"
    code = main(["curves", "--sampler", "dynamic_shuffle", "--sigma", "2", "--steps", "200",
                 "--epochs", "2", "--threat-model", "isolated", "--plot", str(plot), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    kinds = {row["kind"] for row in out["curves"]}
    assert kinds == {"upper", "lower", "exact", "approximation"}
    eps = {row["roles"][0]: row["epsilon"] for row in out["curves"]}
    assert eps["lower"] <= eps["exact"] <= eps["upper"]
    # side by side for the isolated shuffle: the Berry-Esseen bound alone, the Edgeworth
    # approximation (the only row of kind approximation)
    assert "berry_esseen" in eps and "approximation" in eps
    approx = [row for row in out["curves"] if row["kind"] == "approximation"]
    assert [row["roles"] for row in approx] == [["approximation"]]
    assert plot.stat().st_size > 10_000


def test_curves_table_deterministic_is_exact(capsys):
    assert main(["curves", "--sampler", "deterministic", "--sigma", "3.7306", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert "upper=lower=exact" in out
    assert "eps(1e-05) = 1" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sampler", "posson", "--sigma", "1", "--steps", "10"], "poisson"),
        (["--sampler", "poisson", "--sigma", "1", "--steps", "10", "--delta", "2"], "delta"),
        (["--sampler", "poisson", "--sigma", "-1", "--steps", "10"], "sigma"),
    ],
)
def test_curves_errors(argv, message, capsys):
    assert main(["curves", *argv]) == 2
    assert message in capsys.readouterr().err
