"""market_envs: batched market environments on torch tensors.

- `StockTradingVecEnv` and its `EnvConfig`: E trading sub-environments over N stocks,
  all state on one device (see `market_envs.env`; the rules in words: `market_envs.config`).
- `CostModel` and `cost_model`: the env's cost and fill terms and the named cost
  models (see `market_envs.costs`).
- `GymStockTradingEnv`: one sub-environment behind gymnasium's single-env API (numpy
  in and out), for Stable-Baselines3 and other libraries.
- `GymVecEnv`: gymnasium envs (Pendulum, MuJoCo Ant/Humanoid) behind the same
  batched interface, so every agent trains on both families unchanged.
- `market_envs.data`: the market panel (`MarketData`) and its providers.

The names are imported on first use, so that `market_envs.errors` (which every layer
imports) stays light: the dashboard reads runs without loading torch.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "CostModel": "market_envs.costs",
    "cost_model": "market_envs.costs",
    "EnvConfig": "market_envs.config",
    "StockTradingVecEnv": "market_envs.env",
    "target_holdings": "market_envs.kernel",
    "GymStockTradingEnv": "market_envs.gym_adapter",
    "GymVecEnv": "market_envs.gym_vec",
    "data": "market_envs.data",
}

__all__ = [
    "CostModel",
    "EnvConfig",
    "GymStockTradingEnv",
    "GymVecEnv",
    "StockTradingVecEnv",
    "cost_model",
    "data",
    "target_holdings",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'market_envs' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    return module if name == "data" else getattr(module, name)
