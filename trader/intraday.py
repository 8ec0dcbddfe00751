"""Intraday bars to exchange dates: a bar series' calendar days, and its returns compounded
to one return per day (`daily_returns`), before any metric annualises them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trader.errors import UserError
from trader.metric_inputs import to_float_array


def timestamp_index(timestamps: Any, length: int, tz: str | None) -> pd.DatetimeIndex:
    """Validate timestamps (one per period, increasing) and convert to `tz` if given."""
    index = pd.DatetimeIndex(timestamps)
    if len(index) != length:
        raise UserError(f"timestamps has {len(index)} entries but returns have {length} periods")
    if index.hasnans:
        raise UserError(f"timestamps contain NaT at position {int(np.flatnonzero(index.isna())[0])}")
    if length > 1:
        backwards = np.flatnonzero(np.diff(index.asi8) <= 0)
        if backwards.size:
            where = index[backwards[0] + 1]
            raise UserError(f"timestamps must be strictly increasing; {where} does not follow {index[backwards[0]]}")
    if tz is not None:
        if index.tz is None:
            raise UserError(f"cannot convert tz-naive timestamps to {tz!r}; localise them first")
        index = index.tz_convert(tz)
    return index


def is_intraday(timestamps: Any) -> bool:
    """True when some date holds more than one timestamp (the bars are intraday)."""
    index = pd.DatetimeIndex(timestamps)
    dates = index.normalize()
    return bool(len(dates) != len(dates.unique()))


def as_frame(values: Any, name: str) -> tuple[pd.DataFrame, bool]:
    """Any (T,) or (T, K) input as a positional DataFrame; and whether it was 1-D."""
    if isinstance(values, pd.DataFrame):
        return values.reset_index(drop=True), False
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True).to_frame(values.name if values.name is not None else 0), True
    array = to_float_array(values, name)
    if array.ndim not in (1, 2):
        raise UserError(f"{name} must be 1-D (T,) or 2-D (T, K); got shape {array.shape}")
    return pd.DataFrame(array.reshape(array.shape[0], -1) if array.ndim == 2 else array[:, None]), array.ndim == 1


def daily_returns(returns: Any, timestamps: Any, tz: str | None = None) -> pd.Series | pd.DataFrame:
    """Compound intraday (e.g. minute) returns into one return per exchange date.

    A day's return is prod(1 + r) - 1 over its bars, NaN bars counting as 0; a
    day whose bars are all NaN gives NaN. The first bar of a day carries the
    overnight move, so the daily returns chain close to close.

    :param returns: simple returns (T,) or (T, K), one per timestamp.
    :param timestamps: the T bar timestamps, strictly increasing.
    :param tz: time zone whose calendar dates group the bars; default: the
        timestamps' own zone (exchange time, America/New_York, in our data).
    :return: a Series (1-D input) or DataFrame indexed by date (tz-naive
        midnight, named "date"); DataFrame columns keep the input's columns.
    """
    frame, one_d = as_frame(returns, "returns")
    dates = exchange_dates(timestamps, len(frame), tz)
    daily = (frame + 1.0).groupby(dates).prod(min_count=1) - 1.0
    daily.index.name = "date"
    if not one_d:
        return daily
    series = daily.iloc[:, 0]
    series.name = returns.name if isinstance(returns, pd.Series) else None
    return series


def exchange_dates(timestamps: Any, length: int, tz: str | None) -> pd.DatetimeIndex:
    """Each bar's calendar date in ``tz`` (default: the timestamps' own zone), tz-naive midnight."""
    index = timestamp_index(timestamps, length, tz)
    return pd.DatetimeIndex(index.tz_localize(None) if index.tz is not None else index).normalize()


def daily_sum(values: Any, dates: pd.DatetimeIndex, name: str) -> pd.DataFrame:
    frame, _ = as_frame(values, name)
    return frame.groupby(dates).sum(min_count=1)


def daily_last(values: Any, dates: pd.DatetimeIndex, name: str) -> pd.DataFrame:
    frame, _ = as_frame(values, name)
    return frame.groupby(dates).last()
