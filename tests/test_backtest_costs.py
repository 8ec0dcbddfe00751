"""Costs in the backtest: one cost model for every strategy, the breakdown per strategy,
the unfilled share, and the breakeven cost from backtests at several multiples run in one pass."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from golden.case import session_panel

from market_envs.costs import CostModel, NamedCosts, cost_model
from market_envs.config import EnvConfig
from trader import metrics
from trader.backtesting import ActionSchedule, BacktestConfig, run_backtest
from trader.backtesting.assembly import breakeven
from trader.backtesting.config import BREAKEVEN_MULTIPLES
from trader.backtesting.report import markdown_report, report_dict

QUIET = BacktestConfig(tear_sheet=False)
SHARES = EnvConfig(action_mode="shares", max_shares=100)


def _random_schedule(data, seed: int) -> ActionSchedule:
    generator = torch.Generator().manual_seed(seed)
    return ActionSchedule(torch.rand((data.num_bars, data.num_tickers), generator=generator) * 2 - 1)


def _peeking_schedule(data) -> ActionSchedule:
    """Buy (sell) 100 shares when the open after the fill is higher (lower) than the fill's:
    a schedule that knows the future, so its gross Sharpe ratio is large and known to be > 0."""
    open_ = data.open.double()
    up = torch.zeros_like(open_)
    up[:-2] = torch.sign(open_[2:] - open_[1:-1])
    return ActionSchedule(up.float())


# ------------------------------------------------------------------ one cost model for every strategy


def test_every_strategy_trades_under_the_backtests_cost_model() -> None:
    """Rules that carry their own cost terms (a checkpoint's, policy_env's) are overridden."""
    data = session_panel(n_tickers=2, n_days=4, bars_per_day=10, seed=21)
    schedule = _random_schedule(data, 0)
    plain = run_backtest(data, {"s": schedule}, baselines=["equal_weight"], config=replace(QUIET, policy_env=SHARES))
    retail_rules = cost_model("retail").apply(SHARES)
    own_terms = run_backtest(
        data, {"s": schedule}, baselines=["equal_weight"], config=replace(QUIET, policy_env=retail_rules)
    )
    np.testing.assert_array_equal(plain.series["s"]["value"], own_terms.series["s"]["value"])
    assert own_terms.costs["s"]["cost_spread"] == 0.0 and own_terms.cost_model["name"] == "flat"
    retail = replace(QUIET, policy_env=SHARES).with_costs(cost_model("retail"))
    charged = run_backtest(data, {"s": schedule}, baselines=["equal_weight", "benchmark"], config=retail)
    for name in ("s", "equal_weight"):
        # retail: a 2 bp half-spread, kept in float32 as the prices are (1.99999995 bp; `fill_inputs.market_tables`)
        assert charged.costs[name]["spread_bps"] == pytest.approx(float(np.float32(2e-4)) * 1e4, rel=1e-9)
    assert charged.costs["s"]["cost_impact"] > 0  # (equal-weight buys at bar 1, before any volatility is known)
    # the benchmark, a close-only series, pays the spread but no impact
    assert (
        charged.costs["benchmark"]["spread_bps"] == pytest.approx(2.0)
        and charged.costs["benchmark"]["cost_impact"] == 0
    )
    assert "close-only" in charged.strategies["benchmark"].source
    assert charged.cost_model["name"] == "retail" and charged.config["cost_model"] == "retail"
    assert charged.config["policy_env"]["costs"] == charged.cost_model["costs"]


def test_a_checkpoints_own_cost_terms_are_replaced(tmp_path: Path) -> None:
    from trader.agents import make_agent
    from trader.agents.checkpoint import save_checkpoint

    data = session_panel(n_tickers=2, n_days=4, bars_per_day=10, seed=22)
    obs_dim = 1 + 2 * (1 + len(data.feature_names))
    rules = cost_model("institutional").apply(EnvConfig(action_mode="weights"))  # weights: an untrained agent trades
    institutional = json.loads(json.dumps(_as_dict(rules)))
    save_checkpoint(make_agent("ppo", obs_dim, 2, seed=0), tmp_path / "ckpt", data_window={"env_config": institutional})
    result = run_backtest(data, {"p": tmp_path / "ckpt"}, baselines=[], config=QUIET)
    row = result.costs["p"]
    assert row["traded_value"] > 0 and row["unfilled_value"] == 0.0  # no participation cap: the flat model's rules
    assert row["cost_commission"] == pytest.approx(0.001 * row["traded_value"], rel=1e-9)
    assert row["cost_spread"] == row["cost_impact"] == row["cost_borrow"] == 0.0


def _as_dict(config: EnvConfig) -> dict:
    from trader.rundir import config_to_dict

    return config_to_dict(config)


# ------------------------------------------------------------------ the breakdown


def test_the_breakdown_adds_up_and_the_cap_leaves_a_known_share_unfilled() -> None:
    """Volume is 1000 a bar: a 1% cap fills 10 of every 100 shares bought, so 90% of each
    order's value stays unfilled."""
    data = session_panel(n_tickers=2, n_days=3, bars_per_day=10, seed=23)
    buys = ActionSchedule(torch.ones((data.num_bars, 2)))
    capped = NamedCosts("capped", 0.001, 0.001, CostModel(participation=0.01, spread_bps=1.0, borrow_rate=0.01))
    result = run_backtest(
        data, {"buys": buys}, baselines=[], config=replace(QUIET, policy_env=SHARES).with_costs(capped)
    )
    row = result.costs["buys"]
    assert row["unfilled_share"] == pytest.approx(0.9, rel=1e-9)
    assert row["unfilled_shares"] == pytest.approx(90 * 2 * (data.num_bars - 1))
    parts = sum(row[f"cost_{part}"] for part in ("commission", "spread", "impact", "borrow"))
    assert row["costs"] == pytest.approx(parts, rel=1e-12)
    assert row["costs"] == pytest.approx(result.series["buys"]["costs"].sum(), rel=1e-12)
    assert row["commission_bps"] == pytest.approx(10.0) and row["spread_bps"] == pytest.approx(1.0)
    assert row["cost_borrow"] == 0.0  # long only
    report = report_dict(result)
    assert report["costs"]["buys"]["unfilled_share"] == pytest.approx(0.9)
    assert report["cost_model"]["costs"]["participation"] == 0.01
    assert "| Buys" not in markdown_report(result) and "## Costs" in markdown_report(result)


# ------------------------------------------------------------------ breakeven


@pytest.mark.parametrize(
    ("sharpes", "status", "multiple", "text"),
    [
        ([2.0, 1.5, 1.0, -1.0, -3.0, -5.0], "crossed", 1.0 + 1.0 * 1.0 / 2.0, "1.50x"),
        ([1.0, 0.5, 0.0, -1.0, -2.0, -3.0], "crossed", 1.0, "1.00x"),
        ([3.0, 2.9, 2.8, 2.6, 2.2, 1.4], "above", None, "above 8x"),
        ([-0.1, -0.2, -0.3, -0.5, -0.9, -1.7], "below", None, "below 0 even at no cost"),
        ([float("nan")] * 6, "undefined", None, "n/a (no Sharpe ratio)"),
        ([1.0, float("nan"), 0.5, 0.25, -0.25, -1.0], "crossed", 3.0, "3.00x"),
    ],
)
def test_breakeven_interpolates_to_the_first_zero_crossing(sharpes, status, multiple, text) -> None:
    row = breakeven(BREAKEVEN_MULTIPLES, sharpes)
    assert row["status"] == status and row["text"] == text
    assert row["multiple"] == (None if multiple is None else pytest.approx(multiple))
    assert breakeven([1.0, 2.0], [-1.0, -2.0])["text"] == "below 0 even at 1x the costs"


def _hand_sharpe(value0: np.ndarray, costs1: np.ndarray, k: float, timestamps, initial: float) -> float:
    """The Sharpe ratio at k x the costs of a run whose fills do not depend on the costs:
    the value is the cost-free value less k x the cumulative costs at 1 x."""
    value = value0 - k * np.cumsum(costs1)
    previous = np.concatenate([[initial], value[:-1]])
    returns = value / previous - 1.0
    daily = metrics.daily_returns(returns, timestamps)
    return float(metrics.sharpe_ratio(daily))


def test_breakeven_of_a_schedule_whose_fills_do_not_depend_on_the_costs() -> None:
    """Shares mode, ample cash: every multiple fills the same shares, so the value at k x the
    costs is the cost-free value less k x the costs at 1 x, bar by bar. The Sharpe ratios of
    the batched pass equal that hand computation, are non-increasing in the multiple, and
    the breakeven is their interpolated zero crossing."""
    data = session_panel(n_tickers=2, n_days=10, bars_per_day=8, seed=24, benchmark=False)
    named = NamedCosts("test", 0.0004, 0.0004, CostModel(commission_per_share=0.002, spread_bps=1.5))
    config = replace(QUIET, policy_env=SHARES, cost_multiples=BREAKEVEN_MULTIPLES).with_costs(named)
    result = run_backtest(data, {"peek": _peeking_schedule(data)}, baselines=[], config=config)
    free = run_backtest(data, {"peek": _peeking_schedule(data)}, baselines=[], config=config.at_multiple(0.0))
    once = run_backtest(
        data, {"peek": _peeking_schedule(data)}, baselines=[], config=replace(config, cost_multiples=())
    )
    np.testing.assert_array_equal(free.positions["peek"].to_numpy(), once.positions["peek"].to_numpy())
    row = result.breakeven["peek"]
    assert row["multiples"] == list(BREAKEVEN_MULTIPLES)
    value0, costs1 = free.series["peek"]["value"].to_numpy(), once.series["peek"]["costs"].to_numpy()
    hand = [_hand_sharpe(value0, costs1, k, data.timestamps, 1e6) for k in BREAKEVEN_MULTIPLES]
    np.testing.assert_allclose(row["sharpe"], hand, rtol=1e-9)
    assert all(b <= a for a, b in zip(hand, hand[1:]))
    assert row["sharpe"][2] == pytest.approx(float(result.metrics.loc["peek", "sharpe_ratio"]), rel=1e-12)
    assert row["status"] == "crossed" and hand[0] > 0 > hand[-1]
    i = next(i for i, s in enumerate(hand) if s <= 0)
    a, b = BREAKEVEN_MULTIPLES[i - 1], BREAKEVEN_MULTIPLES[i]
    assert row["multiple"] == pytest.approx(a + (b - a) * hand[i - 1] / (hand[i - 1] - hand[i]), rel=1e-9)
    true_root = _bisect(lambda k: _hand_sharpe(value0, costs1, k, data.timestamps, 1e6), a, b)
    assert abs(row["multiple"] - true_root) < 0.25 * (b - a)  # the interpolation is near the true root


def _bisect(f, lo: float, hi: float) -> float:
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def test_the_batched_pass_equals_one_backtest_per_multiple() -> None:
    """Every strategy, the stateful baselines and the benchmark included, at 2 x the costs in
    the batched pass, equals a backtest run alone at 2 x the costs."""
    data = session_panel(n_tickers=3, n_days=4, bars_per_day=10, seed=25)
    retail = replace(QUIET, policy_env=SHARES, cost_multiples=(0.0, 2.0)).with_costs(cost_model("retail"))
    policies = {"r": _random_schedule(data, 1)}
    batched = run_backtest(data, policies, config=retail)
    for k in (0.0, 2.0):
        alone = run_backtest(data, policies, config=retail.at_multiple(k))
        for name, row in batched.breakeven.items():
            got = row["sharpe"][row["multiples"].index(k)]
            expected = float(alone.metrics.loc[name, "sharpe_ratio"])
            assert (got is None and math.isnan(expected)) or got == pytest.approx(expected, rel=1e-12), (name, k)
    assert set(batched.breakeven) == set(batched.strategies)
    assert batched.config["cost_multiples"] == [0.0, 2.0]


def test_no_breakeven_under_a_model_that_charges_nothing() -> None:
    data = session_panel(n_tickers=2, n_days=3, bars_per_day=10, seed=26)
    free = replace(QUIET, cost_multiples=BREAKEVEN_MULTIPLES).with_costs(cost_model("zero"))
    result = run_backtest(data, baselines=["equal_weight"], config=free)
    assert result.breakeven == {} and result.costs["equal_weight"]["costs"] == 0.0
    assert report_dict(result)["breakeven"] == {}


# ------------------------------------------------------------------ the baselines under a participation cap


def test_buy_and_hold_tops_up_what_the_cap_left_unfilled_until_it_holds_its_target() -> None:
    """A cap of one bar's volume (1000 shares) fills the one-time target over several bars: the
    holdings grow by min(cap, what is missing) each bar up to the target that the same strategy
    holds without a cap, and from then on it never trades (nor ever sells)."""
    data = session_panel(n_tickers=3, n_days=3, bars_per_day=20, seed=34)  # no open dearer than the cash allows
    cap = 1000.0
    assert (data.volume == cap).all()  # the panel's volume: 1000 shares a bar
    capped = run_backtest(data, baselines=["equal_weight"], config=replace(QUIET, costs=CostModel(participation=1.0)))
    free = run_backtest(data, baselines=["equal_weight"], config=QUIET)
    target = np.floor(1e6 / 3 / (data.close[0].double().numpy() * 1.001))
    np.testing.assert_array_equal(free.positions["equal_weight"].to_numpy()[-1], target)
    held = capped.positions["equal_weight"].to_numpy()
    np.testing.assert_array_equal(held[-1], target)
    bought = np.diff(held, axis=0)
    np.testing.assert_array_equal(bought, np.minimum(cap, target - held[:-1]))  # never sells, fills all it may
    traded = np.flatnonzero(capped.series["equal_weight"]["traded_value"].to_numpy() > 0)
    last = int(np.ceil(target.max() / cap))  # the bar its last share fills
    assert last >= 3 and list(traded) == list(range(1, last + 1))  # several bars, then never again
    assert capped.costs["equal_weight"]["unfilled_value"] > 0


def test_the_cash_rule_strategies_size_with_is_the_steps_own() -> None:
    """`StockTradingVecEnv.buys_within_cash` at the fill's price gives the purchases a step fills
    (retail: a commission minimum and a fee per share, half-spread, impact), including the ones it cuts."""
    from market_envs.env import StockTradingVecEnv

    data = session_panel(n_tickers=3, n_days=3, bars_per_day=20, seed=32)
    rules = cost_model("retail").apply(replace(SHARES, max_shares=10_000, random_start=False, episode_length=None))
    env = StockTradingVecEnv(data, num_envs=4, config=rules)
    env.reset()
    for t in range(25):  # into the second session: the impact and spread tables are on
        env.step(torch.zeros((4, 3)))
    orders = torch.tensor([[10.0, 0.0, 3.0], [4000.0, 900.0, 2500.0], [1.0, 1.0, 1.0], [9000.0, 9000.0, 9000.0]])
    cash = env.cash.clone()
    wanted = env.buys_within_cash(orders, cash, data.open[t + 2].double(), t + 1)
    assert (wanted[:3] == orders[:3]).all() and (wanted[3] < orders[3]).all()  # the last is more than the cash
    env.step((orders + 0.5) / 10_000)
    np.testing.assert_array_equal(env.holdings.numpy(), wanted.numpy())


def test_buy_and_hold_sends_no_order_its_cash_cannot_pay() -> None:
    """Cash for one share at the first close but not for its commission minimum (retail: USD 1):
    the target is no share, so no order is sent, bar after bar (before, the share was ordered at
    every bar, and the env cut it whenever the price had not fallen)."""
    data = session_panel(n_tickers=1, n_days=3, bars_per_day=20, seed=33)
    config = replace(QUIET, initial_cash=float(data.close[0]) + 0.5).with_costs(cost_model("retail"))
    result = run_backtest(data, baselines=["equal_weight"], config=config)
    assert result.costs["equal_weight"]["ordered_value"] == 0.0 and result.costs["equal_weight"]["costs"] == 0.0
