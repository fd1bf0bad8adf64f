"""One description of a DP-SGD mechanism, shared by theory, simulator, engine and accountants.

Like dp_accounting's ``DpEvent`` separates *what happened* from *how it is accounted*, a
:class:`Mechanism` states what the training did -- which batch sampler, how many steps,
how much noise, what co-batch data the canary faces -- and every layer takes it whole
instead of threading seven keyword arguments through each call.

Conventions (docs/design.md §3): zero-out adjacency; per-example gradients clipped to C and
noise N(0, sigma^2 C^2 I) per step, so that, normalised by C, one participation of the
canary shifts its projection by 1. n = b*T for the fixed-size samplers; Poisson samples
each example with probability q = b/n at each of T*E steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # Python 3.10 has no typing.Unpack; annotations are never evaluated here
    from typing_extensions import Unpack

from audit.core.names import THREAT_MODELS
from audit.core.validation import check_choice, check_int, check_real

__all__ = ["Mechanism", "steps_per_epoch_for"]


def steps_per_epoch_for(n: int, batch_size: int) -> int:
    """T = n / b, the one place T is computed from n and b (docs/design.md §3).

    Exact for the fixed-size samplers (their n = b T is checked by each sampler); rounded to
    the nearest integer (at least 1) where b is an expected batch size (Poisson: q = b/n).
    :class:`Mechanism` and :class:`audit.sampling.batches.BatchSampler` read T from here; every
    other layer reads it from the mechanism.
    """
    return max(1, round(n / batch_size))


class MechanismChanges(TypedDict, total=False):
    """The fields :meth:`Mechanism.with_` may change, with their types."""

    sampler: str
    sigma: float
    steps_per_epoch: int
    epochs: int
    threat_model: str
    n: int | None
    batch_size: int | None
    max_batch_size: int | None


@dataclass(frozen=True, init=False)
class Mechanism:
    """DP-SGD as the auditor sees it: sampler, noise, length, co-batch threat model.

    Attributes:
        sampler: a registered sampler name (:func:`audit.sampling.get_sampler`; checked, with
            the sampler's own parameters, by :func:`audit.sampling.validate`).
        sigma: noise multiplier (noise std is sigma * C per coordinate per step).
        steps_per_epoch: T, the number of batches per epoch; omitted, T = n / b from ``n`` and
            ``batch_size`` (:func:`steps_per_epoch_for`, the one place
            T is computed from them). Always set once the mechanism is built.
        epochs: E >= 1; the run has T*E steps.
        threat_model: ``isolated`` or ``adversarial`` (docs/design.md §3.4).
        n: dataset size (needed by truncated Poisson; defaults to b*T when b is known).
        batch_size: b, the (expected) batch size; Poisson samples with q = b/n.
        max_batch_size: B, the fixed padded size of a sampler that pads (truncated Poisson);
            :func:`audit.sampling.validate` checks it there and drops it elsewhere.
    """

    sampler: str
    sigma: float
    steps_per_epoch: int
    epochs: int
    threat_model: str
    n: int | None
    batch_size: int | None
    max_batch_size: int | None

    def __init__(
        self,
        sampler: str,
        sigma: float,
        steps_per_epoch: int | None = None,
        epochs: int = 1,
        threat_model: str = "adversarial",
        n: int | None = None,
        batch_size: int | None = None,
        max_batch_size: int | None = None,
    ) -> None:
        """The core's checks (the sampler's are :func:`audit.sampling.validate`'s).

        Written by hand (not the dataclass's ``__init__``) because ``steps_per_epoch`` is
        optional here and always an int on the record: omitted, it is derived from n and b.
        """
        if not isinstance(sampler, str) or not sampler:
            raise ValueError(f"sampler must be a sampler name (a string); got {sampler!r}")
        check_choice("threat_model", threat_model, THREAT_MODELS)
        sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
        if steps_per_epoch is None:
            if n is None or batch_size is None:
                raise ValueError(
                    "steps_per_epoch is required unless both n and batch_size are given "
                    "(T = n / b)"
                )
            steps_per_epoch = steps_per_epoch_for(
                check_int("n", n, minimum=1), check_int("batch_size", batch_size, minimum=1)
            )
        steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, minimum=1)
        epochs = check_int("epochs", epochs, minimum=1)
        if batch_size is not None:
            batch_size = check_int("batch_size", batch_size, minimum=1)
        if n is not None:
            n = check_int("n", n, minimum=1)
        if n is None and batch_size is not None:
            n = batch_size * steps_per_epoch
        if n is not None and batch_size is None:
            if n % steps_per_epoch:
                raise ValueError(
                    f"n={n} is not a multiple of steps_per_epoch={steps_per_epoch}; "
                    "give batch_size explicitly"
                )
            batch_size = n // steps_per_epoch
        if n is not None and batch_size is not None:
            if batch_size > n:
                raise ValueError(f"batch_size={batch_size} must be <= n={n}")
        for name, value in (("sampler", sampler), ("sigma", sigma),
                            ("steps_per_epoch", steps_per_epoch), ("epochs", epochs),
                            ("threat_model", threat_model), ("n", n), ("batch_size", batch_size),
                            ("max_batch_size", max_batch_size)):
            object.__setattr__(self, name, value)

    @property
    def total_steps(self) -> int:
        """T * E, the number of noisy steps."""
        return self.steps_per_epoch * self.epochs

    @property
    def sampling_probability(self) -> float:
        """q = b/n for Poisson sampling (1/T when n and b are not given, since n = b T)."""
        if self.n is not None and self.batch_size is not None:
            return self.batch_size / self.n
        return 1.0 / self.steps_per_epoch

    def with_(self, **changes: Unpack[MechanismChanges]) -> Mechanism:
        """A copy with some fields changed (the core's checks again; the sampler's rules are
        :func:`audit.sampling.validate`'s)."""
        return replace(self, **changes)
