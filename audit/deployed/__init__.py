"""Audit a deployed training as it is: the user's model, data, loader and accountant.

docs/design.md §14; the path for a user is docs/auditing-your-training.md. One module per
concept:

- :mod:`audit.deployed.loader_inspection`: which batch sampler the user's loader is
  (:func:`inspect_loader`), checked against what the accountant assumed;
- :mod:`audit.deployed.claims`: the epsilon of the user's own accountant (Opacus, dp_accounting);
- :mod:`audit.deployed.instrument`: Dirac canaries on a parameter block attached to any
  ``nn.Module``, for a plain torch DP-SGD loop or an Opacus ``PrivacyEngine``, read where the
  privatized gradient is made (inside Opacus's ``DPOptimizer``; a plain loop's
  ``canaries.privatized()`` line);
- :mod:`audit.deployed.input_canaries`: mislabeled / out-of-distribution examples inserted
  through the user's ``Dataset``, scored black-box;
- :mod:`audit.deployed.deployed_audit`: after one training, the one-run audit and its report.
- :mod:`audit.deployed.record_replay`: the user's training replayed with a canary slot IN and zeroed
  under the same seed, its per-step sensitivity checked against C / b (:func:`replay`).
- :mod:`audit.deployed.script_runner`: a training script audited as it is, no refactor
  (:func:`audit_script`; ``audit run-script``): Opacus's ``make_private`` instrumented, the
  script re-run for the replay.

Submodules import torch or Opacus only when used; ``import audit.deployed`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AccountantAssumptions",
    "AuditedBlock",
    "DeployedClaim",
    "DiracCanaries",
    "InputCanaries",
    "LoaderInspection",
    "ReplayResult",
    "ScriptAudit",
    "audit_script",
    "audit_training",
    "audited",
    "claim_from",
    "inspect_loader",
    "multi_run_findings",
    "one_run_audit",
    "replay",
    "replay_script",
    "run_preflight",
]

_WHERE = {
    "AccountantAssumptions": "audit.deployed.claims",
    "LoaderInspection": "audit.deployed.loader_inspection",
    "inspect_loader": "audit.deployed.loader_inspection",
    "DeployedClaim": "audit.deployed.claims",
    "claim_from": "audit.deployed.claims",
    "DiracCanaries": "audit.deployed.instrument",
    "InputCanaries": "audit.deployed.input_canaries",
    "one_run_audit": "audit.deployed.deployed_audit",
    "replay": "audit.deployed.record_replay",
    "ReplayResult": "audit.deployed.record_replay",
    "multi_run_findings": "audit.run.multi_run_findings",
    "replay_script": "audit.deployed.replay_script",
    "run_preflight": "audit.deployed.multi_run_preflight",
    "ScriptAudit": "audit.deployed.script_runner",
    "audit_script": "audit.deployed.script_runner",
    "audit_training": "audit.deployed.script_runner",
    "audited": "audit.deployed.script_runner",
    "AuditedBlock": "audit.deployed.script_runner",
}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use."""
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'audit.deployed' has no attribute {name!r}")
