"""The main job of `make demo`: the furthest stage of the pipeline that works, end to end.

1. Build (or load from the cache) the embedded default data set and print its summary.
2. Train a PPO agent briefly on its training period, validated on its validation period.
3. Backtest that agent beside the benchmark and equal-weight portfolios on the test
   period, print the metrics table and write the report into the run directory.

The tournament stage joins here once it exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from market_envs.data import load
from trader.backtest import BacktestResult, run_backtest
from trader.train import TrainResult, train

DEFAULT_RECIPE = "synthetic-minute"


@dataclass(frozen=True)
class DemoResult:
    """What the demo produced: the data summary, the training run and the backtest."""

    summary: dict
    training: TrainResult | None
    backtest: BacktestResult


def run_demo(
    recipe: str = DEFAULT_RECIPE,
    run_dir: str | os.PathLike[str] = "runs/demo",
    *,
    steps: int = 200_000,
    num_envs: int = 256,
    seed: int = 0,
    device: str = "cpu",
    log=print,
) -> DemoResult:
    """Data, a brief PPO training run and a backtest, into `run_dir`.

    :param recipe: the data set recipe (name or path).
    :param run_dir: the run directory (created if missing).
    :param steps: PPO environment transitions; 0 skips training (benchmarks only).
    :param num_envs: batched sub-environments for training.
    :param seed: seeds training.
    :param device: "cpu" or "cuda".
    :param log: where progress lines go.
    """
    run_dir = Path(run_dir)
    data = load(recipe, progress=log)
    summary = data.summary()
    log("data set: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    training = None
    policies = {}
    if steps > 0:
        log(f"training PPO for {steps:,} steps on {num_envs} sub-environments ({device}) ...")
        training = train("ppo", data, run_dir=run_dir, steps=steps, num_envs=num_envs, seed=seed,
                         device=device, eval_every=max(steps // 4, 1))
        log(f"trained in {training.wall_time:.0f} s, best validation Sharpe {training.best_score:.2f}")
        policies["ppo"] = run_dir / "checkpoints" / "best"
    log("backtesting on the test period ...")
    result = run_backtest(data, policies, period="test", run_dir=run_dir, device=device)
    return DemoResult(summary=summary, training=training, backtest=result)
