"""The alpaca provider: split- and dividend-adjusted bars from Alpaca's market data API.

Requests go through alpaca-py's `StockHistoricalDataClient.get_stock_bars`
(`/v2/stocks/bars`, `adjustment="all"`, feed `sip` or `iex`), one ticker-month at a
time (see `chunks`); the client follows the API's `next_page_token` pages itself.
A free account serves minute bars from 2016 on (SIP: all but the last 15 minutes).

Keys come from APCA_API_KEY_ID and APCA_API_SECRET_KEY and go only to the client.

Rate limits: a free account may send 200 requests a minute. alpaca-py's own retry
waits a fixed 3 s, three times; it is switched off here so that the back-off is
ours: exponential from `backoff_s`, capped, at most `retries` waits, honouring the
server's `X-RateLimit-Reset`; then one `DataError` naming the ticker and window.
Server errors (5xx) and broken connections are retried the same way; rejected keys
(401, 403) and other refusals are one `ConfigError`/`DataError` at once.

Alpaca stamps bars in UTC at their start; daily bars at midnight New York time.
`calendar.to_session_bars` puts them on the exchange's sessions.
"""

from __future__ import annotations

import functools
import time

import pandas as pd

from market_envs.data.vendors import (
    AUTH_STATUS,
    RETRY_STATUS,
    Backoff,
    Retryable,
    env_credentials,
    one_line,
    vendor_minutes,
    window_text,
    with_backoff,
)
from market_envs.errors import ConfigError
from market_envs.data.panel import DataError

ENV_KEY_ID = "APCA_API_KEY_ID"
ENV_SECRET_KEY = "APCA_API_SECRET_KEY"
FEEDS = ("sip", "iex")
ADJUSTMENT = "all"
_COLUMNS = {"t": "timestamp", "o": "open", "h": "high", "l": "low", "c": "close", "v": "volume"}


class AlpacaBars:
    """Fetches one ticker's bars over one window through alpaca-py (a `chunks.BarVendor`).

    :param interval: "1min", "5min", ... (N dividing 30) or "1D".
    :param feed: "sip" (every US exchange) or "iex" (IEX only).
    :param url: the data API's base URL (default alpaca-py's); for a mirror or a test server.
    :param backoff: retry policy for rate limits and server errors.
    :param timeout_s: seconds to wait for the server to connect or answer; a stalled
        request then counts as a broken connection (retried, bounded).
    """

    name = "alpaca"

    def __init__(
        self,
        interval: str = "1min",
        feed: str = "sip",
        url: str | None = None,
        backoff: Backoff | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        if feed not in FEEDS:
            raise ConfigError(f"alpaca: feed {feed!r} is not one of {list(FEEDS)}")
        self.minutes = vendor_minutes(interval, "alpaca")
        self.feed = feed
        self.backoff = backoff or Backoff()
        key_id, secret = env_credentials(
            "alpaca", (ENV_KEY_ID, ENV_SECRET_KEY), " (the keys of a free Alpaca account serve minute bars since 2016)"
        )
        from alpaca.data.historical import StockHistoricalDataClient

        self._client = StockHistoricalDataClient(key_id, secret, raw_data=True, url_override=url)
        # alpaca-py retries a 429 three times after a fixed 3 s; our bounded back-off replaces it.
        self._client._retry = 0
        # alpaca-py sends its requests without a timeout, so a stalled connection would hang the build
        self._client._session.request = functools.partial(self._client._session.request, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"AlpacaBars(minutes={self.minutes}, feed={self.feed!r})"

    def request_key(self) -> dict:
        return {"interval_minutes": self.minutes or "1D", "adjustment": ADJUSTMENT, "feed": self.feed}

    def _request(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp):
        from alpaca.data.enums import Adjustment, DataFeed
        from alpaca.data.requests import StockBarsRequest
        from alpaca.data.timeframe import TimeFrame, TimeFrameUnit

        frame = (
            TimeFrame(1, TimeFrameUnit.Day) if self.minutes is None else TimeFrame(self.minutes, TimeFrameUnit.Minute)
        )
        return StockBarsRequest(
            symbol_or_symbols=ticker,
            timeframe=frame,
            start=start.tz_convert("UTC").to_pydatetime(),
            # the API's end is inclusive; a bar stamped at `end` belongs to the next window
            end=(end - pd.Timedelta(seconds=1)).tz_convert("UTC").to_pydatetime(),
            adjustment=Adjustment(ADJUSTMENT),
            feed=DataFeed(self.feed),
        )

    def _bars_once(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> dict:
        """Every page of one request; a retryable failure raises `Retryable`."""
        return self._call(
            lambda: self._client.get_stock_bars(self._request(ticker, start, end)),
            f"request for {window_text(ticker, start, end)}",
        )

    def latest_trades(self, tickers: list[str]) -> dict[str, float]:
        """The price of each ticker's latest trade (`/v2/stocks/trades/latest`, the feed's),
        with the same back-off; a ticker without one is left out."""
        from alpaca.data.enums import DataFeed
        from alpaca.data.requests import StockLatestTradeRequest

        what = f"request for the latest trades of {len(tickers)} ticker(s)"
        request = StockLatestTradeRequest(symbol_or_symbols=list(tickers), feed=DataFeed(self.feed))
        raw = (
            with_backoff(
                lambda: self._call(lambda: self._client.get_stock_latest_trade(request), what),
                self.backoff,
                f"alpaca: {what}",
            )
            or {}
        )
        return {ticker: float(trade["p"]) for ticker, trade in raw.items() if trade and trade.get("p")}

    def _call(self, request, what: str):
        """``request()``; a retryable failure raises `Retryable`, refused keys one `ConfigError`,
        any other refusal one `DataError` (``what``: "request for AAA 2024-01-02 .. ...")."""
        import requests
        from alpaca.common.exceptions import APIError

        try:
            return request()
        except APIError as err:
            status, detail = err.status_code or 0, api_message(err)
            if status in RETRY_STATUS:
                raise Retryable(status, detail, _reset_hint(err)) from None
            if status in AUTH_STATUS:
                raise ConfigError(
                    f"alpaca refused the {what} (HTTP {status}: {detail}); "
                    f"check {ENV_KEY_ID} and {ENV_SECRET_KEY} and the account's data subscription"
                ) from None
            raise DataError(f"alpaca: {what} failed (HTTP {status}: {detail})") from None
        except (requests.ConnectionError, requests.Timeout) as err:
            raise Retryable(0, one_line(type(err).__name__)) from None

    def fetch(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        what = f"alpaca: {window_text(ticker, start, end)}"
        raw = with_backoff(lambda: self._bars_once(ticker, start, end), self.backoff, what)
        rows = (raw or {}).get(ticker, [])
        frame = pd.DataFrame(rows, columns=list(_COLUMNS)).rename(columns=_COLUMNS)
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True, format="ISO8601")
        frame.insert(1, "ticker", ticker)
        return frame


def api_message(err) -> str:
    """The API's message (JSON `message`, else the body) as one line; never request headers."""
    try:
        return one_line(err.message)
    except (ValueError, KeyError, TypeError):
        return one_line(str(err)) or "no message"


def _reset_hint(err) -> float | None:
    """Seconds until the rate-limit window resets, from `X-RateLimit-Reset` (epoch seconds)."""
    response = err.response
    value = None if response is None else response.headers.get("X-RateLimit-Reset")
    try:
        return max(0.0, float(value) - time.time()) if value is not None else None
    except ValueError:
        return None
