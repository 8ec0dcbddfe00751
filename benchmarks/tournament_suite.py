"""The tournament against the library's defaults and random search, over a suite of markets (issue 78).

A **suite** is a folder of data set recipes (``*.toml``), one market each, and an optional
``suite.toml`` that names a market's costs (a recipe it does not name trades at a flat 5 bp per
side on 1e6):

    [markets.suite-revert-minute-session]      # the recipe's name
    costs = "institutional"                     # a named cost model (market_envs.costs.COST_MODELS)
    capital = 1e7                               # or cost = 0.0005, flat per side

``benchmarks/market_suite/`` is the development suite: edge kinds (momentum, mean reversion,
lead-lag, mixed), horizons from an hour of minute bars to a month of days, 10 to 100 tickers,
minute and daily bars, flat 5 bp and ``institutional`` costs, and two edges that change within the
training window (a kind that turns, a strength that decays).

Per market and seed, three **arms**, each given the same compute (``--minutes`` of wall-clock on
one process: device-seconds = 60 x minutes, one CPU core here):

- **defaults**: one ``trader.train`` run of PPO (``trader train``'s algorithm) with the library's
  config for a market (`podracer.presets.market_algo_config`) under the rules of the preset of the
  market's cost kind (``market`` at flat costs, ``market-costs`` under a cost model), for the whole
  budget;
- **random**: random search, a tournament with ``search="random"`` (every pod fresh, drawn from the
  algorithms' search space, no exploit) from the same configs and rules, on one worker;
- **tournament**: the tournament (``search="pbt"``), the same configs, rules, space and worker.

Nothing an arm sees was chosen with the planted rule: the rules observe the 30-bar return
t-statistic whatever the planted horizon (`podracer.presets.edge_rules` without the edge), as for a
market whose edge nobody knows. The tournaments' settings are `TournamentConfig`'s defaults unless
a flag sets them (``--group-size`` and the rest), so that this benchmark is how they are chosen.

**The reading.** One backtest of the test period holds the three arms and the oracle under costs
(``oracle_costs``: the planted rule traded at the pace that suits the costs, fitted on the training
period). An arm's **score** is its test net Sharpe ratio in units of the oracle's under costs on a
market with a planted edge, and its Sharpe ratio where nothing is planted. A **failure** is a score
below 0.5 (below 0 where nothing is planted). Across the markets with a planted edge, each arm's
IQM with its stratified-bootstrap 95% interval, its CVaR of the lowest 10% and failure rate, the
probability that it improves on the defaults, its performance profile, and the tournament's IQM
difference from the defaults with its interval; the tournament against random search by
non-inferiority at `NON_INFERIORITY_MARGIN`, fixed before the runs (`trader.aggregate`).

    OMP_NUM_THREADS=1 python benchmarks/tournament_suite.py --suite benchmarks/market_suite --seeds 3 \\
        --minutes 2 --out suite.json
    OMP_NUM_THREADS=1 python benchmarks/tournament_suite.py --suite benchmarks/market_suite --oracles

``--out FILE`` is written after every market-seed (atomically) and read back on the next start: a
stopped run resumes at the first market-seed it lacks, with the same flags (checked). The JSON:
``{"markets": [...], "arms": {"defaults": A, "random": A, "tournament": A}, "comparisons": ...,
"cost": ..., "settings": ..., "rows": [...]}``, each ``A`` with ``iqm``, ``iqm_interval`` ([low,
high]), ``cvar10``, ``failure_rate`` and ``probability_of_improvement`` (over the defaults).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.tournament_value import arms_backtest_config, pod_log
from market_envs.costs import cost_model
from market_envs.data import load
from market_envs.data.recipes import find_recipe
from podracer import walkforward
from podracer.presets import PRESET_HOLDING, edge_rules, market_algo_config, rules_at_capital
from podracer.walkforward import WalkForwardConfig
from tournament import TournamentConfig, run
from trader import aggregate, rundir
from trader.backtesting.engine import run_backtest
from trader.backtesting.runs import contents_trials, read_run, run_strategies
from trader.folds import FoldSpec, make_folds
from trader.rundir import config_to_dict
from trader.spec import market_spec
from trader.training import train

ARMS = ("defaults", "random", "tournament")
SUITE_FILE = "suite.toml"
FLAT_COST = 0.0005
"""A market's commission per side where ``suite.toml`` names no costs (5 bp)."""
CAPITAL = 1e6
FAILURE = 0.5
"""A planted market's failure: a test net Sharpe below half the oracle's under costs (issue 78)."""
NON_INFERIORITY_MARGIN = 0.05
"""The tournament is not worse than random search when the lower end of the one-sided 95% interval of
the IQM difference lies above -0.05, in units of the oracle's Sharpe under costs: fixed on 2026-12-02
before any suite run. Why 5% of the oracle: a test period's own sampling error of a Sharpe ratio is
larger (several tenths of the oracle at these lengths), and no user would choose an arm for less."""
DEFAULT_ALGO = "ppo"
"""The defaults arm's algorithm: ``trader train``'s."""


@dataclass(frozen=True)
class Market:
    """One market of a suite: a recipe and the costs it trades under."""

    name: str
    recipe: str
    cost: float
    costs: str | None
    capital: float
    walk_forward: dict[str, Any] | None = None
    """`trader.folds.FoldSpec`'s lengths: the market is judged by a walk-forward over these folds
    (`podracer.walkforward`; every arm's budget shared among them), not on its recipe's test period."""


def read_suite(folder: Path) -> list[Market]:
    """The suite's markets, by recipe file name; ValueError naming what is wrong."""
    if not folder.is_dir():
        raise ValueError(f"--suite {folder}: not a folder")
    sidecar = folder / SUITE_FILE
    table = tomllib.loads(sidecar.read_text()).get("markets", {}) if sidecar.exists() else {}
    recipes = {tomllib.loads(p.read_text()).get("name", p.stem): str(p) for p in folder.glob("*.toml")}
    recipes.pop(SUITE_FILE.removesuffix(".toml"), None)
    shipped = {name: extra["recipe"] for name, extra in table.items() if "recipe" in extra}
    missing = sorted(set(table) - set(recipes) - set(shipped))
    if missing:
        raise ValueError(f"{sidecar}: no recipe in {folder} is named {missing} (a shipped one needs recipe = NAME)")
    markets = [_market(name, recipe, table.get(name, {}), sidecar) for name, recipe in {**recipes, **shipped}.items()]
    markets.sort(key=lambda m: m.name)
    if not markets:
        raise ValueError(f"--suite {folder}: no recipe (*.toml) in it")
    return markets


def _market(name: str, recipe: str, extra: dict[str, Any], sidecar: Path) -> Market:
    """One market from its recipe and its ``suite.toml`` table (checked: unknown keys, cost models, folds)."""
    unknown = sorted(set(extra) - {"cost", "costs", "capital", "recipe", "walk_forward"})
    if unknown:
        raise ValueError(
            f"{sidecar}: market {name}: unknown key(s) {unknown}; expected cost, costs, capital, recipe, walk_forward"
        )
    if "costs" in extra:
        cost_model(extra["costs"])  # an unknown name is refused here, before any run
    if "recipe" in extra:
        find_recipe(extra["recipe"])  # a shipped recipe's name, refused here when unknown
    folds = extra.get("walk_forward")
    if folds is not None:
        FoldSpec(**folds)  # lengths checked before any run
    cost, capital = float(extra.get("cost", FLAT_COST)), float(extra.get("capital", CAPITAL))
    return Market(name, recipe, cost, extra.get("costs"), capital, folds)


def suite_rules(market: Market) -> dict[str, Any]:
    """Every arm's env rules on `market`: the preset of its cost kind, with the planted edge hidden."""
    preset = "market-costs" if market.costs else "market"
    rules = edge_rules(None, market.cost, **PRESET_HOLDING[preset])
    if market.costs:
        rules = cost_model(market.costs).apply(rules)
    return rules_at_capital(config_to_dict(rules), market.capital)


def suite_configs(algos: tuple[str, ...], pod_steps: int, num_envs: int) -> dict[str, dict[str, Any]]:
    """The library's config of each algorithm for a market (the defaults arm's and every pod's start)."""
    return {
        algo: market_algo_config(algo, steps=pod_steps, num_envs=num_envs) for algo in sorted({*algos, DEFAULT_ALGO})
    }


def tournament_config(
    market: Market, search: str, seed: int, folder: Path, args: argparse.Namespace
) -> TournamentConfig:
    """The random search's or the tournament's config on `market`: one worker for ``--minutes``."""
    return TournamentConfig(
        run_dir=str(folder),
        env=market_spec(market.recipe, suite_rules(market)),
        algos=args.algos,
        algo_configs=suite_configs(args.algos, args.pod_steps, args.num_envs),
        pod_steps=args.pod_steps,
        num_envs=args.num_envs,
        pods=None,
        time_budget=60.0 * args.minutes,
        workers=1,
        seed=seed,
        backtest=False,
        search=search,
        **tournament_overrides(args),
    )


TOURNAMENT_FLAGS = ("group_size", "population", "top_fraction", "mutation_scale", "fresh_probability")
"""The `TournamentConfig` fields a flag of the benchmark sets (its default where the flag is not given)."""


def tournament_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The tournament settings the flags give (`TOURNAMENT_FLAGS` not None)."""
    return {key: getattr(args, key) for key in TOURNAMENT_FLAGS if getattr(args, key) is not None}


def walk_arm(arm: str, market: Market, seed: int, folder: Path, args: argparse.Namespace) -> None:
    """Walk one arm forward over `market`'s folds into `folder`, its budget shared evenly among them.
    Fold k of seed s trains with seed ``1000 s + k`` (no two seeds share a fold's seed)."""
    folds = FoldSpec(**market.walk_forward)
    per_fold = 60.0 * args.minutes / len(make_folds(load(market.recipe).timestamps, folds))
    shared = {"dataset": market.recipe, "folds": folds, "seed": 1000 * seed, "env_config": suite_rules(market)}
    if arm == "defaults":
        config = WalkForwardConfig(
            str(folder),
            learner=DEFAULT_ALGO,
            steps=10**12,
            num_envs=args.num_envs,
            eval_every=args.pod_steps,
            algo_config=suite_configs(args.algos, args.pod_steps, args.num_envs)[DEFAULT_ALGO],
            time_budget=per_fold,
            **shared,
        )
    else:
        tournament = tournament_config(market, "random" if arm == "random" else "pbt", seed, folder, args)
        keys = ("algos", "algo_configs", "pod_steps", "num_envs", "pods", "workers", "search", "population")
        keys += ("group_size", "top_fraction", "mutation_scale", "fresh_probability")
        values = {key: getattr(tournament, key) for key in keys} | {"time_budget": per_fold}
        config = WalkForwardConfig(str(folder), learner="tournament", tournament=values, **shared)
    walkforward.run(config)


def train_arm(arm: str, market: Market, seed: int, folder: Path, args: argparse.Namespace) -> None:
    """Train one arm of one market-seed into `folder` (quietly: the benchmark prints one line per arm)."""
    if market.walk_forward:
        walk_arm(arm, market, seed, folder, args)
        return
    if arm == "defaults":
        train(
            DEFAULT_ALGO,
            market.recipe,
            suite_configs(args.algos, args.pod_steps, args.num_envs)[DEFAULT_ALGO],
            folder,
            steps=10**12,
            seed=seed,
            num_envs=args.num_envs,
            env_config=suite_rules(market),
            eval_every=args.pod_steps,
            time_budget=60.0 * args.minutes,
        )
        return
    run(tournament_config(market, "random" if arm == "random" else "pbt", seed, folder, args))


def walked_row(market: Market, seed: int, folders: dict[str, Path], seconds: dict[str, float]) -> dict[str, Any]:
    """A walked market-seed's row: each arm's Sharpe ratio of its stitched test windows (nothing planted)."""
    row: dict[str, Any] = {"market": market.name, "seed": seed, "planted": False, "oracle_sharpe": None}
    for arm, folder in folders.items():
        stitched = rundir.read_json(folder / rundir.WF_REPORT_JSON)["stitched"]
        value = stitched["metrics"][stitched["learner"]]["sharpe_ratio"]
        value = math.nan if value is None else float(value)
        row[arm] = {"sharpe": value, "score": value, "result": "walk-forward", "seconds": seconds[arm]}
        row["yardsticks"] = {  # the same stitched span in every arm's walk
            name: metrics["sharpe_ratio"]
            for name, metrics in stitched["metrics"].items()
            if name != stitched["learner"]
        }
    return row


def score_row(market: Market, seed: int, folders: dict[str, Path], seconds: dict[str, float]) -> dict[str, Any]:
    """One backtest of the test period holding every arm and the oracle under costs: the market-seed's row."""
    if market.walk_forward:
        return walked_row(market, seed, folders, seconds)
    rules = suite_rules(market)
    policies, trials, picked = {}, {}, {}
    for arm, folder in folders.items():
        contents = read_run(folder)
        chosen = "best" if arm == "defaults" else (contents.result or "best")
        found = run_strategies(contents, "cpu")
        if chosen in found:
            policies[arm], trials[arm], picked[arm] = found[chosen], contents_trials(contents)[chosen], chosen
    data = load(market.recipe)
    planted = bool(data.meta.get("edge"))
    result = run_backtest(
        market.recipe,
        policies,
        baselines=["oracle_costs"] if planted else ["equal_weight"],
        period="test",
        config=arms_backtest_config(rules),
        trials=trials,
    )
    sharpe = result.metrics["sharpe_ratio"]
    oracle = float(sharpe["oracle_costs"]) if planted else None
    row: dict[str, Any] = {"market": market.name, "seed": seed, "planted": planted, "oracle_sharpe": oracle}
    for arm in ARMS:
        value = float(sharpe[arm]) if arm in policies else math.nan  # no finished pod: the arm has nothing
        row[arm] = {
            "sharpe": value,
            "score": value / oracle if planted and not math.isnan(value) else value,
            "result": picked.get(arm, "none"),
            "seconds": seconds[arm],
        }
        if arm != "defaults":
            row[arm]["pods"] = pod_log(folders[arm])[0]
    return row


def run_market_seed(market: Market, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train the three arms of one market-seed under `root`, then score them: its row."""
    folders, seconds = {}, {}
    for arm in ARMS:
        folders[arm] = root / f"{market.name}-{arm}-{seed}"
        start = time.perf_counter()
        train_arm(arm, market, seed, folders[arm], args)
        seconds[arm] = time.perf_counter() - start
        print(f"  {market.name} seed {seed}: {arm} trained in {seconds[arm]:.0f} s", flush=True)
    return score_row(market, seed, folders, seconds)


def scores(rows: list[dict], markets: list[str], arm: str) -> np.ndarray:
    """The arm's scores as a matrix [seeds, markets] (each market's seeds in row order); a missing
    score (an arm without a finished pod) is a failure at the worst score of its market."""
    columns = []
    for name in markets:
        held = [row for row in rows if row["market"] == name]
        worst = min(min(r[a]["score"] for a in ARMS if not math.isnan(r[a]["score"])) for r in held)
        columns.append([worst if math.isnan(r[arm]["score"]) else r[arm]["score"] for r in held])
    if len({len(c) for c in columns}) != 1:
        raise ValueError("every market needs the same number of seeds to be pooled")
    return np.array(columns).T


def read_out(rows: list[dict], markets: list[str], threshold: float = FAILURE) -> dict[str, Any]:
    """The suite's reading of `rows` over `markets` (those with a planted edge): per arm, the aggregates."""
    matrices = {arm: scores(rows, markets, arm) for arm in ARMS}
    arms = {}
    for arm, matrix in matrices.items():
        interval = aggregate.stratified_interval(aggregate.iqm, matrix)
        arms[arm] = {
            "iqm": interval.value,
            "iqm_interval": [interval.low, interval.high],
            "cvar10": aggregate.cvar(matrix, 0.1),
            "failure_rate": aggregate.failure_rate(matrix, threshold),
            "probability_of_improvement": aggregate.probability_of_improvement(matrix, matrices["defaults"]),
            "profile": {
                f"{tau:g}": float(share)
                for tau, share in zip(PROFILE_TAUS, aggregate.score_distribution(matrix, PROFILE_TAUS), strict=True)
            },
        }
    difference = aggregate.difference_interval(aggregate.iqm, matrices["tournament"], matrices["defaults"])
    not_worse, against_random = aggregate.non_inferior(
        matrices["tournament"], matrices["random"], NON_INFERIORITY_MARGIN
    )
    comparisons = {
        "tournament_minus_defaults_iqm": difference.as_dict(),
        "tournament_not_worse_than_random": {
            "margin": NON_INFERIORITY_MARGIN,
            "verdict": bool(not_worse),
            "difference_iqm_90": against_random.as_dict(),
        },
    }
    return {"arms": arms, "comparisons": comparisons}


PROFILE_TAUS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The performance profile's thresholds, in units of the oracle's Sharpe under costs."""


def report(out: dict[str, Any]) -> str:
    """The per-market table and the suite's reading, in Markdown."""
    lines = ["| market | seed | oracle | " + " | ".join(f"{arm} (score)" for arm in ARMS) + " |"]
    lines.append("|---|---:|---:|" + "---:|" * len(ARMS))
    for row in out["rows"]:
        oracle = "-" if row["oracle_sharpe"] is None else f"{row['oracle_sharpe']:.2f}"
        cells = [f"{row[a]['sharpe']:.2f} ({row[a]['score']:.2f})" for a in ARMS]
        lines.append(f"| {row['market']} | {row['seed']} | {oracle} | " + " | ".join(cells) + " |")
    if "arms" in out:
        lines += ["", "| arm | IQM | 95% interval | CVaR 10% | failure rate | P(improves on defaults) |"]
        lines.append("|---|---:|---|---:|---:|---:|")
        for arm, a in out["arms"].items():
            low, high = a["iqm_interval"]
            lines.append(
                f"| {arm} | {a['iqm']:.2f} | [{low:.2f}, {high:.2f}] | {a['cvar10']:.2f} | "
                f"{a['failure_rate']:.0%} | {a['probability_of_improvement']:.2f} |"
            )
        c = out["comparisons"]
        d = c["tournament_minus_defaults_iqm"]
        r = c["tournament_not_worse_than_random"]
        lines.append(
            f"\nIQM(tournament) - IQM(defaults) = {d['value']:.3f} [{d['low']:.3f}, {d['high']:.3f}]; "
            f"tournament not worse than random search by {r['margin']:g}: {'yes' if r['verdict'] else 'no'} "
            f"(90% interval of the difference [{r['difference_iqm_90']['low']:.3f}, "
            f"{r['difference_iqm_90']['high']:.3f}])"
        )
    cost = out["cost"]
    lines.append(
        f"\nCost: {cost['device_seconds']:.0f} device-seconds of training ({cost['train_seconds']:.0f} s wall-clock), "
        f"{cost['wall_seconds']:.0f} s in all on {cost['machine']}; per market-seed "
        f"{cost['per_market_seed_seconds']:.0f} s. {cost['gpu']}"
    )
    return "\n".join(lines)


def settings(args: argparse.Namespace, markets: list[Market]) -> dict[str, Any]:
    """What a resumed run must share with the rows it finds (every flag but the seeds and the out file)."""
    chosen = {
        k: v for k, v in vars(args).items() if k not in ("seeds", "first_seed", "out", "oracles", "markets", "merge")
    }
    return {**chosen, "suite": str(args.suite), "algos": list(args.algos), "markets": [asdict(m) for m in markets]}


def write_atomically(path: Path, payload: dict[str, Any]) -> None:
    """`payload` as JSON at `path`, replaced whole (a crash leaves the previous file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload, indent=1))
    os.replace(partial, path)


def summarise(rows: list[dict], markets: list[Market], chosen: dict[str, Any], wall: float) -> dict[str, Any]:
    """The JSON of the suite: the rows, the per-market table, the reading over planted markets, the cost."""
    names = [m.name for m in markets if any(r["market"] == m.name for r in rows)]
    planted = [n for n in names if next(r for r in rows if r["market"] == n)["planted"]]
    train_seconds = sum(row[arm]["seconds"] for row in rows for arm in ARMS)
    out: dict[str, Any] = {
        "markets": [
            {
                "name": name,
                "planted": name in planted,
                "seeds": [r["seed"] for r in rows if r["market"] == name],
                **{arm: [r[arm]["score"] for r in rows if r["market"] == name] for arm in ARMS},
                "failure_rate": {
                    arm: float(
                        np.mean(
                            [
                                r[arm]["score"] < (FAILURE if name in planted else 0.0)
                                for r in rows
                                if r["market"] == name
                            ]
                        )
                    )
                    for arm in ARMS
                },
            }
            for name in names
        ],
        "settings": chosen,
        "rows": rows,
        "cost": {
            "train_seconds": train_seconds,
            "device_seconds": train_seconds,  # every arm trains on one process, one core
            "wall_seconds": wall,
            "per_market_seed_seconds": wall / max(1, len(rows)),
            "machine": f"{os.cpu_count()} CPU cores, no GPU",
            "gpu": "On a GPU: not yet run (benchmarks/gpu.sh does not run this benchmark).",
        },
    }
    seeds_per_market = {len(m["seeds"]) for m in out["markets"] if m["planted"]}
    if planted and len(seeds_per_market) == 1:
        out.update(read_out(rows, planted))
    return out


def merged(paths: list[Path], markets: list[Market]) -> dict[str, Any]:
    """One suite's JSON from the --out files of runs on parts of it (ValueError where their flags differ,
    or a market-seed is in two)."""
    found = [json.loads(path.read_text()) for path in paths]
    shared = [{k: v for k, v in f["settings"].items() if k != "markets"} for f in found]
    if any(s != shared[0] for s in shared):
        raise ValueError(f"--merge: {', '.join(map(str, paths))} are runs of different flags")
    rows = [row for f in found for row in f["rows"]]
    keys = [(row["market"], row["seed"]) for row in rows]
    if len(set(keys)) != len(keys):
        raise ValueError("--merge: a market-seed is in two of the files")
    order = {m.name: k for k, m in enumerate(markets)}
    rows.sort(key=lambda row: (row["seed"], order.get(row["market"], len(order))))
    held = [m for m in markets if any(row["market"] == m.name for row in rows)]
    wall = sum(f["cost"]["wall_seconds"] for f in found)
    return summarise(rows, held, {**shared[0], "markets": [asdict(m) for m in held]}, wall)


def oracles(markets: list[Market]) -> None:
    """Each market's oracle under costs on validation and test, and how long its data take to build."""
    for market in markets:
        start = time.perf_counter()
        data = load(market.recipe)
        built = time.perf_counter() - start
        config = arms_backtest_config(suite_rules(market))
        if not data.meta.get("edge"):
            print(f"{market.name}: nothing planted; built in {built:.0f} s", flush=True)
            continue
        found = []
        for period in ("validation", "test"):
            result = run_backtest(market.recipe, {}, baselines=["oracle", "oracle_costs"], period=period, config=config)
            found.append(
                f"{period} oracle {result.metrics.loc['oracle', 'sharpe_ratio']:.2f}, "
                f"under costs {result.metrics.loc['oracle_costs', 'sharpe_ratio']:.2f}"
            )
        print(
            f"{market.name} ({data.num_tickers} tickers, {data.num_bars} bars, {market.costs or market.cost}): "
            f"{'; '.join(found)}; built in {built:.0f} s, {time.perf_counter() - start:.0f} s in all",
            flush=True,
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, default=Path(__file__).parent / "market_suite")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=2.0, help="wall-clock of each arm, per market and seed")
    p.add_argument("--out", type=Path, default=None, help="the suite's JSON, written after every market-seed; resumed")
    p.add_argument("--markets", type=lambda s: tuple(s.split(",")), default=None, help="only these markets (names)")
    p.add_argument("--algos", type=lambda s: tuple(s.split(",")), default=TournamentConfig.algos)
    p.add_argument("--pod-steps", type=int, default=TournamentConfig.pod_steps)
    p.add_argument("--num-envs", type=int, default=TournamentConfig.num_envs)
    p.add_argument("--group-size", type=int, default=None, help="default: TournamentConfig's")
    p.add_argument("--population", type=int, default=None, help="leaderboard size; default: TournamentConfig's")
    p.add_argument("--top-fraction", type=float, default=None)
    p.add_argument("--mutation-scale", type=float, default=None)
    p.add_argument("--fresh-probability", type=float, default=None)
    p.add_argument("--oracles", action="store_true", help="train nothing: each market's oracle and build time")
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="train nothing: read the --out files of runs of the same flags on parts of the suite (other --markets "
        "or seeds, run side by side) as one, and write it to --out",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        markets = read_suite(args.suite)
    except (ValueError, tomllib.TOMLDecodeError) as err:
        p.error(str(err))
    if args.markets:
        unknown = sorted(set(args.markets) - {m.name for m in markets})
        if unknown:
            p.error(f"--markets: not in the suite: {unknown}")
        markets = [m for m in markets if m.name in args.markets]
    if args.oracles and (args.out or args.merge):
        p.error("--oracles trains and writes nothing: it takes neither --out nor --merge")
    if args.merge and args.out and args.out.exists():
        p.error(f"--out {args.out} exists: --merge writes a new file (give a new path)")
    if args.oracles:
        oracles(markets)
        return 0
    if args.merge:
        try:
            out = merged(args.merge, markets)
        except ValueError as err:
            p.error(str(err))
        if args.out:
            write_atomically(args.out, out)
        print(report(out))
        return 0
    if args.seeds < 1 or not args.minutes > 0:
        p.error(f"--seeds must be >= 1 and --minutes > 0; got {args.seeds} and {args.minutes}")
    chosen = settings(args, markets)
    rows: list[dict] = []
    before = 0.0  # the wall-clock of the sittings before this one
    if args.out and args.out.exists():
        found = json.loads(args.out.read_text())
        if found.get("settings") != json.loads(json.dumps(chosen)):
            p.error(f"--out {args.out} holds a run of other settings: give a new path, or the same flags")
        rows, before = found["rows"], found["cost"]["wall_seconds"]
    done = {(row["market"], row["seed"]) for row in rows}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tournament-suite-") as root:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for market in markets:
                if (market.name, seed) in done:
                    continue
                rows.append(run_market_seed(market, seed, args, Path(root)))
                print(json.dumps(rows[-1]), flush=True)
                if args.out:
                    write_atomically(args.out, summarise(rows, markets, chosen, before + time.perf_counter() - start))
    out = summarise(rows, markets, chosen, before + time.perf_counter() - start)
    if args.out:
        write_atomically(args.out, out)
    print()
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
