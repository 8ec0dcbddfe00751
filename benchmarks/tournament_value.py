"""Tournament value: does a tournament beat one PPO run of the same wall-clock? (issue 10)

Per seed: a tournament of ``--minutes`` on ``--workers`` local workers, and one
`trader.train` PPO run of the same wall-clock (``time_budget``) in one process, with
the same PPO config, data and trading rules. Then the tournament's best pod, its
top-k ensemble and the single run are backtested on the **test** period by
`trader.backtest` (the same engine, rules and costs). Terms: **equal wall-clock**;
the tournament uses every worker it is given (2 on this machine), the single run one
process, as a user would run either.

Market: the planted-edge recipe (``--dataset``) with ``--tickers`` and
``--edge-strength`` overrides written to a recipe file, because at the default
strength the edge cannot be identified in the training period (issue 11, and
benchmarks/edge_identifiability.py). Rules and PPO config are those of
benchmarks/learning_check.py (weights with shorting, cost ``--cost``, agents observe
the 30-bar return t-statistic, discount 0).

Target (issue 10): the tournament's median test Sharpe above the single run's, and
the ensemble's spread (interquartile range over seeds) narrower than the single run's.
With the evidence beside it (issue 29): each side's test-period PSR and DSR (with its
own trial count: every validation pass of every pod, or of the single run), and each
selection's winner on validation with its DSRs and PBO.

    OMP_NUM_THREADS=1 python benchmarks/tournament_value.py              # 5 seeds x 2 x 3 min, ~45 min
    python benchmarks/tournament_value.py --seeds 1 --minutes 1          # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np
import tomli_w
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_check import Budget, algo_overrides, env_rules  # noqa: E402

from market_envs.data.recipes import find_recipe  # noqa: E402
from tournament import TournamentConfig, run  # noqa: E402
from trader.rundir import config_to_dict  # noqa: E402
from trader.backtest import BacktestConfig, run_backtest  # noqa: E402
from trader.backtest.runs import backtest_config, backtest_run, read_run  # noqa: E402
from trader.train import train  # noqa: E402


def edge_recipe(args: argparse.Namespace, folder: Path) -> Path:
    """The planted-edge recipe with ``--tickers`` and ``--edge-strength``, as a file."""
    source = find_recipe(args.dataset)
    values = tomllib.loads(Path(source.path).read_text(encoding="utf-8"))
    values["name"] = f"{values['name']}-n{args.tickers}-s{args.edge_strength:g}"
    values["synthetic"]["n_tickers"] = args.tickers
    values["synthetic"]["edge"]["strength_sharpe"] = args.edge_strength
    path = folder / f"{values['name']}.toml"
    path.write_text(tomli_w.dumps(values), encoding="utf-8")
    return path


def ppo_config(args: argparse.Namespace) -> dict:
    budget = Budget(steps={"ppo": args.pod_steps}, num_envs={"ppo": args.num_envs})
    return dict(algo_overrides("ppo", budget, args.network))


def test_sharpes(recipe: Path, policies: dict, rules) -> dict[str, float]:
    config = BacktestConfig(buy_cost=rules.buy_cost, sell_cost=rules.sell_cost, policy_env=rules,
                            record_positions="day", tear_sheet=False)  # fmt: skip
    result = run_backtest(str(recipe), policies, baselines=["equal_weight"], period="test", config=config)
    return {name: float(result.metrics.loc[name, "sharpe_ratio"]) for name in result.metrics.index}


def one_seed(seed: int, recipe: Path, args: argparse.Namespace, root: Path) -> dict:
    rules = env_rules(args.cost, args.episode_length)
    rules_dict = config_to_dict(rules)
    seconds = 60.0 * args.minutes
    config = TournamentConfig(
        run_dir=str(root / f"tournament-{seed}"), env=str(recipe), algos=tuple(args.algos.split(",")),
        algo_configs={"ppo": ppo_config(args)}, env_config=rules_dict, population=args.population,
        pod_steps=args.pod_steps, num_envs=args.num_envs, pods=None, time_budget=seconds,
        workers=args.workers, seed=seed, ensemble_k=args.ensemble_k, backtest=True,
        mutation_scale=args.mutation_scale, fresh_probability=args.fresh_probability,
        in_flight_per_thread=args.in_flight_per_thread, compile=args.compile,
    )  # fmt: skip
    result = run(config)
    tournament = {name: float(result.backtest.metrics.loc[name, "sharpe_ratio"]) for name in ("best", "ensemble")}
    evidence = {name: evidence_of(result.backtest, name) for name in ("best", "ensemble")}
    pods = len(result.pods)
    single_dir = root / f"single-{seed}"
    if args.compile:  # compile anew each seed, as each tournament's new workers do (on-disk caches stay)
        torch.compiler.reset()
    start = time.perf_counter()
    single = train("ppo", str(recipe), ppo_config(args), single_dir, steps=10**12, seed=seed,
                   num_envs=args.num_envs, env_config=rules_dict, eval_every=args.pod_steps,
                   time_budget=seconds, compile=args.compile)  # fmt: skip
    single_seconds = time.perf_counter() - start
    scores = test_sharpes(recipe, {"single": single_dir / "checkpoints" / "best"}, rules)
    single_report = backtest_run(single_dir, dataset=str(recipe), strategies=["best"], baselines=[],
                                 config=backtest_config(read_run(single_dir), tear_sheet=False))  # fmt: skip
    evidence["single"] = evidence_of(single_report, "best")
    row = {"seed": seed, **tournament, "single": scores["single"], "equal_weight": scores["equal_weight"],
           "evidence": evidence,
           "pods": pods, "tournament_s": result.seconds, "single_s": single_seconds, "single_steps": single.steps,
           "best_validation": result.leaderboard.best().score, "single_validation": single.best_score}  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


def evidence_of(result, name: str) -> dict:
    """The test-period PSR and DSRs of strategy ``name``, and its run's selection on
    validation (the winner's DSRs after every trial, PBO), from the backtest's evidence."""
    row = result.evidence.get(name, {})
    selection = result.selection or {}
    winner = selection.get("winner") or {}
    return {"psr": row.get("psr"), "dsr": row.get("dsr"), "dsr_null": row.get("dsr_null"), "trials": row.get("n_trials"),
            "winner_dsr": winner.get("dsr"), "winner_dsr_null": winner.get("dsr_null"),
            "pbo": (selection.get("pbo") or {}).get("pbo")}  # fmt: skip


def evidence_table(rows: list[dict]) -> str:
    """Per strategy, per seed: trials, test PSR, test DSR and DSR against zero-Sharpe
    trials, the selection winner's validation DSRs, and PBO (n/a where undefined)."""
    keys = ("trials", "psr", "dsr", "dsr_null", "winner_dsr", "winner_dsr_null", "pbo")
    lines = ["| strategy | seed | " + " | ".join(keys) + " |", "|---|---:|" + "---:|" * len(keys)]
    for name in ("best", "ensemble", "single"):
        for row in rows:
            cells = [row["evidence"][name].get(k) for k in keys]
            text = ["n/a" if c is None else (str(c) if isinstance(c, int) else f"{c:.2f}") for c in cells]
            lines.append(f"| {name} | {row['seed']} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def iqr(values: list[float]) -> float:
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--tickers", type=int, default=30)
    parser.add_argument("--edge-strength", type=float, default=100.0)
    parser.add_argument("--cost", type=float, default=0.0)
    parser.add_argument("--episode-length", type=int, default=390)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=3.0, help="Wall-clock of each side, per seed.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--algos", default="ppo", help="The tournament's pool (the single run is PPO).")
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--pod-steps", type=int, default=262_144)
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--ensemble-k", type=int, default=3)
    parser.add_argument("--in-flight-per-thread", type=int, default=TournamentConfig.in_flight_per_thread)
    parser.add_argument("--network", default="mlp", choices=("mlp", "per_stock"), help="PPO's networks, both sides")
    parser.add_argument("--mutation-scale", type=float, default=TournamentConfig.mutation_scale)
    parser.add_argument("--fresh-probability", type=float, default=TournamentConfig.fresh_probability)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile both sides (env steps, validation included; benchmarks/validation_pass.py)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tournament-value-") as tmp:
        recipe = edge_recipe(args, Path(tmp))
        from market_envs.data import load

        load(str(recipe))  # build once, outside the timings
        for seed in range(args.seeds):
            rows.append(one_seed(seed, recipe, args, Path(tmp)))
    print(f"\n{recipe.stem}, cost {args.cost}, {args.minutes} min per side per seed{', compiled' if args.compile else ''}, tournament "
          f"{args.algos} on {args.workers} workers, pods of {args.pod_steps:,} x {args.num_envs} envs; "
          f"load {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    walls = [f"{r['tournament_s']:.0f}/{r['single_s']:.0f}" for r in rows]
    print(f"training wall-clock per seed, tournament/single (s): {', '.join(walls)}\n")
    print("| strategy | test Sharpe median | IQR over seeds | per seed |")
    print("|---|---:|---:|---|")
    for name in ("best", "ensemble", "single", "equal_weight"):
        values = [row[name] for row in rows]
        print(f"| {name} | {statistics.median(values):.2f} | {iqr(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    print(f"\npods per tournament: {[r['pods'] for r in rows]}; single-run steps: {[r['single_steps'] for r in rows]}")
    print("\nEvidence (test period: PSR, DSR with the strategy's trials; the selection on validation: the "
          "winner's DSRs, PBO; best and ensemble share the tournament's trials, the single run has its own "
          "validation passes):\n")  # fmt: skip
    print(evidence_table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
