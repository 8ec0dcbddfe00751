"""podracer-trader: batched market environments, RL agents, backtests and tournaments.

The Python API is the first interface; the `trader` CLI is a thin layer on it.
"""

__version__ = "0.1.0"
