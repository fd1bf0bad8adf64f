"""Train many DP-SGD models with a canary IN and OUT and save what an attacker observes.

Writes an ``.npz`` with ``y_in``/``y_out`` (trials x steps, all iterates), ``final_in``/
``final_out`` (last iterate: projection on the canary direction), ``loss_in``/``loss_out``
and ``logits_in``/``logits_out`` (black box), and ``config``: the training configuration,
seed and conventions as a JSON string (``json.loads(str(npz["config"]))``).
"""

from __future__ import annotations

import argparse

from audit.core.names import ACTIVATIONS, CANARIES, INPUT_CANARIES, SAMPLERS, THREAT_MODELS

HELP = "run real DP-SGD trainings with a canary IN/OUT and save the observations (.npz)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", required=True, help="digits, breast_cancer, gaussian or sequences"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--model", required=True,
        help="logistic, mlp, cnn (digits), transformer (sequences), or a factory "
        "'package.module:factory' with factory(input_shape, num_classes) -> torch.nn.Module",
    )
    parser.add_argument("--hidden", type=int, default=32, help="MLP hidden width (default 32)")
    parser.add_argument(
        "--activation", default="relu", help=f"MLP activation: {', '.join(ACTIVATIONS)}"
    )
    parser.add_argument("--sampler", required=True, help=f"one of: {', '.join(SAMPLERS)}")
    parser.add_argument("--sigma", type=float, required=True, help="noise multiplier")
    parser.add_argument("--clip", type=float, required=True, help="clipping norm C")
    parser.add_argument("--lr", type=float, required=True, help="learning rate")
    parser.add_argument("--batch-size", type=int, required=True, help="(expected) batch size b")
    parser.add_argument(
        "--n", type=int, required=True, help="training-set size n = b*T, canary included"
    )
    parser.add_argument("--epochs", type=int, default=1, help="epochs E (default 1)")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="B of a sampler that pads batches (truncated_poisson)",
    )
    parser.add_argument("--canary", required=True, help=" or ".join(CANARIES))
    parser.add_argument(
        "--input-canary", default="ood", help=f"kind of input canary: {' or '.join(INPUT_CANARIES)}"
    )
    parser.add_argument("--threat-model", required=True, help=" or ".join(THREAT_MODELS))
    parser.add_argument(
        "--trials", type=int, required=True, help="trainings with the canary IN (and as many OUT)"
    )
    parser.add_argument("--seed", type=int, required=True, help="audit seed")
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib workers (default 1)")
    parser.add_argument(
        "--shard-size", type=int, default=None, help="trials per shard (default 500)"
    )
    parser.add_argument("--params", action="store_true", help="also save the final parameters")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--out", required=True, help="output .npz file")


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from dataclasses import asdict
    from pathlib import Path

    import numpy as np

    from audit.cli import output_path
    from audit.training.trials import DEFAULT_SHARD_SIZE, TrainingConfig, run_trials

    output_path("--out", args.out, ".npz")  # before training: its folder must exist
    config = TrainingConfig(
        dataset=args.dataset,
        model=args.model,
        hidden=args.hidden,
        activation=args.activation,
        sampler=args.sampler,
        sigma=args.sigma,
        clip=args.clip,
        lr=args.lr,
        batch_size=args.batch_size,
        n=args.n,
        epochs=args.epochs,
        max_batch_size=args.max_batch_size,
        canary=args.canary,
        input_canary=args.input_canary,
        threat_model=args.threat_model,
        record_params=args.params,
        device=args.device,
    )
    observations = run_trials(
        config,
        trials=args.trials,
        seed=args.seed,
        n_jobs=args.n_jobs,
        shard_size=args.shard_size or DEFAULT_SHARD_SIZE,
        progress=not args.quiet,
    )
    arrays = {
        name: value
        for name in (
            "y_in", "y_out", "final_in", "final_out", "loss_in", "loss_out",
            "logits_in", "logits_out", "params_in", "params_out",
        )
        if (value := getattr(observations, name)) is not None
    }
    meta = dict(observations.metadata)
    meta["mechanism"] = asdict(observations.mechanism)  # its fields, in order
    out = Path(args.out)
    np.savez_compressed(out, config=np.array(json.dumps(meta)), **arrays)
    print(
        f"wrote {out}: {args.trials} IN + {args.trials} OUT trainings, "
        f"{observations.mechanism.total_steps} steps, keys {', '.join(arrays)}",
        file=sys.stderr,
    )
    return 0
