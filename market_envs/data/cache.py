"""The data cache: downloads and built panels as Parquet under one data directory.

Layout under the data directory (`data_dir()`):

    panels/<key>/panel.parquet       long panel: timestamp, ticker, features..., tradable
                                     (and reducible, for a panel with a point-in-time universe)
    panels/<key>/benchmark.parquet   timestamp, close (only when the panel has one)
    panels/<key>/meta.json           tickers, feature names, interval, normalisation, meta
    downloads/<provider>/<key>.parquet   raw provider responses (long OHLCV)

Every entry is written under a temporary name (`.tmp-...`) beside its final place and
renamed when complete, so a crash or an error never leaves half an entry: an entry
either exists whole or does not exist; a cache that cannot be written (read-only, full)
is one `market_envs.errors.UnwritableError` line naming the entry. Keys are hashes of the request or recipe
(`cache_key`), so a changed request never reads a stale entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from market_envs.data.panel import EXCHANGE_TZ, DataError, MarketData
from market_envs.errors import writing

ENV_VAR = "PODRACER_DATA_DIR"
APP_NAME = "podracer-trader"
FORMAT_VERSION = 1
TMP_PREFIX = ".tmp-"
STALE_TMP_SECONDS = 24 * 3600
UNWRITABLE_HINT = f" (the data cache: set ${ENV_VAR} or --data-dir to a writable folder, or free space)"
"""What a cache that cannot be written says to do (`market_envs.errors.writing`)."""


def data_dir(override: str | Path | None = None) -> Path:
    """The data directory: `override`, else $PODRACER_DATA_DIR, else the user cache dir."""
    if override is not None:
        return Path(override).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def cache_key(payload: dict) -> str:
    """A short stable hash of a JSON-serialisable request (dict order does not matter)."""
    text = json.dumps({"format": FORMAT_VERSION, **payload}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _json_safe(value):
    """Timestamps, dates, numpy scalars and paths as plain JSON values."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


@contextmanager
def _temporary_beside(target: Path, is_dir: bool) -> Iterator[Path]:
    """A temporary path next to `target`, removed unless the caller renamed it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f"{TMP_PREFIX}{target.name}-{uuid.uuid4().hex[:8]}"
    if is_dir:
        tmp.mkdir()
    try:
        yield tmp
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def _publish(tmp: Path, target: Path) -> None:
    """Rename a complete temporary entry into place (atomic on one file system)."""
    try:
        os.replace(tmp, target)
    except OSError:
        if target.is_dir():  # another process published the same entry first
            return
        raise


class DataCache:
    """Parquet cache of panels and downloads under `root` (see the module docstring).

    :param root: the data directory; default `data_dir()`.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = data_dir(root)

    def __repr__(self) -> str:
        return f"DataCache({str(self.root)!r})"

    # ----------------------------------------------------------------- panels
    def panel_dir(self, key: str) -> Path:
        return self.root / "panels" / key

    def has_panel(self, key: str) -> bool:
        return (self.panel_dir(key) / "meta.json").is_file()

    def panel_meta(self, key: str) -> dict | None:
        """The JSON metadata of a cached panel, or None when it is not cached."""
        if not self.has_panel(key):
            return None
        return json.loads((self.panel_dir(key) / "meta.json").read_text())

    def save_panel(self, key: str, data: MarketData, extra: dict | None = None) -> Path:
        """Write `data` as entry `key`, whole or not at all; return its folder."""
        target = self.panel_dir(key)
        with writing(target, UNWRITABLE_HINT), _temporary_beside(target, is_dir=True) as tmp:
            self._remove_stale_temporaries(target.parent)
            _write_panel(tmp, data, key, extra or {})
            if target.exists():  # an older entry of the same key (refresh)
                shutil.rmtree(target)
            _publish(tmp, target)
        return target

    def load_panel(self, key: str, device: str | torch.device = "cpu") -> MarketData:
        """The cached panel `key`; a missing or damaged entry is a `DataError`."""
        if not self.has_panel(key):
            raise DataError(f"no cached panel {key} under {self.root}")
        return _read_panel(self.panel_dir(key)).to(device)

    def panels(self) -> list[dict]:
        """Metadata of every complete cached panel."""
        folder = self.root / "panels"
        if not folder.is_dir():
            return []
        return [
            json.loads((p / "meta.json").read_text())
            for p in sorted(folder.iterdir())
            if not p.name.startswith(TMP_PREFIX) and (p / "meta.json").is_file()
        ]

    # -------------------------------------------------------------- downloads
    def download_path(self, provider: str, key: str) -> Path:
        return self.root / "downloads" / provider / f"{key}.parquet"

    def load_frame(self, provider: str, key: str) -> pd.DataFrame | None:
        """A cached download, or None when there is none."""
        path = self.download_path(provider, key)
        return pd.read_parquet(path) if path.is_file() else None

    def save_frame(self, provider: str, key: str, frame: pd.DataFrame) -> Path:
        """Write a download as one Parquet file, whole or not at all."""
        target = self.download_path(provider, key)
        with writing(target, UNWRITABLE_HINT), _temporary_beside(target, is_dir=False) as tmp:
            frame.to_parquet(tmp, index=False)
            _publish(tmp, target)
        return target

    # ------------------------------------------------------------ maintenance
    def entries(self) -> list[Path]:
        """Every complete entry (panel folders and download files), for inspection."""
        found = []
        for kind in ("panels", "downloads"):
            folder = self.root / kind
            if folder.is_dir():
                found += [
                    p
                    for p in folder.rglob("*")
                    if not any(part.startswith(TMP_PREFIX) for part in p.relative_to(self.root).parts)
                    and (p.suffix == ".parquet" and kind == "downloads" or p.name == "meta.json")
                ]
        return sorted(found)

    @staticmethod
    def _remove_stale_temporaries(folder: Path) -> None:
        """Delete our own temporaries left by a crash more than a day ago."""
        if not folder.is_dir():
            return
        cutoff = time.time() - STALE_TMP_SECONDS
        for tmp in folder.glob(f"{TMP_PREFIX}*"):
            if tmp.stat().st_mtime >= cutoff:
                continue
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- panel I/O
def _timestamp_array(index: pd.DatetimeIndex) -> pa.Array:
    values = index.tz_convert("UTC").as_unit("ns").asi8
    return pa.array(values, type=pa.timestamp("ns", tz=str(index.tz)))


ROW_GROUP_ROWS = 1 << 20
"""Rows (bar x ticker) per Parquet row group of a panel: writing a row group at a time
keeps the writer's memory to one group, not a second copy of the panel."""


def _panel_schema(data: MarketData) -> pa.Schema:
    fields = [
        pa.field("timestamp", pa.timestamp("ns", tz=str(data.timestamps.tz))),
        pa.field("ticker", pa.dictionary(pa.int32(), pa.string())),
        *(pa.field(name, pa.float32()) for name in data.feature_names),
        pa.field("tradable", pa.bool_()),
        *([pa.field("reducible", pa.bool_())] if data.reducible is not None else []),
    ]
    return pa.schema(fields)


def _write_panel(folder: Path, data: MarketData, key: str, extra: dict) -> None:
    """The three files of a panel entry, into `folder`; the panel is written in row
    groups of whole bars, timestamp-major, ticker-minor."""
    t, n, f = data.features.shape
    features = data.features.detach().cpu().numpy()
    tradable = data.tradable.detach().cpu().numpy()
    reducible = None if data.reducible is None else data.reducible.detach().cpu().numpy()
    names = pa.array(list(data.tickers), pa.string())
    schema = _panel_schema(data)
    step = max(1, ROW_GROUP_ROWS // max(1, n))
    with pq.ParquetWriter(folder / "panel.parquet", schema, compression="snappy") as writer:
        for lo in range(0, t, step):  # loop over blocks of bars, not tickers
            hi = min(t, lo + step)
            block = features[lo:hi].reshape((hi - lo) * n, f)
            columns = [
                _timestamp_array(data.timestamps[lo:hi].repeat(n)),
                pa.DictionaryArray.from_arrays(pa.array(np.tile(np.arange(n, dtype=np.int32), hi - lo)), names),
                *(pa.array(np.ascontiguousarray(block[:, j])) for j in range(f)),
                pa.array(tradable[lo:hi].reshape(-1)),
                *([pa.array(reducible[lo:hi].reshape(-1))] if reducible is not None else []),
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    if data.benchmark is not None:
        bench = pa.table(
            {
                "timestamp": _timestamp_array(data.timestamps),
                "close": pa.array(data.benchmark.detach().cpu().numpy()),
            }
        )
        pq.write_table(bench, folder / "benchmark.parquet")
    meta = {
        "format_version": FORMAT_VERSION,
        "key": key,
        "name": data.name,
        "tickers": list(data.tickers),
        "feature_names": list(data.feature_names),
        "interval": data.interval,
        "bars": t,
        "start": str(data.start) if t else None,
        "end": str(data.end) if t else None,
        "timezone": str(data.timestamps.tz),
        "benchmark_name": data.benchmark_name,
        "feature_mean": None if data.feature_mean is None else data.feature_mean.cpu().tolist(),
        "feature_std": None if data.feature_std is None else data.feature_std.cpu().tolist(),
        "meta": _json_safe(data.meta),
        "created": pd.Timestamp.now(tz="UTC").isoformat(),
        **_json_safe(extra),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def interleave_into(out: np.ndarray, columns: list[pa.Array], block: int = 1 << 11) -> None:
    """Columns [R] (one row group's) into float32 `out` [R, F], copied in row blocks that
    stay in cache (a whole-column strided copy per feature is several times slower; blocks of
    2,048 rows, about 100 KB of `out` with 13 features, copied synthetic-edge-minute's 9.7M rows
    about 2x faster than blocks of 65,536, which outgrow a core's L2 cache: a cost of every
    tournament worker's first pod)."""
    arrays = [column.to_numpy(zero_copy_only=False) for column in columns]
    for lo in range(0, len(out), block):  # loop over row blocks, not tickers
        hi = min(len(out), lo + block)
        for j, array in enumerate(arrays):
            out[lo:hi, j] = array[lo:hi]


def _read_rows(
    path: Path, t: int, n: int, names: tuple[str, ...], folder: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """The panel file's rows, one row group at a time into preallocated arrays (so a load
    holds the panel and one row group, not the whole table besides): features float32
    [t x n, F], tradable [t x n], reducible [t x n] (None for a file without the column:
    a panel without a point-in-time universe), and each bar's timestamp (int64 ns) [t],
    the order (timestamp-major, ticker-minor) checked on the way."""
    file = pq.ParquetFile(path, read_dictionary=["ticker"])
    if file.metadata.num_rows != t * n:
        raise DataError(f"{folder}: panel has {file.metadata.num_rows} rows, expected {t} bars x {n} tickers")
    masks = ["tradable", *(["reducible"] if "reducible" in file.schema_arrow.names else [])]
    features = np.empty((t * n, len(names)), dtype=np.float32)
    flags = {mask: np.empty(t * n, dtype=bool) for mask in masks}
    stamps = np.empty(t * n, dtype=np.int64)
    start = 0
    for group in range(file.num_row_groups):  # loop over row groups, not tickers
        table = file.read_row_group(group, columns=["timestamp", "ticker", *names, *masks])
        rows = slice(start, start + table.num_rows)
        codes = table.column("ticker").combine_chunks().indices.to_numpy()
        if (codes != np.arange(start, rows.stop) % max(1, n)).any():
            raise DataError(f"{folder}: panel rows are not ordered timestamp-major, ticker-minor")
        stamps[rows] = table.column("timestamp").combine_chunks().cast(pa.int64()).to_numpy()
        for mask in masks:
            flags[mask][rows] = table.column(mask).to_numpy()
        interleave_into(features[rows], [table.column(name).combine_chunks() for name in names])
        start = rows.stop
    by_bar = stamps.reshape(t, n)
    if (by_bar != by_bar[:, :1]).any():
        raise DataError(f"{folder}: panel rows are not ordered timestamp-major, ticker-minor")
    return features, flags["tradable"], flags.get("reducible"), by_bar[:, 0].copy()


def _read_panel(folder: Path) -> MarketData:
    """A panel entry back as `MarketData` (no pivot: rows are timestamp-major)."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{folder}: cache format {meta.get('format_version')}, expected {FORMAT_VERSION}; rebuild it")
    tickers, names = tuple(meta["tickers"]), tuple(meta["feature_names"])
    n, t = len(tickers), int(meta["bars"])
    features, tradable, reducible, stamps = _read_rows(folder / "panel.parquet", t, n, names, folder)
    timestamps = pd.DatetimeIndex(pd.to_datetime(stamps, utc=True)).tz_convert(meta.get("timezone", EXCHANGE_TZ))
    benchmark = None
    if (folder / "benchmark.parquet").is_file():
        benchmark = torch.from_numpy(_column(pq.read_table(folder / "benchmark.parquet"), "close").astype(np.float32))

    def stats(name: str) -> torch.Tensor | None:
        return None if meta.get(name) is None else torch.tensor(meta[name], dtype=torch.float32)

    data = MarketData(
        timestamps=timestamps,
        tickers=tickers,
        features=torch.from_numpy(features.reshape(t, n, len(names))),
        tradable=torch.from_numpy(tradable.reshape(t, n)),
        reducible=None if reducible is None else torch.from_numpy(reducible.reshape(t, n)),
        feature_names=names,
        interval=meta["interval"],
        benchmark=benchmark,
        benchmark_name=meta.get("benchmark_name"),
        name=meta.get("name", "unnamed"),
        meta=dict(meta.get("meta", {})),
    )
    return replace(data, feature_mean=stats("feature_mean"), feature_std=stats("feature_std"))
