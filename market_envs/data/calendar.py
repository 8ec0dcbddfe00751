"""Exchange sessions and bar timestamps on the NYSE calendar (XNYS).

Regular sessions run 09:30-16:00 America/New_York on NYSE trading days; holidays
and early closes (13:00 on the day after Thanksgiving, Christmas Eve, ...) come from
`exchange_calendars`.

**Bars are stamped at their open.** A "1min" bar stamped 09:30 covers
[09:30, 09:31); the last minute bar of a regular session is stamped 15:59, so a
full session has 390 minute bars and a 13:00 early close has 210. An "N min" bar
stamped s covers [s, s + N min), cut short at the close. A daily bar ("1D") covers
the whole session and is stamped at the session's open (09:30), the same rule.
"""

from __future__ import annotations

import functools
import re
import warnings

import numpy as np
import pandas as pd

from market_envs.data.panel import EXCHANGE_TZ, DataError
from market_envs.errors import ConfigError

CALENDAR_NAME = "XNYS"
"""The exchange calendar every provider uses (NYSE; NASDAQ keeps the same sessions)."""

DAILY_ALIASES = ("1d", "d", "1day", "day", "daily")
_MINUTES = re.compile(r"^\s*(\d+)\s*(min|m|minute|minutes|t|h|hour|hours)\s*$", re.IGNORECASE)


def bar_minutes(interval: str) -> int | None:
    """Minutes per bar for an intraday interval ("1min", "5min", "1h"); None for daily.

    Raises `ConfigError` for anything else, naming the accepted forms.
    """
    text = str(interval).strip().lower()
    if text in DAILY_ALIASES:
        return None
    match = _MINUTES.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise ConfigError(f"interval {interval!r} is not understood; use 'Nmin' (1min, 5min, 15min), 'Nh' or '1D'")
    count = int(match.group(1))
    minutes = count * 60 if match.group(2).lower().startswith("h") else count
    if minutes > 390:
        raise ConfigError(f"interval {interval!r} is longer than a session (390 minutes); use '1D'")
    return minutes


@functools.lru_cache(maxsize=8)
def _calendar(first_year: int, last_year: int):
    import exchange_calendars

    start = pd.Timestamp(f"{first_year}-01-01")
    end = pd.Timestamp(f"{last_year}-12-31")
    with warnings.catch_warnings():
        # exchange_calendars 4.x reads tz-aware Series.values, deprecated by pandas 3.1
        warnings.filterwarnings("ignore", message="Series.values returning an ndarray")
        return exchange_calendars.get_calendar(CALENDAR_NAME, start=start, end=end)


def _day(value, what: str) -> pd.Timestamp:
    """A date-like value as a naive midnight Timestamp (its exchange-time date)."""
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ConfigError(f"{what} {value!r} is not a date") from None
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert(EXCHANGE_TZ).tz_localize(None)
    return stamp.normalize()


def sessions(start, end) -> pd.DataFrame:
    """Trading sessions with start <= date < end (`end` exclusive, like every range here).

    Returns a frame indexed by session date (naive) with tz-aware `open` and `close`
    columns in exchange time. Weekends and NYSE holidays are absent; early closes
    have their real close.
    """
    first, last = _day(start, "start"), _day(end, "end")
    if last <= first:
        raise ConfigError(f"session range is empty: start {start} is not before end {end}")
    if first.year < 1990:
        raise ConfigError(f"start {start} is before 1990; the exchange calendar is not kept that far back")
    calendar = _calendar(first.year, last.year)
    schedule = calendar.schedule.loc[first : last - pd.Timedelta(days=1), ["open", "close"]]
    if len(schedule) == 0:
        raise ConfigError(f"no trading session between {start} and {end} (weekend or holiday only)")
    return pd.DataFrame(
        {
            "open": schedule["open"].dt.tz_convert(EXCHANGE_TZ),
            "close": schedule["close"].dt.tz_convert(EXCHANGE_TZ),
        },
        index=pd.DatetimeIndex(schedule.index.tz_localize(None) if schedule.index.tz else schedule.index),
    )


def session_minutes(start, end, interval: str = "1min") -> pd.DatetimeIndex:
    """Bar timestamps (stamped at each bar's open) of every session in [start, end).

    :param start: first date (inclusive); a date, string or Timestamp.
    :param end: last date (exclusive).
    :param interval: "Nmin" (1min, 5min, 30min, ...), "Nh" or "1D". Intraday bars
        start at the open and every N minutes after while they start before the
        close; daily bars are stamped at the session open.
    :returns: a tz-aware DatetimeIndex in America/New_York, strictly increasing.
    """
    return session_bars(start, end, interval)[0]


def session_bars(start, end, interval: str = "1min") -> tuple[pd.DatetimeIndex, np.ndarray, np.ndarray]:
    """Bar timestamps plus, for each bar, its session number and its position in the day.

    :returns: (timestamps [T], session index [T] int64 counting from 0, time of day
        [T] float64: the fraction of the bar's own session elapsed at the bar's
        midpoint, 0 at the open and 1 at the close, early closes included; daily
        bars get 0.5).
    """
    step = bar_minutes(interval)
    table = sessions(start, end)
    opens = table["open"].to_numpy(dtype="datetime64[ns]")
    if step is None:
        stamps = pd.DatetimeIndex(table["open"]).rename(None)
        return stamps, np.arange(len(table), dtype=np.int64), np.full(len(table), 0.5)
    length = ((table["close"] - table["open"]) / pd.Timedelta(minutes=1)).to_numpy().astype(np.int64)
    per_session = -(-length // step)  # bars starting before the close
    session = np.repeat(np.arange(len(table), dtype=np.int64), per_session)
    first_bar = np.cumsum(per_session) - per_session
    offset_min = (np.arange(len(session)) - first_bar[session]) * step
    stamps = opens[session] + offset_min.astype("timedelta64[m]")
    end_min = np.minimum(offset_min + step, length[session])
    time_of_day = (offset_min + end_min) / 2.0 / length[session]
    index = pd.DatetimeIndex(stamps, tz="UTC").tz_convert(EXCHANGE_TZ)
    return index, session, time_of_day


OUTSIDE_SESSION = ("drop", "refuse")
"""What to do with a vendor bar outside the regular session: drop it, or refuse the data."""


def _session_table(first: pd.Timestamp, last: pd.Timestamp) -> pd.DataFrame:
    """Sessions with first <= date <= last (naive dates); empty when there is none."""
    calendar = _calendar(first.year, last.year)
    schedule = calendar.schedule.loc[first:last, ["open", "close"]]
    index = pd.DatetimeIndex(schedule.index.tz_localize(None) if schedule.index.tz else schedule.index)
    return pd.DataFrame({name: schedule[name].dt.tz_convert(EXCHANGE_TZ).set_axis(index) for name in ("open", "close")})


def to_session_bars(
    long: pd.DataFrame, interval: str, outside: str = "drop", source: str | None = None
) -> tuple[pd.DataFrame, int]:
    """Vendor bars (tz-aware, any zone: vendors send UTC) on the regular-session grid.

    Timestamps become exchange time (America/New_York, so both daylight-saving
    changes are the calendar's business, not ours). An intraday bar is kept when it
    starts inside a regular session (open <= t < close, early closes and holidays
    from `exchange_calendars`) on the interval's grid from the open; a daily bar is
    kept when its exchange-time date is a session, and is restamped at that
    session's open (the panel's rule, see the module docstring).

    :param outside: "drop" the other bars (pre- and after-market, holidays), or
        "refuse" them with a `DataError` naming the ticker and the timestamp.
    :returns: (the kept bars, how many were dropped).
    """
    if outside not in OUTSIDE_SESSION:
        raise ConfigError(f"outside_session {outside!r} is not one of {list(OUTSIDE_SESSION)}")
    where = f"{source}: " if source else ""
    if len(long) == 0:
        return long, 0
    stamps = pd.DatetimeIndex(long["timestamp"]).tz_convert(EXCHANGE_TZ)
    days = stamps.tz_localize(None).normalize()
    table = _session_table(days.min(), days.max())
    opens = pd.DatetimeIndex(table["open"].reindex(days))
    closes = pd.DatetimeIndex(table["close"].reindex(days))
    is_session = ~opens.isna()
    step = bar_minutes(interval)
    if step is None:
        inside = is_session
        stamps = pd.DatetimeIndex(_choose(inside, opens, stamps))
    else:
        offset = (stamps - opens) / pd.Timedelta(minutes=1)
        inside = is_session & (stamps >= opens) & (stamps < closes) & (np.mod(offset, step) == 0)
    inside = np.asarray(inside, dtype=bool)
    if not inside.all() and outside == "refuse":
        first = int(np.argmin(inside))
        day = days[first]
        hours = (
            "a weekend or holiday: no session"
            if not is_session[first]
            else (
                f"the session runs {opens[first]:%H:%M}-{closes[first]:%H:%M}"
                + ("" if step is None or step == 1 else f" in {step}-minute bars from the open")
            )
        )
        raise DataError(
            f"{where}ticker {long['ticker'].iloc[first]} at {stamps[first]}: bar outside the regular session "
            f'on {day:%Y-%m-%d} ({hours}); set outside_session = "drop" to drop such bars'
        )
    kept = long.assign(timestamp=stamps)[inside].reset_index(drop=True)
    return kept, int((~inside).sum())


def _choose(mask, yes: pd.DatetimeIndex, no: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """Element-wise choice between two tz-aware indexes of one zone."""
    values = np.where(np.asarray(mask, dtype=bool), yes.asi8, no.asi8)
    return pd.DatetimeIndex(values.astype("datetime64[ns]")).tz_localize("UTC").tz_convert(EXCHANGE_TZ)
