"""Run every benchmark of the project in turn (`make bench`).

Each script prints its own table, the source of a current table of benchmarks/RESULTS.md; this
runner only sequences them so that no two compete for the machine's cores. Pass script names to
run a subset: `python benchmarks/run_all.py env_throughput backtest_speed`.

``ORDER`` is the suite; ``SEPARATE`` names the maintained scripts this runner leaves out, each
with why and how it is run; ``HELPERS`` are modules the scripts import, not benchmarks. Every
file of benchmarks/ is in exactly one of them (tests/test_benchmark_scripts.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = (
    "cli_startup",
    "data_build",
    "oracle_costs",
    "oracle_under_costs",
    "edge_identifiability",
    "env_throughput",
    "backtest_speed",
    "validation_pass",
    "train_throughput",
    "time_to_learn",
    "pendulum_learning",
    "sac_time_to_score",
    "mujoco_throughput",
    "warp_throughput",
    "locomotion",
    "locomotion_group",
    "learning_check",
    "learning_costs",
    "network_speed",
    "pod_group_step",
    "pod_group_train",
    "tournament_scaling",
    "tournament_value",
    "tournament_suite",
    "locomotion_tournament",  # long: 5 seeds x 3 arms x 3 min on Ant-v5, about 50 min
    "baselines",
    "walkforward",
    "significance",
    "dsr_calibration",
    "dashboard_paint",
)
SEPARATE = {
    "cluster_hosts.py": "needs root and iproute2 (network namespaces): `sudo python benchmarks/cluster_hosts.py`",
    "tournament_pods_test.py": "reads the run folders `tournament_value.py --keep-runs DIR` keeps "
    "(or, with --records, its records in benchmarks/rows/)",
    "gpu.sh": "needs a CUDA device: `bash benchmarks/gpu.sh` on a GPU machine",
}
HELPERS = {
    "finrl_style_env.py": "env_throughput.py's FinRL-style pandas and numpy envs",
    "__init__.py": "makes benchmarks/ a package, so that the scripts import each other as benchmarks.<name>",
    "run_all.py": "this runner",
}


def main(argv: list[str]) -> int:
    names = argv or list(ORDER)
    for name in names:  # every name checked before anything runs
        if not (HERE / f"{name}.py").exists():
            print(f"no benchmark named {name!r} in {HERE}", file=sys.stderr)
            return 2
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    failed = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / f"{name}.py")], env=env)
        print(f"=== {name}: exit {code}, {time.perf_counter() - start:.0f} s ===", flush=True)
        if code:
            failed.append(name)
    if not argv:
        print("\nrun apart from this suite:")
        for script, why in SEPARATE.items():
            print(f"  {script}: {why}")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
