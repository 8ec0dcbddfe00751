"""How much of a planted edge can *any* learner find in the training period?

The learning check (`learning_check.py`) asks agents for half the oracle's Sharpe.
The oracle knows which tickers carry the edge; a learner has to find them in the
training period, and a weak per-ticker edge cannot be told apart from noise there.
This prints, for each edge strength (the oracle's frictionless annual Sharpe):

- ``oracle``: the oracle's validation Sharpe (through the backtest engine);
- ``probe(obs)``: the validation Sharpe of `learning_check.linear_probe`, per-ticker
  ridge regressions of the next bar's return fitted on the training period, on two
  observations: the panel's 13 indicators, and the return t-statistic of the rule's
  horizon alone (``EnvConfig(features=(), return_windows=(30,))`` on the default
  recipe, the learning check's default);
  a supervised learner with the right feature, so roughly the most an agent on that
  observation can hope for;
- ``pooled probe``: one ridge regression on that t-statistic fitted on every
  ticker's rows at once: the supervised counterpart of the per-stock network, which
  applies one rule to every stock and cannot tell an edge ticker from another;
- ``t/ticker``: the t-statistic with which one edge ticker's edge shows in the whole
  training period, ``SR_bar / sqrt(K) * sqrt(training bars)`` with ``SR_bar`` the
  oracle's annual Sharpe over ``sqrt(252 * bars per day)`` and K edge tickers;
- ``SNR/sample``: the same per-ticker, per-bar signal over ``sqrt(N)``: the reward
  of one step sums the P&L of all N positions, so one transition tells an agent that
  much about one ticker's edge; of the order of ``(3 / SNR)^2`` transitions are
  needed before a gradient step points the right way more often than not.

    OMP_NUM_THREADS=1 python benchmarks/edge_identifiability.py --strengths 10,20,30   # 100 tickers
    OMP_NUM_THREADS=1 python benchmarks/edge_identifiability.py --fraction 1 --strengths 20,30
    OMP_NUM_THREADS=1 python benchmarks/edge_identifiability.py --tickers 30 --strengths 20,100
    OMP_NUM_THREADS=1 python benchmarks/edge_identifiability.py --recipe synthetic-edge-daily --strengths 6,8 --cost 0.0005
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.

from benchmarks.learning_check import edge_spec, env_rules, linear_probe, validation_oracle
from market_envs.data import load
from market_envs.data.edge import edge_layout
from market_envs.data.recipes import find_recipe
from trader.backtesting import BacktestConfig, run_backtest


def observations(horizon: int) -> dict[str, tuple]:
    """The probes' observations: the 13 indicators, and the t-statistic the rule ranks."""
    return {"indicators": (None, ()), "ret_tstat": ((), (horizon,))}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="synthetic-edge-minute")
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--strengths", default="30", help="oracle Sharpe values, comma-separated")
    parser.add_argument("--fraction", type=float, default=None, help="share of edge tickers (default: the recipe's)")
    parser.add_argument("--cost", type=float, default=0.0, help="cost rate per side in the backtest (0: frictionless)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    base_edge = dict(find_recipe(args.recipe).options["edge"])
    if args.fraction is not None:
        base_edge["fraction"] = args.fraction
    horizon = int(base_edge.get("horizon", 30))
    tstat = f"ret_tstat_{horizon}"
    print(f"{args.recipe}, {args.tickers} tickers, edge {base_edge}, cost {args.cost} per side")
    print(
        f"| strength | oracle | probe(indicators) | probe({tstat}) | x oracle | pooled probe({tstat}) | t/ticker | SNR/sample |"
    )
    print("|---|---|---|---|---|---|---|---|")
    start = time.perf_counter()
    for strength in (float(s) for s in args.strengths.split(",")):
        full = load(args.recipe, n_tickers=args.tickers, edge={**base_edge, "strength_sharpe": strength})
        train, validation = full.period("train"), full.period("validation")
        spec = edge_spec(full)
        policies = {"oracle": validation_oracle(full, validation, spec)}
        for name, (features, windows) in observations(horizon).items():
            rules = env_rules(args.cost, 390, features, windows)
            policies[name] = linear_probe(full, train, validation, rules)
        rules = env_rules(args.cost, 390, (), (horizon,))
        policies["pooled"] = linear_probe(full, train, validation, rules, pooled=True)
        config = BacktestConfig(
            buy_cost=args.cost, sell_cost=args.cost, policy_env=rules, record_positions="day", tear_sheet=False
        )
        sharpe = run_backtest(validation, policies, baselines=[], config=config).metrics["sharpe_ratio"]
        count = edge_layout(spec, full.num_tickers).size
        bars_per_day = train.num_bars / len(set(train.timestamps.date))
        per_ticker_bar = strength / math.sqrt(252.0 * bars_per_day) / math.sqrt(count)
        print(
            f"| {strength:g} | {sharpe['oracle']:.2f} | {sharpe['indicators']:.2f} | {sharpe['ret_tstat']:.2f} | "
            f"{sharpe['ret_tstat'] / sharpe['oracle']:.2f} | {sharpe['pooled']:.2f} | {per_ticker_bar * math.sqrt(train.num_bars):.1f} | "
            f"{per_ticker_bar / math.sqrt(full.num_tickers):.4f} |",
            flush=True,
        )
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
