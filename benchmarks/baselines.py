"""Ours against the baseline libraries at equal wall-clock: test-period Sharpe, 3 seeds.

For each seed, one run directory: our PPO (the per-stock network and the recipe of
benchmarks/learning_check.py) trained by `trader.train` with a time budget, then in
the same directory SB3 PPO, SAC and TD3 (SB3's default hyperparameters, on
`SB3VecEnv` over the same batched env), RLlib PPO (RLlib's defaults, in
``.venv-rllib``: run ``make rllib`` first, or leave ``rllib-ppo`` out of
``--learners``) and FinRL's ensemble strategy, each through `trader.baselines` with
the same time budget; and a PPO tournament on one dask worker for the same time, in
its own run directory (``tournament-s<seed>/``). Every learner sees the same data set,
train period, env rules (learning_check's: weights with shorts, market-neutral,
reward in basis points, zero cost by default) and is selected on the validation
period by the same evaluator; then one `trader backtest` of the directory scores all
of them, with the oracle and equal-weight, on the test period.

Terms: equal wall-clock per learner (training plus its validation passes), each
learner in its own process with one torch thread; ``--jobs`` learners run side by
side (2 on a 2-core machine: each has a core). Samples per second are each
learner's env steps over its training seconds.

    python benchmarks/baselines.py                       # default edge, 300 s, 3 seeds
    python benchmarks/baselines.py --seconds 60 --seeds 1 --learners ours-ppo,sb3-ppo   # a smoke run
    python benchmarks/baselines.py --dataset synthetic-edge-daily --cost 0.0005   # net of 5 bp per side

Writes ``--out``/<dataset>/s<seed>/ and tournament-s<seed>/ (run directories), ``results.csv`` and
``results.md`` (the table for benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.

import pandas as pd  # noqa: E402

LEARNERS = ("ours-ppo", "tournament", "sb3-ppo", "sb3-sac", "sb3-td3", "rllib-ppo", "finrl")
LABELS = {
    "ours-ppo": "podracer PPO (per-stock)",
    "tournament": "podracer tournament, best pod",
    "tournament-ensemble": "podracer tournament, top-3 ensemble",
    "sb3-ppo": "SB3 PPO",
    "sb3-sac": "SB3 SAC",
    "sb3-td3": "SB3 TD3",
    "rllib-ppo": "RLlib PPO",
    "finrl": "FinRL ensemble",
}
STRATEGY = {
    "ours-ppo": "best",
    "sb3-ppo": "sb3-ppo-s{seed}",
    "sb3-sac": "sb3-sac-s{seed}",
    "sb3-td3": "sb3-td3-s{seed}",
    "rllib-ppo": "rllib-ppo-s{seed}",
    "finrl": "finrl-ensemble-s{seed}",
}
"""The report row of each learner: ours is its validation-selected checkpoint, as the baselines are."""
BASELINE = {
    "sb3-ppo": ("sb3", "ppo"),
    "sb3-sac": ("sb3", "sac"),
    "sb3-td3": ("sb3", "td3"),
    "rllib-ppo": ("rllib", "ppo"),
    "finrl": ("finrl", "ppo"),
}
"""(library, algorithm) of each baseline learner (FinRL's ensemble takes no algorithm)."""
OURS = ("ours-ppo", "tournament", "tournament-ensemble")
TOURNAMENT_POD_STEPS = 65_536
"""Transitions per tournament pod: four or five pods fit in 300 s on one core."""


def rules(cost: float, window: int) -> Any:
    """learning_check's rules: weights with shorts, market-neutral, rewards in basis
    points; the agents observe the return t-statistic over `window` bars."""
    from benchmarks.learning_check import env_rules

    return env_rules(cost, episode_length=390, return_windows=(window,), market_neutral=True)


def return_window(dataset: str) -> int:
    """The planted rule's horizon (what the learning check observes), 30 on edge-free data."""
    from benchmarks.learning_check import edge_spec
    from market_envs.data import load

    spec = edge_spec(load(dataset))
    return spec.horizon if spec is not None else 30


def train_ours(run_dir: Path, dataset: str, seed: int, seconds: float, cost: float, window: int) -> None:
    import torch

    import trader
    from benchmarks.learning_check import FULL, algo_overrides

    torch.set_num_threads(1)
    trader.train(
        "ppo",
        dataset,
        algo_overrides("ppo", FULL),
        run_dir,
        steps=10**12,
        seed=seed,
        num_envs=FULL.num_envs["ppo"],
        eval_every=200_000,
        env_config=rules(cost, window),
        time_budget=seconds,
    )


def train_baseline(
    run_dir: Path, dataset: str, learner: str, seed: int, seconds: float, eval_every: int, cost: float, window: int
) -> None:
    import torch

    import trader

    torch.set_num_threads(1)
    library, algo = BASELINE[learner]
    # SB3 PPO steps 8 sub-environments (as SB3 users run it with make_vec_env); the
    # off-policy learners and FinRL's ensemble one (SB3's and FinRL's practice);
    # RLlib one env on its local env runner.
    num_envs = 8 if learner == "sb3-ppo" else 1
    result = trader.baselines(
        run_dir,
        [library],
        [algo],
        seeds=[seed],
        time_budget=seconds,
        dataset=dataset,
        env_config=rules(cost, window),
        num_envs=num_envs,
        eval_every=eval_every,
        backtest=False,
        progress=print,
    )
    failed = [o for o in result.outcomes if o.status != "finished"]
    if failed:
        raise RuntimeError(f"{failed[0].name}: {failed[0].error}")


def train_tournament(run_dir: Path, dataset: str, seed: int, seconds: float, cost: float, window: int) -> None:
    """A PPO-only tournament on one worker (one core, as every other learner has) for
    `seconds`, per-stock PPO pods with learning_check's config; it backtests its best
    pod and top-3 ensemble on the test period itself (its own report.json)."""
    from benchmarks.learning_check import FULL, algo_overrides
    from tournament import TournamentConfig, run
    from trader.spec import market_spec

    config = TournamentConfig(
        run_dir=str(run_dir),
        env=market_spec(dataset, rules(cost, window)),
        algos=("ppo",),
        algo_configs={"ppo": dict(algo_overrides("ppo", FULL))},
        population=4,
        pod_steps=TOURNAMENT_POD_STEPS,
        num_envs=FULL.num_envs["ppo"],
        pods=None,
        time_budget=seconds,
        workers=1,
        seed=seed,
        ensemble_k=3,
        backtest=True,
    )
    run(config)


def run_task(task: tuple) -> tuple[str, float]:
    """One learner of one seed; returns its name and wall-clock seconds (training and selection)."""
    kind, *args = task
    start = time.perf_counter()
    {"ours-ppo": train_ours, "tournament": train_tournament, "baseline": train_baseline}[kind](*args)
    return f"{args[2] if kind == 'baseline' else kind} {args[0].name}", time.perf_counter() - start


def _done(task: tuple) -> bool:
    """A learner already trained by an earlier (interrupted) invocation."""
    kind, run_dir = task[0], task[1]
    if kind == "ours-ppo":
        return (run_dir / "checkpoints" / "best.json").is_file()
    if kind == "tournament":
        return (run_dir / "report.json").is_file()
    learner, seed = task[3], task[4]
    sidecar = run_dir / "baselines" / STRATEGY[learner].format(seed=seed) / "baseline.json"
    return sidecar.is_file() and json.loads(sidecar.read_text()).get("status") == "finished"


def collect(root: Path, dataset: str, seeds: list[int], learners: list[str]) -> pd.DataFrame:
    """One row per (learner, seed): test Sharpe, return, env steps, training seconds, samples/s."""
    rows = []
    for seed in seeds:
        run_dir = root / f"s{seed}"
        report = json.loads((run_dir / "report.json").read_text())
        training = {s["name"]: s.get("training") or {} for s in report["strategies"]}
        if "tournament" in learners:
            rows += _tournament_rows(root / f"tournament-s{seed}", dataset, seed)
        for learner in [x for x in learners if x != "tournament"] + ["oracle", "equal_weight", "benchmark"]:
            name = STRATEGY.get(learner, learner).format(seed=seed)
            if name not in report["metrics"]:
                continue
            metrics = report["metrics"][name]
            steps, seconds = _effort(run_dir, learner, training.get(name, {}))
            rows.append(_row(dataset, learner, seed, metrics, steps, seconds))
    return pd.DataFrame(rows)


def _row(
    dataset: str,
    learner: str,
    seed: int,
    metrics: dict[str, Any],
    steps: int | None,
    seconds: float | None,
    **extra: Any,
) -> dict[str, Any]:
    """One results row: test Sharpe and return from a report's metrics, and the training effort."""
    return {
        "dataset": dataset,
        "learner": learner,
        "seed": seed,
        "sharpe": metrics["sharpe_ratio"],
        "return": metrics["cum_returns_final"],
        "steps": steps,
        "seconds": seconds,
        "samples_per_s": steps / seconds if steps is not None and seconds else None,
        **extra,
    }


def _tournament_rows(run_dir: Path, dataset: str, seed: int) -> list[dict[str, Any]]:
    """The tournament's best pod and ensemble, from its own report; its effort is every
    pod's transitions over the time from the first pod's start to the last pod's end."""
    if not (run_dir / "report.json").is_file():
        print(f"{run_dir}: no report (no pod finished within the budget)", flush=True)
        return []
    report = json.loads((run_dir / "report.json").read_text())
    pods = pd.read_parquet(run_dir / "pods.parquet")
    steps = int(pods["steps"].fillna(0).sum())
    seconds = float(pods["end"].max() - pods["start"].min())  # Unix times: first pod's start to last pod's end
    return [
        _row(dataset, learner, seed, report["metrics"][name], steps, seconds, pods=len(pods))
        for learner, name in (("tournament", "best"), ("tournament-ensemble", "ensemble"))
        if name in report["metrics"]
    ]  # an ensemble only where pods cleared the bar (tournament.selection)


def _effort(run_dir: Path, learner: str, training: dict[str, Any]) -> tuple[int | None, float | None]:
    if learner == "ours-ppo":
        metrics = pd.read_parquet(run_dir / "metrics.parquet")
        return int(metrics["step"].iloc[-1]), float(metrics["wall_time"].iloc[-1])
    if training:
        return int(training["steps"]), float(training["seconds"])
    return None, None


def table(frame: pd.DataFrame, seconds: float, jobs: int) -> str:
    lines = [
        f"Test-period Sharpe at equal wall-clock ({seconds:.0f} s per learner, {jobs} learners side by side, "
        f"one torch thread each); median over seeds, every seed in brackets.",
        "",
        "| data set | strategy | median Sharpe | per seed | median env steps | median samples/s |",
        "|---|---|---:|---|---:|---:|",
    ]
    for (dataset, learner), group in frame.groupby(["dataset", "learner"], sort=False):
        sharpe = [f"{v:.2f}" for v in group["sharpe"]]
        steps = group["steps"].dropna()
        rate = group["samples_per_s"].dropna()
        lines.append(
            f"| {dataset} | {LABELS.get(learner, learner)} | {statistics.median(group['sharpe']):.2f} | "
            f"{', '.join(sharpe)} | {f'{statistics.median(steps):,.0f}' if len(steps) else ''} | "
            f"{f'{statistics.median(rate):,.0f}' if len(rate) else ''} |"
        )
    return "\n".join(lines)


def verdict(frame: pd.DataFrame) -> list[str]:
    """Is ours ahead of every baseline, at the median and on every seed?"""
    lines = []
    present = set(frame.learner)
    for mine in [x for x in OURS if x in present]:
        ours = frame[frame.learner == mine].set_index("seed")["sharpe"]
        for learner in [x for x in LEARNERS if x not in OURS and x in present]:
            theirs = frame[frame.learner == learner].set_index("seed")["sharpe"]
            seeds = ours.index.intersection(theirs.index)
            ahead = int((ours[seeds] > theirs[seeds]).sum())
            lines.append(
                f"- {LABELS[mine]} vs {LABELS[learner]}: median {ours[seeds].median():.2f} vs "
                f"{theirs[seeds].median():.2f}; ahead on {ahead} of {len(seeds)} seeds"
            )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--seconds", type=float, default=300.0, help="wall-clock per learner")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--cost", type=float, default=0.0, help="cost rate per side")
    parser.add_argument(
        "--return-window",
        type=int,
        default=None,
        help="bars of the observed return t-statistic (default: the planted rule's horizon, else 30)",
    )
    parser.add_argument("--sb3-eval-every", type=int, default=50_000, help="SB3 env steps between validations")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/bench-baselines")
    parser.add_argument("--resume", action="store_true", help="skip learners whose run or baseline folder is complete")
    args = parser.parse_args(argv)
    learners = [x for x in args.learners.split(",") if x]
    unknown = [x for x in learners if x not in LEARNERS]
    if unknown or "ours-ppo" not in learners:
        parser.error(f"--learners: choose from {LEARNERS}, ours-ppo included (the run directory is ours)")
    root = Path(args.out) / args.dataset
    seeds = list(range(args.seeds))
    from market_envs.data import load

    load(args.dataset)  # build the data set once, before the workers read it
    window = args.return_window or return_window(args.dataset)
    tasks = [("ours-ppo", root / f"s{s}", args.dataset, s, args.seconds, args.cost, window) for s in seeds]
    if "tournament" in learners:
        tasks += [
            ("tournament", root / f"tournament-s{s}", args.dataset, s, args.seconds, args.cost, window) for s in seeds
        ]
    tasks += [
        ("baseline", root / f"s{s}", args.dataset, x, s, args.seconds, args.sb3_eval_every, args.cost, window)
        for s in seeds
        for x in learners
        if x in BASELINE
    ]
    if args.resume:
        tasks = [t for t in tasks if not _done(t)]
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    # our run claims s<seed>/ (trader.train starts only in a new or empty folder), so the
    # baselines that go beside it in s<seed>/baselines/ start once it has
    phases = [[t for t in tasks if t[0] != "baseline"], [t for t in tasks if t[0] == "baseline"]]
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        for phase in phases:
            for name, took in pool.map(run_task, phase):
                print(f"{name} finished in {took:.0f} s ({time.perf_counter() - started:.0f} s elapsed)", flush=True)
    from trader.backtesting.runs import backtest_run

    for s in seeds:
        backtest_run(root / f"s{s}", dataset=args.dataset, overwrite=True)
    frame = collect(root, args.dataset, seeds, learners)
    frame.to_csv(root / "results.csv", index=False)
    text = "\n".join(
        [
            table(frame, args.seconds, args.jobs),
            "",
            *verdict(frame),
            "",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            f"command: python benchmarks/baselines.py {' '.join(argv)}",
        ]
    )
    (root / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
