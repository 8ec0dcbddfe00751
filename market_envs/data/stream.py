"""`stream_panel`: a panel assembled one ticker at a time, for data sets too large to
hold twice.

`from_frame` pivots one long table of every ticker's bars, which needs the raw bars
and several [T, N] frames in memory at once: a few times the finished panel. Here
the bars come one ticker at a time from a function (`bars_of`, e.g. a
`chunks.ChunkReader` reading its cache) and go straight into a preallocated float32
[T, N, F] array, so the build's peak memory is the panel plus one ticker's columns.

Two passes over the tickers: the first collects the time grid (the sorted union of
every ticker's timestamps, as `from_frame` has it), the second fills the panel with
`frame.panel_columns`, the same per-column code `from_frame` runs, so both give the
same panel (tests/test_stream.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from market_envs.data.frame import (
    assemble_panel,
    panel_columns,
    unadjusted_splits,
    validate_order,
    warn_unadjusted_splits,
)
from market_envs.data.panel import EXCHANGE_TZ, FEATURE_NAMES, PRICE_COLUMNS, DataError, MarketData

BarsOf = Callable[[str], pd.DataFrame]


def _nanoseconds(frame: pd.DataFrame) -> np.ndarray:
    return pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC").as_unit("ns").asi8


def time_grid(tickers: list[str], bars_of: BarsOf) -> pd.DatetimeIndex:
    """The sorted union of every ticker's timestamps (pass 1), in exchange time."""
    grid = np.empty(0, dtype=np.int64)
    for ticker in tickers:
        grid = np.union1d(grid, _nanoseconds(bars_of(ticker)))
    return pd.DatetimeIndex(grid.astype("datetime64[ns]")).tz_localize("UTC").tz_convert(EXCHANGE_TZ)


def stream_panel(
    tickers: list[str],
    bars_of: BarsOf,
    *,
    grid: pd.DatetimeIndex | None = None,
    benchmark: pd.Series | None = None,
    benchmark_name: str | None = None,
    name: str = "unnamed",
    source: str | None = None,
    ragged: bool = True,
) -> MarketData:
    """A validated panel of `tickers`, filled one ticker at a time (see the module docstring).

    :param tickers: the panel's tickers, in order; each must have at least one bar.
    :param bars_of: one ticker's bars: timestamp (tz-aware), open, high, low, close,
        volume, each row already checked (`frame.validated_long`), called twice per ticker.
    :param grid: the time grid, when the caller has it already (else pass 1 builds it).
    :param benchmark: the benchmark close, a Series with a tz-aware index.
    :param ragged: as for `from_frame`; False requires every ticker to start on the grid's first bar.
    """
    where = f"{source}: " if source else ""
    grid = time_grid(tickers, bars_of) if grid is None else grid
    if len(grid) == 0:
        raise DataError(f"{where}no rows (empty data)")
    stamps = grid.tz_convert("UTC").as_unit("ns").asi8
    features = np.empty((len(grid), len(tickers), len(FEATURE_NAMES)), dtype=np.float32)
    tradable = np.empty((len(grid), len(tickers)), dtype=bool)
    splits = []
    for j, ticker in enumerate(tickers):  # one ticker at a time: the point of this module
        wide = _ticker_columns(bars_of(ticker), ticker, grid, stamps, where)
        if not ragged and np.isnan(wide["close"].to_numpy()[0, 0]):
            raise DataError(f"{where}ticker {ticker} starts after the first bar {grid[0]} (ragged=False)")
        splits += unadjusted_splits(wide["close"])
        features[:, j : j + 1, :], tradable[:, j : j + 1] = panel_columns(wide, ragged)
    warn_unadjusted_splits(splits, where)
    return assemble_panel(grid, tickers, features, tradable, benchmark, benchmark_name, name, where)


def _ticker_columns(
    bars: pd.DataFrame, ticker: str, grid: pd.DatetimeIndex, stamps: np.ndarray, where: str
) -> dict[str, pd.DataFrame]:
    """One ticker's OHLCV as one-column wide frames on the grid (NaN where it has no bar)."""
    if len(bars) == 0:
        raise DataError(f"{where}ticker {ticker} has no bars")
    validate_order(bars.assign(ticker=ticker), where.rstrip(": ") or None)
    rows = np.searchsorted(stamps, _nanoseconds(bars))
    if (rows >= len(stamps)).any() or (stamps[np.minimum(rows, len(stamps) - 1)] != _nanoseconds(bars)).any():
        raise DataError(f"{where}ticker {ticker} has bars off the time grid")
    wide = {}
    for column in PRICE_COLUMNS:  # float32 as stored, as `from_frame` does
        values = np.full(len(grid), np.nan)
        values[rows] = bars[column].to_numpy(dtype=np.float32).astype(np.float64)
        wide[column] = pd.DataFrame({ticker: values}, index=grid)
    return wide
