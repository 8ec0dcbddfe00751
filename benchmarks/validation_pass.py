"""Validation pass: what one market validation costs, eager against ``torch.compile``.

A market run is validated by one deterministic pass over the whole validation
period with a single sub-environment (`trader.agents.evaluator.market_evaluator`): one env step
and one policy forward per bar, so its time is the step's fixed overhead, not
arithmetic. In a tournament pod of benchmarks/tournament_value.py it was the largest
fixed cost. This script times, in one process:

1. the pass itself (an untrained flat-MLP PPO policy, the learning check's config),
   eager, compiled bar by bar (the path before issue 43: one compiled env step and one
   policy call per bar) and compiled many bars per call (``compile=True`` now:
   `market_envs.rollout`): the first pass (compilation included) and the median of the
   next ``--repeats``, wall and CPU; the scores must agree (to 1e-6: the new path splits
   the policy's first layer, tests/test_rollout.py);
2. with ``--profile``: cProfile of one more eager pass, the top entries by own time;
3. with ``--pods N``: N consecutive tournament_value-shaped pods (``trader.train`` of
   ``--pod-steps`` on ``--num-envs`` sub-environments, validated once at the end),
   eager then compiled, as one dask worker process runs them one after the other.

Market: the planted-edge recipe at ``--tickers`` and ``--edge-strength``, written
by `edge_recipe` below.

    OMP_NUM_THREADS=1 python benchmarks/validation_pass.py               # ~2 min
    OMP_NUM_THREADS=1 python benchmarks/validation_pass.py --pods 3      # + 6 pods, ~5 min more
    OMP_NUM_THREADS=1 python benchmarks/validation_pass.py --repeats 1 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.

from benchmarks.learning_check import Budget, algo_overrides, env_rules  # noqa: E402
from market_envs.data import load  # noqa: E402
from market_envs.data.recipes import find_recipe  # noqa: E402
from trader.agents import make_agent, make_config  # noqa: E402
from trader.agents.evaluator import market_evaluator  # noqa: E402
from trader.training import train  # noqa: E402


def edge_recipe(args: argparse.Namespace, folder: Path) -> Path:
    """The planted-edge recipe with ``--tickers`` and ``--edge-strength``, written as a file in ``folder``."""
    values = tomllib.loads(Path(find_recipe(args.dataset).path).read_text(encoding="utf-8"))
    values["name"] = f"{values['name']}-n{args.tickers}-s{args.edge_strength:g}"
    values["synthetic"]["n_tickers"] = args.tickers
    values["synthetic"]["edge"]["strength_sharpe"] = args.edge_strength
    path = folder / f"{values['name']}.toml"
    path.write_text(tomli_w.dumps(values), encoding="utf-8")
    return path


def ppo_config(args: argparse.Namespace) -> dict:
    """The learning check's PPO config at the pods' steps and envs."""
    budget = Budget(steps={"ppo": args.pod_steps}, num_envs={"ppo": args.num_envs})
    return dict(algo_overrides("ppo", budget, args.network))


def evaluator_and_policy(data, rules, args: argparse.Namespace, compile: bool) -> tuple[Any, Any]:
    """The validation evaluator and an untrained flat-MLP PPO policy for its env."""
    evaluator = market_evaluator(data, rules, device=args.device, compile=compile)
    env = evaluator.env
    config = make_config("ppo", ppo_config(args))
    return evaluator, make_agent("ppo", env.obs_dim, env.act_dim, config, device=args.device, seed=0)


PATHS = {"eager": (False, False), "compiled, bar by bar": (True, False), "compiled, many bars per call": (True, True)}
"""Each path's (compile, many bars per call)."""

PATH_OPTIONS = dict(zip(("eager", "bar-by-bar", "chunked"), PATHS))
"""``--paths`` names of the rows of PATHS."""


def time_passes(data, rules, args: argparse.Namespace, compile: bool, chunked: bool = True) -> tuple[float, ...]:
    """(first pass s, median of the next passes s, their median CPU s, score) of one evaluator."""
    evaluator, agent = evaluator_and_policy(data, rules, args, compile)
    if not chunked:  # the bar-by-bar loop of before
        evaluator._rollout_episode = lambda agent: None
    start = time.perf_counter()
    score = evaluator.evaluate(agent)["score"]
    first = time.perf_counter() - start
    times, cpu = [], []
    for _ in range(args.repeats):
        start, clock = time.perf_counter(), time.process_time()
        again = evaluator.evaluate(agent)["score"]
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - clock)
        if again != score:
            raise SystemExit(f"validation is not deterministic: {again} != {score}")
    return first, statistics.median(times), statistics.median(cpu), score


def profile_pass(data, rules, args: argparse.Namespace) -> None:
    """Print cProfile's top entries (own time) of one eager pass after a warm-up pass."""
    evaluator, agent = evaluator_and_policy(data, rules, args, compile=False)
    evaluator.evaluate(agent)
    profiler = cProfile.Profile()
    profiler.runcall(evaluator.evaluate, agent)
    print(f"\ncProfile of one eager pass ({data.num_bars:,} bars), by own time:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def time_pods(recipe: Path, rules, args: argparse.Namespace, compile: bool, folder: Path) -> list[float]:
    seconds = []
    for index in range(args.pods):
        start = time.perf_counter()
        train(
            "ppo",
            str(recipe),
            ppo_config(args),
            folder / f"{'compiled' if compile else 'eager'}-{index}",
            steps=args.pod_steps,
            seed=index,
            num_envs=args.num_envs,
            eval_every=0,
            env_config=rules,
            compile=compile,
        )
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--tickers", type=int, default=30)
    parser.add_argument("--edge-strength", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pods", type=int, default=0, help="Also time this many pods each way.")
    parser.add_argument("--profile", action="store_true", help="Also print cProfile's top entries of an eager pass.")
    parser.add_argument("--pod-steps", type=int, default=262_144)
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--network", default="mlp", choices=("mlp", "per_stock"))
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    parser.add_argument("--paths", default=",".join(PATH_OPTIONS), help=f"comma list of {', '.join(PATH_OPTIONS)}")
    args = parser.parse_args()
    unknown = set(args.paths.split(",")) - set(PATH_OPTIONS)
    if unknown:
        parser.error(f"--paths: unknown path {', '.join(sorted(unknown))} (choose from {', '.join(PATH_OPTIONS)})")
    torch.set_num_threads(1)
    rules = env_rules(0.0, 390)
    with tempfile.TemporaryDirectory(prefix="validation-pass-") as tmp:
        recipe = edge_recipe(args, Path(tmp))
        validation = load(str(recipe)).period("validation")
        print(
            f"{recipe.stem}: validation period of {validation.num_bars:,} bars x {validation.num_tickers} tickers; "
            f"load {os.getloadavg()[0]:.2f}\n"
        )
        print(
            "| validation pass | first s (compile included) | median of next s | ms per bar | CPU ms per bar | score | load |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name in (PATH_OPTIONS[option] for option in args.paths.split(",")):
            compile, chunked = PATHS[name]
            first, median, cpu, score = time_passes(validation, rules, args, compile, chunked)
            bars = validation.num_bars
            print(
                f"| {name} | {first:.2f} | {median:.2f} | {1000 * median / bars:.3f} | {1000 * cpu / bars:.3f} | "
                f"{score:.6f} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )
        if args.profile:
            profile_pass(validation, rules, args)
        if args.pods:
            print(f"\n| pods of {args.pod_steps:,} x {args.num_envs} envs, one after the other | seconds per pod |")
            print("|---|---|")
            for compile in (False, True):
                seconds = time_pods(recipe, rules, args, compile, Path(tmp))
                name = "compiled" if compile else "eager"
                print(f"| {name} | {', '.join(f'{s:.1f}' for s in seconds)} |", flush=True)


if __name__ == "__main__":
    main()
