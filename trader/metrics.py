"""Performance metrics: pure functions of simple returns, named as empyrical names them.

Every metric takes returns of shape (T,) or (T, K) -- a numpy array, a pandas
Series/DataFrame or a torch tensor (any device) -- and gives the same figure as
empyrical-reloaded, edge cases and NaN handling included:

- a 1-D input gives a Python float;
- a 2-D input gives one value per column: a numpy array for numpy input, a
  pandas Series indexed by the columns for a DataFrame, a float64 tensor on the
  input's device for a torch tensor. (Where empyrical itself only handles 1-D
  input -- Calmar, VaR, tail ratio, stability -- the value per column is the
  value empyrical gives for that column.)

Annualisation uses `TRADING_DAYS_PER_YEAR` (252) for daily returns. Intraday
returns are compounded to daily returns by exchange date (`daily_returns`)
before anything is annualised (one exception, `bar_sharpe_ratio`: how validation
ranks candidates, never a reported figure); `summary` does that for you and is the one place
where the metrics table of the backtest, the tournament, the CLI and the
dashboard is computed.

Metrics are computed in float64 on the CPU; they run once per evaluation, not
per step, so the one device-to-host copy of a torch input is not a hot path.
The module does not import torch itself (the dashboard uses it without torch): a
tensor can only reach it when the caller has imported torch already.

The metrics of one series, turnover, `bar_sharpe_ratio` and `summary` are defined here; the
rest is re-exported from its own module, so that ``trader.metrics`` names every figure:
`trader.metric_inputs` (the periods of a year and the input conversion every metric uses),
`trader.relative_metrics` (against a benchmark: alpha, beta, tracking error, information
ratio, correlation) and `trader.intraday` (bars to exchange dates, `daily_returns`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trader.errors import ConfigError, UserError
from trader.intraday import as_frame, daily_last, daily_returns, daily_sum, exchange_dates, is_intraday, timestamp_index
from trader.metric_inputs import (
    ANNUALIZATION_FACTORS,
    DAILY,
    MINUTE,
    MINUTES_PER_SESSION,
    MONTHLY,
    QUARTERLY,
    TRADING_DAYS_PER_YEAR,
    WEEKLY,
    YEARLY,
    Returns,
    annualization_factor,
    like,
    plain,
    quiet,
    rate_per_period,
    to_float_array,
)
from trader.relative_metrics import (
    alpha,
    alpha_beta,
    benchmark_correlation,
    beta,
    information_ratio,
    tracking_error,
)

SUMMARY_METRICS: tuple[str, ...] = (
    "cum_returns_final",
    "annual_return",
    "annual_volatility",
    "sharpe_ratio",
    "sortino_ratio",
    "max_drawdown",
    "calmar_ratio",
    "value_at_risk",
    "tail_ratio",
    "stability",
)
"""The metrics `summary` reports, in table order (keys of its dict / columns of its frame)."""

METRIC_LABELS: dict[str, str] = {
    "cum_returns_final": "Cumulative return",
    "annual_return": "Annual return",
    "annual_volatility": "Annual volatility",
    "sharpe_ratio": "Sharpe ratio",
    "sortino_ratio": "Sortino ratio",
    "max_drawdown": "Max drawdown",
    "calmar_ratio": "Calmar ratio",
    "value_at_risk": "Daily value at risk (5%)",
    "tail_ratio": "Tail ratio",
    "stability": "Stability",
    "turnover": "Daily turnover",
    "days": "Days",
}
"""Human-readable names of the summary columns, shared by every table that shows them."""

PERCENT_METRICS = frozenset(
    {"cum_returns_final", "annual_return", "annual_volatility", "max_drawdown", "value_at_risk", "turnover"}
)
"""Summary columns shown as percentages in tables."""


def cum_returns_final(returns: Any, starting_value: float = 0) -> Any:
    """Total compounded return (NaN returns count as 0); NaN when there are no returns.

    :param starting_value: 0 gives the return; any other value gives the final
        value of an account that started with it.
    """
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    return data.wrap(_cum_final(data.values, starting_value))


def _cum_final(values: np.ndarray, starting_value: float) -> np.ndarray:
    growth = np.nanprod(values + 1.0, axis=0)
    return growth - 1.0 if starting_value == 0 else growth * starting_value


def annual_return(returns: Any, period: str = DAILY, annualization: float | None = None) -> Any:
    """Compound annual growth rate; NaN when there are no returns.

    The number of years is the number of periods (NaN rows included) over the
    annualisation factor, as in empyrical. A final value below zero gives NaN.
    """
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    return data.wrap(_annual_return(data.values, annualization_factor(period, annualization)))


def _annual_return(values: np.ndarray, factor: float) -> np.ndarray:
    num_years = values.shape[0] / factor
    ending_value = _cum_final(values, starting_value=1)
    return quiet(lambda: np.power(ending_value, 1.0 / num_years) - 1.0)


def annual_volatility(
    returns: Any,
    period: str = DAILY,
    alpha: float = 2.0,
    annualization: float | None = None,
) -> Any:
    """Sample standard deviation (ddof=1, NaN skipped) scaled by factor ** (1 / alpha).

    NaN for fewer than two returns.

    :param alpha: scaling exponent (Levy stability); 2 is the usual square-root-of-time rule.
    """
    data = Returns(returns)
    if data.length < 2:
        return data.nan_result()
    factor = annualization_factor(period, annualization)
    std = quiet(lambda: np.nanstd(data.values, axis=0, ddof=1))
    return data.wrap(std * factor ** (1.0 / alpha))


def _zero_dispersion_std(values: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Exactly 0 where every present value of a column is equal (no rounding residue)."""
    constant = quiet(lambda: np.nanmax(values, axis=0) == np.nanmin(values, axis=0))
    return np.where(constant & np.isfinite(std), 0.0, std)


def sharpe_ratio(
    returns: Any,
    risk_free: Any = 0,
    period: str = DAILY,
    annualization: float | None = None,
) -> Any:
    """Annualised Sharpe ratio: mean / std (ddof=1) of excess returns times sqrt(factor).

    NaN for fewer than two returns or zero mean over zero spread; +-inf for a
    constant non-zero excess return (as empyrical).

    :param risk_free: risk-free return per period (same periodicity as the
        returns): a scalar or one value per period.
    """
    data = Returns(returns)
    if data.length < 2:
        return data.nan_result()
    excess = data.values - rate_per_period(risk_free, data, "risk_free")
    factor = annualization_factor(period, annualization)

    def ratio() -> np.ndarray:
        std = _zero_dispersion_std(excess, np.nanstd(excess, axis=0, ddof=1))
        return np.nanmean(excess, axis=0) / std * np.sqrt(factor)

    return data.wrap(quiet(ratio))


def downside_risk(
    returns: Any,
    required_return: Any = 0,
    period: str = DAILY,
    annualization: float | None = None,
) -> Any:
    """Annualised root-mean-square of the returns below `required_return` (NaN skipped).

    NaN when there are no returns.
    """
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    adjusted = data.values - rate_per_period(required_return, data, "required_return")
    return data.wrap(_downside(adjusted, annualization_factor(period, annualization)))


def _downside(adjusted: np.ndarray, factor: float) -> np.ndarray:
    below = np.clip(adjusted, -np.inf, 0.0)
    return quiet(lambda: np.sqrt(np.nanmean(below**2, axis=0)) * np.sqrt(factor))


def sortino_ratio(
    returns: Any,
    required_return: Any = 0,
    period: str = DAILY,
    annualization: float | None = None,
) -> Any:
    """Annualised mean excess return over annualised downside risk.

    NaN for fewer than two returns; +inf when no return falls below
    `required_return` and the mean excess return is positive (as empyrical).

    :param required_return: minimum acceptable return per period, a scalar or
        one value per period.
    """
    data = Returns(returns)
    if data.length < 2:
        return data.nan_result()
    adjusted = data.values - rate_per_period(required_return, data, "required_return")
    factor = annualization_factor(period, annualization)
    mean_annual = quiet(lambda: np.nanmean(adjusted, axis=0) * factor)
    risk = _downside(adjusted, factor)
    return data.wrap(quiet(lambda: mean_annual / risk))


def max_drawdown(returns: Any) -> Any:
    """Largest peak-to-trough fall of the compounded value (<= 0); NaN returns count as 0.

    The starting value counts as a peak. NaN when there are no returns.
    """
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    return data.wrap(_max_drawdown(data.values))


def _max_drawdown(values: np.ndarray) -> np.ndarray:
    growth = np.cumprod(1.0 + np.nan_to_num(values, nan=0.0), axis=0)
    anchored = np.vstack([np.ones((1, values.shape[1])), growth]) * 100.0
    peaks = np.fmax.accumulate(anchored, axis=0)
    drawdowns = quiet(lambda: (anchored - peaks) / peaks)
    return quiet(lambda: np.nanmin(drawdowns[1:], axis=0))


def calmar_ratio(returns: Any, period: str = DAILY, annualization: float | None = None) -> Any:
    """Annual return over the absolute max drawdown; NaN without a drawdown or when infinite."""
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    drawdown = _max_drawdown(data.values)
    annual = _annual_return(data.values, annualization_factor(period, annualization))
    ratio = quiet(lambda: annual / np.abs(drawdown))
    valid = (drawdown < 0) & ~np.isinf(ratio)
    return data.wrap(np.where(valid, ratio, np.nan))


def value_at_risk(returns: Any, cutoff: float = 0.05) -> Any:
    """The `cutoff` quantile of the returns (linear interpolation).

    NaN when there are no returns; a NaN return makes its column NaN, as in
    empyrical (which hands NaN to `numpy.percentile`).

    :param cutoff: fraction of the worst returns cut off, in [0, 1].
    """
    if not 0.0 <= cutoff <= 1.0:
        raise ConfigError(f"cutoff must be in [0, 1]; got {cutoff}")
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()
    return data.wrap(np.percentile(data.values, 100.0 * cutoff, axis=0))


def tail_ratio(returns: Any) -> Any:
    """|95th percentile| / |5th percentile| of the returns, NaN skipped.

    NaN when there are no (non-NaN) returns; +inf when the 5th percentile is 0.
    """
    data = Returns(returns)
    if data.length == 0:
        return data.nan_result()

    def ratio() -> np.ndarray:
        right = np.nanpercentile(data.values, 95, axis=0)
        left = np.nanpercentile(data.values, 5, axis=0)
        return np.abs(right) / np.abs(left)

    return data.wrap(quiet(ratio))


def stability_of_timeseries(returns: Any) -> Any:
    """R-squared of a straight-line fit to the cumulative log returns (NaN rows dropped).

    NaN for fewer than two returns, and when the cumulative log return is flat
    (all returns zero) or fewer than two returns are present.
    """
    data = Returns(returns)
    if data.length < 2:
        return data.nan_result()
    return data.wrap(quiet(lambda: _stability(data.values)))


def _stability(values: np.ndarray) -> np.ndarray:
    """Masked least-squares r**2 per column, x = position among the present rows."""
    present = ~np.isnan(values)
    count = present.sum(axis=0)
    x = np.where(present, np.cumsum(present, axis=0) - 1.0, 0.0)
    y = np.where(present, np.cumsum(np.log1p(np.where(present, values, 0.0)), axis=0), 0.0)
    x_centred = np.where(present, x - x.sum(axis=0) / count, 0.0)
    y_centred = np.where(present, y - y.sum(axis=0) / count, 0.0)
    ss_x = (x_centred**2).sum(axis=0) / count
    ss_y = (y_centred**2).sum(axis=0) / count
    ss_xy = (x_centred * y_centred).sum(axis=0) / count
    degenerate = (ss_x == 0.0) | (ss_y == 0.0)
    r = np.clip(ss_xy / np.sqrt(ss_x * ss_y), -1.0, 1.0)
    r = np.where(degenerate, np.where(ss_xy == 0.0, np.nan, 0.0), r)
    return np.where(count >= 2, r**2, np.nan)


stability = stability_of_timeseries
"""Short name of `stability_of_timeseries`."""


def turnover(traded_value: Any, portfolio_value: Any) -> Any:
    """Traded value over portfolio value, period by period (shape of the inputs).

    `traded_value` is the absolute value bought plus sold in each period,
    `portfolio_value` the portfolio's value in that period. NaN where the
    portfolio value is not positive (the turnover of a wiped-out book is
    undefined). Output type follows `traded_value` (float for a single period
    given as a scalar).
    """
    traded = to_float_array(plain(traded_value), "traded_value")
    value = to_float_array(plain(portfolio_value), "portfolio_value")
    if value.shape != traded.shape and value.size != 1:
        if traded.ndim == 2 and value.shape == traded.shape[:1]:
            value = value[:, None]
        else:
            raise UserError(f"portfolio_value shape {value.shape} does not match traded_value shape {traded.shape}")
    ratio = quiet(lambda: np.where(value > 0, traded / value, np.nan))
    return like(ratio, traded_value)


def bar_sharpe_ratio(returns: Any, timestamps: Any, tz: str | None = None) -> Any:
    """Annualised Sharpe ratio of the bar returns themselves: mean / std (ddof=1) of the
    bars (NaN bars skipped) times sqrt(bars a year), a year being `TRADING_DAYS_PER_YEAR`
    exchange dates of the series' own bars per date (its defined bars over the dates that
    have one). With one bar a date it is `sharpe_ratio` of the daily returns.

    Why it exists: it is how validation ranks candidates on intraday data
    (`trader.agents.evaluator.market_evaluator`). Over a validation period of a few weeks
    the daily Sharpe ratio's error is as much its standard deviation's, estimated from a
    few dozen days, as its mean's; the bars estimate the same spread from thousands of
    returns. On the costly minute market it ordered a tournament's pods by their test
    Sharpe far better (benchmarks/RESULTS.md, "Validation at the bar's resolution"). It
    assumes the bar returns uncorrelated: a strategy whose bars revert within the day has
    a daily spread below sqrt(bars) times the bar's, and is ranked below its daily Sharpe
    ratio (Lo 2002). Reports keep the daily Sharpe ratio (`summary`).

    :param returns: simple returns (T,) or (T, K), one per timestamp.
    :param timestamps: the T bar timestamps, strictly increasing.
    :param tz: time zone whose calendar dates count the days; default: the timestamps' own.
    :return: a float (1-D input), else one value per column (as `sharpe_ratio`).
    """
    frame, one_d = as_frame(returns, "returns")
    dates = exchange_dates(timestamps, len(frame), tz)
    defined = frame.notna()
    days = defined.groupby(dates).any().sum().to_numpy(dtype=float)
    bars = defined.sum().to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.sqrt(bars / days * TRADING_DAYS_PER_YEAR)
    ratio = np.asarray(sharpe_ratio(frame.to_numpy(), annualization=1.0), dtype=float) * scale
    if one_d:
        return float(ratio[0])
    return pd.Series(ratio, index=returns.columns) if isinstance(returns, pd.DataFrame) else ratio


def summary(
    returns: Any,
    timestamps: Any = None,
    risk_free: float = 0.0,
    *,
    traded_value: Any = None,
    portfolio_value: Any = None,
    period: str = DAILY,
    annualization: float | None = None,
) -> dict[str, float] | pd.DataFrame:
    """Every metric of `SUMMARY_METRICS` for one or several return series.

    When `timestamps` are intraday the returns are first compounded to daily
    returns by exchange date (`daily_returns`), so everything is annualised
    from daily returns with `TRADING_DAYS_PER_YEAR`.

    :param returns: simple returns (T,) or (T, K); a DataFrame's columns name
        the strategies.
    :param timestamps: the T bar timestamps, or None when `returns` are
        already one per `period`.
    :param risk_free: risk-free return per (daily) period, used by Sharpe and
        as Sortino's required return.
    :param traded_value: optional absolute value traded per bar (T,) or (T, K);
        with `portfolio_value` it adds a "turnover" entry: the mean over days
        of the day's traded value over the day's closing portfolio value.
    :param portfolio_value: portfolio value per bar, (T,) or (T, K).
    :param period: periodicity of the (compounded) returns, for annualising.
    :param annualization: periods per year, overriding `period`.
    :return: a dict metric -> float for 1-D returns; for 2-D returns a
        DataFrame with one row per column of `returns` and one column per metric.
        "days" counts the periods the figures are computed from.
    """
    if (traded_value is None) != (portfolio_value is None):
        raise UserError("summary needs both traded_value and portfolio_value for turnover, or neither")
    frame, one_d = as_frame(returns, "returns")
    columns = frame.columns
    turnover_frame = None
    if timestamps is not None and is_intraday(timestamp_index(timestamps, len(frame), None)):
        frame = daily_returns(frame, timestamps)
        if traded_value is not None:
            turnover_frame = _daily_turnover(traded_value, portfolio_value, timestamps)
    elif traded_value is not None:
        turnover_frame = as_frame(turnover(plain(traded_value), plain(portfolio_value)), "turnover")[0]
    table = _metric_table(frame.to_numpy(dtype=np.float64), risk_free, period, annualization)
    if turnover_frame is not None:
        table["turnover"] = quiet(lambda: np.nanmean(turnover_frame.to_numpy(dtype=np.float64), axis=0))
    table["days"] = np.full(frame.shape[1], float(len(frame)))
    result = pd.DataFrame(table, index=columns)
    result.index.name = "strategy"
    if one_d:
        return {key: float(value) for key, value in result.iloc[0].items()}
    return result


def _daily_turnover(traded_value: Any, portfolio_value: Any, timestamps: Any) -> pd.DataFrame:
    """Per day: the day's summed traded value over the day's last portfolio value."""
    dates = exchange_dates(timestamps, len(traded_value), None)
    traded = daily_sum(traded_value, dates, "traded_value")
    value = daily_last(portfolio_value, dates, "portfolio_value")
    if value.shape[1] == 1 and traded.shape[1] > 1:
        value = pd.concat([value.iloc[:, 0]] * traded.shape[1], axis=1)
    return pd.DataFrame(turnover(traded.to_numpy(), value.to_numpy()))


def _metric_table(
    values: np.ndarray, risk_free: float, period: str, annualization: float | None
) -> dict[str, np.ndarray]:
    """Each summary metric for the (T, K) daily returns, as (K,) arrays."""
    kwargs = {"period": period, "annualization": annualization}
    return {
        "cum_returns_final": cum_returns_final(values),
        "annual_return": annual_return(values, **kwargs),
        "annual_volatility": annual_volatility(values, **kwargs),
        "sharpe_ratio": sharpe_ratio(values, risk_free=risk_free, **kwargs),
        "sortino_ratio": sortino_ratio(values, required_return=risk_free, **kwargs),
        "max_drawdown": max_drawdown(values),
        "calmar_ratio": calmar_ratio(values, **kwargs),
        "value_at_risk": value_at_risk(values),
        "tail_ratio": tail_ratio(values),
        "stability": stability_of_timeseries(values),
    }


__all__ = [
    "ANNUALIZATION_FACTORS",
    "DAILY",
    "METRIC_LABELS",
    "MINUTE",
    "MINUTES_PER_SESSION",
    "MONTHLY",
    "PERCENT_METRICS",
    "QUARTERLY",
    "SUMMARY_METRICS",
    "TRADING_DAYS_PER_YEAR",
    "WEEKLY",
    "YEARLY",
    "alpha",
    "alpha_beta",
    "annual_return",
    "annual_volatility",
    "annualization_factor",
    "bar_sharpe_ratio",
    "benchmark_correlation",
    "beta",
    "calmar_ratio",
    "cum_returns_final",
    "daily_returns",
    "downside_risk",
    "information_ratio",
    "is_intraday",
    "max_drawdown",
    "sharpe_ratio",
    "sortino_ratio",
    "stability",
    "stability_of_timeseries",
    "summary",
    "tail_ratio",
    "tracking_error",
    "turnover",
    "value_at_risk",
]
