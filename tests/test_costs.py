"""The cost and fill model (market_envs.costs): known answers per term, causality of the
tables, validation, named models and the config's round trips."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import tomli_w
import torch
from market_fixtures import random_walk_frame

from market_envs.costs import (
    COST_MODELS,
    CostModel,
    NamedCosts,
    abdi_ranaldo_half_spread,
    bars_per_day,
    check_costs_for_data,
    cost_model,
    described,
    impact_coefficient,
)
from market_envs.data import from_frame
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.errors import ConfigError
from trader.rundir import recorded_rules
from trader.rundir import config_from_dict, config_to_dict, toml_ready

# ------------------------------------------------------------------ a bar of known volume and volatility

K = 9  # the order is decided at bar K - 1 and fills at bar K
DELTA = 0.001  # each close sits at its bar's high, 2 x DELTA (in log) above its low: half-spread DELTA
VOLUME = 10_000.0  # volume of every bar before K
FILL_VOLUME = 8_000.0  # volume of bar K


def known_panel(n_bars: int = 12):
    """One ticker whose closes alternate 100, 101, 100, ... on one day; open = high = close."""
    stamps = pd.date_range("2024-01-02 09:30", periods=n_bars, freq="1min", tz="America/New_York")
    close = np.array([100.0 if k % 2 == 0 else 101.0 for k in range(n_bars)])
    volume = np.full(n_bars, VOLUME)
    volume[K] = FILL_VOLUME
    frame = pd.DataFrame(
        {
            "timestamp": stamps,
            "ticker": "AAA",
            "open": close,
            "high": close,
            "low": close * math.exp(-2 * DELTA),
            "close": close,
            "volume": volume,
        }
    )
    data = from_frame(frame, name="known")
    data = replace(data, tradable=torch.ones_like(data.tradable))
    return data.with_normalization(*data.fit_normalization())


def step_to_fill(data, config: EnvConfig, action: float, compile: bool = False):
    """Zero actions until bar K - 1, then `action`; returns the info of the fill at bar K."""
    env = StockTradingVecEnv(data, 1, "cpu", config, compile=compile)
    env.reset()
    for _ in range(K - 1):
        env.step(torch.zeros(1, 1))
    return env.step(torch.tensor([[action]]))[4]


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])  # two arrangements of the fill
def test_one_order_against_a_known_bar_pays_each_term_as_computed_by_hand(compile):
    data = known_panel()
    costs = CostModel(
        commission_per_share=0.005,
        commission_min=1.0,
        commission_max_rate=0.01,
        spread_model="high_low",
        spread_window=50,
        impact_eta=0.7,
        impact_window_days=1,
        participation=0.05,
    )
    config = EnvConfig(random_start=False, max_shares=1000, buy_cost=0.001, costs=costs)
    info = step_to_fill(data, config, 0.6, compile)  # an order of 600 shares

    price = 101.0 if K % 2 else 100.0  # the open of bar K
    cap = 0.05 * FILL_VOLUME  # 400 shares fill, 200 do not
    filled = 400.0
    value = filled * price
    commission = 0.001 * value + 0.005 * filled  # between the minimum 1 and the cap 1% x value
    # Abdi-Ranaldo: c - eta = DELTA every bar; the closes' moves +-log(1.01) cancel over the
    # K - 1 = 8 pairs before bar K, so S^2 = 4 DELTA^2 and the half-spread is DELTA
    spread = DELTA * value
    # square-root law: 390-minute days do not matter here, this data has B = 12 bars a day
    bars = 12
    sigma_day = math.log(1.01) * math.sqrt(bars)  # every past return is +-log(1.01)
    adv = VOLUME * bars
    impact = 0.7 * sigma_day * math.sqrt(filled / adv) * value

    assert cap == filled
    assert info["holdings"].item() == filled
    assert info["unfilled_shares"].item() == 200.0
    assert info["unfilled_value"].item() == pytest.approx(200.0 * price, rel=1e-12)
    assert info["ordered_value"].item() == pytest.approx(600.0 * price, rel=1e-12)
    assert info["cost_commission"].item() == pytest.approx(commission, rel=1e-12)
    assert info["cost_spread"].item() == pytest.approx(spread, rel=1e-5)  # the panel stores float32 lows
    assert info["cost_impact"].item() == pytest.approx(impact, rel=1e-6)
    assert info["cost_borrow"].item() == 0.0
    parts = sum(info[key].item() for key in ("cost_commission", "cost_spread", "cost_impact", "cost_borrow"))
    assert info["costs"].item() == pytest.approx(parts, rel=1e-12)
    assert info["costs"].item() == pytest.approx(commission + spread + impact, rel=1e-5)
    assert info["cash"].item() == pytest.approx(1_000_000.0 - value - parts, rel=1e-12)


def test_the_minimum_and_the_cap_of_the_commission():
    data = known_panel()
    costs = CostModel(commission_per_share=0.005, commission_min=1.0, commission_max_rate=0.01)
    config = EnvConfig(random_start=False, max_shares=1000, buy_cost=0.0, costs=costs)
    price = 101.0 if K % 2 else 100.0
    assert step_to_fill(data, config, 0.0105)["cost_commission"].item() == 1.0  # 10 shares: 0.05 < 1
    capped = replace(config, costs=replace(config.costs, commission_per_share=5.0))  # 50 > 1% of 10 shares
    assert step_to_fill(data, capped, 0.0105)["cost_commission"].item() == pytest.approx(0.01 * 10 * price)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_a_sale_never_pays_more_commission_than_its_proceeds(compile):
    data = known_panel()
    config = EnvConfig(random_start=False, max_shares=1000, costs=CostModel(commission_min=500.0, spread_bps=10.0))
    env = StockTradingVecEnv(data, 1, "cpu", config, compile=compile)
    env.reset()
    env.step(torch.tensor([[0.002]]))  # buy 2 shares (commission 500)
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))  # sell them for about 200
    proceeds = 2.0 * data.open[2, 0].item() * (1.0 - 10.0 * 1e-4)  # after the half-spread
    assert info["cost_commission"].item() == pytest.approx(proceeds)
    assert info["cash"].item() >= 0.0


def test_a_bar_without_volume_fills_nothing():
    data = known_panel()
    volume_index = data.feature_names.index("volume")
    features = data.features.clone()
    features[K, 0, volume_index] = 0.0
    silent = replace(data, features=features)
    config = EnvConfig(random_start=False, max_shares=1000, costs=CostModel(participation=1.0))
    info = step_to_fill(silent, config, 0.6)
    assert info["holdings"].item() == 0.0 and info["unfilled_shares"].item() == 600.0
    assert info["costs"].item() == 0.0 and info["cash"].item() == 1_000_000.0


def daily_panel(n_tickers: int = 2):
    frame = random_walk_frame(n_tickers, 40, seed=1, freq="1D")
    data = from_frame(frame, name="daily")
    data = replace(data, tradable=torch.ones_like(data.tradable))
    return data.with_normalization(*data.fit_normalization())


def test_one_day_of_shorting_costs_notional_times_rate_over_252():
    data = daily_panel()
    config = EnvConfig(
        random_start=False, short_selling=True, buy_cost=0.0, sell_cost=0.0, costs=CostModel(borrow_rate=0.05)
    )
    env = StockTradingVecEnv(data, 1, "cpu", config)
    assert env.bars_per_day == 1
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[-0.5, 0.0]]))  # short 50 shares at bar 1's open, hold a day
    notional = 50.0 * data.close[1, 0].item()
    assert info["cost_borrow"].item() == pytest.approx(notional * 0.05 / 252, rel=1e-12)
    assert info["costs"].item() == pytest.approx(notional * 0.05 / 252, rel=1e-12)
    _, _, _, _, info = env.step(torch.tensor([[0.5, 0.0]]))  # bought back at bar 2's open: no more fee
    assert info["cost_borrow"].item() == 0.0 and info["holdings"][0, 0].item() == 0.0


def test_intraday_bars_accrue_their_fraction_of_a_day():
    frame = random_walk_frame(1, 2 * 30, seed=2, freq="1min")
    frame["timestamp"] = frame["timestamp"] + pd.to_timedelta(np.repeat([0, 1], 30), unit="D")  # two sessions of 30
    data = from_frame(frame, name="two-days")
    data = replace(data, tradable=torch.ones_like(data.tradable))
    data = data.with_normalization(*data.fit_normalization())
    config = EnvConfig(random_start=False, short_selling=True, costs=CostModel(borrow_rate=0.05))
    env = StockTradingVecEnv(data, 1, "cpu", config)
    assert env.bars_per_day == 30
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))
    notional = 100.0 * data.close[1, 0].item()
    assert info["cost_borrow"].item() == pytest.approx(notional * 0.05 / (252 * 30), rel=1e-12)


def test_bars_per_day_counts_sessions():
    minutes = pd.date_range("2024-01-02 09:30", periods=390 * 3, freq="1min", tz="America/New_York")
    days = minutes[:390].append(minutes[:390] + pd.Timedelta(days=1)).append(minutes[:200] + pd.Timedelta(days=2))
    assert bars_per_day(days) == 390
    assert bars_per_day(pd.date_range("2024-01-02", periods=20, freq="1D", tz="America/New_York")) == 1


# ------------------------------------------------------------------ causal tables


def test_cost_tables_read_only_earlier_bars():
    frame = random_walk_frame(3, 80, seed=5)
    data = from_frame(frame)
    k = 50
    high, low, close, volume = (data.feature(n).double() for n in ("high", "low", "close", "volume"))
    changed = [x.clone() for x in (high, low, close, volume)]
    for x in changed:
        x[k:] *= 1.5  # bar k and later
    spread = abdi_ranaldo_half_spread(high, low, close, 20)
    impact = impact_coefficient(close, volume, 30, 1.0)
    assert torch.equal(spread[: k + 1], abdi_ranaldo_half_spread(changed[0], changed[1], changed[2], 20)[: k + 1])
    assert torch.equal(impact[: k + 1], impact_coefficient(changed[2], changed[3], 30, 1.0)[: k + 1])
    assert (spread[:2] == 0).all() and (impact[:2] == 0).all()  # no complete past pair / return yet
    assert (spread[10:] > 0).any() and (impact[10:] > 0).all()


def test_a_periods_cost_tables_read_the_bars_before_it():
    """A period cut from a longer panel keeps its earlier bars (`MarketData.lookback`), so its
    env's cost tables equal the whole panel's rows for its bars: its first fills pay the
    spread and impact that the bars before it say, not nothing."""
    data = from_frame(random_walk_frame(3, 400, seed=6, freq="1D"), name="daily")  # 1 bar a day
    rules = cost_model("institutional").apply(EnvConfig())  # 390-bar spread window, 20-day impact window
    whole = StockTradingVecEnv(data, num_envs=1, config=rules).tables.market
    late = data.slice(data.timestamps[300], None)
    assert late.lookback.shape == (300, 3, len(data.feature_names)) and data.lookback is None
    part = StockTradingVecEnv(late, num_envs=1, config=rules).tables.market
    assert torch.equal(part.half_spread, whole.half_spread[300:]) and torch.equal(part.impact, whole.impact[300:])
    assert (part.half_spread[0] > 0).any() and (
        part.impact[0] > 0
    ).all()  # the spread estimate is 0 where its mean is < 0
    # a slice of a slice reads back to the start too; a panel without earlier bars starts blind
    later = late.slice(late.timestamps[50], None)
    assert torch.equal(later.lookback, data.features[:350])
    assert torch.equal(StockTradingVecEnv(later, num_envs=1, config=rules).tables.market.impact, whole.impact[350:])
    first = data.slice(None, data.timestamps[100])
    assert (
        first.lookback is None
        and (StockTradingVecEnv(first, num_envs=1, config=rules).tables.market.impact[0] == 0).all()
    )


def test_impact_coefficient_matches_a_loop():
    frame = random_walk_frame(2, 60, seed=6)
    data = from_frame(frame)
    close, volume = data.close.double().numpy(), data.volume.double().numpy()
    table = impact_coefficient(data.close, data.volume, 15, 0.5).numpy()
    for k in (3, 15, 16, 59):
        for i in range(2):
            rows = range(max(k - 15, 0), k)
            returns = [math.log(close[r, i] / close[r - 1, i]) ** 2 for r in rows if r >= 1]
            expected = 0.5 * math.sqrt(np.mean(returns)) / math.sqrt(np.mean([volume[r, i] for r in rows]))
            assert table[k, i] == pytest.approx(expected, rel=1e-10)


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "values, key",
    [
        ({"commission_per_share": -0.01}, "commission_per_share"),
        ({"commission_min": -1.0}, "commission_min"),
        ({"spread_bps": -2.0}, "spread_bps"),
        ({"impact_eta": -0.5}, "impact_eta"),
        ({"borrow_rate": -0.01}, "borrow_rate"),
        ({"borrow_rate": float("nan")}, "borrow_rate"),
        ({"participation": 0.0}, "participation"),
        ({"participation": 1.5}, "participation"),
        ({"participation": -0.1}, "participation"),
        ({"commission_max_rate": 0.0}, "commission_max_rate"),
        ({"spread_model": "roll"}, "spread_model"),
        ({"spread_model": "per_ticker"}, "spread_model='per_ticker' needs spread_bps_per_ticker"),
        ({"spread_bps_per_ticker": (1.0, -1.0), "spread_model": "per_ticker"}, "spread_bps_per_ticker"),
        ({"spread_window": 0}, "spread_window"),
        ({"impact_window_days": 2.5}, "impact_window_days"),
    ],
)
def test_bad_cost_values_raise_one_line_naming_the_key(values, key):
    with pytest.raises(ConfigError, match=f"EnvConfig.costs.{key}") as err:
        CostModel(**values)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["buy_cost", "sell_cost"])
def test_negative_commission_rates_are_refused(key):
    with pytest.raises(ConfigError, match=f"EnvConfig.{key}"):
        EnvConfig(**{key: -0.001})


def test_volume_and_high_low_terms_refuse_close_only_data():
    closes = from_frame(random_walk_frame(2, 60, seed=4)[["timestamp", "ticker", "close"]], name="closes")
    for costs, key in (
        (CostModel(participation=0.1), "participation"),
        (CostModel(impact_eta=1.0), "impact_eta"),
        (CostModel(spread_model="high_low"), "spread_model"),
    ):
        with pytest.raises(ConfigError, match=f"EnvConfig.costs.{key}.*closes") as err:
            StockTradingVecEnv(closes, 1, "cpu", EnvConfig(costs=costs))
        assert "\n" not in str(err.value)
    # a fixed spread and the borrow fee need no volume
    StockTradingVecEnv(closes, 1, "cpu", EnvConfig(costs=CostModel(spread_bps=3.0, borrow_rate=0.01)))


def test_per_ticker_spreads_must_name_every_ticker_and_leverage_needs_a_short_weights_book():
    data = known_panel()
    with pytest.raises(ConfigError, match="spread_bps_per_ticker has 2 values.*1 tickers"):
        per_ticker = CostModel(spread_model="per_ticker", spread_bps_per_ticker=(1, 2))
        StockTradingVecEnv(data, 1, "cpu", EnvConfig(costs=per_ticker))
    with pytest.raises(ConfigError, match="max_leverage"):
        EnvConfig(max_leverage=2.0)
    with pytest.raises(ConfigError, match="max_leverage"):
        EnvConfig(action_mode="weights", short_selling=True, max_leverage=0.0)


def test_gross_leverage_reaches_the_limit():
    data = daily_panel()
    config = EnvConfig(
        action_mode="weights", short_selling=True, max_leverage=3.0, random_start=False, buy_cost=0.0, sell_cost=0.0
    )
    env = StockTradingVecEnv(data, 1, "cpu", config)
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[1.0, -1.0]]))  # gross 2 <= 3: the weights as they are
    price = data.open[1].double()
    np.testing.assert_allclose((info["holdings"][0] * price).numpy(), [1_000_000.0, -1_000_000.0], rtol=1e-9)
    env = StockTradingVecEnv(data, 1, "cpu", replace(config, max_leverage=1.5))
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[1.0, -1.0]]))  # gross 2 > 1.5: scaled to 1.5
    gross = (info["holdings"][0] * price).abs().sum().item()
    assert gross == pytest.approx(1.5 * 1_000_000.0, rel=1e-9)


# ------------------------------------------------------------------ named models


def test_named_cost_models():
    assert set(COST_MODELS) >= {"zero", "flat", "retail", "institutional"}
    assert cost_model("flat").apply(EnvConfig()) == EnvConfig()  # flat is today's default
    zero = cost_model("zero").apply(EnvConfig())
    assert zero.buy_cost == zero.sell_cost == 0.0 and zero.costs == CostModel()
    retail = cost_model("retail").apply(EnvConfig(action_mode="weights"))
    assert retail.action_mode == "weights" and retail.costs.commission_min == 1.0
    for named in COST_MODELS.values():
        assert named.sources, named.name
    with pytest.raises(ConfigError, match="unknown cost model 'cheap'; known: zero, flat, retail, institutional"):
        cost_model("cheap")


def test_named_models_run_on_data_with_volume():
    data = known_panel()
    for name in COST_MODELS:
        env = StockTradingVecEnv(data, 2, "cpu", cost_model(name).apply(EnvConfig(episode_length=5)))
        env.reset(seed=0)
        _, _, _, _, info = env.step(torch.ones(2, 1))
        assert (info["costs"] >= 0).all()


# ------------------------------------------------------------------ round trips


EVERY = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    commission_max_rate=0.01,
    spread_model="per_ticker",
    spread_bps_per_ticker=(1.0, 2.5),
    impact_eta=0.8,
    impact_window_days=5,
    participation=0.1,
    borrow_rate=0.003,
)


def _drop_none(value):
    """What a TOML writer keeps (TOML has no null; trader.train drops None the same way)."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    return value


def test_env_config_with_costs_round_trips_through_dict_json_and_toml():
    config = EnvConfig(action_mode="weights", short_selling=True, max_leverage=2.0, costs=EVERY)
    values = config_to_dict(config)
    assert isinstance(values["costs"], dict) and values["costs"]["spread_bps_per_ticker"] == [1.0, 2.5]
    assert config_from_dict(EnvConfig, values) == config
    assert config_from_dict(EnvConfig, json.loads(json.dumps(values))) == config
    assert config_from_dict(EnvConfig, tomllib.loads(tomli_w.dumps(_drop_none(values)))) == config
    default = EnvConfig()
    assert config_from_dict(EnvConfig, tomllib.loads(tomli_w.dumps(_drop_none(config_to_dict(default))))) == default
    assert EnvConfig(**json.loads(json.dumps(values))) == config  # a sidecar read by keyword arguments
    assert len({config, config_from_dict(EnvConfig, values)}) == 1  # hashable: ensembles compare rule sets


def test_old_files_without_cost_keys_load_as_the_flat_rate_env():
    old = {"action_mode": "shares", "buy_cost": 0.001, "sell_cost": 0.001, "max_shares": 100}
    config = config_from_dict(EnvConfig, old)
    assert config.costs == CostModel() and config.max_leverage == 1.0
    partial = config_from_dict(EnvConfig, {"costs": {"borrow_rate": 0.01}})
    assert partial.costs == CostModel(borrow_rate=0.01)
    with pytest.raises(ConfigError, match="unknown .*key.*borow_rate"):
        config_from_dict(EnvConfig, {"costs": {"borow_rate": 0.01}})


@pytest.mark.parametrize("spread_bps", [0.0, 3.0])
def test_a_borrow_fee_the_cash_cannot_pay_is_a_debt_that_buys_nothing(spread_bps):
    """Long 1.5 and short 0.5 of the value leaves no cash: the fee makes it negative, then
    no buy fills until sales repay it, and nothing else goes wrong."""
    data = daily_panel(3)
    costs = CostModel(borrow_rate=0.5, spread_bps=spread_bps)
    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        max_leverage=2.0,
        random_start=False,
        buy_cost=0.0,
        sell_cost=0.0,
        costs=costs,
    )
    env = StockTradingVecEnv(data, 1, "cpu", config)
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[0.9, 0.6, -0.5]]))  # gross 2: cash V + 0.5 V - 1.5 V = 0
    assert info["cash"].item() < 0 and info["cost_borrow"].item() > 0
    debt, held = info["cash"].item(), info["holdings"].clone()
    # targets 1.0 / 0.7 / -0.3: every order is a buy (more long, less short); the debt pays for none
    _, _, _, _, info = env.step(torch.tensor([[1.0, 0.7, -0.3]]))
    assert torch.equal(info["holdings"], held)
    assert info["costs"].item() == info["cost_borrow"].item() > 0
    assert info["cash"].item() == pytest.approx(debt - info["cost_borrow"].item(), rel=1e-12)
    marked = info["cash"] + (info["holdings"] * data.close[info["t"]].double()).sum(-1)
    torch.testing.assert_close(info["value"], marked, rtol=1e-12, atol=1e-9)


# ------------------------------------------------------------------ scaling, overrides (breakeven, --costs)


def test_a_scaled_model_charges_every_term_k_times_for_the_same_fill():
    """One fill of known size: every part of the cost at k x the model is k x the part at 1 x."""
    named = NamedCosts(
        "every",
        0.001,
        0.002,
        CostModel(
            commission_per_share=0.005,
            commission_min=1.0,
            commission_max_rate=0.01,
            spread_model="high_low",
            spread_window=50,
            impact_eta=0.7,
            impact_window_days=1,
        ),
    )
    data = known_panel()
    base = step_to_fill(data, named.apply(EnvConfig(initial_cash=1e7, random_start=False)), 0.5)
    assert base["cost_spread"].item() > 0 and base["cost_impact"].item() > 0
    for k in (0.0, 0.5, 3.0):
        info = step_to_fill(data, named.scaled(k).apply(EnvConfig(initial_cash=1e7, random_start=False)), 0.5)
        assert info["holdings"].equal(base["holdings"])  # the same fill
        for part in ("cost_commission", "cost_spread", "cost_impact", "costs"):
            assert info[part].item() == pytest.approx(k * base[part].item(), rel=1e-6, abs=1e-9), (k, part)


def test_scaled_keeps_the_fill_rules_and_the_bounds():
    model = CostModel(commission_max_rate=0.2, spread_bps=3000.0, participation=0.1, borrow_rate=0.01)
    big = model.scaled(8.0)
    assert big.participation == 0.1 and big.commission_max_rate == 1.0 and big.spread_bps < 1e4
    assert big.borrow_rate == pytest.approx(0.08)
    assert model.scaled(0.0).commission_max_rate is None and model.scaled(1.0) == model
    for bad in (-1.0, float("nan"), True):
        with pytest.raises(ConfigError, match="cost multiple"):
            model.scaled(bad)


def test_named_costs_refuse_bad_rates_and_take_overrides():
    with pytest.raises(ConfigError, match=r"EnvConfig.buy_cost must be in \[0, 1\)"):
        NamedCosts("x", -0.001, 0.0)
    institutional = cost_model("institutional")
    tighter = institutional.with_overrides({"participation": 0.05, "sell_cost": 0.0002})
    assert tighter.costs.participation == 0.05 and tighter.sell_cost == 0.0002
    assert tighter.costs.impact_eta == institutional.costs.impact_eta and "participation=0.05" in tighter.name
    with pytest.raises(ConfigError, match="participation must be in"):
        institutional.with_overrides({"participation": 1.5})
    with pytest.raises(ConfigError, match="unknown EnvConfig.costs key"):
        institutional.with_overrides({"partcipation": 0.5})
    assert cost_model("zero").charges_nothing and not cost_model("flat").charges_nothing
    assert not cost_model("institutional").charges_nothing and cost_model("retail").scaled(0).charges_nothing
    assert NamedCosts.from_config(cost_model("retail").apply(EnvConfig())).costs == cost_model("retail").costs


def test_described_names_rates_and_terms_by_the_model_they_equal_or_come_nearest_to():
    institutional = cost_model("institutional")
    for name in COST_MODELS:  # a run's rules, read back from its config, name the model they came from
        rules = tomllib.loads(
            tomli_w.dumps(toml_ready({"env_config": config_to_dict(cost_model(name).apply(EnvConfig()))}))
        )
        assert NamedCosts.from_config(recorded_rules(rules["env_config"], "config.toml")) == cost_model(name)
    assert described(0.0005, 0.0005, CostModel()).name == "flat 0.05% per side"
    assert described(0.0005, 0.001, CostModel()).name == "flat 0.05% per buy, 0.1% per sell"
    # a model with keys set over it is named as --costs MODEL --cost-set KEY=VALUE names it
    tighter = institutional.with_overrides({"participation": 0.05})
    assert described(tighter.buy_cost, tighter.sell_cost, tighter.costs).name == tighter.name
    assert tighter.name == "institutional (participation=0.05)"
    spread = described(0.0002, 0.0002, CostModel(spread_bps=1.0))  # as near to zero as to flat: the one that charges
    assert spread.name == "flat (buy_cost=0.0002, sell_cost=0.0002, spread_bps=1.0)"
    assert spread.costs == CostModel(spread_bps=1.0) and spread.buy_cost == 0.0002
    assert NamedCosts.from_config(EnvConfig(), "mine").name == "mine"


def test_without_volume_drops_the_terms_a_close_only_series_cannot_feed():
    closes = from_frame(random_walk_frame(2, 60, seed=4)[["timestamp", "ticker", "close"]], name="closes")
    costs = cost_model("institutional").costs
    with pytest.raises(ConfigError, match="needs volume"):
        check_costs_for_data(costs, closes)
    light = costs.without_volume()
    check_costs_for_data(light, closes)
    assert light.borrow_rate == costs.borrow_rate and light.commission_min == costs.commission_min


def test_terms_say_which_terms_are_on():
    """`CostModel.terms` is the one place that decides it: the env's tables and the C kernel read it."""
    from market_envs.costs import Terms, cost_model

    assert CostModel().terms() == Terms(False, False, False, False, False) and not CostModel().terms().in_fill
    assert cost_model("retail").costs.terms() == Terms(
        per_order_commission=True, spread=True, impact=True, participation=False, borrow=True
    )
    assert cost_model("institutional").costs.terms().participation
    assert CostModel(commission_max_rate=0.01).terms().per_order_commission  # a cap alone prices each order
    assert CostModel(spread_model="high_low").terms().spread  # estimated, whatever spread_bps says
    borrow_only = CostModel(borrow_rate=0.01).terms()
    assert borrow_only.borrow and not borrow_only.in_fill  # charged at the close: the flat fill runs
