"""audit.deployed: Dirac canaries in the user's own training, input canaries, the claim, the
one-run audit (docs/design.md §14.2-§14.5).

The Dirac tests run with a noise multiplier of 1e-4, so each recorded y_{j,t} is the canary's
participation (0 or 1, in units of C) up to noise of sd 1e-4: a tolerance of 1e-2 is 100 sd.
"""

from __future__ import annotations

import csv
import io
import json
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from audit.deployed import DiracCanaries, InputCanaries, claim_from, one_run_audit
from audit.deployed.claims import DeployedClaim

SIGMA_TINY = 1e-4
TOL = 1e-2


def images(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g)
    )


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.head = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))


def opacus_training(canaries, dataset, *, batch_size, poisson, epochs=2, sigma=SIGMA_TINY, seed=0):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = canaries.attach(TinyCNN())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=not poisson,
                        generator=torch.Generator().manual_seed(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=1.0,
            poisson_sampling=poisson,
            noise_generator=torch.Generator().manual_seed(seed + 1),
        )
        canaries.opacus(model, optimizer, loader)
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    return engine, optimizer, loader


def test_opacus_poisson_dirac_canaries_read_their_participations():
    m, real = 20, 100
    canaries = DiracCanaries(m, seed=3)
    dataset = canaries.wrap(images(real))
    opacus_training(canaries, dataset, batch_size=12, poisson=True)
    y = canaries.observations  # (m, S)
    assert y.shape == (m, len(canaries.batches))
    expected = np.zeros_like(y)
    for t, batch in enumerate(canaries.batches):
        slots = batch[batch >= real] - real
        expected[slots, t] = canaries.included[slots]
    np.testing.assert_allclose(y, expected, atol=TOL)
    assert expected.sum() > 0  # some IN canary took part


def test_opacus_adversarial_cobatch_reveals_the_shuffled_step():
    b = 5
    for included in (True, False):
        canaries = DiracCanaries(1, included=[included], threat_model="adversarial")
        dataset = canaries.wrap(images(19))  # n = 20 = b T with the canary's slot
        opacus_training(canaries, dataset, batch_size=b, poisson=False, epochs=1)
        y = canaries.observations[0] + b  # the attacker's add-back (b others at -1 in every batch)
        step = next(t for t, batch in enumerate(canaries.batches) if 19 in batch)
        expected = np.zeros(len(canaries.batches))
        # Chua et al. 2024: MoG(2) vs MoG(1) at the canary's step
        expected[step] = 2.0 if included else 1.0
        np.testing.assert_allclose(y, expected, atol=TOL)


def test_plain_loop_example_c_is_violated_and_the_fixed_loop_consistent():
    """The CI version of examples/buggy_dpsgd (noise sigma instead of sigma * C, C = 5)."""
    from audit.core.validation import load_callable

    train_and_audit = load_callable("example", "examples/buggy_dpsgd/train.py:train_and_audit")
    buggy = train_and_audit(n=600, m=300, batch_size=45, epochs=3, bug=True)
    assert buggy.verdict == "violated" and buggy.epsilon_lb > buggy.claim.epsilon
    assert buggy.claim.accountant.endswith("RdpAccountant")
    fixed = train_and_audit(n=600, m=300, batch_size=45, epochs=3, bug=False)
    assert fixed.verdict == "consistent"


def test_input_canaries_black_box_one_run(tmp_path):
    dataset = images(120)
    canaries = InputCanaries(dataset, 40, kind="mislabeled", seed=1)
    train = canaries.wrap()
    assert len(train) == 120 + int(canaries.included.sum())
    model = TinyCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(12):  # non-private training: the mislabeled IN canaries are memorised
        for x, y in DataLoader(
            train, batch_size=40, shuffle=True, generator=torch.Generator().manual_seed(0)
        ):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    scores = canaries.scores(model)
    assert scores.shape == (40,) and canaries.logits.shape == (40, 3)
    assert scores[canaries.included].mean() > scores[~canaries.included].mean()
    audit = one_run_audit(scores, canaries.included, 1.0, delta=1e-5, attack="loss")
    assert audit.result.canaries == 40 and audit.verdict in ("violated", "consistent")
    written = audit.write(tmp_path / "report")
    assert {p.name for p in written.iterdir()} >= {"summary.json", "cells.csv", "report.md",
                                                    audit.result.plot}
    from audit.run.results import SCHEMA_VERSION

    summary = json.loads((written / "summary.json").read_text())
    assert next(iter(summary)) == "schema_version" and summary["schema_version"] == SCHEMA_VERSION
    rows = list(csv.DictReader(io.StringIO((written / "cells.csv").read_text())))
    assert len(rows) == 1 and next(iter(rows[0])) == "schema_version"
    assert rows[0]["verdict"] == audit.verdict and rows[0]["findings_failed"] == ""
    assert float(rows[0]["epsilon_lb"]) == pytest.approx(audit.epsilon_lb)
    assert float(rows[0]["claim.epsilon"]) == 1.0
    ood = InputCanaries(dataset, 5, kind="ood", seed=2)
    assert tuple(ood.examples[0][0].shape) == (1, 6, 6)


def test_claims_from_opacus_and_dp_accounting():
    import dp_accounting

    canaries = DiracCanaries(2, seed=0)
    engine, _, loader = opacus_training(canaries, canaries.wrap(images(48)), batch_size=10,
                                                poisson=True, epochs=1, sigma=1.0)
    recorded = claim_from(engine, 1e-5)
    assert recorded.accountant == "opacus-rdp"
    assert recorded.epsilon == pytest.approx(engine.get_epsilon(1e-5), rel=1e-9)
    assert recorded.sample_rate == pytest.approx(1 / len(loader)) and recorded.steps == len(loader)
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)), 50)
    claim = claim_from(rdp, 1e-5)
    assert claim.epsilon == pytest.approx(rdp.get_epsilon(1e-5)) and claim.sample_rate == 0.1
    assert isinstance(claim_from(2.0, 1e-5), DeployedClaim)
    with pytest.raises(ValueError, match="not an accountant"):
        claim_from("opacus", 1e-5)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="needs m=1"):
        DiracCanaries(3, threat_model="adversarial")
    canaries = DiracCanaries(2, clip=1.0)
    with pytest.raises(ValueError, match=r"canaries\.wrap"):
        canaries.watch(DataLoader(images(10), batch_size=2))
    with pytest.raises(ValueError, match="no optimizer step"):
        _ = canaries.observations
    with pytest.raises(ValueError, match="kind"):
        InputCanaries(images(10), 2, kind="poison")
