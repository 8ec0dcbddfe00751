"""`trader paper --broker replay`: the live loop over history ends with the backtest's record.

The runs are real: tiny PPO runs trained by `trader.train` in weights mode (they trade
every bar), one at a flat rate and one with every cost term on (a fee per share with
a minimum, the high-low half-spread, square-root impact and a 5% participation cap that
leaves orders unfilled). Each is backtested over its test period, then replayed by
`trader paper` through the same loop a paper account runs (clock, feed, decision from
the broker's book, orders, fills, reconciliation, journal), and the two records are
compared bar for bar.
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
from market_envs.costs import CostModel
from market_envs.config import EnvConfig
from trader import rundir
from trader.backtesting.runs import backtest_config, backtest_run, read_run
from podracer.cli import main as cli
from podracer.paper import PaperConfig, RiskLimits, paper
from podracer.paper.loop import PaperStop

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
ROOT = Path(__file__).resolve().parents[1]


def train_run(root: Path, costs: CostModel = CostModel()) -> Path:
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = write_tiny_recipe(root, interval="5min")  # 156 bars in the test period: the replay is bar by bar
    rules = EnvConfig(action_mode="weights", buy_cost=0.0005, sell_cost=0.0005, costs=costs)
    run_dir = root / "run"
    trader.training.train("ppo", str(recipe), TINY_PPO, run_dir, env_config=rules, steps=512, num_envs=8, eval_every=0)
    return run_dir


@pytest.fixture(scope="module", params=["flat", "costly"])
def replayed(request, tmp_path_factory) -> tuple[Path, pd.DataFrame, pd.DataFrame, list[dict]]:
    """(run_dir, the backtest's series and positions of the selected strategy, the replay's journal);
    the replay is stopped after 40 bars and restarted, to run from its journal."""
    root = tmp_path_factory.mktemp(f"paper-{request.param}")
    run_dir = train_run(root, COSTLY if request.param == "costly" else CostModel())
    config = backtest_config(read_run(run_dir), tear_sheet=False)
    result = backtest_run(run_dir, strategies=["best"], baselines=[], config=config)
    first = paper(run_dir, PaperConfig(broker="replay", max_bars=40))
    assert first.bars == 40 and "--max-bars 40" in first.reason
    second = paper(run_dir, PaperConfig(broker="replay"))
    assert "the period ended" in second.reason
    return (
        run_dir,
        result.series["best"],
        result.positions["best"],
        rundir.read_json_lines(run_dir / rundir.PAPER_JOURNAL),
    )


def test_a_replay_ends_with_the_backtests_record_to_the_cent(replayed) -> None:
    run_dir, series, positions, journal = replayed
    assert len(journal) == len(series) - 1  # a decision at every bar but the last, filled at the next open
    assert [r["bar"] for r in journal] == [str(t) for t in series.index[:-1]]
    assert [r["fills_at"] for r in journal] == [str(t) for t in series.index[1:]]
    held = np.array([r["after"]["positions"] for r in journal])
    np.testing.assert_array_equal(held, positions.to_numpy()[1:])  # the same trades, share for share
    for key in ("value", "cash"):
        realized = np.array([r["after"][key] for r in journal])
        assert np.abs(realized - series[key].to_numpy()[1:]).max() < 0.005, key
    traded = np.abs(np.diff(positions.to_numpy(), axis=0)).sum(axis=1) > 0
    assert traded.mean() > 0.5  # weights mode trades nearly every bar: the comparison above is not empty


def test_every_bar_is_reconciled_and_each_order_has_one_client_id(replayed) -> None:
    run_dir, _, _, journal = replayed
    ids = [o["client_order_id"] for r in journal for o in r["orders"]]
    assert len(ids) == len(set(ids)) and all(i.startswith("pt-") for i in ids)
    assert all(r["stop"] is None for r in journal)
    for r in journal:  # the journal's book is the backtest's expectation of the same decision, bar by bar
        assert r["after"]["positions"] == r["expected"]["positions"]
        assert abs(r["after"]["value"] - r["expected"]["value"]) < 0.005
        assert all(abs(bp) < 1e-9 for bp in r["slippage_bp"].values())  # filled at the backtest's open
    assert not (run_dir / rundir.PAPER_PENDING).exists()
    session = rundir.read_json(run_dir / rundir.PAPER_SESSION, version=rundir.PAPER_VERSION)
    assert session["strategy"] == "best" and session["broker"] == "replay" and len(session["tickers"]) == 4


def test_the_costly_replay_left_orders_unfilled_as_the_backtest_did(replayed) -> None:
    run_dir, _, _, journal = replayed
    partly = [o for r in journal for o in r["orders"] if o["status"] == "canceled"]
    costs = sum(r["expected"]["costs"] for r in journal)
    if "costly" in run_dir.parent.name:
        assert partly and costs > 0  # the participation cap and the cash limit cut orders; replay == backtest anyway
    else:
        assert not partly


def test_a_replay_decision_never_reads_a_bar_after_it(replayed, tmp_path: Path) -> None:
    """Scramble every bar after bar k of the replayed period: the journal up to the decision at
    bar k-1 (filled at bar k's open) is unchanged, and so is the observation at bar k."""
    from dataclasses import replace

    import torch

    from trader.backtesting.periods import select_period
    from podracer.paper.feed import ReplayFeed
    from podracer.paper.hours import MarketHours
    from podracer.paper.journal import Journal
    from podracer.paper.loop import PaperLoop, load_strategy
    from podracer.paper.simulated import SimulatedBroker

    run_dir, _, _, journal = replayed
    flat_only(run_dir)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("paper"))
    strategy = load_strategy(copy)
    panel = select_period(strategy.data, "test")[0]
    k = 30
    features = panel.features.clone()
    generator = torch.Generator().manual_seed(0)
    features[k + 1 :] *= torch.empty_like(features[k + 1 :]).uniform_(0.5, 1.5, generator=generator)
    scrambled = replace(panel, features=features)
    hours = MarketHours(panel.interval)
    feed = ReplayFeed(scrambled, hours)
    broker = SimulatedBroker(
        scrambled,
        strategy.rules,
        strategy.tickers,
        strategy.initial_cash,
        np.zeros(len(strategy.tickers)),
        hours,
        now=feed.start,
    )
    book = Journal(copy)
    book.open({"strategy": "best", "broker": "replay", "dry_run": False, "tickers": list(strategy.tickers)})
    PaperLoop(strategy, PaperConfig(max_bars=k + 1), broker, feed, book, hours).run()
    scrambled_journal = book.records()
    for original, other in zip(journal[:k], scrambled_journal[:k]):
        assert original["after"] == other["after"] and original["action"] == other["action"]
    assert scrambled_journal[k]["obs_sha256"] == journal[k]["obs_sha256"]


def flat_only(run_dir: Path) -> None:
    """The checks that do not depend on the cost model run on the flat-rate run only."""
    if "costly" in run_dir.parent.name:
        pytest.skip("does not depend on the cost model: the flat-rate run is enough")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    "args, words",
    [
        (["--broker", "alpaca", "--broker-url", "https://api.alpaca.markets"], "live endpoint"),
        (["--max-drawdown", "0"], "--max-drawdown must be a positive number"),
        (["--max-order-value", "-5"], "--max-order-value must be a positive number"),
        (["--daily-loss-limit", "1.5"], "--daily-loss-limit is a fraction"),
        (["--max-gross-exposure", "0"], "--max-gross-exposure must be a positive number"),
        (
            ["--broker", "replay", "--broker-url", "http://127.0.0.1:9"],
            "--broker-url does not apply to --broker replay",
        ),
        (["--dry-run"], "--dry-run does not apply to --broker replay"),
        (["--broker", "alpaca", "--period", "test"], "--period does not apply"),
        (["--broker", "ib"], "--broker must be one of alpaca, replay"),
        (["--max-bars", "0"], "--max-bars must be a positive whole number"),
        (["--period", "1999-01-01:1999-02-01"], "lies outside the data"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_the_run_as_it_was(replayed, args, words, capsys) -> None:
    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    before = _snapshot(run_dir)
    assert cli(["paper", str(run_dir), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert _snapshot(run_dir) == before


def test_a_run_without_a_selected_strategy_is_refused_and_left_as_it_was(replayed, tmp_path: Path, capsys) -> None:
    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("paper", "best.*"))
    before = _snapshot(copy)
    assert cli(["paper", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no selected strategy" in err
    assert _snapshot(copy) == before and not (copy / "paper").exists()


def test_a_restart_under_another_strategy_or_broker_is_refused(replayed, capsys) -> None:
    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    before = _snapshot(run_dir)
    assert (
        cli(["paper", str(run_dir), "--broker", "alpaca", "--dry-run"]) == 2
    )  # keys unset: refused before the journal
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was started with broker 'replay'" in err
    assert _snapshot(run_dir) == before


def test_the_kill_switch_flattens_the_book_and_stops(replayed, tmp_path: Path, capsys) -> None:
    run_dir, _, _, _ = replayed
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("paper"))
    assert cli(["paper", str(copy), "--max-drawdown", "0.0001", "--max-order-value", "200000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stopped: the drawdown reached") and err.count("\n") == 1 and "flattened" in err
    journal = rundir.read_json_lines(copy / rundir.PAPER_JOURNAL)
    last = journal[-1]
    assert last["kind"] == "flatten" and journal[-2]["risk"]["kill"] and "flattened" in last["stop"]
    assert all(q == 0 for q in last["after"]["positions"]) and all(o["side"] == "sell" for o in last["orders"])
    assert journal[-2]["risk"]["drawdown"] >= 0.0001
    assert all(o["qty"] * o["price"] <= 200000 * (1 + 1e-12) for r in journal for o in r["orders"])
    assert cli(["paper", str(copy)]) == 1  # a stopped loop stays stopped until its journal is moved away
    assert "stopped:" in capsys.readouterr().err and len(rundir.read_json_lines(copy / rundir.PAPER_JOURNAL)) == len(
        journal
    )


def test_flattening_before_the_close_holds_nothing_overnight(replayed, tmp_path: Path) -> None:
    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("paper"))
    result = paper(copy, PaperConfig(flatten_before_close=True, period="2023-01-11 15:30 : 2023-01-12 09:45"))
    journal = result.records
    flat = [r for r in journal if r["kind"] == "flatten"]
    assert [r["fills_at"] for r in flat] == ["2023-01-11 15:55:00-05:00"]  # filled at the session's last bar
    assert all(q == 0 for q in flat[0]["after"]["positions"])
    after = journal[journal.index(flat[0]) + 1]
    assert after["kind"] == "bar" and after["fills_at"] == "2023-01-12 09:30:00-05:00"  # back in at the next open


def test_sigterm_stops_after_the_bar_in_hand_and_a_restart_finishes_the_period(replayed, tmp_path: Path) -> None:
    run_dir, series, positions, journal = replayed
    flat_only(run_dir)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("paper"))
    period = "2023-01-11 09:30 : 2023-01-11 15:30"  # the test period's first 72 bars: the same record
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-c",
        "from podracer.cli import entry_point; entry_point()",
        "paper",
        str(copy),
        "--period",
        period,
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = copy / rundir.PAPER_JOURNAL
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(rundir.read_json_lines(path)) < 20 and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "stopped by a signal" in out
    done = rundir.read_json_lines(path)
    assert 20 <= len(done) < 72 and path.read_bytes().endswith(b"\n")
    assert not (copy / rundir.PAPER_PENDING).exists()
    paper(copy, PaperConfig(period=period))
    resumed = rundir.read_json_lines(path)
    assert len(resumed) == 72
    assert [r["after"] for r in resumed] == [r["after"] for r in journal[:72]]


def test_a_tournaments_ensemble_is_the_selected_strategy_when_it_won(replayed) -> None:
    """`selected_strategy` follows selection.json's result: an ensemble of two copies of the
    best checkpoint (equal weights) aims at the checkpoint's book, under the run's rules."""
    import torch

    from market_envs.kernel import aim_weights
    from trader.decision import selected_strategy

    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    contents = read_run(run_dir)
    config = backtest_config(contents, tear_sheet=False)
    data = contents.data(contents.dataset)
    name, best, rules = selected_strategy(contents, data, config)
    assert name == "best"
    contents.result, contents.ensemble, contents.ensemble_weights = (
        "ensemble",
        [contents.checkpoints["best"]] * 2,
        [0.5, 0.5],
    )
    name, ensemble, ensemble_rules = selected_strategy(contents, data, config)
    assert name == "ensemble" and ensemble_rules == config.env_config(config.policy_env) == rules
    obs = torch.randn(3, ensemble.obs_dim)
    # the members' books are averaged (portfolio space): the same book, by an action of its own
    book = aim_weights(ensemble.act(obs), rules)
    torch.testing.assert_close(book, aim_weights(best.act(obs, deterministic=True), rules))
    contents.result, contents.ensemble, contents.checkpoints = None, [], {}
    with pytest.raises(trader.errors.UserError, match="has no selected strategy"):
        selected_strategy(contents, data, config)


def test_a_replay_prints_every_50th_bar_and_nothing_per_bar_when_quiet(replayed, tmp_path: Path, capsys) -> None:
    """Issue 75, finding 11: a replay printed one line per bar, with no --quiet."""
    run_dir, _, _, _ = replayed
    flat_only(run_dir)
    for name, more, lines in (("loud", [], 4), ("quiet", ["--quiet"], 1)):
        shutil.copytree(run_dir, tmp_path / name, ignore=shutil.ignore_patterns("paper"))
        assert cli(["paper", str(tmp_path / name), "--max-bars", "120", *more]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == lines, out  # loud: bars 1, 50 and 100, then the last line
        assert out[-1].startswith("120 bars journaled in ")
