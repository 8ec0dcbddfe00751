"""The alpaca provider against a local server that speaks Alpaca's bars API.

alpaca-py's `StockHistoricalDataClient` runs unchanged (pointed at the server with
its `url_override`): its requests, pagination and parsing are the real ones. The
server's bars cover both daylight-saving changes (2020-11-01, 2021-03-14), the
Thanksgiving holiday (2020-11-26, where the server sends stray bars), the early
close of the day after (2020-11-27, 13:00), pre- and after-market bars, and a day
missing for one ticker.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from market_envs.data import DataError, load
from market_envs.data.cache import DataCache
from market_envs.data.indicators import WARMUP_BARS
from podracer.cli import main
from vendor_server import (
    DAYS,
    END,
    HOLIDAY,
    KEY_ID,
    MISSING,
    NY,
    SECRET,
    SESSION_BARS,
    START,
    VendorServer,
    cache_files,
    expected_regular,
    one_error_line,
    served_bars,
    write_vendor_recipe,
)


@pytest.fixture
def server():
    with VendorServer(served_bars(), page_size=500).running() as running:
        yield running


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)


def write_recipe(folder: Path, url: str, tickers=("AAA", "BBB"), interval="1min", **options) -> Path:
    return write_vendor_recipe(folder, "alpaca", url, tickers, interval, **options)


def test_panel_equals_the_servers_regular_session_bars(server, keys, tmp_path):
    data = load(write_recipe(tmp_path, server.url), data_dir=tmp_path / "data")
    served = served_bars()
    # the grid: every regular-session minute of the served days, exchange time,
    # 09:30 on both sides of each daylight-saving change, 13:00 close on 2020-11-27
    assert str(data.timestamps.tz) == NY and data.num_bars == SESSION_BARS
    opens = pd.Series(data.timestamps).groupby(data.timestamps.date).min()
    closes = pd.Series(data.timestamps).groupby(data.timestamps.date).max()
    assert [t.strftime("%H:%M") for t in opens] == ["09:30"] * 5
    assert [t.strftime("%H:%M") for t in closes] == ["15:59", "15:59", "12:59", "15:59", "15:59"]
    assert opens.iloc[0].utcoffset() == pd.Timedelta(hours=-4) and opens.iloc[1].utcoffset() == pd.Timedelta(hours=-5)
    assert opens.iloc[3].utcoffset() == pd.Timedelta(hours=-5) and opens.iloc[4].utcoffset() == pd.Timedelta(hours=-4)
    assert HOLIDAY not in {str(d) for d in data.timestamps.date}
    # known answer: the panel's OHLCV equal the server's in-session bars
    for j, ticker in enumerate(data.tickers):
        want = expected_regular(served[ticker]).set_index("timestamp")
        got = data.to_frame()
        got = got[got["ticker"] == ticker].set_index("timestamp")
        for column in ("open", "high", "low", "close", "volume"):
            np.testing.assert_array_equal(got.loc[want.index, column].to_numpy(), want[column].to_numpy(np.float32))
        observed = data.timestamps.isin(want.index)
        expected_mask = observed & (np.arange(data.num_bars) >= WARMUP_BARS)
        np.testing.assert_array_equal(data.tradable[:, j].numpy(), expected_mask)
    # BBB's missing day: filled forward from its last close and never tradable
    day = data.timestamps.date == pd.Timestamp(MISSING[1]).date()
    bbb = data.tickers.index("BBB")
    assert not data.tradable[day, bbb].any()
    assert (data.close[day, bbb] == expected_regular(served["BBB"])["close"].iloc[389].astype(np.float32)).all()
    bench = expected_regular(served["QQQ"]).set_index("timestamp")["close"]
    np.testing.assert_array_equal(data.benchmark_series().loc[bench.index].to_numpy(), bench.to_numpy(np.float32))
    # dropped: the holiday's bars, pre-market on 10-30, after-market on 11-02 (BBB has no day) and 11-27
    assert data.meta["outside_session_bars"] == 3 * 10 + 3 * 30 + 2 * 15 + 3 * 30
    # the client followed the pages, and asked for adjusted SIP bars every time
    queries = [q for path, q in server.requests if path == "/v2/stocks/bars"]
    assert any(q.get("page_token") for q in queries)
    assert all(q["adjustment"] == "all" and q["feed"] == "sip" and q["timeframe"] == "1Min" for q in queries)


def test_daily_bars_are_stamped_at_each_sessions_open(server, keys, tmp_path):
    data = load(write_recipe(tmp_path, server.url, interval="1D"), data_dir=tmp_path / "data", cache=False)
    assert [t.strftime("%Y-%m-%d %H:%M") for t in data.timestamps] == [f"{d} 09:30" for d in DAYS]
    # the server aggregates every bar of a day (pre and after market too), as Alpaca does;
    # the holiday's daily bar is dropped
    full = served_bars()["AAA"].assign(
        day=lambda f: pd.DatetimeIndex(f["timestamp"]).tz_convert(NY).strftime("%Y-%m-%d")
    )
    want = full.groupby("day")["close"].last().drop(HOLIDAY)
    np.testing.assert_array_equal(data.close[:, 0].numpy(), want.to_numpy(np.float32))
    assert data.meta["outside_session_bars"] == 3


def test_a_bar_outside_the_session_is_refused_when_the_recipe_says_so(server, keys, tmp_path, capsys):
    recipe = write_recipe(tmp_path, server.url, outside_session="refuse")
    assert main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "data")]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "ticker AAA at 2020-10-30 09:00:00-04:00" in err and "outside the regular session" in err
    assert not (tmp_path / "data" / "panels").exists()


def test_chunks_are_cached_and_never_fetched_again(server, keys, tmp_path):
    recipe = write_recipe(tmp_path, server.url)
    first = load(recipe, data_dir=tmp_path / "data")
    fetched = server.count()
    assert fetched == 8 + 7 + 8  # 6 months each; November (but BBB's) and March in two pages
    again = load(recipe, data_dir=tmp_path / "data", refresh=True)  # the panel rebuilt from cached chunks
    assert server.count() == fetched
    np.testing.assert_array_equal(again.features.numpy(), first.features.numpy())


def test_the_current_month_is_fetched_on_every_build(server, keys, tmp_path):
    from market_envs.data.alpaca import AlpacaBars
    from market_envs.data.chunks import download_bars

    store = DataCache(tmp_path / "data")
    vendor = AlpacaBars("1min", url=server.url)
    now = pd.Timestamp("2021-03-16 12:00", tz=NY)  # March is still running
    first = download_bars(vendor, ["AAA"], START, END, store=store, now=now)
    marches = lambda: sum(1 for p, q in server.requests if q.get("start", "").startswith("2021-03"))  # noqa: E731
    assert server.count() == 8 and marches() == 2  # March in two pages
    second = download_bars(vendor, ["AAA"], START, END, store=store, now=now)
    assert server.count() == 10 and marches() == 4  # only March again
    pd.testing.assert_frame_equal(first, second)
    assert len(list((tmp_path / "data" / "downloads" / "alpaca").glob("*.parquet"))) == 5


def test_the_feed_is_a_recipe_key_and_part_of_each_chunks_key(server, keys, tmp_path):
    load(write_recipe(tmp_path, server.url), data_dir=tmp_path / "data")
    sip = server.count()
    data = load(write_recipe(tmp_path, server.url, feed="iex"), data_dir=tmp_path / "data")
    iex = [q for _, q in server.requests[sip:]]
    assert len(iex) == sip and all(q["feed"] == "iex" and q["adjustment"] == "all" for q in iex)  # no SIP chunk reused
    assert data.num_bars == SESSION_BARS
    assert len(list((tmp_path / "data" / "downloads" / "alpaca").glob("*.parquet"))) == 2 * 18


def test_a_429_is_waited_out(server, keys, tmp_path):
    server.throttle = 2
    data = load(write_recipe(tmp_path, server.url), data_dir=tmp_path / "data")
    assert data.num_bars == SESSION_BARS and server.count() == 23 + 2


def test_exhausted_retries_give_one_line_and_cache_nothing(server, keys, tmp_path, capsys):
    server.throttle = 1000
    recipe = write_recipe(tmp_path, server.url, retries=2)
    assert main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "data")]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "alpaca: AAA 2020-10-01 .. 2020-11-01: still rate-limited (HTTP 429) after 3 attempts" in err
    assert server.count() == 3
    assert cache_files(tmp_path / "data") == []


def test_missing_keys_name_both_variables_and_send_nothing(server, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("APCA_API_KEY_ID", raising=False)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    assert main(["data", "build", str(write_recipe(tmp_path, server.url)), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and err.count("\n") == 1
    assert "APCA_API_KEY_ID and APCA_API_SECRET_KEY" in err and SECRET not in err
    assert server.count() == 0 and cache_files(tmp_path / "data") == []


def test_bad_keys_give_one_line_without_the_keys(server, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", "wrong-secret-0123456789")
    assert main(["data", "build", str(write_recipe(tmp_path, server.url)), "--data-dir", str(tmp_path / "data")]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "HTTP 403" in err and "APCA_API_KEY_ID" in err and "AAA" in err
    assert "wrong-secret" not in err and KEY_ID not in err
    assert server.count() == 1 and cache_files(tmp_path / "data") == []


def test_an_unknown_symbol_gives_one_line_and_no_panel(server, keys, tmp_path, capsys):
    recipe = write_recipe(tmp_path, server.url, tickers=("AAA", "ZZZZ"))
    assert main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "data")]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "ZZZZ" in err and "unknown symbol" in err
    assert not (tmp_path / "data" / "panels").exists()
    # what was cached is whole chunks only: each file reads back
    for file in cache_files(tmp_path / "data"):
        assert file.suffix == ".parquet" and not file.name.startswith(".tmp")
        pd.read_parquet(file)


def test_an_unknown_symbol_is_dropped_when_the_recipe_says_so(server, keys, tmp_path):
    with pytest.warns(UserWarning, match="dropped ticker.*ZZZZ"):
        data = load(write_recipe(tmp_path, server.url, tickers=("AAA", "ZZZZ"), drop_missing=True), cache=False)
    assert data.tickers == ("AAA",) and data.meta["dropped_tickers"] == ["ZZZZ"]


def test_keys_are_never_written_or_logged(server, keys, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    recipe = write_recipe(tmp_path, server.url)
    assert main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "data")]) == 0
    assert main(["data", "info", str(recipe), "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr()
    texts = [out.out, out.err, caplog.text, recipe.read_text()]
    texts += [f.read_bytes().decode("latin-1") for f in cache_files(tmp_path / "data")]
    assert len(texts) > 10
    for text in texts:
        assert KEY_ID not in text and SECRET not in text


def test_data_build_shows_tickers_chunks_rows_and_an_eta(server, keys, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # the bar's whole line (rich drops columns on a narrow console)
    assert main(["data", "build", str(write_recipe(tmp_path, server.url)), "--data-dir", str(tmp_path / "data")]) == 0
    err = capsys.readouterr().err
    bar = [line for line in err.splitlines() if line.startswith("alpaca: downloading")]
    rows = sum(len(frame) for frame in served_bars().values())  # every served bar, before the session filter
    assert len(bar) == 1 and f"18/18 chunks [3/3] tickers, {rows:,} rows, 18 fetched" in bar[0]
    assert re.search(r"ETA \d+:\d\d:\d\d$", bar[0].rstrip())


def test_keys_never_reach_a_run_directory(server, keys, tmp_path, monkeypatch, capsys, caplog):
    """Train on the vendor's panel and backtest the run: no file of the run directory,
    no line printed or logged holds a key."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    recipe, run = write_recipe(tmp_path, server.url, interval="5min"), tmp_path / "run"  # the backtest is bar by bar
    tiny = tmp_path / "ppo.toml"
    tiny.write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [16]\n")
    assert (
        main(
            [
                "train",
                "--algo",
                "ppo",
                "--dataset",
                str(recipe),
                "--steps",
                "32",
                "--num-envs",
                "2",
                "--eval-every",
                "0",
                "--config",
                str(tiny),
                str(run),
            ]
        )
        == 0
    )
    assert main(["backtest", str(run), "--no-tear-sheet"]) == 0
    files = cache_files(run)
    assert {"config.toml", "report.json", "report.md", "dataset.json"} <= {f.name for f in files}
    out = capsys.readouterr()
    texts = [out.out, out.err, caplog.text] + [f.read_bytes().decode("latin-1") for f in files]
    for text in texts:
        assert KEY_ID not in text and SECRET not in text


@pytest.mark.slow
def test_the_demo_runs_on_a_vendor_recipe_and_its_run_holds_no_key(server, keys, tmp_path, monkeypatch, capsys):
    """`trader demo` (what `make demo DATASET=...` runs) on the alpaca provider's panel: a
    tournament on two dask worker processes, the SB3 baseline and the backtest."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))  # the workers read the panel the demo built
    run = tmp_path / "runs" / "demo"
    code = main(
        [
            "demo",
            "--dataset",
            str(write_recipe(tmp_path, server.url)),
            str(run),
            "--minutes",
            "5",
            "--pods",
            "2",
            "--workers",
            "2",
            "--pod-steps",
            "512",
            "--no-tear-sheet",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads((run / "report.json").read_text())
    assert report["period"]["name"] == "test" and {"best", "sb3-ppo-s0", "benchmark", "equal_weight"} <= set(
        report["metrics"]
    )
    assert report["benchmark"] == "QQQ" and report["tickers"] == ["AAA", "BBB"]
    assert server.count() == 23  # downloaded once, by the demo; the workers read the cache
    for text in [out.out, out.err] + [f.read_bytes().decode("latin-1") for f in cache_files(run)]:
        assert KEY_ID not in text and SECRET not in text


def test_vendor_errors_are_data_errors(server, keys, tmp_path):
    from market_envs.data.alpaca import AlpacaBars

    vendor = AlpacaBars("1min", url=server.url + "/nowhere")  # 404 from the server
    with pytest.raises(DataError, match=r"alpaca: request for AAA 2020-10-01 \.\. 2020-11-01 failed \(HTTP 404"):
        vendor.fetch("AAA", pd.Timestamp("2020-10-01", tz=NY), pd.Timestamp("2020-11-01", tz=NY))


def test_a_killed_build_resumes_without_refetching_finished_chunks(server, keys, tmp_path):
    """A real kill (SIGKILL) of `trader data build` in the middle, then a second build."""
    recipe = write_recipe(tmp_path, server.url)
    server.hold_after = 9  # the 10th request (BBB's November) hangs until the build is killed
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    code = "import sys; from podracer.cli import main; sys.exit(main(sys.argv[1:]))"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "data", "build", str(recipe), "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.held.wait(timeout=120), "the build never reached the 10th request"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    server.release.set()
    deadline = time.monotonic() + 5
    while server.count() < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    finished = len(list((tmp_path / "data" / "downloads" / "alpaca").glob("*.parquet")))
    assert finished == 7  # AAA: 6 chunks in 8 requests, BBB: October (the 10th request hung)
    assert not (tmp_path / "data" / "panels").exists()
    server.hold_after, before = None, server.count()
    data = load(recipe, data_dir=tmp_path / "data")
    assert server.count() - before == 23 - 9  # every chunk the killed build had not finished, once
    assert data.num_bars == SESSION_BARS
    refetched = [q for _, q in server.requests[before:] if q["symbols"] == "AAA"]
    assert refetched == []


def test_a_stalled_server_is_a_bounded_wait(server, keys):
    from market_envs.data.alpaca import AlpacaBars
    from market_envs.data.vendors import Backoff

    server.hold_after = 0  # every request hangs
    vendor = AlpacaBars("1min", url=server.url, backoff=Backoff(retries=1, base_s=0.01), timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(
        DataError,
        match=r"alpaca: AAA 2020-10-01 \.\. 2020-11-01: still failing \(connection failed: ReadTimeout\) after 2 attempts",
    ):
        vendor.fetch("AAA", pd.Timestamp("2020-10-01", tz=NY), pd.Timestamp("2020-11-01", tz=NY))
    assert time.monotonic() - start < 5 and server.count() == 2
