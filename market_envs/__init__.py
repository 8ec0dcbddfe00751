"""market_envs: batched market environments on torch tensors.

- `StockTradingVecEnv` and its `EnvConfig`: E trading sub-environments over N stocks,
  all state on one device (see `market_envs.env`).
- `GymStockTradingEnv`: one sub-environment behind gymnasium's single-env API (numpy
  in and out), for Stable-Baselines3 and other libraries.
- `market_envs.data`: the market panel (`MarketData`) and its providers.
"""

from market_envs import data
from market_envs.env import EnvConfig, StockTradingVecEnv
from market_envs.gym_adapter import GymStockTradingEnv

__all__ = ["EnvConfig", "GymStockTradingEnv", "StockTradingVecEnv", "data"]
