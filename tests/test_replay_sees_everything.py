"""The replay sees everything a training touches (issue 42 items 1, 2, 5; docs/design.md §14.7).

Each bug is examples/bug_zoo/plain.py with one or two lines changed (test-local variants): the
noise skipped on biases (p.dim() == 1), a head stepped by a second plain SGD optimizer on the
non-private gradient, an auxiliary loss on the training batch added after the noise, early
stopping on the private training loss, noise drawn in bfloat16, noise only where the batch's
summed gradient is nonzero (sparse noise, told from no noise by the lit run). Each is FAILED
with its cause in the first sentence; none is blamed on BatchNorm. The level of each new
statistical check (:func:`audit.deployed.record_replay.tensor_noise_finding`) is measured on
simulated correct noise, and its power on simulated bfloat16 / float16 noise.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from audit.deployed.record_replay import replay, tensor_noise_finding

PLAIN = Path(__file__).resolve().parents[1] / "examples" / "bug_zoo" / "plain.py"
NOISE = "z = torch.randn(p.shape, generator=noise)"
STEP = "optimizer.step()"

VARIANTS: dict[str, tuple[str, str, str]] = {
    # name: (old line, new lines, what the first sentence must say)
    "biases_without_noise": (
        NOISE, "z = torch.randn(p.shape, generator=noise) * (p.dim() > 1)",
        "parameters 0.bias, 2.bias stepped without noise",
    ),
    "head_second_optimizer": (
        STEP,
        "optimizer.step()\n"
        "head = torch.optim.SGD(model[2].parameters(), lr=LR); head.zero_grad()\n"
        "nn.functional.cross_entropy(model(x), y).backward(); head.step()",
        "parameters 2.weight, 2.bias stepped without clipping/noise",
    ),
    # a final fine-tuning of the head on the training rows after the last DP step: no step of
    # the watched optimizer follows it, so only the parameters when train returns show it
    "head_tuned_after_training": (
        "accountant = dp_accounting.rdp.RdpAccountant()",
        "head = torch.optim.SGD(model[2].parameters(), lr=LR); head.zero_grad()\n"
        "rows = [dataset[i] for i in range(len(dataset))]\n"
        "xs, ys = torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])\n"
        "nn.functional.cross_entropy(model(xs), ys).backward(); head.step()\n"
        "accountant = dp_accounting.rdp.RdpAccountant()",
        "parameters 2.weight, 2.bias stepped without clipping/noise",
    ),
    "loss_after_noise": (
        STEP,
        "(0.1 * nn.functional.cross_entropy(model(x), y)).backward()\noptimizer.step()",
        "stepped without clipping/noise",
    ),
    "early_stopping": (
        STEP,
        "optimizer.step()\nif nn.functional.cross_entropy(model(x), y).item() < 0.3:\n    break",
        "the training's control flow depends on the data at step",
    ),
    # Opacus issue #350: noise only where the batch's summed gradient is nonzero; with every
    # gradient 0 (the noise run) no tensor gets any, the lit run (every entry a constant) shows
    # the noise appearing: sparse noise, not no noise
    "noise_where_gradient_nonzero": (
        NOISE, "z = torch.randn(p.shape, generator=noise) * (summed != 0)",
        "noise only on the entries the batch's gradient touched (sparse noise",
    ),
    "bfloat16_noise": (
        NOISE, "z = torch.randn(p.shape, generator=noise).bfloat16().float()",
        "noise on a coarse floating-point lattice",
    ),
}


def variant(name: str, tmp: Path):
    """plain.py with the variant's line replaced (indentation kept), imported as a module."""
    old, new, _ = VARIANTS[name]
    lines = PLAIN.read_text(encoding="utf-8").splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    assert len(hits) == 1, (name, hits)
    indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
    lines[hits[0]] = "".join(indent + part + "\n" for part in new.split("\n"))
    path = tmp / f"{name}.py"
    path.write_text("".join(lines), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"see42_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_bug_is_found_with_its_cause_first(name: str, tmp_path: Path) -> None:
    module = variant(name, tmp_path)
    result = replay(module.train, seed=0, clip=module.CLIP)
    assert result.failed, result.summary()
    # the cause opens the message (its first clause, before any colon)
    assert VARIANTS[name][2] in result.message.split(": ")[0], result.message
    assert "BatchNorm" not in result.message
    # the lit run (one more training) runs only where the noise run saw noise missing
    lit = any("the lit run" in note for note in result.notes)
    assert lit == (name in ("noise_where_gradient_nonzero", "biases_without_noise")), (
        result.notes)


def test_the_plain_training_still_passes() -> None:
    sys.path.insert(0, str(PLAIN.parent))
    try:
        import plain  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(PLAIN.parent))
    result = replay(plain.train, seed=1, clip=plain.CLIP)
    assert result.passed, result.summary()
    assert not any("the lit run" in note for note in result.notes)  # correct pays nothing
    names = {t.name for t in result.noise_per_tensor}
    assert names == {"0.weight", "0.bias", "2.weight", "2.bias"}


# -- the level of the per-tensor noise checks -------------------------------------------------

SHAPES = {"audit_canaries.block.weight": 64, "0.weight": 160, "0.bias": 16, "2.weight": 32,
          "2.bias": 2}
STEPS = 18


def simulated(
    rng: np.random.Generator, dtype: torch.dtype = torch.float32
) -> dict[str, np.ndarray]:
    """One correct training's noise as the replay reads it: float32 N(0, 1) draws times sigma C
    (torch's generator), divided by b in float32, read back in units of C / b."""
    out = {}
    for name, d in SHAPES.items():
        z = torch.from_numpy(rng.standard_normal((STEPS, d)).astype(np.float32))
        z = z.to(dtype).float()
        y = (z * 6.0) / 50.0
        out[name] = y.double().numpy() * 50.0 / 2.0
    return out


def test_level_on_simulated_correct_noise() -> None:
    """No finding on 500 simulated correct trainings. Each check's family-wise level is 1e-6
    (five checks), so P(any of 500 flagged) <= 500 x 5e-6 = 2.5e-3: zero findings expected, and
    one would be evidence against the stated level at that size."""
    rng = np.random.default_rng(42)
    trained = [k for k in SHAPES if not k.startswith("audit")]
    flagged = []
    for _ in range(500):
        finding, _ = tensor_noise_finding(simulated(rng), trained, "audit_canaries.block.weight")
        if finding is not None:
            flagged.append(finding)
    assert not flagged, flagged[:2]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_noise_is_found(dtype: torch.dtype) -> None:
    """Power on 20 simulated trainings each: bfloat16 gives thousands of equal pairs, float16
    hundreds, where float32 allows about 0.7 on average (the Markov bound's threshold at 1e-6
    is about 670 pairs for these 4932 values)."""
    rng = np.random.default_rng(7)
    trained = [k for k in SHAPES if not k.startswith("audit")]
    found = 0
    for _ in range(20):
        finding, _ = tensor_noise_finding(simulated(rng, dtype), trained,
                                          "audit_canaries.block.weight")
        found += finding is not None and finding.startswith("noise on a coarse")
    assert found == 20 if dtype == torch.bfloat16 else found >= 15


def test_less_noise_on_one_tensor_is_found() -> None:
    rng = np.random.default_rng(3)
    noise = simulated(rng)
    noise["0.weight"] = noise["0.weight"] * 0.8
    finding, _ = tensor_noise_finding(noise, ["0.weight", "0.bias", "2.weight", "2.bias"],
                                      "audit_canaries.block.weight")
    assert finding is not None and finding.startswith(
        "parameters 0.weight stepped with less noise"), finding


def test_sparse_and_shared_noise_are_found() -> None:
    rng = np.random.default_rng(4)
    trained = ["0.weight", "0.bias", "2.weight", "2.bias"]
    noise = simulated(rng)
    noise["0.weight"][:, :40] = 0.0  # rows no batch used
    finding, _ = tensor_noise_finding(noise, trained, "audit_canaries.block.weight")
    assert finding is not None and finding.startswith("noise only on part of parameters 0.weight")
    noise = simulated(rng)
    noise["2.bias"][5] = noise["2.bias"][4]
    finding, _ = tensor_noise_finding(noise, trained, "audit_canaries.block.weight")
    assert finding is not None and finding.startswith("the same noise on 2.bias"), finding


# -- sparse noise: an embedding noised only on the rows the batch used --------------------------

VOCAB, TOKENS = 30, 4


def embedding_training(sparse: bool):
    """A bag-of-words classifier on token ids (plain.py's loop and batches, an nn.Embedding
    instead of the first Linear); ``sparse``: the embedding's noise only on the rows the batch
    used (what a sparse-gradient DP-SGD that noises ``grad.coalesce().values()`` does)."""
    from torch import nn
    from torch.func import functional_call, grad, vmap
    from torch.utils.data import DataLoader, TensorDataset

    sys.path.insert(0, str(PLAIN.parent))
    try:
        import plain
    finally:
        sys.path.remove(str(PLAIN.parent))

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 8)
            self.out = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.emb(x).mean(-2))

    def train(canaries, seed: int):
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, VOCAB, (120, TOKENS), generator=g)
        dataset = canaries.wrap(TensorDataset(x, (x[:, 0] % 2).long()))
        model = canaries.attach(Bag())
        sampler = plain.PoissonBatches(len(dataset), 20 / len(dataset), 6, seed)
        loader = DataLoader(dataset, batch_sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        canaries.plain(optimizer, loader, noise_divisor=20)
        params = dict(model.named_parameters())

        def loss(p, xb, yb):
            return nn.functional.cross_entropy(functional_call(model, p, (xb[None],)), yb[None])

        per_example = vmap(grad(loss), in_dims=(None, 0, 0))
        noise = torch.Generator().manual_seed(seed + 1)
        for xb, yb in loader:
            grads = per_example({k: v.detach() for k, v in params.items()}, xb, yb)
            canaries.inject(grads)
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in grads.values()))
            factor = torch.clamp(1.0 / (norms + 1e-12), max=1.0)
            for name, p in params.items():
                summed = (grads[name] * factor.view(-1, *[1] * (p.dim()))).sum(0)
                z = torch.randn(p.shape, generator=noise)
                if sparse and name == "emb.weight":
                    z = z * torch.zeros(VOCAB, 1).index_fill_(0, xb.unique(), 1.0)
                p.grad = (summed + 1.0 * z) / 20
            optimizer.step()

    return train


@pytest.mark.parametrize("sparse", [False, True])
def test_sparse_noise_on_an_embedding(sparse: bool) -> None:
    result = replay(embedding_training(sparse), seed=0, clip=1.0)
    if not sparse:
        assert result.passed, result.summary()
        return
    assert result.failed, result.summary()
    assert result.message.startswith("noise only on part of parameters emb.weight"), (
        result.message)


def test_rounding_after_the_noise_is_not_read_as_coarse_noise() -> None:
    """The privatized gradient cast to bfloat16 after the noise (post-processing) puts the data
    run's values on the lattice too: no lattice finding; bfloat16 noise under float32 data
    values is one."""
    rng = np.random.default_rng(11)
    trained = [k for k in SHAPES if not k.startswith("audit")]
    noise = simulated(rng, torch.bfloat16)
    with_data = {k: v + 0.37 for k, v in simulated(rng).items()}
    finding, _ = tensor_noise_finding(noise, trained, "audit_canaries.block.weight",
                                      with_data=with_data)
    assert finding is not None and finding.startswith("noise on a coarse")
    rounded = {k: torch.from_numpy(v).bfloat16().double().numpy() for k, v in with_data.items()}
    finding, _ = tensor_noise_finding(noise, trained, "audit_canaries.block.weight",
                                      with_data=rounded)
    assert finding is None, finding
