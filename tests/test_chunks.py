"""Ticker-month chunks, and vendor bars put on the exchange's regular sessions."""

from __future__ import annotations

import pandas as pd
import pytest

from market_envs.data import DataError
from market_envs.data.calendar import to_session_bars
from market_envs.data.chunks import DownloadBar, checked_chunk, month_chunks
from market_envs.errors import ConfigError

NY = "America/New_York"


def test_months_cover_the_window_and_only_ended_months_are_final():
    chunks = month_chunks("AAA", "2020-10-30", "2021-03-16", now=pd.Timestamp("2021-03-02", tz=NY))
    assert [f"{c.start:%Y-%m-%d}" for c in chunks] == [
        "2020-10-01",
        "2020-11-01",
        "2020-12-01",
        "2021-01-01",
        "2021-02-01",
        "2021-03-01",
    ]
    assert all(c.end == chunks[i + 1].start for i, c in enumerate(chunks[:-1]))
    assert [c.final for c in chunks] == [True, True, True, True, True, False]
    # February ended less than a day before `now`: not final yet
    late = month_chunks("AAA", "2021-02-10", "2021-02-11", now=pd.Timestamp("2021-03-01 12:00", tz=NY))
    assert [c.final for c in late] == [False]
    # an end at a month's first midnight does not touch that month
    assert len(month_chunks("AAA", "2021-01-05", "2021-02-01", now=pd.Timestamp("2022-01-01", tz=NY))) == 1
    assert chunks[0].start.tz is not None and str(chunks[0].start.tz) == NY


def test_empty_window_is_refused():
    with pytest.raises(DataError, match="end must be after start"):
        month_chunks("AAA", "2021-01-05", "2021-01-05")


def test_a_chunk_is_validated_and_cut_to_its_month():
    chunk = month_chunks("AAA", "2021-01-04", "2021-01-30", now=pd.Timestamp("2022-01-01", tz=NY))[0]
    stamps = pd.to_datetime(["2020-12-31T20:00:00Z", "2021-01-04T14:30:00Z", "2021-02-01T14:30:00Z"], utc=True)
    frame = pd.DataFrame(
        {"timestamp": stamps, "ticker": "AAA", "open": 1.0, "high": 1.0, "low": 1.0, "close": 1.0, "volume": 1.0}
    )
    kept = checked_chunk(frame, chunk, "test")
    assert list(kept["timestamp"].astype(str)) == ["2021-01-04 09:30:00-05:00"]
    with pytest.raises(DataError, match=r"test AAA 2021-01: ticker AAA at .*close is -1"):
        checked_chunk(frame.assign(close=[1.0, -1.0, 1.0]), chunk, "test")
    with pytest.raises(DataError, match="answered with bars of BBB"):
        checked_chunk(frame.assign(ticker="BBB"), chunk, "test")
    assert len(checked_chunk(frame.iloc[:0], chunk, "test")) == 0


def _bars(*utc: str) -> pd.DataFrame:
    return pd.DataFrame({"timestamp": pd.to_datetime(list(utc), utc=True), "ticker": "AAA", "close": 1.0})


def test_sessions_across_both_daylight_saving_changes():
    # 09:30 New York is 13:30 UTC in summer time and 14:30 UTC in winter time
    bars = _bars(
        "2020-10-30T13:30Z",
        "2020-10-30T14:30Z",
        "2020-11-02T13:30Z",
        "2020-11-02T14:30Z",
        "2021-03-12T14:30Z",
        "2021-03-15T13:30Z",
        "2021-03-15T13:29Z",
    )
    kept, dropped = to_session_bars(bars, "1min")
    assert [str(t) for t in kept["timestamp"]] == [
        "2020-10-30 09:30:00-04:00",
        "2020-10-30 10:30:00-04:00",
        "2020-11-02 09:30:00-05:00",
        "2021-03-12 09:30:00-05:00",
        "2021-03-15 09:30:00-04:00",
    ]
    assert dropped == 2  # 08:30 on 11-02 and 09:29 on 03-15: before the open


def test_early_close_holiday_and_grid():
    bars = _bars(
        "2020-11-27T17:59Z", "2020-11-27T18:00Z", "2020-11-26T15:00Z", "2020-11-30T14:35Z", "2020-11-30T14:37Z"
    )
    kept, dropped = to_session_bars(bars, "5min")
    assert [str(t) for t in kept["timestamp"]] == ["2020-11-30 09:35:00-05:00"]  # 12:59 is off the 5-minute grid
    assert dropped == 4
    daily, dropped = to_session_bars(_bars("2020-11-27T05:00Z", "2020-11-26T05:00Z"), "1D")
    assert [str(t) for t in daily["timestamp"]] == ["2020-11-27 09:30:00-05:00"] and dropped == 1


def test_refused_bars_name_ticker_time_and_session():
    with pytest.raises(
        DataError,
        match=r"AAA at 2020-11-27 13:00:00-05:00: bar outside the regular session on 2020-11-27 \(the session runs 09:30-13:00\)",
    ):
        to_session_bars(_bars("2020-11-27T17:59Z", "2020-11-27T18:00Z"), "1min", "refuse", source="x")
    with pytest.raises(DataError, match="2020-11-26 .*weekend or holiday"):
        to_session_bars(_bars("2020-11-26T15:00Z"), "1min", "refuse")
    with pytest.raises(ConfigError, match="outside_session 'keep'"):
        to_session_bars(_bars("2020-11-26T15:00Z"), "1min", "keep")


def test_download_bar_counts_chunks_rows_and_tickers():
    from rich.console import Console

    console = Console(record=True, width=200, force_terminal=False)
    bar = DownloadBar(console)
    bar.start("alpaca: downloading", chunks=3, tickers=2)
    bar.advance(100, fetched=True, tickers_done=0)
    bar.advance(50, fetched=False, tickers_done=1)
    bar.advance(25, fetched=True, tickers_done=2)
    bar.stop()
    text = console.export_text()
    assert "3/3" in text and "[2/2] tickers" in text and "175 rows" in text and "2 fetched" in text
