"""One real DP-SGD training holding m Dirac canaries on m extra coordinates (one-run audits).

The training set has n examples; examples 0..m-1 are the canaries (m < n), the others real
data (:func:`audit.data.load_training_rows`). Canaries take batch slots like any example: the
batches come from the spec's sampler over all n examples. The parameter vector is the
model's P coordinates plus m extra coordinates that the model never reads, so real data
never move them (their gradient there is exactly 0, like the always-zero canary feature of
:mod:`audit.data`). Canary j is a Dirac gradient canary on extra coordinate j: when IN and
in the batch its clipped gradient is C e_{P+j}; when OUT (zero-out) its slot stays and its
gradient is 0. Per step t (DESIGN.md §3 conventions, isolated threat model):

    G_t = sum_{real i in B_t} clip_C(g_i) + C sum_{IN canaries j in B_t} e_{P+j},
    theta_{t+1} = theta_t - lr (G_t + N(0, sigma^2 C^2 I_{P+m})) / b,

and the attacker sees y_{j,t} = (G_t + N_t)_{P+j} / C, every iterate of canary j's coordinate
(white box). The real data are trained on for real (clipping, batching, noise), although in
this white-box threat model they do not enter the canaries' coordinates. Under deterministic
batching each canary's step is known, and its observations are rolled (per epoch) so that
its step comes first, as the deterministic attack expects. One shard is one
training of ``trials`` canaries; with ``shard_size >= canaries``, one training holds all m.

Only the isolated threat model is meaningful here: an adversarial co-batch (every other
example at -C along *each* canary's direction) cannot exist for m > 1 directions under
clipping to norm C.
"""

from __future__ import annotations

import numpy as np
import torch

from audit.models import augment
from audit.one_run import canary_membership
from audit.samplers import make_sampler
from audit.seeding import rng_for, seed_sequence, torch_seed
from audit.trials import TrainingConfig, build_problem, one_torch_thread
from audit.validation import check_int

__all__ = ["run_one_run_shard"]


def run_one_run_shard(
    config: TrainingConfig, *, seed: int, shard: int, trials: int, cell: str, canaries: int, shard_size: int
) -> dict[str, np.ndarray]:
    """One training with canaries ``shard * shard_size`` to ``+ trials`` of the m.

    Returns ``y_in`` (IN canaries, T*E) and ``y_out`` (OUT canaries), rows in canary order,
    and ``final_in``/``final_out`` = sum_t y_t (the last iterate's projection on each
    canary's coordinate, in units of one canary step). A pure function of its arguments.
    """
    shard = check_int("shard", shard, minimum=0)
    trials = check_int("trials", trials, minimum=1, maximum=config.n - 1)
    if config.canary != "dirac" or config.threat_model != "isolated":
        raise ValueError(
            "a one-run training holds Dirac canaries under the isolated threat model; got "
            f"canary={config.canary!r}, threat_model={config.threat_model!r}"
        )
    included = canary_membership(seed, cell, canaries)[shard * shard_size : shard * shard_size + trials]
    with one_torch_thread():
        problem = build_problem(config)
        model, clip = problem.model, float(problem.clip)
        sampler = make_sampler(config.sampler, n=config.n, batch_size=config.batch_size, epochs=config.epochs,
                               max_batch_size=config.max_batch_size)
        batches = sampler.sample(rng_for(seed, cell, "one_run", shard, "batches"), 1)[0]  # (steps, slots)
        generator = torch.Generator().manual_seed(torch_seed(seed_sequence(seed, cell, "one_run", shard, "noise")))
        xa = augment(torch.as_tensor(problem.x, dtype=torch.float32))
        labels = torch.as_tensor(problem.y, dtype=torch.int64)
        theta = torch.as_tensor(problem.theta0, dtype=torch.float32)[None, :].clone()
        steps = batches.shape[0]
        std = float(problem.sigma) * clip
        step_size = float(problem.lr) / problem.batch_size
        inside = torch.from_numpy(included)
        y = np.empty((trials, steps))
        grad = torch.empty(1, model.size)
        extra = torch.empty(trials)
        for t in range(steps):
            grad.normal_(0.0, std, generator=generator)
            extra.normal_(0.0, std, generator=generator)
            batch = torch.from_numpy(batches[t].astype(np.int64))
            batch = batch[batch >= 0]
            canary_slots = batch[batch < trials]
            real = batch[batch >= trials]
            if real.numel():
                model.clipped_grad_sum_augmented(
                    theta, xa.index_select(0, real)[None], labels.index_select(0, real)[None],
                    torch.ones(1, real.numel()), clip, out=grad, accumulate=True,
                )
            hits = torch.bincount(canary_slots, minlength=trials).to(torch.float32)
            extra += clip * hits * inside
            y[:, t] = extra.double().numpy() / clip
            theta.add_(grad, alpha=-step_size)
    if config.sampler == "deterministic":
        # The attacker knows each canary's step (the data order is fixed); every canary's
        # epochs are rolled so that its step comes first, where the deterministic attack
        # (and the simulator, whose canary is example 0) reads it.
        big_t = sampler.steps_per_epoch
        first = np.array([int(np.flatnonzero((batches[:big_t] == j).any(axis=1))[0]) for j in range(trials)])
        rows = y.reshape(trials, -1, big_t)
        y = np.stack([np.roll(rows[j], -first[j], axis=1) for j in range(trials)]).reshape(trials, -1)
    return {
        "y_in": y[included], "y_out": y[~included],
        "final_in": y[included].sum(axis=1), "final_out": y[~included].sum(axis=1),
    }
