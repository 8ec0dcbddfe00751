#!/usr/bin/env bash
# The GPU benchmarks of benchmarks/RESULTS.md ("On a GPU"), in one go, on a CUDA machine
# with the package's dependencies (`pip install -e '.[gpu]'`; `make gpu` for the warp stage). Tables go to OUT (default
# gpu-results/). All stages take about 20 minutes on one H100 or H200; STAGES picks some
# (a space-separated list of the names below, in the order given), and each stage runs
# under `timeout` so that one slow stage cannot eat a short lease:
#
#     STAGES="tests action costs year" bash benchmarks/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
ALL_STAGES="groups tests env warp action costs ppo valpass backtest year learning offpolicy tournament tournament4 mps"
STAGES=${STAGES:-$ALL_STAGES}
for name in $STAGES; do  # every name checked before anything runs
    case " $ALL_STAGES " in
    *" $name "*) ;;
    *)
        echo "gpu.sh: unknown stage '$name' (STAGES takes: $ALL_STAGES)" >&2
        exit 2
        ;;
    esac
done
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
run() {
    local limit=$1
    shift
    echo "== $* (timeout ${limit} s, $(date -u +%T))"
    timeout "$limit" "$@" 2>&1 | grep -v "Warning\|warnings.warn"
}
stage() {
    case $1 in
    # Pod groups (issue 77): P pods one after another against one group, and pod 0's equality with its group of one.
    groups) run 300 python benchmarks/pod_group_train.py --device cuda --pods 1,16,64 --pod-steps 8192 --num-envs 16 ;;
    tests) run 150 python -m pytest -q -p no:cacheprovider tests/test_env.py tests/test_devices.py -m "gpu or not gpu" -k "cuda or device" ;;
    env) run 240 python benchmarks/env_throughput.py --device cuda --envs 1,1024,16384,65536,262144 --repeats 3 --seconds 0.5 --out "$OUT/env.md" ;;
    # MuJoCo Warp (issue 79): its parity tests on CUDA, then Ant and Humanoid steps/s at 1,024 to 65,536 robots
    # against GymVecEnv in the same run. Needs `make gpu` (mujoco-warp, warp-lang); kernels compile on the first call.
    warp)
        run 240 python -m pytest -q -p no:cacheprovider tests/test_warp_mujoco.py -m "gpu or not gpu" -k cuda
        run 300 python benchmarks/warp_throughput.py --device cuda --envs Ant-v5,Humanoid-v5 --seconds 1 --repeats 3 --out "$OUT/warp.md"
        ;;
    # The action that can hold, and every cost term, against today's step (issues 40 and 41).
    # Interleaved rounds (env_throughput.py's docstring): 21 of 0.1 s per run give the median ratio an interval.
    action) run 200 python benchmarks/env_throughput.py --device cuda --compare-action --envs 65536 --tickers 100 --repeats 21 --seconds 0.1 --out "$OUT/action.md" ;;
    costs) run 150 python benchmarks/env_throughput.py --device cuda --compare-costs --envs 65536 --tickers 100 --repeats 21 --seconds 0.1 --out "$OUT/costs.md" ;;
    # Rollouts of 1M rows: with the CPU table's 16k rows, E=65536 would take no step at all.
    ppo) run 150 python benchmarks/train_throughput.py --device cuda --no-sb3 --envs 4096,16384,65536 --rollout 1048576 \
        --minibatch-sizes 16384,65536 --updates 2 --out "$OUT/ppo.json" ;;
    valpass) run 120 python benchmarks/validation_pass.py --device cuda --repeats 2 --paths bar-by-bar,chunked ;;
    backtest) run 150 python benchmarks/backtest_speed.py --device cuda --days 5 --paths old,new ;;
    # The year of issue 43 (64 policies, 100 tickers, 98,280 bars), new path only.
    year) run 240 python benchmarks/backtest_speed.py --device cuda --days 252 --paths new ;;
    learning) run 240 python benchmarks/learning_check.py --device cuda --algos ppo --seeds 1 --null-dataset '' --jobs 1 --out "$OUT/learning.json" ;;
    # SAC and TD3 at the learning check's full budget, one seed (each prints its training time as it ends).
    offpolicy) run 150 python benchmarks/learning_check.py --device cuda --algos sac,td3 --seeds 1 --null-dataset '' --jobs 1 --out "$OUT/offpolicy.json" ;;
    tournament) run 200 python benchmarks/tournament_scaling.py --gpus all --workers 1 --pods 4 --pod-steps 8192 --out "$OUT/tournament.json" ;;
    tournament4) run 330 python benchmarks/tournament_scaling.py --gpus all --workers 4 --pods 8 --pod-steps 8192 --out "$OUT/tournament4.json" ;;
    # tournament4 under the CUDA MPS daemon: do four pods on one GPU run their kernels side by side with it?
    mps)
        if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
            run 280 python benchmarks/tournament_scaling.py --gpus all --workers 4 --pods 8 --pod-steps 8192 --out "$OUT/tournament4_mps.json"
            echo get_server_list | nvidia-cuda-mps-control
            echo quit | nvidia-cuda-mps-control
        else
            echo "gpu.sh: the CUDA MPS daemon (nvidia-cuda-mps-control) could not be started here"
        fi
        ;;
    esac
}
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
for name in $STAGES; do stage "$name"; done
