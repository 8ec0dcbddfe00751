"""The polygon provider: split-adjusted aggregate bars from Polygon.io (now Massive).

Requests go through the `massive` client (formerly polygon-api-client):
`RESTClient.list_aggs`, the aggregates endpoint
`/v2/aggs/ticker/{ticker}/range/{N}/{minute|day}/{from}/{to}` with `adjusted=true`,
one ticker-month at a time (see `chunks`); the client follows the API's `next_url`
pages itself.

The key comes from MASSIVE_API_KEY (the client's own variable) or POLYGON_API_KEY
and goes only to the client.

Rate limits: the free plan allows 5 requests a minute. The client's urllib3 retry
(a fixed 0.1 s back-off factor) is switched off (`retries=0`) so that the back-off
is ours, as for alpaca: exponential from `backoff_s`, capped, at most `retries`
waits; then one `DataError` naming the ticker and window. Rejected keys are one
`ConfigError` at once.

Polygon stamps bars in Unix milliseconds (UTC) at their start; daily bars at
midnight New York time. `calendar.to_session_bars` puts them on the exchange's
sessions.

Renamed tickers: Polygon lists a security under the symbol it had on each day (FB
until 2022-06-08, META from 2022-06-09). With the ``[polygon] renames`` option (a
renames file, `market_envs.data.membership.read_renames`) a ticker's window is asked
for under each symbol it had in it and the parts are joined under the ticker.
"""

from __future__ import annotations

import json
import os
import re

import pandas as pd

from market_envs.data.membership import Rename, symbol_segments
from market_envs.data.panel import DataError
from market_envs.data.vendors import (
    Backoff,
    Retryable,
    one_line,
    vendor_minutes,
    window_text,
    with_backoff,
)
from market_envs.errors import ConfigError

ENV_KEYS = ("MASSIVE_API_KEY", "POLYGON_API_KEY")
PAGE_LIMIT = 50_000
_STATUS = re.compile(r"too many (\d+) error responses")


class PolygonBars:
    """Fetches one ticker's aggregates over one window through `massive` (a `chunks.BarVendor`).

    :param interval: "1min", "5min", ... (N dividing 30) or "1D".
    :param url: the API's base URL (default the client's); for a mirror or a test server.
    :param backoff: retry policy for rate limits, server errors and broken connections.
    :param renames: the renamed tickers (see the module docstring); none by default.
    """

    name = "polygon"

    def __init__(
        self,
        interval: str = "1min",
        url: str | None = None,
        backoff: Backoff | None = None,
        renames: list[Rename] | None = None,
    ) -> None:
        self.minutes = vendor_minutes(interval, "polygon")
        self.backoff = backoff or Backoff()
        self.renames = list(renames or [])
        key = next((os.environ[n].strip() for n in ENV_KEYS if os.environ.get(n, "").strip()), None)
        if key is None:
            raise ConfigError(
                f"polygon: set {ENV_KEYS[0]} (or {ENV_KEYS[1]}) in the environment to your Polygon/Massive API key"
            )
        from massive import RESTClient

        options = {} if url is None else {"base": url.rstrip("/")}
        self._client = RESTClient(api_key=key, retries=0, connect_timeout=10.0, read_timeout=60.0, **options)

    def __repr__(self) -> str:
        return f"PolygonBars(minutes={self.minutes})"

    def request_key(self) -> dict:
        key = {"interval_minutes": self.minutes or "1D", "adjusted": True}
        if self.renames:  # a cached chunk of a renamed ticker depends on them
            key["renames"] = sorted([r.ticker, r.old, f"{r.until:%Y-%m-%d}"] for r in self.renames)
        return key

    def _aggs_once(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> list:
        """Every page of one request; a retryable failure raises `Retryable`."""
        from massive.exceptions import BadResponse
        from urllib3.exceptions import MaxRetryError

        multiplier, timespan = (1, "day") if self.minutes is None else (self.minutes, "minute")
        try:
            return list(
                self._client.list_aggs(
                    ticker,
                    multiplier,
                    timespan,
                    int(start.timestamp() * 1000),
                    int(end.timestamp() * 1000) - 1,  # the API's `to` is inclusive
                    adjusted=True,
                    sort="asc",
                    limit=PAGE_LIMIT,
                )
            )
        except MaxRetryError as err:  # a retryable status (retries=0) or a broken connection
            match = _STATUS.search(str(err.reason))
            status = int(match.group(1)) if match else 0
            raise Retryable(status, one_line(type(err.reason).__name__)) from None
        except BadResponse as err:
            raise _refusal(str(err), ticker, start, end) from None

    def fetch(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        """One ticker's bars over [start, end), asked for under each symbol it had (renames)."""
        parts = [
            self._fetch_symbol(symbol, lo, hi).assign(ticker=ticker)
            for symbol, lo, hi in symbol_segments(ticker, start, end, self.renames)
        ]
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)

    def _fetch_symbol(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        what = f"polygon: {window_text(ticker, start, end)}"
        aggs = with_backoff(lambda: self._aggs_once(ticker, start, end), self.backoff, what)
        frame = pd.DataFrame(
            {
                "timestamp": pd.to_datetime([a.timestamp for a in aggs], unit="ms", utc=True),
                "ticker": ticker,
                "open": [a.open for a in aggs],
                "high": [a.high for a in aggs],
                "low": [a.low for a in aggs],
                "close": [a.close for a in aggs],
                "volume": [a.volume for a in aggs],
            }
        )
        return frame


def _refusal(body: str, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> Exception:
    """The error for a non-retryable answer: rejected keys, or anything else."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = {}
    detail = (
        one_line(parsed.get("error") or parsed.get("message") or body) if isinstance(parsed, dict) else one_line(body)
    )
    status = parsed.get("status") if isinstance(parsed, dict) else None
    if status == "NOT_AUTHORIZED" or "api key" in detail.lower():
        return ConfigError(
            f"polygon refused the request for {window_text(ticker, start, end)} ({status}: {detail}); "
            f"check {ENV_KEYS[0]} / {ENV_KEYS[1]} and the plan's data entitlements"
        )
    return DataError(f"polygon: request for {window_text(ticker, start, end)} failed ({status or 'error'}: {detail})")
