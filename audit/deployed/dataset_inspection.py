"""The unit of privacy: is one row one person? (docs/design/deployed.md, "the unit of privacy").

DP-SGD's accountant bounds what one *row* of the training set can change. Every check of the
deployed path (loader inspection, replay, canaries) varies one row, so a dataset that holds a
person in several rows passes them all while the person's privacy is weaker than the claim:
a user with several records, offline augmentation stored as rows, a dataset concatenated with
itself. This module looks at the rows themselves:

* **with a user key** (``user_key``: a callable ``index -> key`` or a sequence of keys, one per
  row), k = the most rows any one key holds: exact, nothing guessed;
* **without one**, groups of identical rows (complete: a hash of each row's bytes, features and
  label) and of near-identical rows (every feature within ``near_tolerance`` times the data's
  overall standard deviation, the same label: jittered copies; found by hashing each row's
  cell on four wide grids offset by a quarter cell, so a pair is found when it shares a cell of
  one grid: best effort, not exhaustive; geometric transforms such as flips or crops are not near
  in feature space).

The finding (:class:`audit.core.findings.Finding` ``unit_of_privacy``, level 0: a property of
the data, no randomness) fails when the rows are certainly not one person each: a user key with
k > 1, or duplication that is systematic (at least half the rows in groups: a dataset stored
with copies). A few duplicate groups alone do not fail it: distinct people share identical rows
in low-dimensional tabular data (scikit-learn's iris holds one such pair); the sentence says so
and what follows if they are one person. The group's epsilon is stated where the theory has it
(:mod:`audit.theory.group_privacy`: the Poisson-subsampled Gaussian's mixture PLD when sigma,
q and steps are known, else the generic (k eps, k e^((k-1) eps) delta)).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.sparse import csgraph

from audit.core.findings import Finding
from audit.core.validation import check_int, check_real
from audit.theory.group_privacy import (
    GroupEpsilon,
    group_epsilon_generic,
    group_epsilon_poisson,
)

__all__ = ["DatasetInspection", "dataset_rows", "inspect_dataset"]

NEAR_TOLERANCE = 1e-3
"""Default near-duplicate tolerance, in units of the data's overall standard deviation."""

SYSTEMATIC_SHARE = 0.5
"""Duplication is systematic (the finding fails without a user key) when at least this share
of the rows lies in groups of identical or near-identical rows."""


@dataclass(frozen=True)
class DatasetInspection:
    """What the rows say about the unit of privacy.

    Attributes:
        n: rows inspected.
        k: the largest group of rows that are (or may be) one person.
        typical_k: the most common size among the groups (1 when there are none).
        exact_groups: groups of identical rows (features and label).
        near_groups: further groups of near-identical rows (within the tolerance).
        rows_in_groups: rows that lie in some group.
        by_user_key: whether the groups come from a user key (exact) or from the rows' values.
        examples: up to five groups, as row indices.
        finding: the ``unit_of_privacy`` finding (level 0).
        group_epsilon: the person's epsilon for a group of ``k`` (None without a claim, or when
            k = 1).
    """

    n: int
    k: int
    typical_k: int
    exact_groups: int
    near_groups: int
    rows_in_groups: int
    by_user_key: bool
    examples: tuple[tuple[int, ...], ...]
    finding: Finding
    group_epsilon: GroupEpsilon | None

    def sentence(self) -> str:
        """The finding's message: what was seen and what it does to the claim."""
        return self.finding.message


def dataset_rows(dataset: Any, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(features, labels) of ``dataset`` as arrays, one flattened row per example.

    Reads a ``TensorDataset``'s tensors directly, an array as it is, and any other map-style
    dataset item by item (``dataset[i]`` is ``x`` or ``(x, y, ...)``).
    """
    tensors = getattr(dataset, "tensors", None)
    if tensors is not None and len(tensors) >= 1:
        x = _as_array(tensors[0])
        y = _as_array(tensors[1]) if len(tensors) > 1 else None
    elif isinstance(dataset, np.ndarray):
        x, y = dataset, None
    else:
        n = len(dataset)
        if max_rows is not None:
            n = min(n, max_rows)
        items = [dataset[i] for i in range(n)]
        firsts = [item[0] if isinstance(item, tuple | list) else item for item in items]
        x = np.stack([_as_array(f) for f in firsts])
        has_label = all(isinstance(item, tuple | list) and len(item) > 1 for item in items)
        y = np.stack([_as_array(item[1]) for item in items]) if has_label else None
    if max_rows is not None:
        x = x[:max_rows]
        y = None if y is None else y[:max_rows]
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if y is not None:
        y = np.asarray(y).reshape(len(y), -1)
    return x, y


def _as_array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _groups_of(keys: Sequence[Any]) -> list[tuple[int, ...]]:
    """Groups of two or more indices sharing a key."""
    where: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        where.setdefault(key, []).append(i)
    return [tuple(rows) for rows in where.values() if len(rows) > 1]


def _exact_groups(x: np.ndarray, y: np.ndarray | None) -> list[tuple[int, ...]]:
    rows = np.ascontiguousarray(x if y is None else np.hstack([x, y.astype(np.float64)]))
    keys = [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]
    return _groups_of(keys)


def _near_groups(x: np.ndarray, y: np.ndarray | None, tolerance: float) -> list[tuple[int, ...]]:
    """Groups of rows whose features all lie within ``tolerance`` (in units of the data's overall
    standard deviation) of a linked row,
    found through shared cells of four grids of width tolerance max(2, d) (offsets a quarter
    cell apart),
    verified pair by pair (Chebyshev distance), joined into connected components."""
    # one scale for every feature (the data's overall standard deviation): a per-feature scale
    # would blow up a jitter in a nearly constant feature (an image's border pixel)
    scale = float(x.std()) or 1.0
    z = (x - x.mean(axis=0)) / scale
    label = None if y is None else [row.tobytes() for row in np.ascontiguousarray(y)]
    links: list[tuple[int, int]] = []

    # cells of width w = tolerance * max(2, d): a pair within the tolerance straddles a cell
    # edge in a feature with probability <= tolerance / w <= 1 / d, so it shares a cell of one
    # grid with probability >= (1 - 1/d)^d >= 1/4, and of one of four grids offset by w/4 far
    # more often; wide cells cost only candidate checks (each verified exactly below)
    width = tolerance * max(2, z.shape[1])
    for offset in (0.0, 0.25 * width, 0.5 * width, 0.75 * width):
        cells = np.floor((z + offset) / width).astype(np.int64)
        for group in _groups_of([row.tobytes() for row in cells]):
            pairs = ((a, b) for i, a in enumerate(group) for b in group[i + 1:]) \
                if len(group) <= 64 else ((group[0], b) for b in group[1:])
            links += [(head, other) for head, other in pairs
                      if (label is None or label[head] == label[other])
                      and np.max(np.abs(z[head] - z[other])) <= tolerance]
    return _components(len(z), links)


def inspect_dataset(
    dataset: Any,
    *,
    user_key: Callable[[int], Any] | Sequence[Any] | None = None,
    near_tolerance: float = NEAR_TOLERANCE,
    epsilon: float | None = None,
    delta: float | None = None,
    noise_multiplier: float | None = None,
    sample_rate: float | None = None,
    steps: int | None = None,
    max_rows: int | None = 200_000,
) -> DatasetInspection:
    """Check that one row is one person (module docstring); state the group's epsilon.

    Args:
        dataset: the training rows (a torch ``Dataset``, ``TensorDataset`` or array).
        user_key: a person's key per row (a sequence, or a callable of the row index); when
            given, k is exact.
        near_tolerance: near-identical rows agree within this many times the data's overall
            standard deviation in every feature (0 turns the near-duplicate search off).
        epsilon: the claim's epsilon (row level), for the group's epsilon.
        delta: the claim's delta.
        noise_multiplier: the training's sigma; with ``sample_rate`` and ``steps`` the group's
            epsilon comes from the mixture PLD, else from generic group privacy.
        sample_rate: the Poisson sampling rate q the accountant assumed.
        steps: the optimizer steps composed.
        max_rows: rows read at most (None: all).

    Returns:
        The inspection; its ``finding`` is ``unit_of_privacy``.

    Raises:
        ValueError: a user key whose length is not the number of rows, a negative tolerance.
    """
    near_tolerance = check_real("near_tolerance", near_tolerance, minimum=0.0)
    x, y = dataset_rows(dataset, max_rows)
    n = len(x)
    if user_key is not None:
        keys = [user_key(i) for i in range(n)] if callable(user_key) else list(user_key)[:n]
        if len(keys) != n:
            raise ValueError(f"user_key: {len(keys)} keys for {n} rows; give one key per row")
        groups, exact, near = _groups_of(keys), 0, 0
    else:
        groups = _exact_groups(x, y)
        exact = len(groups)
        if near_tolerance > 0 and n > 1:
            seen = {i for g in groups for i in g}
            extra = [g for g in _near_groups(x, y, near_tolerance) if not set(g) <= seen]
            near = len(extra)
            groups = _merge(groups + extra)
        else:
            near = 0
    sizes = [len(g) for g in groups]
    k = max(sizes, default=1)
    typical = Counter(sizes).most_common(1)[0][0] if sizes else 1
    in_groups = sum(sizes)
    systematic = in_groups >= SYSTEMATIC_SHARE * n and n > 0
    group_eps = _group_epsilon(k, epsilon, delta, noise_multiplier, sample_rate, steps)
    finding = _finding(n, k, typical, in_groups, user_key is not None, systematic, exact, near,
                       groups, group_eps, epsilon)
    examples = tuple(sorted(groups, key=len, reverse=True)[:5])
    return DatasetInspection(n, k, typical, exact, near, in_groups, user_key is not None,
                             examples, finding, group_eps)


def _merge(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Groups sharing a row joined into one."""
    rows = max((i for group in groups for i in group), default=-1) + 1
    return _components(rows, [(group[0], other) for group in groups for other in group[1:]])


def _components(n: int, links: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """The connected components of two or more of rows 0..n-1 joined by ``links``
    (scipy.sparse.csgraph), each ascending, ordered by their first row."""
    if not links:
        return []
    heads, others = np.array(links, dtype=np.int64).T
    graph = sparse.coo_matrix((np.ones(len(links)), (heads, others)), shape=(n, n))
    _, labels = csgraph.connected_components(graph, directed=False)
    return _groups_of(labels.tolist())


def _group_epsilon(
    k: int, epsilon: float | None, delta: float | None, sigma: float | None,
    q: float | None, steps: int | None,
) -> GroupEpsilon | None:
    if k <= 1 or delta is None:
        return None
    if sigma is not None and q is not None and steps is not None:
        return group_epsilon_poisson(sigma, q, check_int("steps", steps, minimum=1), k, delta)
    if epsilon is not None:
        return group_epsilon_generic(epsilon, delta, k)
    return None


def _finding(
    n: int, k: int, typical: int, in_groups: int, by_key: bool, systematic: bool, exact: int,
    near: int, groups: list[tuple[int, ...]], group_eps: GroupEpsilon | None,
    epsilon: float | None,
) -> Finding:
    if k <= 1:
        what = "user key" if by_key else "rows"
        return Finding("unit_of_privacy", True, 0.0,
                       f"one row per person: no two of the {n} {what} "
                       f"{'share a key' if by_key else 'are identical or near-identical'}")
    example = ", ".join(str(i) for i in max(groups, key=len)[:6])
    person = _person_epsilon(group_eps, epsilon, k)
    if by_key:
        return Finding(
            "unit_of_privacy", False, 0.0,
            f"one person holds up to k = {k} rows (user key; {in_groups} of {n} rows in "
            f"{len(groups)} multi-row users, e.g. rows {example}): the accountant's epsilon is "
            f"per row, not per person{person}; account per user (sample users, clip each "
            "user's summed gradient: user-level DP-SGD) or state the claim per row",
            refutes=False)
    kinds = " and ".join(
        text for count, text in ((exact, f"{exact} groups of identical rows"),
                                 (near, f"{near} groups of near-identical rows")) if count)
    if systematic:
        return Finding(
            "unit_of_privacy", False, 0.0,
            f"each example appears to be stored as k = {typical} rows ({in_groups} of {n} rows "
            f"in {kinds}, up to {k} rows, e.g. rows {example}): copies or offline augmentation "
            f"stored as rows, so one person is k rows and the row-level epsilon does not hold "
            f"per person{person}; keep one row per person (augment inside the loop, average "
            "the copies' gradients before clipping) or account for groups of k",
            refutes=False)
    return Finding(
        "unit_of_privacy", True, 0.0,
        f"note: {in_groups} of {n} rows lie in {kinds} (up to {k} rows, e.g. rows {example}); "
        "distinct people can share identical rows in low-dimensional data, so this alone proves "
        f"nothing; if such rows are one person, the row-level epsilon does not hold for them"
        f"{person}; pass user_key= to check the unit of privacy exactly")


def _person_epsilon(group_eps: GroupEpsilon | None, epsilon: float | None, k: int) -> str:
    if group_eps is None:
        return ""
    row = f" (the claim's {epsilon:.3g} per row)" if epsilon is not None else ""
    return (f": a person with {k} rows has epsilon <= {group_eps.epsilon:.3g} at delta = "
            f"{group_eps.delta:.3g}{row}, by {group_eps.method.split(':')[0]}")
