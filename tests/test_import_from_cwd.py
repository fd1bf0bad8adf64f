"""`module:function` arguments import from the current folder first (issue 43 item 2).

The ``audit`` console script runs with the venv's ``bin`` as ``sys.path[0]``; a package beside
the user's shell must still be found, as pytest and uvicorn find it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from audit.core.validation import load_callable

LOADER = """
from torch.utils.data import DataLoader, TensorDataset
import torch

def make_loader():
    return DataLoader(TensorDataset(torch.zeros(40, 2)), batch_size=8, shuffle=True)
"""


def _package(root: Path, name: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "loaders.py").write_text(LOADER)


def test_module_path_found_in_the_current_folder(tmp_path, monkeypatch):
    _package(tmp_path, "cwd_first_pkg_a")
    monkeypatch.chdir(tmp_path)
    # as under the console script: sys.path[0] is the venv's bin, not the current folder
    monkeypatch.setattr(sys, "path", [str(Path(sys.executable).parent)]
                        + [p for p in sys.path if p not in ("", str(tmp_path))])
    make_loader = load_callable("factory", "cwd_first_pkg_a.loaders:make_loader")
    assert len(make_loader().dataset) == 40
    assert str(tmp_path) not in sys.path  # the folder was put first for the import only


def test_missing_module_names_the_field(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"factory='no_such_pkg_xyz.mod:f': cannot import"):
        load_callable("factory", "no_such_pkg_xyz.mod:f")


def test_console_script_imports_from_the_current_folder(tmp_path):
    script = Path(sys.executable).parent / "audit"
    if not script.exists():
        pytest.skip("the audit console script is not installed beside this interpreter")
    _package(tmp_path, "cwd_first_pkg_b")
    done = subprocess.run(
        [str(script), "inspect-loader", "cwd_first_pkg_b.loaders:make_loader",
         "--inspection-epochs", "20", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dynamic_shuffle" in done.stdout
