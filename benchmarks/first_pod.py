"""A tournament worker's first pod: where its extra seconds go (issue 43).

With ``--compile validation`` each worker process compiles the chunked validation pass once per
algorithm (`market_envs.rollout._CHUNKS`) and builds the env tables once (`market_envs.env`), so
its first pod is longer than the next ones even with inductor's on-disk cache warm
(benchmarks/RESULTS.md, "Pods per hour, validation compiled"). This script runs ``--pods`` pods in
one fresh process, one after the other, as a dask worker runs them (`tournament.pod.train_pod` of
the generator's fresh specs, the tournament's defaults of tournament_scaling.py), after loading the
data set, and prints per pod:

- its seconds and validation score (the same pods as tournament_scaling.py's at the same seed);
- the seconds in the env tables (`StockTradingVecEnv._build_tables`, the training and validation
  envs');
- the seconds in torch.compile (dynamo's ``_compile.compile_inner``), of which dynamo's tracing of
  the Python code (``bytecode_tracing``), the backend (AOTAutograd and inductor, a load from the
  on-disk caches when they hit: ``OutputGraph.call_user_compiler``), and inductor's C++ compiler
  (``compile_file``: with a warm cache, the preprocessing of the C++ wrapper's header);
- the frames dynamo compiled (a recompilation is one more), the graphs, and AOTAutograd's and inductor's cache hits and misses;
- the import of torch._dynamo and inductor, which the pod's first torch.compile triggers (timed
  around the import itself, before the first pod, with ``--import-first``; else inside pod 0).

Run it twice with a fresh ``TORCHINDUCTOR_CACHE_DIR`` to see a cold then a warm cache:

    OMP_NUM_THREADS=1 TORCHINDUCTOR_CACHE_DIR=/tmp/first-pod-cache python benchmarks/first_pod.py  # cold
    OMP_NUM_THREADS=1 TORCHINDUCTOR_CACHE_DIR=/tmp/first-pod-cache python benchmarks/first_pod.py  # warm
    OMP_NUM_THREADS=1 python benchmarks/first_pod.py --algos td3,sac --pods 4 --pod-steps 2048
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from market_envs.env import StockTradingVecEnv
from tournament import TournamentConfig
from tournament.generator import PodGenerator
from tournament.leaderboard import Leaderboard
from tournament.pod import load_market, train_pod

PHASES = {
    "compile": "_compile.compile_inner",
    "trace": "bytecode_tracing",
    "backend": "OutputGraph.call_user_compiler",
    "c++": "compile_file",
}
"""Our names of dynamo's compile-time metrics (`torch._dynamo.utils.compilation_time_metrics`)."""

COUNTS = {
    "frames": ("frames", "total"),
    "graphs": ("stats", "unique_graphs"),
    "aot hit": ("aot_autograd", "autograd_cache_hit"),
    "aot miss": ("aot_autograd", "autograd_cache_miss"),
    "fx hit": ("inductor", "fxgraph_cache_hit"),
    "fx miss": ("inductor", "fxgraph_cache_miss"),
}
"""Our names of dynamo's counters (`torch._dynamo.utils.counters`)."""


class TableClock:
    """Seconds spent in `StockTradingVecEnv._build_tables` (wrapped for this process only)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        build = StockTradingVecEnv._build_tables

        def timed(env):
            start = time.perf_counter()
            try:
                return build(env)
            finally:
                self.seconds += time.perf_counter() - start

        StockTradingVecEnv._build_tables = timed


def compile_totals() -> tuple[dict[str, float], Counter]:
    """Dynamo's cumulative compile seconds by `PHASES` and counts by `COUNTS` (zero before its import)."""
    if "torch._dynamo" not in sys.modules:
        return dict.fromkeys(PHASES, 0.0), Counter()
    from torch._dynamo.utils import compilation_time_metrics, counters

    seconds = {name: sum(compilation_time_metrics.get(key, ())) for name, key in PHASES.items()}
    counts = Counter({name: counters[group][key] for name, (group, key) in COUNTS.items()})
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--algos", default="td3", help="The pool's algorithms (tournament_scaling.py: ppo,sac,td3).")
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--pod-steps", type=int, default=16_384)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", default="validation", choices=("off", "validation", "all"))
    parser.add_argument(
        "--import-first", action="store_true", help="Import torch._dynamo and inductor before the first pod, timed."
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    load_market(args.dataset)
    print(f"data set loaded in {time.perf_counter() - start:.1f} s (the first pod's too, in a worker)")
    if args.import_first:
        start = time.perf_counter()
        importlib.import_module("torch._dynamo")
        importlib.import_module("torch._inductor.compile_fx")

        print(f"torch._dynamo and inductor imported in {time.perf_counter() - start:.1f} s")
    tables = TableClock()
    with tempfile.TemporaryDirectory(prefix="first-pod-") as run_dir:
        config = TournamentConfig(
            run_dir=run_dir,
            env=args.dataset,
            algos=tuple(args.algos.split(",")),
            pod_steps=args.pod_steps,
            num_envs=args.num_envs,
            fresh_probability=1.0,
            seed=args.seed,
            compile=args.compile,
        )
        generator = PodGenerator(config, args.dataset)
        print(
            f"\n{args.pods} pods of {args.pod_steps:,} steps ({args.algos}, {args.num_envs} envs) on {args.dataset}, "
            f"compile {args.compile}, one process; inductor cache "
            f"{os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'default')}; torch {torch.__version__}\n"
        )
        header = ["pod", "algo", "pod s", "tables s", *(f"{name} s" for name in PHASES), *COUNTS, "score"]
        print("| " + " | ".join(header) + " |")
        print("|---|---|" + "---:|" * (len(header) - 2))
        before_seconds, before_counts = compile_totals()
        for index in range(args.pods):
            spec = generator.next_spec(index, Leaderboard(1))
            tables.seconds = 0.0
            start = time.perf_counter()
            result = train_pod(spec, str(Path(run_dir)))
            seconds = time.perf_counter() - start
            after_seconds, after_counts = compile_totals()
            phases = [after_seconds[name] - before_seconds[name] for name in PHASES]
            counts = [after_counts[name] - before_counts[name] for name in COUNTS]
            before_seconds, before_counts = after_seconds, after_counts
            cells = [spec.pod_id, spec.algo, f"{seconds:.1f}", f"{tables.seconds:.1f}"]
            cells += [f"{s:.1f}" for s in phases] + [str(c) for c in counts] + [f"{result.score:.4f}"]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
