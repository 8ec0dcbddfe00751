"""Learning under costs (issue 30): does an agent trained under impact and a volume cap trade smaller, and net more?

PPO is trained through `trader.train` on the training period of
``synthetic-edge-minute`` (a planted cross-sectional mean reversion, with volume),
from ``--seeds`` seeds, twice per seed:

- **costly**: under `COSTLY`, a fixed half-spread of `HALF_SPREAD_BPS` bp, square-root
  market impact with eta = `market_envs.costs.SQRT_LAW_ETA` over `IMPACT_DAYS` days of
  past bars, and a participation cap of `PARTICIPATION` of each bar's volume (no
  commission); the half-spread is fixed because the Abdi-Ranaldo estimate of the
  synthetic bars' high and low is about 0 (they carry no bid-ask bounce), and small
  (the planted minute edge, rebalanced every bar, loses its whole Sharpe at about 1 bp
  per side: benchmarks/RESULTS.md), in the range of large caps' one-cent spreads;
- **flat**: at a flat rate of `HALF_SPREAD_BPS` bp per side: the same fixed cost,
  without impact or a cap, the cost model every trade paid before issue 30.

Both are then backtested by `trader.backtest.run_backtest` on the **validation**
period under `COSTLY` (the flat-trained agents pay what they did not train for). The
capital is `CAPITAL`, large enough that impact and the cap bind for a book that
rebalances in full (the panel trades a median of some 4,400 shares, about USD 470k,
per ticker and minute). The rules are otherwise those of the learning check
(`trader.presets.edge_rules`: target weights, dollar-neutral, gross exposure at
most 1, the 30-bar return t-statistic observed; `trader.presets.market_algo_config`),
with rewards in basis points of the capital.

Per seed and variant the table gives the traded value (per day, as a multiple of the
capital), the net Sharpe ratio and net return of the validation period, the costs by
term (bp of the capital) and the unfilled share of the orders (the value the cap left
unfilled over the value ordered). The costs by term and the unfilled share come from
a replay of the same policies through the backtest's env (`StockTradingVecEnv`, whose
``info`` carries them), which must end at the backtest's portfolio values. The claim
holds on a seed when its costly-trained agent trades less and nets more (Sharpe and
return) than its flat-trained one.

    OMP_NUM_THREADS=1 python benchmarks/learning_costs.py                 # ~7 min of one core
    OMP_NUM_THREADS=1 python benchmarks/learning_costs.py --quick         # a smoke run, ~2 min
    OMP_NUM_THREADS=1 python benchmarks/learning_costs.py --steps 327680 --init-log-std -3 --runs RUNS

``--init-log-std`` sets both variants' initial exploration noise (RESULTS "Learning under
costs", third run, says why it decides the outcome); ``--runs`` keeps the trained agents
and reuses them on the next run into the same folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from market_envs.costs import SQRT_LAW_ETA, CostModel
from market_envs.data import MarketData, load
from market_envs.env import EnvConfig, StockTradingVecEnv
from trader.agents import Agent
from trader.agents.checkpoint import load_agent
from trader.backtest import BacktestConfig, run_backtest
from trader.presets import REWARD_SCALE, edge_rules, market_algo_config
from trader.train import train

DATASET = "synthetic-edge-minute"
CAPITAL = 10_000_000.0
HALF_SPREAD_BPS = 0.5
IMPACT_DAYS = 5
PARTICIPATION = 0.05
COSTLY = CostModel(
    spread_model="fixed", spread_bps=HALF_SPREAD_BPS,
    impact_eta=SQRT_LAW_ETA, impact_window_days=IMPACT_DAYS,
    participation=PARTICIPATION,
)  # fmt: skip
FLAT_RATE = HALF_SPREAD_BPS * 1e-4
"""The flat rate per side: the costly model's half-spread, without its size-dependent terms."""
STEPS = 163_840
NUM_ENVS = 256
TERMS = ("cost_commission", "cost_spread", "cost_impact", "cost_borrow")


def rules(data: MarketData, costly: bool) -> EnvConfig:
    """Training rules of one variant (the backtest charges `COSTLY` to both)."""
    base = replace(edge_rules(dict(data.meta["edge"])), initial_cash=CAPITAL,
                   reward_scale=REWARD_SCALE * 1e6 / CAPITAL)  # fmt: skip  (basis points of the capital)
    if costly:
        return replace(base, buy_cost=0.0, sell_cost=0.0, costs=COSTLY)
    return replace(base, buy_cost=FLAT_RATE, sell_cost=FLAT_RATE, costs=CostModel())


def train_ppo(train_data: MarketData, env_rules: EnvConfig, steps: int, num_envs: int, seed: int,
              run_dir: Path, init_log_std: float | None = None) -> tuple[Agent, float]:  # fmt: skip
    """PPO trained by `trader.train` on a built env of the training period (no validation pass);
    `init_log_std` replaces the preset's initial exploration noise (both variants get the same).
    An agent already trained into `run_dir` (its final checkpoint) is loaded instead."""
    final = run_dir / "checkpoints" / "final"
    if final.with_suffix(".json").is_file():  # trained by an earlier run into the same --runs folder
        return load_agent(final), 0.0
    torch.manual_seed(seed)  # the env's start generator is drawn from the global RNG
    env = StockTradingVecEnv(train_data, num_envs, "cpu", env_rules)
    config = market_algo_config("ppo", steps=steps, num_envs=num_envs)
    if init_log_std is not None:
        config["init_log_std"] = init_log_std
    result = train("ppo", env, config, run_dir, steps=steps, seed=seed, eval_every=0)
    return result.agent, result.wall_time


def replay_costs(data: MarketData, agents: dict[str, Agent], env_rules: EnvConfig) -> dict[str, dict[str, float]]:
    """Each policy's costs by term, ordered, unfilled and traded value, and final value, summed
    over `data` by one deterministic pass through the env (one sub-environment per policy)."""
    names = list(agents)
    env = StockTradingVecEnv(data, len(names), "cpu", env_rules)
    obs, _ = env.reset()
    keys = (*TERMS, "ordered_value", "unfilled_value")
    totals = {key: torch.zeros(len(names), dtype=torch.float64) for key in (*keys, "traded")}
    value = env.value.clone()
    with torch.no_grad():
        for _ in range(data.num_bars - 1):
            actions = torch.cat([agents[name].act(obs[i : i + 1], deterministic=True) for i, name in enumerate(names)])
            obs, _, _, _, info = env.step(actions.float())
            for key in keys:
                totals[key] += info[key]
            totals["traded"] += info["turnover"] * value.abs()
            value = info["value"]
    out = {name: {key: float(totals[key][i]) for key in totals} for i, name in enumerate(names)}
    for i, name in enumerate(names):
        out[name]["final_value"] = float(value[i])
    return out


def seed_rows(validation: MarketData, agents: dict[str, Agent], costly_rules: EnvConfig) -> dict[str, dict[str, float]]:
    """Backtest every agent under `COSTLY`; its metrics with the replay's cost breakdown."""
    config = BacktestConfig(initial_cash=CAPITAL, buy_cost=0.0, sell_cost=0.0, costs=COSTLY, cost_model="costly",
                            policy_env=costly_rules, record_positions="day", tear_sheet=False)  # fmt: skip
    result = run_backtest(validation, agents, baselines=[], config=config)
    replay = replay_costs(validation, agents, config.env_config(costly_rules))
    days = result.period.days
    rows = {}
    for name in agents:
        series, parts = result.series[name], replay[name]
        final = float(series["value"].iloc[-1])
        if abs(parts["final_value"] - final) > 1e-9 * abs(final) + 1e-6:
            raise SystemExit(f"{name}: the replay ends at {parts['final_value']:.6f}, the backtest at {final:.6f}")
        rows[name] = {
            "traded_per_day": float(series["traded_value"].sum()) / CAPITAL / days,
            "sharpe": float(result.metrics.loc[name, "sharpe_ratio"]),
            "net_return": float(result.metrics.loc[name, "cum_returns_final"]),
            **{key.removeprefix("cost_") + "_bp": parts[key] / CAPITAL * 1e4 for key in TERMS},
            "costs_bp": float(series["costs"].sum()) / CAPITAL * 1e4,
            "unfilled_share": parts["unfilled_value"] / parts["ordered_value"] if parts["ordered_value"] > 0 else 0.0,
        }
    if not any(row["costs_bp"] > 0 for row in rows.values()):
        raise SystemExit("the backtest charged no costs: it did not run under the costly model")
    return rows


COLUMNS = (("traded_per_day", "traded / day (x capital)", "{:.2f}"), ("sharpe", "net Sharpe", "{:.2f}"),
           ("net_return", "net return", "{:+.3%}"), ("commission_bp", "commission bp", "{:.1f}"),
           ("spread_bp", "spread bp", "{:.1f}"), ("impact_bp", "impact bp", "{:.1f}"),
           ("borrow_bp", "borrow bp", "{:.1f}"), ("costs_bp", "all costs bp", "{:.1f}"),
           ("unfilled_share", "unfilled share", "{:.1%}"))  # fmt: skip


def table(results: dict[int, dict[str, dict[str, float]]]) -> tuple[str, list[str]]:
    """The markdown table (per seed, then medians) and one verdict line per seed."""
    lines = ["| seed | trained under | " + " | ".join(label for _, label, _ in COLUMNS) + " |",
             "|---|---|" + "---:|" * len(COLUMNS)]  # fmt: skip
    verdicts = []
    for seed, rows in results.items():
        for variant in ("costly", "flat"):
            row = rows[variant]
            lines.append(f"| {seed} | {variant} | " + " | ".join(fmt.format(row[k]) for k, _, fmt in COLUMNS) + " |")
        costly, flat = rows["costly"], rows["flat"]
        smaller = costly["traded_per_day"] < flat["traded_per_day"]
        nets_more = costly["sharpe"] > flat["sharpe"] and costly["net_return"] > flat["net_return"]
        verdicts.append(f"seed {seed}: trades smaller {'yes' if smaller else 'NO'} "
                        f"({costly['traded_per_day']:.2f} vs {flat['traded_per_day']:.2f} x capital a day); nets more "
                        f"{'yes' if nets_more else 'NO'} (Sharpe {costly['sharpe']:.2f} vs {flat['sharpe']:.2f}, "
                        f"return {costly['net_return']:+.3%} vs {flat['net_return']:+.3%})")  # fmt: skip
    for variant in ("costly", "flat"):
        medians = [fmt.format(statistics.median(r[variant][k] for r in results.values())) for k, _, fmt in COLUMNS]
        lines.append(f"| median | {variant} | " + " | ".join(medians) + " |")
    return "\n".join(lines), verdicts


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--steps", type=int, default=STEPS, help="PPO env transitions per agent")
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="PPO training sub-environments")
    parser.add_argument("--init-log-std", type=float, default=None,
                        help="PPO's initial log standard deviation of the actions (default: the preset's)")
    parser.add_argument("--days", type=int, default=None,
                        help="backtest only the first DAYS sessions of the validation period")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 seeds, 8,192 steps, 2 validation days")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--runs", type=Path, default=None,
                        help="keep each agent's training run here (VARIANT-SEED); one already there is reused, not retrained")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.num_envs, args.days = 2, 8_192, 64, 2
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    full = load(DATASET)
    train_data, validation = full.period("train"), full.period("validation")
    dates = validation.timestamps.normalize().unique()
    if args.days is not None and args.days < len(dates):
        validation = validation.slice(None, dates[args.days])  # the first DAYS sessions (training statistics kept)
    costly_rules = rules(full, costly=True)
    header = (f"learning under costs: {DATASET}, train {train_data.num_bars} bars, validation {validation.num_bars} bars; "
              f"PPO {args.steps} steps x {args.num_envs} envs per agent, initial log-std "
              f"{args.init_log_std if args.init_log_std is not None else market_algo_config('ppo', steps=1, num_envs=1)['init_log_std']:g}; capital {CAPITAL:,.0f}; costly: half-spread "
              f"{HALF_SPREAD_BPS:g} bp, impact eta {SQRT_LAW_ETA:g} over {IMPACT_DAYS} days, participation "
              f"{PARTICIPATION:g}; flat: {FLAT_RATE * 1e4:g} bp per side; {platform.platform()}, torch "
              f"{torch.__version__}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(header, flush=True)
    results: dict[int, dict[str, dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs if args.runs is not None else Path(tmp)
        for seed in range(args.seeds):
            agents = {}
            for variant in ("costly", "flat"):
                agent, took = train_ppo(train_data, rules(full, costly=variant == "costly"), args.steps, args.num_envs,
                                        seed, runs / f"{variant}-{seed}", args.init_log_std)  # fmt: skip
                agents[variant] = agent
                seconds[f"{variant}-{seed}"] = took
                print(f"  trained {variant} seed {seed}: {took:.0f} s" if took else f"  reused {variant} seed {seed}", flush=True)
            start = time.perf_counter()
            results[seed] = seed_rows(validation, agents, costly_rules)
            print(f"  backtested seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    text, verdicts = table(results)
    print("\n" + header + "\n\n" + text + "\n\n" + "\n".join(verdicts))
    if args.out is not None:
        args.out.write_text(json.dumps({"header": header, "results": results, "train_seconds": seconds,
                                        "verdicts": verdicts}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
