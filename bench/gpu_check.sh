#!/usr/bin/env bash
# Issue 25's GPU checks, in one short run (under 5 minutes on an H200): the CUDA tests (the engine
# on the GPU, batches drawn on the device, Philox and ghost tests where they apply), then the
# engine's GPU throughput with the batches drawn by torch (bench/engine_limit.py --device cuda:
# trainings/s and the 1e6 projection). Run from the repository root: bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('GPU:', torch.cuda.get_device_name())"
timeout 180 "$PYTHON" -m pytest -q -x tests/test_cuda.py --durations=5
timeout 120 "$PYTHON" bench/engine_limit.py --device cuda --shard-size 5000
