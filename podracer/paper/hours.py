"""Market hours for the paper loop: when a bar closes, when the next one opens.

The sessions are the exchange calendar's (`market_envs.data.calendar`, NYSE through
exchange-calendars: holidays and early closes included), the calendar every data
provider puts its bars on. Bars are stamped at their open (the panel's rule): an
``N``-minute bar stamped ``s`` covers ``[s, s + N)``, cut short at the close; a
daily bar is stamped at the session's open and covers the whole session.

The loop asks these questions of the calendar and checks the broker's clock against
the answers (`check_clock`): an order goes out only when both say the session is open.
"""

from __future__ import annotations

import pandas as pd

from market_envs.data.calendar import bar_minutes, sessions
from market_envs.data.panel import EXCHANGE_TZ
from trader.errors import UserError


class ClockMismatch(UserError):
    """The broker's clock and the exchange calendar disagree about whether the market is open."""


def _exchange(stamp) -> pd.Timestamp:
    stamp = pd.Timestamp(stamp)
    return stamp.tz_localize(EXCHANGE_TZ) if stamp.tzinfo is None else stamp.tz_convert(EXCHANGE_TZ)


class MarketHours:
    """The bar grid of one interval on the exchange calendar.

    :param interval: the data set's bar interval ("1min", "5min", "1D", ...).
    """

    def __init__(self, interval: str) -> None:
        self.interval = interval
        self.minutes = bar_minutes(interval)
        self._table: pd.DataFrame | None = None
        self._span: tuple[pd.Timestamp, pd.Timestamp] = (pd.Timestamp.max, pd.Timestamp.min)

    def sessions_between(self, first, last) -> pd.DataFrame:
        """Sessions whose date lies in [first, last] (dates in exchange time), ``open`` and
        ``close`` columns indexed by the naive date. Read from a table of the calendar that
        is fetched a year at a time and kept: the loop asks many times a bar."""
        lo, hi = _exchange(first).tz_localize(None).normalize(), _exchange(last).tz_localize(None).normalize()
        if self._table is None or lo < self._span[0] or hi > self._span[1]:
            span_lo = min(lo, self._span[0]) if self._table is not None else lo
            span_hi = max(hi, self._span[1]) if self._table is not None else hi
            span_lo, span_hi = span_lo - pd.Timedelta(days=30), span_hi + pd.Timedelta(days=366)
            try:
                self._table = sessions(span_lo, span_hi + pd.Timedelta(days=1))
            except UserError:  # no session in the range
                self._table = pd.DataFrame(columns=["open", "close"], index=pd.DatetimeIndex([]))
            self._span = (span_lo, span_hi)
        return self._table.loc[lo:hi]

    def session_of(self, when) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """(open, close) of the session whose date is ``when``'s date (exchange time); None on
        a weekend or a holiday."""
        table = self.sessions_between(when, when)
        if len(table) == 0:
            return None
        return table["open"].iloc[0], table["close"].iloc[0]

    def is_open(self, when) -> bool:
        """Whether the calendar has the market open at ``when`` (open <= when < close)."""
        when = _exchange(when)
        session = self.session_of(when)
        return session is not None and session[0] <= when < session[1]

    def bar_end(self, stamp) -> pd.Timestamp:
        """When the bar stamped ``stamp`` closes: ``stamp + N`` minutes, or the session's close."""
        stamp = _exchange(stamp)
        session = self.session_of(stamp)
        if session is None:
            raise UserError(f"{stamp} is not in a trading session of the exchange calendar")
        if self.minutes is None:
            return session[1]
        return min(stamp + pd.Timedelta(minutes=self.minutes), session[1])

    def next_bar(self, stamp) -> pd.Timestamp:
        """The stamp (open) of the bar after ``stamp``: the next one in the session, else the
        next session's open (weekends and holidays skipped)."""
        stamp = _exchange(stamp)
        if self.minutes is not None:
            following = stamp + pd.Timedelta(minutes=self.minutes)
            session = self.session_of(stamp)
            if session is not None and following < session[1]:
                return following
        return self.next_open(stamp.normalize() + pd.Timedelta(days=1))

    def next_open(self, when) -> pd.Timestamp:
        """The first session open at or after ``when``."""
        when = _exchange(when)
        table = self.sessions_between(when, when + pd.Timedelta(days=14))
        opens = table["open"][table["open"] >= when]
        if len(opens) == 0:
            raise UserError(f"no trading session in the two weeks after {when}")
        return opens.iloc[0]

    def _bars_of(self, open_: pd.Timestamp, close: pd.Timestamp) -> tuple[pd.DatetimeIndex, pd.DatetimeIndex]:
        """The stamps of one session's bars and when each closes."""
        if self.minutes is None:
            return pd.DatetimeIndex([open_]), pd.DatetimeIndex([close])
        stamps = pd.date_range(open_, close, freq=f"{self.minutes}min", inclusive="left")
        ends = (stamps + pd.Timedelta(minutes=self.minutes)).where(
            stamps + pd.Timedelta(minutes=self.minutes) < close, close
        )
        return stamps, pd.DatetimeIndex(ends)

    def latest_closed_bar(self, now) -> pd.Timestamp:
        """The stamp of the latest bar that has closed by ``now``."""
        now = _exchange(now)
        table = self.sessions_between(now - pd.Timedelta(days=14), now)
        for open_, close in zip(table["open"][::-1], table["close"][::-1]):
            stamps, ends = self._bars_of(open_, close)
            closed = stamps[ends <= now]
            if len(closed):
                return closed[-1]
        raise UserError(f"no bar closed in the two weeks before {now}")

    def sessions_back(self, now, count: int) -> pd.Timestamp:
        """The open of the session ``count`` sessions before the latest one at or before ``now``."""
        now = _exchange(now)
        table = self.sessions_between(now - pd.Timedelta(days=2 * count + 14), now)
        table = table[table["open"] <= now]
        return table["open"].iloc[max(0, len(table) - 1 - count)]

    def check_clock(self, now, broker_open: bool) -> None:
        """Refuse to go on when the broker's clock and the calendar disagree at ``now``.

        :raises ClockMismatch: one line saying who says what.
        """
        calendar_open = self.is_open(now)
        if calendar_open != broker_open:
            says = "open" if broker_open else "closed"
            session = self.session_of(now)
            calendar = (
                f"the exchange calendar has the session {session[0]:%H:%M}-{session[1]:%H:%M}"
                if session is not None
                else "the exchange calendar has no session that day"
            )
            raise ClockMismatch(
                f"the broker's clock says the market is {says} at {_exchange(now)}, but {calendar}; no order is sent"
            )
