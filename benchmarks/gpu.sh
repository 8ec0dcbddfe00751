#!/usr/bin/env bash
# The GPU benchmarks of benchmarks/RESULTS.md ("On a GPU"), in one go, on a CUDA machine
# with the package's dependencies (`pip install -e '.[gpu]'`). Tables go to OUT (default
# gpu-results/). About 15 minutes on one H100.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
run() { echo "== $*"; "$@" 2>&1 | grep -v "Warning\|warnings.warn"; }
run python -m pytest -q -p no:cacheprovider tests/test_env.py tests/test_devices.py -m "gpu or not gpu" -k "cuda or device"
run python benchmarks/env_throughput.py --device cuda --envs 1,1024,16384,65536,262144 --repeats 3 --seconds 0.5 --out "$OUT/env.md"
# Rollouts of 1M rows: with the CPU table's 16k rows, E=65536 would take no step at all.
run python benchmarks/train_throughput.py --device cuda --no-sb3 --envs 4096,16384,65536 --rollout 1048576 \
    --minibatch-sizes 16384,65536 --updates 2 --out "$OUT/ppo.json"
run python benchmarks/validation_pass.py --device cuda --repeats 2 --paths bar-by-bar,chunked
run python benchmarks/backtest_speed.py --device cuda --days 5 --paths old,new
run python benchmarks/learning_check.py --device cuda --algos ppo --seeds 1 --null-dataset '' --jobs 1 --out "$OUT/learning.json"
run python benchmarks/tournament_scaling.py --gpus all --workers 1 --pods 4 --pod-steps 8192 --out "$OUT/tournament.json"
run python benchmarks/tournament_scaling.py --gpus all --workers 4 --pods 8 --pod-steps 8192 --out "$OUT/tournament4.json"
