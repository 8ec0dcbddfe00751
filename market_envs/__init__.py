"""market_envs: batched market environments on torch tensors.

- `StockTradingVecEnv` and its `EnvConfig`: E trading sub-environments over N stocks,
  all state on one device (see `market_envs.env`).
- `GymStockTradingEnv`: one sub-environment behind gymnasium's single-env API (numpy
  in and out), for Stable-Baselines3 and other libraries.
- `GymVecEnv`: gymnasium envs (Pendulum, MuJoCo Ant/Humanoid) behind the same
  batched interface, so every agent trains on both families unchanged.
- `market_envs.data`: the market panel (`MarketData`) and its providers.
"""

from market_envs import data
from market_envs.env import EnvConfig, StockTradingVecEnv
from market_envs.gym_adapter import GymStockTradingEnv
from market_envs.gym_vec import GymVecEnv

__all__ = ["EnvConfig", "GymStockTradingEnv", "GymVecEnv", "StockTradingVecEnv", "data"]
