"""Time every theory family (CPU seconds on one core) beside dp_accounting's own Poisson time.

    .venv/bin/python bench/theory.py [--quick]

Each row builds the Bounds from scratch (all caches cleared) and reports the CPU time
(time.process_time, so other load on the machine does not inflate it), eps at delta = 1e-5
for each curve, and the number of vertices. The issue's target: any curve with T*E <= 1e5
in under 5 s on one core. For Poisson, dp_accounting's own time to build the pessimistic
PLD, compose it and read eps is shown beside ours (which also builds the lower curve).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from audit.accounting.events import gaussian_steps
from audit.core.mechanism import Mechanism
from audit.theory import bounds_for


def clear_caches() -> None:
    """Clear every functools cache in audit.theory."""
    import audit.theory as pkg

    for name in list(sys.modules):
        if name.startswith(pkg.__name__):
            for value in vars(sys.modules[name]).values():
                if hasattr(value, "cache_clear"):
                    value.cache_clear()


def dp_accounting_poisson_seconds(q: float, sigma: float, steps: int) -> tuple[float, float]:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    start = time.process_time()
    pld = pld_lib.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=1e-4
    )
    eps = pld.self_compose(steps).get_epsilon_for_delta(1e-5)
    return time.process_time() - start, eps


CASES = [
    # (sampler, sigma, T, E, threat model, extra)
    ("deterministic", 1.0, 1000, 100, "adversarial", {}),
    ("poisson", 1.0, 100, 10, "adversarial", {}),
    ("poisson", 1.0, 1000, 100, "adversarial", {}),
    ("poisson", 0.8, 100_000, 1, "adversarial", {}),
    ("truncated_poisson", 1.0, 100, 10, "adversarial", {"n": 10_000, "max_batch_size": 140}),
    ("truncated_poisson", 2.0, 1000, 100, "adversarial", {"n": 100_000, "max_batch_size": 140}),
    ("persistent_shuffle", 1.0, 1000, 100, "adversarial", {}),
    ("dynamic_shuffle", 1.0, 1000, 100, "adversarial", {}),
    ("dynamic_shuffle", 0.8, 100_000, 1, "adversarial", {}),
    ("persistent_shuffle", 4.0, 1000, 100, "isolated", {}),
    ("dynamic_shuffle", 2.0, 1000, 100, "isolated", {}),
    ("dynamic_shuffle", 1.0, 100_000, 1, "isolated", {}),
]
QUICK = [0, 1, 4, 6, 7, 10]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a subset of cases")
    args = parser.parse_args()
    cases = [CASES[i] for i in QUICK] if args.quick else CASES
    print(
        f"{'sampler':<19}{'threat':<12}{'sigma':>6}{'T':>8}{'E':>5}{'CPU s':>8}  eps(1e-5) per "
        "curve"
    )
    for sampler, sigma, t, e, threat, extra in cases:
        clear_caches()
        m = Mechanism(sampler=sampler, sigma=sigma, steps_per_epoch=t, epochs=e,
                      threat_model=threat, **extra)
        start = time.process_time()
        b = bounds_for(m)
        seconds = time.process_time() - start
        eps = ", ".join(
            f"{'='.join(r for r in ('upper', 'lower', 'exact') if getattr(b, r) is c)} "
            f"{float(c.epsilon(np.array([1e-5]))[0]):.4g} ({len(c.alphas)} vertices)"
            for c in b.curves()
        )
        print(f"{sampler:<19}{threat:<12}{sigma:>6g}{t:>8}{e:>5}{seconds:>8.2f}  {eps}")
        steps = gaussian_steps(m)
        if steps is not None and steps[0] == "poisson":  # Poisson-subsampled Gaussian steps
            clear_caches()
            dp_seconds, dp_eps = dp_accounting_poisson_seconds(steps[1], sigma, steps[2])
            print(
                f"{'  dp_accounting PLD alone (pessimistic, eps at 1e-5)':<50}{dp_seconds:>8.2f}  "
                f"eps {dp_eps:.4g}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
