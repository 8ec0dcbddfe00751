"""podracer-trader: batched market environments, RL agents, backtests and tournaments.

The Python API is the first interface; the `trader` CLI is a thin layer on it:

- `trader.train(algo, env, config, run_dir, ...)`: train one agent (`trader.train.train`);
- `trader.backtest(data, policies, ...)`: backtest policies beside the baselines
  (`trader.backtest.run_backtest`);
- `trader.baselines(run_dir, libraries, algos, ...)`: SB3 and FinRL's ensemble on a
  run's data and rules, backtested beside it (`trader.baselines.baselines`);
- `trader.act(run_dir, at=..., book=...)`: a run's target weights and orders at one
  bar, from a given book (`trader.decision.act`);
- `trader.metrics`: performance metrics as pure functions;
- `market_envs.data.load(recipe)`: market data sets; `market_envs.StockTradingVecEnv`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = ("train", "backtest", "baselines", "metrics", "agents")


def __getattr__(name: str):
    """Import the API modules on first use, so `import trader` stays light."""
    if name in _LAZY:
        return importlib.import_module(f"trader.{name}")
    if name == "act":
        from trader.decision import act

        return act
    raise AttributeError(f"module 'trader' has no attribute {name!r}")
