"""What the paid-data vendors (alpaca, polygon) share: keys from the environment,
bounded back-off on rate limits, and the road from downloaded chunks to a panel.

`vendor_panel` runs the steps every vendor needs, in order:

1. `chunks.ChunkReader`: ticker-month chunks, cached whole, resumable;
2. `calendar.to_session_bars`: UTC bars to exchange time on the regular sessions of
   the exchange calendar (bars outside them dropped or refused);
3. presence: a ticker without a single bar in the window is an error naming it
   (unknown symbol, or not listed then), or is dropped with a warning when the
   recipe says `drop_missing`; the benchmark is always required;
4. `stream.stream_panel`: the panel filled one ticker at a time (gap filling, the
   tradable mask, indicators, as `frame.from_frame` does), `ragged`, since over
   years tickers list (or join) after the window starts.

Credentials are read from the environment when a provider is built and handed to
the vendor's client; they are never part of a cache key, a recipe, a panel's
metadata or a message.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from market_envs.data.cache import DataCache
from market_envs.data.calendar import bar_minutes, to_session_bars
from market_envs.data.chunks import BarVendor, ChunkReader, DownloadBar
from market_envs.data.stream import stream_panel
from market_envs.data.panel import EXCHANGE_TZ, DataError, MarketData
from market_envs.errors import ConfigError

RETRY_STATUS = (429, 500, 502, 503, 504)
"""HTTP statuses worth waiting for: rate limited, or the server is briefly unwell."""
AUTH_STATUS = (401, 403)


def env_credentials(provider: str, names: tuple[str, ...], hint: str = "") -> tuple[str, ...]:
    """The values of the environment variables `names`; one line naming them if any is unset."""
    values = tuple(os.environ.get(name, "").strip() for name in names)
    if not all(values):
        unset = [n for n, v in zip(names, values) if not v]
        raise ConfigError(f"{provider}: set {' and '.join(names)} in the environment (unset: {', '.join(unset)}){hint}")
    return values


def vendor_minutes(interval: str, provider: str) -> int | None:
    """Minutes per bar, or None for daily bars, for the intervals the vendors serve on the
    session grid: N minutes with N dividing 30 (bars aligned to the clock then start on
    the 09:30 open), or one day."""
    minutes = bar_minutes(interval)
    if minutes is not None and 30 % minutes:
        raise ConfigError(
            f"{provider}: interval {interval!r} is not served on the session grid; use 1min, 2min, 3min, "
            "5min, 6min, 10min, 15min, 30min or 1D"
        )
    return minutes


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential back-off: at most `retries` waits of base_s, 2 base_s, ...
    each capped at cap_s (a vendor's own reset time is honoured up to that cap)."""

    retries: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.base_s < 0 or self.cap_s < self.base_s:
            raise ConfigError(f"back-off needs retries >= 0 and 0 <= backoff_s <= {self.cap_s}; got {self}")

    def wait(self, attempt: int, hint_s: float | None = None) -> float:
        """Seconds to wait before retry `attempt` (0-based)."""
        wait = self.base_s * 2**attempt
        if hint_s is not None:
            wait = max(wait, hint_s)
        return min(wait, self.cap_s)


class Retryable(Exception):
    """Raised by a vendor's request function for a failure worth retrying.

    :param status: the HTTP status (or 0 for a broken connection), for the final message.
    :param hint_s: seconds the server asked us to wait, if it said.
    """

    def __init__(self, status: int, detail: str, hint_s: float | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.hint_s = status, detail, hint_s


def with_backoff(call: Callable, backoff: Backoff, what: str, sleep: Callable[[float], None] = time.sleep):
    """`call()`, retried on `Retryable` with `backoff`; then one `DataError` naming `what`."""
    waited = 0.0
    for attempt in range(backoff.retries + 1):
        try:
            return call()
        except Retryable as err:
            last = err
            if attempt == backoff.retries:
                break
            pause = backoff.wait(attempt, err.hint_s)
            sleep(pause)
            waited += pause
    reason = (
        "rate-limited (HTTP 429)" if last.status == 429 else f"failing ({_status_text(last.status)}: {last.detail})"
    )
    raise DataError(f"{what}: still {reason} after {backoff.retries + 1} attempts over {waited:.1f} s; try again later")


def _status_text(status: int) -> str:
    return "connection failed" if status == 0 else f"HTTP {status}"


def one_line(text: str, limit: int = 200) -> str:
    """A server's message as one short line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def window_text(ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> str:
    return f"{ticker} {start:%Y-%m-%d} .. {end:%Y-%m-%d}"


def vendor_panel(
    vendor: BarVendor,
    tickers: list[str],
    start,
    end,
    *,
    interval: str,
    benchmark: str | None,
    store: DataCache | None,
    outside_session: str = "drop",
    drop_missing: bool = False,
    name: str = "unnamed",
    bar: DownloadBar | None = None,
    progress: Callable[[str], None] | None = None,
    now: pd.Timestamp | None = None,
) -> MarketData:
    """A validated panel of `tickers` (and the benchmark) from a vendor over [start, end).

    See the module docstring for the steps. The panel is assembled one ticker at a
    time (`stream.stream_panel`) from the chunk cache, so its build holds the panel
    plus one ticker's bars. `meta` records the tickers dropped (`dropped_tickers`)
    and the bars outside the session dropped (`outside_session_bars`).
    """
    symbols = [str(t).strip().upper() for t in tickers]
    if not symbols:
        raise ConfigError(f"{vendor.name}: no tickers requested")
    bench = None if benchmark is None else str(benchmark).strip().upper()
    if bench is not None and bench in symbols:
        raise ConfigError(f"{vendor.name}: {bench} is both the benchmark and a requested ticker")
    what = f"{interval} bars {pd.Timestamp(start):%Y-%m-%d} .. {pd.Timestamp(end):%Y-%m-%d}"
    where = f"{vendor.name} {what}"
    reader = ChunkReader(vendor, start, end, store=store, bar=bar, progress=progress, now=now)

    def session_bars(raw: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        return to_session_bars(raw, interval, outside_session, source=where)

    counts, outside, union = {}, 0, np.empty(0, dtype=np.int64)

    def first_pass(ticker: str, raw: pd.DataFrame) -> None:  # during the download: counts and the grid
        nonlocal outside, union
        kept, dropped = session_bars(raw)
        outside += dropped
        counts[ticker] = len(kept)
        if ticker != bench:
            union = np.union1d(union, pd.DatetimeIndex(kept["timestamp"]).tz_convert("UTC").as_unit("ns").asi8)

    reader.download(symbols + ([bench] if bench else []), first_pass)
    if bench is not None and counts[bench] == 0:
        raise DataError(f"{vendor.name}: no {what} for the benchmark {bench} (unknown symbol, or not listed then)")
    absent = [t for t in symbols if counts[t] == 0]
    if absent and not drop_missing:
        raise DataError(
            f"{vendor.name}: no {what} for ticker(s) {absent} (unknown symbol, or not listed then); "
            "drop_missing = true drops such tickers"
        )
    if absent:
        warnings.warn(f"{vendor.name}: dropped ticker(s) with no {what}: {absent}", stacklevel=2)
    kept = [t for t in symbols if t not in absent]
    grid = pd.DatetimeIndex(union.astype("datetime64[ns]")).tz_localize("UTC").tz_convert(EXCHANGE_TZ)
    bench_series = None
    if bench is not None:
        rows = session_bars(reader.bars(bench))[0]
        bench_series = pd.Series(rows["close"].to_numpy(), index=pd.DatetimeIndex(rows["timestamp"]))
    data = stream_panel(
        kept,
        lambda ticker: session_bars(reader.bars(ticker))[0],
        grid=grid,
        benchmark=bench_series,
        benchmark_name=bench,
        name=name,
        source=where,
        ragged=True,
    )
    meta = {**data.meta, "provider": vendor.name, "outside_session_bars": outside}
    if absent:
        meta["dropped_tickers"] = absent
    return replace(data, meta=meta)
