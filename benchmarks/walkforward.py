"""Walk-forward on a planted edge and on its edge-free twin (issue 32).

Per market, two walk-forwards over the same folds (`podracer.walkforward.walk_forward`,
the market preset's rules and configs, as `trader walkforward --preset market` runs them):

- the **tournament** (``--pods`` pods of ``--pod-steps`` transitions per fold, pod
  counts, not wall-clock, so a busy machine changes the run time and not the result),
  with **SB3 PPO** trained per fold beside it (``--baselines sb3``, the same budget:
  pods x pod steps);
- **one PPO run** per fold (``--ppo-steps`` transitions).

Read off each ``walkforward.json``: per fold, the test Sharpe of each strategy, the
benchmark's and equal-weight's; stitched, each strategy's Sharpe and its deflated
Sharpe ratio counting every fold's trials (``dsr``: V[SR] from the trials' own
Sharpe ratios; ``dsr_null``: against as many zero-Sharpe trials).

Markets: ``--dataset`` (default synthetic-edge-daily: a planted one-week mean
reversion over 2014-2023) with ``--tickers`` tickers, and its edge-free twin (the
same recipe without the ``[synthetic.edge]`` table). Folds: ``--train 4y
--validation 1y --test 1y`` give five folds testing 2019 .. 2023.

Targets (issue 32): on the planted edge, the tournament's stitched Sharpe above
equal-weight's; on the twin, no strategy significant (DSR < 0.95 for every one).

    OMP_NUM_THREADS=1 python benchmarks/walkforward.py                     # both markets
    OMP_NUM_THREADS=1 python benchmarks/walkforward.py --pods 2 --pod-steps 2048 --ppo-steps 2048 \\
        --tickers 10 --markets edge                                        # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.

from benchmarks.significance import recipes  # the same recipe override and twin
from podracer.walkforward import walk_forward
from trader.folds import FoldSpec
from podracer.presets import apply_preset

ALGOS = ("ppo", "sac", "td3")


def tournament_walk(recipe: Path, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """The tournament walked forward, SB3 PPO per fold beside it: ``walkforward.json``."""
    env_config, algo_configs = apply_preset(
        "market", str(recipe), args.cost, ALGOS, steps=args.pod_steps, num_envs=args.num_envs
    )
    tournament = {
        "algos": list(ALGOS),
        "algo_configs": algo_configs,
        "pod_steps": args.pod_steps,
        "num_envs": args.num_envs,
        "population": 4,
        "pods": args.pods,
        "time_budget": None,
        "workers": args.workers,
    }
    result = walk_forward(
        run_dir,
        str(recipe),
        folds(args),
        "tournament",
        seed=args.seed,
        env_config=env_config,
        tournament=tournament,
        baselines=("sb3",),
        baseline_algos=("ppo",),
        on_progress=lambda line: print(f"  [{recipe.stem} tournament] {line}", flush=True),
    )
    return result.summary


def ppo_walk(recipe: Path, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """One PPO run per fold, walked forward: ``walkforward.json``."""
    env_config, configs = apply_preset(
        "market", str(recipe), args.cost, ["ppo"], steps=args.ppo_steps, num_envs=args.num_envs
    )
    algo_config = configs["ppo"]
    if algo_config.get("anneal_lr") and algo_config.get("total_steps") is None:
        algo_config["total_steps"] = args.ppo_steps  # as `trader walkforward` sets it
    result = walk_forward(
        run_dir,
        str(recipe),
        folds(args),
        "ppo",
        seed=args.seed,
        steps=args.ppo_steps,
        num_envs=args.num_envs,
        eval_every=args.ppo_steps // 4,
        algo_config=algo_config,
        env_config=env_config,
        on_progress=lambda line: print(f"  [{recipe.stem} ppo] {line}", flush=True),
    )
    return result.summary


def folds(args: argparse.Namespace) -> FoldSpec:
    return FoldSpec(args.train, args.validation, args.test)


def rows_of(market: str, tourney: dict[str, Any], ppo: dict[str, Any]) -> dict[str, Any]:
    """The figures of one market, from the two reports (nothing recomputed)."""
    sb3 = next(iter(tourney["folds"][0]["baselines"]), None)
    per_fold = []
    for t, p in zip(tourney["folds"], ppo["folds"], strict=True):
        per_fold.append(
            {
                "fold": t["fold"],
                "test": t["windows"]["test"],
                "winner": t["algo"],
                "tournament": t["test_sharpe"],
                "ppo": p["test_sharpe"],
                "sb3": None if sb3 is None else t["baselines"][sb3]["test_sharpe"],
                "benchmark": t.get("benchmark_test_sharpe"),
                "equal_weight": t["equal_weight_test_sharpe"],
            }
        )
    stitched = {}
    for label, report, name in (("tournament", tourney, "tournament"), ("ppo", ppo, "ppo"), ("sb3", tourney, sb3)):
        if name is None:
            continue
        evidence = report["stitched"]["evidence"][name]
        stitched[label] = {
            "sharpe": report["stitched"]["metrics"][name]["sharpe_ratio"],
            "dsr": evidence.get("dsr"),
            "dsr_null": evidence.get("dsr_null"),
            "n_trials": report["stitched"]["n_trials"].get(name),
        }
    for yardstick in ("benchmark", "equal_weight"):
        if yardstick in tourney["stitched"]["metrics"]:
            stitched[yardstick] = {"sharpe": tourney["stitched"]["metrics"][yardstick]["sharpe_ratio"]}
    return {"market": market, "sb3_name": sb3, "folds": per_fold, "stitched": stitched}


def table(results: list[dict[str, Any]]) -> str:
    """RESULTS.md's tables: test Sharpe per fold, then the stitched record with its DSR."""
    lines = [
        "| market | fold | test window | tournament winner | tournament | PPO | SB3 PPO | benchmark | equal-weight |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for f in r["folds"]:
            cells = [_text(f[k]) for k in ("tournament", "ppo", "sb3", "benchmark", "equal_weight")]
            lines.append(
                f"| {r['market']} | {f['fold']} | {f['test'][0][:10]} .. {f['test'][1][:10]} | {f['winner']} | "
                + " | ".join(cells)
                + " |"
            )
    lines += [
        "",
        "| market | strategy | stitched Sharpe | DSR | DSR vs 0-Sharpe trials | trials |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for name, s in r["stitched"].items():
            lines.append(
                f"| {r['market']} | {name} | {_text(s['sharpe'])} | {_text(s.get('dsr'))} | "
                f"{_text(s.get('dsr_null'))} | {s.get('n_trials', '')} |"
            )
    for r in results:
        s = r["stitched"]
        if r["market"] == "edge":
            beat = s["tournament"]["sharpe"] is not None and s["tournament"]["sharpe"] > s["equal_weight"]["sharpe"]
            lines.append(f"\nedge: tournament stitched Sharpe above equal-weight's: {'yes' if beat else 'NO'}")
        else:
            found = [n for n, v in s.items() if max(v.get("dsr") or 0.0, v.get("dsr_null") or 0.0) >= 0.95]
            lines.append(f"\nnull: strategies with a DSR >= 0.95: {', '.join(found) if found else 'none'}")
    return "\n".join(lines)


def _text(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-daily")
    parser.add_argument("--tickers", type=int, default=30)
    parser.add_argument("--train", default="4y")
    parser.add_argument("--validation", default="1y")
    parser.add_argument("--test", default="1y")
    parser.add_argument("--pods", type=int, default=6, help="tournament pods per fold")
    parser.add_argument("--pod-steps", type=int, default=4096)
    parser.add_argument("--ppo-steps", type=int, default=24576, help="the single PPO run's transitions per fold")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost", type=float, default=0.0005)
    parser.add_argument("--markets", default="edge,null", help="which of edge, null")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the run directories here (default: a temp folder)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        paths = recipes(args, Path(scratch))
        for market in args.markets.split(","):
            began = time.perf_counter()
            tourney = tournament_walk(paths[market], args, root / f"{market}-tournament")
            ppo = ppo_walk(paths[market], args, root / f"{market}-ppo")
            found = rows_of(market, tourney, ppo)
            found["seconds"] = round(time.perf_counter() - began, 1)
            results.append(found)
            print(json.dumps(found), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
