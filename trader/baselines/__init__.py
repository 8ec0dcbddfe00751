"""Baseline libraries on the run's data, rules and periods: `trader.baselines(run_dir, ...)`.

- Stable-Baselines3 (`sb3`: on `SB3VecEnv` over our batched env; `sb3-dummy`: on
  `GymStockTradingEnv`s in SB3's `DummyVecEnv`), presets "sb3" and "finrl";
- FinRL's ensemble strategy (`finrl`): A2C, PPO and DDPG over rolling windows.

Every baseline is selected on the validation period by the evaluator our runs use,
written to ``RUN_DIR/baselines/<library>-<algo>-s<seed>/`` (model files and a
``baseline.json`` sidecar), and backtested on the test period beside the run's own
strategies. `trader baselines RUN_DIR` is the CLI. See `trader.baselines.run`.
"""

from trader.baselines.budget import Budget
from trader.baselines.run import LIBRARIES, BaselinesResult, Outcome, baselines

__all__ = ["LIBRARIES", "BaselinesResult", "Budget", "Outcome", "baselines"]

from trader._callable import make_callable  # noqa: E402

make_callable(__name__, baselines)  # `trader.baselines(...)` calls `baselines`
