"""Where the paper loop gets its bars and prices: a replayed period, or Alpaca's data API.

Both answer the same three questions:

- `panel_at(now)`: the panel through the latest bar that has closed by ``now``, and
  that bar's index. Its features are the training's (`market_envs.data`'s indicator code,
  the run's normalisation statistics);
- `next_open(panel, t)`: when the bar after bar ``t`` opens (the backtest fills bar
  ``t``'s decision there); None when there is none (the end of a replayed period);
- `prices(panel, t, now)`: the price of each ticker at the open the orders go out at.

`ReplayFeed` hands out the replayed period's panel whole, with the index of the bar
the clock has reached: the env reads rows up to that bar only (an action at t never
depends on data after t, an invariant of the env that tests/test_paper.py checks again
by scrambling every bar after the decision). `AlpacaFeed` fetches each time the last
sessions of the universe and the benchmark through alpaca-py (`AlpacaBars`, with its
bounded back-off), enough to warm up every indicator and cost estimate, and builds the
panel with the same code as a data set (`market_envs.data.vendors.vendor_panel`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from market_envs.data.panel import MarketData
from trader.errors import UserError
from podracer.paper.hours import MarketHours


class ReplayFeed:
    """A historical period as the clock reaches it.

    :param panel: the period's bars (carrying the training's normalisation statistics).
    :param hours: the calendar; every bar must lie in one of its sessions.
    """

    def __init__(self, panel: MarketData, hours: MarketHours) -> None:
        self.panel, self.hours = panel, hours
        self.ends = _bar_ends(panel.timestamps, hours)

    @property
    def start(self) -> pd.Timestamp:
        """The time the replay starts at: the close of the period's first bar."""
        return self.ends[0]

    def panel_at(self, now: pd.Timestamp) -> tuple[MarketData, int | None]:
        t = int(self.ends.searchsorted(pd.Timestamp(now), side="right")) - 1
        return self.panel, (t if t >= 0 else None)

    def next_open(self, panel: MarketData, t: int) -> pd.Timestamp | None:
        return panel.timestamps[t + 1] if t + 1 < panel.num_bars else None

    def prices(self, panel: MarketData, t: int, now: pd.Timestamp) -> np.ndarray:
        """The open of the bar after ``t``: the price the backtest fills at."""
        return panel.open[t + 1].double().cpu().numpy()


def _bar_ends(stamps: pd.DatetimeIndex, hours: MarketHours) -> pd.DatetimeIndex:
    """When each bar closes (its stamp plus the interval, or its session's close)."""
    days = stamps.tz_localize(None).normalize()
    table = hours.sessions_between(stamps[0], stamps[-1])
    closes = pd.DatetimeIndex(table["close"].reindex(days))
    if closes.isna().any():
        bad = stamps[np.asarray(closes.isna())][0]
        raise UserError(
            f"bar {bad} of the data set lies outside the exchange calendar's sessions; "
            "a replay needs bars on the calendar"
        )
    if hours.minutes is None:
        return closes
    step = stamps + pd.Timedelta(minutes=hours.minutes)
    return step.where(step < closes, closes)


class AlpacaFeed:
    """Recent bars and latest trades of the run's universe from Alpaca's data API.

    :param tickers: the run's tickers (the panel keeps their order).
    :param benchmark: the run's benchmark ticker, or None.
    :param interval: the run's bar interval.
    :param statistics: (mean, std) of the run's features (its training period's).
    :param feature_names: the run's features, which the fetched panel must have.
    :param history_bars: bars of history every indicator and cost estimate needs.
    :param url: the data API's base URL (None: alpaca-py's).
    :param feed: "iex" or "sip".
    """

    def __init__(
        self,
        tickers: tuple[str, ...],
        benchmark: str | None,
        interval: str,
        statistics: tuple[Any, Any],
        feature_names: tuple[str, ...],
        hours: MarketHours,
        history_bars: int,
        url: str | None = None,
        feed: str = "iex",
        backoff: Any = None,
    ) -> None:
        from market_envs.data.alpaca import AlpacaBars

        self.tickers, self.benchmark, self.interval = tuple(tickers), benchmark, interval
        self.statistics, self.feature_names, self.hours = statistics, tuple(feature_names), hours
        self.vendor = AlpacaBars(interval, feed=feed, url=url, backoff=backoff)
        per_session = 1 if hours.minutes is None else max(1, 390 // hours.minutes)
        self.sessions = int(math.ceil(history_bars / per_session)) + 1

    def panel_at(self, now: pd.Timestamp) -> tuple[MarketData, int]:
        from market_envs.data.vendors import vendor_panel

        last = self.hours.latest_closed_bar(now)
        start, end = self.hours.sessions_back(now, self.sessions), self.hours.bar_end(last)
        data = vendor_panel(
            _Window(self.vendor, start, end),
            list(self.tickers),
            start,
            end,
            interval=self.interval,
            benchmark=self.benchmark,
            store=None,
            name="paper",
            now=pd.Timestamp(now),
        )
        if tuple(data.feature_names) != self.feature_names:
            raise UserError(
                f"the data API's bars give features {list(data.feature_names)}; the run was trained on "
                f"{list(self.feature_names)}"
            )
        return data.with_normalization(*self.statistics), data.num_bars - 1

    def next_open(self, panel: MarketData, t: int) -> pd.Timestamp:
        return self.hours.next_bar(panel.timestamps[t])

    def prices(self, panel: MarketData, t: int, now: pd.Timestamp) -> np.ndarray:
        """The latest trade of each ticker (NaN where there is none: no order goes out for it)."""
        latest = self.vendor.latest_trades(list(self.tickers))
        return np.array([latest.get(t, math.nan) for t in self.tickers], dtype=np.float64)


class _Window:
    """A `BarVendor` that fetches only [lo, hi) of whatever window it is asked for: the chunk
    reader asks for whole months, the loop needs its last few sessions."""

    def __init__(self, vendor: Any, lo: pd.Timestamp, hi: pd.Timestamp) -> None:
        self.vendor, self.lo, self.hi = vendor, lo, hi
        self.name = vendor.name

    def request_key(self) -> dict:
        return self.vendor.request_key()

    def fetch(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        lo, hi = max(pd.Timestamp(start), self.lo), min(pd.Timestamp(end), self.hi)
        if lo >= hi:
            return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
        return self.vendor.fetch(ticker, lo, hi)
