"""Outputs people load (issue 34 item 5): cells.csv beside summary.json, the schema version,
the plots' resolution and formats, joblib's CPU count and a container's memory limit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import TINY_AUDIT

from audit.cli import main
from audit.report.formatting import PLOT_DPI, check_formats
from audit.run import resources
from audit.run.results import SCHEMA_VERSION, flat_scalars
from audit.run.summary import CELLS_FILE, SUMMARY_FILE


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory, tiny_audit_text: str) -> Path:
    """The tiny simulated audit (4 cells), run once with SVG plots beside the PNGs."""
    folder = tmp_path_factory.mktemp("outputs") / "run"
    folder.mkdir()
    (folder / "audit.toml").write_text(tiny_audit_text)
    assert main(["run", str(folder), "--quiet", "--format", "png,svg"]) == 0
    return folder


@pytest.fixture(scope="module")
def tiny_audit_text() -> str:
    return TINY_AUDIT


def _same(csv_value: object, json_value: object) -> bool:
    """A cells.csv value read by pandas against summary.json's: floats bit for bit (pandas 3's
    default parser round-trips; before 3, float_precision="round_trip"), summary.json's
    "inf"/"nan" strings as pandas's floats, None as an empty field (NaN)."""
    if json_value is None:
        return isinstance(csv_value, float) and math.isnan(csv_value)
    if json_value in ("inf", "-inf", "nan") and isinstance(csv_value, float):
        return str(csv_value) == json_value
    if isinstance(json_value, bool) or isinstance(csv_value, bool):
        return bool(csv_value) == json_value and isinstance(json_value, bool)
    if isinstance(json_value, int | float) and not isinstance(csv_value, str):
        return float(csv_value) == float(json_value)  # type: ignore[arg-type]
    return str(csv_value) == str(json_value)


def test_cells_csv_loads_with_pandas_and_matches_summary_json(reported: Path) -> None:
    pd = pytest.importorskip("pandas")
    summary = json.loads((reported / SUMMARY_FILE).read_text())
    # pandas >= 3 reads round-trip by default and deprecates float_precision (Pandas4Warning)
    exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
    table = pd.read_csv(reported / CELLS_FILE, **exact)
    assert summary["schema_version"] == SCHEMA_VERSION == 1
    assert next(iter(summary)) == "schema_version"
    assert len(table) == len(summary["cells"]) == 4
    head = ["schema_version", "cell", "sampler", "threat_model", "attack"]
    assert list(table.columns[:5]) == head
    assert (table["schema_version"] == SCHEMA_VERSION).all()
    assert str(table["epsilon_lb"].dtype) == "float64" and table["verdict"].dtype != float
    compared = 0
    for row, cell in zip(table.to_dict("records"), summary["cells"], strict=True):
        flat = flat_scalars(cell)
        assert set(row) == {"schema_version", *flat}  # every scalar of the cell, nothing else
        for name, value in flat.items():
            assert _same(row[name], value), (cell["cell"], name, row[name], value)
            compared += 1
    assert compared > 4 * 100  # about 170 scalars a cell
    # the headline columns the issue names are there, under their summary.json names
    for name in ("verdict", "epsilon_lb", "evidence.fpr_hi", "evidence.fnr_hi",
                 "bound.threshold", "trials_in", "theory_upper_epsilon"):
        assert name in table.columns


def test_cells_csv_reads_back_with_the_csv_module(reported: Path) -> None:
    """Without pandas: the csv module reads the same header and one row per cell."""
    import csv

    with (reported / CELLS_FILE).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    summary = json.loads((reported / SUMMARY_FILE).read_text())
    assert [r["cell"] for r in rows] == [c["cell"] for c in summary["cells"]]
    assert [float(r["epsilon_lb"]) for r in rows] == [c["epsilon_lb"] for c in summary["cells"]]


def test_plots_are_png_at_150_dpi_with_svg_beside(reported: Path) -> None:
    from PIL import Image

    pngs = sorted(reported.glob("*.png"))
    assert len(pngs) == 9  # four cells' trade-off and ROC plots, and the overview
    for png in pngs:
        assert png.with_suffix(".svg").stat().st_size > 1000
        with Image.open(png) as image:
            # PNG stores whole pixels per metre: 150 dpi = 5905.5 /m is written 5906, so the dpi
            # read back is within 0.5 * 0.0254 = 0.0127 of it
            assert image.info["dpi"][0] == pytest.approx(PLOT_DPI, abs=0.0127)
    first = json.loads((reported / SUMMARY_FILE).read_text())["cells"][0]["cell"]
    with Image.open(reported / f"tradeoff_{first}.png") as image:
        assert image.size == (12 * PLOT_DPI, round(7.2 * PLOT_DPI))  # figsize 12 x 7.2 inches


def test_plot_formats_are_checked() -> None:
    assert check_formats("svg") == ("png", "svg")
    assert check_formats(["PDF", "png", " svg "]) == ("png", "pdf", "svg")
    with pytest.raises(ValueError, match=r"unknown plot format 'sgv'.*did you mean 'svg'"):
        check_formats("png,sgv")


def test_cli_refuses_an_unknown_format_in_one_line(tmp_path: Path, capsys) -> None:
    code = main(["report", str(tmp_path), "--format", "jpeg"])
    err = capsys.readouterr().err
    assert code == 2 and "--format" in err and "jpeg" in err and "png, svg, pdf" in err


def test_workers_of_n_jobs_minus_one_are_joblibs_cpu_count(monkeypatch) -> None:
    import joblib

    monkeypatch.setattr(joblib, "cpu_count", lambda *args, **kwargs: 3)
    assert resources.cpu_count() == 3
    assert resources.worker_count(-1) == 3 and resources.worker_count(5) == 5


def _meminfo(tmp_path: Path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: 99999999 kB\nMemFree: 1 kB\nMemAvailable: {available_kb} kB\n")
    return path


def test_memory_honours_a_cgroup_v2_limit(tmp_path: Path) -> None:
    """cgroup v2: memory.max - (memory.current - inactive_file), the least over the process's
    cgroup and its parents, and never above /proc/meminfo's MemAvailable."""
    root = tmp_path / "cgroup"
    own = root / "job" / "task"
    own.mkdir(parents=True)
    (root / "memory.max").write_text("max\n")  # the root: no limit
    (root / "job" / "memory.max").write_text(f"{8 * 2**30}\n")  # the parent: 8 GiB
    (root / "job" / "memory.current").write_text(f"{3 * 2**30}\n")
    (root / "job" / "memory.stat").write_text(f"anon 1\ninactive_file {2**30}\n")
    (own / "memory.max").write_text(f"{4 * 2**30}\n")  # its own: 4 GiB, 1 GiB used
    (own / "memory.current").write_text(f"{2**30}\n")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text("0::/job/task\n")
    # parent: 8 - (3 - 1) = 6 GiB; own: 4 - 1 = 3 GiB
    assert resources.cgroup_memory_available(root, self_cgroup) == 3 * 2**30
    host = _meminfo(tmp_path, 64 * 2**20)  # 64 GiB available on the host
    assert resources.available_memory(
        meminfo=host, cgroup_root=root, self_cgroup=self_cgroup
    ) == 3 * 2**30
    small = _meminfo(tmp_path, 2**20)  # 1 GiB on the host: the host's figure is the lesser
    assert resources.available_memory(
        meminfo=small, cgroup_root=root, self_cgroup=self_cgroup
    ) == 2**30


def test_memory_honours_a_cgroup_v1_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    memory = root / "memory"
    memory.mkdir(parents=True)
    self_cgroup = tmp_path / "self_cgroup"
    # a container without a cgroup namespace: /proc/self/cgroup names a path the mount lacks
    self_cgroup.write_text("4:memory:/docker/abc\n3:cpu:/docker/abc\n0::/\n")
    (memory / "memory.limit_in_bytes").write_text(f"{2 * 2**30}\n")
    (memory / "memory.usage_in_bytes").write_text(f"{2**29}\n")
    (memory / "memory.stat").write_text(f"inactive_file 7\ntotal_inactive_file {2**28}\n")
    # 2 GiB - (512 MiB - 256 MiB)
    assert resources.cgroup_memory_available(root, self_cgroup) == 2 * 2**30 - 2**28
    host = _meminfo(tmp_path, 64 * 2**20)
    assert resources.available_memory(
        meminfo=host, cgroup_root=root, self_cgroup=self_cgroup
    ) == 2 * 2**30 - 2**28
    # the kernel's "no limit" (PAGE_COUNTER_MAX pages): the host's figure
    (memory / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert resources.cgroup_memory_available(root, self_cgroup) is None
    assert resources.available_memory(
        meminfo=host, cgroup_root=root, self_cgroup=self_cgroup
    ) == 64 * 2**30


def test_memory_without_cgroups_is_meminfo(tmp_path: Path) -> None:
    host = _meminfo(tmp_path, 5 * 2**20)
    missing = tmp_path / "none"
    assert resources.cgroup_memory_available(missing, missing) is None
    assert resources.available_memory(
        meminfo=host, cgroup_root=missing, self_cgroup=missing
    ) == 5 * 2**30


def test_check_fits_refuses_what_the_cgroup_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_audit_text: str
) -> None:
    """The runner's memory check reads the cgroup: a 1 MiB limit refuses the tiny audit's
    scoring process (MAIN_PROCESS_BYTES alone is 512 MiB)."""
    from audit.run.spec import load_spec

    (tmp_path / "audit.toml").write_text(tiny_audit_text)
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text(f"{2**20}\n")
    (root / "memory.current").write_text("0\n")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text("0::/\n")
    monkeypatch.setattr(resources, "CGROUP_ROOT", root)
    monkeypatch.setattr(resources, "SELF_CGROUP", self_cgroup)
    limited = r"1\.05 MB of memory is available \(the limit of this process's memory cgroup"
    with pytest.raises(ValueError, match=limited):
        resources.check_fits(load_spec(tmp_path), tmp_path)


def test_library_messages_go_through_logging(
    reported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys
) -> None:
    """A resumed run says so at INFO (audit.run.runner), a damaged file moved aside is a WARNING
    (audit.run.store); neither is printed by the library itself (the CLI's handler prints
    them: tests/test_faults.py)."""
    import logging

    from audit.report import run_audit
    from audit.run.store import quarantine

    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="audit"):
        run_audit(reported, progress=False, plots=False)
        damaged = tmp_path / "shards" / "x.npz"
        damaged.parent.mkdir()
        damaged.write_bytes(b"")
        quarantine(damaged, tmp_path, f"{damaged}: empty")
    records = {(r.name, r.levelname): r.getMessage() for r in caplog.records}
    assert "resuming: 6 of 6 shards on disk" in records["audit.run.runner", "INFO"]
    assert "moved to" in records["audit.run.store", "WARNING"]
    assert capsys.readouterr().err == ""
