"""podracer-trader: batched market environments, RL agents, backtests and tournaments.

The Python API is the first interface; the `trader` CLI is a thin layer on it:

- `trader.train(algo, env, config, run_dir, ...)`: train one agent (`trader.training`);
- `trader.backtest(data, policies, ...)`: backtest policies beside the baselines, under a run's
  rules with ``run_dir`` (`trader.backtesting`; the engine is `run_backtest`);
- `trader.baselines(run_dir, libraries, algos, ...)`: SB3, RLlib and FinRL's ensemble on a
  run's data and rules, backtested beside it (`trader.libraries`);
- `trader.act(run_dir, at=..., book=...)`: a run's target weights and orders at one
  bar, from a given book (`trader.decision`);
- `trader.metrics`: performance metrics as pure functions;
- `market_envs.data.load(recipe)`: market data sets; `market_envs.StockTradingVecEnv`.

The four calls are plain functions, imported on first use. A tournament is one floor up,
in the `tournament` package: ``tournament.run(TournamentConfig(...))``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_MODULES = ("metrics", "agents", "training", "backtesting", "libraries")

_FUNCTIONS = {
    "train": ("trader.training", "train"),
    "backtest": ("trader.backtesting.runs", "backtest"),
    "baselines": ("trader.libraries.run", "baselines"),
    "act": ("trader.decision", "act"),
}
"""The API's functions by name: (their module, their name there)."""


def __getattr__(name: str):
    """Import the API on first use, so `import trader` stays light."""
    if name in _MODULES:
        return importlib.import_module(f"trader.{name}")
    if name in _FUNCTIONS:
        module, attribute = _FUNCTIONS[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'trader' has no attribute {name!r}")
