"""The exchange calendar and the synthetic market: sessions, determinism, stated properties."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs.data import EdgeSpec, MarketData, synthetic
from market_envs.data.calendar import bar_minutes, session_bars, session_minutes, sessions
from market_envs.data.recipes import parse_recipe
from market_envs.data.synthetic import BENCHMARK_NAME, MarketModel, garch_variance
from trader.errors import ConfigError

DATASETS = Path(__file__).resolve().parents[1] / "datasets"


@pytest.fixture(scope="module")
def market() -> MarketData:
    """12 tickers over four weeks of minute bars (one holiday inside)."""
    return synthetic(12, "2024-01-02", "2024-02-01", seed=7)


def log_returns(data: MarketData) -> np.ndarray:
    close = data.close.double().numpy()
    return np.log(close[1:] / close[:-1])


# ------------------------------------------------------------------ calendar
def test_sessions_skip_weekends_and_holidays():
    stamps = session_minutes("2024-06-28", "2024-07-09")
    days = sorted(set(stamps.date))
    names = [pd.Timestamp(d).day_name() for d in days]
    assert "Saturday" not in names and "Sunday" not in names
    assert pd.Timestamp("2024-07-04").date() not in days  # Independence Day
    assert pd.Timestamp("2024-07-05").date() in days
    assert str(stamps.tz) == "America/New_York"
    mlk = session_minutes("2024-01-12", "2024-01-17")
    assert pd.Timestamp("2024-01-15").date() not in set(mlk.date)  # Martin Luther King Jr. Day


def test_minute_bars_are_stamped_at_their_open():
    stamps = session_minutes("2024-03-11", "2024-03-12")
    assert len(stamps) == 390
    assert stamps[0] == pd.Timestamp("2024-03-11 09:30", tz="America/New_York")
    assert stamps[-1] == pd.Timestamp("2024-03-11 15:59", tz="America/New_York")
    assert (np.diff(stamps.asi8) > 0).all()


def test_early_close_and_other_intervals():
    day_after_thanksgiving = session_minutes("2024-11-29", "2024-11-30")
    assert len(day_after_thanksgiving) == 210  # 09:30-13:00
    assert day_after_thanksgiving[-1].strftime("%H:%M") == "12:59"
    five = session_minutes("2024-03-11", "2024-03-12", "5min")
    assert len(five) == 78 and five[1] - five[0] == pd.Timedelta(minutes=5)
    daily = session_minutes("2024-07-01", "2024-07-09", "1D")
    assert len(daily) == 5 and all(s.strftime("%H:%M") == "09:30" for s in daily)
    _, session, time_of_day = session_bars("2024-03-11", "2024-03-13", "1h")
    assert list(np.bincount(session)) == [7, 7]
    assert 0 < time_of_day.min() and time_of_day.max() < 1


@pytest.mark.parametrize("bad", ["2min30s", "0min", "1week", "500min"])
def test_bad_interval_is_refused(bad):
    with pytest.raises(ConfigError, match="interval"):
        bar_minutes(bad)


def test_empty_session_range_is_refused():
    with pytest.raises(ConfigError, match="no trading session"):
        sessions("2024-07-06", "2024-07-08")  # a weekend
    with pytest.raises(ConfigError, match="empty"):
        sessions("2024-07-08", "2024-07-01")


# ----------------------------------------------------------- the generator
def test_same_seed_same_data_other_seed_other_data(market):
    again = synthetic(12, "2024-01-02", "2024-02-01", seed=7)
    assert torch.equal(market.features, again.features)
    assert torch.equal(market.benchmark, again.benchmark)
    assert market.timestamps.equals(again.timestamps)
    other = synthetic(12, "2024-01-02", "2024-02-01", seed=8)
    assert not torch.equal(market.close, other.close)


def test_panel_shape_names_and_benchmark(market):
    assert market.tickers == tuple(f"SYN{i:03d}" for i in range(12))
    assert market.num_bars == 21 * 390  # 2-31 January 2024: 22 weekdays less MLK Day
    assert market.benchmark_name == BENCHMARK_NAME
    assert abs(float(market.benchmark[0]) - 100.0) < 1.0
    index_returns = np.diff(np.log(market.benchmark.double().numpy()))
    equal_weight = log_returns(market).mean(axis=1)
    assert np.corrcoef(index_returns, equal_weight)[0, 1] > 0.8


def test_ohlc_consistent_and_volume_positive(market):
    o, h, lo, c, v = (market.feature(n) for n in ("open", "high", "low", "close", "volume"))
    assert (o > 0).all() and (c > 0).all() and (lo > 0).all()
    assert (h >= torch.maximum(o, c)).all()
    assert (lo <= torch.minimum(o, c)).all()
    assert (v >= 1).all()


def test_gaps_only_between_sessions(market):
    o, c = market.open.double(), market.close.double()
    first = torch.as_tensor(np.r_[False, market.timestamps.date[1:] != market.timestamps.date[:-1]])
    jump = (o[1:] / c[:-1] - 1.0).abs()
    inside = jump[~first[1:]]
    assert float(inside.max()) < 1e-6  # within a session each bar opens at the last close
    assert float(jump[first[1:]].mean()) > 1e-3  # overnight gaps are real moves


def test_factors_make_returns_correlate(market):
    corr = np.corrcoef(log_returns(market).T)
    off_diagonal = corr[~np.eye(len(corr), dtype=bool)]
    assert 0.1 < off_diagonal.mean() < 0.7


def test_volatility_and_volume_are_higher_at_open_and_close(market):
    r = np.abs(log_returns(market))
    minutes = market.timestamps[1:].hour * 60 + market.timestamps[1:].minute - 570
    first_bar = minutes == 0  # carries the overnight gap, not intraday volatility
    opening = r[(minutes >= 1) & (minutes < 20)].mean()
    midday = r[(minutes >= 150) & (minutes < 240)].mean()
    closing = r[(minutes >= 370) & ~first_bar].mean()
    assert opening > 1.5 * midday and closing > 1.2 * midday
    volume = market.volume.double().numpy()[1:]
    assert volume[minutes < 20].mean() > 1.5 * volume[(minutes >= 150) & (minutes < 240)].mean()
    standardized = r / r.mean(axis=0)
    assert np.corrcoef(standardized[~first_bar].ravel(), np.log(volume[~first_bar]).ravel())[0, 1] > 0.1


def test_annual_volatility_in_the_stated_range(market):
    r = log_returns(market)
    annual = r.std(axis=0) * np.sqrt(252 * 390)
    low, high = MarketModel().annual_vol
    assert (annual > 0.6 * low).all() and (annual < 1.6 * high).all()


def test_volatility_clusters_across_days():
    daily = synthetic(30, "2020-01-02", "2024-01-01", seed=3, interval="1D")
    assert daily.interval == "1D" and daily.timestamps[0].strftime("%H:%M") == "09:30"
    squared = log_returns(daily) ** 2
    squared = squared / squared.mean(axis=0)
    lag1 = [np.corrcoef(squared[1:, i], squared[:-1, i])[0, 1] for i in range(squared.shape[1])]
    assert np.mean(lag1) > 0.025  # about 0.05 with the default GARCH; 0 without clustering


def test_garch_variance_matches_the_kurtosis_formula():
    assert garch_variance(0.0, 0.5) == pytest.approx(0.0)
    assert garch_variance(0.08, 0.90) == pytest.approx(0.0396 / 0.0268 - 1.0, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_tickers": 0}, "n_tickers"),
        ({"seed": -1}, "seed"),
        ({"interval": "7 parsecs"}, "interval"),
        ({"model": {"garch_alpha": 0.5, "garch_beta": 0.6}}, "GARCH"),
        ({"model": {"vol": 0.2}}, "unknown key"),
        ({"edge": {"strenght_sharpe": 1.0}}, "unknown key"),
    ],
)
def test_bad_arguments_raise_config_errors(kwargs, match):
    args = {"n_tickers": 3, "start": "2024-01-02", "end": "2024-01-04", "seed": 0, **kwargs}
    with pytest.raises(ConfigError, match=match):
        synthetic(**args)


# ------------------------------------------------------------------- recipes
def test_recipes_describe_the_default_market_and_its_edge():
    plain = parse_recipe((DATASETS / "synthetic-minute.toml").read_text())
    edged = parse_recipe((DATASETS / "synthetic-edge-minute.toml").read_text())
    assert plain.source == edged.source == "synthetic"
    assert plain.options == {"n_tickers": 100, "seed": 0}
    assert "edge" not in plain.options
    assert {k: v for k, v in edged.options.items() if k != "edge"} == plain.options
    for key in ("start", "end", "train_end", "val_end", "interval"):
        assert getattr(plain, key) == getattr(edged, key)
    spec = EdgeSpec.from_dict(edged.options["edge"])
    assert spec.strength_sharpe > 0
    raw = tomllib.loads((DATASETS / "synthetic-minute.toml").read_text())
    stamps = session_minutes(raw["start"], raw["end"])
    assert 95_000 < len(stamps) < 100_000  # about one year of minute bars
