"""`trader act` / `trader.act`: a run's decision from a book equals what its backtest traded.

The runs are real: tiny PPO runs trained by `trader.train` in weights mode (so they
trade every bar), one at the flat rate and one with every cost term on, each
backtested over its test period with positions recorded per bar.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import trader
from market_envs.costs import CostModel
from market_envs.config import EnvConfig
from trader.backtesting.config import Book
from trader.backtesting.runs import backtest_config, backtest_run, read_run
from podracer.cli import main as cli
from trader.errors import UserError

from market_fixtures import write_tiny_recipe

TINY_PPO = {"num_steps": 32, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [16]}
COSTLY = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    spread_model="high_low",
    spread_window=20,
    impact_eta=1.0,
    impact_window_days=1,
    participation=0.05,
)


@pytest.fixture(scope="module", params=["flat", "costly"])
def backtested(request, tmp_path_factory) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """(run_dir, the best checkpoint's series, its positions per bar) of a test-period backtest."""
    root = tmp_path_factory.mktemp(f"act-{request.param}")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = write_tiny_recipe(root, interval="5min")  # the backtest is bar by bar: 156 test bars
    costs = COSTLY if request.param == "costly" else CostModel()
    # ret_tstat windows: the test period's first bars read the bars before it (`MarketData.lookback`)
    rules = EnvConfig(action_mode="weights", buy_cost=0.0005, sell_cost=0.0005, costs=costs, return_windows=(5, 20))
    run_dir = root / "run"
    trader.training.train("ppo", str(recipe), TINY_PPO, run_dir, env_config=rules, steps=512, num_envs=8, eval_every=0)
    config = backtest_config(read_run(run_dir), tear_sheet=False)
    result = backtest_run(run_dir, strategies=["best"], baselines=[], config=config)
    return run_dir, result.series["best"], result.positions["best"]


def book_at(series: pd.DataFrame, positions: pd.DataFrame, t: int) -> Book:
    return Book(
        float(series["cash"].iloc[t]), tuple(float(h) for h in positions.iloc[t]), float(series["value"].iloc[t])
    )


def test_a_past_bar_decides_what_the_backtest_traded_to_the_cent(backtested) -> None:
    run_dir, series, positions = backtested
    last = len(series) - 2  # the backtest's last decision: it fills at the last bar's open
    traded = np.flatnonzero((positions.diff().abs().sum(axis=1) > 0).to_numpy()) - 1
    paid = 0.0
    for t in sorted({0, last, *traded[traded > 0][-3:]}):  # the period's first bar: its warmed-up features
        decision = trader.act(run_dir, at=series.index[t], book=book_at(series, positions, t))
        paid += decision.costs["spread"] + decision.costs["impact"]
        assert decision.bar == series.index[t] and decision.fills_at == series.index[t + 1] and not decision.estimated
        np.testing.assert_array_equal(decision.shares.to_numpy(), positions.iloc[t + 1].to_numpy())
        np.testing.assert_array_equal(
            decision.orders.to_numpy(), (positions.iloc[t + 1] - positions.iloc[t]).to_numpy()
        )
        assert decision.cash_after == pytest.approx(
            float(series["cash"].iloc[t + 1]), abs=0.005
        )  # long only: no borrow fee
        assert sum(decision.costs.values()) == pytest.approx(float(series["costs"].iloc[t + 1]), abs=0.005)
    assert len(traded) > 0  # the policy traded, so the orders compared above are not all zero
    assert (paid > 0) == ("costly" in run_dir.parent.name)  # the costly run's spread and impact were compared too


def test_the_latest_bar_is_an_estimate_at_its_close_that_keeps_the_books_value(backtested) -> None:
    run_dir, series, positions = backtested
    t = len(series) - 1
    book = book_at(series, positions, t)
    decision = trader.act(run_dir, book=book)
    assert decision.estimated and decision.fills_at is None and decision.bar == series.index[t]
    assert not any(decision.costs.values())
    held_value = book.cash + float((decision.held * decision.price).sum())
    after_value = decision.cash_after + float((decision.shares * decision.price).sum())
    assert after_value == pytest.approx(held_value, rel=1e-12)  # orders at the close move value, not create it
    assert (decision.weights >= 0).all() and decision.weights.sum() <= 1 + 1e-9  # long-only weights mode
    np.testing.assert_allclose(decision.weights, decision.shares * decision.price / after_value)


def test_a_book_file_and_the_cli_give_the_same_decision(backtested, tmp_path: Path, capsys) -> None:
    run_dir, series, positions = backtested
    t = len(series) - 2
    book = book_at(series, positions, t)
    path = tmp_path / "book.json"
    path.write_text(json.dumps({"cash": book.cash, "holdings": dict(zip(positions.columns, book.holdings))}))
    assert cli(["act", str(run_dir), "--at", str(series.index[t]), "--book", str(path), "--output", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    direct = trader.act(run_dir, at=series.index[t], book=book).to_dict()
    assert printed == json.loads(json.dumps(direct))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--strategy", "nope"], "--strategy nope"),
        (["--at", "1999-01-01"], "before the period's first bar"),
        (["--at", "not a time"], "--at"),
        (["--output", "xml"], "--output"),
    ],
)
def test_bad_input_exits_2_with_one_line(backtested, args, words, capsys) -> None:
    run_dir, _, _ = backtested
    assert cli(["act", str(run_dir), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_a_bad_book_or_a_missing_run_exits_2_with_one_line(backtested, tmp_path: Path, capsys) -> None:
    run_dir, _, positions = backtested
    assert cli(["act", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    for content in ('{"cash": 1, "holdings": {"ZZZZ": 3}}', "not json", '{"holdings": {}}'):
        path = tmp_path / "book.json"
        path.write_text(content)
        assert cli(["act", str(run_dir), "--book", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--book" in err


def test_a_book_worth_nothing_or_less_is_refused_by_the_api_and_the_cli(backtested, tmp_path: Path, capsys) -> None:
    """Target weights are fractions of the book's value: on a book worth <= 0 they would turn
    into orders of the opposite sign, so the book is refused (exit 2, one line), at a past bar
    and at the latest one."""
    run_dir, series, positions = backtested
    ticker = positions.columns[0]
    price = float(trader.act(run_dir, at=series.index[-2]).price[ticker])  # the fill price: about the close
    for cash, holdings in ((0.0, {}), (-5_000.0, {}), (-30.0 * price, {ticker: 10.0})):
        book = {"cash": cash, "holdings": holdings}
        for at in (series.index[-2], None):
            with pytest.raises(UserError, match="--book is worth .* must be worth more than 0"):
                trader.act(run_dir, at=at, book=book)
        path = tmp_path / "book.json"
        path.write_text(json.dumps(book))
        assert cli(["act", str(run_dir), "--book", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("--book is worth -" in err or "--book is worth 0.00" in err), err


def test_the_env_resets_at_a_chosen_bar_and_refuses_one_outside_the_data() -> None:
    import torch

    from market_envs.env import StockTradingVecEnv
    from market_envs.errors import UserError
    from market_fixtures import random_panel

    panel = random_panel(3, 50, seed=1)
    env = StockTradingVecEnv(panel, num_envs=4, config=EnvConfig(random_start=True, episode_length=10))
    _, info = env.reset(seed=0, options={"start": 7})
    assert info["t"].tolist() == [7] * 4 and env.episode_end.tolist() == [17] * 4
    book = {"cash": torch.full((4,), 5.0), "holdings": torch.ones(4, 3), "start": 45}
    _, info = env.reset(options=book)
    assert info["t"].tolist() == [45] * 4 and env.episode_end.tolist() == [49] * 4  # clamped at the last bar
    assert torch.equal(env.holdings, torch.ones(4, 3, dtype=torch.float64))
    for bad in (50, -1, 2.5, True):
        with pytest.raises(UserError, match="options\\['start'\\]"):
            env.reset(options={"start": bad})
