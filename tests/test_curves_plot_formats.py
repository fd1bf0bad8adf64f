"""``audit curves --plot FILE.png --format ...``: saved as every plot of the harness is
(audit.report.formatting.save_figure: PNG at 150 dpi, SVG/PDF beside it)."""

from __future__ import annotations

from audit.cli import main

ARGS = ["curves", "--sampler", "poisson", "--sigma", "1", "--steps", "10", "--n", "1000"]


def test_plot_formats_written_beside_the_png(tmp_path, capsys):
    plot = tmp_path / "curves.png"
    assert main([*ARGS, "--plot", str(plot), "--format", "svg,pdf"]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
    assert plot.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
    out = capsys.readouterr().out
    assert f"plot: {plot}, {plot.with_suffix('.svg')}, {plot.with_suffix('.pdf')}" in out


def test_plot_must_be_a_png_and_formats_known(tmp_path, capsys):
    assert main([*ARGS, "--plot", str(tmp_path / "curves.pdf")]) == 2
    assert "must end in .png" in capsys.readouterr().err
    assert main([*ARGS, "--format", "svgg"]) == 2
    assert "did you mean 'svg'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before any curve is computed
