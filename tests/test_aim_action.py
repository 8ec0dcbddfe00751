"""The action that can hold (issue 40): an aim portfolio, a trade rate and a no-trade band.

Known answers at the fill price, the reference env with every cost term, fuzzed
invariants, the public mapping `target_holdings` against the env's own step, and the
refusals of bad values.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from market_fixtures import random_panel
from test_env import EVERY_COST, assert_compiled_steps_equal_eager, every_cost_rules, run_against_reference

from market_envs import EnvConfig, StockTradingVecEnv, target_holdings
from market_envs.costs import CostModel
from trader.errors import ConfigError

PANEL = random_panel(n_tickers=4, n_bars=90, seed=7, gap_prob=0.0)
FREE = dict(action_mode="weights", short_selling=True, buy_cost=0.0, sell_cost=0.0, random_start=False)


def _start(config: EnvConfig, weights: list[float]) -> StockTradingVecEnv:
    """An env at bar 0 holding `weights` of 1e6 at bar 0's close (the rest in cash)."""
    env = StockTradingVecEnv(PANEL, 1, "cpu", config)
    close = PANEL.close[0].double()
    holdings = torch.tensor([weights], dtype=torch.float64) * 1e6 / close
    cash = 1e6 - float((holdings[0] * close).sum())
    env.reset(options={"cash": torch.tensor([cash]), "holdings": holdings})
    return env


def _weights_at_fill(env: StockTradingVecEnv, info: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights before the fill, weights after it), both at bar 1's open (the fill price)."""
    price = PANEL.open[1].double()
    return price, info["holdings"][0] * price


def test_rate_zero_never_trades_and_pays_nothing():
    env = _start(EnvConfig(**{**FREE, "buy_cost": 0.001}, trade_rate=0.0, costs=EVERY_COST), [0.3, -0.2, 0.1, 0.0])
    held = env.holdings.clone()
    for actions in torch.rand(20, 1, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1:
        _, _, _, _, info = env.step(actions)
        assert torch.equal(info["holdings"], held)
        assert info["turnover"].item() == 0.0
        assert (info["costs"] - info["cost_borrow"]).item() == 0.0


@pytest.mark.parametrize("scope", ["stock", "book"])
def test_a_band_wider_than_any_move_never_trades(scope):
    env = _start(EnvConfig(**FREE, no_trade_band=10.0, band_scope=scope), [0.3, -0.2, 0.1, 0.0])
    held = env.holdings.clone()
    for actions in torch.rand(20, 1, 4, generator=torch.Generator().manual_seed(1)) * 2 - 1:
        _, _, _, _, info = env.step(actions)
        assert torch.equal(info["holdings"], held) and info["costs"].item() == 0.0


@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
@pytest.mark.parametrize("scope", ["stock", "book"])
def test_rate_one_and_band_zero_are_exactly_todays_fills(costs, scope):
    """The defaults, spelled out, and a band scope that has nothing to bound: the same numbers, bit for bit."""
    today = EnvConfig(action_mode="weights", short_selling=True, costs=costs, episode_length=30)
    spelled = replace(today, weights_map="normalized", trade_rate=1.0, no_trade_band=0.0, band_scope=scope)
    actions = torch.rand(40, 3, 4, generator=torch.Generator().manual_seed(2)) * 2 - 1
    runs = []
    for config in (today, spelled):
        env = StockTradingVecEnv(PANEL, 3, "cpu", config)
        env.reset(seed=3)
        runs.append([env.step(a)[4] for a in actions])
    for left, right in zip(*runs, strict=True):
        for key in ("holdings", "cash", "costs", "value"):
            assert torch.equal(left[key], right[key]), key


def test_linear_map_at_rate_one_is_the_normalized_book_of_the_scaled_action():
    """weights_map="linear": an action a is the book a x 2 / N (gross <= 1), which "normalized" reaches from 2a / N."""
    a = torch.tensor([[0.5, -0.25, 0.5, -0.5]])  # the book a x 2 / 4: gross 0.875
    env_linear = _start(EnvConfig(**FREE, weights_map="linear"), [0.0] * 4)
    env_plain = _start(EnvConfig(**FREE), [0.0] * 4)
    _, _, _, _, linear = env_linear.step(a)
    _, _, _, _, plain = env_plain.step(a * 2 / 4)
    torch.testing.assert_close(linear["holdings"], plain["holdings"], rtol=1e-14, atol=0)
    price, after = _weights_at_fill(env_linear, linear)
    torch.testing.assert_close(after / 1e6, (a[0] * 0.5).double(), rtol=1e-12, atol=1e-12)


def test_linear_scale_sizes_the_aim_of_the_same_action():
    """linear_scale s: the action a asks for the book a x s / N, so a larger s is a larger book."""
    a = torch.tensor([[0.2, -0.1, 0.1, -0.2]])
    books = []
    for scale in (2.0, 6.0):
        env = _start(EnvConfig(**FREE, weights_map="linear", linear_scale=scale), [0.0] * 4)
        _, _, _, _, info = env.step(a)
        books.append(_weights_at_fill(env, info)[1] / 1e6)
        torch.testing.assert_close(books[-1], a[0].double() * scale / 4, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(books[1], 3 * books[0], rtol=1e-12, atol=1e-15)


def test_linear_map_rescales_to_the_leverage_limit():
    env = _start(EnvConfig(**FREE, weights_map="linear"), [0.0] * 4)
    _, _, _, _, info = env.step(torch.tensor([[1.0, 1.0, -1.0, 1.0]]))  # 2 x gross 1: rescaled to gross 1
    _, after = _weights_at_fill(env, info)
    torch.testing.assert_close(after / 1e6, torch.tensor([0.25, 0.25, -0.25, 0.25], dtype=torch.float64))


def test_a_target_inside_the_band_trades_nothing():
    start = [0.30, -0.20, 0.10, 0.0]
    env = _start(EnvConfig(**FREE, no_trade_band=0.05), start)
    value = env.cash + (env.holdings[0] * PANEL.open[1].double()).sum()  # the value at the fill price
    now = (env.holdings[0] * PANEL.open[1].double() / value).float()
    _, _, _, _, info = env.step((now + torch.tensor([0.04, -0.049, 0.0, 0.03])).unsqueeze(0))
    assert info["turnover"].item() == 0.0 and info["costs"].item() == 0.0


def test_a_target_outside_the_band_trades_to_the_bands_edge_not_to_the_target():
    env = _start(EnvConfig(**FREE, no_trade_band=0.05), [0.30, -0.20, 0.10, 0.0])
    price = PANEL.open[1].double()
    value = float(env.cash + (env.holdings[0] * price).sum())
    before = env.holdings[0] * price / value
    aim = torch.tensor([0.45, -0.30, 0.12, 0.0], dtype=torch.float64)  # gross 0.87: taken as it is
    _, _, _, _, info = env.step(aim.float().unsqueeze(0))
    after = info["holdings"][0] * price / value
    aim = aim.float().double()
    expected = torch.where((aim - before).abs() > 0.05, aim - 0.05 * torch.sign(aim - before), before)
    torch.testing.assert_close(after, expected, rtol=1e-9, atol=1e-12)
    assert after[2].item() == pytest.approx(before[2].item())  # 0.02 from its aim: inside its band, not traded


def test_a_book_band_trades_every_stock_toward_its_aim_until_the_book_is_band_away():
    env = _start(EnvConfig(**FREE, no_trade_band=0.1, band_scope="book"), [0.30, -0.20, 0.10, 0.0])
    price = PANEL.open[1].double()
    value = float(env.cash + (env.holdings[0] * price).sum())
    before = env.holdings[0] * price / value
    aim = torch.tensor([0.45, -0.30, 0.0, 0.1]).double()
    _, _, _, _, info = env.step(aim.float().unsqueeze(0))
    after = info["holdings"][0] * price / value
    aim = aim.float().double()
    assert float((aim - after).abs().sum()) == pytest.approx(0.1, rel=1e-9)
    keep = 0.1 / float((aim - before).abs().sum())
    torch.testing.assert_close(after, before + (aim - before) * (1 - keep), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rate", [0.5, 0.1])
def test_the_trade_rate_moves_that_share_of_the_way_after_the_band(rate):
    env = _start(EnvConfig(**FREE, trade_rate=rate, no_trade_band=0.02), [0.30, -0.20, 0.10, 0.0])
    price = PANEL.open[1].double()
    value = float(env.cash + (env.holdings[0] * price).sum())
    before = env.holdings[0] * price / value
    aim = torch.tensor([0.0, 0.2, 0.11, -0.3]).float().double()
    _, _, _, _, info = env.step(aim.float().unsqueeze(0))
    gap = aim - before
    beyond = torch.sign(gap) * (gap.abs() - 0.02).clamp_min(0)
    torch.testing.assert_close(info["holdings"][0] * price / value, before + rate * beyond, rtol=1e-9, atol=1e-12)


def test_the_aim_reward_at_rate_one_is_the_change_of_value_from_the_fill_to_the_close():
    """reward="aim": with the book rebalanced to the aim in full and nothing charged, the aim's return
    over the bar is the book's: the value at the close less the value at the fill."""
    config = EnvConfig(**FREE, reward="aim", reward_scale=1.0, market_neutral=True)
    env = _start(config, [0.2, -0.1, 0.0, 0.1])
    value_at_fill = float(env.cash + (env.holdings[0] * PANEL.open[1].double()).sum())
    _, reward, _, _, info = env.step(torch.tensor([[0.4, -0.3, 0.2, -0.1]]))
    assert reward.item() == pytest.approx(info["value"].item() - value_at_fill, rel=1e-5, abs=1e-3)
    slow = _start(replace(config, trade_rate=0.1, weights_map="linear", costs=EVERY_COST), [0.2, -0.1, 0.0, 0.1])
    _, reward, _, _, info = slow.step(torch.tensor([[0.4, -0.3, 0.2, -0.1]]))
    aim = torch.tensor([0.4, -0.3, 0.2, -0.1], dtype=torch.float64)
    aim = (aim - aim.mean()) * 2 / 4
    earned = value_at_fill * float((aim * (PANEL.close[1].double() / PANEL.open[1].double() - 1)).sum())
    assert reward.item() == pytest.approx(earned - info["costs"].item(), rel=1e-5, abs=1e-3)
    with pytest.raises(ConfigError, match="reward='aim' needs action_mode='weights'"):
        EnvConfig(reward="aim")


# ------------------------------------------------------------------ the reference env


@pytest.mark.parametrize("short_selling", [False, True])
@pytest.mark.parametrize(
    "aim",
    [
        dict(weights_map="linear", trade_rate=0.3),
        dict(no_trade_band=0.02),
        dict(weights_map="linear", trade_rate=0.5, no_trade_band=0.01),
        dict(trade_rate=0.7, no_trade_band=0.05, band_scope="book"),
        dict(weights_map="linear", trade_rate=0.2, reward="aim"),
        dict(weights_map="linear", linear_scale=7.0, trade_rate=0.1, reward="aim"),
    ],
    ids=["linear-rate", "band", "linear-rate-band", "rate-book-band", "aim-reward", "linear-scale"],
)
def test_equals_reference_with_every_cost_term_and_the_new_action(aim, short_selling):
    config = every_cost_rules(action_mode="weights", short_selling=short_selling, market_neutral=short_selling, **aim)
    run_against_reference(random_panel(n_tickers=4, n_bars=90, seed=7, gap_prob=0.05), 4, config, steps=40, seed=13)


# ------------------------------------------------------------------ invariants


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    short_selling=st.booleans(),
    weights_map=st.sampled_from(["normalized", "linear"]),
    rate=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    band=st.sampled_from([0.0, 0.01, 0.2]),
    scope=st.sampled_from(["stock", "book"]),
    costly=st.booleans(),
)
def test_the_book_moves_between_its_weights_and_its_aim(seed, short_selling, weights_map, rate, band, scope, costly):
    """Every stock's new position lies between its position and its aim (no fill passes the aim),
    and the accounting identities hold, whatever the rate, band and costs."""
    config = EnvConfig(
        action_mode="weights",
        short_selling=short_selling,
        weights_map=weights_map,
        trade_rate=rate,
        no_trade_band=band,
        band_scope=scope,
        buy_cost=0.001,
        sell_cost=0.001,
        costs=EVERY_COST if costly else CostModel(),
        initial_cash=50_000.0,
        episode_length=10,
    )
    env = StockTradingVecEnv(PANEL, 5, "cpu", config)
    env.reset(seed=seed)
    close, open_ = PANEL.close.double(), PANEL.open.double()
    actions = torch.rand(15, 5, 4, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    for a in actions:
        held, cash, t = env.holdings.clone(), env.cash.clone(), env.t.clone()
        price = open_[t + 1]
        aim = target_holdings(a, held, price, cash, replace(config, trade_rate=1.0, no_trade_band=0.0))
        _, _, _, _, info = env.step(a)
        after = info["holdings"]
        low, high = torch.minimum(held, aim), torch.maximum(held, aim)
        assert (after >= low - 1e-9 * low.abs() - 1e-12).all() and (after <= high + 1e-9 * high.abs() + 1e-12).all()
        marked = info["cash"] + (after * close[info["t"]]).sum(-1)
        torch.testing.assert_close(info["value"], marked, rtol=1e-12, atol=1e-9)
        assert (info["costs"] >= 0).all()
        if not short_selling:
            assert (info["cash"] >= 0).all() and (after >= 0).all()
        if rate == 0.0:
            assert torch.equal(after, held)


def test_target_holdings_are_the_envs_own_orders():
    """`target_holdings` (what `trader act` calls) gives the holdings the env's step reaches
    when nothing cuts the orders (no cap, cash enough, no costs)."""
    config = EnvConfig(**FREE, weights_map="linear", trade_rate=0.4, no_trade_band=0.01, market_neutral=True)
    env = _start(config, [0.1, -0.1, 0.05, -0.05])
    a = torch.tensor([[0.3, -0.9, 0.4, 0.1]])
    held, cash = env.holdings.clone(), env.cash.clone()
    expected = target_holdings(a, held, PANEL.open[1], cash, config)
    _, _, _, _, info = env.step(a)
    torch.testing.assert_close(info["holdings"], expected, rtol=1e-12, atol=1e-9)
    assert not torch.equal(expected, held)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (dict(action_mode="weights", trade_rate=1.5), "trade_rate must be a number in \\[0, 1\\]"),
        (dict(action_mode="weights", trade_rate=-0.1), "trade_rate"),
        (dict(action_mode="weights", no_trade_band=-0.01), "no_trade_band must be a number >= 0"),
        (dict(action_mode="weights", no_trade_band=float("nan")), "no_trade_band"),
        (dict(action_mode="weights", weights_map="log"), "weights_map must be one of"),
        (dict(action_mode="weights", band_scope="sector"), "band_scope must be one of"),
        (dict(trade_rate=0.5), "need action_mode='weights'"),
        (dict(no_trade_band=0.01), "need action_mode='weights'"),
        (dict(weights_map="linear"), "need action_mode='weights'"),
        (dict(action_mode="weights", weights_map="linear", linear_scale=0.0), "linear_scale must be a number > 0"),
        (dict(action_mode="weights", weights_map="linear", linear_scale=float("inf")), "linear_scale"),
        (dict(action_mode="weights", linear_scale=4.0), "linear_scale sizes the linear aim"),
    ],
)
def test_bad_aim_rules_are_refused_with_one_clear_line(values, fragment):
    with pytest.raises(ConfigError, match=fragment) as caught:
        EnvConfig(**values)
    assert "\n" not in str(caught.value)


def test_the_new_fields_round_trip_through_the_config_codec():
    from trader.rundir import config_from_dict, config_to_dict

    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        weights_map="linear",
        linear_scale=5.0,
        trade_rate=0.25,
        no_trade_band=0.003,
        band_scope="book",
    )
    assert config_from_dict(EnvConfig, config_to_dict(config)) == config
    assert np.isclose(config_to_dict(config)["trade_rate"], 0.25)


# ------------------------------------------------------------------ every path: compiled, per row, gymnasium


def test_compiled_step_equals_eager_with_the_new_action_and_every_cost_term():
    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        market_neutral=True,
        weights_map="linear",
        trade_rate=0.3,
        no_trade_band=0.02,
        reward="aim",
        costs=EVERY_COST,
        initial_cash=30_000.0,
        episode_length=6,
    )
    actions = torch.rand(12, 3, 4, generator=torch.Generator().manual_seed(5)) * 2 - 1
    assert_compiled_steps_equal_eager(PANEL, config, actions)


def test_set_pace_gives_each_row_the_rules_of_its_own_env():
    """Rows with their own rate and band (`set_pace`, the oracle fit's grid) step as separate envs do."""
    base = EnvConfig(**FREE, trade_rate=0.5, no_trade_band=0.01, costs=EVERY_COST, initial_cash=30_000.0)
    pairs = [(0.5, 0.01), (1.0, 0.0), (0.1, 0.05)]
    batched = StockTradingVecEnv(PANEL, 3, "cpu", base)
    batched.set_pace(torch.tensor([r for r, _ in pairs]), torch.tensor([b for _, b in pairs]))
    batched.reset()
    alone = []
    for rate, band in pairs:
        env = StockTradingVecEnv(PANEL, 1, "cpu", replace(base, trade_rate=rate, no_trade_band=band))
        env.reset()
        alone.append(env)
    for a in torch.rand(20, 1, 4, generator=torch.Generator().manual_seed(6)) * 2 - 1:
        info = batched.step(a.expand(3, -1))[4]
        for row, env in enumerate(alone):
            single = env.step(a)[4]
            torch.testing.assert_close(
                info["holdings"][row], single["holdings"][0], rtol=1e-7, atol=1e-6
            )  # rounding: x 1.0
    with pytest.raises(Exception, match="varies only when the config sets one"):
        StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(**FREE, trade_rate=0.5)).set_pace(no_trade_band=torch.zeros(3))
    with pytest.raises(Exception, match="must lie in"):
        batched.set_pace(trade_rate=torch.tensor([0.5, 1.5, 0.1]))


def test_the_gymnasium_adapter_trades_with_the_new_action():
    """SB3 trains on `GymStockTradingEnv`: the adapter passes gymnasium's checker with the new rules
    and its steps are the batched env's."""
    from gymnasium.utils.env_checker import check_env

    from market_envs import GymStockTradingEnv

    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        weights_map="linear",
        trade_rate=0.2,
        no_trade_band=0.01,
        reward="aim",
        episode_length=20,
        costs=EVERY_COST,
    )
    env = GymStockTradingEnv(PANEL, config)
    check_env(env, skip_render_check=True)
    assert env.vec_env.config == config
    env.reset(seed=3)
    held = env.vec_env.holdings.clone()
    env.step(np.zeros(4, dtype=np.float32))  # the aim is the empty book: trade a share of the way there
    assert torch.equal(env.vec_env.holdings, held)  # nothing held yet, nothing to unwind
    env.step(np.ones(4, dtype=np.float32) * np.array([1, -1, 1, -1], dtype=np.float32))
    assert (env.vec_env.holdings.abs() > 0).any()


def test_requested_orders_of_trader_act_are_the_mapping_with_the_envs_rate_and_band():
    """`StockTradingVecEnv.requested_orders` (what `trader act` prices at the latest bar) is
    `target_holdings` less the book: the same mapping, the env's own trade rate and band."""
    config = EnvConfig(**FREE, weights_map="linear", trade_rate=0.25, no_trade_band=0.01, market_neutral=True)
    env = _start(config, [0.1, -0.1, 0.05, -0.05])
    a = torch.tensor([[0.9, -0.6, 0.1, -0.4]])
    price = PANEL.close[0]
    sells, buys = env.requested_orders(a, price)
    target = target_holdings(a, env.holdings, price, env.cash, config)
    torch.testing.assert_close(env.holdings - sells + buys, target, rtol=1e-12, atol=1e-9)
    everything = target_holdings(a, env.holdings, price, env.cash, replace(config, trade_rate=1.0, no_trade_band=0.0))
    assert ((buys - sells).abs() < (everything - env.holdings).abs()).any()  # a quarter of the way, not all of it
