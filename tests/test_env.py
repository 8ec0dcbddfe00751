"""StockTradingVecEnv: equivalence with the scalar reference, invariants, timing, resets."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from market_fixtures import random_panel, with_leavers
from reference_env import ReferenceEnv

from market_envs import EnvConfig, StockTradingVecEnv, native_fill
from market_envs.costs import CostModel
from market_envs.kernel import clean_actions
from market_envs.tables import return_tstat_table, turbulence_index
from trader.errors import ConfigError, UserError

PANEL = random_panel(n_tickers=4, n_bars=90, seed=7, gap_prob=0.05)
COST_KEYS = (
    "costs",
    "cost_commission",
    "cost_spread",
    "cost_impact",
    "cost_borrow",
    "ordered_value",
    "unfilled_value",
    "unfilled_shares",
)
EVERY_COST = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    commission_max_rate=0.01,
    spread_model="high_low",
    spread_window=20,
    impact_eta=1.0,
    impact_window_days=1,
    participation=0.05,
    borrow_rate=0.05,
)
"""Every cost term on, at sizes where each one binds on PANEL (volume 100..10000 a bar)."""


def random_actions(steps: int, num_envs: int, n: int, seed: int) -> torch.Tensor:
    """Actions in [-1, 1] with many exact 0 and +-1 values (the edge cases)."""
    g = torch.Generator().manual_seed(seed)
    actions = torch.rand(steps, num_envs, n, generator=g) * 2 - 1
    pick = torch.rand(steps, num_envs, n, generator=g)
    actions = torch.where(pick < 0.15, torch.sign(actions), actions)
    return torch.where(pick > 0.9, torch.zeros_like(actions), actions)


def run_against_reference(
    data, num_envs: int, config: EnvConfig, steps: int, seed: int, seen: dict | None = None
) -> int:
    """Step the batched env and one reference env per sub-env; compare everything.

    Returns the number of autoresets seen (the reference is restarted at the start
    the batched env drew). `seen`, when given, counts what the leaver rule met (a panel
    with `MarketData.reducible`): ``longs`` and ``shorts`` held into a reducible bar, and
    ``shrunk`` positions that a fill there made smaller.
    """
    env = StockTradingVecEnv(data, num_envs, "cpu", config)
    obs, _ = env.reset(seed=seed)
    refs = [ReferenceEnv(data, config) for _ in range(num_envs)]
    for e, ref in enumerate(refs):
        start = ref.reset(int(env.t[e]), int(env.episode_end[e]))
        np.testing.assert_allclose(obs[e].numpy(), start, rtol=1e-5, atol=1e-5)
    resets = 0
    for k, actions in enumerate(random_actions(steps, num_envs, env.act_dim, seed)):
        before = env.holdings.clone()
        obs, reward, terminated, truncated, info = env.step(actions)
        if seen is not None and data.reducible is not None:
            out = data.reducible[info["t"]]
            seen["longs"] = seen.get("longs", 0) + int((out & (before > 0)).sum())
            seen["shorts"] = seen.get("shorts", 0) + int((out & (before < 0)).sum())
            seen["shrunk"] = seen.get("shrunk", 0) + int((out & (info["holdings"].abs() < before.abs())).sum())
        for e, ref in enumerate(refs):
            ref_obs, ref_reward, ref_term, ref_trunc, ref_info = ref.step(actions[e].tolist())
            where = f"step {k}, env {e}"
            assert info["value"][e].item() == pytest.approx(ref_info["value"], rel=1e-10), where
            assert info["cash"][e].item() == pytest.approx(ref_info["cash"], rel=1e-9, abs=1e-6), where
            np.testing.assert_allclose(info["holdings"][e].numpy(), ref.holdings, rtol=1e-10, atol=1e-9, err_msg=where)
            assert reward[e].item() == pytest.approx(ref_reward, rel=1e-5, abs=1e-6), where
            for key in COST_KEYS:
                assert info[key][e].item() == pytest.approx(ref_info[key], rel=1e-9, abs=1e-9), f"{where}, {key}"
            assert info["turnover"][e].item() == pytest.approx(ref_info["turnover"], rel=1e-9, abs=1e-12), where
            assert (bool(terminated[e]), bool(truncated[e])) == (ref_term, ref_trunc), where
            np.testing.assert_allclose(info["final_obs"][e].numpy(), ref_obs, rtol=1e-5, atol=1e-5, err_msg=where)
            if ref_term or ref_trunc:
                resets += 1
                fresh = ref.reset(int(env.t[e]), int(env.episode_end[e]))
                np.testing.assert_allclose(obs[e].numpy(), fresh, rtol=1e-5, atol=1e-5, err_msg=where)
            else:
                assert torch.equal(obs[e], info["final_obs"][e]), where
    return resets


# ------------------------------------------------------------------ equivalence


@pytest.mark.parametrize("leavers", [False, True], ids=["members", "leavers"])
@pytest.mark.parametrize("mode", ["shares", "weights"])
@pytest.mark.parametrize(("num_envs", "n_tickers"), [(1, 1), (3, 4), (6, 7)])
def test_batched_env_equals_reference(mode, num_envs, n_tickers, leavers):
    data = random_panel(n_tickers=n_tickers, n_bars=70, seed=n_tickers, gap_prob=0.05)
    if leavers:  # a point-in-time universe: stocks leave (and come back) while held
        data = with_leavers(data, seed=n_tickers)
    # little cash, so buys are often scaled down by the cash limit
    config = EnvConfig(action_mode=mode, initial_cash=40.0 * 100 * n_tickers / 2, episode_length=15)
    seen: dict = {}
    resets = run_against_reference(data, num_envs, config, steps=35, seed=num_envs, seen=seen)
    assert resets >= num_envs  # autoresets were exercised
    if leavers:  # the rule met long positions in leavers, and sold some of them
        assert seen["longs"] > 0 and seen["shrunk"] > 0, seen


@pytest.mark.parametrize("short_selling", [False, True])
@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_equals_reference_with_leavers_long_and_short_books(mode, short_selling):
    """A point-in-time universe on PANEL (gaps too), with short selling on and off: the rule
    for leavers met long books and, with short selling, short ones, and shrank positions."""
    data = with_leavers(PANEL, seed=21, switches=6, member_first=0.5)
    config = EnvConfig(
        action_mode=mode,
        short_selling=short_selling,
        initial_cash=20_000.0,
        episode_length=25,
        buy_cost=0.001,
        sell_cost=0.002,
    )
    seen: dict = {}
    run_against_reference(data, 4, config, steps=40, seed=13, seen=seen)
    assert seen["longs"] > 0 and seen["shrunk"] > 0, seen
    assert (seen["shorts"] > 0) == short_selling, seen


@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_equals_reference_with_short_selling_guard_and_costs(mode):
    config = EnvConfig(
        action_mode=mode,
        short_selling=True,
        buy_cost=0.003,
        sell_cost=0.0005,
        initial_cash=20_000.0,
        episode_length=25,
        turbulence_threshold=6.0,
        turbulence_window=10,
        features=("close", "rsi_30", "volume"),
    )
    env = StockTradingVecEnv(PANEL, 1, "cpu", config)
    assert env.turbulence_guard.any() and not env.turbulence_guard.all()  # the guard really acts here
    run_against_reference(PANEL, 4, config, steps=40, seed=11)


def assert_compiled_steps_equal_eager(panel, config: EnvConfig, actions) -> None:
    """The compiled env and the eager one, stepped alike through `actions` [T, 3, A] from the same
    reset, agree: rewards to float32 rounding, holdings, cash, value and costs to accounting precision."""
    runs = []
    for compiled in (False, True):
        env = StockTradingVecEnv(panel, 3, "cpu", config, compile=compiled)
        env.reset(seed=9)
        runs.append([env.step(a) for a in actions])
    for eager, fused in zip(*runs, strict=True):
        torch.testing.assert_close(fused[1], eager[1], rtol=1e-5, atol=1e-4)  # rewards
        for key in ("holdings", "cash", "value", "costs"):
            torch.testing.assert_close(fused[4][key], eager[4][key], rtol=1e-7, atol=1e-6)


def every_cost_rules(**overrides) -> EnvConfig:
    """The rules the reference tests run with every cost term on: both rates, `EVERY_COST`, a small
    account, short episodes, turbulence liquidation, three features; `overrides` on top."""
    values = dict(
        buy_cost=0.001,
        sell_cost=0.002,
        costs=EVERY_COST,
        initial_cash=20_000.0,
        episode_length=25,
        turbulence_threshold=6.0,
        turbulence_window=10,
        features=("close", "rsi_30", "volume"),
    )
    return EnvConfig(**{**values, **overrides})


@pytest.mark.parametrize("mode", ["shares", "weights"])
@pytest.mark.parametrize("short_selling", [False, True])
def test_equals_reference_with_every_cost_term(mode, short_selling):
    leverage = 2.0 if (mode == "weights" and short_selling) else 1.0
    config = every_cost_rules(action_mode=mode, short_selling=short_selling, max_leverage=leverage)
    run_against_reference(PANEL, 4, config, steps=40, seed=12)
    seen: dict = {}  # the same with leavers: the cost terms (the native fill on the CPU) cost what the rule let through
    run_against_reference(with_leavers(PANEL, seed=22, switches=6), 4, config, steps=40, seed=12, seen=seen)
    assert seen["shrunk"] > 0, seen
    # every term really acted in that run: each cost, the cap and the cash limit
    env = StockTradingVecEnv(PANEL, 4, "cpu", config)
    env.reset(seed=12)
    totals = dict.fromkeys(COST_KEYS, 0.0)
    scaled = False
    for actions in random_actions(40, 4, PANEL.num_tickers, 12):
        cash = env.cash.clone()
        _, _, _, _, info = env.step(actions)
        totals = {key: totals[key] + info[key].sum().item() for key in COST_KEYS}
        scaled |= bool((info["cash"] < 0.02 * cash).any())
    for key in ("cost_commission", "cost_spread", "cost_impact", "unfilled_value"):
        assert totals[key] > 0, key
    assert (totals["cost_borrow"] > 0) == short_selling
    assert scaled  # the cash limit bound


@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_equals_reference_on_a_period_with_earlier_bars(mode):
    """A period cut from PANEL at bar 30 (its earlier bars its `MarketData.lookback`), every cost term,
    the turbulence guard and two return windows on: the reference, which reads the same earlier bars
    in its plain loops, agrees on every observation (its first bars' t-statistics included), fill,
    cost and reward."""
    period = PANEL.with_normalization(*PANEL.fit_normalization()).take(slice(30, None))
    config = every_cost_rules(action_mode=mode, short_selling=True, return_windows=(5, 20))
    first = StockTradingVecEnv(period, 1, "cpu", replace(config, random_start=False)).reset()[0]
    n = period.num_tickers
    assert (first[0, 1 + n :].view(n, -1)[:, -2:] != 0).all()  # warmed up at the period's first bar
    run_against_reference(period, 4, config, steps=40, seed=14)


@pytest.mark.parametrize(
    "spread", [CostModel(spread_bps=7.5), CostModel(spread_model="per_ticker", spread_bps_per_ticker=(1, 20, 0, 3.5))]
)
def test_equals_reference_with_fixed_and_per_ticker_spreads(spread):
    config = EnvConfig(action_mode="weights", costs=spread, initial_cash=30_000.0, episode_length=20)
    run_against_reference(PANEL, 3, config, steps=25, seed=5)


def test_full_period_mode_starts_at_first_bar_and_truncates_at_last():
    env = StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(random_start=False))
    _, info = env.reset(seed=0)
    assert info["t"].tolist() == [0, 0, 0]
    actions = torch.zeros(3, PANEL.num_tickers)
    for _ in range(PANEL.num_bars - 2):
        _, _, terminated, truncated, info = env.step(actions)
        assert not truncated.any() and not terminated.any()
    _, _, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any()
    assert info["t"].tolist() == [PANEL.num_bars - 1] * 3


def test_random_starts_cover_the_data_and_leave_full_episodes():
    env = StockTradingVecEnv(PANEL, 256, "cpu", EnvConfig(episode_length=30))
    _, info = env.reset(seed=0)
    assert info["t"].min() >= 0 and info["t"].max() <= PANEL.num_bars - 1 - 30
    assert len(set(info["t"].tolist())) > 20
    assert torch.equal(env.episode_end, info["t"] + 30)
    to_the_end = StockTradingVecEnv(PANEL, 256, "cpu", EnvConfig(episode_length=None))
    _, info = to_the_end.reset(seed=0)
    assert info["t"].max() <= PANEL.num_bars - 2 and len(set(info["t"].tolist())) > 20
    assert (to_the_end.episode_end == PANEL.num_bars - 1).all()


# ------------------------------------------------------------------ known answers


def test_order_fills_at_next_open_with_costs():
    config = EnvConfig(random_start=False, buy_cost=0.002)
    env = StockTradingVecEnv(PANEL, 1, "cpu", config)
    env.reset()
    actions = torch.zeros(1, PANEL.num_tickers)
    actions[0, 0] = 0.555  # trunc(55.5) = 55 shares
    _, reward, _, _, info = env.step(actions)
    fill = PANEL.open[1, 0].double().item()
    cash = 1_000_000.0 - 55 * fill * 1.002
    assert info["holdings"][0].tolist() == [55.0] + [0.0] * (PANEL.num_tickers - 1)
    assert info["cash"].item() == pytest.approx(cash, rel=1e-12)
    assert info["costs"].item() == pytest.approx(55 * fill * 0.002, rel=1e-12)
    value = cash + 55 * PANEL.close[1, 0].double().item()
    assert info["value"].item() == pytest.approx(value, rel=1e-12)
    assert reward.item() == pytest.approx((value - 1_000_000.0) * 1e-4, rel=1e-5)


def test_weights_mode_reaches_target_weights():
    config = EnvConfig(action_mode="weights", random_start=False, buy_cost=0.0, sell_cost=0.0)
    env = StockTradingVecEnv(PANEL, 1, "cpu", config)
    env.reset()
    actions = torch.tensor([[0.5, 0.25, 0.0, -1.0]])
    _, _, _, _, info = env.step(actions)
    price = PANEL.open[1].double()
    position_value = info["holdings"][0] * price
    np.testing.assert_allclose(position_value.numpy(), [500_000.0, 250_000.0, 0.0, 0.0], rtol=1e-9)
    assert info["cash"].item() == pytest.approx(250_000.0, rel=1e-9)


def test_cash_shortage_scales_buys_together_independent_of_stock_order():
    config = EnvConfig(random_start=False, initial_cash=5_000.0)
    actions = torch.tensor([[1.0, 0.6, 0.0, 1.0]])
    env = StockTradingVecEnv(PANEL, 1, "cpu", config)
    env.reset()
    _, _, _, _, info = env.step(actions)
    order = [3, 1, 0, 2]
    permuted = replace(
        PANEL,
        tickers=tuple(PANEL.tickers[i] for i in order),
        features=PANEL.features[:, order],
        tradable=PANEL.tradable[:, order],
    )
    env2 = StockTradingVecEnv(permuted, 1, "cpu", config)
    env2.reset()
    _, _, _, _, info2 = env2.step(actions[:, order])
    assert info2["holdings"][0].tolist() == info["holdings"][0, order].tolist()
    assert info2["cash"].item() == pytest.approx(info["cash"].item(), rel=1e-12)
    wanted = torch.tensor([100.0, 60.0, 0.0, 100.0])
    held = info["holdings"][0]
    assert (held < wanted).any() and (held <= wanted).all()
    ratio = held[[0, 1, 3]] / wanted[[0, 1, 3]]
    assert (ratio.max() - ratio.min()) < 0.05  # one common factor, up to whole-share rounding
    assert info["cash"].item() >= 0.0


def test_untradable_stocks_are_not_traded():
    data = random_panel(n_tickers=5, n_bars=60, seed=3, gap_prob=0.3)
    env = StockTradingVecEnv(data, 8, "cpu", EnvConfig(episode_length=40))
    env.reset(seed=1)
    for actions in random_actions(30, 8, 5, seed=2):
        before, t = env.holdings.clone(), env.t.clone()
        _, _, _, _, info = env.step(actions)
        frozen = ~data.tradable[t + 1]
        assert torch.equal(info["holdings"][frozen], before[frozen])
    assert (~data.tradable[1:]).any()


# ------------------------------------------------------------------ actions matter


@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_all_zero_actions_never_trade(mode):
    env = StockTradingVecEnv(PANEL, 5, "cpu", EnvConfig(action_mode=mode, episode_length=20))
    env.reset(seed=0)
    zeros = torch.zeros(5, PANEL.num_tickers)
    for _ in range(30):
        _, reward, _, _, info = env.step(zeros)
        assert (info["holdings"] == 0).all() and (info["costs"] == 0).all() and (info["turnover"] == 0).all()
        assert (info["cash"] == 1_000_000.0).all() and (reward == 0).all()


def test_nan_actions_place_no_order_and_out_of_range_actions_are_clipped():
    env = StockTradingVecEnv(PANEL, 1, "cpu", EnvConfig(random_start=False))
    env.reset()
    _, _, _, _, info = env.step(torch.tensor([[float("nan"), 5.0, -3.0, 0.0]]))
    assert info["holdings"][0].tolist() == [0.0, 100.0, 0.0, 0.0]


ODD_ACTIONS = (
    *(math.nan, math.inf, -math.inf, -1.0, 1.0, 0.0, -0.0, 1e-30, -1e-30, 1.5, -2.0, 0.3, 3.4e38, -1e-45),
    *(1e-45, 1.0000001, -3.4e38),
)
"""Actions a reader must clean: NaN (no order), infinities and values beyond [-1, 1] (clipped), signed zeros and
subnormals (kept as they are)."""


def test_compiled_cleaning_of_the_actions_equals_eager_bit_for_bit():
    """Compiled, `clean_actions` finds NaN as ``a != a`` (inductor vectorizes the comparison, where it
    tests ``isnan`` one element at a time) and leaves +-inf to the clip; its float64 bits, signed
    zeros included, are eager's (nan_to_num, then the clip)."""
    odd = torch.tensor(ODD_ACTIONS)
    pick = torch.randint(0, len(odd), (7, 2, 11), generator=torch.Generator().manual_seed(2))
    actions = odd[pick].reshape(7, 22)
    assert actions.isnan().any() and actions.isinf().any()
    compiled = torch.compile(lambda a: clean_actions(a, torch.float64), dynamic=False)
    expected = clean_actions(actions, torch.float64)
    assert torch.equal(compiled(actions).view(torch.int64), expected.view(torch.int64))
    assert torch.equal(
        compiled(actions[:, 1::2]).view(torch.int64), expected[:, 1::2].view(torch.int64)
    )  # a strided block


def test_all_zero_actions_keep_existing_positions():
    env = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(random_start=False))
    env.reset()
    env.step(torch.ones(2, PANEL.num_tickers))
    held, cash = env.holdings.clone(), env.cash.clone()
    env.step(torch.zeros(2, PANEL.num_tickers))
    assert torch.equal(env.holdings, held) and torch.equal(env.cash, cash)


@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_all_one_actions_buy(mode):
    env = StockTradingVecEnv(PANEL, 4, "cpu", EnvConfig(action_mode=mode, episode_length=20))
    _, info = env.reset(seed=0)
    tradable_next = PANEL.tradable[info["t"] + 1]
    _, _, _, _, info = env.step(torch.ones(4, PANEL.num_tickers))
    assert (info["holdings"][tradable_next] > 0).all()
    assert (info["holdings"][~tradable_next] == 0).all()
    assert (info["cash"] < 1_000_000.0).all() and (info["costs"] > 0).all()
    if mode == "shares":
        assert set(info["holdings"][tradable_next].tolist()) == {100.0}


# ------------------------------------------------------------------ invariants


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["shares", "weights"]),
    buy_cost=st.sampled_from([0.0, 0.001, 0.01]),
    sell_cost=st.sampled_from([0.0, 0.001, 0.02]),
    cash=st.sampled_from([500.0, 20_000.0, 1_000_000.0]),
    scale=st.sampled_from([1.0, 0.2, 1e-3]),
)
def test_accounting_invariants_under_random_actions(seed, mode, buy_cost, sell_cost, cash, scale):
    config = EnvConfig(action_mode=mode, buy_cost=buy_cost, sell_cost=sell_cost, initial_cash=cash, episode_length=8)
    env = StockTradingVecEnv(PANEL, 6, "cpu", config)
    env.reset(seed=seed)
    close, open_ = PANEL.close.double(), PANEL.open.double()
    for actions in random_actions(12, 6, PANEL.num_tickers, seed) * scale:
        before_cash, before_holdings, t = env.cash.clone(), env.holdings.clone(), env.t.clone()
        _, _, _, _, info = env.step(actions)
        cash_now, held = info["cash"], info["holdings"]
        marked = cash_now + (held * close[info["t"]]).sum(-1)
        torch.testing.assert_close(info["value"], marked, rtol=1e-12, atol=1e-9)
        assert (cash_now >= 0).all() and (held >= 0).all() and (info["costs"] >= 0).all()
        price = open_[t + 1]
        sold = ((before_holdings - held).clamp_min(0) * price).sum(-1)
        bought = ((held - before_holdings).clamp_min(0) * price).sum(-1)
        torch.testing.assert_close(info["costs"], sold * sell_cost + bought * buy_cost, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(cash_now, before_cash + sold - bought - info["costs"], rtol=1e-9, atol=1e-6)
        if mode == "shares":
            assert torch.equal(held, held.round())


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["shares", "weights"]),
    short_selling=st.booleans(),
    cash=st.sampled_from([500.0, 20_000.0, 1_000_000.0]),
    scale=st.sampled_from([1.0, 0.2, 1e-3]),
    per_share=st.sampled_from([0.0, 0.005]),
    minimum=st.sampled_from([0.0, 1.0, 50.0]),
    spread=st.sampled_from(["fixed", "high_low"]),
    eta=st.sampled_from([0.0, 1.0, 30.0]),
    participation=st.sampled_from([None, 0.01, 1.0]),
    borrow=st.sampled_from([0.0, 0.05, 2.0]),
)
def test_accounting_invariants_with_every_cost_term(
    seed, mode, short_selling, cash, scale, per_share, minimum, spread, eta, participation, borrow
):
    """value = cash + holdings x close; every cost paid is recorded and nothing is created or lost;
    no fill passes the participation cap; without short selling, cash and shares stay >= 0."""
    costs = CostModel(
        commission_per_share=per_share,
        commission_min=minimum,
        spread_model=spread,
        spread_bps=5.0,
        spread_window=10,
        impact_eta=eta,
        impact_window_days=1,
        participation=participation,
        borrow_rate=borrow,
    )
    config = EnvConfig(
        action_mode=mode,
        short_selling=short_selling,
        buy_cost=0.001,
        sell_cost=0.002,
        costs=costs,
        initial_cash=cash,
        episode_length=8,
        max_leverage=2.0 if (mode == "weights" and short_selling) else 1.0,
    )
    env = StockTradingVecEnv(PANEL, 6, "cpu", config)
    env.reset(seed=seed)
    close, open_, volume = PANEL.close.double(), PANEL.open.double(), PANEL.volume.double()
    for actions in random_actions(12, 6, PANEL.num_tickers, seed) * scale:
        before_cash, before_holdings, t = env.cash.clone(), env.holdings.clone(), env.t.clone()
        before_value = env.value.clone()
        _, _, _, _, info = env.step(actions)
        cash_now, held = info["cash"], info["holdings"]
        marked = cash_now + (held * close[info["t"]]).sum(-1)
        torch.testing.assert_close(info["value"], marked, rtol=1e-12, atol=1e-9)
        parts = info["cost_commission"] + info["cost_spread"] + info["cost_impact"] + info["cost_borrow"]
        torch.testing.assert_close(info["costs"], parts, rtol=1e-12, atol=1e-9)
        for key in COST_KEYS:
            assert (info[key] >= 0).all(), key
        price = open_[t + 1]
        traded = (held - before_holdings).abs()
        sold = ((before_holdings - held).clamp_min(0) * price).sum(-1)
        bought = ((held - before_holdings).clamp_min(0) * price).sum(-1)
        torch.testing.assert_close(cash_now, before_cash + sold - bought - info["costs"], rtol=1e-9, atol=1e-6)
        torch.testing.assert_close(info["turnover"], (sold + bought) / before_value.abs(), rtol=1e-9, atol=1e-12)
        assert (info["unfilled_value"] <= info["ordered_value"] * (1 + 1e-12) + 1e-9).all()
        assert (sold + bought <= info["ordered_value"] * (1 + 1e-12) + 1e-6).all()
        if participation is not None:
            assert (traded <= participation * volume[t + 1] + 1e-9).all()
        if not short_selling:
            assert (cash_now >= 0).all() and (held >= 0).all() and (info["cost_borrow"] == 0).all()
        if mode == "shares":
            assert torch.equal(held, held.round())


# ------------------------------------------------------------------ no look-ahead


@pytest.mark.parametrize("first", [0, 30], ids=["whole-panel", "a-period-with-earlier-bars"])
@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
def test_no_look_ahead(costs, first):
    """Perturbing every bar after k changes no observation, fill, cost or reward up to bar k, on
    the whole panel and on a period cut from it (whose trailing windows read the bars before it)."""
    whole = PANEL.with_normalization(*PANEL.fit_normalization())
    base = whole.take(slice(first, None))
    k = 50 - first
    g = torch.Generator().manual_seed(0)
    noise = torch.exp(torch.randn(base.features.shape, generator=g) * 0.2)
    noise[: k + 1] = 1.0
    flipped = base.tradable.clone()
    flipped[k + 1 :] = ~flipped[k + 1 :]
    future_changed = replace(base, features=base.features * noise, tradable=flipped)
    config = EnvConfig(
        random_start=False,
        turbulence_threshold=5.0,
        turbulence_window=10,
        return_windows=(5, 20),
        costs=costs,
        short_selling=True,
        initial_cash=50_000.0,
    )
    actions = random_actions(k + 5, 2, base.num_tickers, seed=5)
    runs = []
    for data in (base, future_changed):
        env = StockTradingVecEnv(data, 2, "cpu", config)
        obs, _ = env.reset()
        trace = [(obs, None, None, None, None, None)]
        for a in actions:
            obs, reward, _, _, info = env.step(a)
            trace.append((obs, reward, info["holdings"], info["cash"], info["costs"], info["unfilled_value"]))
        runs.append(trace)
    for bar in range(k + 1):  # step `bar - 1` fills at bar's open and marks at its close
        for left, right in zip(runs[0][bar], runs[1][bar]):
            if left is not None:
                assert torch.equal(left, right), f"bar {bar}"
    assert not torch.equal(runs[0][k + 2][0], runs[1][k + 2][0])  # the future really was changed


def test_turbulence_index_is_causal_and_matches_numpy():
    close = PANEL.close
    turbulence = turbulence_index(close, window=10)
    changed = close.clone()
    changed[60:] *= 1.3
    assert torch.equal(turbulence_index(changed, window=10)[:60], turbulence[:60])
    returns = np.zeros(close.shape)
    closes = close.double().numpy()
    returns[1:] = closes[1:] / closes[:-1] - 1
    t = 40
    past = returns[t - 10 : t]
    deviation = returns[t] - past.mean(0)
    expected = deviation @ np.linalg.pinv(np.cov(past, rowvar=False)) @ deviation
    assert turbulence[t].item() == pytest.approx(expected, rel=1e-6)
    assert (turbulence[:10] == 0).all()


# ------------------------------------------------------------------ resets and seeding


def test_same_step_autoreset():
    env = StockTradingVecEnv(PANEL, 4, "cpu", EnvConfig(episode_length=5))
    env.reset(seed=2)
    ones = torch.ones(4, PANEL.num_tickers)
    for _ in range(4):
        obs, _, terminated, truncated, info = env.step(ones)
        assert not (terminated | truncated).any()
        assert torch.equal(obs, info["final_obs"])
    obs, _, terminated, truncated, info = env.step(ones)
    assert truncated.all() and not terminated.any()
    assert (info["final_obs"][:, 1 : 1 + PANEL.num_tickers] > 0).any()  # the finished episode held stock
    assert (obs[:, 0] == 1.0).all() and (obs[:, 1 : 1 + PANEL.num_tickers] == 0).all()  # a fresh start
    assert (env.cash == 1_000_000.0).all() and (env.holdings == 0).all()
    assert (env.episode_end == env.t + 5).all()
    expected_features = env.tables.obs[env.t, 1 + PANEL.num_tickers :]
    assert torch.equal(obs[:, 1 + PANEL.num_tickers :], expected_features)


def test_reset_seed_reproduces_the_run():
    config = EnvConfig(episode_length=7)
    actions = random_actions(25, 5, PANEL.num_tickers, seed=1)

    def run(seed):
        env = StockTradingVecEnv(PANEL, 5, "cpu", config)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for a in actions:
            obs, reward, _, _, info = env.step(a)
            out += [obs, reward, info["t"]]
        return out

    first, again, other = run(3), run(3), run(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_returned_observations_are_never_overwritten_while_referenced():
    """Observation buffers are recycled only once nothing outside the env holds them."""
    env = StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(episode_length=5))
    obs, _ = env.reset(seed=0)
    ones = torch.ones(3, PANEL.num_tickers)
    kept_obs, kept_copy = obs, obs.clone()
    obs, _, _, _, info = env.step(ones)
    view, view_copy = obs[:, 1:], obs[:, 1:].clone()
    array = info["final_obs"].numpy()
    array_copy = array.copy()
    del obs, info
    pointers = set()
    for _ in range(12):
        obs, _, _, _, info = env.step(ones)
        pointers.update({obs.data_ptr(), info["final_obs"].data_ptr()})
    assert torch.equal(kept_obs, kept_copy) and torch.equal(view, view_copy)
    np.testing.assert_array_equal(array, array_copy)
    assert len(pointers) < 24  # buffers nobody held were reused


def test_spaces_shapes_and_dtypes():
    env = StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(features=("close", "macd")))
    n = PANEL.num_tickers
    assert env.obs_dim == 1 + n * 3 and env.act_dim == n and env.num_envs == 3
    assert env.single_observation_space.shape == (env.obs_dim,)
    assert env.single_action_space.shape == (n,)
    assert env.observation_space.shape == (3, env.obs_dim) and env.action_space.shape == (3, n)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.float32 and obs.shape == (3, env.obs_dim)
    assert env.single_observation_space.contains(obs[0].numpy())
    obs, reward, terminated, truncated, info = env.step(torch.zeros(3, n))
    assert reward.dtype == torch.float32 and reward.shape == (3,)
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    for key in ("t", "value", "cash", "turnover", "costs", "final_obs", "holdings"):
        assert info[key].shape[0] == 3 and info[key].device == env.device


def test_bad_input_raises_clear_errors():
    with pytest.raises(ConfigError, match="action_mode"):
        EnvConfig(action_mode="lots")
    with pytest.raises(ConfigError, match="buy_cost"):
        EnvConfig(buy_cost=-0.1)
    with pytest.raises(ConfigError, match="episode_length"):
        EnvConfig(episode_length=0)
    with pytest.raises(ConfigError, match="unknown feature"):
        StockTradingVecEnv(PANEL, 1, "cpu", EnvConfig(features=("close", "pe_ratio")))
    with pytest.raises(ConfigError, match="num_envs"):
        StockTradingVecEnv(PANEL, 0, "cpu")
    env = StockTradingVecEnv(PANEL, 2, "cpu")
    with pytest.raises(UserError, match="reset"):
        env.step(torch.zeros(2, PANEL.num_tickers))
    env.reset()
    with pytest.raises(UserError, match="shape"):
        env.step(torch.zeros(3, PANEL.num_tickers))


# ------------------------------------------------------------------ compiled and CUDA


def _trajectory(env: StockTradingVecEnv, actions: torch.Tensor) -> list[torch.Tensor]:
    obs, _ = env.reset(seed=9)
    out = [obs]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a.to(env.device))
        out += [obs, reward, terminated, truncated, info["value"], info["holdings"], info["final_obs"]]
        out += [info[key] for key in COST_KEYS]
    return [x.cpu() for x in out]


def _assert_same_trajectory(left, right):
    for a, b in zip(left, right, strict=True):
        if a.dtype == torch.bool:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("mode", "costs"),
    [
        pytest.param("shares", CostModel(), id="shares-flat"),
        pytest.param("weights", EVERY_COST, id="weights-every-cost"),
        # one compilation each, of paths the two above and the compiled costly steps below (every
        # cost term in shares and in weights) already compile (slow: run with -m slow)
        pytest.param("weights", CostModel(), id="weights-flat", marks=pytest.mark.slow),
        pytest.param("shares", EVERY_COST, id="shares-every-cost", marks=pytest.mark.slow),
    ],
)
def test_compiled_step_equals_eager(mode, costs):
    config = EnvConfig(
        action_mode=mode, episode_length=6, initial_cash=30_000.0, costs=costs, short_selling=costs != CostModel()
    )
    actions = random_actions(10, 4, PANEL.num_tickers, seed=4)
    eager = _trajectory(StockTradingVecEnv(PANEL, 4, "cpu", config), actions)
    compiled = _trajectory(StockTradingVecEnv(PANEL, 4, "cpu", config, compile=True), actions)
    _assert_same_trajectory(eager, compiled)


def test_every_compiled_env_keeps_a_compiled_step(monkeypatch):
    """However many compiled envs a process builds (a tournament worker's pods, a backtest's groups
    and cost multiples), each steps through a compiled graph: torch.compile keeps at most
    ``recompile_limit`` graphs per code object and runs the function eagerly past that, and every
    env used to compile a partial of the one `step_kernel`. Envs of equal rules and sizes share one
    compiled kernel. (dynamo's eager backend, a limit of 2 and a fresh kernel cache keep it quick.)"""
    import torch._dynamo

    import market_envs.kernel as kernel_module

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, **_: compile_(function, backend="eager", dynamic=False))
    monkeypatch.setattr(kernel_module, "_KERNELS", {}, raising=False)
    envs = [
        StockTradingVecEnv(PANEL, num_envs, "cpu", EnvConfig(buy_cost=cost), compile=True)
        for num_envs, cost in ((2, 0.001), (3, 0.001), (2, 0.002), (3, 0.003), (2, 0.001))
    ]
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True):
        for env in envs:
            env.reset(seed=0)
            env.step(torch.zeros(env.num_envs, PANEL.num_tickers))  # the limit: FailOnRecompileLimitHit
    assert envs[4]._kernel is envs[0]._kernel and envs[1]._kernel is not envs[0]._kernel


@pytest.mark.parametrize(
    ("mode", "costs"),
    [
        pytest.param("shares", EVERY_COST, id="every-shares"),
        pytest.param("weights", EVERY_COST, id="every-weights"),
        # the other branches of the fused fill, one compilation each (slow: run with -m slow)
        pytest.param("shares", CostModel(commission_per_share=0.005), id="per-share", marks=pytest.mark.slow),
        pytest.param(
            "weights", CostModel(spread_bps=20.0, participation=0.05), id="spread-cap", marks=pytest.mark.slow
        ),
        pytest.param(
            "shares", CostModel(impact_eta=3.0, commission_min=2.0), id="impact-minimum", marks=pytest.mark.slow
        ),
    ],
)
def test_compiled_costly_step_equals_eager_to_accounting_precision_where_cash_binds(mode, costs, monkeypatch):
    """torch.compile runs its own arrangement of the torch kernel's costly fill (fewer row sums),
    which CUDA runs; it must keep every float64 entry of the eager step, which equals the reference
    env, to accounting precision. (On the CPU both would take the native kernel: turned off here.)"""
    monkeypatch.setattr(native_fill, "native_available", lambda: False)
    config = EnvConfig(
        action_mode=mode, episode_length=8, initial_cash=4_000.0, costs=costs, buy_cost=0.001, sell_cost=0.002
    )
    actions = random_actions(14, 6, PANEL.num_tickers, seed=21)
    envs = [StockTradingVecEnv(PANEL, 6, "cpu", config, compile=compiled) for compiled in (False, True)]
    assert not any(env.rules.fill.native for env in envs)
    for env in envs:
        env.reset(seed=21)
    scaled = False
    for a in actions:
        cash = envs[0].cash.clone()
        (_, _, _, _, eager), (_, _, _, _, compiled) = (env.step(a) for env in envs)
        for key in ("value", "cash", "holdings", "turnover", *COST_KEYS):
            torch.testing.assert_close(compiled[key], eager[key], rtol=1e-9, atol=1e-6, msg=key)
        scaled |= bool((eager["cash"] < 0.02 * cash).any())
    assert scaled  # the cash limit bound, so the scaled buys' costs were compared too


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["shares", "weights"])
@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
def test_cuda_equals_cpu(mode, costs):
    config = EnvConfig(
        action_mode=mode,
        episode_length=6,
        initial_cash=30_000.0,
        turbulence_threshold=6.0,
        turbulence_window=10,
        costs=costs,
    )
    actions = random_actions(12, 8, PANEL.num_tickers, seed=8)
    cpu = StockTradingVecEnv(PANEL, 8, "cpu", config)
    cuda = StockTradingVecEnv(PANEL, 8, "cuda", config)
    assert torch.equal(cpu.turbulence_guard, cuda.turbulence_guard.cpu())
    # the random starts come from per-device generators, so compare with fixed starts
    full = replace(config, random_start=False)
    left = _trajectory(StockTradingVecEnv(PANEL, 8, "cpu", full), actions)
    right = _trajectory(StockTradingVecEnv(PANEL, 8, "cuda", full), actions)
    _assert_same_trajectory(left, right)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "pace",
    [{"trade_rate": 0.3}, {"no_trade_band": 0.02}, {"no_trade_band": 0.05, "band_scope": "book"}],
    ids=["rate", "band", "book-band"],
)
@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
def test_cuda_equals_cpu_with_the_action_that_can_hold(pace, costs):
    """The linear aim, a trade rate or a no-trade band and the aim reward: the same on CUDA."""
    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        weights_map="linear",
        reward="aim",
        episode_length=6,
        initial_cash=30_000.0,
        random_start=False,
        costs=costs,
        **pace,
    )
    actions = random_actions(12, 8, PANEL.num_tickers, seed=9)
    left = _trajectory(StockTradingVecEnv(PANEL, 8, "cpu", config), actions)
    right = _trajectory(StockTradingVecEnv(PANEL, 8, "cuda", config), actions)
    _assert_same_trajectory(left, right)


# --------------------------------------------------------------------- return windows


def _tstat_reference(close: np.ndarray, window: int) -> np.ndarray:
    """Row t: sum(r) / sqrt(sum(r^2)) of the log returns of bars t-window+1 .. t, by a loop."""
    returns = np.zeros_like(close)
    returns[1:] = np.log(close[1:] / close[:-1])
    out = np.zeros_like(close)
    for t in range(window, len(close)):
        r = returns[t - window + 1 : t + 1]
        scale = np.sqrt((r * r).sum(axis=0))  # 0 over a flat (gap-filled) stretch: statistic 0
        out[t] = np.where(scale > 0, r.sum(axis=0) / np.where(scale > 0, scale, 1.0), 0.0)
    return out


def test_return_tstat_table_matches_a_loop_and_is_zero_before_a_full_window():
    close = PANEL.close.double().numpy()
    table = return_tstat_table(PANEL.close, (2, 7, 30), clip=100.0)
    assert table.shape == (PANEL.num_bars, PANEL.num_tickers, 3) and table.dtype == torch.float32
    for j, window in enumerate((2, 7, 30)):
        expected = _tstat_reference(close, window)
        np.testing.assert_allclose(table[:, :, j].numpy(), expected, rtol=1e-5, atol=1e-6)
        assert torch.all(table[:window, :, j] == 0)
        assert torch.all(table[window:, :, j].abs() <= math.sqrt(window) + 1e-4)  # Cauchy-Schwarz


def test_return_tstat_table_is_causal():
    k = 40
    changed = PANEL.close.clone()
    changed[k + 1 :] *= torch.exp(
        torch.randn(changed[k + 1 :].shape, generator=torch.Generator().manual_seed(3)) * 0.05
    )
    left = return_tstat_table(PANEL.close, (10,), clip=10.0)
    right = return_tstat_table(changed, (10,), clip=10.0)
    assert torch.equal(left[: k + 1], right[: k + 1])
    assert not torch.equal(left[k + 1 :], right[k + 1 :])


def test_return_tstat_table_ignores_a_later_return_in_a_quiet_window():
    """Whether a window has moved at all is judged by the sums up to its own bar: a large return
    later (here 20 bars on) leaves the statistic of a quiet but moving window as it was."""
    t, window = 40, 10
    log_close = torch.zeros(80, 1, dtype=torch.float64)
    log_close[1:, 0] = torch.cumsum(torch.full((79,), 1e-7, dtype=torch.float64), 0)  # a tiny, steady drift
    quiet = torch.exp(log_close).float() * 100.0
    shocked = quiet.clone()
    shocked[t + 20 :] *= 1e4
    left = return_tstat_table(quiet.double(), (window,), clip=10.0)
    right = return_tstat_table(shocked.double(), (window,), clip=10.0)
    assert left[t, 0, 0] != 0  # the drift moves the window: sqrt(10) when all returns agree
    assert torch.equal(left[: t + 20], right[: t + 20])


@pytest.mark.parametrize("k", [3, 10, 30, 50])
def test_a_cut_panel_observes_its_first_bars_as_the_whole_panel_does(k):
    """Known answer: a panel cut at bar k (its bars before k become `MarketData.lookback`) observes
    at its row 0 what the whole panel observes at row k: the price features' previous close, every
    return window w <= k, the turbulence guard; a window longer than k is 0 in both (the data holds
    no earlier bar)."""
    data = PANEL.with_normalization(*PANEL.fit_normalization())
    config = EnvConfig(return_windows=(2, 10, 30), turbulence_threshold=5.0, turbulence_window=10)
    whole = StockTradingVecEnv(data, 1, "cpu", config).tables
    cut = StockTradingVecEnv(data.take(slice(k, None)), 1, "cpu", config).tables
    assert torch.equal(cut.obs, whole.obs[k:]) and torch.equal(cut.guard, whole.guard[k:])
    n = data.num_tickers
    tstat = cut.obs[0, 1 + n :].view(n, -1)[:, -3:]
    for j, window in enumerate((2, 10, 30)):
        assert (tstat[:, j] != 0).any() if window <= k else (tstat[:, j] == 0).all(), window
    blind = StockTradingVecEnv(replace(data.take(slice(k, None)), lookback=None), 1, "cpu", config).tables
    assert (blind.obs[0, 1 + n :].view(n, -1)[:, -3:] == 0).all()  # what a period saw before: nothing


def test_a_bar_before_a_period_changes_its_first_observations_and_nothing_after_the_window():
    """The warm-up reads the bars before the period: scaling the close of bar k - 3 (the period
    starts at k) changes ret_tstat_10 in the period's rows 0 .. 7 (whose windows hold the two
    returns it enters) and nothing else: not the price features (their previous close is bar
    k - 1's), not a row from 8 on."""
    data = PANEL.with_normalization(*PANEL.fit_normalization())
    k, config = 40, EnvConfig(features=("close", "rsi_30"), return_windows=(10,))
    features = data.features.clone()
    features[k - 3, :, data.feature_names.index("close")] *= 1.05
    table = StockTradingVecEnv(data.take(slice(k, None)), 1, "cpu", config).tables.obs
    moved = StockTradingVecEnv(replace(data, features=features).take(slice(k, None)), 1, "cpu", config).tables.obs
    n = data.num_tickers
    tstat, moved_tstat = table[:, 1 + n :].view(-1, n, 3)[..., 2], moved[:, 1 + n :].view(-1, n, 3)[..., 2]
    assert (tstat[:8] != moved_tstat[:8]).all()
    assert torch.equal(tstat[8:], moved_tstat[8:]) and torch.equal(
        table[:, 1 + n :].view(-1, n, 3)[..., :2], moved[:, 1 + n :].view(-1, n, 3)[..., :2]
    )


def test_env_observes_return_windows_after_the_panel_features():
    config = EnvConfig(features=("close", "rsi_30"), return_windows=(5, 20), random_start=False)
    env = StockTradingVecEnv(PANEL, 2, "cpu", config)
    n = PANEL.num_tickers
    assert env.feature_names == ("close", "rsi_30", "ret_tstat_5", "ret_tstat_20")
    assert env.obs_dim == 1 + n * 5
    obs, _ = env.reset()
    for _ in range(25):
        obs, *_ = env.step(torch.zeros(2, n))
    per_stock = obs[0, 1 + n :].reshape(n, 4)
    table = return_tstat_table(PANEL.close, (5, 20), clip=config.feature_clip)
    assert torch.equal(per_stock[:, 2:], table[25])
    plain = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(features=("close", "rsi_30"), random_start=False))
    plain_obs, _ = plain.reset()
    for _ in range(25):
        plain_obs, *_ = plain.step(torch.zeros(2, n))
    assert torch.equal(per_stock[:, :2], plain_obs[0, 1 + n :].reshape(n, 2))


def test_return_windows_alone_make_an_observation():
    env = StockTradingVecEnv(PANEL, 1, "cpu", EnvConfig(features=(), return_windows=(10,)))
    assert env.feature_names == ("ret_tstat_10",) and env.obs_dim == 1 + 2 * PANEL.num_tickers


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"return_windows": (1,)}, "integers >= 2"),
        ({"return_windows": (5, 5)}, "twice"),
        ({"return_windows": 5}, "tuple of integers"),
        ({"return_windows": (2.5,)}, "integers >= 2"),
        ({"features": ()}, "nothing to observe"),
    ],
)
def test_bad_return_windows_raise_clear_errors(values, fragment):
    with pytest.raises(ConfigError, match=fragment):
        EnvConfig(**values)


def test_return_windows_from_a_list_become_a_tuple():
    assert EnvConfig(return_windows=[30, 5]).return_windows == (30, 5)


def test_a_panel_without_training_statistics_is_normalised_with_a_warning():
    """A period cut without `split`/`period` would be normalised with its own future: said loudly."""
    import warnings as _warnings

    from market_envs.data import synthetic

    data = synthetic(3, "2023-01-03", "2023-01-06", seed=0)
    assert data.feature_mean is None
    with pytest.warns(UserWarning, match="carries no training statistics"):
        StockTradingVecEnv(data, 1, torch.device("cpu"), EnvConfig())
    train, validation, _ = data.split("2023-01-04", "2023-01-05")
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")
        StockTradingVecEnv(validation, 1, torch.device("cpu"), EnvConfig())


def test_market_neutral_weights_demean_the_actions():
    """market_neutral: the same as feeding the demeaned actions; the book is dollar-neutral."""
    from market_envs.data import synthetic

    data = synthetic(5, "2023-01-03", "2023-01-05", seed=1)
    data = data.with_normalization(*data.fit_normalization())
    base = EnvConfig(action_mode="weights", short_selling=True, buy_cost=0.0, sell_cost=0.0, episode_length=20)
    neutral = StockTradingVecEnv(data, 3, torch.device("cpu"), replace(base, market_neutral=True))
    plain = StockTradingVecEnv(data, 3, torch.device("cpu"), base)
    neutral.reset(seed=4)
    plain.reset(seed=4)
    actions = torch.rand(3, 5, generator=torch.Generator().manual_seed(0)) * 2 - 1
    _, r1, _, _, info1 = neutral.step(actions)
    _, r2, _, _, info2 = plain.step(actions - actions.mean(-1, keepdim=True))
    torch.testing.assert_close(r1, r2)
    torch.testing.assert_close(
        info1["holdings"], info2["holdings"], rtol=1e-5, atol=1e-6
    )  # demeaned in the kernel vs outside
    price = data.open[info1["t"]].double()
    net = (info1["holdings"].double() * price).sum(-1)
    assert (net.abs() < 1e-6 * info1["value"].double()).all()
    with pytest.raises(Exception, match="market_neutral needs"):
        EnvConfig(action_mode="weights", market_neutral=True)


def test_a_block_of_rows_with_its_own_stream_runs_as_a_lone_env():
    """A pod group's env (issue 77): P pods' E rows each in one env, each block's random starts from its own
    stream. Block 1 of three is, bit for bit, a lone env of E rows with stream 1 alone, given the same actions,
    across many episode resets; the other blocks' actions and seeds do not reach it."""
    from market_envs.streams import RowStreams

    config, rows, steps = EnvConfig(episode_length=7), 4, 60
    group = StockTradingVecEnv(PANEL, 3 * rows, "cpu", config)
    group.use_row_streams(RowStreams([11, 12, 13]))
    alone = StockTradingVecEnv(PANEL, rows, "cpu", config)
    alone.use_row_streams(RowStreams([12]))
    group_obs, group_info = group.reset()
    alone_obs, alone_info = alone.reset()
    block = slice(rows, 2 * rows)
    assert torch.equal(group_obs[block], alone_obs) and torch.equal(group_info["t"][block], alone_info["t"])
    actions = random_actions(steps, 3 * rows, PANEL.num_tickers, seed=3)
    for step in range(steps):
        group_out = group.step(actions[step])
        alone_out = alone.step(actions[step][block])
        for together, apart in zip(group_out[:4], alone_out[:4], strict=True):
            assert torch.equal(together[block], apart)
        assert torch.equal(group_out[4]["t"][block], alone_out[4]["t"])
    assert len(set(group.episode_end.tolist())) > 3  # the blocks' episodes restarted at random bars
    with pytest.raises(UserError, match="row streams"):
        group.reset(seed=0)
    with pytest.raises(ConfigError, match="do not divide"):
        StockTradingVecEnv(PANEL, 5, "cpu", config).use_row_streams(RowStreams([1, 2]))
