"""The tournament's ensemble: the top-k pods acting as one policy.

The policy itself is generic (a mean of agents) and lives in `trader.agents.ensemble`,
where the backtest of a run directory also finds it.
"""

from trader.agents.ensemble import EnsemblePolicy, ensemble_rules, load_ensemble

__all__ = ["EnsemblePolicy", "ensemble_rules", "load_ensemble"]
