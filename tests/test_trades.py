"""The trade list: every fill valued and charged by the step's own cost functions, so that
it sums to the report; `fill_costs` against the step's info, bar by bar."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs.costs import CostModel
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_fixtures import random_panel
from trader.backtesting import BacktestConfig, run_backtest
from trader.backtesting.config import Book

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
PANEL = random_panel(4, 300, seed=3)


def random_policy(seed: int, low: float = 0.0):
    generator = torch.Generator().manual_seed(seed)
    return lambda obs: torch.rand(obs.shape[0], PANEL.num_tickers, generator=generator) * (1 - low) + low


@pytest.mark.parametrize("mode, short", [("weights", False), ("weights", True), ("shares", False)])
def test_the_trade_list_sums_to_the_reports_traded_value_and_costs(mode: str, short: bool) -> None:
    rules = EnvConfig(action_mode=mode, short_selling=short)
    config = BacktestConfig(tear_sheet=False, policy_env=rules, costs=EVERY_COST, buy_cost=0.001, sell_cost=0.001)
    book = Book(400_000.0, (1000.0, 0.0, 500.0, 0.0), 0.0)
    policies = {"random": random_policy(0, low=-1.0 if short else 0.0), "from_book": random_policy(1)}
    result = run_backtest(
        PANEL,
        policies,
        baselines=["equal_weight", "equal_weight_daily"],
        config=config,
        initial_books={"from_book": replace(book, value=400_000.0)},
    )
    assert set(result.trades) == set(result.series)
    for name, trades in result.trades.items():
        costs = result.costs[name]
        assert len(trades) > 0, name
        assert trades["value"].sum() == pytest.approx(result.series[name]["traded_value"].sum(), rel=1e-9), name
        for part in ("commission", "spread", "impact"):
            assert trades[part].sum() == pytest.approx(costs[f"cost_{part}"], rel=1e-9, abs=1e-6), (name, part)
        assert (trades["shares"] > 0).all() and set(trades["side"]) <= {"buy", "sell"}
        np.testing.assert_allclose(trades["value"], trades["shares"] * trades["price"], rtol=1e-12)
    if short:  # the borrow fee is charged at the close, on a position: a cost, but not a fill's
        assert result.costs["random"]["cost_borrow"] > 0


def test_a_known_fill_at_the_flat_rate() -> None:
    """One purchase of whole shares at the next open: the list holds it at that open, with the
    commission the rate gives; the first fill of a book's strategy is measured from the book."""
    schedule = torch.zeros(PANEL.num_bars, PANEL.num_tickers)
    schedule[5, 2] = 0.1  # shares mode, max 100 shares: an order of 10 shares of T002 decided at bar 5
    from trader.backtesting import ActionSchedule

    config = BacktestConfig(tear_sheet=False, buy_cost=0.001, sell_cost=0.001)
    result = run_backtest(PANEL, {"once": ActionSchedule(schedule)}, baselines=[], config=config)
    (trade,) = result.trades["once"].itertuples(index=False)
    price = float(PANEL.open[6, 2])
    assert (trade.timestamp, trade.ticker, trade.side, trade.shares) == (PANEL.timestamps[6], "T002", "buy", 10.0)
    assert trade.price == pytest.approx(price, rel=1e-12) and trade.commission == pytest.approx(10 * price * 0.001)
    assert trade.spread == trade.impact == 0.0


@pytest.mark.parametrize("kernel", ["native", "torch"])
def test_fill_costs_sum_to_the_steps_info_every_bar(kernel: str, monkeypatch) -> None:
    if kernel == "torch":
        monkeypatch.setenv("MARKET_ENVS_NATIVE", "0")
    rules = EnvConfig(action_mode="weights", short_selling=True, random_start=False, costs=EVERY_COST)
    env = StockTradingVecEnv(PANEL, 6, "cpu", rules)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(2)
    for _ in range(120):
        before, value = env.holdings.clone(), env.value.clone()
        _, _, _, _, info = env.step(torch.rand((6, PANEL.num_tickers), generator=generator) * 2 - 1)
        parts = env.fill_costs(before, info["holdings"], info["t"])
        torch.testing.assert_close(parts["value"].sum(-1), info["turnover"] * value, rtol=1e-9, atol=1e-6)
        for part in ("commission", "spread", "impact"):
            torch.testing.assert_close(parts[part].sum(-1), info[f"cost_{part}"], rtol=1e-9, atol=1e-6)


def test_the_report_writes_each_strategys_trade_list(tmp_path) -> None:
    from trader import rundir

    config = BacktestConfig(tear_sheet=False)
    result = run_backtest(
        PANEL, {"random": random_policy(3)}, baselines=["equal_weight"], config=config, run_dir=tmp_path
    )
    for name in ("random", "equal_weight"):
        written = pd.read_parquet(tmp_path / rundir.TRADES_DIR / f"{name}.parquet")
        pd.testing.assert_frame_equal(written, result.trades[name])
    day = run_backtest(
        PANEL, {"random": random_policy(3)}, baselines=[], config=replace(config, record_positions="day")
    )
    assert day.trades == {}  # positions per session cannot tell the fills apart
