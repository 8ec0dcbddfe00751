"""A run reproduces from its folder: config.toml records every input, `trader train
--config RUN/config.toml` trains the same weights, and the README's Python tour prints
the numbers of its command-line column.

The data set is a small daily market with a planted edge, found by name as the README's
``synthetic-edge-daily`` is (through ``PODRACER_RECIPES_PATH``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

import trader
from trader import rundir
from podracer.cli import main

EDGE_RECIPE = """
name = "tour-edge"
description = "8 synthetic tickers, daily bars 2016-2019, a planted 5-day mean reversion"
source = "synthetic"
interval = "1D"
start = "2016-01-04"
end = "2020-01-01"
train_end = "2018-01-01"
val_end = "2019-01-01"

[synthetic]
n_tickers = 8
seed = 3

[synthetic.edge]
kind = "mean_reversion"
strength_sharpe = 8.0
fraction = 1.0
horizon = 5
seed = 0
"""
STEPS, ENVS = 1024, 8


@pytest.fixture
def tour_edge(tmp_path: Path, monkeypatch) -> str:
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "tour-edge.toml").write_text(EDGE_RECIPE)
    monkeypatch.setenv("PODRACER_RECIPES_PATH", str(folder))
    return "tour-edge"


def weights(run_dir: Path, name: str) -> dict:
    return load_file(run_dir / "checkpoints" / f"{name}.safetensors")


def assert_same_weights(a: Path, b: Path) -> None:
    for name in ("best", "final"):
        first, second = weights(a, name), weights(b, name)
        assert first.keys() == second.keys()
        for key in first:
            assert first[key].dtype == second[key].dtype and bool((first[key] == second[key]).all()), (name, key)


def cli_train(dataset: str, run_dir: Path, *more: str) -> None:
    code = main(
        [
            "train",
            "--algo",
            "ppo",
            "--dataset",
            dataset,
            "--preset",
            "market",
            "--steps",
            str(STEPS),
            "--num-envs",
            str(ENVS),
            "--eval-every",
            "512",
            str(run_dir),
            *more,
        ]
    )
    assert code == 0


def test_config_toml_records_every_input_and_trains_the_same_run_again(tour_edge: str, tmp_path: Path, capsys) -> None:
    first, again = tmp_path / "first", tmp_path / "again"
    cli_train(tour_edge, first, "--seed", "4")
    values = rundir.read_toml(first / "config.toml")
    assert values["preset"] == "market" and values["seed"] == 4 and values["library_version"] == trader.__version__
    env = values["env"]
    rules = env["env_config"]
    assert env["dataset"] == tour_edge and set(env["dataset_periods"]) == {"train", "validation", "test"}
    assert rules["action_mode"] == "weights" and rules["market_neutral"] and rules["return_windows"] == [5]
    assert rules["buy_cost"] == rules["sell_cost"] == 0.0005 and env["cost_model"].startswith("flat")
    assert "costs" in rules  # the cost model's every term, off or on
    assert main(["train", "--config", str(first / "config.toml"), str(again)]) == 0  # nothing else given
    assert_same_weights(first, again)
    assert rundir.read_toml(again / "config.toml") == values


def test_a_rerun_of_a_changed_data_set_is_refused(tour_edge: str, tmp_path: Path, capsys) -> None:
    first = tmp_path / "first"
    cli_train(tour_edge, first)
    values = rundir.read_toml(first / "config.toml")
    values["env"]["dataset_periods"]["test"][1] = "2030-01-01 00:00:00-05:00"
    rundir.write_toml(tmp_path / "edited.toml", values)
    capsys.readouterr()
    assert main(["train", "--config", str(tmp_path / "edited.toml"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "has other periods than the run recorded" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_the_readme_python_tour_prints_the_numbers_of_its_cli_column(tour_edge: str, tmp_path: Path, capsys) -> None:
    """README, "A five-minute tour": the Python snippet (at a tiny budget) and the commands
    of its table train the same weights and backtest the same test period under the same
    rules: equal metrics for the agent and the baselines."""
    from market_envs.data import load
    from podracer.presets import edge_rules, market_algo_config

    python_run, cli_run = tmp_path / "py", tmp_path / "cli"
    # the README's snippet, with its budget cut to this test's
    data = load(tour_edge)
    rules = edge_rules(data.meta["edge"], cost=0.0005)
    config = market_algo_config("ppo", steps=STEPS, num_envs=ENVS)
    trader.train("ppo", data, config, python_run, env_config=rules, steps=STEPS, num_envs=ENVS, eval_every=512)
    result = trader.backtest(data, {"ppo": python_run / "checkpoints" / "best"}, period="test", run_dir=python_run)
    # its command-line column
    cli_train(tour_edge, cli_run, "--eval-every", "512")
    assert main(["backtest", str(cli_run), "--no-tear-sheet"]) == 0
    report = json.loads((cli_run / "report.json").read_text())
    assert_same_weights(python_run, cli_run)
    assert result.cost_model["buy_cost"] == 0.0005  # the run's rules, not the backtest's default 0.1%
    assert Path(result.files["report.json"]).parent == python_run / "reports" / "strategies-ppo"
    own = trader.backtest(run_dir=python_run)  # the table's row: the run's own strategies, its own report
    assert Path(own.files["report.json"]) == python_run / "report.json"
    assert own.metrics.loc["best"].equals(result.metrics.loc["ppo"])
    rows = {
        "ppo": "best",
        "oracle": "oracle",
        "equal_weight": "equal_weight",
        "equal_weight_daily": "equal_weight_daily",
    }
    assert set(rows.values()) <= set(report["metrics"]) and set(rows) <= set(result.metrics.index)
    for ours, theirs in rows.items():
        for column, value in report["metrics"][theirs].items():
            mine = result.metrics.loc[ours, column]
            assert (value is None and mine != mine) or mine == pytest.approx(value, rel=1e-12, abs=1e-12), (
                ours,
                column,
            )
