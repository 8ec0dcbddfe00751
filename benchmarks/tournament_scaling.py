"""Tournament scaling: pods per hour with 1, 2, ... dask workers (issue 10).

The same tournament is run once per worker count on a fresh `LocalCluster` (worker
processes, one thread each): ``--pods`` pods of ``--pod-steps`` transitions on
``--dataset``, all of them fresh agents of the base configs (``fresh_probability=1``),
so that every run does the same work (children would inherit perturbed
hyperparameters, and with them different costs, depending on completion order).
Pods per hour count from the first submission to the last result, the workers'
first imports included; scaling efficiency is ``pods/h(W) / (W x pods/h(1))``.
Also printed: the median seconds of a pod per algorithm, a table of every pod (its
algorithm, worker, start and end from the first submission, seconds, and whether it was
the first pod of its algorithm in its worker, the one that compiles that algorithm's
validation pass under ``--compile``; and its score, so that two checkouts' runs can be
compared pod by pod), and (``--plain``) the
ceiling of the machine itself: one PPO pod alone in a plain process, then two at
once in two plain processes (no dask), so a loss of efficiency can be told apart
from what the cores lose to each other; ``--pin`` pins those two processes to one
core each (does the OS scheduler's placement cost anything?).

Target (issue 10): >= 90% efficiency from 1 to 2 workers on a quiet 2-core machine;
on a GPU machine (``--gpus all --workers 1,2,4,8,16``: pods per GPU), >= 80% at 16.

    OMP_NUM_THREADS=1 python benchmarks/tournament_scaling.py               # ~15 min on 2 cores
    python benchmarks/tournament_scaling.py --workers 1,2 --pods 4 --pod-steps 8192  # quick
    OMP_NUM_THREADS=1 python benchmarks/tournament_scaling.py --workers 1,2 --pods 6 --compile  # pods compiled
    OMP_NUM_THREADS=1 python benchmarks/tournament_scaling.py --workers 1,2 --pods 6 --compile validation

``--group-size 1,16`` runs each worker count once per group size (`TournamentConfig.group_size`:
PPO pods trained as one program, one dask task a group; issue 77), so the table compares pods per
hour of lone pods with that of groups on the same workers and pods; efficiency is then read within
one group size.

    OMP_NUM_THREADS=1 python benchmarks/tournament_scaling.py --workers 2 --pods 32 --pod-steps 4096 \
        --num-envs 16 --algos ppo --dataset synthetic-edge-daily --group-size 1,16

With ``--compile`` each worker's first pod of each algorithm compiles that algorithm's validation
pass ("first of its algo in its worker" in the per-pod table; inductor's on-disk cache makes a
later process's compile shorter), then every validation pass runs many bars per call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from tournament import TournamentConfig, run
from tournament.events import EventLog
from tournament.orchestrator import EVENTS_FILE, Progress


def one_run(workers: int, args: argparse.Namespace, root: Path, group_size: int = 1) -> dict:
    """One tournament; ``workers`` is the number of worker processes, or with
    ``--gpus`` the pods per GPU (concurrent pods = GPUs x workers); ``group_size`` its
    `TournamentConfig.group_size`."""
    cluster = {"gpus": args.gpus, "pods_per_gpu": workers} if args.gpus else {"workers": workers}
    config = TournamentConfig(
        run_dir=str(root / f"w{workers}-g{group_size}"),
        group_size=group_size,
        env=args.dataset,
        algos=tuple(args.algos.split(",")),
        pod_steps=args.pod_steps,
        num_envs=args.num_envs,
        pods=args.pods,
        population=args.pods,
        fresh_probability=1.0,
        seed=args.seed,
        backtest=False,
        keep_checkpoints=False,
        compile=args.compile,
        **cluster,
    )
    load = os.getloadavg()[0]
    result = run(config, on_progress=progress_printer(workers))
    pods = result.pods
    events = EventLog(Path(config.run_dir) / EVENTS_FILE).read()
    span = float(pods["end"].max() - pods["start"].min())  # first pod start .. last pod end
    per_algo = {algo: statistics.median(group["seconds"]) for algo, group in pods.groupby("algo")}
    return {
        "workers": workers,
        "group_size": group_size,
        "pods": int((pods["status"] == "finished").sum()),
        "failed": int((pods["status"] == "failed").sum()),
        "wall_s": result.seconds,
        "span_s": span,
        "pods_per_hour": 3600.0 * len(pods) / result.seconds,
        "median_pod_s": per_algo,
        "load_before": load,
        "per_pod": per_pod(pods, events),
    }


def progress_printer(workers: int) -> Callable[[Progress], None]:
    """An ``on_progress`` that prints a line each time a pod ends, so that a run stopped by a timeout
    (a short GPU lease) still tells how far it got: ``[4 workers] 3 pods done, 0 failed, 4 in flight, 95 s``."""
    last = (0, 0)  # (done, failed) at the last line printed

    def show(progress: Progress) -> None:
        nonlocal last
        if (progress.done, progress.failed) != last:
            last = (progress.done, progress.failed)
            print(
                f"  [{workers} workers] {progress.done} pods done, {progress.failed} failed, "
                f"{progress.in_flight} in flight, {progress.elapsed:.0f} s",
                flush=True,
            )

    return show


def per_pod(pods: pd.DataFrame, events: list[dict]) -> list[dict]:
    """One row per pod that ended, in order of start: algorithm, worker (w1, w2, ... in order of
    their first pod), start and end in seconds from the tournament's start (its ``started``
    event), seconds, whether it was the first pod of its algorithm in its worker, and its
    validation score."""
    origin = next(e["time"] for e in events if e["kind"] == "started")
    done = pods[pods["status"].isin(("finished", "failed"))].sort_values("start")
    rows, workers, seen = [], {}, set()
    for pod in done[["pod_id", "algo", "worker", "start", "end", "seconds", "score", "status"]].to_dict("records"):
        worker = workers.setdefault(pod["worker"], f"w{len(workers) + 1}")
        rows.append(
            {
                **pod,
                "worker": worker,
                "start_s": float(pod["start"] - origin),
                "end_s": float(pod["end"] - origin),
                "seconds": float(pod["seconds"]),
                "score": float(pod["score"]),
                "first_of_algo_in_worker": (worker, pod["algo"]) not in seen,
            }
        )
        seen.add((worker, pod["algo"]))
    return rows


def print_per_pod(row: dict) -> None:
    """The per-pod table of one run."""
    print(f"\n{row['workers']} worker(s), every pod (seconds from the tournament's start):\n")
    print("| pod | algo | worker | start s | end s | pod s | first of its algo in its worker | score |")
    print("|---|---|---|---:|---:|---:|---|---:|")
    for pod in row["per_pod"]:
        first = "yes" if pod["first_of_algo_in_worker"] else "no"
        status = "" if pod["status"] == "finished" else f" ({pod['status']})"
        print(
            f"| {pod['pod_id']} | {pod['algo']} | {pod['worker']} | {pod['start_s']:.1f} | {pod['end_s']:.1f} | "
            f"{pod['seconds']:.1f}{status} | {first} | {pod['score']:.4f} |"
        )
    print(flush=True)


def plain_pod(index: int, dataset: str, pod_steps: int, num_envs: int, run_dir: str, core: int | None = None) -> float:
    """Seconds of PPO pod ``index`` (fresh, base config) in this process, no dask;
    pinned to CPU ``core`` when given (Linux)."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    from tournament.generator import PodGenerator
    from tournament.leaderboard import Leaderboard
    from tournament.pod import load_market, train_pod

    torch.set_num_threads(1)
    load_market(dataset)
    config = TournamentConfig(
        run_dir=run_dir, env=dataset, algos=("ppo",), pod_steps=pod_steps, num_envs=num_envs, fresh_probability=1.0
    )
    spec = PodGenerator(config).next_spec(index, Leaderboard(1))
    start = time.perf_counter()
    train_pod(spec, run_dir)
    return time.perf_counter() - start


def plain_ceiling(args: argparse.Namespace, root: Path) -> tuple[float, list[float]]:
    """(one pod alone, [two pods at once]) in plain spawned processes."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    task = (args.dataset, args.pod_steps, args.num_envs, str(root / "plain"))
    cores = (0, 1) if args.pin else (None, None)
    with context.Pool(1) as pool:
        alone = pool.apply(plain_pod, (0, *task, cores[0]))
    with context.Pool(2) as pool:
        pair = pool.starmap(plain_pod, [(0, *task, cores[0]), (1, *task, cores[1])])
    return alone, pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="Comma-separated worker counts (pods per GPU with --gpus).")
    parser.add_argument(
        "--gpus", default=None, help="all or 0,1: a LocalCUDACluster; --workers then counts pods per GPU."
    )
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--algos", default="ppo,sac,td3")
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--pod-steps", type=int, default=16_384)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--group-size", default="1", help="Comma-separated group sizes (TournamentConfig.group_size), each a run."
    )
    parser.add_argument("--plain", action="store_true", help="Also time PPO pods in plain processes (the ceiling).")
    parser.add_argument(
        "--pin", action="store_true", help="With --plain: pin the two plain processes to cores 0 and 1."
    )
    parser.add_argument(
        "--compile",
        nargs="?",
        const="all",
        default="off",
        choices=("off", "validation", "all"),
        help="What pods torch.compile (TournamentConfig.compile): --compile alone is 'all' (networks, env steps and "
        "the validation pass, compiled again in each pod), 'validation' the validation pass only (once per worker "
        "and algorithm).",
    )
    parser.add_argument("--out", default=None, help="Write the rows as JSON here.")
    args = parser.parse_args()
    from market_envs.data import load

    load(args.dataset)  # build the cache once, outside the timings
    rows = []
    with tempfile.TemporaryDirectory(prefix="tournament-scaling-") as tmp:
        for group_size in (int(g) for g in args.group_size.split(",")):
            for workers in (int(w) for w in args.workers.split(",")):
                rows.append(one_run(workers, args, Path(tmp), group_size))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "per_pod"}), flush=True)
                print_per_pod(rows[-1])
        plain = plain_ceiling(args, Path(tmp)) if args.plain else None
    first = {}  # each group size's first row: its efficiency's base
    for row in rows:
        first.setdefault(row["group_size"], row)
    print(
        f"\n{args.pods} pods of {args.pod_steps:,} steps ({args.algos}, {args.num_envs} envs) on {args.dataset}"
        f"{'' if args.compile == 'off' else f', compiled: {args.compile}'}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}\n"
    )
    print("| group size | workers | pods/h | efficiency | wall s | median pod s by algo | load before |")
    print("|---:|---:|---:|---:|---:|---|---:|")
    for row in rows:
        base = first[row["group_size"]]["pods_per_hour"] / first[row["group_size"]]["workers"]
        efficiency = row["pods_per_hour"] / (row["workers"] * base)
        algos = ", ".join(f"{a} {s:.0f}" for a, s in sorted(row["median_pod_s"].items()))
        print(
            f"| {row['group_size']} | {row['workers']} | {row['pods_per_hour']:.1f} | {efficiency:.0%} | "
            f"{row['wall_s']:.0f} | {algos} | {row['load_before']:.2f} |"
        )
    if plain is not None:
        alone, pair = plain
        print(
            f"\nplain processes{' pinned to one core each' if args.pin else ''}, no dask: one PPO pod alone {alone:.1f} s; two at once "
            f"{pair[0]:.1f} s and {pair[1]:.1f} s: the machine's own ceiling for 2 workers is "
            f"{alone / max(pair):.0%} efficiency"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "plain": plain}, indent=1))


if __name__ == "__main__":
    main()
