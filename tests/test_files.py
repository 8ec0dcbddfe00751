"""The files provider: layouts, case-insensitive columns, errors naming the file, and
exact round trips through CSV and Parquet."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from market_envs.data import DataError, from_frame, read_files, write_files
from market_fixtures import random_walk_frame
from test_data_frame import BAD_CASES, good_frame


def assert_same_panel(a, b) -> None:
    assert a.timestamps.equals(b.timestamps)
    assert a.tickers == b.tickers
    assert a.feature_names == b.feature_names
    assert torch.equal(a.features, b.features)
    assert torch.equal(a.tradable, b.tradable)
    assert (a.benchmark is None) == (b.benchmark is None)
    if a.benchmark is not None:
        assert torch.equal(a.benchmark, b.benchmark)
        assert a.benchmark_name == b.benchmark_name


def gappy_panel():
    frame = random_walk_frame(3, 150, seed=4, gap_prob=0.05)
    bench = random_walk_frame(1, 150, seed=5)
    return from_frame(frame, bench.assign(ticker="QQQ"), benchmark_name="QQQ")


@pytest.mark.parametrize("layout", ["long", "per_ticker"])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_round_trip_is_exact(tmp_path, fmt, layout):
    data = gappy_panel()
    assert not data.tradable[60:].all()  # the panel has filled gaps to survive the trip
    written = write_files(data, tmp_path, format=fmt, layout=layout)
    assert all(p.suffix == f".{fmt}" for p in written)
    back = read_files(tmp_path, benchmark="QQQ")
    assert_same_panel(data, back)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_synthetic_round_trip_is_exact(tmp_path, fmt):
    synthetic = pytest.importorskip("market_envs.data.synthetic").synthetic
    data = synthetic(4, "2024-03-04", "2024-03-07", seed=11)
    write_files(data, tmp_path, format=fmt, layout="per_ticker")
    back = read_files(tmp_path, benchmark=data.benchmark_name)
    assert_same_panel(data, back)


def test_columns_matched_case_insensitively(tmp_path):
    frame = good_frame().rename(columns=str.upper).rename(columns={"TIMESTAMP": "Datetime", "TICKER": "Symbol"})
    frame.to_csv(tmp_path / "bars.csv", index=False)
    data = read_files(tmp_path / "bars.csv")
    assert data.tickers == ("T000", "T001")
    assert torch.equal(data.features, from_frame(good_frame()).features)


def test_per_ticker_files_take_the_ticker_from_the_file_name(tmp_path):
    frame = good_frame()
    for ticker, rows in frame.groupby("ticker"):
        rows.drop(columns="ticker").to_parquet(tmp_path / f"{ticker}.parquet")
    (tmp_path / "notes.txt").write_text("not data")
    data = read_files(tmp_path, tickers=["T001", "T000"])
    assert data.tickers == ("T001", "T000")
    assert torch.equal(data.features[:, 0], from_frame(frame).features[:, 1])


def test_naive_timestamps_need_assume_tz(tmp_path):
    frame = good_frame()
    frame["timestamp"] = frame["timestamp"].dt.tz_localize(None)
    frame.to_csv(tmp_path / "bars.csv", index=False)
    with pytest.raises(DataError, match="no time zone"):
        read_files(tmp_path)
    data = read_files(tmp_path, assume_tz="America/New_York")
    assert data.timestamps[0] == pd.Timestamp("2024-01-02 09:30", tz="America/New_York")


@pytest.mark.parametrize("case_id, mutate, words", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_file_errors_name_the_file(tmp_path, case_id, mutate, words):
    """Each bad case in one file of a folder: the error names that file."""
    bad = mutate(good_frame())
    good = good_frame()
    good[good["ticker"] == "T000"].assign(ticker="OK").to_csv(tmp_path / "a_good.csv", index=False)
    bad.to_csv(tmp_path / "b_bad.csv", index=False)
    with pytest.raises(DataError) as err:
        read_files(tmp_path)
    message = str(err.value)
    if case_id == "empty":
        assert "b_bad.csv" in message and "empty file" in message
    elif case_id == "no_overlap":  # a property of the folder, not of one file
        assert "EARLY" in message and "no overlap" in message
    else:
        assert "b_bad.csv" in message and "a_good.csv" not in message
        for word in words:
            assert word in message


def test_empty_file_is_an_error(tmp_path):
    (tmp_path / "AAPL.csv").write_text("")
    with pytest.raises(DataError, match=r"AAPL\.csv: empty file"):
        read_files(tmp_path)


def test_header_only_parquet_is_an_error(tmp_path):
    good_frame().iloc[:0].to_parquet(tmp_path / "AAPL.parquet")
    with pytest.raises(DataError, match=r"AAPL\.parquet: empty file"):
        read_files(tmp_path)


def test_folder_without_data_files_is_an_error(tmp_path):
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(DataError, match="no .csv or .parquet"):
        read_files(tmp_path)
    with pytest.raises(DataError, match="no such file"):
        read_files(tmp_path / "missing")


def test_absent_requested_ticker_is_an_error(tmp_path):
    good_frame().to_csv(tmp_path / "bars.csv", index=False)
    with pytest.raises(DataError, match=r"requested ticker\(s\) \['AAPL'\]"):
        read_files(tmp_path, tickers=["T000", "AAPL"])


def test_ticker_in_two_files_is_an_error(tmp_path):
    good_frame().to_csv(tmp_path / "one.csv", index=False)
    good_frame().to_parquet(tmp_path / "two.parquet")
    with pytest.raises(DataError, match="appears in two files"):
        read_files(tmp_path)


def test_write_files_refuses_unknown_format(tmp_path):
    with pytest.raises(DataError, match="unknown format"):
        write_files(from_frame(good_frame()), tmp_path, format="xlsx")
