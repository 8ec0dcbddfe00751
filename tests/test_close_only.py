"""Close-only data (one close per ticker and bar): accepted, filled from the close,
orders fill at the next bar's close, features made of absent columns left out."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from market_envs.data import from_frame
from market_envs.data.files import read_files
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.errors import ConfigError
from market_fixtures import random_walk_frame

LACKING = ("open", "high", "low", "volume", "cci_30", "dx_30")


def close_only(n_tickers: int = 2, n_bars: int = 90) -> pd.DataFrame:
    return random_walk_frame(n_tickers, n_bars, seed=4)[["timestamp", "ticker", "close"]]


def test_a_close_only_frame_builds_a_panel_filled_from_the_close() -> None:
    data = from_frame(close_only(), name="closes")
    names = list(data.feature_names)
    close = data.features[..., names.index("close")]
    for column in ("open", "high", "low"):
        assert torch.equal(data.features[..., names.index(column)], close)
    assert not data.features[..., names.index("volume")].any()
    assert data.meta["missing_columns"] == ["open", "high", "low", "volume"]
    assert data.unavailable_features == LACKING
    assert data.fill_price == "close"
    assert data.summary()["missing_columns"] == "open,high,low,volume"


def test_full_ohlcv_data_lacks_nothing() -> None:
    data = from_frame(random_walk_frame(2, 90, seed=4))
    assert data.unavailable_features == () and data.fill_price == "open" and "missing_columns" not in data.meta


def test_high_and_low_go_together() -> None:
    data = from_frame(random_walk_frame(2, 90, seed=4).drop(columns="high"))
    assert data.meta["missing_columns"] == ["high", "low"]
    assert data.unavailable_features == ("high", "low", "cci_30", "dx_30")
    names = list(data.feature_names)
    assert torch.equal(data.features[..., names.index("low")], data.features[..., names.index("close")])


def test_the_env_leaves_the_unavailable_features_out_and_refuses_them_by_name() -> None:
    data = from_frame(close_only())
    env = StockTradingVecEnv(data, 1, "cpu", EnvConfig())
    assert not set(LACKING) & set(env.feature_names)
    assert "close" in env.feature_names and "rsi_30" in env.feature_names
    with pytest.raises(ConfigError, match="dx_30"):
        StockTradingVecEnv(data, 1, "cpu", EnvConfig(features=("close", "dx_30")))


def test_an_order_fills_at_the_next_bars_close() -> None:
    data = from_frame(close_only(n_tickers=1))
    rules = EnvConfig(action_mode="weights", buy_cost=0.0, sell_cost=0.0, random_start=False, episode_length=None)
    env = StockTradingVecEnv(data, 1, "cpu", rules)
    env.reset(seed=0)
    info = {"holdings": torch.zeros(1, 1)}
    while not info["holdings"].any():  # the indicators' warm-up bars are not tradable
        _, _, _, _, info = env.step(torch.ones(1, 1))
    bar = int(info["t"][0])  # the bar the order filled at
    price = float(data.close[bar, 0])
    assert float(data.close[bar - 1, 0]) != pytest.approx(price)
    assert float(info["holdings"][0, 0]) == pytest.approx(rules.initial_cash / price, rel=1e-5)


def test_close_only_files_are_read_and_the_report_says_how_orders_fill(tmp_path) -> None:
    from trader.backtesting import run_backtest
    from trader.backtesting.report import context_lines

    frame = close_only(n_bars=400)
    frame["timestamp"] = frame["timestamp"].astype(str)
    for ticker, rows in frame.groupby("ticker"):
        rows.drop(columns="ticker").to_csv(tmp_path / f"{ticker}.csv", index=False)
    data = read_files(tmp_path)
    assert data.meta["missing_columns"] == ["open", "high", "low", "volume"]
    result = run_backtest(data, {}, baselines=["equal_weight"], period=None)
    lines = " ".join(context_lines(result))
    assert "next bar's close" in lines and "no open, high, low, volume" in lines


@pytest.mark.parametrize("layout", ["long", "per_ticker"])
def test_a_close_only_panel_written_and_read_back_stays_close_only(tmp_path, layout) -> None:
    """write_files writes the columns the source held: a close-only panel does not come back
    as full bars with a volume of 0 (that would fill at the open and let volume-based costs in)."""
    from market_envs.data.files import write_files

    bench = close_only(n_tickers=1).assign(ticker="IDX")
    data = from_frame(close_only(), bench, benchmark_name="IDX")
    write_files(data, tmp_path, layout=layout)
    for file in tmp_path.iterdir():
        assert "volume" not in pd.read_parquet(file).columns
    back = read_files(tmp_path, benchmark="IDX")
    assert back.meta["missing_columns"] == data.meta["missing_columns"] and back.fill_price == "close"
    assert torch.equal(back.features, data.features) and torch.equal(back.benchmark, data.benchmark)
