"""The reference in Python: the proven bracket of a mechanism's eps at a delta, or of its delta
at an eps, under a stated neighbouring relation (docs/design.md §11.4).

    >>> from audit.accounting.reference import epsilon_bracket
    >>> b = epsilon_bracket("poisson", sigma=1.0, q=0.01, steps=1000, delta=1e-5)
    >>> round(b.lower, 3), round(b.upper, 3)        # doctest: +SKIP
    (1.828, 1.828)

``lower`` is achieved by a known pair of neighbouring datasets (the true value is at least
this), ``upper`` is a guarantee (the true value is at most this); either is None where the
theory knows none under that relation (:mod:`audit.accounting.adjacency`). For delta at an
eps the same curves give delta_lower(eps) <= delta(eps) <= delta_upper(eps).

Brackets are cached in memory (the curves, :func:`audit.theory.bounds_for`) and on disk
(:class:`TheoryCache`, the numbers): one JSON file per (cell, relation, quantity, point) under
a key that also holds the code's fingerprint (:func:`code_fingerprint`: the harness's version,
the sources of the theory, sampling and this module, dp_accounting's version), so an edit to
the theory never reads an old number. Default folder: ``$AUDIT_THEORY_CACHE``, else
``$XDG_CACHE_HOME/dpsgd-audit/theory`` (``~/.cache/dpsgd-audit/theory``);
``AUDIT_THEORY_CACHE=off`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from audit.accounting.adjacency import DEFAULT_ADJACENCY, adjacent_bounds, check_adjacency
from audit.core.mechanism import Mechanism
from audit.core.validation import check_int, check_probability, check_real
from audit.sampling import validate

__all__ = [
    "CACHE_ENV",
    "Bracket",
    "TheoryCache",
    "code_fingerprint",
    "default_cache_dir",
    "delta_bracket",
    "epsilon_bracket",
    "mechanism_delta_bracket",
    "mechanism_epsilon_bracket",
    "resolve_cache",
]

CACHE_ENV = "AUDIT_THEORY_CACHE"
"""Environment variable: the disk cache's folder, or ``off``."""

CACHE_FORMAT = 1


@dataclass(frozen=True)
class Bracket:
    """A proven bracket: ``lower <= true value <= upper`` (None: no bound known).

    Attributes:
        quantity: ``"epsilon"`` (eps at the delta ``at``) or ``"delta"`` (delta at the eps ``at``).
        at: the delta (or eps) where it is evaluated.
        adjacency: the neighbouring relation (:data:`audit.accounting.adjacency.ADJACENCIES`).
        lower_method: which curve gave the lower bound.
        upper_method: which curve gave the upper bound.
        note: why a bound is missing, or what the relation's theory rests on.
    """

    lower: float | None
    upper: float | None
    quantity: str = "epsilon"
    at: float = math.nan
    adjacency: str = DEFAULT_ADJACENCY
    lower_method: str | None = None
    upper_method: str | None = None
    note: str | None = None

    @property
    def width(self) -> float | None:
        """upper - lower (None unless both are known)."""
        if self.lower is None or self.upper is None:
            return None
        return self.upper - self.lower

    @property
    def consistent(self) -> bool:
        """False when the lower bound exceeds the upper beyond 1e-3 + 0.1% (a numerical
        fault of one of the curves: neither then proves anything about a claim between them)."""
        if self.lower is None or self.upper is None or not math.isfinite(self.upper):
            return True
        return self.lower <= self.upper + 1e-3 + 1e-3 * abs(self.upper)

    def to_dict(self) -> dict[str, object]:
        return {k: _json(v) for k, v in asdict(self).items()}


def _json(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _unjson(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)
    return float(value)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# The disk cache


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of what the numbers depend on: the harness's version, the sources of
    ``audit/theory``, ``audit/sampling``, this module and the relations' theory, and
    dp_accounting's version."""
    from importlib import metadata

    import audit

    root = Path(audit.__file__).parent
    digest = hashlib.sha256(f"format {CACHE_FORMAT}".encode())
    for name in ("dpsgd-audit", "dp-accounting"):
        try:
            digest.update(f"{name} {metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} -".encode())
    files = sorted((root / "theory").glob("*.py")) + sorted((root / "sampling").glob("*.py"))
    files += [root / "accounting" / "adjacency.py", root / "accounting" / "reference.py"]
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def default_cache_dir() -> Path | None:
    """``$AUDIT_THEORY_CACHE`` (None if ``off``), else the user cache folder."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("off", "0", "false", "") else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dpsgd-audit" / "theory"


class TheoryCache:
    """Brackets on disk, one JSON file per key (atomic writes; unreadable files ignored).

    A folder that cannot be written is not an error: the bracket is computed and returned.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(mechanism: Mechanism, adjacency: str, quantity: str, at: float) -> dict[str, object]:
        return {
            "code": code_fingerprint(),
            "mechanism": {
                "sampler": mechanism.sampler, "threat_model": mechanism.threat_model,
                "sigma": repr(float(mechanism.sigma)), "steps_per_epoch": mechanism.steps_per_epoch,
                "epochs": mechanism.epochs, "n": mechanism.n, "batch_size": mechanism.batch_size,
                "max_batch_size": mechanism.max_batch_size,
            },
            "adjacency": adjacency,
            "quantity": quantity,
            "at": repr(float(at)),
        }

    def _path(self, key: dict[str, object]) -> Path:
        name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.directory / name[:2] / f"{name}.json"

    def get(self, key: dict[str, object]) -> Bracket | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
            if data.get("key") != key:
                raise ValueError("key mismatch")
            b = data["bracket"]
            bracket = Bracket(
                lower=_unjson(b["lower"]), upper=_unjson(b["upper"]), quantity=b["quantity"],
                at=float(b["at"]), adjacency=b["adjacency"], lower_method=b["lower_method"],
                upper_method=b["upper_method"], note=b["note"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return bracket

    def put(self, key: dict[str, object], bracket: Bracket) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, suffix=".tmp", delete=False
            ) as handle:
                json.dump({"key": key, "bracket": bracket.to_dict()}, handle)
            os.replace(handle.name, path)
        except OSError:
            pass



def resolve_cache(cache: TheoryCache | str | Path | bool | None) -> TheoryCache | None:
    """None/True: the default folder (:func:`default_cache_dir`); False: no disk cache; a
    folder or a :class:`TheoryCache`: that one."""
    if isinstance(cache, TheoryCache):
        return cache
    if cache is False:
        return None
    if cache is None or cache is True:
        directory = default_cache_dir()
        return None if directory is None else TheoryCache(directory)
    return TheoryCache(cache)


# --------------------------------------------------------------------------------------
# Brackets of a mechanism


def _label(curve: object) -> str | None:
    if curve is None:
        return None
    return f"{curve.kind}: {curve.method}"  # type: ignore[attr-defined]


def _compute(mechanism: Mechanism, adjacency: str, quantity: str, at: float) -> Bracket:
    bounds = adjacent_bounds(mechanism, adjacency)

    def value(curve: object) -> float | None:
        if curve is None:
            return None
        method = curve.epsilon if quantity == "epsilon" else curve.delta  # type: ignore[attr-defined]
        import numpy as np

        return float(np.asarray(method(np.array([at]))).ravel()[0])

    return Bracket(
        lower=value(bounds.lower), upper=value(bounds.upper), quantity=quantity, at=float(at),
        adjacency=adjacency, lower_method=_label(bounds.lower), upper_method=_label(bounds.upper),
        note="; ".join(bounds.notes) or None,
    )


def _bracket(
    mechanism: Mechanism, adjacency: str, quantity: str, at: float,
    cache: TheoryCache | str | Path | bool | None,
) -> Bracket:
    adjacency = check_adjacency(adjacency)
    store = resolve_cache(cache)
    if store is None:
        return _compute(mechanism, adjacency, quantity, at)
    key = store.key(mechanism, adjacency, quantity, at)
    cached = store.get(key)
    if cached is not None:
        return cached
    bracket = _compute(mechanism, adjacency, quantity, at)
    store.put(key, bracket)
    return bracket


def mechanism_epsilon_bracket(
    mechanism: Mechanism, delta: float, *, adjacency: str = DEFAULT_ADJACENCY,
    cache: TheoryCache | str | Path | bool | None = None,
) -> Bracket:
    """The proven bracket of eps(delta) of ``mechanism`` under ``adjacency``."""
    delta = check_probability("delta", delta)
    return _bracket(mechanism, adjacency, "epsilon", delta, cache)


def mechanism_delta_bracket(
    mechanism: Mechanism, epsilon: float, *, adjacency: str = DEFAULT_ADJACENCY,
    cache: TheoryCache | str | Path | bool | None = None,
) -> Bracket:
    """The proven bracket of delta(eps) of ``mechanism`` under ``adjacency``."""
    epsilon = check_real("epsilon", epsilon, minimum=0.0)
    return _bracket(mechanism, adjacency, "delta", epsilon, cache)


def _mechanism(
    sampler: str | Mechanism, *, sigma: float | None, q: float | None, steps: int | None,
    steps_per_epoch: int | None, epochs: int | None, threat_model: str, n: int | None,
    batch_size: int | None, max_batch_size: int | None,
) -> Mechanism:
    if isinstance(sampler, Mechanism):
        return validate(sampler)
    if sigma is None:
        raise ValueError("sigma is required (the noise multiplier, > 0)")
    if steps_per_epoch is None:
        if q is None:
            raise ValueError("give steps_per_epoch (T) or q = 1/T")
        q = check_probability("q", q)
        t = round(1.0 / q)
        if t < 1 or not math.isclose(t * q, 1.0, rel_tol=1e-9):
            raise ValueError(
                f"q={q!r} must be 1/T for an integer T (the harness's rate b/n with n = b T); "
                "give steps_per_epoch and epochs (and n, batch_size) instead"
            )
        steps_per_epoch = t
    elif q is not None and not math.isclose(q * steps_per_epoch, 1.0, rel_tol=1e-9):
        raise ValueError(f"q={q!r} and steps_per_epoch={steps_per_epoch} disagree (q = 1/T)")
    if epochs is None:
        if steps is None:
            epochs = 1
        else:
            steps = check_int("steps", steps, minimum=1)
            if steps % steps_per_epoch:
                raise ValueError(
                    f"steps={steps} must be a multiple of steps_per_epoch={steps_per_epoch} "
                    "(steps = T E)"
                )
            epochs = steps // steps_per_epoch
    elif steps is not None and steps != steps_per_epoch * epochs:
        raise ValueError(f"steps={steps} disagrees with steps_per_epoch * epochs")
    return validate(Mechanism(
        sampler=sampler, sigma=sigma, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, batch_size=batch_size, max_batch_size=max_batch_size,
    ))


def epsilon_bracket(
    sampler: str | Mechanism,
    sigma: float | None = None,
    q: float | None = None,
    steps: int | None = None,
    delta: float = 1e-5,
    *,
    adjacency: str = DEFAULT_ADJACENCY,
    threat_model: str = "adversarial",
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    n: int | None = None,
    batch_size: int | None = None,
    max_batch_size: int | None = None,
    cache: TheoryCache | str | Path | bool | None = None,
) -> Bracket:
    """The proven bracket of eps at ``delta`` for a training, under ``adjacency``.

    Args:
        sampler: a registered sampler name, or a :class:`~audit.core.mechanism.Mechanism`
            (then the other training fields are not used).
        sigma: the noise multiplier.
        q: the sampling rate 1/T (instead of ``steps_per_epoch``).
        steps: the total number of steps T E (instead of ``epochs``).
        delta: the target delta.
        adjacency: ``zero_out`` (default), ``add_remove`` or ``replace_one``.
        threat_model: ``adversarial`` or ``isolated``.
        steps_per_epoch: T (instead of ``q``).
        epochs: E (instead of ``steps``).
        n: the number of examples (a :class:`~audit.core.mechanism.Mechanism` field).
        batch_size: b.
        max_batch_size: B (truncated Poisson).
        cache: None (the default folder), False (none), a folder or a :class:`TheoryCache`.

    Returns:
        :class:`Bracket` with ``lower`` (achieved by a known pair) and ``upper`` (a
        guarantee), None where the theory knows none under that relation (``note`` says why).
    """
    mechanism = _mechanism(
        sampler, sigma=sigma, q=q, steps=steps, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, batch_size=batch_size, max_batch_size=max_batch_size,
    )
    return mechanism_epsilon_bracket(mechanism, delta, adjacency=adjacency, cache=cache)


def delta_bracket(
    sampler: str | Mechanism,
    sigma: float | None = None,
    q: float | None = None,
    steps: int | None = None,
    epsilon: float = 1.0,
    *,
    adjacency: str = DEFAULT_ADJACENCY,
    threat_model: str = "adversarial",
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    n: int | None = None,
    batch_size: int | None = None,
    max_batch_size: int | None = None,
    cache: TheoryCache | str | Path | bool | None = None,
) -> Bracket:
    """The proven bracket of delta at ``epsilon`` (for accountants that answer that way);
    the arguments are :func:`epsilon_bracket`'s, with ``epsilon`` for ``delta``."""
    mechanism = _mechanism(
        sampler, sigma=sigma, q=q, steps=steps, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, batch_size=batch_size, max_batch_size=max_batch_size,
    )
    return mechanism_delta_bracket(mechanism, epsilon, adjacency=adjacency, cache=cache)
