"""The bug zoo's entries: each bug is a correct training with one line replaced (issue 33
item 4), and the correct trainings of several kinds.

``BUGS[name] = Bug(old, new, kind, base, cite)``: ``old`` occurs exactly once in ``base``
(stripped; plain.py unless stated); ``kind`` is the finding the documented path should report;
``cite`` the issue a bug was reported in (or the tracker thread its pattern comes from), where
it comes from one. ``CORRECT`` are the correct
trainings: a file, or plain.py with one line replaced (written to ``correct/``).
``write_bugs()`` writes ``bugs/<name>.py`` and ``correct/<name>.py``; tests/test_bug_zoo.py
checks each bug differs from its base by one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent


class Bug(NamedTuple):
    """One line of ``base`` replaced: ``old`` -> ``new``; ``kind``: what should find it."""

    old: str
    new: str
    kind: str
    base: str = "plain.py"
    cite: str = ""


BUGS: dict[str, Bug] = {
    "noise_recreated": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed))",
        "fresh noise (the same draw at every step)",
    ),
    "noise_once_per_epoch": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + epoch))",
        "fresh noise (one draw per epoch)",
    ),
    "noise_without_clip": Bug("std = SIGMA * CLIP", "std = SIGMA", "noise scale"),
    "noise_over_sqrt_b": Bug(
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z / BATCH**0.5) / BATCH",
        "noise scale",
    ),
    "noise_divided_twice": Bug(
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z / BATCH) / BATCH",
        "noise scale",
    ),
    "accountant_epochs": Bug(
        "accountant.compose(event, steps * EPOCHS)",
        "accountant.compose(event, EPOCHS)",
        "accountant: steps composed vs optimizer steps",
    ),
    "q_wrong_n": Bug(
        "q_accounted = BATCH / len(dataset)",
        "q_accounted = BATCH / (len(dataset) * EPOCHS)",
        "accountant: q vs the recorded batches",
    ),
    "per_tensor_clipping": Bug(
        "f = factor",
        "f = torch.clamp(CLIP / (g[name].flatten(1).norm(dim=1) + 1e-12), max=1.0)",
        "replay: sensitivity above C / b",
    ),
    "summed_gradient_clipped": Bug(
        "factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)",
        "factor = torch.clamp(CLIP / (torch.sqrt(sum(v.sum(0).pow(2).sum() for v in "
        "g.values())) + 1e-12), max=1.0).expand(len(norms))",
        "replay: sensitivity above C / b",
    ),
    "sampler_repeats_batches": Bug(
        "g = self.generator",
        "g = torch.Generator().manual_seed(self.seed)",
        "inspect-loader: unknown sampler (the same batches every epoch)",
    ),
    "shuffle_accounted_poisson": Bug(
        "return DataLoader(dataset, batch_sampler=sampler)",
        "return DataLoader(dataset, batch_size=BATCH, shuffle=True)",
        "inspect-loader / accountant: fixed batch sizes, not Poisson",
        cite="https://github.com/meta-pytorch/opacus/issues/80",
    ),
    "noise_shared_across_tensors": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=noise.manual_seed(seed + epoch * 1000 + len(x)))",
        "fresh noise (re-seeded from the batch size)",
    ),
    "batch_statistics_mixing": Bug(
        "g = per_example_grad({k: v.detach() for k, v in params.items()}, x, y)",
        "g = per_example_grad({k: v.detach() for k, v in params.items()}, "
        "(x - x.mean(0)) / (x.std(0) + 1e-5), y)",
        "replay (absent): a layer mixes examples in the batch (batch statistics, BatchNorm in "
        "train mode)",
    ),
    "divided_by_actual_batch_size": Bug(
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z) / len(x)",
        "replay (absent): the noisy sum divided by the batch's actual size",
        cite="https://github.com/meta-pytorch/opacus/issues/571",
    ),
    "augmentation_copies_clipped_alone": Bug(
        "g = {k: v.unflatten(0, (-1, AUG)).mean(1) for k, v in g.items()}  # average the copies",
        "g = dict(g)  # every copy a row of its own",
        "replay: each augmented copy clipped alone (sensitivity AUG C)",
        base="augment.py",
    ),
    "accumulation_counts_micro_batches": Bug(
        "q_accounted, composed = BATCH / len(dataset), steps * EPOCHS  # one event per optimizer "
        "step",
        "q_accounted, composed = MICRO / len(dataset), steps * EPOCHS * (BATCH // MICRO)  # one "
        "event per micro-batch",
        "accountant: micro-batches composed, noise once per optimizer step",
        base="accumulate.py",
        cite="https://github.com/meta-pytorch/opacus/issues/420",
    ),
    "opacus_shuffle_accounted_poisson": Bug(
        "max_grad_norm=CLIP, poisson_sampling=True,",
        "max_grad_norm=CLIP, poisson_sampling=False,",
        "inspect-loader: Opacus keeps the shuffling loader and accounts it as Poisson",
        base="opacus_train.py",
        cite="https://github.com/meta-pytorch/opacus/pull/128",
    ),
    # issue 42 item 7: kinds the path did not see before (noise off the canary block, the
    # example's data used outside the clipped gradients, one person in several rows,
    # low-precision noise, sparse noise, micro-batch means)
    "noise_only_on_matrices": Bug(
        "std = SIGMA * CLIP",
        "std = SIGMA * CLIP if p.dim() > 1 else 0.0  # biases left without noise",
        "noise on every tensor: the biases (0.bias, 2.bias) stepped without noise",
    ),
    "head_without_noise": Bug(
        "std = SIGMA * CLIP",
        "std = SIGMA * CLIP if not name.startswith(\"2.\") else 0.0  # the head's noise left out",
        "noise on every tensor: the head (2.weight, 2.bias) stepped without noise",
    ),
    "head_second_optimizer": Bug(
        "optimizer.step()",
        "optimizer.step(); model.zero_grad(); nn.functional.cross_entropy(model(x), y).backward(); "
        "torch.optim.SGD(model[2].parameters(), lr=LR).step()",
        "the example wherever used: the head stepped by a second, non-private optimizer",
        cite="https://github.com/meta-pytorch/opacus/issues/615",
    ),
    "aux_loss_after_noise": Bug(
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z) / BATCH + 0.1 * per_example_grad({k: v.detach() for k, v in "
        "params.items()}, x, y)[name].mean(0)  # auxiliary loss",
        "the example wherever used: an auxiliary loss on the training rows added after the noise",
        cite="https://github.com/dayu11/Differentially-Private-Deep-Learning/issues/7",
    ),
    "lr_on_training_loss": Bug(
        "optimizer.step()",
        "optimizer.step(); optimizer.param_groups[0][\"lr\"] = LR if "
        "nn.functional.cross_entropy(model(x), y) > 0.5 else LR / 10  # LR on plateau",
        "the example wherever used: the training's control flow (the LR) depends on the private "
        "training loss",
    ),
    "noise_bfloat16": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=noise, dtype=torch.bfloat16)",
        "floating-point noise: the noise on the bfloat16 lattice (Mironov 2012)",
    ),
    "noise_float16": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=noise, dtype=torch.float16)",
        "floating-point noise: the noise on the float16 lattice (Mironov 2012)",
    ),
    "noise_only_where_gradient_nonzero": Bug(
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=noise) * (summed != 0)  # sparse noise",
        "sparse noise: noise only on the entries (embedding rows) the batch's gradient touched",
        cite="https://github.com/meta-pytorch/opacus/issues/350",
    ),
    "one_person_two_rows": Bug(
        "return self.x[i], self.y[i]",
        "return self.x[i // 2], self.y[i // 2]  # each person's record stored twice",
        "unit of privacy: every person is 2 rows (k = 2), accounted per row",
    ),
    "opacus_dataset_concatenated": Bug(
        "return self.x[i], self.y[i]",
        "return self.x[i % (len(self.y) // 2)], self.y[i % (len(self.y) // 2)]  # data + data",
        "unit of privacy: the dataset concatenated with itself (k = 2), accounted per row",
        base="opacus_train.py",
    ),
    "micro_batch_mean_clipped": Bug(
        "parts = [per_example_grad(detached, a, b) for a, b in micro]",
        "parts = [{k: v.mean(0, keepdim=True).expand_as(v) for k, v in per_example_grad(detached, "
        "a, b).items()} for a, b in micro]  # micro-batch means",
        "the example wherever used: each row carries its micro-batch's mean gradient (one example "
        "reaches MICRO rows, each clipped alone)",
        base="accumulate.py",
        cite="https://github.com/tensorflow/privacy/issues/81",
    ),
    "noise_scaled_by_batch_size": Bug(
        "std = SIGMA * CLIP",
        "std = SIGMA * CLIP * len(x) / BATCH  # noise scaled to the batch drawn",
        "the noise's scale depends on the data (the batch's actual size)",
        cite="https://github.com/meta-pytorch/opacus/issues/753",
    ),
}


#: what each bug does to one example's privacy (the README's "leak" column)
LEAKS: dict[str, str] = {
    "noise_recreated": "the same noise at every step: it cancels between steps, the gradients "
    "are exposed",
    "noise_once_per_epoch": "one noise per epoch: the steps of an epoch differ by noise-free "
    "gradients",
    "noise_without_clip": "noise sigma instead of sigma C: at C = 2 half the noise the "
    "accountant assumes",
    "noise_over_sqrt_b": "noise sqrt(b) = 7 times smaller than accounted",
    "noise_divided_twice": "noise b = 50 times smaller than accounted",
    "accountant_epochs": "the accountant composes 3 steps for 30 taken: epsilon understated",
    "q_wrong_n": "the accountant's q is 3 times too small: epsilon understated",
    "per_tensor_clipping": "each of the 4 tensors clipped to C: one example moves the step by "
    "2 C (sqrt 4), accounted as C",
    "summed_gradient_clipped": "the batch's sum clipped, not each example: one example's "
    "contribution unbounded by C",
    "sampler_repeats_batches": "the same batches every epoch: no subsampling amplification "
    "holds",
    "shuffle_accounted_poisson": "shuffled fixed-size batches accounted with Poisson "
    "amplification (not a guarantee)",
    "noise_shared_across_tensors": "noise seeded by the batch size: its presence changes every "
    "noise draw",
    "batch_statistics_mixing": "batch statistics: one example moves every other example's "
    "gradient",
    "divided_by_actual_batch_size": "the noisy sum divided by the actual batch size, which "
    "reveals the example's presence",
    "augmentation_copies_clipped_alone": "3 copies clipped alone: sensitivity 3 C, accounted "
    "as C",
    "accumulation_counts_micro_batches": "micro-batches composed at q = MICRO / n while noise "
    "is added once per batch of BATCH: the claim's q and steps are another training's",
    "opacus_shuffle_accounted_poisson": "shuffled fixed-size batches accounted as Poisson by "
    "Opacus (not a guarantee)",
    "noise_only_on_matrices": "the biases' gradients (clipped, summed) are released without "
    "noise at every step: no privacy for them (epsilon infinite)",
    "head_without_noise": "the head's clipped gradients released without noise at every step: "
    "epsilon infinite",
    "head_second_optimizer": "the head is also trained on the raw, unclipped loss gradient: "
    "its parameters are a non-private function of the data",
    "aux_loss_after_noise": "an unclipped, unnoised gradient of the training rows is added "
    "after the noise: epsilon infinite",
    "lr_on_training_loss": "the learning rate is a noise-free function of the private "
    "training loss at every step",
    "noise_bfloat16": "noise on the bfloat16 lattice (8 significand bits): the low bits of "
    "the noisy step reveal the gradient (Mironov 2012)",
    "noise_float16": "noise on the float16 lattice (11 significand bits): the same, less "
    "coarse",
    "noise_only_where_gradient_nonzero": "entries no example touched get no noise, so which "
    "entries (embedding rows) a batch touched is released exactly",
    "one_person_two_rows": "each person is 2 rows: the person's epsilon is the group-of-2 "
    "epsilon (1.62 here against the claim's 0.84)",
    "opacus_dataset_concatenated": "the dataset is itself twice: the person's epsilon is the "
    "group-of-2 epsilon",
    "micro_batch_mean_clipped": "one example's gradient reaches the 10 rows of its "
    "micro-batch, each clipped to C: sensitivity up to 10 C, accounted as C",
    "noise_scaled_by_batch_size": "the noise's standard deviation moves with the batch's "
    "actual size, which the example's presence changes (and a small batch gets less noise)",
}


#: the correct trainings: name -> (base file, old line, new line); no old line: the file itself
CORRECT: dict[str, tuple[str, str, str]] = {
    "plain": ("plain.py", "", ""),
    "opacus": ("opacus_train.py", "", ""),
    "momentum": (
        "plain.py",
        "optimizer = torch.optim.SGD(model.parameters(), lr=LR)",
        "optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)",
    ),
    "adam": (
        "plain.py",
        "optimizer = torch.optim.SGD(model.parameters(), lr=LR)",
        "optimizer = torch.optim.Adam(model.parameters(), lr=LR / 10)",
    ),
    "cnn": (
        "plain.py",
        "model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))"
        "  # audit",
        "model = canaries.attach(nn.Sequential(nn.Unflatten(1, (1, 10)), nn.Conv1d(1, 4, 3), "
        "nn.Tanh(), nn.Flatten(), nn.Linear(32, 2)))  # audit",
    ),
    "augment": ("augment.py", "", ""),
    "accumulate": ("accumulate.py", "", ""),
}


def replace_line(base: str, old: str, new: str, name: str) -> str:
    """``base``'s text with its one line ``old`` (stripped) replaced by ``new``, indent kept."""
    lines = (HERE / base).read_text(encoding="utf-8").splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1:
        raise ValueError(f"bug {name!r}: {old!r} occurs {len(hits)} times in {base}, need 1")
    i = hits[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + new + "\n"
    return "".join(lines)


def bug_source(name: str) -> str:
    """The bug's base file with its one line replaced (indentation kept)."""
    bug = BUGS[name]
    return replace_line(bug.base, bug.old, bug.new, name)


def correct_path(name: str) -> Path:
    """Where the correct training ``name`` is (written by :func:`write_bugs` if generated)."""
    base, old, _ = CORRECT[name]
    return HERE / base if not old else HERE / "correct" / f"{name}.py"


def write_bugs() -> list[Path]:
    """Write bugs/<name>.py for every bug and correct/<name>.py for the generated correct
    trainings; returns the paths."""
    out = []
    for folder in ("bugs", "correct"):
        (HERE / folder).mkdir(exist_ok=True)
    for name in BUGS:
        path = HERE / "bugs" / f"{name}.py"
        path.write_text(bug_source(name), encoding="utf-8")
        out.append(path)
    for name, (base, old, new) in CORRECT.items():
        if old:
            path = correct_path(name)
            path.write_text(replace_line(base, old, new, name), encoding="utf-8")
            out.append(path)
    return out


if __name__ == "__main__":
    for p in write_bugs():
        print(p)
