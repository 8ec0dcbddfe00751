"""Does the deflated Sharpe ratio tell a real edge from the best of many tries? (issue 29)

Per seed and per market, a tournament (``--pods`` pods on ``--workers`` local workers,
the market preset's rules and configs, as `trader tournament --preset market` runs
it), then its report (`trader.backtesting.runs.backtest_run`: the test period, with the
selection judged on validation from the tournament's own trials.parquet). Read off
report.json's ``selection``: the winner's validation Sharpe, its DSR after every
trial the tournament ran, PBO (CSCV) and the SPA p-value against equal-weight; and
the best pod's test-period PSR.

Markets: ``--dataset`` (default synthetic-edge-daily: a planted one-week mean
reversion) with ``--tickers`` tickers, and its edge-free twin (the same recipe
without the ``[synthetic.edge]`` table: the same market, nothing to find).

Targets (issue 29): on the edge-free twin, the winner's DSR above 0.95 in at most
1 of 10 seeds (false discoveries controlled); on the planted edge, in at least 9 of
10 (power); PBO of both, per seed. Both deflations are tabulated: ``dsr`` (V[SR]
from the trials' own Sharpe ratios, as Bailey and López de Prado estimate it) and
``dsr_null`` (against as many zero-Sharpe trials: `trader.stats.null_sharpe_variance`).

    OMP_NUM_THREADS=1 python benchmarks/significance.py                     # 10 seeds x 2 markets x 16 pods
    OMP_NUM_THREADS=1 python benchmarks/significance.py --seeds 1 --pods 4  # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tomllib
from pathlib import Path

import tomli_w

from market_envs.data.recipes import find_recipe
from tournament import TournamentConfig, run
from trader.spec import market_spec
from trader.backtesting.runs import backtest_run
from podracer.presets import apply_preset

ALGOS = ("ppo", "sac", "td3")


def recipes(args: argparse.Namespace, folder: Path) -> dict[str, Path]:
    """``{"edge": path, "null": path}``: the planted-edge recipe with ``--tickers``, and its twin."""
    values = tomllib.loads(Path(find_recipe(args.dataset).path).read_text(encoding="utf-8"))
    values["synthetic"]["n_tickers"] = args.tickers
    out = {}
    for market in ("edge", "null"):
        recipe = json.loads(json.dumps(values))
        recipe["name"] = f"{values['name']}-n{args.tickers}" + ("-null" if market == "null" else "")
        if market == "null":
            recipe["synthetic"].pop("edge", None)
        out[market] = folder / f"{recipe['name']}.toml"
        out[market].write_text(tomli_w.dumps(recipe), encoding="utf-8")
    return out


def one_tournament(recipe: Path, seed: int, args: argparse.Namespace, run_dir: Path) -> dict:
    """A tournament on ``recipe`` and its report's evidence."""
    env_config, algo_configs = apply_preset(
        "market", str(recipe), args.cost, ALGOS, steps=args.pod_steps, num_envs=args.num_envs
    )
    config = TournamentConfig(
        run_dir=str(run_dir),
        env=market_spec(str(recipe), env_config),
        algos=ALGOS,
        algo_configs=algo_configs,
        pod_steps=args.pod_steps,
        num_envs=args.num_envs,
        population=4,
        pods=args.pods,
        time_budget=None,
        workers=args.workers,
        seed=seed,
        backtest=False,
    )
    outcome = run(config)
    result = backtest_run(run_dir)
    selection = result.selection or {}
    winner = selection.get("winner") or {}
    best = result.evidence.get("best", {})
    return {
        "seed": seed,
        "pods": len(outcome.pods),
        "trials": selection.get("n_trials"),
        "winner_validation_sharpe": winner.get("sharpe"),
        "winner_dsr": winner.get("dsr"),
        "winner_dsr_null": winner.get("dsr_null"),
        "pbo": (selection.get("pbo") or {}).get("pbo"),
        "spa_p_equal_weight": (selection.get("spa", {}).get("equal_weight") or {}).get("pvalue_consistent"),
        "best_test_sharpe": best.get("sharpe"),
        "best_test_psr": best.get("psr"),
    }


def table(rows: dict[str, list[dict]], threshold: float) -> str:
    """The Markdown table of RESULTS.md: per market, per seed, and the count above ``threshold``."""
    lines = [
        "| market | seed | pods | trials | winner val. Sharpe | winner DSR | winner DSR vs 0-Sharpe | PBO | SPA p (eq.-w.) | best test Sharpe | best test PSR |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for market, found in rows.items():
        for r in found:
            cells = [
                r[k]
                for k in (
                    "winner_validation_sharpe",
                    "winner_dsr",
                    "winner_dsr_null",
                    "pbo",
                    "spa_p_equal_weight",
                    "best_test_sharpe",
                    "best_test_psr",
                )
            ]
            text = ["n/a" if c is None else f"{c:.2f}" for c in cells]
            lines.append(f"| {market} | {r['seed']} | {r['pods']} | {r['trials']} | " + " | ".join(text) + " |")
    for market, found in rows.items():
        for key in ("winner_dsr", "winner_dsr_null"):
            above = sum(1 for r in found if r[key] is not None and r[key] > threshold)
            lines.append(f"\n{market}: {key} > {threshold} in {above} of {len(found)} seeds")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-daily")
    parser.add_argument("--tickers", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--pods",
        type=int,
        default=16,
        help="pods per tournament (a pod budget, not a wall-clock "
        "one, so that a busy machine changes the run time, not the result)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pod-steps", type=int, default=16_384)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--cost", type=float, default=0.0005)
    parser.add_argument("--markets", default="null,edge", help="which of null, edge")
    parser.add_argument("--out", type=Path, default=None, help="write the per-seed rows as JSON here")
    args = parser.parse_args(argv)
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        paths = recipes(args, Path(scratch))
        for market in args.markets.split(","):
            rows[market] = []
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                found = one_tournament(paths[market], seed, args, Path(scratch) / f"{market}-{seed}")
                rows[market].append(found)
                print(json.dumps({"market": market, **found}), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(table(rows, 0.95))
    return 0


if __name__ == "__main__":
    sys.exit(main())
