"""Walk-forward (podracer.walkforward): folds that never see their future, a stitched
record that carries the book across fold boundaries, and a resume that changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_fixtures import random_walk_frame
from trader import rundir
from trader.backtesting import ActionSchedule, BacktestConfig, Book, read_series, run_backtest
from trader.backtesting.yardsticks import YARDSTICKS
from trader.errors import ConfigError, UserError
from trader.environments import load_market
from trader.folds import FoldSpec, make_folds
from trader.rundir import fold_dir, read_fold
from podracer.walkforward import walk_forward

FOLDS = FoldSpec("6m", "2m", "2m")
"""Four folds on `write_daily_recipe`'s 17 months: tests Sep-Nov 2020, ..., Mar-May 2021."""
BUDGET = dict(steps=256, num_envs=2, eval_every=128)
"""A PPO run of one iteration per fold (two validation passes: two trials)."""
SMALL_PPO = {"num_steps": 64, "num_minibatches": 2, "update_epochs": 1}


def daily_frame(seed: int = 5) -> pd.DataFrame:
    """Four random-walk tickers, one bar per business day, Jan 2020 to May 2021."""
    frame = random_walk_frame(4, 370, seed=seed, start="2020-01-02 16:00", freq="B")
    return frame[frame["timestamp"] < pd.Timestamp("2021-06-02", tz="America/New_York")]


def write_daily_recipe(folder: Path, frame: pd.DataFrame, name: str = "wf-daily") -> Path:
    """A files recipe of ``frame`` (its split dates are the walk-forward's to replace)."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / f"{name}.csv", index=False)
    recipe = folder / f"{name}.toml"
    recipe.write_text(
        f'name = "{name}"\nsource = "files"\ninterval = "1D"\nstart = "2020-01-02"\n'
        f'end = "2021-06-02"\ntrain_end = "2020-07-01"\nval_end = "2020-09-01"\n\n'
        f'[files]\npath = "{name}.csv"\n'
    )
    return recipe


def run_ppo(run_dir: Path, recipe: Path, **kwargs):
    return walk_forward(run_dir, str(recipe), FOLDS, "ppo", seed=3, algo_config=SMALL_PPO, **BUDGET, **kwargs)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    return write_daily_recipe(tmp_path_factory.mktemp("recipe"), daily_frame())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, recipe):
    """One whole walk-forward of PPO, shared by the tests that read it."""
    import os

    os.environ["PODRACER_DATA_DIR"] = str(tmp_path_factory.mktemp("data-module"))
    try:
        return run_ppo(tmp_path_factory.mktemp("wf") / "run", recipe)
    finally:
        del os.environ["PODRACER_DATA_DIR"]


# --------------------------------------------------------------------------- the run directory


def test_each_fold_is_a_run_directory_on_its_own_windows(uninterrupted) -> None:
    root = uninterrupted.run_dir
    assert [r["fold"] for r in uninterrupted.folds] == [0, 1, 2, 3]
    for record in uninterrupted.folds:
        folder = fold_dir(root, record["fold"])
        config = rundir.read_toml(folder / rundir.CONFIG)
        assert config["env"]["periods"] == record["windows"]  # trained on the fold's windows
        window = rundir.read_json(folder / rundir.CHECKPOINTS / "best.json")["data_window"]
        assert window["validation"][0] == pd.Timestamp(record["windows"]["validation"][0]).isoformat().replace("T", " ")
        report = rundir.read_json(folder / rundir.REPORT_JSON)
        assert report["period"]["start"] == pd.Timestamp(record["windows"]["test"][0]).isoformat().replace("T", " ")
    from test_rundir import assert_every_file_is_documented

    assert_every_file_is_documented(root)
    summary = json.loads((root / rundir.WF_REPORT_JSON).read_text())
    assert summary["stitched"]["n_trials"] == {"ppo": sum(r["trials"] for r in summary["folds"])} == {"ppo": 8}
    factors = set(summary["stitched"]["metrics"]) & set(YARDSTICKS)  # the factor portfolios whose windows fit
    assert (
        set(summary["stitched"]["metrics"])
        == {"ppo", "benchmark", "equal_weight"} - {"benchmark"}
        | ({"benchmark"} if "benchmark" in summary["stitched"]["metrics"] else set())
        | factors
    )
    assert factors, "no classical yardstick stitched beside the learner"
    assert "dsr" in summary["stitched"]["evidence"]["ppo"]
    assert "| fold | train | validation | test |" in (root / rundir.WF_REPORT_MD).read_text()


def test_walkforward_md_formats_the_metrics_as_report_md_does(uninterrupted) -> None:
    """Issue 75, finding 11: walkforward.md showed raw fractions (0.0831) where report.md shows
    percentages (8.31%); both are written by the report's formatter (`format_value`)."""
    from trader.backtesting.report import format_value

    root = uninterrupted.run_dir
    row = json.loads((root / rundir.WF_REPORT_JSON).read_text())["stitched"]["metrics"]["ppo"]
    columns = ("cum_returns_final", "annual_return", "sharpe_ratio", "sortino_ratio", "max_drawdown")
    cells = [format_value(c, row[c]) for c in columns]
    assert cells[0].endswith("%") and cells[1].endswith("%") and cells[4].endswith("%")
    assert "| ppo | " + " | ".join(cells) + " |" in (root / rundir.WF_REPORT_MD).read_text()


def test_the_stitched_record_carries_the_book_across_folds(uninterrupted, recipe) -> None:
    root = uninterrupted.run_dir
    stitched = uninterrupted.stitched
    learner = stitched[stitched["strategy"] == "ppo"].set_index("timestamp")
    closes = daily_frame().pivot(index="timestamp", columns="ticker", values="close")
    previous = None
    for record in uninterrupted.folds:
        series, _ = read_series(fold_dir(root, record["fold"]) / rundir.BACKTESTS_DIR / "best.parquet")
        if previous is None:
            assert record["start_books"] is None and series["value"].iloc[0] == pytest.approx(1_000_000.0)
        else:
            book = previous["books"]["best"]
            assert record["start_books"] == previous["books"]
            first = series.index[0]
            marked = book["cash"] + float(np.dot(book["holdings"], closes.loc[first].to_numpy()))
            assert series["value"].iloc[0] == pytest.approx(marked, rel=1e-7)  # no reset to initial cash
            # the first bar's return is the carried book's, from the previous fold's last close
            assert series["return"].iloc[0] == pytest.approx(series["value"].iloc[0] / book["value"] - 1.0, rel=1e-9)
            trades = series["traded_value"] > 0  # the new policy trades the book it took over, at a cost
            assert trades.any() and (series["costs"][trades] > 0).all()
        previous = record
    # the stitched series is the folds' series end to end, and compounds without a break
    value = learner["value"].to_numpy()
    returns = learner["return"].to_numpy()
    assert np.allclose(value[1:] / value[:-1] - 1.0, returns[1:], rtol=1e-9, atol=1e-12)
    assert learner.index.is_monotonic_increasing and not learner.index.has_duplicates


# --------------------------------------------------------------------------- no look-ahead


def test_scrambling_prices_after_a_folds_test_end_leaves_its_trades_identical(tmp_path, uninterrupted) -> None:
    k = 1
    test_end = pd.Timestamp(uninterrupted.folds[k]["windows"]["test"][1])
    frame = daily_frame()
    later = frame["timestamp"] > test_end
    columns = ["open", "high", "low", "close", "volume"]
    rows = np.random.default_rng(0).permutation(int(later.sum()))  # whole bars, shuffled across days and tickers
    frame.loc[later, columns] = frame.loc[later, columns].to_numpy()[rows]
    scrambled = run_ppo(tmp_path / "run", write_daily_recipe(tmp_path / "data", frame, "wf-scrambled"))
    for fold in range(4):
        ours = read_series(fold_dir(uninterrupted.run_dir, fold) / rundir.BACKTESTS_DIR / "best.parquet")
        theirs = read_series(fold_dir(scrambled.run_dir, fold) / rundir.BACKTESTS_DIR / "best.parquet")
        if fold <= k:
            pd.testing.assert_frame_equal(ours[1], theirs[1])  # holdings, bar by bar
            pd.testing.assert_frame_equal(ours[0], theirs[0])  # values, trades and costs
        else:
            assert not ours[0]["value"].equals(theirs[0]["value"])  # the scramble does reach later folds


# --------------------------------------------------------------------------- resume


def kill_in_fold_2(monkeypatch) -> Callable:
    """Make the walk-forward die in fold 2's test backtest (after its training), as a
    killed process would; returns the real `backtest_run` to restore."""
    import trader.backtesting.runs as runs

    real = runs.backtest_run

    def dies_in_fold_2(run_dir, **kwargs):
        if Path(run_dir).name == "1":
            raise RuntimeError("killed")
        return real(run_dir, **kwargs)

    monkeypatch.setattr(runs, "backtest_run", dies_in_fold_2)
    return real


def test_a_walk_forward_killed_in_fold_2_resumes_to_the_same_record(
    tmp_path, recipe, uninterrupted, monkeypatch
) -> None:
    import trader.backtesting.runs as runs

    real = kill_in_fold_2(monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        run_ppo(tmp_path / "run", recipe)
    root = tmp_path / "run"
    assert read_fold(root, 0) is not None and read_fold(root, 1) is None
    assert (fold_dir(root, 1) / rundir.CONFIG).is_file()  # a half-finished fold: trained, not tested
    kept = (fold_dir(root, 0) / rundir.WF_FOLD).stat().st_mtime_ns
    monkeypatch.setattr(runs, "backtest_run", real)
    lines: list[str] = []
    resumed = run_ppo(root, recipe, on_progress=lines.append)
    assert (fold_dir(root, 0) / rundir.WF_FOLD).stat().st_mtime_ns == kept  # never rerun
    assert "fold 0 (1 of 4): finished before, kept" in lines  # named as its folder, folds/0 (it said "fold 1/4")
    pd.testing.assert_frame_equal(resumed.stitched, uninterrupted.stitched)


def test_a_resume_under_another_config_is_refused(tmp_path, recipe, uninterrupted) -> None:
    with pytest.raises(UserError, match="another config"):
        walk_forward(
            uninterrupted.run_dir,
            str(recipe),
            FoldSpec("6m", "2m", "2m", embargo=1),
            "ppo",
            seed=3,
            algo_config=SMALL_PPO,
            **BUDGET,
        )


# --------------------------------------------------------------------------- the engine's books


def test_a_backtest_starts_from_a_book_and_pays_for_the_switch() -> None:
    from market_fixtures import random_panel

    data = random_panel(n_tickers=3, n_bars=30, seed=2)
    close = data.close.double()
    book = Book(cash=1000.0, holdings=(10.0, 0.0, 5.0), value=2500.0)
    hold = ActionSchedule(torch.zeros(data.num_bars, 3))
    sell = torch.zeros(data.num_bars, 3)
    sell[0] = -1.0  # sell everything at the first decision
    config = BacktestConfig(tear_sheet=False, buy_cost=0.01, sell_cost=0.01)
    result = run_backtest(
        data,
        {"hold": hold, "sell": ActionSchedule(sell)},
        baselines=[],
        config=config,
        initial_books={"hold": book, "sell": book},
    )
    marked = 1000.0 + 10.0 * float(close[0, 0]) + 5.0 * float(close[0, 2])
    held = result.series["hold"]
    assert held["value"].iloc[0] == pytest.approx(marked)
    assert held["return"].iloc[0] == pytest.approx(marked / 2500.0 - 1.0)
    assert held["value"].iloc[-1] == pytest.approx(1000.0 + 10.0 * float(close[-1, 0]) + 5.0 * float(close[-1, 2]))
    assert held["costs"].sum() == 0.0
    sold = result.series["sell"]
    proceeds = 10.0 * float(data.open[1, 0]) + 5.0 * float(data.open[1, 2])
    assert sold["costs"].iloc[1] == pytest.approx(0.01 * proceeds, rel=1e-6)
    assert sold["cash"].iloc[1] == pytest.approx(1000.0 + 0.99 * proceeds, rel=1e-6)
    assert result.positions["sell"].iloc[-1].abs().sum() == 0.0


def test_a_book_of_the_wrong_width_is_refused() -> None:
    from market_fixtures import random_panel

    data = random_panel(n_tickers=3, n_bars=10, seed=2)
    with pytest.raises(UserError, match="holds 2 tickers"):
        run_backtest(
            data,
            {"hold": ActionSchedule(torch.zeros(10, 3))},
            baselines=[],
            config=BacktestConfig(tear_sheet=False),
            initial_books={"hold": Book(0.0, (1.0, 1.0), 1.0)},
        )


# --------------------------------------------------------------------------- the CLI


def test_the_cli_resumes_a_finished_walk_forward_and_prints_the_report(tmp_path, recipe, uninterrupted, capsys) -> None:
    from podracer.cli import main

    config = tmp_path / "ppo.toml"
    config.write_text("num_steps = 64\nnum_minibatches = 2\nupdate_epochs = 1\n")
    code = main(
        [
            "walkforward",
            str(uninterrupted.run_dir),
            "--dataset",
            str(recipe),
            "--train",
            "6m",
            "--validation",
            "2m",
            "--test",
            "2m",
            "--learner",
            "ppo",
            "--seed",
            "3",
            "--steps",
            "256",
            "--num-envs",
            "2",
            "--eval-every",
            "128",
            "--config",
            str(config),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.count("finished before, kept") == 4
    assert "| fold | train | validation | test |" in captured.out


def test_the_clis_tournament_per_fold_defaults_to_a_budget_a_first_run_can_pay(tmp_path, recipe, monkeypatch) -> None:
    """Issue 75, finding 3: `trader walkforward` without budget flags ran the tournament's 12 pods of
    50,000 transitions on each fold. The CLI's default is `WALK_PODS` of `WALK_POD_STEPS` per fold;
    a stop or --pod-steps given replaces it."""
    import podracer.walkforward as module
    from podracer.cli import main
    from podracer.cli.walkforward import WALK_POD_STEPS, WALK_PODS

    seen = []

    def capture(*args, tournament, **kwargs):
        seen.append(tournament)
        raise UserError("captured")

    monkeypatch.setattr(module, "walk_forward", capture)
    base = ["walkforward", str(tmp_path / "run"), "--dataset", str(recipe), "--train", "6m", "--validation", "2m"]
    for flags in ([], ["--time-budget", "90s"], ["--pods", "9", "--pod-steps", "1000"]):
        assert main([*base, "--test", "2m", *flags]) == 2
    assert [(t.get("pods"), t.get("pod_steps")) for t in seen] == [
        (WALK_PODS, WALK_POD_STEPS),
        (None, WALK_POD_STEPS),
        (9, 1000),
    ]
    assert WALK_PODS * WALK_POD_STEPS < 12 * 50_000 / 5


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--test", "6x"], "--test must be a positive calendar length"),
        (["--test", "2m", "--learner", "a2c"], "--learner must be one of"),
        (["--test", "2m", "--learner", "ppo", "--pods", "3"], "--pods applies to --learner tournament"),
        (["--test", "2m", "--step", "1m"], "would overlap"),
        (["--test", "2m", "--learner", "ppo", "--baselines", "sb3,zipline"], "unknown library"),
        (["--test", "2m", "--learner", "ppo", "--baselines", "sb3", "--baseline-algos", "dqn"], "unknown algorithm"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, recipe, flags, message, capsys) -> None:
    from podracer.cli import main

    code = main(
        ["walkforward", str(tmp_path / "run"), "--dataset", str(recipe), "--train", "6m", "--validation", "2m", *flags]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2
    assert len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "run" / rundir.WF_CONFIG).exists()  # nothing claimed: the corrected call starts afresh


# --------------------------------------------------------------------------- the tournament learner

TOURNAMENT = {
    "algos": ["ppo", "td3"],
    "pods": 2,
    "pod_steps": 128,
    "num_envs": 2,
    "population": 2,
    "workers": 1,
    "algo_configs": {"ppo": SMALL_PPO, "td3": {"learning_starts": 64, "batch_size": 32}},
}
"""Two pods per fold on one worker process: a tournament that is a pure function of its seed."""


@pytest.mark.slow
def test_a_tournament_walk_forward_killed_in_fold_2_resumes_to_the_same_record(tmp_path, recipe, monkeypatch) -> None:
    import trader.backtesting.runs as runs

    def run(root: Path):
        return walk_forward(root, str(recipe), FOLDS, "tournament", seed=1, tournament=TOURNAMENT)

    whole = run(tmp_path / "whole")
    for record in whole.folds:  # every pod trained and validated on its fold's windows
        folder = fold_dir(whole.run_dir, record["fold"])
        plan = make_folds(load_market(str(recipe)).timestamps, FOLDS)[record["fold"]]  # its market's bar positions
        assert rundir.read_toml(folder / rundir.TOURNAMENT)["env"]["windows"] == {
            name: list(bounds) for name, bounds in plan.windows.as_dict().items()
        }
        for pod in (folder / rundir.PODS_DIR).iterdir():
            assert rundir.read_toml(pod / rundir.CONFIG)["env"]["periods"] == record["windows"]
    real = kill_in_fold_2(monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "killed")
    monkeypatch.setattr(runs, "backtest_run", real)
    resumed = run(tmp_path / "killed")
    pd.testing.assert_frame_equal(resumed.stitched, whole.stitched)
    assert [r["algo"] for r in resumed.folds] == [r["algo"] for r in whole.folds]


# --------------------------------------------------------------------------- baselines per fold


@pytest.mark.slow
def test_baselines_walk_forward_on_the_same_folds_and_carry_their_own_books(tmp_path, recipe) -> None:
    result = run_ppo(tmp_path / "run", recipe, baselines=("sb3", "finrl"), baseline_steps=256)
    names = ("sb3-ppo-s3", "finrl-ensemble-s3")
    previous = None
    for record in result.folds:
        folder = fold_dir(result.run_dir, record["fold"])
        windows = {k: [str(pd.Timestamp(b)) for b in v] for k, v in record["windows"].items()}
        for name in names:
            sidecar = rundir.read_json(folder / rundir.BASELINES_DIR / name / rundir.BASELINE_SIDECAR)
            assert sidecar["status"] == "finished" and sidecar["steps"] <= 256 + 64
            assert sidecar["periods"] == {k: windows[k] for k in ("train", "validation")}
            kept = sidecar["selection"]["score"]  # the kept snapshot's score; FinRL's ensemble keeps none
            assert record["baselines"][name]["validation_sharpe"] == (None if kept is None else pytest.approx(kept))
            series, _ = read_series(folder / rundir.BACKTESTS_DIR / f"{name}.parquet")
            assert str(series.index[0]) == windows["test"][0] and str(series.index[-1]) == windows["test"][1]
            if previous is not None:
                assert record["start_books"][name] == previous["books"][name]
                assert series["return"].iloc[0] == pytest.approx(
                    series["value"].iloc[0] / previous["books"][name]["value"] - 1.0
                )
        trades = [
            w["trade"]
            for w in rundir.read_json(folder / rundir.BASELINES_DIR / names[1] / rundir.BASELINE_SIDECAR)["windows"]
        ]
        assert trades[0][0] == windows["test"][0]  # FinRL's windows cut the fold's test window, not the data's
        previous = record
    stitched = result.stitched
    # and the yardsticks that fit the panel (issue 80), stitched as every strategy is
    assert set(stitched["strategy"]) - set(YARDSTICKS) == {"ppo", *names, "equal_weight"}
    assert result.summary["stitched"]["n_trials"]["sb3-ppo-s3"] >= 4
    assert "sb3-ppo-s3 test Sharpe" in (result.run_dir / rundir.WF_REPORT_MD).read_text()


# --------------------------------------------------------------------------- warm start


def test_a_warm_started_single_learner_continues_the_previous_folds_best(tmp_path, recipe) -> None:
    two_folds = FoldSpec("10m", "2m", "2m")
    result = walk_forward(
        tmp_path / "run", str(recipe), two_folds, "ppo", seed=3, algo_config=SMALL_PPO, warm_start=True, **BUDGET
    )
    assert len(result.folds) == 2
    assert "init_from" not in rundir.read_toml(fold_dir(result.run_dir, 0) / rundir.CONFIG)
    config = rundir.read_toml(fold_dir(result.run_dir, 1) / rundir.CONFIG)
    assert Path(config["init_from"]) == fold_dir(result.run_dir, 0) / rundir.CHECKPOINTS / "best"


@pytest.mark.slow
def test_a_warm_started_tournament_breeds_from_the_previous_folds_leaderboard(tmp_path, recipe) -> None:
    two_folds = FoldSpec("10m", "2m", "2m")
    settings = {**TOURNAMENT, "fresh_probability": 0.0}
    result = walk_forward(
        tmp_path / "run", str(recipe), two_folds, "tournament", seed=1, tournament=settings, warm_start=True
    )
    first = rundir.read_json(fold_dir(result.run_dir, 0) / rundir.LEADERBOARD)["entries"]
    pods = pd.read_parquet(fold_dir(result.run_dir, 1) / rundir.PODS)
    assert pods["parent_id"].iloc[0].startswith("0/")  # an empty board: the parent comes from fold 0's
    assert pods["parent_id"].notna().all() and (pods["generation"] >= 1).all()
    for pod_id, parent in zip(pods["pod_id"], pods["parent_id"]):
        if not parent.startswith("0/"):
            continue  # bred from this fold's own board, once it had an entry of the algorithm
        assert parent.split("/")[1] in {e["pod_id"] for e in first}
        init = rundir.read_toml(fold_dir(result.run_dir, 1) / rundir.PODS_DIR / pod_id / rundir.CONFIG)["init_from"]
        assert (
            Path(init).resolve()
            == (
                fold_dir(result.run_dir, 0) / rundir.PODS_DIR / parent.split("/")[1] / rundir.CHECKPOINTS / "best"
            ).resolve()
        )


# --------------------------------------------------------------------------- explicit periods


def test_explicit_periods_are_views_with_statistics_of_their_own_training_window() -> None:
    from market_fixtures import random_panel

    data = random_panel(n_tickers=3, n_bars=60, seed=4)
    stamps = data.timestamps
    periods = {
        "train": [stamps[10], stamps[29]],
        "validation": [stamps[32], stamps[39]],
        "test": [stamps[40], stamps[49]],
    }
    fold = data.with_periods(periods)
    assert fold.features.data_ptr() == data.features.data_ptr()  # nothing copied
    train, validation, test = (fold.period(name) for name in ("train", "validation", "test"))
    assert (train.num_bars, validation.num_bars, test.num_bars) == (20, 8, 10)
    assert test.timestamps[0] == stamps[40] and test.timestamps[-1] == stamps[49]
    assert test.features.untyped_storage().data_ptr() == data.features.untyped_storage().data_ptr()
    mean, std = data.take(slice(10, 30)).fit_normalization()
    for part in (train, validation, test, fold):
        assert torch.equal(part.feature_mean, mean) and torch.equal(part.feature_std, std)
    assert fold.describe()["periods"]["validation"]["bars"] == 8
    assert data.with_periods(None) is data


def test_env_reset_from_a_book_marks_it_and_shows_it_in_the_observation() -> None:
    from market_envs.config import EnvConfig
    from market_envs.env import StockTradingVecEnv
    from market_fixtures import random_panel

    data = random_panel(n_tickers=3, n_bars=20, seed=6)
    env = StockTradingVecEnv(data, 2, "cpu", EnvConfig(random_start=False, episode_length=None))
    cash = torch.tensor([5000.0, 1_000_000.0], dtype=torch.float64)
    holdings = torch.tensor([[10.0, 0.0, 20.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    obs, info = env.reset(options={"cash": cash, "holdings": holdings})
    close = data.close[0].double()
    value = cash + (holdings * close).sum(-1)
    assert torch.allclose(env.value, value) and torch.equal(env.holdings, holdings)
    assert torch.allclose(obs[:, 0].double(), cash / value, atol=1e-6)  # the account columns show the book
    assert torch.allclose(obs[:, 1:4].double(), holdings * close / value.unsqueeze(-1), atol=1e-6)
    plain, _ = StockTradingVecEnv(data, 2, "cpu", EnvConfig(random_start=False, episode_length=None)).reset()
    assert torch.equal(obs[1], plain[1])  # an all-cash book is the usual start
    with pytest.raises(UserError, match="negative shares"):
        env.reset(options={"cash": cash, "holdings": -holdings})
    with pytest.raises(UserError, match="shape"):
        env.reset(options={"cash": cash, "holdings": holdings[:, :2]})


def test_a_sigint_in_fold_2_keeps_fold_1_and_names_the_command_that_resumes(tmp_path, recipe, monkeypatch, capsys):
    """A real SIGINT while fold 2 trains: the training stops at its iteration's end, exit 130,
    one line: the fold, what is kept, and the same command (which parses back to the options)."""
    import os
    import shlex
    import signal

    from trader.agents.ppo import PPORunner
    from podracer.cli import main

    original, calls = PPORunner.iteration, []

    def iteration(self):
        metrics = original(self)
        calls.append(1)
        if len(calls) == 3:  # fold 1 is two iterations: this is fold 2's first
            os.kill(os.getpid(), signal.SIGINT)
        return metrics

    monkeypatch.setattr(PPORunner, "iteration", iteration)
    config = tmp_path / "ppo.toml"
    config.write_text("num_steps = 64\nnum_minibatches = 2\nupdate_epochs = 1\n")
    run = tmp_path / "run"
    given = {"--dataset": str(recipe), "--train": "6m", "--validation": "2m", "--test": "2m", "--learner": "ppo"}
    given |= {"--seed": "3", "--steps": "256", "--num-envs": "2", "--eval-every": "128", "--config": str(config)}
    assert main(["walkforward", str(run), *[w for pair in given.items() for w in pair]]) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    head = "interrupted (SIGINT) in fold 2; fold 1 is finished and kept, fold 2 trains again from its start: "
    assert line.startswith(head + "resume with the same command: trader walkforward ")
    command = shlex.split(line.removeprefix(head + "resume with the same command: "))
    assert command[:3] == ["trader", "walkforward", str(run)]
    assert dict(zip(command[3::2], command[4::2], strict=True)) == given
    assert read_fold(run, 0) is not None and read_fold(run, 1) is None


def test_a_full_disk_in_a_walk_forward_is_one_line_naming_the_file_and_the_command(
    tmp_path, recipe, monkeypatch, capsys
):
    import podracer.walkforward as walkforward
    from podracer.cli import main
    from trader.errors import UnwritableError

    run = tmp_path / "run"

    def full(*args, on_progress, **kwargs):
        on_progress("fold 1/4: ppo on train 2020-01-02 .. 2020-07-01, test 2020-09-01 .. 2020-11-01")
        raise UnwritableError(f"cannot write {run / 'folds' / '0' / 'metrics.parquet'}: No space left on device")

    monkeypatch.setattr(walkforward, "walk_forward", full)
    args = ["walkforward", str(run), "--dataset", str(recipe), "--train", "6m", "--validation", "2m", "--test", "2m"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: cannot write {run / 'folds' / '0' / 'metrics.parquet'}: No space left on device in fold 1; "
        "no fold had finished, fold 1 trains again from its start: resume with the same command: "
        f"trader walkforward {run} --train 6m --validation 2m --test 2m --dataset {recipe}"
    )


def test_a_single_learners_time_budget_stops_each_fold_long_before_its_steps(tmp_path, recipe) -> None:
    """``time_budget``: seconds per fold, whichever of it and ``steps`` comes first (the suite's equal
    compute, benchmarks/tournament_suite.py); a fold's run records its budget and stops on it."""
    two_folds = FoldSpec("10m", "2m", "2m")
    budget = {**BUDGET, "steps": 10**9}
    result = walk_forward(
        tmp_path / "run", str(recipe), two_folds, "ppo", seed=3, algo_config=SMALL_PPO, time_budget=2.0, **budget
    )
    assert len(result.folds) == 2
    for fold in range(2):
        config = rundir.read_toml(fold_dir(result.run_dir, fold) / rundir.CONFIG)
        assert config["time_budget"] == 2.0
    with pytest.raises(ConfigError, match="time_budget must be a positive number"):
        walk_forward(tmp_path / "bad", str(recipe), two_folds, "ppo", time_budget=0.0, **BUDGET)
