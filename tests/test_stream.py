"""A panel assembled one ticker at a time equals the one `from_frame` builds at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs.data import DataError, from_frame
from market_envs.data.frame import validated_long
from market_envs.data.stream import stream_panel, time_grid
from market_fixtures import random_walk_frame


def ragged_frame() -> pd.DataFrame:
    """Five random walks with gaps; T003 lists late, T004 stops early."""
    frame = random_walk_frame(5, 600, seed=7, gap_prob=0.2)
    late = (frame["ticker"] == "T003") & (frame["timestamp"] < frame["timestamp"].iloc[0] + pd.Timedelta(minutes=250))
    early = (frame["ticker"] == "T004") & (frame["timestamp"] > frame["timestamp"].iloc[0] + pd.Timedelta(minutes=400))
    return frame[~late & ~early].reset_index(drop=True)


def by_ticker(frame: pd.DataFrame):
    groups = {t: validated_long(g.reset_index(drop=True), "test") for t, g in frame.groupby("ticker")}
    calls = []

    def bars_of(ticker):
        calls.append(ticker)
        return groups[ticker]

    return bars_of, calls


def assert_same_panel(a, b):
    assert a.timestamps.equals(b.timestamps) and a.tickers == b.tickers and a.interval == b.interval
    assert torch.equal(a.features, b.features) and torch.equal(a.tradable, b.tradable)
    assert (a.benchmark is None and b.benchmark is None) or torch.equal(a.benchmark, b.benchmark)


def test_streamed_panel_equals_from_frame_ragged():
    frame = ragged_frame()
    bench = frame[frame["ticker"] == "T000"].set_index("timestamp")["close"] * 3
    tickers = ["T004", "T001", "T003", "T002", "T000"]
    bars_of, calls = by_ticker(frame)
    streamed = stream_panel(tickers, bars_of, benchmark=bench, benchmark_name="B", name="x")
    assert_same_panel(streamed, from_frame(frame, bench, tickers=tickers, benchmark_name="B", ragged=True))
    assert calls == tickers * 2  # two passes, one ticker at a time
    assert not streamed.tradable[:250, 2].any()  # T003 before its listing


def test_streamed_panel_equals_from_frame_when_every_ticker_starts_together():
    frame = random_walk_frame(4, 300, seed=2, gap_prob=0.1)
    bars_of, _ = by_ticker(frame)
    tickers = ["T000", "T001", "T002", "T003"]
    assert_same_panel(stream_panel(tickers, bars_of, ragged=False), from_frame(frame, tickers=tickers))
    grid = time_grid(tickers, bars_of)
    assert_same_panel(stream_panel(tickers, bars_of, grid=grid, ragged=False), from_frame(frame, tickers=tickers))


def test_a_late_ticker_is_refused_without_ragged_and_an_empty_one_always():
    frame = ragged_frame()
    bars_of, _ = by_ticker(frame)
    with pytest.raises(DataError, match="T003 starts after the first bar"):
        stream_panel(["T000", "T003"], bars_of, ragged=False, source="s")
    with pytest.raises(DataError, match="ticker T009 has no bars"):
        stream_panel(["T000", "T009"], lambda t: bars_of(t) if t != "T009" else frame.iloc[:0], source="s")


def test_an_unadjusted_split_is_warned_about_once():
    frame = random_walk_frame(2, 3 * 390, seed=1, freq="1min")
    frame["timestamp"] = frame["timestamp"].where(frame.index < 2 * 390, frame["timestamp"] + pd.Timedelta(days=1))
    day2 = frame["timestamp"] >= frame["timestamp"].iloc[2 * 390]
    frame.loc[day2 & (frame["ticker"] == "T001"), ["open", "high", "low", "close"]] /= 2.0
    bars_of, _ = by_ticker(frame)
    with pytest.warns(UserWarning, match=r"unadjusted stock splits: T001 on .* \(x0\.50\)"):
        stream_panel(["T000", "T001"], bars_of)
    assert np.isfinite(stream_panel(["T000"], bars_of).features.numpy()).all()


def test_the_panel_cache_round_trips_through_many_row_groups(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import market_envs.data.cache as cache_module
    from market_envs.data.cache import DataCache

    monkeypatch.setattr(cache_module, "ROW_GROUP_ROWS", 1000)
    frame = ragged_frame()
    bench = frame[frame["ticker"] == "T000"].set_index("timestamp")["close"]
    data = from_frame(frame, bench, benchmark_name="B", ragged=True)
    store = DataCache(tmp_path)
    folder = store.save_panel("k", data)
    assert pq.ParquetFile(folder / "panel.parquet").metadata.num_row_groups == -(
        -data.num_bars // 200
    )  # 200 bars x 5 tickers
    assert_same_panel(store.load_panel("k"), data)
