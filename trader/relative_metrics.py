"""Metrics against a benchmark (a factor): beta, alpha, tracking error, information ratio
and correlation, named as empyrical names them and shaped as every metric of `trader.metrics`."""

from __future__ import annotations

from typing import Any

import numpy as np

from trader.errors import UserError
from trader.metric_inputs import DAILY, Returns, annualization_factor, plain, quiet, rate_per_period, to_float_array


def _paired(returns: Any, factor_returns: Any, risk_free: Any = 0) -> tuple[Returns, np.ndarray, np.ndarray]:
    """Returns (T, K) and the factor's (T,) less `risk_free`, as (T, K) arrays NaN where either is."""
    data = Returns(returns)
    factor = to_float_array(plain(factor_returns), "factor_returns").reshape(-1)
    if factor.shape[0] != data.length:
        raise UserError(f"factor_returns has {factor.shape[0]} periods but returns have {data.length}")
    adjustment = rate_per_period(risk_free, data, "risk_free")
    y = data.values - adjustment
    x = np.broadcast_to(factor[:, None] - adjustment, y.shape).copy()
    missing = np.isnan(y) | np.isnan(x)
    y[missing], x[missing] = np.nan, np.nan
    return data, y, x


def _beta(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The least-squares slope per column over the present pairs (NaN for fewer than 2)."""
    centred = x - np.nanmean(x, axis=0)
    slope = np.nanmean(centred * y, axis=0) / np.nanmean(centred**2, axis=0)
    return np.where(np.sum(~np.isnan(y), axis=0) >= 2, slope, np.nan)


def alpha_beta(
    returns: Any,
    factor_returns: Any,
    risk_free: Any = 0,
    period: str = DAILY,
    annualization: float | None = None,
) -> tuple[Any, Any]:
    """Annualised alpha and beta of returns against a factor (the benchmark), as empyrical.

    Beta is the least-squares slope of the excess returns on the factor's excess returns
    (pairs where either is NaN dropped); alpha the mean of ``r - beta x f`` (the
    least-squares intercept, per period) compounded to a year: ``(1 + a) ** factor - 1``.
    NaN for fewer than two pairs, and beta NaN when the factor does not move.

    :param returns: (T,) or (T, K) simple returns.
    :param factor_returns: (T,) the benchmark's returns over the same periods.
    :param risk_free: risk-free return per period, taken from both.
    :return: (alpha, beta), each shaped like the other metrics' answers.
    """
    data, y, x = _paired(returns, factor_returns, risk_free)
    if data.length < 2:
        return data.nan_result(), data.nan_result()
    factor = annualization_factor(period, annualization)
    beta = quiet(lambda: _beta(y, x))
    alpha = quiet(lambda: (np.nanmean(y - beta * x, axis=0) + 1.0) ** factor - 1.0)
    return data.wrap(alpha), data.wrap(beta)


def beta(returns: Any, factor_returns: Any, risk_free: Any = 0) -> Any:
    """The beta of `alpha_beta` alone."""
    return alpha_beta(returns, factor_returns, risk_free)[1]


def alpha(
    returns: Any, factor_returns: Any, risk_free: Any = 0, period: str = DAILY, annualization: float | None = None
) -> Any:
    """The annualised alpha of `alpha_beta` alone."""
    return alpha_beta(returns, factor_returns, risk_free, period, annualization)[0]


def tracking_error(returns: Any, factor_returns: Any, period: str = DAILY, annualization: float | None = None) -> Any:
    """Annualised standard deviation (ddof=1) of the active returns ``r - f``; NaN for fewer than 2."""
    data, y, x = _paired(returns, factor_returns)
    if data.length < 2:
        return data.nan_result()
    factor = annualization_factor(period, annualization)
    return data.wrap(quiet(lambda: np.nanstd(y - x, axis=0, ddof=1) * np.sqrt(factor)))


def information_ratio(
    returns: Any, factor_returns: Any, period: str = DAILY, annualization: float | None = None
) -> Any:
    """Annualised information ratio: mean / std (ddof=1) of the active returns ``r - f``
    times sqrt(factor) (empyrical's ``excess_sharpe``, annualised); NaN for fewer than 2."""
    data, y, x = _paired(returns, factor_returns)
    if data.length < 2:
        return data.nan_result()
    factor = annualization_factor(period, annualization)
    active = y - x
    return data.wrap(quiet(lambda: np.nanmean(active, axis=0) / np.nanstd(active, axis=0, ddof=1) * np.sqrt(factor)))


def benchmark_correlation(returns: Any, factor_returns: Any) -> Any:
    """Pearson correlation of the returns with the factor's over their present pairs; NaN
    for fewer than 2 or when either does not move."""
    data, y, x = _paired(returns, factor_returns)
    if data.length < 2:
        return data.nan_result()

    def correlation() -> np.ndarray:
        dy, dx = y - np.nanmean(y, axis=0), x - np.nanmean(x, axis=0)
        value = np.nanmean(dy * dx, axis=0) / np.sqrt(np.nanmean(dy**2, axis=0) * np.nanmean(dx**2, axis=0))
        return np.where(np.sum(~np.isnan(y), axis=0) >= 2, np.clip(value, -1.0, 1.0), np.nan)

    return data.wrap(quiet(correlation))
