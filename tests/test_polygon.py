"""The polygon provider against a local server that speaks Polygon's aggregates API.

The `massive` client (formerly polygon-api-client) runs unchanged, pointed at the
server with its `base` option: its requests, `next_url` pagination and parsing are
the real ones. The served market is the one of tests/test_alpaca.py (both
daylight-saving changes, an early close, a holiday, a missing day).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from market_envs.data import load
from market_envs.data.indicators import WARMUP_BARS
from podracer.cli import main
from vendor_server import (
    END,
    NY,
    POLYGON_KEY,
    SESSION_BARS,
    START,
    VendorServer,
    cache_files,
    expected_regular,
    one_error_line,
    served_bars,
    write_vendor_recipe,
)

REQUESTS = 8 + 7 + 8  # AAA, BBB, QQQ: 6 months each; November (but BBB's) and March in two pages


@pytest.fixture
def server():
    with VendorServer(served_bars(), page_size=500).running() as running:
        yield running


@pytest.fixture
def key(monkeypatch):
    monkeypatch.delenv("POLYGON_API_KEY", raising=False)
    monkeypatch.setenv("MASSIVE_API_KEY", POLYGON_KEY)


def write_recipe(folder: Path, url: str, tickers=("AAA", "BBB"), interval="1min", **options) -> Path:
    return write_vendor_recipe(folder, "polygon", url, tickers, interval, **options)


def build(recipe: Path, data_dir: Path) -> int:
    return main(["data", "build", str(recipe), "--data-dir", str(data_dir)])


def test_panel_equals_the_servers_regular_session_bars(server, key, tmp_path):
    data = load(write_recipe(tmp_path, server.url), data_dir=tmp_path / "data")
    served = served_bars()
    assert str(data.timestamps.tz) == NY and data.num_bars == SESSION_BARS
    frame = data.to_frame()
    for j, ticker in enumerate(data.tickers):
        want = expected_regular(served[ticker]).set_index("timestamp")
        got = frame[frame["ticker"] == ticker].set_index("timestamp")
        for column in ("open", "high", "low", "close", "volume"):
            np.testing.assert_array_equal(got.loc[want.index, column].to_numpy(), want[column].to_numpy(np.float32))
        expected_mask = data.timestamps.isin(want.index) & (np.arange(data.num_bars) >= WARMUP_BARS)
        np.testing.assert_array_equal(data.tradable[:, j].numpy(), expected_mask)
    assert data.meta["outside_session_bars"] == 3 * 10 + 3 * 30 + 2 * 15 + 3 * 30
    paths = [(p, q) for p, q in server.requests if p.startswith("/v2/aggs/ticker/")]
    assert len(paths) == REQUESTS and sum("cursor" in q for _, q in paths) == 5  # next_url followed
    assert all(p.split("/")[6:8] == ["1", "minute"] for p, _ in paths)
    assert all(q["adjusted"] == "true" and q["sort"] == "asc" for _, q in paths if "cursor" not in q)


def test_daily_bars(server, key, tmp_path):
    data = load(write_recipe(tmp_path, server.url, interval="1D"), cache=False)
    assert [t.strftime("%Y-%m-%d %H:%M") for t in data.timestamps] == [
        "2020-10-30 09:30",
        "2020-11-02 09:30",
        "2020-11-27 09:30",
        "2021-03-12 09:30",
        "2021-03-15 09:30",
    ]
    assert all(p.split("/")[6:8] == ["1", "day"] for p, _ in server.requests)


def test_chunks_resume_after_a_failure_halfway(server, key, tmp_path):
    recipe = write_recipe(tmp_path, server.url, retries=0)
    server.fail_after = 9
    assert build(recipe, tmp_path / "data") == 2
    assert len(list((tmp_path / "data" / "downloads" / "polygon").glob("*.parquet"))) == 7
    server.fail_after, before = None, server.count()
    data = load(recipe, data_dir=tmp_path / "data")
    assert server.count() - before == REQUESTS - 9 and data.num_bars == SESSION_BARS
    again = load(recipe, data_dir=tmp_path / "data", refresh=True)
    assert server.count() - before == REQUESTS - 9  # every chunk cached now
    np.testing.assert_array_equal(again.features.numpy(), data.features.numpy())


def test_a_429_is_waited_out(server, key, tmp_path):
    server.throttle = 2
    data = load(write_recipe(tmp_path, server.url), data_dir=tmp_path / "data")
    assert data.num_bars == SESSION_BARS and server.count() == REQUESTS + 2


def test_exhausted_retries_give_one_line_and_cache_nothing(server, key, tmp_path, capsys):
    server.throttle = 1000
    assert build(write_recipe(tmp_path, server.url, retries=2), tmp_path / "data") == 2
    err = one_error_line(capsys.readouterr().err)
    assert "polygon: AAA 2020-10-01 .. 2020-11-01: still rate-limited (HTTP 429) after 3 attempts" in err
    assert server.count() == 3 and cache_files(tmp_path / "data") == []


def test_missing_key_names_the_variable(server, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MASSIVE_API_KEY", raising=False)
    monkeypatch.delenv("POLYGON_API_KEY", raising=False)
    assert build(write_recipe(tmp_path, server.url), tmp_path / "data") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "MASSIVE_API_KEY" in err and "POLYGON_API_KEY" in err
    assert server.count() == 0 and cache_files(tmp_path / "data") == []


def test_bad_key_gives_one_line_without_the_key(server, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MASSIVE_API_KEY", "wrong-key-0123456789")
    assert build(write_recipe(tmp_path, server.url), tmp_path / "data") == 2
    err = one_error_line(capsys.readouterr().err)
    assert "polygon refused the request for AAA" in err and "Unknown API Key" in err and "wrong-key" not in err
    assert server.count() == 1 and cache_files(tmp_path / "data") == []


def test_an_unknown_symbol_gives_one_line_and_no_panel(server, key, tmp_path, capsys):
    assert build(write_recipe(tmp_path, server.url, tickers=("AAA", "ZZZZ")), tmp_path / "data") == 2
    err = one_error_line(capsys.readouterr().err)
    assert "ZZZZ" in err and "unknown symbol" in err
    assert not (tmp_path / "data" / "panels").exists()


def test_the_key_is_never_written_or_logged(server, key, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    recipe = write_recipe(tmp_path, server.url)
    assert build(recipe, tmp_path / "data") == 0
    out = capsys.readouterr()
    texts = [out.out, out.err, caplog.text, recipe.read_text()]
    texts += [f.read_bytes().decode("latin-1") for f in cache_files(tmp_path / "data")]
    assert len(texts) > 10 and not any(POLYGON_KEY in text for text in texts)


def test_a_renamed_ticker_is_asked_for_under_each_symbol_and_joined(key, tmp_path):
    """Polygon lists a security under the symbol it had each day: NEW traded as OLD until
    2021-03-12 (a renames file says so), so the panel's NEW is OLD's bars before that day
    and NEW's from it, and both symbols were requested."""
    served = served_bars()
    old, new = served["AAA"], served["BBB"]
    cut = pd.Timestamp("2021-03-12", tz=NY)
    bars = {"OLD": old, "NEW": new, "QQQ": served["QQQ"]}
    (tmp_path / "renames.csv").write_text("# a test's rename\nticker,old_symbol,until\nNEW,OLD,2021-03-12\n")
    with VendorServer(bars, page_size=500).running() as running:
        with pytest.warns(UserWarning, match="NEW on 2021-03-12"):  # two made-up series: a jump a real rename has not
            data = load(write_recipe(tmp_path, running.url, tickers=("NEW",), renames="renames.csv"), cache=False)
        asked = {path.split("/")[4] for path, _ in running.requests if path.startswith("/v2/aggs/ticker/")}
    assert data.tickers == ("NEW",) and asked == {"OLD", "NEW", "QQQ"}
    frame = data.to_frame().set_index("timestamp")
    for source, part in ((old, lambda t: t < cut), (new, lambda t: t >= cut)):
        want = expected_regular(source).set_index("timestamp")
        want = want[part(want.index)]
        np.testing.assert_array_equal(frame.loc[want.index, "close"].to_numpy(), want["close"].to_numpy(np.float32))
