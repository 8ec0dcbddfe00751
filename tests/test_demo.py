"""`trader demo` end to end at tiny budgets: data, a tournament on a real 2-process dask
cluster, an SB3 baseline, the test-period backtest with every row of the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podracer.cli import main
from podracer.cli.demo import free_run_dir

TINY_EDGE_RECIPE = """
name = "tiny-edge-daily"
description = "8 synthetic tickers in daily bars over three years, a planted 5-day mean reversion"
source = "synthetic"
interval = "1D"
start = "2020-01-02"
end = "2023-01-01"
train_end = "2021-07-01"
val_end = "2022-03-01"

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


@pytest.fixture(autouse=True)
def _shared_data_dir(tmp_path: Path, monkeypatch):
    """The dask workers are new processes: they must find the panel the demo built."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.slow
def test_the_demo_runs_tournament_baseline_and_backtest_into_one_run_dir(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    run_dir = tmp_path / "runs" / "demo"
    code = main(
        [
            "demo",
            "--dataset",
            str(recipe),
            str(run_dir),
            "--minutes",
            "5",
            "--pods",
            "2",
            "--workers",
            "2",
            "--pod-steps",
            "1024",
            "--no-tear-sheet",
        ]
    )
    assert code == 0
    out, err = capsys.readouterr()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["period"]["name"] == "test"
    rows = set(report["metrics"])
    assert {"best", "sb3-ppo-s0", "benchmark", "equal_weight", "oracle"} <= rows
    for name in ("best", "SB3 PPO", "Oracle"):
        assert name in out
    # An ensemble row only where pods cleared the membership bar; the result is stated either way.
    selection = json.loads((run_dir / "selection.json").read_text())
    assert ("ensemble" in rows) == bool(selection["members"]) == (selection["ensemble_score"] is not None)
    assert (
        selection["sentence"] in " ".join(err.split())
        and selection["sentence"] in report["selection"]["tournament"]["sentence"]
    )
    assert f"trader dashboard {run_dir.parent}" in out
    # the SB3 baseline: a start line and an end line, no line per validation pass (issue 75, finding 11)
    assert [line.split(":")[0] for line in err.splitlines() if "sb3" in line.lower()] == ["baseline", "baseline"], err
    board = json.loads((run_dir / "leaderboard.json").read_text())
    assert len(board["entries"]) == 2  # the pod budget stopped it, not the 5 minutes
    trained = json.loads((run_dir / "baselines" / "sb3-ppo-s0" / "baseline.json").read_text())
    assert trained["budget"]["terms"] == "equal wall-clock" and trained["budget"]["seconds"] < 300
    assert (run_dir / "tournament.toml").is_file() and (
        run_dir / "baselines" / "sb3-ppo-s0" / "baseline.json"
    ).is_file()
    # Trained and scored under the demo's rules: 5 bp per side, target weights.
    assert report["config"]["buy_cost"] == report["config"]["sell_cost"] == pytest.approx(5e-4)
    saved = json.loads((run_dir / "baselines" / "sb3-ppo-s0" / "baseline.json").read_text())
    assert saved["env_config"]["buy_cost"] == pytest.approx(5e-4) and saved["env_config"]["action_mode"] == "weights"
    # The cost breakdown and the breakeven cost, printed and in report.json, for every strategy.
    assert "Breakeven" in out and "Commission" in out
    assert set(report["costs"]) == set(report["breakeven"]) == rows
    assert report["breakeven"]["oracle"]["multiples"] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]


def test_the_demo_never_writes_into_a_run_that_exists(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text("{}")
    code = main(["demo", str(run_dir)])
    assert code == 2
    assert "holds a run already (report.json): give another run directory" in capsys.readouterr().err
    assert (run_dir / "report.json").read_text() == "{}"


def test_a_second_demo_goes_beside_the_first(tmp_path: Path) -> None:
    first = tmp_path / "demo"
    assert free_run_dir(first) == first
    first.mkdir()
    assert free_run_dir(first) == first  # empty: still free
    (first / "x").write_text("")
    assert free_run_dir(first) == tmp_path / "demo-2"
    (tmp_path / "demo-2").mkdir()
    (tmp_path / "demo-2" / "x").write_text("")
    assert free_run_dir(first) == tmp_path / "demo-3"


def test_demo_with_a_missing_recipe_exits_2(tmp_path: Path, capsys) -> None:
    code = main(["demo", "--dataset", str(tmp_path / "absent.toml"), str(tmp_path / "run")])
    assert code == 2
    assert "absent" in capsys.readouterr().err


def test_demo_rejects_a_budget_that_is_not_positive(tmp_path: Path, capsys) -> None:
    code = main(["demo", "--minutes", "0", str(tmp_path / "run")])
    assert code == 2
    assert "--minutes" in capsys.readouterr().err
