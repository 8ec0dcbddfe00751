"""`trader experiment podracer`: the paper's split, Figure 7's bookkeeping, Table 2 with the
paper's rows, bad input, and (slow) the whole experiment on a tiny stand-in, killed and
resumed, and on a local server that speaks Alpaca's API."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from market_fixtures import TINY_DAILY_RECIPE
from trader import rundir
from podracer.cli import main
from trader.errors import UserError
from podracer.experiment import ExperimentConfig, best_pods_over_time, experiment_dates, table_markdown


def test_the_papers_dates_where_the_data_covers_them():
    assert experiment_dates("2016-01-04", "2021-05-27", None) == {
        "start": "2016-01-04",
        "train_end": "2018-05-14",
        "val_end": "2019-05-13",
        "end": "2021-05-27",
    }
    assert experiment_dates("2010-01-04", "2024-01-01", None)["val_end"] == "2019-05-13"  # a longer data set too


def test_elsewhere_the_papers_proportions_over_the_window_or_its_last_years():
    dates = experiment_dates("2020-01-01", "2025-05-26", None)  # 1972 days
    cuts = [pd.Timestamp(dates[k]) for k in ("start", "train_end", "val_end", "end")]
    days = (cuts[3] - cuts[0]).days
    assert (cuts[3] - cuts[2]).days == round(days * 2.04 / 5.40) and (cuts[2] - cuts[1]).days == round(days / 5.40)
    assert experiment_dates("2014-01-02", "2024-01-01", 2.0)["start"] == "2022-01-01"
    with pytest.raises(UserError, match="--years 12: the data set holds 10.0 years"):
        experiment_dates("2014-01-02", "2024-01-01", 12.0)
    with pytest.raises(UserError, match="too short"):
        experiment_dates("2024-01-02", "2024-01-10", None)


def test_the_best_pod_at_each_mark_is_the_best_that_had_finished_by_then(tmp_path: Path):
    t0 = 1000.0
    events = [
        ("started", {}, 0.0),
        ("entered", {"pod_id": "p0000", "score": 1.0}, 3.0),
        ("entered", {"pod_id": "p0001", "score": 0.5}, 4.0),
        ("entered", {"pod_id": "p0002", "score": 2.0}, 7.5),
        ("stopped", {"reason": "pods"}, 9.0),
    ]
    for kind, values, dt in events:
        rundir.append_json_line(tmp_path / rundir.EVENTS, {"kind": kind, "time": t0 + dt, **values})
    best = best_pods_over_time(tmp_path, 2.0)
    assert best == {
        4.0: "pods/p0000/checkpoints/best",
        6.0: "pods/p0000/checkpoints/best",
        8.0: "pods/p0002/checkpoints/best",
    }  # nothing had finished at 2 s


def test_table_2_marks_the_papers_rows_and_leaves_what_it_lacks_empty():
    table = pd.DataFrame(
        [
            {
                "strategy": "Vanilla PPO",
                "cum_returns_final": 0.1,
                "annual_return": 0.05,
                "annual_volatility": 0.2,
                "max_drawdown": -0.1,
                "sharpe_ratio": 0.5,
                "sharpe_low": -0.2,
                "sharpe_high": 1.1,
                "psr": 0.8,
                "dsr": 0.7,
                "trials": 3,
            },
            {
                "strategy": "Tournament (the paper)",
                "cum_returns_final": 3.62,
                "annual_return": float("nan"),
                "annual_volatility": float("nan"),
                "max_drawdown": float("nan"),
                "sharpe_ratio": 2.42,
            },
        ]
    ).set_index("strategy")
    text = table_markdown(table)
    assert "| Vanilla PPO | 10.00% | 5.00% | 20.00% | -10.00% | 0.50 | [-0.20, 1.10] | 0.80 | 0.70 | 3 |" in text
    assert "| Tournament (the paper) | 362.00% | - | - | - | 2.42 | - | - | - | - |" in text
    assert "published Table 2 figures" in text


@pytest.mark.parametrize(
    "args, words",
    [
        (["--minutes", "1", "--pods", "2"], "not both or neither"),
        (["--pods", "0"], "--pods must be >= 1"),
        (["--years", "40", "--pods", "1"], "--years 40: the data set holds"),
        (["--extra-costs", "nope", "--pods", "1"], "unknown cost model 'nope'"),
        (["--preset", "fast", "--pods", "1"], "--preset: unknown preset 'fast'"),
        (["--baselines", "sb3,zipline", "--pods", "1"], "--baselines: unknown ['zipline']"),
        (
            ["--tickers", "5", "--dataset", "nasdaq100-minute-alpaca", "--pods", "1"],
            "--tickers sizes a synthetic data set only",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_DAILY_RECIPE)
    dataset = [] if "--dataset" in args else ["--dataset", str(recipe)]
    assert main(["experiment", "podracer", str(tmp_path / "run"), *dataset, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_without_vendor_keys_the_stand_in_is_the_minute_market_where_costs_decide(monkeypatch):
    """No Alpaca keys: the calibrated minute stand-in, traded under the action that can hold."""
    from market_envs.data.recipes import find_recipe
    from podracer.cli.experiment import STAND_IN, default_dataset

    for key in ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert default_dataset() == STAND_IN == "synthetic-edge-minute-costs"
    recipe = find_recipe(STAND_IN)
    assert recipe.interval == "1min" and recipe.source == "synthetic"
    assert ExperimentConfig(run_dir="r", dataset=STAND_IN, pods=1).preset == "market-costs"
    monkeypatch.setenv("APCA_API_KEY_ID", "k")
    monkeypatch.setenv("APCA_API_SECRET_KEY", "s")
    assert default_dataset() == "nasdaq100-minute-alpaca"


def test_a_data_set_without_a_benchmark_is_refused(tmp_path: Path, capsys, monkeypatch):
    from market_envs.data import from_frame, write_files
    from market_fixtures import random_walk_frame

    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    frame = random_walk_frame(3, 400, seed=1, start="2020-01-02 09:30", freq="1D")
    write_files(from_frame(frame, name="bars"), tmp_path / "bars")
    recipe = tmp_path / "files.toml"
    recipe.write_text(
        'source = "files"\ninterval = "1D"\nstart = "2020-01-02"\nend = "2021-02-05"\n'
        'train_end = "2020-08-01"\nval_end = "2020-11-01"\n\n[files]\npath = "bars"\n'
    )
    assert main(["experiment", "podracer", str(tmp_path / "run"), "--dataset", str(recipe), "--pods", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no benchmark" in err


def test_a_run_directory_with_other_settings_or_other_files_is_refused(tmp_path: Path, capsys):
    from podracer.experiment import claim

    root = tmp_path / "run"
    config = ExperimentConfig(run_dir=str(root), dataset="synthetic-minute", pods=2)
    assert ExperimentConfig.from_dict(rundir.read_toml(claim(config, root) and root / "experiment.toml")) == config
    assert claim(config, root) == config  # the same settings resume
    with pytest.raises(UserError, match="an experiment with another config \\(differs in pods\\)"):
        claim(ExperimentConfig(run_dir=str(root), dataset="synthetic-minute", pods=3), root)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds a run already \\(notes.txt\\): give another run directory"):
        claim(config, other)
    assert (other / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------- end to end (slow)


def _run(root: Path, recipe: Path) -> int:
    return main(
        [
            "experiment",
            "podracer",
            str(root),
            "--dataset",
            str(recipe),
            "--pods",
            "3",
            "--pod-steps",
            "2048",
            "--workers",
            "1",
            "--baselines",
            "sb3",
            "--snapshot-every",
            "0.5",
            "--seed",
            "1",
        ]
    )


def _table(root: Path) -> list[dict]:
    return json.loads((root / "experiment.json").read_text())["table"]


@pytest.mark.slow
def test_the_experiment_runs_end_to_end_and_a_killed_one_resumes_to_the_same_table(tmp_path: Path, monkeypatch, capsys):
    import podracer.experiment as experiment

    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_DAILY_RECIPE)
    assert _run(tmp_path / "whole", recipe) == 0
    out = capsys.readouterr().out
    whole = _table(tmp_path / "whole")
    names = [row["strategy"] for row in whole]
    assert names[-2:] == ["Tournament (the paper)", "Vanilla PPO (the paper)"] and "| Vanilla PPO |" in out
    assert any(n.startswith("Tournament (") and "paper" not in n for n in names) and "SB3 PPO (seed 1)" in names
    for name in ("table2.md", "report.md", "figure7.parquet", "figure7.png", "dataset.toml"):
        assert (tmp_path / "whole" / name).is_file(), name
    figure = pd.read_parquet(tmp_path / "whole" / "figure7.parquet")
    assert (
        set(figure["learner"]) == {"tournament", "vanilla PPO"}
        and figure["seconds"].is_monotonic_increasing is not None
    )

    calls = []

    def killed(*args, **kwargs):  # the libraries' stage is killed: tournament and PPO done, nothing after
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "_libraries", killed)
    with pytest.raises(KeyboardInterrupt):
        experiment.run_experiment(
            experiment.ExperimentConfig.from_dict(
                rundir.read_toml(tmp_path / "whole" / experiment.EXPERIMENT) | {"run_dir": str(tmp_path / "resumed")}
            )
        )
    assert calls and not (tmp_path / "resumed" / "experiment.json").exists()
    monkeypatch.undo()
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    started = time.monotonic()
    assert _run(tmp_path / "resumed", recipe) == 0
    assert _table(tmp_path / "resumed") == whole  # one worker, a fixed seed: the same table
    assert time.monotonic() - started < 600


@pytest.mark.slow
def test_the_experiment_runs_on_a_local_server_speaking_alpacas_api(tmp_path: Path, monkeypatch, capsys):
    """The data through the real alpaca-py client, from a loopback server: daily bars of two
    stocks and QQQ over 190 sessions, at reduced scale (2 pods, SB3 only)."""
    import exchange_calendars as xcals

    from vendor_server import KEY_ID, SECRET, VendorServer, bars_frame

    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    sessions = xcals.get_calendar("XNYS").sessions_in_range("2020-06-01", "2021-02-26")
    minutes = pd.DatetimeIndex(
        [
            pd.Timestamp(f"{day:%Y-%m-%d} 09:30", tz="America/New_York") + pd.Timedelta(minutes=m)
            for day in sessions
            for m in range(30)
        ]
    ).tz_convert("UTC")
    bars = {ticker: bars_frame(minutes, seed=k, level=50.0 + 40 * k) for k, ticker in enumerate(("AAA", "BBB", "QQQ"))}
    with VendorServer(bars, page_size=5000).running() as server:
        recipe = tmp_path / "alpaca.toml"
        recipe.write_text(
            f'source = "alpaca"\ninterval = "1D"\nstart = "2020-06-01"\nend = "2021-03-01"\n'
            f'train_end = "2020-11-01"\nval_end = "2021-01-01"\nbenchmark = "QQQ"\n'
            f'tickers = ["AAA", "BBB"]\n\n[alpaca]\nurl = "{server.url}"\nbackoff_s = 0.01\n'
        )
        code = main(
            [
                "experiment",
                "podracer",
                str(tmp_path / "run"),
                "--dataset",
                str(recipe),
                "--pods",
                "2",
                "--pod-steps",
                "512",
                "--workers",
                "1",
                "--baselines",
                "sb3",
                "--snapshot-every",
                "0.5",
            ]
        )
        asked = {query.get("symbols") for path, query in server.requests if path.startswith("/v2/stocks/bars")}
    assert code == 0 and asked == {"AAA", "BBB", "QQQ"}
    names = [row["strategy"] for row in _table(tmp_path / "run")]
    assert "QQQ buy-and-hold" in names and "Vanilla PPO" in names and "SB3 PPO (seed 0)" in names
    dates = experiment_dates("2020-06-01", "2021-03-01", None)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["period"]["name"] == "test" and report["period"]["start"] >= dates["val_end"]


@pytest.mark.parametrize("stop", ["signal", "disk"])
def test_a_stopped_experiment_names_its_stage_and_the_command_that_resumes_it(
    stop, tmp_path: Path, capsys, monkeypatch
):
    """A signal (exit 143 for SIGTERM) or a full disk (exit 2) in a stage: one line naming the
    stage, what is kept, and the same command, which parses back to the same options."""
    import signal
    import shlex

    import podracer.experiment as experiment
    from trader.errors import UnwritableError
    from trader.stopping import Interrupted

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_DAILY_RECIPE)
    run = tmp_path / "run"

    def stopped(config, on_progress):
        on_progress(f"vanilla PPO: training in {run / 'ppo'} ...")
        if stop == "signal":
            raise Interrupted(signal.SIGTERM, 4096, run / "ppo")
        raise UnwritableError(f"cannot write {run / 'ppo' / 'metrics.parquet'}: No space left on device")

    monkeypatch.setattr(experiment, "run_experiment", stopped)
    args = ["experiment", "podracer", str(run), "--dataset", str(recipe), "--pods", "2", "--seed", "4"]
    assert main(args) == (143 if stop == "signal" else 2)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    what = "interrupted (SIGTERM)" if stop == "signal" else "error: cannot write"
    assert (
        line.startswith(what)
        and f"during 'vanilla PPO: training in {run / 'ppo'}'; every finished stage is kept" in line
    )
    command = shlex.split(line.split("resume with the same command: ", 1)[1])
    assert command[:4] == ["trader", "experiment", "podracer", str(run)]
    pairs = dict(zip(command[4::2], command[5::2], strict=True))
    assert pairs == {"--dataset": str(recipe), "--pods": "2", "--seed": "4"}
