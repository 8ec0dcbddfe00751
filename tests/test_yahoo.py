"""The yahoo provider on recorded responses: yfinance's own `download` assembles them
(with `yfinance.multi.Ticker` replaced), the network is blocked throughout."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd
import pytest
import torch

import yfinance
import yfinance.multi
from market_envs.data import DataError, yahoo
from market_envs.data.cache import DataCache
from market_envs.data.yahoo import normalize_download, request_windows, yahoo_interval

pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword:Warning")  # inside yfinance

FIXTURES = Path(__file__).parent / "fixtures" / "yahoo"
NY = "America/New_York"


class RecordedTicker:
    """Stands in for `yfinance.Ticker`: `history` replays tests/fixtures/yahoo/<SYM>_<interval>.csv.

    Every call is logged in `calls` as (symbol, start, end, interval).
    """

    calls: list = []

    def __init__(self, symbol, session=None):
        self.ticker = symbol
        self._price_history = None

    def history(self, period=None, interval="1d", start=None, end=None, **kwargs):
        lo, hi = (pd.Timestamp(x) for x in (start, end))
        lo, hi = (x.tz_localize(NY) if x.tzinfo is None else x for x in (lo, hi))
        RecordedTicker.calls.append((self.ticker, lo, hi, interval))
        file = FIXTURES / f"{self.ticker}_{interval}.csv"
        if not file.exists():  # what yfinance gives for a delisted or unknown symbol
            return yfinance.utils.empty_df()
        frame = pd.read_csv(file, index_col=0)
        index = pd.to_datetime(frame.index, utc=True).tz_convert(NY).rename(frame.index.name)
        frame.index = index
        return frame[(index >= lo) & (index < hi)]


@pytest.fixture(autouse=True)
def recorded(monkeypatch):
    """Replay recorded histories; any socket connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(yfinance.multi, "Ticker", RecordedTicker)
    RecordedTicker.calls = []
    return RecordedTicker


def quiet_download(*args, **kwargs):
    """yfinance.download without its worker threads (deterministic call order)."""
    return yfinance.download(*args, **{**kwargs, "threads": False})


def refusing_download(*args, **kwargs):
    raise AssertionError("download called although the chunk is cached")


def test_interval_spellings():
    assert yahoo_interval("1min") == "1m" and yahoo_interval("1m") == "1m"
    assert yahoo_interval("1D") == "1d" and yahoo_interval("5min") == "5m"
    with pytest.raises(DataError, match="not served by Yahoo"):
        yahoo_interval("7min")


def test_thirty_day_minute_request_is_split_into_pieces_of_at_most_eight_days():
    windows = request_windows("2024-02-12", "2024-03-13", "1min")
    assert len(windows) == 4
    assert windows[0][0] == pd.Timestamp("2024-02-12", tz=NY)
    assert windows[-1][1] == pd.Timestamp("2024-03-13", tz=NY)
    for (lo, hi), (next_lo, _) in zip(windows, windows[1:]):
        assert hi == next_lo
    assert all(hi - lo <= pd.Timedelta(days=8) for lo, hi in windows)


def test_provider_sends_thirty_days_of_minutes_as_eight_day_requests(recorded):
    data = yahoo(["AAPL", "MSFT"], "2024-02-12", "2024-03-13", "1m", download=quiet_download, cache=False)
    spans = {(lo, hi) for _, lo, hi, _ in recorded.calls}
    assert len(spans) == 4 and all(hi - lo <= pd.Timedelta(days=8) for lo, hi in spans)
    assert {symbol for symbol, *_ in recorded.calls} == {"AAPL", "MSFT", "QQQ"}
    assert data.tickers == ("AAPL", "MSFT") and data.benchmark_name == "QQQ"
    assert data.num_bars == 780  # two recorded sessions of 390 minutes


def test_daily_bars_come_in_one_request(recorded):
    data = yahoo(["AAPL"], "2024-01-02", "2024-04-30", "1d", download=quiet_download, cache=False)
    assert {(lo, hi) for _, lo, hi, _ in recorded.calls} == {
        (pd.Timestamp("2024-01-02", tz=NY), pd.Timestamp("2024-04-30", tz=NY))
    }
    assert data.interval == "1D"
    assert data.timestamps[0] == pd.Timestamp("2024-01-02", tz=NY)


def test_minute_panel_is_exchange_time_with_gap_masked():
    data = yahoo(["AAPL", "MSFT"], "2024-03-08", "2024-03-12", "1m", download=quiet_download, cache=False)
    assert str(data.timestamps.tz) == NY
    monday = data.timestamps[data.timestamps.date == pd.Timestamp("2024-03-11").date()]
    assert monday[0] == pd.Timestamp("2024-03-11 09:30", tz=NY)  # across the DST change
    msft = data.tickers.index("MSFT")
    assert not data.tradable[100:104, msft].any() and data.tradable[100:104, 0].all()
    recorded_qqq = pd.read_csv(FIXTURES / "QQQ_1m.csv")["Close"].to_numpy()
    assert torch.allclose(data.benchmark.double(), torch.tensor(recorded_qqq), rtol=1e-6)


@pytest.mark.parametrize("group_by", ["column", "ticker"])
def test_both_column_layouts_normalise_alike(group_by):
    args = dict(start="2024-03-08", end="2024-03-09", interval="1m", progress=False, threads=False)
    wide = yfinance.download(["AAPL", "MSFT"], group_by=group_by, **args)
    assert isinstance(wide.columns, pd.MultiIndex)
    long = normalize_download(wide, ["AAPL", "MSFT"])
    assert list(long.columns) == ["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    assert long.groupby("ticker").size().to_dict() == {"AAPL": 390, "MSFT": 386}
    reference = pd.read_csv(FIXTURES / "AAPL_1m.csv").iloc[:390]
    assert (long.loc[long["ticker"] == "AAPL", "close"].to_numpy() == reference["Close"].to_numpy()).all()


def test_flat_single_ticker_response():
    wide = yfinance.download(
        "AAPL", start="2024-03-08", end="2024-03-09", interval="1m", progress=False, multi_level_index=False
    )
    assert not isinstance(wide.columns, pd.MultiIndex)
    assert normalize_download(wide, ["AAPL"])["ticker"].eq("AAPL").all()


def test_naive_daily_index_is_read_as_exchange_dates():
    wide = yfinance.download(["AAPL"], start="2024-01-02", end="2024-01-10", interval="1d", progress=False)
    assert wide.index.tz is None  # yfinance drops the zone of daily bars by default
    long = normalize_download(wide, ["AAPL"])
    assert long["timestamp"].iloc[0] == pd.Timestamp("2024-01-02", tz=NY)


def test_ticker_that_comes_back_empty_is_a_data_error_and_nothing_is_cached(tmp_path):
    store = DataCache(tmp_path)
    with pytest.raises(DataError, match=r"requested ticker\(s\) \['DELISTED'\] came back empty"):
        yahoo(["AAPL", "DELISTED"], "2024-03-08", "2024-03-12", "1m", download=quiet_download, cache=store)
    assert store.entries() == []


def test_missing_benchmark_is_a_data_error():
    with pytest.raises(DataError, match="benchmark NOPE came back empty"):
        yahoo(["AAPL"], "2024-03-08", "2024-03-12", "1m", benchmark="NOPE", download=quiet_download, cache=False)


def test_drop_missing_drops_with_a_warning():
    with pytest.warns(UserWarning, match="DELISTED"):
        data = yahoo(
            ["AAPL", "DELISTED"],
            "2024-03-08",
            "2024-03-12",
            "1m",
            download=quiet_download,
            cache=False,
            drop_missing=True,
        )
    assert data.tickers == ("AAPL",) and data.meta["dropped_tickers"] == ["DELISTED"]


def test_cache_hit_never_calls_download(tmp_path, recorded):
    store = DataCache(tmp_path)
    first = yahoo(["AAPL", "MSFT"], "2024-03-01", "2024-03-12", "1m", download=quiet_download, cache=store)
    assert len(store.entries()) == 2  # two chunks of <= 8 days
    again = yahoo(["MSFT", "AAPL"], "2024-03-01", "2024-03-12", "1m", download=refusing_download, cache=store)
    assert torch.equal(first.features, again.features[:, [1, 0]])
    assert torch.equal(first.benchmark, again.benchmark)


def test_bad_values_in_a_response_name_ticker_and_time_and_cache_nothing(tmp_path, monkeypatch):
    def download_with_bad_bar(*args, **kwargs):
        wide = quiet_download(*args, **kwargs)
        wide.loc[wide.index[50], ("Close", "MSFT")] = -1.0
        return wide

    store = DataCache(tmp_path)
    with pytest.raises(DataError, match=r"MSFT at 2024-03-08 10:20:00-05:00: close is -1.0"):
        yahoo(["AAPL", "MSFT"], "2024-03-08", "2024-03-12", "1m", download=download_with_bad_bar, cache=store)
    assert store.entries() == []


def test_download_exception_becomes_data_error():
    def broken(*args, **kwargs):
        raise ConnectionError("no route to host")

    with pytest.raises(DataError, match="no route to host"):
        yahoo(["AAPL"], "2024-03-08", "2024-03-12", "1m", download=broken, cache=False)


class OfflineTicker(RecordedTicker):
    """What every symbol gets on a machine without a network: the host name does not resolve."""

    def history(self, *args, **kwargs):
        raise ConnectionError(
            "Failed to resolve 'query2.finance.yahoo.com' ([Errno -3] Temporary failure in name resolution)"
        )


def test_an_offline_build_says_each_kind_of_failure_once_and_ends_with_its_line(monkeypatch, capfd) -> None:
    """Issue 75, finding 11: offline, `trader data build nasdaq100-minute` printed 1,265 lines
    (yfinance's per ticker) before its last. yfinance's own lines are held back; each kind of
    failure is one warning with no ticker in it; the last line is the provider's, as before."""
    monkeypatch.setattr(yfinance.multi, "Ticker", OfflineTicker)
    tickers = [f"T{i:02d}" for i in range(30)]
    with pytest.warns(UserWarning) as said, pytest.raises(DataError, match="none means Yahoo is unreachable"):
        yahoo(tickers, "2024-03-04", "2024-03-22", "1m", download=quiet_download, cache=False)
    assert capfd.readouterr().err == ""  # nothing of yfinance's own
    kinds = {str(w.message) for w in said if "yfinance" in str(w.message)}
    assert 1 <= len(kinds) <= 3, kinds
    assert not any(t in kind for kind in kinds for t in tickers), kinds
