"""One real DP-SGD training holding m Dirac canaries on m extra coordinates (one-run audits).

The training set has n examples; examples 0..m-1 are the canaries (m < n), the others real
data (:func:`audit.core.data.load_training_rows`). Canaries take batch slots like any example: the
batches come from the spec's sampler over all n examples. The parameter vector is the
model's P coordinates plus m extra coordinates that the model never reads, so real data
never move them (their gradient there is exactly 0, like the always-zero canary feature of
:mod:`audit.core.data`). Canary j is a Dirac gradient canary on extra coordinate j: when IN and
in the batch its clipped gradient is C e_{P+j}; when OUT (zero-out) its slot stays and its
gradient is 0. Per step t (docs/design.md §3.4, isolated threat model):

    G_t = sum_{real i in B_t} clip_C(g_i) + C sum_{IN canaries j in B_t} e_{P+j},
    theta_{t+1} = theta_t - lr (G_t + N(0, sigma^2 C^2 I_{P+m})) / b,

and the attacker sees y_{j,t} = (G_t + N_t)_{P+j} / C, every iterate of canary j's coordinate
(white box). The real data are trained on for real (clipping, batching, noise), although in
this white-box threat model they do not enter the canaries' coordinates. Under deterministic
batching each canary's step is known, and its observations are rolled (per epoch) so that
its step comes first, as the deterministic attack expects. One shard is one
training of ``trials`` canaries; with ``shard_size >= canaries``, one training holds all m.

``canary = "input"`` trains m input canaries instead (``input_canary = "ood"`` or
``"mislabeled"``, :mod:`audit.training.one_run_canaries`) and records each one's loss and logits on
the final model (black box) and its last-iterate projection (:func:`_input_one_run`).

Only the isolated threat model is meaningful here: an adversarial co-batch (every other
example at -C along *each* canary's direction) cannot exist for m > 1 directions under
clipping to norm C.
"""

from __future__ import annotations

import numpy as np
import torch

from audit.core.data import load_training_rows
from audit.core.seeding import rng_for, seed_sequence, torch_seed
from audit.core.validation import check_int
from audit.plugins.contract import IterateRecorder, setup_from
from audit.plugins.opacus import build_model, check_opacus_sampler, make_private
from audit.sampling import check_canary_isolation, get_sampler
from audit.sampling.factory import make_sampler
from audit.stats.one_run import canary_membership
from audit.training.models import augment, make_model
from audit.training.one_run_canaries import canary_rows, last_iterate_scores
from audit.training.trials import TrainingConfig, build_problem, one_torch_thread

__all__ = ["run_one_run_shard", "run_opacus_one_run_shard"]


def run_one_run_shard(
    config: TrainingConfig,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str,
    canaries: int,
    shard_size: int,
) -> dict[str, np.ndarray]:
    """One training with canaries ``shard * shard_size`` to ``+ trials`` of the m.

    Returns ``y_in`` (IN canaries, T*E) and ``y_out`` (OUT canaries), rows in canary order,
    and ``final_in``/``final_out`` = sum_t y_t (the last iterate's projection on each
    canary's coordinate, in units of one canary step). A pure function of its arguments.
    """
    shard = check_int("shard", shard, minimum=0)
    trials = check_int("trials", trials, minimum=1, maximum=config.n - 1)
    if config.threat_model != "isolated":
        raise ValueError(
            "a one-run training needs the isolated threat model; got "
            f"threat_model={config.threat_model!r}"
        )
    included = canary_membership(seed, cell, canaries)[
        shard * shard_size : shard * shard_size + trials
    ]
    if config.canary == "input":
        return _input_one_run(config, included, seed=seed, shard=shard, cell=cell)
    with one_torch_thread():
        problem = build_problem(config)
        model, clip = problem.model, float(problem.clip)
        sampler = make_sampler(
            config.sampler,
            n=config.n,
            batch_size=config.batch_size,
            epochs=config.epochs,
            max_batch_size=config.max_batch_size,
        )
        # (steps, slots)
        batches = sampler.sample(rng_for(seed, cell, "one_run", shard, "batches"), 1)[0]
        generator = torch.Generator().manual_seed(
            torch_seed(seed_sequence(seed, cell, "one_run", shard, "noise"))
        )
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
    if get_sampler(config.sampler).canary_law == "known_steps":
        big_t = sampler.steps_per_epoch
        y = _known_step_first(
            y,
            np.array(
                [int(np.flatnonzero((batches[:big_t] == j).any(axis=1))[0]) for j in range(trials)]
            ),
            big_t,
        )
    return {
        "y_in": y[included], "y_out": y[~included],
        "final_in": y[included].sum(axis=1), "final_out": y[~included].sum(axis=1),
    }


def _input_one_run(
    config: TrainingConfig, included: np.ndarray, *, seed: int, shard: int, cell: str
) -> dict[str, np.ndarray]:
    """One run with m input canaries (``canary = "input"``, :mod:`audit.training.one_run_canaries`).

    ``mislabeled``: examples 0..m-1 keep their inputs and take the next label; ``ood``: they
    become ``scale * e_{D+j}`` (label ``canary_label``) on m appended features, whose
    first-layer weights start non-negative as the multi-run ``ood`` private row
    (:func:`audit.training.trials.build_problem`). IN canaries go through the model, OUT ones keep
    their slot with weight 0 (zero-out). After the training: ``loss_in``/``loss_out`` and
    ``logits_*`` on the final model (black box), ``final_in``/``final_out`` the last-iterate
    projections (:func:`audit.training.one_run_canaries.last_iterate_scores`).
    """
    trials = included.size
    kind = config.input_canary
    with one_torch_thread():
        sampler = make_sampler(
            config.sampler,
            n=config.n,
            batch_size=config.batch_size,
            epochs=config.epochs,
            max_batch_size=config.max_batch_size,
        )
        batches = sampler.sample(rng_for(seed, cell, "one_run", shard, "batches"), 1)[0]
        generator = torch.Generator().manual_seed(
            torch_seed(seed_sequence(seed, cell, "one_run", shard, "noise"))
        )
        rows = load_training_rows(config.dataset, config.n, seed=config.data_seed)
        x_np, labels_np, features = canary_rows(rows, trials, kind, label=config.canary_label,
                                                scale=config.canary_scale)
        problem = build_problem(config)
        clip = float(problem.clip)
        if kind == "mislabeled":
            model, theta0 = problem.model, torch.as_tensor(problem.theta0, dtype=torch.float32)
            private = None
        else:
            assert features is not None  # canary_rows gives the ood canaries' input features
            model = make_model(
                config.model,
                features=x_np.shape[1],
                classes=rows.classes,
                hidden=config.hidden,
                activation=config.activation,
            )
            init = torch.Generator().manual_seed(
                torch_seed(seed_sequence(config.init_seed, "init"))
            )
            theta0 = model.init(1, init)[0]
            width = model.shapes[0][1]
            start = (rows.features - 1) * width  # the canary feature D-1 and the m appended ones
            theta0[start : (x_np.shape[1]) * width] = theta0[start : (x_np.shape[1]) * width].abs()

            def private(j: int) -> np.ndarray:
                return np.arange(int(features[j]) * width, (int(features[j]) + 1) * width)
        xa = augment(torch.as_tensor(x_np, dtype=torch.float32))
        labels = torch.as_tensor(labels_np, dtype=torch.int64)
        weight = torch.ones(config.n)
        weight[:trials] = torch.from_numpy(included.astype(np.float32))
        theta = theta0[None, :].clone()
        std = float(problem.sigma) * clip
        step_size = float(problem.lr) / problem.batch_size
        grad = torch.empty(1, model.size)
        for t in range(batches.shape[0]):
            grad.normal_(0.0, std, generator=generator)
            batch = torch.from_numpy(batches[t].astype(np.int64))
            batch = batch[batch >= 0]
            if batch.numel():
                model.clipped_grad_sum_augmented(
                    theta, xa.index_select(0, batch)[None], labels.index_select(0, batch)[None],
                    weight.index_select(0, batch)[None], clip, out=grad, accumulate=True,
                )
            theta.add_(grad, alpha=-step_size)
        x_c = torch.as_tensor(x_np[:trials], dtype=torch.float32)[None]
        loss = model.losses(theta, x_c, labels[:trials][None])[0].double().numpy()
        logits = model.logits(theta, x_c)[0].double().numpy()
        theta0_d = theta0.double()[None]
        x_cd, y_c = x_c.double(), labels[:trials][None]

        def gradients(index: np.ndarray) -> np.ndarray:
            chosen = torch.from_numpy(index)
            return model.per_example_grads(theta0_d, x_cd[:, chosen], y_c[:, chosen])[0].numpy()

        displacement = (problem.batch_size / (float(problem.lr) * clip)) * (
            theta0_d[0] - theta[0].double()
        ).numpy()
        final = last_iterate_scores(gradients, displacement, trials, private=private)
    return {"loss_in": loss[included], "loss_out": loss[~included],
            "logits_in": logits[included], "logits_out": logits[~included],
            "final_in": final[included], "final_out": final[~included]}


def _known_step_first(y: np.ndarray, step: np.ndarray, steps_per_epoch: int) -> np.ndarray:
    """Deterministic batching: the attacker knows canary j's step in every epoch; roll each
    canary's epochs so that its step comes first, where the deterministic attack (and the
    simulator, whose canary is example 0) reads it."""
    rows = y.reshape(y.shape[0], -1, steps_per_epoch)
    return np.stack([np.roll(rows[j], -int(step[j]), axis=1) for j in range(y.shape[0])]).reshape(
        y.shape[0], -1
    )


def run_opacus_one_run_shard(
    config: TrainingConfig,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str,
    canaries: int,
    shard_size: int,
) -> dict[str, np.ndarray]:
    """:func:`run_one_run_shard` with Opacus as deployed doing the training.

    The Opacus recipe of :mod:`audit.plugins.opacus` (``DataLoader`` selected by the sampler,
    ``torch.optim.SGD``, ``PrivacyEngine().make_private``, ``zero_grad / backward / step``) on a
    logistic regression ``nn.Linear(D + m, classes)`` whose m extra input features are 0 for every
    example: the weight from extra feature j to class 0 is canary j's coordinate, which real data
    never move. Examples 0..m-1 are the canaries; between ``backward()`` and ``optimizer.step()``
    the per-example gradients Opacus stored are rewritten for the canary rows as for
    :func:`audit.plugins.opacus.inject_dirac`: 0 everywhere except -2 C on the canary's coordinate
    if IN (zero-out: 0 if OUT), so Opacus's clipping maps it to -C e_k. Opacus then clips every row,
    sums, adds N(0, sigma^2 C^2) to every coordinate and divides by b. With iterates theta_t
    recorded after each step, y_{j,t} = -(b / (lr C)) <theta_t - theta_{t-1}, u> = (b / (lr C))
    (theta_t - theta_{t-1})_k (as :func:`audit.plugins.contract.observations_of`; u = -e_k).
    """
    import warnings

    import torch
    import torch.nn.functional as F


    shard = check_int("shard", shard, minimum=0)
    trials = check_int("trials", trials, minimum=1, maximum=config.n - 1)
    check_opacus_sampler(config.sampler, "opacus one-run")
    if config.threat_model != "isolated":
        raise ValueError("a one-run training needs the isolated threat model; got "
                         f"threat_model={config.threat_model!r}")
    included = canary_membership(seed, cell, canaries)[
        shard * shard_size : shard * shard_size + trials
    ]
    seeds = (
        seed_sequence(seed, cell, "one_run", shard, "opacus")
        .generate_state(4, dtype=np.uint32)
        .astype(np.int64)
    )
    if config.canary == "input":
        return _opacus_input_one_run(config, included, seeds)
    if config.model != "logistic":
        raise ValueError(
            "the Opacus one-run training with Dirac canaries trains model='logistic'; got "
            f"model={config.model!r}"
        )
    rows = load_training_rows(config.dataset, config.n, seed=config.data_seed)
    n, features = rows.x.shape
    x = np.concatenate([rows.x, np.zeros((n, trials), dtype=np.float32)], axis=1)
    x[:trials] = 0.0  # the canaries' inputs are never used: their gradients are replaced
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.init_seed)
        model = torch.nn.Sequential(torch.nn.Linear(features + trials, rows.classes))
    model, optimizer, loader = _opacus_private(config, seeds, model, x, rows.y, np.arange(n))
    weight = next(p for p in model.parameters() if p.dim() == 2)
    recorder = IterateRecorder([weight]).attach(optimizer)
    inside = torch.from_numpy(included)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in range(config.epochs):
            for xb, yb, ib in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(xb), yb).backward()  # mean, as Opacus expects
                canary_rows = ib < trials
                if bool(canary_rows.any()):
                    with torch.no_grad():
                        for p in model.parameters():
                            p.grad_sample[canary_rows] = 0.0
                        which = ib[canary_rows]
                        weight.grad_sample[canary_rows, 0, features + which] = (
                            -2.0 * config.clip * inside[which].float()
                        )
                optimizer.step()
    # (S + 1, m)
    iterates = recorder.iterates.reshape(-1, rows.classes, features + trials)[:, 0, features:]
    # (m, S); u = -e_k
    y = (config.batch_size / (config.lr * config.clip)) * np.diff(iterates, axis=0).T
    # deterministic: canary j in batch j // b
    if get_sampler(config.sampler).canary_law == "known_steps":
        y = _known_step_first(y, np.arange(trials) // config.batch_size, len(loader))
    return {
        "y_in": y[included], "y_out": y[~included],
        "final_in": y[included].sum(axis=1), "final_out": y[~included].sum(axis=1),
    }


def _opacus_private(
    config: TrainingConfig, seeds: np.ndarray, model: torch.nn.Module, *columns: np.ndarray
) -> tuple:
    """:func:`audit.plugins.opacus.make_private` (PRV accountant) on ``model`` over the
    rows ``columns`` (each (n, ...)), the loader built by ``config.sampler``'s Opacus hook
    (loader generator ``seeds[0]``, noise ``seeds[2]``, the sampler's draws ``seeds[3]``).
    Returns (private model, optimizer, loader)."""
    from torch.utils.data import TensorDataset

    dataset = TensorDataset(*(torch.as_tensor(column) for column in columns))
    _, model, optimizer, loader = make_private(
        model, dataset, sampler=config.sampler, batch_size=config.batch_size, epochs=config.epochs,
        lr=config.lr, sigma=config.sigma, clip=config.clip, seeds=seeds, accountant="prv",
    )
    return model, optimizer, loader


def _opacus_input_one_run(
    config: TrainingConfig, included: np.ndarray, seeds: np.ndarray
) -> dict[str, np.ndarray]:
    """:func:`_input_one_run` with Opacus as deployed doing the training.

    The recipe of :func:`audit.plugins.opacus.train`, nothing injected: a
    ``DataLoader`` over the n rows of :func:`audit.training.one_run_canaries.canary_rows` (canaries
    0..m-1; selected by the sampler as there), the model of
    :func:`audit.plugins.opacus.build_model` (``init_seed``), ``torch.optim.SGD``,
    ``PrivacyEngine().make_private``, and ``zero_grad / backward / step`` on the per-example
    cross-entropy times each row's weight (1, or 0 for an OUT canary: zero-out, slot kept),
    summed and divided by the batch's length (the mean Opacus expects). After the training:
    each canary's loss and logits on the final model (black box) and its last-iterate
    projection ``(b / (lr C)) <theta_0 - theta_S, u_j>`` (u_j: its loss gradient at theta_0,
    by ``torch.func``; restricted to the first-layer weights from its feature for ``ood``).
    """
    import warnings

    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap


    check_canary_isolation(config.canary, config.threat_model, config.sampler)
    trials = included.size
    rows = load_training_rows(config.dataset, config.n, seed=config.data_seed)
    x, labels, features = canary_rows(rows, trials, config.input_canary, label=config.canary_label,
                                      scale=config.canary_scale)
    n, width = x.shape
    weight = np.ones(n, dtype=np.float32)
    weight[:trials] = included
    # build_model reads model, hidden, activation, init_seed
    architecture = setup_from(config, canary="dirac")
    model = build_model(architecture, width, rows.classes)
    fresh = build_model(architecture, width, rows.classes)  # theta_0 again, without Opacus's hooks
    start = {name: p.detach() for name, p in fresh.named_parameters()}
    private_model, optimizer, loader = _opacus_private(config, seeds, model, x, labels, weight)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in range(config.epochs):
            for xb, yb, wb in loader:
                optimizer.zero_grad()
                losses = F.cross_entropy(private_model(xb), yb, reduction="none") * wb
                (losses.sum() / max(1, len(yb))).backward()
                optimizer.step()
    x_c = torch.as_tensor(x[:trials])
    y_c = torch.as_tensor(labels[:trials])
    with torch.no_grad():
        logits = private_model(x_c).double()
        loss = F.cross_entropy(logits, y_c, reduction="none").numpy()
        theta_s = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    theta0 = torch.cat([p.reshape(-1) for p in start.values()]).double()

    def example_loss(params: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(fresh, params, (xi[None],)), yi[None])

    per_example = vmap(grad(example_loss), in_dims=(None, 0, 0))

    def gradients(chosen: np.ndarray) -> np.ndarray:
        g = per_example(start, x_c[torch.from_numpy(chosen)], y_c[torch.from_numpy(chosen)])
        return (
            torch.cat([g[name].reshape(len(chosen), -1) for name in start], dim=1).double().numpy()
        )

    private = None
    if features is not None:
        # first layer weight (outputs, width), stored first
        outputs = next(iter(start.values())).shape[0]

        def private(j: int) -> np.ndarray:
            return np.arange(outputs) * width + int(features[j])

    displacement = (config.batch_size / (config.lr * config.clip)) * (theta0 - theta_s).numpy()
    final = last_iterate_scores(gradients, displacement, trials, private=private)
    logits_np = logits.numpy()
    return {"loss_in": loss[included], "loss_out": loss[~included],
            "logits_in": logits_np[included], "logits_out": logits_np[~included],
            "final_in": final[included], "final_out": final[~included]}
