"""Backtests: policies and baselines run deterministically through the batched market env.

`run_backtest` is the engine's entry point; `backtest` (``trader.backtest``) runs it under a
run directory's rules; `trader backtest` is the CLI. Metrics come from
`trader.metrics.summary`, so every table in the project agrees.
"""

from trader.backtesting.config import BacktestConfig, Book
from trader.backtesting.engine import run_backtest
from trader.backtesting.groups import benchmark_panel
from trader.names import BASELINES
from trader.backtesting.report import read_series, write_report
from trader.backtesting.result import BacktestResult, PeriodInfo, StrategyInfo
from trader.backtesting.runs import backtest
from trader.backtesting.strategies import ActionSchedule, ExternalPolicy, PolicyPopulation, agents_population

__all__ = [
    "ActionSchedule",
    "BASELINES",
    "BacktestConfig",
    "BacktestResult",
    "Book",
    "ExternalPolicy",
    "PeriodInfo",
    "PolicyPopulation",
    "agents_population",
    "backtest",
    "StrategyInfo",
    "benchmark_panel",
    "read_series",
    "run_backtest",
    "write_report",
]
