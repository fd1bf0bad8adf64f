"""The check to run before every stop: the theory's reference values and its tail checks.

    .venv/bin/python bench/reference_check.py

Prints one row per check -- name, expected, computed, tolerance, pass/FAIL -- and exits 1 if
any fails. Rows:

- reference values the theory reproduces (dp_accounting's numbers for Poisson,
  the calibrated deterministic sigma, Chua et al.'s max-test values for shuffles, the exact
  isolated curve, the Berry-Esseen planner); the tolerances are those of
  tests/test_theory_reference.py (half a unit in the last quoted digit, or one-sided where
  the theory's value is a supremum over thresholds; a Poisson lower curve's eps, achieved,
  at most the quoted value and within 0.1% below it);
- tail checks (issue 11): every ``upper`` eps(delta) at least its source (dp_accounting's
  pessimistic PLD, computed here directly) to 1e-6 relative; ``lower`` curves no more than
  what their pair achieves (the composed max-test pair, bracketed by our own FFT
  composition) and below the guarantees; lower.delta <= upper.delta on eps in [0, 60] for
  every sampler and threat model.

The independent references come from tests/independent_references.py, which never imports
audit.theory. About one to two minutes on one core.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import independent_references as ref  # noqa: E402
import numpy as np  # noqa: E402

from audit.sampling import get_sampler  # noqa: E402
from audit.theory import berry_esseen_rounds, privacy_bounds, sigma_for  # noqa: E402

ROWS: list[tuple[str, str, str, str, bool]] = []


def near(name: str, expected: float, computed: float, tol: float) -> None:
    """|computed - expected| <= tol."""
    ok = abs(computed - expected) <= tol
    ROWS.append((name, f"{expected:.7g}", f"{computed:.7g}", f"+-{tol:.1g}", ok))


def at_least(name: str, bound: float, computed: float, rel: float = 1e-6) -> None:
    """computed >= bound (1 - rel): a guarantee may not be below its source."""
    ok = computed >= bound * (1 - rel) if math.isfinite(bound) else computed == math.inf
    ROWS.append((name, f">= {bound:.7g}", f"{computed:.7g}", f"rel {rel:g}", ok))


def at_most(name: str, bound: float, computed: float, rel: float = 1e-9, abs_: float = 0.0) -> None:
    """computed <= bound (1 + rel) + abs_: an achieved value may not exceed what bounds it."""
    ok = computed <= bound * (1 + rel) + abs_
    tol = f"rel {rel:g}" + (f" + {abs_:g}" if abs_ else "")
    ROWS.append((name, f"<= {bound:.7g}", f"{computed:.7g}", tol, ok))


def reference_values() -> None:
    near("deterministic sigma_for(eps 1, delta 1e-5)", 3.730632,
         float(sigma_for(1.0, 1e-5, "deterministic", steps_per_epoch=1)), 5e-7)
    for (sigma, steps, epochs), expected in [((1.0, 100, 10), 1.8282), ((0.8, 1000, 10), 0.7825),
                                             ((2.0, 10, 10), 2.3374)]:
        b = privacy_bounds("poisson", sigma=sigma, steps_per_epoch=steps, epochs=epochs)
        tag = f"poisson (q {1 / steps:g}, sigma {sigma:g}, {steps * epochs} steps) eps(1e-5)"
        near(f"{tag} upper", expected, float(b.upper.epsilon(1e-5)), 5e-5)
        got = float(b.lower.epsilon(1e-5))  # achieved: at most the reference, within 0.1%
        ROWS.append((f"{tag} lower", f"in [{expected * 0.999:.5g}, {expected + 5e-5:.5g}]",
                     f"{got:.7g}", "-0.1% / +5e-5", expected * 0.999 <= got <= expected + 5e-5))
    for sigma, eps, expected in [(0.8, 1.0, 1.79444e-2), (1.0, 1.0, 9.9873e-4),
                                 (0.5, 2.0, 2.48643e-1)]:
        got = float(privacy_bounds("persistent_shuffle", sigma=sigma, steps_per_epoch=1000)
                    .lower.delta(eps))
        ok = expected * (1 - 5e-6) <= got <= expected * (1 + 5e-4)
        ROWS.append((f"max test T 1000 sigma {sigma:g} lower delta({eps:g})", f"{expected:.6g}",
                     f"{got:.7g}", "-5e-6/+5e-4 rel", ok))
    kw = {"sigma": 0.8, "steps_per_epoch": 100, "epochs": 5}
    near("persistent T 100 E 5 sigma 0.8 lower delta(1)", 0.742480,
         float(privacy_bounds("persistent_shuffle", **kw).lower.delta(1.0)), 5e-6)
    near("deterministic E 5 sigma 0.8 delta(1)", 0.743125,
         float(privacy_bounds("deterministic", **kw).upper.delta(1.0)), 5e-7)
    dyn = privacy_bounds("dynamic_shuffle", **kw)
    got = float(dyn.lower.delta(1.0))
    ROWS.append(("dynamic T 100 E 5 sigma 0.8 lower delta(1)", "in [0.369813, 0.37028]",
                 f"{got:.7g}", "bracket", 0.369813 <= got <= 0.37028))
    near("dynamic T 100 E 5 sigma 0.8 upper delta(1)", 0.743125, float(dyn.upper.delta(1.0)), 5e-7)
    exact = privacy_bounds("persistent_shuffle", sigma=1.0, steps_per_epoch=10,
                           threat_model="isolated").exact
    near("isolated exact M 10 sigma 1 TV = delta(0)", 0.1520144, float(exact.delta(0.0)), 5e-7)
    near("isolated exact M 10 sigma 1 f(0.1)", 0.810671, float(exact(0.1)), 1e-6)
    near("Berry-Esseen rounds (Shevtsova), sigma 1, delta 0.01", 503_243,
         berry_esseen_rounds(1.0, 0.01).rounds, 0)
    paper = berry_esseen_rounds(1.0, 0.01, constants="van_beek").rounds
    near("Berry-Esseen rounds (van Beek), paper's 1.14e6", 1.14e6, paper, 0.0114e6)


def tail_checks() -> None:
    for (q, sigma, steps), (delta, eps) in [((0.001, 0.3, 1000), (1e-6, 21.5)),
                                            ((0.05, 0.6, 200), (1e-8, None)),
                                            ((0.5, 0.2, 2), (1e-5, None)),
                                            ((0.01, 1.0, 1000), (1e-12, 3.5))]:
        b = privacy_bounds("poisson", sigma=sigma, steps_per_epoch=round(1 / q),
                           epochs=steps // round(1 / q))
        pld = ref.poisson_pld(q, sigma, steps)
        tag = f"poisson (q {q:g}, sigma {sigma:g}, {steps} steps)"
        at_least(f"{tag} upper eps({delta:g}) >= PLD", pld.get_epsilon_for_delta(delta),
                 float(b.upper.epsilon(delta)))
        if eps is not None:
            at_least(f"{tag} upper delta({eps:g}) >= PLD", float(pld.get_delta_for_epsilon(eps)),
                     float(b.upper.delta(eps)))
    b = privacy_bounds("poisson", sigma=1.0, steps_per_epoch=10, epochs=10)
    at_most("poisson (q 0.1, sigma 1, 100 steps) lower eps(1e-8) <= PLD",
            ref.poisson_pld(0.1, 1.0, 100).get_epsilon_for_delta(1e-8),
            float(b.lower.epsilon(1e-8)))
    hi = ref.max_pair_bracket(0.8, 100, 5, "adversarial").epsilon(1e-6)[1]
    dyn = privacy_bounds("dynamic_shuffle", sigma=0.8, steps_per_epoch=100, epochs=5)
    at_most("dynamic T 100 E 5 sigma 0.8 lower eps(1e-6) <= max-test pair", hi,
            float(dyn.lower.epsilon(1e-6)))
    eps = np.linspace(0.0, 60.0, 1201)
    for sampler in ("deterministic", "poisson", "truncated_poisson", "persistent_shuffle",
                    "dynamic_shuffle"):
        for threat in ("isolated", "adversarial"):
            extra = (
                {"n": 80, "max_batch_size": 8}
                if "max_batch_size" in get_sampler(sampler).parameters
                else {}
            )
            b = privacy_bounds(sampler, sigma=1.0, steps_per_epoch=20, epochs=3,
                               threat_model=threat, **extra)
            lo, up = b.lower.delta(eps), b.upper.delta(eps)
            excess = lo - up * (1 + 1e-9)
            i = int(np.argmax(excess))
            at_most(f"{sampler} {threat} (1, 20, 3): lower.delta <= upper.delta, eps [0, 60]",
                    float(up[i]), float(lo[i]), abs_=1e-14)


def main() -> int:
    start = time.process_time()
    reference_values()
    tail_checks()
    width = max(len(r[0]) for r in ROWS)
    print(f"{'check':<{width}}  {'expected':>24}  {'computed':>13}  {'tolerance':>15}  result")
    for name, expected, computed, tol, ok in ROWS:
        print(f"{name:<{width}}  {expected:>24}  {computed:>13}  {tol:>15}  "
              f"{'pass' if ok else 'FAIL'}")
    failed = sum(not r[4] for r in ROWS)
    print(
        f"\n{len(ROWS) - failed} passed, {failed} failed ({time.process_time() - start:.0f} s CPU)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
