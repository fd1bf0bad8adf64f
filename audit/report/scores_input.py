"""Attack scores a user already has, read from a file: the input of ``audit scores``
(:mod:`audit.report.scores_audit`, issue 34 item 4).

Two layouts, told apart by the file's suffix:

- ``.npz``: the arrays ``scores_in`` (one score per trial whose canary was IN) and
  ``scores_out`` (canary OUT), as the harness's own score files hold them
  (``runs/<name>/scores/<cell>.npz``); or one array of scores beside one array of labels,
  read as a table's columns (below).
- ``.csv`` / ``.tsv`` (or any other suffix: read as delimited text): a header row, a score column
  and a label column. The score column is ``--score-column`` or the first header of
  :data:`SCORE_COLUMNS`; the label column ``--label-column`` or the first of
  :data:`LABEL_COLUMNS` (headers compared without case or surrounding spaces). Labels are
  ``1``/``0``, ``true``/``false``, ``yes``/``no`` or ``in``/``out`` (any case): 1 means the
  canary (the example) was a member, IN.

One score per trial: each trial is one independent training. An ``.npz`` array with several
values per trial (shape (n, k), rows = trials) is refused, naming its shape, unless ``reduce``
(``audit scores --reduce mean|max|min``) says how a row becomes its trial's score
(:func:`audit.stats.error_rates.per_trial_scores`); a CSV row is one trial.

Higher scores mean "member" (IN), as for every statistic of :mod:`audit.stats.binary`, unless the
audit declares lower = member (``--lower-is-member``: losses). Every
refusal is a :class:`audit.core.errors.AuditInputError` naming the file, the column or array at
fault and what the file holds.
"""

from __future__ import annotations

import csv
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audit.core.errors import AuditInputError
from audit.stats.error_rates import per_trial_scores

__all__ = [
    "LABEL_COLUMNS",
    "LABEL_VALUES",
    "SCORE_COLUMNS",
    "GivenScores",
    "read_scores",
    "split_by_label",
]

SCORE_COLUMNS: tuple[str, ...] = ("score", "scores", "membership_score", "mia_score", "logit")
"""Headers taken as the score column when none is named, in this order."""

LABEL_COLUMNS: tuple[str, ...] = (
    "label", "labels", "member", "is_member", "membership", "in", "is_in",
)
"""Headers taken as the label column when none is named, in this order."""

LABEL_VALUES: dict[str, bool] = {
    "1": True, "0": False, "1.0": True, "0.0": False, "true": True, "false": False,
    "yes": True, "no": False, "in": True, "out": False, "member": True, "nonmember": False,
}
"""Label spellings (lower case) and whether each means IN."""


@dataclass(frozen=True)
class GivenScores:
    """Scores read from a file: the IN and OUT trials' scores and where they came from
    (``source``: the file and the columns or arrays read, for the report)."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    source: str
    label: str
    """A short name for the scores (the file's name), used as the cell's name."""
    reduce: str | None = None
    """The rule that made one score per trial of an array's rows (None: one per trial given)."""


def read_scores(
    path: str | Path, *, score_column: str | None = None, label_column: str | None = None,
    reduce: str | None = None,
) -> GivenScores:
    """The IN and OUT scores of the ``.npz`` or delimited-text file at ``path`` (module docstring),
    one per trial (``reduce``: how an ``.npz`` row of several values becomes one; None refuses).

    Raises:
        AuditInputError: the file is missing or not readable as its suffix says; an array or
            column is missing (naming what the file holds); a label that is not one of
            :data:`LABEL_VALUES`; a score that is not a number or is NaN; no IN or no OUT trial;
            several values per trial without ``reduce`` (naming the array's shape).
    """
    path = Path(path)
    if not path.is_file():
        raise AuditInputError(
            f"{path}: no such file" if not path.exists() else f"{path} is not a file",
            culprit=str(path), fix="give an .npz with scores_in and scores_out, or a CSV with a "
            "score and a label column",
        )
    if path.suffix == ".npz":
        return _read_npz(path, score_column, label_column, reduce)
    return _read_table(path, score_column, label_column)


def split_by_label(
    scores: np.ndarray, members: np.ndarray, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """(scores of the members, scores of the non-members); refused when either side is empty or
    a score is NaN (naming ``source``)."""
    scores = np.asarray(scores, dtype=float).ravel()
    members = np.asarray(members, dtype=bool).ravel()
    bad = np.flatnonzero(np.isnan(scores))
    if bad.size:
        raise AuditInputError(
            f"{source}: score {bad[0]} (0-based) is NaN ({bad.size} NaN in all); every trial "
            "needs a score", culprit=source,
        )
    scores_in, scores_out = scores[members], scores[~members]
    for side, values, meaning in (("IN", scores_in, "1/true"), ("OUT", scores_out, "0/false")):
        if values.size == 0:
            raise AuditInputError(
                f"{source}: no {side} trial (no label {meaning}) among {scores.size} rows; the "
                "audit compares members' scores with non-members'", culprit=source,
            )
    return scores_in, scores_out


# --------------------------------------------------------------------------- .npz


def _per_trial(values: np.ndarray, path: Path, name: str, reduce: str | None) -> np.ndarray:
    """``values`` one per trial (:func:`audit.stats.error_rates.per_trial_scores`), refused as an
    :class:`AuditInputError` naming the file and the array."""
    try:
        return per_trial_scores(name, values, reduce)
    except ValueError as error:
        raise AuditInputError(f"{path}: {error}", culprit=f"{path}:{name}") from None


def _applied(reduce: str | None, archive: np.lib.npyio.NpzFile, *names: str) -> str | None:
    """``reduce`` if one of the arrays ``names`` had several values per trial (it was applied)."""
    several = any(
        np.ndim(archive[name]) > 1 and np.size(archive[name]) != np.shape(archive[name])[0]
        for name in names
    )
    return reduce if several else None


def _read_npz(
    path: Path, score_column: str | None, label_column: str | None, reduce: str | None = None
) -> GivenScores:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise AuditInputError(
            f"{path}: not a readable .npz ({error})", culprit=str(path)
        ) from None
    with archive:
        names = list(archive.files)
        if score_column is None and label_column is None and {"scores_in", "scores_out"} <= set(
            names
        ):
            scores_in = _per_trial(
                _npz_array(archive, path, "scores_in", flat=False), path, "scores_in", reduce
            )
            scores_out = _per_trial(
                _npz_array(archive, path, "scores_out", flat=False), path, "scores_out", reduce
            )
            for name, values in (("scores_in", scores_in), ("scores_out", scores_out)):
                if values.size == 0 or np.isnan(values).any():
                    raise AuditInputError(
                        f"{path}: {name} is empty or holds NaN; every trial needs a score",
                        culprit=f"{path}:{name}",
                    )
            return GivenScores(scores_in, scores_out, f"{path} (scores_in, scores_out)", path.name,
                               _applied(reduce, archive, "scores_in", "scores_out"))
        score = _pick(score_column, names, SCORE_COLUMNS, path, "score", "array")
        label = _pick(label_column, names, LABEL_COLUMNS, path, "label", "array", npz=True)
        scores = _per_trial(_npz_array(archive, path, score, flat=False), path, score, reduce)
        labels = _npz_array(archive, path, label, numeric=False)
        applied = _applied(reduce, archive, score)
    if scores.size != labels.size:
        raise AuditInputError(
            f"{path}: {score} has {scores.size} values and {label} {labels.size}; one label per "
            "score", culprit=str(path),
        )
    if labels.dtype.kind == "b":
        members = labels.astype(bool)
    elif labels.dtype.kind in "iuf" and np.isin(labels, (0, 1)).all():
        members = labels == 1
    else:
        members = _labels(labels.tolist(), str(path), label)
    scores_in, scores_out = split_by_label(scores, members, f"{path}:{score}")
    return GivenScores(scores_in, scores_out, f"{path} ({score}, labels {label})", path.name,
                       applied)


def _npz_array(
    archive: np.lib.npyio.NpzFile, path: Path, name: str, *, numeric: bool = True,
    flat: bool = True,
) -> np.ndarray:
    values = np.asarray(archive[name])
    values = values.ravel() if flat else values
    if not numeric:
        return values
    try:
        return values.astype(float)
    except (TypeError, ValueError):
        raise AuditInputError(
            f"{path}: array {name!r} is not numeric (dtype {values.dtype})", culprit=str(path)
        ) from None


# --------------------------------------------------------------------------- delimited text


def _read_table(path: Path, score_column: str | None, label_column: str | None) -> GivenScores:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            sample = handle.read(65536)
            handle.seek(0)
            dialect = _dialect(path, sample)
            reader = csv.reader(handle, dialect)
            header = next(reader, None)
            if not header or not any(cell.strip() for cell in header):
                raise AuditInputError(
                    f"{path}: empty; a header row naming a score and a label column is needed",
                    culprit=str(path),
                )
            names = [cell.strip() for cell in header]
            score = _pick(score_column, names, SCORE_COLUMNS, path, "score", "column")
            label = _pick(label_column, names, LABEL_COLUMNS, path, "label", "column")
            i, j = _position(names, score), _position(names, label)
            scores: list[float] = []
            members: list[bool] = []
            for row_number, row in enumerate(reader, start=2):
                if not row or not any(cell.strip() for cell in row):
                    continue  # a blank line
                if len(row) <= max(i, j):
                    raise AuditInputError(
                        f"{path}, line {row_number}: {len(row)} fields, but column {score!r} is "
                        f"field {i + 1} and {label!r} field {j + 1}", culprit=str(path),
                    )
                scores.append(_number(row[i], path, row_number, score))
                members.append(_label(row[j], f"{path}, line {row_number}", label))
    except UnicodeDecodeError as error:
        raise AuditInputError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); give a CSV, or an "
            ".npz with scores_in and scores_out", culprit=str(path),
        ) from None
    except csv.Error as error:
        raise AuditInputError(f"{path}: not readable as CSV ({error})", culprit=str(path)) from None
    scores_in, scores_out = split_by_label(
        np.asarray(scores, dtype=float), np.asarray(members, dtype=bool),
        f"{path}: column {score!r}",
    )
    return GivenScores(scores_in, scores_out, f"{path} (score {score}, label {label})", path.name)


def _dialect(path: Path, sample: str) -> type[csv.Dialect] | csv.Dialect:
    if path.suffix == ".tsv":
        return csv.excel_tab
    first = sample.splitlines()[0] if sample else ""
    if "," not in first:
        for delimiter in ("\t", ";"):
            if delimiter in first:
                return csv.excel_tab if delimiter == "\t" else _Semicolon
    return csv.excel


class _Semicolon(csv.excel):
    delimiter = ";"


def _pick(
    named: str | None, names: Sequence[str], defaults: Sequence[str], path: Path, what: str,
    kind: str, *, npz: bool = False,
) -> str:
    """The column (or array) ``named``, else the first of ``defaults`` present (headers
    compared in lower case); refused naming what ``path`` holds."""
    lower = {name.lower(): name for name in names}
    if named is not None:
        if named in names:
            return named
        if named.strip().lower() in lower:
            return lower[named.strip().lower()]
        raise AuditInputError(
            f"{path}: no {kind} {named!r} (--{what}-column); it has: {_listing(names)}",
            culprit=f"--{what}-column",
            fix=_closest(named, names),
        )
    for default in defaults:
        if default in lower:
            return lower[default]
    layout = (
        "; an .npz holds scores_in and scores_out, or a score array and a label array"
        if npz or path.suffix == ".npz" else ""
    )
    raise AuditInputError(
        f"{path}: no {what} {kind} (looked for {', '.join(defaults)}); it has: "
        f"{_listing(names)}{layout}",
        culprit=str(path),
        fix=f"name it with --{what}-column",
    )


def _listing(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names) if names else "nothing"


def _closest(named: str, names: Sequence[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(named, list(names), n=1)
    return f"did you mean {close[0]!r}?" if close else None


def _position(names: Sequence[str], name: str) -> int:
    return list(names).index(name)


def _number(text: str, path: Path, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise AuditInputError(
            f"{path}, line {line}: score {text.strip()!r} in column {column!r} is not a number",
            culprit=str(path),
        ) from None
    if math.isnan(value):
        raise AuditInputError(
            f"{path}, line {line}: score in column {column!r} is NaN; every trial needs a score",
            culprit=str(path),
        )
    return value


def _label(text: str, where: str, column: str) -> bool:
    """Whether the label ``text`` means IN (:data:`LABEL_VALUES`, any case)."""
    member = LABEL_VALUES.get(text.strip().lower())
    if member is None:
        raise AuditInputError(
            f"{where}: label {text.strip()!r} in {column!r} is not one of 1/0, true/false, "
            "yes/no, in/out", culprit=where,
        )
    return member


def _labels(values: Sequence[object], where: str, column: str) -> np.ndarray:
    """:func:`_label` of each value (an array's), refused at the first other value."""
    return np.array(
        [_label(str(value), f"{where}, value {k} (0-based)", column)
         for k, value in enumerate(values)], dtype=bool,
    )
