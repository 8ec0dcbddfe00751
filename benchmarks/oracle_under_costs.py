"""The planted rule under each named cost model: rebalanced every bar (the cost-blind oracle) and
traded through the rate or band that suits the model (the oracle under costs, `oracle_costs`).

For a recipe with a planted edge and each cost model, fits the oracle under costs on the
training period (`trader.backtesting.groups.oracle_under_costs`: every candidate trade rate and
no-trade band, with its net Sharpe there) and backtests both oracles on the validation and test
periods through the env (`trader.backtesting.run_backtest`), printing net Sharpe, turnover (value
traded per day over the capital) and the costs by term in basis points of the value traded: the
check that every cost term reads a real value on the recipe's bars.

    OMP_NUM_THREADS=1 python benchmarks/oracle_under_costs.py --recipe synthetic-edge-minute-costs --capital 1e7
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from market_envs.costs import COST_MODELS, cost_model
from market_envs.data import load
from trader.backtesting import BacktestConfig, run_backtest
from trader.backtesting.groups import oracle_under_costs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="synthetic-edge-minute-costs")
    parser.add_argument("--models", nargs="+", default=["zero", "flat", "retail", "institutional"], choices=COST_MODELS)
    parser.add_argument("--capital", type=float, default=10_000_000.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load(args.recipe)
    print(
        f"{args.recipe}: {data.num_tickers} tickers, {data.num_bars} bars; capital {args.capital:,.0f}; "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = [
        "| model | period | strategy | net Sharpe | turnover / day | costs bp | commission bp | spread bp | "
        "impact bp | unfilled |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.models:
        config = BacktestConfig(initial_cash=args.capital, record_positions="day", tear_sheet=False).with_costs(
            cost_model(name)
        )
        slow = oracle_under_costs(data, config, torch.device("cpu"))
        fits = ", ".join(
            f"{'rate ' + format(r, 'g') if b == 0 else 'band ' + format(b * data.num_tickers, 'g') + '/N'} {x:.2f}"
            for r, b, x in slow.candidates
        )
        print(f"{name}: training-period net Sharpe of each candidate: {fits}", flush=True)
        for period in ("validation", "test"):
            result = run_backtest(data, baselines=["oracle", "oracle_costs"], period=period, config=config)
            for strategy in ("oracle", "oracle_costs"):
                c = result.costs[strategy]
                turnover = float(result.series[strategy]["traded_value"].sum()) / args.capital / result.period.days
                bp = lambda key: "-" if c[key] is None else f"{c[key]:.2f}"  # noqa: E731
                rows.append(
                    f"| {name} | {period} | {result.strategies[strategy].label} | "
                    f"{result.metrics.loc[strategy, 'sharpe_ratio']:.2f} | {turnover:.3f} | {bp('costs_bps')} | "
                    f"{bp('commission_bps')} | {bp('spread_bps')} | {bp('impact_bps')} | "
                    f"{'-' if c['unfilled_share'] is None else format(c['unfilled_share'], '.1%')} |"
                )
                print(rows[-1], flush=True)
    print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
