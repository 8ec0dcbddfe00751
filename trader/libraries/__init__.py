"""The baseline libraries on a run's data, rules and periods: `trader.baselines(run_dir, ...)`
(`baselines` here).

- Stable-Baselines3 (`sb3`: on `SB3VecEnv` over our batched env; `sb3-dummy`: on
  `GymStockTradingEnv`s in SB3's `DummyVecEnv`), presets "sb3" and "finrl";
- FinRL's ensemble strategy (`finrl`): A2C, PPO and DDPG over rolling windows.

Every baseline is selected on the validation period by the evaluator our runs use,
written to ``RUN_DIR/baselines/<library>-<algo>-s<seed>/`` (model files and a
``baseline.json`` sidecar), and backtested on the test period beside the run's own
strategies. `trader baselines RUN_DIR` is the CLI. See `trader.libraries.run`.
"""

from trader.libraries.budget import Budget
from trader.libraries.run import LIBRARIES, BaselinesResult, Outcome, baselines

__all__ = ["LIBRARIES", "BaselinesResult", "Budget", "Outcome", "baselines"]
