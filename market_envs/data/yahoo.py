"""The yahoo provider: bars from Yahoo Finance through yfinance, as a `MarketData` panel.

Yahoo serves minute bars for about the last 30 days only, at most 8 days per request;
other intraday bars (2m .. 90m) for about 60 days; daily bars for decades in one
request. `request_windows` splits a request accordingly.

yfinance's `download` returns a wide frame: a tz-aware index (exchange time for
intraday bars; naive dates for daily bars unless `ignore_tz=False`) and two-level
columns, (field, ticker) with the default `group_by="column"` or (ticker, field) with
`group_by="ticker"`; a ticker that failed comes back as all-NaN columns (with an extra
"Adj Close"). `normalize_download` turns any of these shapes into the long frame that
`from_frame` reads.

The download function is injected (`download=`, default `yfinance.download`), so the
tests replay recorded responses and never touch the network. Chunks are cached as
Parquet (see `cache.DataCache`) once the whole panel validated; a cached chunk is
never fetched again.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from market_envs.data.cache import DataCache, cache_key
from market_envs.data.frame import from_frame
from market_envs.data.panel import EXCHANGE_TZ, PRICE_COLUMNS, DataError, MarketData

MINUTE_REQUEST_DAYS = 8
INTRADAY_REQUEST_DAYS = 60
MINUTE_HISTORY_DAYS = 30
YAHOO_INTERVALS = ("1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk", "1mo", "3mo")
_FIELDS = {
    "open",
    "high",
    "low",
    "close",
    "adj close",
    "volume",
    "dividends",
    "stock splits",
    "capital gains",
    "repaired?",
}

Progress = Callable[[str], None]


def yahoo_interval(interval: str) -> str:
    """The yfinance spelling of an interval given as yfinance ("1m") or pandas ("1min")."""
    text = str(interval).strip()
    if text in YAHOO_INTERVALS:
        return text
    match = re.fullmatch(r"(\d+)\s*(min|T|h|H|D|d)", text)
    if match:
        count, unit = int(match.group(1)), match.group(2)
        candidate = {"min": f"{count}m", "T": f"{count}m", "h": f"{count}h", "H": f"{count}h"}.get(unit, f"{count}d")
        if candidate in YAHOO_INTERVALS:
            return candidate
    raise DataError(f"interval {interval!r} is not served by Yahoo; use one of {list(YAHOO_INTERVALS)}")


def is_intraday(interval: str) -> bool:
    return yahoo_interval(interval)[-1] in "mh" and yahoo_interval(interval) not in ("1mo", "3mo")


def _exchange_time(value) -> pd.Timestamp:
    stamp = pd.Timestamp(value)
    return stamp.tz_localize(EXCHANGE_TZ) if stamp.tzinfo is None else stamp.tz_convert(EXCHANGE_TZ)


def request_windows(start, end, interval: str) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """[start, end) split into the pieces Yahoo serves in one request each.

    Minute bars: at most 8 days a piece; other intraday bars: at most 60 days; daily
    and longer bars: one piece.
    """
    lo, hi = _exchange_time(start), _exchange_time(end)
    if hi <= lo:
        raise DataError(f"yahoo: empty period {lo} .. {hi} (end must be after start)")
    step = yahoo_interval(interval)
    if not is_intraday(step):
        return [(lo, hi)]
    span = pd.Timedelta(days=MINUTE_REQUEST_DAYS if step == "1m" else INTRADAY_REQUEST_DAYS)
    windows, cursor = [], lo
    while cursor < hi:
        windows.append((cursor, min(cursor + span, hi)))
        cursor = windows[-1][1]
    return windows


def _field_level(columns: pd.MultiIndex) -> int:
    """Which of the two column levels holds the fields (Open, Close, ...)."""
    for level in range(2):
        values = {str(v).strip().lower() for v in columns.get_level_values(level)}
        if "close" in values and values <= _FIELDS:
            return level
    raise DataError(f"yahoo: cannot tell fields from tickers in the response columns {list(columns[:6])}")


def normalize_download(frame: pd.DataFrame | None, tickers: list[str]) -> pd.DataFrame:
    """yfinance's wide response as a long frame: timestamp, ticker, open .. volume.

    Rows where every price field is NaN (failed tickers, and the union-index padding
    yfinance adds) are dropped; a partly NaN row is kept for `from_frame` to report.
    """
    columns = ["timestamp", "ticker", *PRICE_COLUMNS]
    if frame is None or len(frame) == 0:
        return pd.DataFrame(columns=columns)
    wide = frame.copy()
    if isinstance(wide.columns, pd.MultiIndex):
        if wide.columns.nlevels != 2:
            raise DataError(f"yahoo: response has {wide.columns.nlevels} column levels, expected 2")
        fields = _field_level(wide.columns)
        wide.columns = wide.columns.set_names(["field", "ticker"] if fields == 0 else ["ticker", "field"])
        long = wide.stack(level="ticker", future_stack=True)
    else:
        if len(tickers) != 1:
            raise DataError(f"yahoo: response has flat columns but {len(tickers)} tickers were requested")
        long = wide.assign(ticker=tickers[0]).set_index("ticker", append=True)
    long.columns = [str(c).strip().lower() for c in long.columns]
    missing = [c for c in PRICE_COLUMNS if c not in long.columns]
    if missing:
        raise DataError(f"yahoo: response lacks field(s) {missing}; got {list(long.columns)}")
    long = long[list(PRICE_COLUMNS)].dropna(how="all", subset=["open", "high", "low", "close"])
    long.index = long.index.set_names(["timestamp", "ticker"])
    long = long.reset_index()
    stamps = pd.DatetimeIndex(long["timestamp"])
    # daily bars come as naive exchange-local dates when yfinance's ignore_tz is on
    long["timestamp"] = stamps.tz_localize(EXCHANGE_TZ) if stamps.tz is None else stamps.tz_convert(EXCHANGE_TZ)
    long["ticker"] = long["ticker"].astype(str)
    return long.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)[columns]


def _default_download() -> Callable:
    try:
        import yfinance
    except ImportError as err:  # a dependency, but say what to do if it is absent
        raise DataError("the yahoo provider needs yfinance: pip install yfinance") from err
    return yfinance.download


VENDOR_LOGGER = "yfinance"
"""yfinance's logger: a line per ticker and failure (DNS, crumb, "possibly delisted"), 1,265 lines
for an offline build of nasdaq100-minute; `vendor_quiet` gathers them instead."""


class _Gather(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def vendor_quiet(symbols: list[str]):
    """yfinance's log lines and its deprecation warnings held back during a request; after it,
    one warning per kind of failure (its tickers, lists and counts blanked, so that Python's
    warning filter says each kind once per process, however many tickers and requests it hit)."""
    logger = logging.getLogger(VENDOR_LOGGER)
    gather, saved = _Gather(), (logger.handlers[:], logger.propagate, logger.level)
    logger.handlers, logger.propagate, logger.level = [gather], False, logging.DEBUG
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        logger.handlers, logger.propagate, logger.level = saved
    names = "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True))
    kinds = dict.fromkeys(
        " ".join(
            re.sub(r"\b\d+\b", "N", re.sub(r"\[[^\]]*\]", "[...]", re.sub(rf"\b(?:{names})\b", "T", message))).split()
        )[:200]
        for message in gather.messages
    )
    for kind in kinds:
        warnings.warn(f"yahoo (yfinance) said, for some tickers: {kind}", stacklevel=4)


def _fetch(download: Callable, symbols: list[str], lo: pd.Timestamp, hi: pd.Timestamp, step: str) -> pd.DataFrame:
    """One request through `download` (the vendor's log lines held back: `vendor_quiet`),
    normalised to a long frame."""
    try:
        with vendor_quiet(symbols):
            response = download(
                symbols,
                start=lo.to_pydatetime(),
                end=hi.to_pydatetime(),
                interval=step,
                group_by="column",
                auto_adjust=True,
                actions=False,
                ignore_tz=False,
                progress=False,
                threads=True,
            )
    except Exception as err:  # yfinance raises many types; name the request
        raise DataError(f"yahoo: download of {len(symbols)} ticker(s) {lo} .. {hi} ({step}) failed: {err}") from err
    return normalize_download(response, symbols)


def _chunk_key(symbols: list[str], lo: pd.Timestamp, hi: pd.Timestamp, step: str) -> str:
    return cache_key(
        {"provider": "yahoo", "tickers": sorted(symbols), "start": lo, "end": hi, "interval": step, "auto_adjust": True}
    )


def _resolve_cache(cache) -> DataCache | None:
    if cache is False or cache is None:
        return None
    if cache is True:
        return DataCache()
    return cache if isinstance(cache, DataCache) else DataCache(cache)


def _check_present(long: pd.DataFrame, wanted: list[str], what: str, drop_missing: bool) -> list[str]:
    """The requested tickers that came back with bars; absent ones raise or are dropped."""
    present = set(long["ticker"])
    absent = [t for t in wanted if t not in present]
    if absent and not drop_missing:
        raise DataError(
            f"yahoo: requested ticker(s) {absent} came back empty for {what} "
            f"(delisted, renamed, or outside Yahoo's range: minute bars reach back about "
            f"{MINUTE_HISTORY_DAYS} days)"
        )
    if absent:
        warnings.warn(f"yahoo: dropped ticker(s) with no bars for {what}: {absent}", stacklevel=3)
    return [t for t in wanted if t in present]


def yahoo(
    tickers: list[str] | tuple[str, ...],
    start,
    end,
    interval: str = "1m",
    benchmark: str | None = "QQQ",
    download: Callable | None = None,
    cache: DataCache | str | bool | None = True,
    *,
    drop_missing: bool = False,
    name: str = "yahoo",
    progress: Progress | None = None,
) -> MarketData:
    """Bars of `tickers` from Yahoo Finance over [start, end) as a validated panel.

    :param tickers: Yahoo symbols; upper-cased as yfinance does.
    :param start: first day or time (naive values are exchange time).
    :param end: end, exclusive.
    :param interval: "1m" / "1min" (about the last 30 days), other intraday, or "1d".
    :param benchmark: a symbol fetched alongside and kept as the benchmark close
        (QQQ for the NASDAQ-100); None for none.
    :param download: the function that fetches one request, with yfinance.download's
        signature and output; default yfinance.download.
    :param cache: True for the default data directory, a `DataCache` or a path, or
        False for none. Cached chunks are read instead of fetched.
    :param drop_missing: drop requested tickers that come back empty (with a warning)
        instead of raising; the benchmark is always required.
    :param name: the panel's name.
    :param progress: called with a line per request, for the CLI.
    """
    symbols = [str(t).strip().upper() for t in tickers]
    if not symbols:
        raise DataError("yahoo: no tickers requested")
    bench = None if benchmark is None else str(benchmark).strip().upper()
    if bench is not None and bench in symbols:
        raise DataError(f"yahoo: {bench} is both the benchmark and a requested ticker")
    request = symbols + ([bench] if bench else [])
    step = yahoo_interval(interval)
    windows = request_windows(start, end, step)
    store, fetch = _resolve_cache(cache), download or _default_download()
    today = pd.Timestamp.now(tz=EXCHANGE_TZ).normalize()

    pieces, to_save = [], []
    for i, (lo, hi) in enumerate(windows):
        key = _chunk_key(request, lo, hi, step)
        cached = None if store is None else store.load_frame("yahoo", key)
        if cached is not None:
            pieces.append(cached)
            continue
        if progress:
            progress(
                f"yahoo: request {i + 1}/{len(windows)}: {len(request)} tickers {lo:%Y-%m-%d %H:%M} .. {hi:%Y-%m-%d %H:%M} ({step})"
            )
        piece = _fetch(fetch, request, lo, hi, step)
        pieces.append(piece)
        # cache only complete past chunks in which every symbol came back
        if hi <= today and set(request) <= set(piece["ticker"]):
            to_save.append((key, piece))

    long = pd.concat(pieces, ignore_index=True)
    what = f"{step} bars {windows[0][0]} .. {windows[-1][1]}"
    if bench is not None and bench not in set(long["ticker"]):
        raise DataError(
            f"yahoo: benchmark {bench} came back empty for {what} "
            f"({len(set(long['ticker']))} of {len(request)} symbols came back; none means Yahoo "
            f"is unreachable from this machine)"
        )
    kept = _check_present(long[long["ticker"] != bench], symbols, what, drop_missing)
    bench_series = None
    if bench is not None:
        rows = long[long["ticker"] == bench]
        bench_series = pd.Series(rows["close"].to_numpy(), index=pd.DatetimeIndex(rows["timestamp"]))
    data = from_frame(
        long[long["ticker"].isin(kept)],
        bench_series,
        tickers=kept,
        name=name,
        benchmark_name=bench,
        source=f"yahoo {what}",
    )
    if store is not None:  # only after the whole panel validated
        for key, piece in to_save:
            store.save_frame("yahoo", key, piece)
    dropped = [t for t in symbols if t not in kept]
    return data if not dropped else _with_meta(data, dropped_tickers=dropped)


def _with_meta(data: MarketData, **items) -> MarketData:
    return replace(data, meta={**data.meta, **items})
