"""Run every benchmark of the project in turn (`make bench`).

Each script prints its own table; this runner only sequences them so that no two
compete for the machine's cores. Pass script names to run a subset:
`python benchmarks/run_all.py env_throughput backtest_speed`.
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
    "env_throughput",
    "backtest_speed",
    "train_throughput",
    "pendulum_learning",
    "sac_time_to_score",
    "learning_check",
    "learning_costs",
    "network_speed",
    "tournament_scaling",
    "tournament_value",
    "baselines",
    "dashboard_paint",
)


def main(argv: list[str]) -> int:
    names = argv or [n for n in ORDER if (HERE / f"{n}.py").exists()]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    failed = []
    for name in names:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"no benchmark named {name!r} in {HERE}", file=sys.stderr)
            return 2
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], env=env)
        print(f"=== {name}: exit {code}, {time.perf_counter() - start:.0f} s ===", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
