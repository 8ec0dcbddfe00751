"""`trader paper --broker alpaca` against a local server that speaks Alpaca's trading and data APIs.

alpaca-py's `TradingClient` and `StockHistoricalDataClient` run unchanged, pointed at
`broker_server.BrokerServer` on loopback with ``--broker-url`` and ``--data-url``. The
run is real: a tiny PPO run trained on the server's own minute bars (an alpaca recipe),
traded on the days after them, which hold Thanksgiving (closed), the early close of the
day after (13:00) and a weekend. The server's clock moves only when the loop reads it,
so the tests do not depend on the machine's speed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import trader
from market_envs.config import EnvConfig
from trader import rundir
from podracer.cli import main as cli
from podracer.paper import PaperConfig, RiskLimits, paper

from broker_server import BENCHMARK, HISTORY, TICKERS, TRAIN_END, VAL_END, BrokerServer, served_market, sessions_by_hand
from vendor_server import KEY_ID, NY, SECRET, one_error_line

ROOT = Path(__file__).resolve().parents[1]
TINY_PPO = {"num_steps": 32, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [16]}
CALENDAR = sessions_by_hand("2020-11-23", "2020-12-02")  # the exchange's sessions, by hand


@pytest.fixture(scope="module")
def market() -> dict[str, pd.DataFrame]:
    return served_market()


@pytest.fixture(scope="module")
def trained(market, tmp_path_factory) -> Path:
    """A weights-mode PPO run on the server's history (its data set cached for every test)."""
    root = tmp_path_factory.mktemp("paper-alpaca")
    saved = {k: os.environ.get(k) for k in ("PODRACER_DATA_DIR", "APCA_API_KEY_ID", "APCA_API_SECRET_KEY")}
    os.environ.update(
        {"PODRACER_DATA_DIR": str(root / "data"), "APCA_API_KEY_ID": KEY_ID, "APCA_API_SECRET_KEY": SECRET}
    )
    server = BrokerServer(market, "2020-11-23 09:30")
    try:
        with server.running():
            recipe = root / "alpaca-paper.toml"
            recipe.write_text(
                f'source = "alpaca"\ninterval = "1min"\nstart = "{HISTORY[0]}"\nend = "{HISTORY[1]}"\n'
                f'train_end = "{TRAIN_END}"\nval_end = "{VAL_END}"\nbenchmark = "{BENCHMARK}"\n'
                f'tickers = {list(TICKERS)!r}\n\n[alpaca]\nurl = "{server.url}"\nbackoff_s = 0.01\n'.replace("'", '"')
            )
            rules = EnvConfig(action_mode="weights", buy_cost=0.0005, sell_cost=0.0005)
            trader.training.train(
                "ppo", str(recipe), TINY_PPO, root / "run", env_config=rules, steps=512, num_envs=8, eval_every=0
            )
        yield root / "run"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def run(trained, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PODRACER_DATA_DIR", str(trained.parent / "data"))
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def settings(server: BrokerServer, **changes) -> PaperConfig:
    values = dict(
        broker="alpaca",
        broker_url=server.url,
        data_url=server.url,
        poll_s=0.0,
        fill_timeout_s=10.0,
        send_window_s=40.0,
        backoff_s=0.01,
    )
    return PaperConfig(**{**values, **changes})


def options(server: BrokerServer, *more: str) -> list[str]:
    return [
        "--broker",
        "alpaca",
        "--broker-url",
        server.url,
        "--data-url",
        server.url,
        "--poll",
        "0",
        "--fill-timeout",
        "10",
        "--send-window",
        "40",
        "--backoff",
        "0.01",
        *more,
    ]


def in_calendar_session(stamp: str) -> bool:
    when = pd.Timestamp(stamp).tz_convert(NY)
    day = CALENDAR.get(f"{when:%Y-%m-%d}")
    return day is not None and day[0] <= when < day[1]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.slow
def test_30_bars_reconcile_exactly_with_the_servers_account(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:45", cash=100_000.0)
    with server.running():
        result = paper(run, settings(server, max_bars=30))
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    assert result.bars == 30 and len(journal) == 30 and all(r["stop"] is None for r in journal)
    # the journal's book is the server's, share for share and to the cent
    last = journal[-1]["after"]
    assert dict(zip(TICKERS, last["positions"])) == {t: server.positions.get(t, 0.0) for t in TICKERS}
    assert last["cash"] == server.cash
    # and the fills it journaled add up to the server's account, from the starting cash
    fills = [o for r in journal for o in r["orders"] if o["filled_qty"] > 0]
    for ticker in TICKERS:
        bought = sum((1 if o["side"] == "buy" else -1) * o["filled_qty"] for o in fills if o["ticker"] == ticker)
        assert bought == pytest.approx(server.positions.get(ticker, 0.0), abs=1e-9)
    spent = sum((1 if o["side"] == "buy" else -1) * o["filled_qty"] * o["filled_avg_price"] for o in fills)
    assert 100_000.0 - spent == pytest.approx(server.cash, abs=1e-6)
    assert len(server.orders) == len(fills) > 0
    # one decision a bar, filled at the next bar's open of the exchange calendar: Thanksgiving skipped
    fills_at = [r["fills_at"] for r in journal]
    assert fills_at[14:16] == ["2020-11-25 15:59:00-05:00", "2020-11-27 09:30:00-05:00"]
    for order in server.orders.values():  # sent at the open the backtest fills at, in a session of the calendar
        assert in_calendar_session(order["submitted_at"])
    for record in journal:
        for o in record["orders"]:
            sent = pd.Timestamp(o["submitted_at"])
            assert pd.Timestamp(record["fills_at"]) <= sent < pd.Timestamp(record["fills_at"]) + pd.Timedelta(minutes=1)
    assert all(abs(bp) < 1e-6 for r in journal for bp in r["slippage_bp"].values())  # the server fills at the open


def test_no_order_goes_out_on_a_holiday_the_broker_calls_open_nor_after_the_early_close(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:57", extra_sessions=("2020-11-26",))  # a clock gone wrong
    server.fast_days = {"2020-11-26"}
    with server.running():
        paper(run, settings(server, max_bars=4))
        assert not any(o["submitted_at"].startswith("2020-11-26") for o in server.orders.values())
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    assert [r["fills_at"][:16] for r in journal][-2:] == ["2020-11-25 15:59", "2020-11-27 09:30"]
    server = BrokerServer(market, "2020-11-27 12:58")  # the early close, then the weekend
    shutil.rmtree(run / "paper")
    with server.running():
        paper(run, settings(server, max_bars=3))
    fills_at = [r["fills_at"][:16] for r in rundir.read_json_lines(run / rundir.PAPER_JOURNAL)]
    assert fills_at == ["2020-11-27 12:58", "2020-11-27 12:59", "2020-11-30 09:30"]
    assert all(in_calendar_session(o["submitted_at"]) for o in server.orders.values())


def test_a_partial_fill_is_cancelled_and_reconciled(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:40")
    server.partial = {"AAA": 0.5}
    with server.running():
        paper(run, settings(server, max_bars=3))
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    partly = [o for r in journal for o in r["orders"] if o["ticker"] == "AAA"]
    assert partly and all(o["status"] == "canceled" and o["filled_qty"] == pytest.approx(o["qty"] / 2) for o in partly)
    assert all(server.orders[o["broker_id"]]["status"] == "canceled" for o in partly)
    assert all(r["stop"] is None for r in journal)  # the half that filled is what the book holds
    assert journal[-1]["after"]["positions"][0] == server.positions.get("AAA", 0.0)


def test_rejections_rate_limits_server_errors_and_a_lost_answer_are_survived(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:40")
    server.reject = {"BBB": (403, "insufficient buying power")}
    server.throttle, server.fail_next, server.fail_after_accept = 2, 2, 1
    with server.running():
        result = paper(run, settings(server, max_bars=3))
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    assert result.bars == 3 and all(r["stop"] is None for r in journal)
    rejected = [o for r in journal for o in r["orders"] if o["ticker"] == "BBB"]
    assert rejected and all(o["status"] == "rejected" and "insufficient buying power" in o["message"] for o in rejected)
    taken = [o for r in journal for o in r["orders"] if o["ticker"] == "AAA"]
    assert taken and all(o["status"] == "filled" for o in taken)
    assert len(server.orders) == len(taken)  # the order whose answer was lost was adopted, not sent again
    assert server.posts.count(taken[0]["client_order_id"]) == 2  # its retry met Alpaca's 422 on the id


def test_a_loop_killed_in_the_middle_of_a_bar_sends_no_order_twice_when_restarted(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:30")
    server.hold_order = 3  # the third order is taken, and its answer held while the loop is killed
    env = {**os.environ, "PYTHONPATH": f"{ROOT}", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-c",
        "from podracer.cli import entry_point; entry_point()",
        "paper",
        str(run),
        *options(server, "--max-bars", "20"),
    ]
    with server.running():
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert server.order_held.wait(timeout=180), process.communicate(timeout=5)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        assert (run / rundir.PAPER_PENDING).exists()  # the bar in hand was going out
        server.hold_order = None
        server.release.set()
        paper(run, settings(server, max_bars=4))
    assert len(server.posts) == len(set(server.posts))  # no client id was sent twice
    decided = [(o["client_order_id"].split("-")[2], o["symbol"]) for o in server.orders.values()]
    assert len(decided) == len(set(decided))  # one order per bar and ticker
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    ids = [o["client_order_id"] for r in journal for o in r["orders"] if o["status"] != "skipped"]
    assert sorted(ids) == sorted(o["client_order_id"] for o in server.orders.values())
    assert all(r["stop"] is None for r in journal) and not (run / rundir.PAPER_PENDING).exists()


def test_the_kill_switch_flattens_the_account_and_stops(market, run, capsys) -> None:
    server = BrokerServer(market, "2020-11-25 15:40")
    server.slippage_bp = 100.0  # every fill 1% worse than the open: the book loses on its first trade
    with server.running():
        code = cli(["paper", str(run), *options(server, "--max-drawdown", "0.000001", "--max-bars", "25")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("stopped: the drawdown reached") and err.count("\n") == 1 and "flattened" in err
    assert server.positions == {}
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    last = journal[-1]
    assert last["kind"] == "flatten" and all(q == 0 for q in last["after"]["positions"]) and journal[-2]["risk"]["kill"]
    slippage = [bp for r in journal for bp in r["slippage_bp"].values()]
    assert slippage and all(bp == pytest.approx(100.0, abs=1e-6) for bp in slippage)  # measured against the open


def test_a_dry_run_sends_nothing_and_fills_by_the_backtests_rules(market, run) -> None:
    server = BrokerServer(market, "2020-11-25 15:40")
    with server.running():
        paper(run, settings(server, max_bars=5, dry_run=True))
    assert server.posts == [] and server.positions == {} and server.cash == 100_000.0
    journal = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    assert len(journal) == 5 and any(o["filled_qty"] > 0 for r in journal for o in r["orders"])
    for r in journal:  # the simulated book is the env's fill of each decision
        assert r["after"]["positions"] == r["expected"]["positions"]


@pytest.mark.parametrize("case", ["keys", "live account", "universe", "live url"])
def test_refusals_are_one_line_exit_2_before_anything_is_written(market, run, case, monkeypatch, capsys) -> None:
    served = dict(market)
    account = "PA3XKTEST01"
    if case == "keys":
        monkeypatch.setenv("APCA_API_SECRET_KEY", "wrong")
    elif case == "live account":
        account = "312345678"
    elif case == "universe":
        served.pop("BBB")
    server = BrokerServer(served, "2020-11-25 15:40", account_number=account)
    before = snapshot(run)
    args = options(server)
    if case == "live url":
        args = ["--broker", "alpaca", "--broker-url", "https://api.alpaca.markets/"]
    with server.running():
        assert cli(["paper", str(run), *args]) == 2
    line = one_error_line(capsys.readouterr().err)
    expected = {
        "keys": "alpaca refused the keys",
        "live account": "is not an Alpaca paper account",
        "universe": "ticker(s) ['BBB']",
        "live url": "live endpoint",
    }[case]
    assert expected in line and SECRET not in line
    assert snapshot(run) == before and not (run / "paper").exists()
    assert server.posts == []
