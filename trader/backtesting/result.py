"""What a backtest returns: per-strategy series, the metrics table, and their context."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trader.rundir import SERIES_COLUMNS  # noqa: F401  (the columns of each strategy's series; positions are kept apart)


@dataclass(frozen=True)
class StrategyInfo:
    """How a strategy is named and where it came from.

    :param name: file-safe key: `backtests/<name>.parquet`, the row of the metrics table.
    :param label: human-readable name for tables and plots.
    :param kind: "policy" (a checkpoint or callable), "library" (a baseline
        library's model, `trader.baselines`) or "baseline" (a built-in rule).
    :param source: the checkpoint path, or a short description of the rule.
    :param training: for library rows, how it was trained (library, algorithm, seed,
        budget terms, env steps, seconds, samples/s), from its sidecar.
    """

    name: str
    label: str
    kind: str
    source: str
    training: dict[str, Any] | None = None


@dataclass(frozen=True)
class PeriodInfo:
    """The stretch of data a backtest covered.

    :param name: "test", "validation", "START:END" as asked, or "all".
    :param start: first bar's timestamp (exchange time).
    :param end: last bar's timestamp.
    :param bars: number of bars.
    :param days: number of exchange dates.
    """

    name: str
    start: pd.Timestamp
    end: pd.Timestamp
    bars: int
    days: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"name": self.name, "start": str(self.start), "end": str(self.end), "bars": self.bars, "days": self.days}


@dataclass(frozen=True)
class BacktestResult:
    """A finished backtest.

    :param metrics: one row per strategy (index: strategy name), sorted by Sharpe
        ratio, best first; columns from `trader.metrics.summary` (daily figures).
    :param series: strategy name -> DataFrame indexed by bar timestamp with
        `SERIES_COLUMNS`: value (after the bar's fills, marked at its close),
        simple return, cash, gross value (sum of |shares| x close), turnover (traded
        value / value), traded value, costs.
    :param positions: strategy name -> shares held per ticker (columns), one row
        per recorded bar (every bar, or each session's last bar; see
        `BacktestConfig.record_positions`). The benchmark strategy holds the
        benchmark only.
    :param daily_returns: date x strategy daily returns the metrics come from.
    :param strategies: name -> `StrategyInfo`, in the order they were given.
    :param dataset: data set (recipe) name.
    :param benchmark_name: the benchmark's name, or None.
    :param tickers: the panel's tickers, in position-column order.
    :param period: the period covered.
    :param config: the resolved `BacktestConfig` as a dict.
    :param files: what was written where (empty when nothing was written).
    :param missing_columns: source columns the data lacked (close-only data), filled
        from the close; orders then fill at the next bar's close.
    :param evidence: strategy name -> `trader.backtesting.evidence.series_evidence` of its daily
        returns (interval, PSR, and the DSR of a strategy selected among trials).
    :param selection: the run's selection on its validation period
        (`trader.backtesting.evidence.selection_evidence`), or None.
    :param costs: strategy name -> its costs over the period (`trader.backtesting.assembly.cost_breakdown`):
        totals of commission, spread, impact and borrow, each in bp of the value traded, and the
        unfilled share of its orders.
    :param cost_model: the cost model every strategy traded under (`NamedCosts.as_dict`: name,
        rates, `CostModel` terms, sources).
    :param breakeven: strategy name -> its breakeven cost (`trader.backtesting.assembly.breakeven`: the
        Sharpe ratio at each multiple of the cost model and the multiple where it reaches 0);
        empty when no multiples were run (`BacktestConfig.cost_multiples`).
    :param membership: the point-in-time universe of a panel built from a membership
        file (`market_envs.data.membership.period_membership`: members and changes
        over the data set's window, and the changes this period saw), or None.
    :param trades: strategy name -> its trade list (`trader.backtesting.trades.trade_list`: one
        row per fill of one ticker, with its price and costs by term); empty when positions
        were recorded per session only (``record_positions="day"``).
    :param versus_benchmark: strategy name -> its daily returns against the benchmark index's
        (`trader.backtesting.evidence.benchmark_evidence`: beta, alpha with its interval, tracking
        error, information ratio, correlation); empty when the data has no benchmark.
    :param versus_yardsticks: agent name -> its verdict against the best yardstick of its kind
        (`trader.backtesting.evidence.yardstick_verdicts`: dollar-neutral or long-only).
    :param spread: a tournament's result against the spread of its own pods, on validation and on
        this period (`trader.backtesting.spread.spread`), or None (not a tournament's own strategies).
    """

    metrics: pd.DataFrame
    series: dict[str, pd.DataFrame]
    positions: dict[str, pd.DataFrame]
    daily_returns: pd.DataFrame
    strategies: dict[str, StrategyInfo]
    dataset: str
    benchmark_name: str | None
    tickers: tuple[str, ...]
    period: PeriodInfo
    config: dict[str, Any]
    files: dict[str, Path] = field(default_factory=dict)
    missing_columns: tuple[str, ...] = ()
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    selection: dict[str, Any] | None = None
    costs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cost_model: dict[str, Any] = field(default_factory=dict)
    breakeven: dict[str, dict[str, Any]] = field(default_factory=dict)
    membership: dict[str, Any] | None = None
    trades: dict[str, pd.DataFrame] = field(default_factory=dict)
    versus_benchmark: dict[str, dict[str, Any]] = field(default_factory=dict)
    versus_yardsticks: dict[str, dict[str, Any]] = field(default_factory=dict)
    spread: dict[str, Any] | None = None

    @property
    def best(self) -> str:
        """Name of the strategy with the highest Sharpe ratio."""
        return str(self.metrics.index[0])

    def labels(self) -> dict[str, str]:
        """Strategy name -> label."""
        return {name: info.label for name, info in self.strategies.items()}
