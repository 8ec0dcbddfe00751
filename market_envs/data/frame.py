"""`from_frame`: the one way a long OHLCV table becomes a `MarketData` panel.

Every provider (synthetic, files, yahoo) ends here, so validation, gap filling and
indicators live in one place. The steps, in order:

1. match column names (case-insensitive, common aliases), check none is missing;
2. parse timestamps into exchange time, refusing naive or mixed time zones;
3. check values: NaN, infinite or non-positive prices, high < low, negative volume;
4. check order: duplicate or unsorted timestamps per ticker;
5. pivot to a [T, N] grid on the union of timestamps, starting where every ticker
   has begun; fill gaps forward from the past only and mark them untradable;
6. warn about overnight moves that look like unadjusted stock splits;
7. compute the indicators causally and mask their warm-up rows.

Every error is a `DataError` naming the source, ticker and timestamp.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pandas as pd
import torch

from market_envs.data.indicators import WARMUP_BARS, compute_indicators
from market_envs.data.panel import EXCHANGE_TZ, FEATURE_NAMES, PRICE_COLUMNS, DataError, MarketData

COLUMN_ALIASES = {
    "timestamp": ("timestamp", "datetime", "date", "time", "t"),
    "ticker": ("ticker", "symbol", "tic"),
    "open": ("open", "o"),
    "high": ("high", "h"),
    "low": ("low", "l"),
    "close": ("close", "c", "adj close", "adj_close"),
    "volume": ("volume", "v", "vol"),
}
_OFFSET = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def match_columns(frame: pd.DataFrame, required, source: str | None = None, optional=()) -> pd.DataFrame:
    """Rename columns to canonical names (case-insensitive, aliases) and keep `required`,
    and those of `optional` that are present."""
    lowered = {str(c).strip().lower(): c for c in frame.columns}
    rename, missing = {}, []
    for canonical in (*required, *optional):
        found = next((lowered[a] for a in COLUMN_ALIASES[canonical] if a in lowered), None)
        if found is None:
            if canonical in required:
                missing.append(canonical)
        else:
            rename[found] = canonical
    if missing:
        raise DataError(
            f"{_where(source)}missing column(s) {missing}; found {list(frame.columns)} "
            f"(names are matched case-insensitively)"
        )
    return frame[list(rename)].rename(columns=rename)


def parse_timestamps(values: pd.Series, source: str | None = None, assume_tz: str | None = None) -> pd.Series:
    """Timestamps in exchange time. Naive ones need `assume_tz`; mixed zones are refused."""
    where = _where(source)
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        return values.dt.tz_convert(EXCHANGE_TZ)
    if pd.api.types.is_datetime64_dtype(values):
        return _localize_naive(values, where, assume_tz)
    codes, uniques = pd.factorize(values)
    uniques = pd.Series(uniques)
    if len(uniques) == 0:
        raise DataError(f"{where}no timestamps")
    first = uniques.iloc[0]
    if isinstance(first, pd.Timestamp):
        zones = uniques.map(
            lambda v: ("naive" if v.tz is None else str(v.tz)) if isinstance(v, pd.Timestamp) else "not a timestamp"
        )
    else:
        text = uniques.astype(str).str.strip()
        zones = text.map(lambda s: "offset" if _OFFSET.search(s) else "naive")
    if zones.nunique() > 1:
        odd = zones.ne(zones.iloc[0]).idxmax()
        raise DataError(
            f"{where}mixed time zones: {uniques.iloc[0]} is {zones.iloc[0]} but "
            f"{uniques.iloc[odd]} is {zones.iloc[odd]}"
        )
    raw = uniques if isinstance(first, pd.Timestamp) else uniques.astype(str)
    try:
        if zones.iloc[0] == "naive":
            parsed = _localize_naive(pd.to_datetime(raw, format="ISO8601"), where, assume_tz)
        else:
            parsed = pd.to_datetime(raw, utc=True, format="ISO8601").dt.tz_convert(EXCHANGE_TZ)
    except (ValueError, TypeError) as err:
        raise DataError(f"{where}unreadable timestamp: {err}") from None
    return pd.Series(pd.DatetimeIndex(parsed)[codes], index=values.index)


def _localize_naive(values: pd.Series, where: str, assume_tz: str | None) -> pd.Series:
    if assume_tz is None:
        raise DataError(
            f"{where}timestamps have no time zone (first: {values.iloc[0]}); write them with "
            f"an offset or pass assume_tz='{EXCHANGE_TZ}'"
        )
    return values.dt.tz_localize(assume_tz, ambiguous="raise", nonexistent="raise").dt.tz_convert(EXCHANGE_TZ)


def _first_bad(frame: pd.DataFrame, bad: pd.Series, what: str, where: str) -> DataError:
    row = frame.loc[bad.idxmax()]
    return DataError(f"{where}ticker {row['ticker']} at {row['timestamp']}: {what}")


def validate_values(frame: pd.DataFrame, source: str | None = None) -> None:
    """Refuse NaN, infinite or non-positive prices, high < low and negative, NaN or infinite volume."""
    where = _where(source)
    for column in [c for c in PRICE_COLUMNS if c in frame]:
        bad = frame[column].isna()
        if bad.any():
            raise _first_bad(frame, bad, f"{column} is NaN or not a number", where)
        bad = pd.Series(np.isinf(frame[column].to_numpy(dtype=np.float64)), index=frame.index)
        if bad.any():
            raise _first_bad(
                frame, bad, f"{column} is {frame.loc[bad.idxmax(), column]}: infinite, values must be finite", where
            )
    for column in [c for c in ("open", "high", "low", "close") if c in frame]:
        bad = frame[column] <= 0
        if bad.any():
            value = frame.loc[bad.idxmax(), column]
            raise _first_bad(frame, bad, f"{column} is {value}, prices must be positive", where)
    if "high" in frame and "low" in frame:
        bad = frame["high"] < frame["low"]
        if bad.any():
            row = frame.loc[bad.idxmax()]
            raise _first_bad(frame, bad, f"high {row['high']} < low {row['low']}", where)
    if "volume" in frame:
        bad = frame["volume"] < 0
        if bad.any():
            raise _first_bad(frame, bad, f"volume is {frame.loc[bad.idxmax(), 'volume']} (negative)", where)


def validate_order(frame: pd.DataFrame, source: str | None = None) -> None:
    """Refuse duplicate (ticker, timestamp) rows and timestamps out of order per ticker."""
    where = _where(source)
    duplicated = frame.duplicated(["ticker", "timestamp"])
    if duplicated.any():
        raise _first_bad(frame, duplicated, "duplicate timestamp", where)
    step = frame.groupby("ticker", sort=False)["timestamp"].diff()
    unsorted = step < pd.Timedelta(0)
    if unsorted.any():
        raise _first_bad(frame, unsorted, "timestamps are not sorted (this bar comes after a later one)", where)


def infer_interval(timestamps: pd.DatetimeIndex) -> str:
    """The bar length as a pandas alias: '1D' for daily bars, else 'Nmin'."""
    if len(timestamps) < 2:
        return "1D"
    step = pd.Series(timestamps).diff().dropna()
    typical = step[step > pd.Timedelta(0)].min()
    if typical >= pd.Timedelta(hours=20):
        return "1D"
    return f"{max(1, int(typical / pd.Timedelta(minutes=1)))}min"


def _grid_start(close: pd.DataFrame, where: str) -> pd.Timestamp:
    """The first bar at which every ticker has begun; refuse tickers that never overlap."""
    first = close.apply(pd.Series.first_valid_index)
    last = close.apply(pd.Series.last_valid_index)
    start = first.max()
    for ticker in close.columns:
        if last[ticker] < start:
            late = first.idxmax()
            raise DataError(
                f"{where}ticker {ticker} has no overlap with the others: its bars end at "
                f"{last[ticker]}, ticker {late} starts at {start}"
            )
    return start


def align_benchmark(benchmark, timestamps: pd.DatetimeIndex, where: str) -> np.ndarray:
    """The benchmark close (a Series with tz-aware index, or a frame with timestamp and
    close) on `timestamps`, each bar taking the last value at or before it."""
    if isinstance(benchmark, pd.DataFrame):
        bench = match_columns(benchmark, ("timestamp", "close"), source=where.rstrip(": ") or None)
        series = pd.Series(
            bench["close"].to_numpy(dtype=np.float64),
            index=pd.DatetimeIndex(parse_timestamps(bench["timestamp"])),
        )
    else:
        series = pd.Series(benchmark, dtype=np.float64)
        index = pd.DatetimeIndex(series.index)
        if index.tz is None:
            raise DataError(f"{where}benchmark timestamps have no time zone")
        series.index = index.tz_convert(EXCHANGE_TZ)
    series = series.sort_index()
    if series.isna().any() or (series <= 0).any():
        bad = series[series.isna() | (series <= 0)].index[0]
        raise DataError(f"{where}benchmark at {bad}: price is NaN or not positive")
    aligned = series.reindex(series.index.union(timestamps)).ffill().reindex(timestamps)
    if aligned.isna().any():
        raise DataError(f"{where}benchmark has no value at or before {aligned.index[aligned.isna()][0]}")
    return aligned.to_numpy()


def validated_long(long: pd.DataFrame, source: str | None = None, assume_tz: str | None = None) -> pd.DataFrame:
    """A long frame with canonical columns, typed (exchange-time timestamps, str tickers,
    float prices) and checked by `validate_values` and `validate_order`."""
    long = long.reset_index(drop=True)
    long["ticker"] = long["ticker"].astype(str).str.strip()
    long["timestamp"] = parse_timestamps(long["timestamp"], source, assume_tz)
    for column in [c for c in PRICE_COLUMNS if c in long]:
        long[column] = pd.to_numeric(long[column], errors="coerce")
    validate_values(long, source)
    validate_order(long, source)
    return long


def _pivot(long: pd.DataFrame, order: list[str]) -> dict[str, pd.DataFrame]:
    """Wide [T, N] frames of each price column over the sorted union of timestamps.

    NaN where a ticker has no bar. One scatter per column into a preallocated array
    (order checks have already refused duplicate (ticker, timestamp) rows), rather
    than pandas' pivot, which goes through a MultiIndex and sorts the rows again.
    """
    codes, uniques = pd.factorize(long["timestamp"])
    grid = pd.DatetimeIndex(uniques)
    by_time = np.argsort(grid.asi8, kind="stable")
    rank = np.empty_like(by_time)
    rank[by_time] = np.arange(len(by_time))
    rows = rank[codes]
    ticker_codes, ticker_names = pd.factorize(long["ticker"])
    cols = pd.Index(order).get_indexer(ticker_names)[ticker_codes]
    index = grid[by_time]
    wide = {}
    for column in PRICE_COLUMNS:
        values = np.full((len(index), len(order)), np.nan)
        values[rows, cols] = long[column].to_numpy(dtype=np.float64)
        wide[column] = pd.DataFrame(values, index=index, columns=list(order))
    return wide


SPLIT_RATIOS = (2.0, 3.0, 4.0, 5.0, 10.0)
"""Split ratios recognised in unadjusted prices, forward (price / k) and reverse (x k)."""
SPLIT_TOLERANCE = 0.04
"""How close (in log terms, about 4%) an overnight move must come to a split ratio."""


def unadjusted_splits(close: pd.DataFrame) -> list[tuple[str, pd.Timestamp, float]]:
    """Overnight moves that look like unadjusted splits: (ticker, timestamp, ratio).

    :param close: the pivoted [T, N] closes, NaN where a ticker has no bar.
    A move counts when the first observed close of a session is within
    `SPLIT_TOLERANCE` of 1/k or k times the last observed close before it, for k in
    `SPLIT_RATIOS` (a 2:1 split in unadjusted data is a -50% overnight move). Genuine
    moves of that size exist, so this is a warning, not an error.
    """
    previous = close.ffill().shift(1)
    log_ratio = np.log((close / previous).to_numpy(dtype=np.float64))
    day = close.index.normalize()
    new_session = np.r_[False, day[1:] != day[:-1]]
    ratios = np.log(np.array(SPLIT_RATIOS))
    distance = np.min(np.abs(np.abs(log_ratio)[..., None] - ratios), axis=-1)  # NaN where no bar
    rows, cols = np.nonzero((distance < SPLIT_TOLERANCE) & new_session[:, None])
    return [(close.columns[c], close.index[r], float(np.exp(log_ratio[r, c]))) for r, c in zip(rows, cols)]


def _warn_unadjusted_splits(close: pd.DataFrame, where: str) -> None:
    warn_unadjusted_splits(unadjusted_splits(close), where)


def warn_unadjusted_splits(found: list[tuple[str, pd.Timestamp, float]], where: str) -> None:
    """One warning listing the moves `unadjusted_splits` found (none: no warning)."""
    if found:
        shown = "; ".join(f"{ticker} on {stamp.date()} (x{ratio:.2f})" for ticker, stamp, ratio in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        warnings.warn(
            f"{where}overnight moves that look like unadjusted stock splits: {shown}{more}; "
            "use split-adjusted prices (an unadjusted split reads as a loss or gain no one had)",
            UserWarning,
            stacklevel=3,
        )


def from_frame(
    frame: pd.DataFrame,
    benchmark: pd.Series | pd.DataFrame | None = None,
    *,
    tickers: list[str] | None = None,
    name: str = "unnamed",
    benchmark_name: str | None = None,
    source: str | None = None,
    assume_tz: str | None = None,
    ragged: bool = False,
) -> MarketData:
    """Build a validated `MarketData` panel from a long OHLCV DataFrame.

    :param frame: one row per (timestamp, ticker) with open, high, low, close, volume;
        column names are matched case-insensitively; any interval from minutes to days.
    :param benchmark: optional benchmark close, a Series indexed by tz-aware timestamps
        or a DataFrame with timestamp and close columns; aligned forward in time.
    :param tickers: keep these tickers, in this order; a missing one is an error.
        Default: every ticker in the frame, sorted.
    :param name: the data set's name, carried into reports and checkpoints.
    :param benchmark_name: the benchmark's label (e.g. "QQQ").
    :param source: the file or provider, named in every error message.
    :param assume_tz: time zone for naive timestamps; without it they are refused.
    :param ragged: let tickers begin late (years of vendor data: listings, index
        entries). The grid then starts at the first bar of any ticker, and before a
        ticker's first bar it holds that bar's open as a flat line with zero volume,
        untradable (the env's observation is relative to the previous close, so the
        flat line shows as zero returns, not as a future price level). Without it the
        grid starts where every ticker has begun.
    """
    where = _where(source)
    if frame is None or len(frame) == 0:
        raise DataError(f"{where}no rows (empty data)")
    long, missing = complete_ohlcv(match_columns(frame, REQUIRED_COLUMNS, source, OPTIONAL_COLUMNS))
    long = validated_long(long, source, assume_tz)
    # The panel stores float32 prices; indicators are computed from those stored
    # values, so a panel written out and read back is identical (files round trip).
    long[list(PRICE_COLUMNS)] = long[list(PRICE_COLUMNS)].astype(np.float32).astype(np.float64)

    present = pd.unique(long["ticker"])
    if tickers is not None:
        absent = [t for t in tickers if t not in set(present)]
        if absent:
            raise DataError(f"{where}requested ticker(s) {absent} not in the data (found {sorted(present)[:20]})")
        long = long[long["ticker"].isin(tickers)]
        order = list(tickers)
    else:
        order = sorted(present)

    wide = _pivot(long, order)
    if not ragged:
        start = _grid_start(wide["close"], where)
        wide = {column: w.loc[start:] for column, w in wide.items()}
    _warn_unadjusted_splits(wide["close"], where)
    features, tradable = panel_columns(wide, ragged)
    meta = {"missing_columns": list(missing)} if missing else {}
    return assemble_panel(
        pd.DatetimeIndex(wide["close"].index), order, features, tradable, benchmark, benchmark_name, name, where, meta
    )


def assemble_panel(
    timestamps: pd.DatetimeIndex,
    tickers: Any,
    features: np.ndarray,
    tradable: np.ndarray,
    benchmark: Any,
    benchmark_name: str | None,
    name: str,
    where: str,
    meta: dict | None = None,
) -> MarketData:
    """The `MarketData` of finished [T, N, F] features and [T, N] tradable arrays, with the
    benchmark aligned to ``timestamps`` (`from_frame` and the streaming vendor build end here)."""
    bench = (
        None
        if benchmark is None
        else torch.from_numpy(align_benchmark(benchmark, timestamps, where).astype(np.float32))
    )
    return MarketData(
        timestamps=timestamps,
        tickers=tuple(tickers),
        features=torch.from_numpy(features),
        tradable=torch.from_numpy(tradable),
        interval=infer_interval(timestamps),
        benchmark=bench,
        benchmark_name=benchmark_name if benchmark is not None else None,
        name=name,
        meta=meta or {},
    )


def panel_columns(wide: dict[str, pd.DataFrame], ragged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Features float32 [T, N, F] and the tradable mask [T, N] from wide OHLCV frames
    (NaN where a ticker has no bar): gaps filled forward from the past, indicators
    computed causally, warm-up rows masked; see `from_frame` for `ragged`.

    Every step works column by column, so a panel assembled one ticker at a time
    (`stream.stream_panel`) is the same as one built at once.
    """
    observed = wide["close"].notna()
    close = wide["close"].ffill()
    if ragged:  # only the bars before a ticker's first are still NaN: its first open
        close = close.fillna(wide["open"].bfill())
    filled = {
        "open": wide["open"].fillna(close),
        "high": wide["high"].fillna(close),
        "low": wide["low"].fillna(close),
        "close": close,
        "volume": wide["volume"].fillna(0.0),
    }
    indicators = compute_indicators(filled["high"], filled["low"], filled["close"])
    columns = [filled[c] if c in filled else indicators[c] for c in FEATURE_NAMES]
    features = np.stack([c.to_numpy(dtype=np.float32) for c in columns], axis=-1)
    tradable = observed.to_numpy().copy()
    tradable[: min(WARMUP_BARS, len(tradable))] = False
    if ragged:  # a late ticker's indicators warm up over its own first bars
        first = np.argmax(observed.to_numpy(), axis=0)
        rows = np.arange(len(tradable))[:, None]
        tradable &= ~((rows >= first) & (rows < first + WARMUP_BARS))
    return features, tradable


REQUIRED_COLUMNS = ("timestamp", "ticker", "close")
OPTIONAL_COLUMNS = ("open", "high", "low", "volume")
"""Columns a provider may lack: close-only data (one adjusted close per ticker and bar,
the most common free data) is accepted; see `complete_ohlcv`."""


def complete_ohlcv(long: pd.DataFrame) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The frame with every OHLCV column, and the names of those the data lacked.

    A missing open, high or low is the bar's close (high and low go together: with
    one of them missing both are), a missing volume is 0. So with no open an order
    fills at the next bar's *close*; the features made of missing columns
    (`MarketData.unavailable_features`) are left out of the env's default observation.
    """
    present = set(long.columns)
    missing = [c for c in OPTIONAL_COLUMNS if c not in present]
    if ("high" in missing) != ("low" in missing):
        missing = sorted(set(missing) | {"high", "low"}, key=OPTIONAL_COLUMNS.index)
    if not missing:
        return long, ()
    long = long.copy()
    for column in missing:
        long[column] = 0.0 if column == "volume" else long["close"]
    return long[["timestamp", "ticker", *PRICE_COLUMNS]], tuple(missing)
