"""audit.deployed.script_runner: a script audited as it is (issue 43 item 3).

The unmodified third-party-shaped Opacus script examples/third_party_mnist/mnist.py is audited
end to end (one training with canaries: findings, eps_lb, verdict; then the replay, one run
per probe) with small sizes; a plain torch loop with the documented canary lines under
``__main__``; the errors a user meets (no make_private and no canary lines; a script that
fails names its run and line; argparse refusing the arguments). No statistical tolerance is
tuned here: a correct training's findings fail with probability at most 1 - 0.95 (the
audit's family-wise level) and the fixed seed makes the outcome deterministic.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("opacus")

from audit.cli import main
from audit.core.errors import AuditInputError
from audit.deployed.script_runner import audit_script, audit_training

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "examples" / "third_party_mnist" / "mnist.py"
SMALL = ["-n", "1", "--n-train", "300", "--n-test", "50"]  # 7 steps with 100 canaries


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_unmodified_opacus_script_is_audited_end_to_end(capsys):
    result = audit_script(MNIST, SMALL, canaries=100, seed=0)
    printed = capsys.readouterr().out
    assert "Train Epoch: 1" in printed and "Test set" in printed  # its __main__ and prints
    assert printed.count("Train Epoch") == 1  # the replay's runs are quiet
    assert result.instrumented == "make_private" and result.canaries == 100
    assert result.audit.claim.accountant.startswith("opacus")
    assert not result.audit.failed and result.audit.verdict == "consistent"
    assert 0 <= result.audit.epsilon_lb <= result.audit.claim.epsilon
    assert result.replay is not None and result.replay.passed
    assert abs(result.replay.sensitivity - 1) < 1e-2  # one clipped example: C
    assert result.passed and result.summary().startswith("PASSED")


def test_the_command_line(tmp_path, capsys):
    code = main(["run-script", str(MNIST), "--canaries", "100", "--no-replay", "--json",
                 "--out", str(tmp_path / "report"), "--", *SMALL])
    captured = capsys.readouterr()
    assert code == 0 and "Train Epoch" in captured.err  # the script's prints: to stderr
    record = json.loads(captured.out)
    assert record["passed"] and record["replay"] is None and record["args"] == SMALL
    assert (tmp_path / "report" / "report.md").is_file()


PLAIN = '''
import argparse
import dp_accounting
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset
from audit.deployed import DiracCanaries  # audit

class Batches(list):
    """Poisson batches drawn up front (a list subclass: the canaries record what it yields)."""

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sigma", type=float, default=2.0)
    parser.add_argument("--noise-scale", type=float, default=1.0)
    parser.add_argument("--per-tensor", action="store_true")  # a clipping bug
    args = parser.parse_args()
    batch, clip, n = 25, 1.0, 150
    y = torch.randint(0, 2, (n,))
    data = TensorDataset(torch.randn(n, 5) + (2 * y[:, None] - 1), y)
    canaries = DiracCanaries(60, clip=clip)  # audit
    data = canaries.wrap(data)  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)))  # audit
    q = batch / len(data)
    sampler = Batches([torch.nonzero(torch.rand(len(data)) < q).flatten().tolist()
                       for _ in range(12)])
    loader = DataLoader(data, batch_sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    canaries.plain(optimizer, loader, noise_divisor=batch)  # audit
    params = dict(model.named_parameters())
    def loss(p, x, t):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), t[None])
    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    for x, t in loader:
        g = per_example({k: v.detach() for k, v in params.items()}, x, t)
        canaries.inject(g)  # audit
        norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
        factor = torch.clamp(clip / (norms + 1e-12), max=1.0)
        for name, p in params.items():
            if args.per_tensor:
                factor = torch.clamp(clip / (g[name].flatten(1).norm(dim=1) + 1e-12), max=1.0)
            summed = (g[name] * factor.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
            noise = args.sigma * clip * args.noise_scale * torch.randn(p.shape)
            p.grad = (summed + noise) / batch
        canaries.privatized()  # audit
        optimizer.step()
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(args.sigma)), len(sampler))
    print("epsilon", accountant.get_epsilon(1e-5))

if __name__ == "__main__":
    main()
'''


def test_plain_loop_with_the_documented_lines(tmp_path, capsys):
    script = tmp_path / "plain_loop.py"
    script.write_text(PLAIN, encoding="utf-8")
    result = audit_script(script, [], seed=0)
    assert "epsilon" in capsys.readouterr().out
    assert result.instrumented == "script" and result.canaries == 60  # the script's m
    assert result.audit.claim.accountant.startswith("dp_accounting")
    assert not result.audit.failed and result.audit.verdict == "consistent"
    assert result.replay is not None and result.replay.passed
    # the same script with a quarter of the noise (its own option): the findings say so
    bug = audit_script(script, ["--noise-scale", "0.25"], seed=0, replay_probes=None)
    assert "noise_scale" in {f.name for f in bug.audit.failed} and not bug.passed
    # per-tensor clipping: the replay's crafted probe names it
    bug = audit_script(script, ["--per-tensor"], seed=0, replay_probes=("crafted",))
    assert bug.replay is not None and not bug.replay.passed and not bug.passed
    assert "per-tensor clipping" in bug.replay.message


def test_no_make_private_and_no_canary_lines_is_a_clear_error(capsys):
    with pytest.raises(AuditInputError, match=r"nothing to audit: it never called "
                       r"opacus\.PrivacyEngine\.make_private") as error:
        audit_script(MNIST, [*SMALL, "--disable-dp"])
    assert "docs/auditing-your-training.md" in error.value.fix
    code = main(["run-script", str(MNIST), "--", *SMALL, "--disable-dp"])
    assert code == 2 and "nothing to audit" in capsys.readouterr().err


def test_failures_name_the_run_and_the_line(tmp_path):
    with pytest.raises(AuditInputError, match=r"exited with status 2 in the audited training.*"
                       r"argparse"):
        audit_script(MNIST, ["--no-such-option"])
    script = tmp_path / "broken.py"
    script.write_text("def main():\n    raise RuntimeError('boom')\n\nmain()\n")
    with pytest.raises(AuditInputError, match=r"broken.py failed in the audited training "
                       r"\(run 1\): RuntimeError: boom \(at broken.py line 2, in main\)"):
        audit_script(script)


def test_a_function_is_audited_as_a_script_is(capsys):
    import runpy
    import sys

    def training():
        saved = sys.argv
        sys.argv = [str(MNIST), *SMALL]
        try:
            runpy.run_path(str(MNIST), run_name="__main__")
        finally:
            sys.argv = saved

    result = audit_training(training, canaries=100, replay_probes=("crafted",))
    assert result.script == "training" and result.passed
    assert result.replay is not None and result.replay.passed
    assert {p.probe for p in result.replay.probes} == {"crafted"}  # the probes asked for


def _variant(tmp_path, old: str, new: str) -> Path:
    """mnist.py with one line changed, as a user's own script would differ."""
    text = MNIST.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "mnist.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_make_private_with_epsilon_is_instrumented_too(tmp_path):
    script = _variant(tmp_path, "privacy_engine.make_private(",
                      "privacy_engine.make_private_with_epsilon(target_epsilon=3.0, "
                      "target_delta=args.delta, epochs=args.epochs,")
    # (the RDP accountant: Opacus's default PRV one calibrates sigma in seconds, not ms)
    script.write_text(script.read_text().replace("noise_multiplier=args.sigma,", "").replace(
        "PrivacyEngine(secure_mode", "PrivacyEngine(accountant='rdp', secure_mode"))
    result = audit_script(script, SMALL, canaries=100, replay_probes=None)
    assert result.instrumented == "make_private" and not result.audit.failed
    assert result.audit.claim.epsilon == pytest.approx(3.0, rel=0.05)


def test_a_shuffling_loader_accounted_as_poisson_fails(tmp_path):
    # poisson_sampling=False keeps the DataLoader's fixed batches while Opacus accounts Poisson
    # sampling: 284 rows + 100 slots = 6 batches of exactly 64, no Binomial spread
    script = _variant(tmp_path, "max_grad_norm=args.max_per_sample_grad_norm,",
                      "max_grad_norm=args.max_per_sample_grad_norm, poisson_sampling=False,")
    result = audit_script(script, ["-n", "2", "--n-train", "284", "--n-test", "50"],
                          canaries=100, replay_probes=None)
    assert "batch_sizes" in {f.name for f in result.audit.failed} and not result.passed


def test_a_with_block_is_audited_in_process(capsys):
    import runpy
    import sys

    from audit.deployed import audited

    saved = sys.argv
    sys.argv = [str(MNIST), *SMALL]
    try:
        with audited(canaries=100, seed=0) as block:
            runpy.run_path(str(MNIST), run_name="__main__")
    finally:
        sys.argv = saved
    assert "Train Epoch" in capsys.readouterr().out
    assert block.result is not None and block.result.replay is None
    assert not block.audit.failed and block.audit.verdict == "consistent"
