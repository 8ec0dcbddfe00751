"""Backtests: policies and baselines run deterministically through the batched market env.

`run_backtest` is the entry point; `trader backtest` is its CLI. Metrics come from
`trader.metrics.summary`, so every table in the project agrees.
"""

from trader.backtest.engine import BASELINES, BacktestConfig, Book, benchmark_panel, run_backtest
from trader.backtest.report import read_series, write_report
from trader.backtest.result import BacktestResult, PeriodInfo, StrategyInfo
from trader.backtest.strategies import ActionSchedule, ExternalPolicy, PolicyPopulation, agents_population

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
    "StrategyInfo",
    "benchmark_panel",
    "read_series",
    "run_backtest",
    "write_report",
]

from trader._callable import make_callable  # noqa: E402

from trader.backtest.runs import backtest  # noqa: E402

make_callable(__name__, backtest)  # `trader.backtest(...)` calls `runs.backtest`: `run_backtest`, under a run's rules with run_dir
