"""Choosing the data and the period a backtest runs on."""

from __future__ import annotations

import pandas as pd

from market_envs.data import DataError, MarketData
from trader.errors import UserError

NAMED_PERIODS = ("test", "validation", "train")
"""Periods named by a data set's split dates (`MarketData.period`)."""


def load_dataset(recipe: str) -> MarketData:
    """The full panel of a data set recipe (by name or path), through `market_envs.data.load`,
    once per process (`trader.environments.load_market`)."""
    from trader.environments import load_market

    return load_market(recipe)


def select_period(data: MarketData, period: str | None) -> tuple[MarketData, str]:
    """The bars of `period` and the period's name.

    :param period: "test", "validation" or "train" (the data set's split dates),
        "START:END" (dates or timestamps in exchange time; a date-only END
        includes that whole day), or None / "all" for the whole panel as given.
    :raises UserError: a malformed period, or one not inside the data.
    """
    if period is None or period == "all":
        return data, "all"
    if period in NAMED_PERIODS:
        return data.period(period), period
    if ":" not in period:
        raise UserError(f"period must be test, validation, train or START:END; got {period!r}")
    return _date_range(data, period), period


def _parse(text: str, period: str, tz: str) -> tuple[pd.Timestamp, bool]:
    """A bound as an exchange-time timestamp, and whether it was a bare date."""
    try:
        stamp = pd.Timestamp(text.strip())
    except (ValueError, TypeError) as err:
        raise UserError(f"period {period!r}: cannot read {text!r} as a date or timestamp") from err
    if stamp is pd.NaT:
        raise UserError(f"period {period!r}: cannot read {text!r} as a date or timestamp")
    bare_date = stamp == stamp.normalize() and ":" not in text and "T" not in text
    stamp = stamp.tz_localize(tz) if stamp.tzinfo is None else stamp.tz_convert(tz)
    return stamp, bare_date


def _date_range(data: MarketData, period: str) -> MarketData:
    """Bars with START <= timestamp <= END, refusing a range that leaves the data."""
    tz = str(data.timestamps.tz)
    start_text, end_text = period.split(":", 1) if period.count(":") == 1 else _split_timestamps(period)
    start, _ = _parse(start_text, period, tz)
    end, end_is_date = _parse(end_text, period, tz)
    end_exclusive = end + pd.Timedelta(days=1) if end_is_date else end + pd.Timedelta(microseconds=1)
    if start >= end_exclusive:
        raise UserError(f"period {period!r}: START must come before END")
    if start < data.start.normalize() or end_exclusive > data.end.normalize() + pd.Timedelta(days=1):
        raise UserError(
            f"period {period!r} lies outside the data of {data.name!r}, which spans "
            f"{data.start.date()} .. {data.end.date()}"
        )
    part = data.slice(start, end_exclusive)
    return _with_training_normalization(data, part)


def _split_timestamps(period: str) -> tuple[str, str]:
    """Split "START:END" where the bounds carry times (and colons) of their own."""
    for separator in (" : ", "::", "/"):
        if separator in period:
            start, end = period.split(separator, 1)
            return start, end
    raise UserError(
        f"period {period!r} is ambiguous: with times in the bounds, separate them with ' : ' "
        f"(e.g. '2024-03-04 09:30 : 2024-03-08 16:00')"
    )


def _with_training_normalization(full: MarketData, part: MarketData) -> MarketData:
    """Carry the training period's normalisation statistics, as `MarketData.split` does."""
    if part.feature_mean is not None:
        return part
    if "train_end" in full.meta and "val_end" in full.meta:
        train = full.slice(None, full.meta["train_end"])
        mean, std = train.fit_normalization()
        return part.with_normalization(mean, std)
    return part


def require_bars(data: MarketData, minimum: int = 2) -> None:
    """A backtest needs at least two bars: one to decide on, one to fill at."""
    if data.num_bars < minimum:
        raise DataError(f"period of {data.name!r} holds {data.num_bars} bar(s); a backtest needs at least {minimum}")
