"""The names used everywhere: specs, command line, results (docs/design.md §3)."""

from __future__ import annotations

SAMPLERS: tuple[str, ...] = (
    "deterministic",
    "persistent_shuffle",
    "dynamic_shuffle",
    "poisson",
    "truncated_poisson",
    "balls_and_bins",
    "sampled_without_replacement",
)
"""The built-in batch samplers, as named by Chua et al. (2024), arXiv 2411.04205,
balls-and-bins (Chua et al. 2025, arXiv 2412.16802) and sampling without replacement (a fixed-size
batch drawn independently at each step: Lebeda et al. 2024, arXiv 2405.20769, dp_accounting's
``SampledWithoutReplacementDpEvent``): the
registry's list (:mod:`audit.sampling` registers them in this order; ask
:func:`audit.sampling.sampler_names` for every registered sampler, run-time ones included)."""

SAMPLER_ALIASES: dict[str, str] = {
    "fixed_size": "sampled_without_replacement",
    "without_replacement": "sampled_without_replacement",
    "wor": "sampled_without_replacement",
}
"""Other names users type for a built-in sampler -> its registered name
(:func:`audit.sampling.get_sampler` resolves them; :func:`audit.sampling.validate` stores the
registered name). ``fixed_size`` means b examples drawn afresh at every step, not the shuffles
(which are fixed-size too, but use every example once per epoch)."""

ADJACENCIES: tuple[str, ...] = ("zero_out", "add_remove", "replace_one")
"""Neighbouring relations a theory curve can be stated for: ``zero_out`` (the canary's example
kept, its gradient 0: the harness's own, docs/design.md §3.2), ``add_remove`` (the example
removed: Opacus's and dp_accounting's default) and ``replace_one`` (the example replaced by
another)."""

FIXED_SIZE_SAMPLERS: tuple[str, ...] = ("deterministic", "persistent_shuffle", "dynamic_shuffle")
"""Built-ins only, kept importable; the harness asks :attr:`audit.sampling.Sampler.fixed_size`."""
SHUFFLE_SAMPLERS: tuple[str, ...] = ("persistent_shuffle", "dynamic_shuffle")
"""Built-ins only, kept importable; the harness asks the registry."""

THREAT_MODELS: tuple[str, ...] = ("isolated", "adversarial")
"""Co-batch data: ``isolated`` (the canary alone along its direction) or ``adversarial``
(every other example contributes -1 along the canary direction, the zero-out worst case)."""

CANARY_INDEX = 0
"""The canary's row among the n training rows: the samplers' example 0, in the engine, the
simulator and the plug-in implementations alike (under deterministic batches it is in the
first batch of every epoch)."""

CANARIES: tuple[str, ...] = ("dirac", "input")
"""Canary kinds: ``dirac``, a gradient canary injected as C u (white-box); ``input``, a real
example whose gradient goes through the model."""

INPUT_CANARIES: tuple[str, ...] = ("ood", "mislabeled")
"""Kinds of ``input`` canary (:mod:`audit.training.canaries`)."""

OBSERVATIONS: tuple[str, ...] = ("all_iterates", "last_iterate", "black_box")
"""What the attacker sees: every noisy step, the final parameters, or the final model's outputs."""

MODELS: tuple[str, ...] = ("logistic", "mlp")
"""The closed-form models of :mod:`audit.training.models` (``audit train --model``, a spec's
``model``, :class:`audit.plugins.contract.TrainingSetup`)."""

ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "sigmoid")
"""Hidden activations of the MLP (:mod:`audit.training.models`)."""

THRESHOLD_STRATEGIES: tuple[str, ...] = (
    "split", "bonferroni", "multisplit", "planned", "planned_ranks"
)
"""Sound threshold choices of :func:`audit.stats.binary.epsilon_lower_bound` (split: chosen on one
half of the trials, evaluated on the other; bonferroni: a fixed grid, corrected; multisplit: the
median of 11 splits at alpha/2 each; planned: an order statistic whose rank is fixed before any
score is seen, from the theory's curve or a pilot, :mod:`audit.stats.binary.thresholds`;
planned_ranks: ranks 1, 4, 16, ... on both tails fixed by the trial counts alone, each joint test
at alpha / K, for scores without a theory curve)."""

DEFAULT_THRESHOLD = "planned"
"""The threshold strategy of a spec, ``audit simulate``, ``audit plan`` and the planning
functions when none is named (docs/design.md §8.12): the spec's ``threshold`` default. The
functions of :mod:`audit.stats.binary` that take a ``plan=`` keep ``split`` as their default,
since a planned threshold needs a plan fixed before the scores were seen, which a bare call
cannot have. (Kept here, at the core, so that the CLI's parsers read it without importing
the statistics: ``audit --help`` stays light, docs/design.md §2.7.)"""

SCORES_THRESHOLD = "planned_ranks"
"""The threshold strategy of scores audited without a theory curve (``audit.audit_scores``,
``audit scores``) when none is named: the ranks 1, 4, 16, ... on both tails, fixed by the trial
counts alone, each joint test at alpha / K (docs/design.md §8.12). Every trial is tested; at
1000 trials a side it keeps 0.93-1.03 of the oracle rule's eps_lb (median), where a pilot
tenth planning the rank kept 0.74-0.86 (docs/results.md, "Scores without a theory curve")."""

KINDS: tuple[str, ...] = ("upper", "lower", "exact", "approximation")
"""Theory curve kinds: ``upper`` is a guarantee (the true trade-off curve lies on or above
it), ``lower`` is achieved by a known pair of datasets (the true curve lies on or below it),
``exact`` is computed with a stated numerical error, ``approximation`` is an asymptotic
approximation (e.g. Edgeworth) with no bound on its error: drawn and reported as such,
never a guarantee, a lower bound or a claim."""

BACKENDS: tuple[str, ...] = ("loky", "threading", "dask", "ray")
"""joblib backends of a run (a spec's ``backend``, ``audit run --backend``): worker processes,
threads, or a Dask cluster (the ``distributed`` extra); kept here so the CLI's parser names them
without importing :mod:`audit.run.spec`."""
