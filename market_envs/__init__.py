"""market_envs."""
