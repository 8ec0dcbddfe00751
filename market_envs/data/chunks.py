"""Chunked, resumable vendor downloads: one ticker-month at a time, each cached whole.

A vendor provider (alpaca, polygon) only knows how to fetch one ticker's bars over
one window (`BarVendor.fetch`). This module splits a request into **chunks**, one
per ticker and calendar month in exchange time, and runs them:

- a **finished** month (one that ended more than `SETTLE` ago) is read from the
  download cache when it is there, else fetched, checked and cached at once, whole
  or not at all (`DataCache.save_frame`). It is never fetched again. A build killed
  halfway and run again therefore fetches only the chunks it had not finished;
- the **current**, incomplete month is fetched on every build and never cached;
- a month is fetched whole even when the request starts or ends inside it, so
  recipes with different dates share their chunks; the result is cut to
  [start, end) afterwards.

A chunk's cache key names the provider, the content-defining options the vendor
reports (`BarVendor.request_key`: interval, adjustment, feed, ...), the ticker and
the month. It never holds credentials or the server's address.

`DownloadBar` is a live progress bar (rich): tickers, chunks, rows and an ETA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from market_envs.data.cache import DataCache, cache_key
from market_envs.data.frame import validated_long
from market_envs.data.panel import EXCHANGE_TZ, PRICE_COLUMNS, DataError

SETTLE = pd.Timedelta(days=1)
"""How long after a month's end its bars count as final (vendors correct late prints)."""
LONG_COLUMNS = ("timestamp", "ticker", *PRICE_COLUMNS)


class BarVendor(Protocol):
    """What a vendor provider supplies to `download_bars`."""

    name: str

    def request_key(self) -> dict:
        """Options that change the bars served (interval, adjustment, feed): part of
        every chunk's cache key. Never credentials, never the server's address."""

    def fetch(self, ticker: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        """Every bar of `ticker` stamped in [start, end) as a long frame (timestamp tz-aware,
        ticker, open, high, low, close, volume); empty when the vendor has none.
        A lasting failure raises `DataError` naming the ticker and the window."""


@dataclass(frozen=True)
class Chunk:
    """One ticker-month: bars stamped in [start, end), exchange time."""

    ticker: str
    start: pd.Timestamp
    end: pd.Timestamp
    final: bool

    def __str__(self) -> str:
        return f"{self.ticker} {self.start:%Y-%m}"


def _exchange_time(value) -> pd.Timestamp:
    stamp = pd.Timestamp(value)
    return stamp.tz_localize(EXCHANGE_TZ) if stamp.tzinfo is None else stamp.tz_convert(EXCHANGE_TZ)


def month_chunks(ticker: str, start, end, now: pd.Timestamp | None = None) -> list[Chunk]:
    """The calendar months (exchange time) that [start, end) touches, for one ticker.

    :param now: the present (default: the clock); months that ended `SETTLE` before it
        are final.
    """
    lo, hi = _exchange_time(start), _exchange_time(end)
    if hi <= lo:
        raise DataError(f"empty period {lo} .. {hi}: end must be after start")
    now = _exchange_time(now if now is not None else pd.Timestamp.now(tz=EXCHANGE_TZ))
    first = lo.tz_localize(None).to_period("M").to_timestamp()
    last = (hi - pd.Timedelta(microseconds=1)).tz_localize(None).to_period("M").to_timestamp()
    months = pd.date_range(first, last, freq="MS")
    chunks = []
    for month in months:
        a = month.tz_localize(EXCHANGE_TZ)
        b = (month + pd.offsets.MonthBegin(1)).tz_localize(EXCHANGE_TZ)
        chunks.append(Chunk(ticker, a, b, final=b + SETTLE <= now))
    return chunks


def chunk_key(vendor: BarVendor, chunk: Chunk) -> str:
    """The download cache key of one chunk (see the module docstring)."""
    return cache_key(
        {
            "kind": "chunk",
            "provider": vendor.name,
            **vendor.request_key(),
            "ticker": chunk.ticker,
            "month": f"{chunk.start:%Y-%m}",
        }
    )


def empty_bars() -> pd.DataFrame:
    """A long frame with no rows and the typed columns of a chunk."""
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in PRICE_COLUMNS})
    frame.insert(0, "ticker", pd.Series(dtype="object"))
    frame.insert(0, "timestamp", pd.Series(dtype=f"datetime64[ns, {EXCHANGE_TZ}]"))
    return frame


def checked_chunk(frame: pd.DataFrame, chunk: Chunk, vendor: str) -> pd.DataFrame:
    """A fetched chunk, validated (prices, order) and cut to its month, before caching."""
    if frame is None or len(frame) == 0:
        return empty_bars()
    source = f"{vendor} {chunk}"
    long = validated_long(frame[list(LONG_COLUMNS)].copy(), source)
    if (long["ticker"] != chunk.ticker).any():
        odd = long.loc[long["ticker"] != chunk.ticker, "ticker"].iloc[0]
        raise DataError(f"{source}: the vendor answered with bars of {odd}")
    inside = (long["timestamp"] >= chunk.start) & (long["timestamp"] < chunk.end)
    return long[inside].reset_index(drop=True)


class DownloadBar:
    """A live progress bar on stderr: tickers, chunks (cached / fetched), rows, ETA.

    :param console: a rich Console to draw on (the CLI's own, so that its status line
        and this bar share one live display); default a new stderr console.
    """

    def __init__(self, console=None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "chunks [{task.fields[tickers]}] tickers, {task.fields[rows]:,} rows, {task.fields[fetched]} fetched"
            ),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._task = None
        self._rows = 0

    def start(self, description: str, chunks: int, tickers: int) -> None:
        self._progress.start()
        self._tickers = tickers
        self._task = self._progress.add_task(description, total=chunks, tickers=f"0/{tickers}", rows=0, fetched=0)

    def advance(self, rows: int, fetched: bool, tickers_done: int) -> None:
        self._rows += rows
        task = self._progress.tasks[0]
        self._progress.update(
            self._task,
            advance=1,
            rows=self._rows,
            fetched=task.fields["fetched"] + int(fetched),
            tickers=f"{tickers_done}/{self._tickers}",
        )

    def stop(self) -> None:
        self._progress.stop()


class ChunkReader:
    """One vendor's bars over [start, end), ticker by ticker, through the chunk cache.

    `download` fetches every missing chunk (pass 1: the only one that touches the
    network); `bars` then reads one ticker's bars back from the cache (pass 2), so a
    build never holds more than one ticker's raw bars at a time. Chunks that cannot be
    cached (the current month, or no cache at all) are kept in memory between passes.

    :param vendor: the provider that fetches one ticker-window.
    :param store: the download cache (None: fetch everything, cache nothing).
    :param bar: a live progress bar, or None.
    :param progress: called with one line per ticker, for logs.
    :param now: the present, for telling finished months from the current one.
    """

    def __init__(
        self,
        vendor: BarVendor,
        start,
        end,
        *,
        store: DataCache | None,
        bar: DownloadBar | None = None,
        progress: Callable[[str], None] | None = None,
        now: pd.Timestamp | None = None,
    ) -> None:
        self.vendor, self.store, self.bar, self.progress, self.now = vendor, store, bar, progress, now
        self.start, self.end = _exchange_time(start), _exchange_time(end)
        self._kept: dict[tuple[str, str], pd.DataFrame] = {}

    def download(self, tickers: list[str], on_ticker: Callable[[str, pd.DataFrame], None] | None = None) -> None:
        """Fetch what is missing for `tickers`; `on_ticker(ticker, bars)` sees each ticker's bars once."""
        plan = [(t, month_chunks(t, self.start, self.end, self.now)) for t in tickers]
        if self.bar is not None:
            self.bar.start(f"{self.vendor.name}: downloading", sum(len(c) for _, c in plan), len(tickers))
        try:
            for done, (ticker, chunks) in enumerate(plan, start=1):
                pieces, fetched = [], 0
                for chunk in chunks:
                    frame, was_fetched = self._chunk(chunk, fetch=True)
                    fetched += was_fetched
                    pieces.append(frame)
                    if self.bar is not None:
                        self.bar.advance(len(frame), was_fetched, done - (chunk is not chunks[-1]))
                if on_ticker is not None:
                    on_ticker(ticker, self._cut(pieces))
                if self.progress:
                    self.progress(
                        f"{self.vendor.name}: {ticker} ({done}/{len(tickers)}): {len(chunks)} month(s), {fetched} fetched"
                    )
        finally:
            if self.bar is not None:
                self.bar.stop()

    def bars(self, ticker: str) -> pd.DataFrame:
        """One ticker's bars in [start, end), from the cache or memory (after `download`)."""
        chunks = month_chunks(ticker, self.start, self.end, self.now)
        return self._cut([self._chunk(chunk, fetch=False)[0] for chunk in chunks])

    def _cut(self, pieces: list[pd.DataFrame]) -> pd.DataFrame:
        long = pd.concat([p for p in pieces if len(p)] or [empty_bars()], ignore_index=True)
        return long[(long["timestamp"] >= self.start) & (long["timestamp"] < self.end)].reset_index(drop=True)

    def _chunk(self, chunk: Chunk, fetch: bool) -> tuple[pd.DataFrame, bool]:
        """One chunk's bars and whether they were fetched (False: from the cache or memory)."""
        key = chunk_key(self.vendor, chunk)
        if (chunk.ticker, key) in self._kept:
            return self._kept[(chunk.ticker, key)], False
        if self.store is not None and chunk.final:
            cached = self.store.load_frame(self.vendor.name, key)
            if cached is not None:
                return cached, False
        if not fetch:
            raise DataError(f"{self.vendor.name}: chunk {chunk} was not downloaded (call download first)")
        frame = checked_chunk(self.vendor.fetch(chunk.ticker, chunk.start, chunk.end), chunk, self.vendor.name)
        if self.store is not None and chunk.final:
            self.store.save_frame(self.vendor.name, key, frame)
        else:
            self._kept[(chunk.ticker, key)] = frame
        return frame, True


def download_bars(
    vendor: BarVendor,
    tickers: list[str],
    start,
    end,
    *,
    store: DataCache | None,
    bar: DownloadBar | None = None,
    progress: Callable[[str], None] | None = None,
    now: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """Every bar of `tickers` in [start, end) as one long frame (see `ChunkReader`)."""
    pieces = []
    ChunkReader(vendor, start, end, store=store, bar=bar, progress=progress, now=now).download(
        tickers, lambda _, frame: pieces.append(frame)
    )
    return pd.concat([p for p in pieces if len(p)] or [empty_bars()], ignore_index=True)
