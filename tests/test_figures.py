"""Plots a privacy engineer reads at a glance (issue 43 item 5): every legend of the report
stage's figures is whole (no label cut, each text a full label), inside the figure and over no
axes; ``audit run`` writes a ROC view beside each trade-off plot.

The figures are checked as drawn (:func:`audit.report.figures.legend_problems` on the figure
object at the moment it is saved), on the tiny simulated audits of conftest.py (multi-run: the
trade-off, ROC and overview plots; one-run: the accuracy plot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import spec_toml

from audit.cli import main
from audit.report import figures, multi_run, one_run, roc
from audit.report.figures import wrap_label


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Each saved figure's legend problems, by file name (the figures are saved as usual)."""
    seen: dict[str, list[str]] = {}
    for module in (multi_run, one_run, roc):
        original = module.save_figure

        def save(fig: Any, path: str | Path, formats: Any = ("png",), _save=original) -> Any:
            seen[Path(path).name] = figures.legend_problems(fig)
            return _save(fig, path, formats)

        monkeypatch.setattr(module, "save_figure", save)
    return seen


def _run(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "audit.toml").write_text(text)
    assert main(["run", str(folder), "--quiet"]) == 0
    return folder


def test_multi_run_plots_have_whole_legends_and_a_roc_view(tmp_path, checked):
    folder = _run(tmp_path, spec_toml())
    tradeoffs = sorted(p.name for p in folder.glob("tradeoff_*.png"))
    assert tradeoffs and sorted(p.name for p in folder.glob("roc_*.png")) == [
        name.replace("tradeoff_", "roc_") for name in tradeoffs]
    assert set(checked) == {p.name for p in folder.glob("*.png")}
    assert {name: problems for name, problems in checked.items() if problems} == {}


def test_one_run_accuracy_plot_has_a_whole_legend(tmp_path, checked):
    folder = _run(tmp_path, spec_toml(
        audit="one_run", canaries=200, guesses="bonferroni", samplers=["deterministic"],
        threat_models=["isolated"], training={"n": 400, "batch_size": 20},
        attacks=["default"], trials_in=None, trials_out=None, shard_size=200))
    assert list(folder.glob("accuracy_*.png"))
    assert {name: problems for name, problems in checked.items() if problems} == {}


def test_legend_problems_sees_a_cut_label_and_a_legend_over_the_data():
    plt = figures_pyplot()
    fig, ax = plt.subplots(layout="constrained")
    ax.plot([0, 1], [0, 1], label="a label cut at q = 0.0…")
    ax.legend(loc="center")
    problems = figures.legend_problems(fig)
    plt.close(fig)
    assert any("cut" in p for p in problems) and any("overlaps" in p for p in problems)


def test_wrap_label_keeps_every_word():
    text = "theory upper: PLD pessimistic (dp_accounting connect-the-dots), discretisation " \
           "0.0001, q = 0.001, 2000 steps"
    wrapped = wrap_label(text, 30)
    assert " ".join(wrapped.split()) == text and max(map(len, wrapped.splitlines())) <= 30


def figures_pyplot() -> Any:
    from audit.report.formatting import pyplot

    return pyplot()
