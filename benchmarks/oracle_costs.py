"""The planted edge's oracle Sharpe by cost level and rebalancing interval.

For each target strength and seed, builds the synthetic market with the edge
planted (`market_envs.data.synthetic`), trades the oracle
(`market_envs.data.edge.oracle_weights`) with the frictionless book-keeping of
`market_envs.data.edge.portfolio_returns` at each cost, compounds the bar returns to
daily returns and prints the annualised Sharpe (`trader.metrics`, 252 days). At zero
cost and rebalancing every bar it checks the calibration: the Sharpe should be near
the target. Larger rebalancing intervals show how much of the edge survives costs.

    OMP_NUM_THREADS=1 python benchmarks/oracle_costs.py                      # the default edge, minute bars
    OMP_NUM_THREADS=1 python benchmarks/oracle_costs.py --interval 1D --horizon 5 --rebalance 1 5 --costs-bp 0 5
"""

from __future__ import annotations

import argparse
import sys

import torch

from market_envs.data.edge import EdgeSpec, oracle_weights, portfolio_returns
from market_envs.data.synthetic import synthetic
from trader.metrics import daily_returns, sharpe_ratio


def oracle_sharpe(data, spec: EdgeSpec, rebalance_every: int, cost: float, long_only: bool = False) -> float:
    """Annualised Sharpe of the oracle's daily returns at ``cost`` per unit of turnover."""
    weights = oracle_weights(data, spec, rebalance_every=rebalance_every, long_only=long_only)
    bars = portfolio_returns(weights, data.close, cost)  # bars[j]: the return over bar j+1
    return float(sharpe_ratio(daily_returns(bars.cpu().numpy(), data.timestamps[1:])))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--start", default="2023-01-03")
    parser.add_argument("--end", default="2024-01-01")
    parser.add_argument("--interval", default="1min", help='bar interval: "1min", "Nmin", "Nh" or "1D"')
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--strength", type=float, nargs="+", default=None, help="target Sharpe (default: EdgeSpec's)")
    parser.add_argument("--kind", nargs="+", default=["mean_reversion"])
    parser.add_argument("--horizon", type=int, default=30)
    parser.add_argument("--costs-bp", type=float, nargs="+", default=[0.0, 0.1, 1.0, 10.0])
    parser.add_argument("--rebalance", type=int, nargs="+", default=[1, 30, 390])
    parser.add_argument("--long-only", action="store_true", help="the long-only oracle (no short selling)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    strengths = args.strength or [EdgeSpec().strength_sharpe]
    side = "long-only" if args.long_only else "dollar-neutral"
    print(
        f"{args.tickers} tickers {args.start}..{args.end} ({args.interval}), kind {args.kind}, "
        f"horizon {args.horizon}, {side} oracle"
    )
    print("target  seed  rebalance  " + "  ".join(f"SR@{c:g}bp" for c in args.costs_bp))
    for strength in strengths:
        spec = EdgeSpec(kind=tuple(args.kind), strength_sharpe=strength, horizon=args.horizon)
        for seed in args.seeds:
            data = synthetic(args.tickers, args.start, args.end, seed=seed, interval=args.interval, edge=spec)
            for every in args.rebalance:
                row = [oracle_sharpe(data, spec, every, c / 1e4, args.long_only) for c in args.costs_bp]
                print(f"{strength:6.1f}  {seed:4d}  {every:9d}  " + "  ".join(f"{v:8.2f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
