"""What every metric of `trader.metrics` takes: the periods of a year, and any supported
input (numpy, pandas, torch) as a float64 (T, K) array, the answer shaped back like the input.

The module does not import torch itself: a tensor can only reach it when the caller has
imported torch already.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from trader.errors import ConfigError, UserError

TRADING_DAYS_PER_YEAR = 252
"""Trading days in a year: the one annualisation constant of the project."""

MINUTES_PER_SESSION = 390
"""Minute bars in a regular US equity session (09:30-16:00 exchange time)."""

DAILY = "daily"
WEEKLY = "weekly"
MONTHLY = "monthly"
QUARTERLY = "quarterly"
YEARLY = "yearly"
MINUTE = "minute"

ANNUALIZATION_FACTORS: dict[str, float] = {
    DAILY: TRADING_DAYS_PER_YEAR,
    WEEKLY: 52,
    MONTHLY: 12,
    QUARTERLY: 4,
    YEARLY: 1,
    MINUTE: TRADING_DAYS_PER_YEAR * MINUTES_PER_SESSION,
}
"""Periods per year for each `period` name (empyrical's table plus `minute`)."""


def is_tensor(value: Any) -> bool:
    """True for a torch tensor, without importing torch (loaded only if the caller did)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


class Returns:
    """Returns as a float64 (T, K) array plus what is needed to shape the answer."""

    def __init__(self, returns: Any, name: str = "returns") -> None:
        self.columns: pd.Index | None = None
        self.device: Any = None  # a torch.device for tensor input
        if is_tensor(returns):
            self.device = returns.device
            values = returns.detach().cpu().double().numpy()
        elif isinstance(returns, pd.DataFrame):
            self.columns = returns.columns
            values = to_float_array(returns.to_numpy(), name)
        else:
            values = to_float_array(returns, name)
        if values.ndim not in (1, 2):
            raise UserError(f"{name} must be 1-D (T,) or 2-D (T, K); got shape {values.shape}")
        self.is_1d = values.ndim == 1
        self.values = values.reshape(values.shape[0], 1) if self.is_1d else values

    @property
    def length(self) -> int:
        """Number of periods T (NaN rows included, as empyrical counts them)."""
        return self.values.shape[0]

    def wrap(self, per_column: np.ndarray) -> Any:
        """Shape a (K,) result like the input: float, ndarray, Series or tensor."""
        per_column = np.asarray(per_column, dtype=np.float64).reshape(-1)
        if self.is_1d:
            return float(per_column[0])
        if self.columns is not None:
            return pd.Series(per_column, index=self.columns)
        if self.device is not None:
            return sys.modules["torch"].from_numpy(per_column.copy()).to(self.device)
        return per_column

    def nan_result(self) -> Any:
        """NaN for every column, shaped like the input."""
        return self.wrap(np.full(self.values.shape[1], np.nan))


def to_float_array(values: Any, name: str) -> np.ndarray:
    """Convert array-like input to a float64 ndarray, naming the argument on failure."""
    if is_tensor(values):
        return values.detach().cpu().double().numpy()
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise UserError(f"{name} must be numeric; could not convert it to float64: {err}") from err


def rate_per_period(value: Any, data: Returns, name: str) -> np.ndarray | float:
    """A risk-free rate or required return: a scalar, or one value per period (T,) or (T, K)."""
    if isinstance(value, (int, float, np.floating, np.integer)):
        return float(value)
    array = to_float_array(value, name)
    if array.ndim == 0:
        return float(array)
    if array.shape[0] != data.length:
        raise UserError(f"{name} has {array.shape[0]} periods but returns have {data.length}")
    return array.reshape(data.length, -1) if array.ndim == 1 else array


def annualization_factor(period: str, annualization: float | None) -> float:
    """Periods per year: `annualization` if given, else the factor of `period`.

    :param period: one of `ANNUALIZATION_FACTORS` (daily, weekly, monthly,
        quarterly, yearly, minute); ignored when `annualization` is given.
    :param annualization: periods per year, overriding `period`.
    """
    if annualization is not None:
        return annualization
    try:
        return ANNUALIZATION_FACTORS[period]
    except KeyError:
        known = "', '".join(ANNUALIZATION_FACTORS)
        raise ConfigError(f"period cannot be {period!r}; can be '{known}'") from None


def quiet(function: Callable[[], np.ndarray]) -> np.ndarray:
    """Run numpy code whose all-NaN columns and divisions by zero are expected."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return function()


def plain(values: Any) -> Any:
    """Unwrap pandas objects to their values (torch and numpy pass through)."""
    return values.to_numpy() if isinstance(values, (pd.Series, pd.DataFrame)) else values


def like(result: np.ndarray, template: Any) -> Any:
    """Return an elementwise result in the container type of `template`."""
    if isinstance(template, pd.DataFrame):
        return pd.DataFrame(result, index=template.index, columns=template.columns)
    if isinstance(template, pd.Series):
        return pd.Series(result, index=template.index, name=template.name)
    if is_tensor(template):
        return sys.modules["torch"].from_numpy(np.ascontiguousarray(result)).to(template.device)
    if np.ndim(result) == 0:
        return float(result)
    return result
