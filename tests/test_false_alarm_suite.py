"""The false-alarm suite (examples/false_alarm, issue 41 item 8): correct DP-SGD trainings of
the kinds users write; no check of the documented path may fail on any of them. The full
suite (every kind, 5 seeds) is ``examples/false_alarm/run_suite.py``; here a reduced set, one
seed each (about 1-2 s each on one core)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path[:0] = [str(EXAMPLES / "false_alarm"), str(EXAMPLES / "bug_zoo")]
import run_zoo  # noqa: E402  the bug zoo's documented path
import suite  # noqa: E402

#: kinds the harness still cries wolf on at seed 0 at the suite's last run (README.md's
#: Status); why: suite.CAUSES[name]. Remove a name once its cause is fixed.
STILL_FAILING: set[str] = set()


def test_at_least_twelve_kinds_covering_every_class() -> None:
    assert len(suite.KINDS) >= 12
    classes = {k.cls for k in suite.KINDS.values()}
    assert classes == {suite.POST, suite.RANDOM, suite.OPACUS, suite.ONE_SIDED, suite.PRECISION}
    opacus = [n for n in suite.KINDS if n.startswith("opacus")]
    assert len(opacus) >= 5 and len(suite.KINDS) - len(opacus) >= 5  # plain torch and Opacus


@pytest.mark.parametrize("name", sorted(n for n, k in suite.KINDS.items() if not k.file))
def test_each_variant_is_one_line_from_a_zoo_training(name: str) -> None:
    kind = suite.KINDS[name]
    committed = suite.kind_path(name).read_text(encoding="utf-8")
    assert committed == suite.variant_source(name)  # what suite.py generates
    base = (suite.ZOO / kind.base).read_text(encoding="utf-8")
    changed = [line for line in difflib.unified_diff(base.splitlines(), committed.splitlines(),
                                                     lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == 2


def test_every_kind_is_a_file() -> None:
    for name in suite.KINDS:
        assert suite.kind_path(name).is_file(), name


REDUCED = ["clip_noisy", "clip_noisy_unmarked", "dropout_layernorm", "opacus_dropout",
           "opacus_per_layer", "opacus_ghost", "autocast_bf16", "opacus_shuffle_accounted"]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(
        reason="; ".join(suite.CAUSES.get(n, {}).values()), strict=False))
     if n in STILL_FAILING else n for n in REDUCED],
)
def test_no_false_alarm_on_a_reduced_suite(name: str) -> None:
    """One seed: the loader matches, the replay passes, no finding fails, not violated."""
    out = run_zoo.audit_once(run_zoo.load(suite.kind_path(name)), 0)
    assert not out.found, out.what
