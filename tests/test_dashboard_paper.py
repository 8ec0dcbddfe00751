"""The dashboard's paper trading page and its figures, on a run replayed by `trader paper`.

The run is real: a tiny `trader.train` run, replayed over part of its test period with
an order-value limit that cuts its first orders, then over more of it with a drawdown
kill switch that flattens the book and stops the loop."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import trader
from dashboards import paper as views
from dashboards import runs
from market_envs.config import EnvConfig
from trader import rundir
from podracer.paper import PaperConfig, RiskLimits, paper
from podracer.paper.loop import PaperStop

from market_fixtures import write_tiny_recipe
from test_dashboard import assert_titles_clear_of_the_toolbar

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
TINY_PPO = {"num_steps": 32, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [16]}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dashboard-paper")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = write_tiny_recipe(root)
    rules = EnvConfig(action_mode="weights", buy_cost=0.0005, sell_cost=0.0005)
    run_dir = root / "runs" / "ppo"
    trader.training.train("ppo", str(recipe), TINY_PPO, run_dir, env_config=rules, steps=512, num_envs=8, eval_every=0)
    limits = RiskLimits(max_order_value=5_000.0, max_drawdown=0.0002)
    try:
        paper(run_dir, PaperConfig(limits=limits, period="2023-01-11 09:30 : 2023-01-11 11:00"))
    except PaperStop:
        pass  # the kill switch: the page shows why the loop stopped
    return root / "runs"


def journal_of(runs_dir: Path) -> dict:
    return runs.load_paper(runs_dir / "ppo")


def test_the_equity_frame_is_the_journals_values_and_the_backtests_expectation(replayed: Path) -> None:
    records = journal_of(replayed)["records"]
    frame = views.equity_frame(records)
    assert len(frame) == len(records) + 1 and frame["paper"].iloc[0] == records[0]["before"]["value"]
    np.testing.assert_array_equal(frame["paper"].to_numpy()[1:], [r["after"]["value"] for r in records])
    growth = np.cumprod([r["expected"]["value"] / r["before"]["value"] for r in records])
    np.testing.assert_allclose(frame["backtest"].to_numpy()[1:], records[0]["before"]["value"] * growth, rtol=1e-12)
    # a replay fills as the backtest does: where no limit cut the orders, the expectation is its own record
    uncut = [r for r in records if not r["cuts"]]
    cut = [r for r in records if r["cuts"]]
    assert uncut and cut  # the order-value limit cut the first orders
    assert all(abs(r["expected"]["value"] - r["after"]["value"]) < 0.005 for r in uncut if r["kind"] == "bar")
    assert views.summary(records)["tracking"] == pytest.approx(frame["paper"].iloc[-1] / frame["backtest"].iloc[-1] - 1)


def test_the_orders_table_and_the_risk_table_say_what_the_journal_says(replayed: Path) -> None:
    journal = journal_of(replayed)
    records, session = journal["records"], journal["session"]
    orders = views.orders_frame(records, session["tickers"])
    assert len(orders) == sum(len(r["orders"]) for r in records)
    assert (orders["fill price"].dropna() == orders.loc[orders["fill price"].notna(), "backtest price"]).all()
    table = views.risk_frame(records, session["config"]["limits"])
    assert table.loc["largest order value", "setting"] == 5_000.0
    assert table.loc["largest order value", "worst reached"] == pytest.approx(5_000.0)  # the first orders were cut
    assert table.loc["drawdown", "share of the limit"] >= 1.0  # the kill switch fired
    assert pd.isna(table.loc["day's loss", "setting"])
    assert views.summary(records)["stop"] and "flattened" in views.summary(records)["stop"]


def test_the_paper_trading_page_renders_a_replayed_run(replayed: Path) -> None:
    from streamlit.testing.v1 import AppTest

    os.environ["PODRACER_RUNS_DIR"] = str(replayed)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/paper.py").run()
    assert not at.exception, at.exception
    journal = journal_of(replayed)
    assert at.title[0].value == "Paper trading"
    assert len(at.get("plotly_chart")) == 3
    assert_titles_clear_of_the_toolbar(at, "paper")
    orders = next(d.value for d in at.dataframe if "client order id" in d.value.columns)
    assert len(orders) == sum(len(r["orders"]) for r in journal["records"])
    assert any("The loop stopped" in w.value and "kill switch" in w.value for w in at.warning)
    assert [m.label for m in at.metric] == ["Value", "Backtest's expectation", "Tracking difference"]


def test_the_page_says_when_no_run_was_paper_traded(tmp_path: Path) -> None:
    from streamlit.testing.v1 import AppTest

    os.environ["PODRACER_RUNS_DIR"] = str(tmp_path)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/paper.py").run()
    assert not at.exception and any("No paper trading in" in i.value for i in at.info)


def test_every_file_of_the_replayed_run_is_documented(replayed: Path) -> None:
    from test_rundir import assert_every_file_is_documented

    assert_every_file_is_documented(replayed / "ppo")
