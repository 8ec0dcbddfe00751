"""The files provider: a folder of CSV or Parquet (or one file) as a `MarketData` panel.

Two layouts are read, file by file, and may be mixed in one folder:

- **long**: a file with a ticker column (`ticker`, `symbol` or `tic`) holds rows of
  timestamp, ticker, open, high, low, close, volume for any number of tickers;
- **per ticker**: a file without a ticker column holds one ticker, named by the
  file name's stem as written (`AAPL.csv` -> AAPL, `brk-b.parquet` -> brk-b).

Column names are matched case-insensitively (see `frame.COLUMN_ALIASES`). Each file
is checked on its own first, so an error names the file it comes from; the union
then goes through `from_frame` like every other provider.

`write_files` writes a panel back out in either layout and format; reading it back
gives the same panel exactly (see its docstring for why).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from market_envs.data.frame import (
    COLUMN_ALIASES,
    OPTIONAL_COLUMNS,
    from_frame,
    match_columns,
    validated_long,
)
from market_envs.data.indicators import WARMUP_BARS
from market_envs.data.panel import PRICE_COLUMNS, DataError, MarketData

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
FORMATS = ("csv", "parquet")
LAYOUTS = ("long", "per_ticker")


def list_data_files(path: str | Path) -> list[Path]:
    """The CSV and Parquet files at `path` (one file, or a folder's top level, sorted)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise DataError(f"{path}: not a CSV or Parquet file (suffix {path.suffix!r})")
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise DataError(f"{path}: folder holds no .csv or .parquet file")
    return files


def _read_table(file: Path) -> pd.DataFrame:
    """One file as a DataFrame; an empty or unreadable file is a `DataError`."""
    if file.stat().st_size == 0:
        raise DataError(f"{file}: empty file")
    try:
        if SUFFIXES[file.suffix.lower()] == "csv":
            table = pd.read_csv(file)
        else:
            table = pd.read_parquet(file)
    except pd.errors.EmptyDataError:
        raise DataError(f"{file}: empty file") from None
    except (OSError, ValueError) as err:
        raise DataError(f"{file}: unreadable ({err})") from None
    if len(table) == 0:
        raise DataError(f"{file}: empty file (a header but no rows)")
    return table


def _has_ticker_column(table: pd.DataFrame) -> bool:
    lowered = {str(c).strip().lower() for c in table.columns}
    return any(alias in lowered for alias in COLUMN_ALIASES["ticker"])


def read_file(file: str | Path, assume_tz: str | None = None) -> pd.DataFrame:
    """One file as a checked long frame (timestamp, ticker, OHLCV) in exchange time.

    Every check of `from_frame` that concerns a single file runs here, with the file
    named in the error.
    """
    file = Path(file)
    source = str(file)
    table = _read_table(file)
    if _has_ticker_column(table):
        long = match_columns(table, ("timestamp", "ticker", "close"), source, OPTIONAL_COLUMNS)
    else:
        long = match_columns(table, ("timestamp", "close"), source, OPTIONAL_COLUMNS)
        long.insert(1, "ticker", file.stem)
    return validated_long(long, source, assume_tz)


def _check_disjoint(frames: dict[Path, pd.DataFrame]) -> None:
    """Refuse a ticker that appears in two files (its bars would be ambiguous)."""
    owner: dict[str, Path] = {}
    for file, frame in frames.items():
        for ticker in pd.unique(frame["ticker"]):
            if ticker in owner:
                raise DataError(f"ticker {ticker} appears in two files: {owner[ticker]} and {file}")
            owner[ticker] = file


def read_files(
    path: str | Path,
    tickers: list[str] | None = None,
    assume_tz: str | None = None,
    *,
    benchmark: str | None = None,
    name: str | None = None,
) -> MarketData:
    """Read a folder of CSV/Parquet files (or one file) into a validated panel.

    :param path: a file, or a folder whose top-level .csv/.parquet files are read.
    :param tickers: keep these tickers in this order; one absent from every file is an
        error. Default: every ticker found, sorted.
    :param assume_tz: time zone of naive timestamps (e.g. "America/New_York");
        without it, naive timestamps are refused.
    :param benchmark: a ticker in the files to use as the benchmark close (it is
        taken out of the panel's tickers), e.g. "QQQ".
    :param name: the panel's name; default: the file or folder name.
    """
    files = list_data_files(path)
    frames = {file: read_file(file, assume_tz) for file in files}
    _check_disjoint(frames)
    long = pd.concat(frames.values(), ignore_index=True)
    bench = None
    if benchmark is not None:
        is_bench = long["ticker"] == benchmark
        if not is_bench.any():
            raise DataError(f"{path}: benchmark ticker {benchmark} is in no file")
        bench = pd.Series(
            long.loc[is_bench, "close"].to_numpy(), index=pd.DatetimeIndex(long.loc[is_bench, "timestamp"])
        )
        long = long[~is_bench]
        if tickers is not None and benchmark in tickers:
            raise DataError(f"{benchmark} is both the benchmark and a requested ticker")
    return from_frame(
        long,
        bench,
        tickers=tickers,
        name=name or Path(path).stem,
        benchmark_name=benchmark,
        source=str(path),
    )


def written_columns(data: MarketData) -> list[str]:
    """The OHLCV columns the panel's source held (all five, but those of `meta["missing_columns"]`)."""
    missing = set(data.meta.get("missing_columns", ()))
    return [c for c in PRICE_COLUMNS if c not in missing]


def observed_frame(data: MarketData) -> pd.DataFrame:
    """The panel's OHLCV bars as a long frame, without the bars filled over gaps.

    Filled bars are not data: a reader fills them again, identically, from the past.
    Warm-up rows are all written, since the mask cannot tell a filled warm-up bar from
    an observed one; their values are the same either way. A point-in-time universe's
    bars outside membership are data (`MarketData.priced`) and are written. Columns the
    source lacked (close-only data, `meta["missing_columns"]`) are not: the panel filled
    them from the close, and a reader fills them again.
    """
    columns = written_columns(data)
    ohlcv = data.features[:, :, [PRICE_COLUMNS.index(c) for c in columns]].detach().cpu().numpy()
    t, n = data.num_bars, data.num_tickers
    keep = data.priced.detach().cpu().numpy().copy()
    keep[: min(WARMUP_BARS, t)] = True
    rows = keep.reshape(-1)
    frame = pd.DataFrame(ohlcv.reshape(t * n, -1)[rows].astype(np.float64), columns=columns)
    frame.insert(0, "ticker", np.tile(np.asarray(data.tickers, dtype=object), t)[rows])
    frame.insert(0, "timestamp", data.timestamps.repeat(n)[rows])
    return frame


def write_files(data: MarketData, path: str | Path, format: str = "parquet", layout: str = "long") -> list[Path]:
    """Write a panel's OHLCV bars to `path` for `read_files`; return the files written.

    :param data: the panel (its indicators are not written: they are recomputed).
    :param path: the folder to write into (created if missing).
    :param format: "csv" or "parquet".
    :param layout: "long" (one file `panel.<format>`) or "per_ticker" (`<TICKER>.<format>`).

    Timestamps keep their UTC offset and prices are the panel's float32 values, so
    `read_files(path)` returns the same timestamps, tickers, features and mask (and a
    close-only panel stays close-only: the columns it lacked are not written). The
    benchmark, when present, is written as one more ticker named by `benchmark_name`
    (read it back with `read_files(path, benchmark=...)`).
    """
    if format not in FORMATS:
        raise DataError(f"unknown format {format!r}; expected one of {FORMATS}")
    if layout not in LAYOUTS:
        raise DataError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    folder = Path(path).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    frame = observed_frame(data)
    bench = data.benchmark_series()
    if bench is not None:
        label = data.benchmark_name or "benchmark"
        if label in data.tickers:
            raise DataError(f"benchmark name {label!r} is also a ticker; cannot write both")
        frame = pd.concat([frame, _benchmark_frame(bench, label)[list(frame.columns)]], ignore_index=True)
    if layout == "long":
        parts = {"panel": frame}
    else:
        parts = {ticker: group.drop(columns="ticker") for ticker, group in frame.groupby("ticker", sort=False)}
    written = []
    for stem, part in parts.items():
        target = folder / f"{stem}.{format}"
        if format == "csv":
            part.to_csv(target, index=False)
        else:
            part.to_parquet(target, index=False)
        written.append(target)
    return written


def _benchmark_frame(bench: pd.Series, label: str) -> pd.DataFrame:
    """The benchmark close as OHLCV rows (open = high = low = close, volume 0)."""
    close = bench.to_numpy(dtype=np.float64)
    return pd.DataFrame(
        {
            "timestamp": bench.index,
            "ticker": label,
            "open": close,
            "high": close,
            "low": close,
            "close": close,
            "volume": 0.0,
        }
    )
