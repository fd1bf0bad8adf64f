"""The bug zoo's entries: each bug is ``plain.py`` with one line replaced (issue 33 item 4).

``BUGS[name] = (old line, new line, kind)``: ``old`` occurs exactly once in plain.py (stripped);
``kind`` is the finding the documented path should report. ``write_bugs()`` writes
``bugs/<name>.py``; tests/test_bug_zoo.py checks each differs from plain.py by one line.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

BUGS: dict[str, tuple[str, str, str]] = {
    "noise_recreated": (
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed))",
        "fresh noise (the same draw at every step)",
    ),
    "noise_once_per_epoch": (
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + epoch))",
        "fresh noise (one draw per epoch)",
    ),
    "noise_without_clip": ("std = SIGMA * CLIP", "std = SIGMA", "noise scale"),
    "noise_over_sqrt_b": (
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z / BATCH**0.5) / BATCH",
        "noise scale",
    ),
    "noise_divided_twice": (
        "p.grad = (summed + std * z) / BATCH",
        "p.grad = (summed + std * z / BATCH) / BATCH",
        "noise scale",
    ),
    "accountant_epochs": (
        "accountant.compose(event, steps * EPOCHS)",
        "accountant.compose(event, EPOCHS)",
        "accountant: steps composed vs optimizer steps",
    ),
    "q_wrong_n": (
        "q_accounted = BATCH / len(dataset)",
        "q_accounted = BATCH / (len(dataset) * EPOCHS)",
        "accountant: q vs the recorded batches",
    ),
    "per_tensor_clipping": (
        "f = factor",
        "f = torch.clamp(CLIP / (g[name].flatten(1).norm(dim=1) + 1e-12), max=1.0)",
        "replay: sensitivity above C / b",
    ),
    "summed_gradient_clipped": (
        "factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)",
        "factor = torch.clamp(CLIP / (torch.sqrt(sum(v.sum(0).pow(2).sum() for v in "
        "g.values())) + 1e-12), max=1.0).expand(len(norms))",
        "replay: sensitivity above C / b",
    ),
    "sampler_repeats_batches": (
        "g = self.generator",
        "g = torch.Generator().manual_seed(self.seed)",
        "inspect-loader: unknown sampler (the same batches every epoch)",
    ),
    "shuffle_accounted_poisson": (
        "loader = DataLoader(dataset, batch_sampler=PoissonBatches(len(dataset), q, steps, seed))",
        "loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)",
        "inspect-loader / accountant: fixed batch sizes, not Poisson",
    ),
    "noise_shared_across_tensors": (
        "z = torch.randn(p.shape, generator=noise)",
        "z = torch.randn(p.shape, generator=noise.manual_seed(seed + epoch * 1000 + len(x)))",
        "fresh noise (re-seeded from the batch size)",
    ),
}


def bug_source(name: str) -> str:
    """plain.py with the bug's one line replaced (indentation kept)."""
    old, new, _ = BUGS[name]
    lines = (HERE / "plain.py").read_text(encoding="utf-8").splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1:
        raise ValueError(f"bug {name!r}: {old!r} occurs {len(hits)} times in plain.py, need 1")
    i = hits[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + new + "\n"
    return "".join(lines)


def write_bugs() -> list[Path]:
    """Write bugs/<name>.py for every bug; returns the paths."""
    folder = HERE / "bugs"
    folder.mkdir(exist_ok=True)
    out = []
    for name in BUGS:
        path = folder / f"{name}.py"
        path.write_text(bug_source(name), encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_bugs():
        print(p)
