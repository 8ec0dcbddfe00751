"""`trader demo` end to end on a tiny synthetic recipe: data, brief PPO, backtest."""

from __future__ import annotations

import json
from pathlib import Path

from trader.cli import main

TINY_RECIPE = """
name = "tiny-synthetic"
description = "4 synthetic tickers over 8 sessions, for the demo test"
source = "synthetic"
interval = "1min"
start = "2023-01-03"
end = "2023-01-13"
train_end = "2023-01-09"
val_end = "2023-01-11"

[synthetic]
n_tickers = 4
seed = 1
"""


def test_demo_trains_and_backtests_into_the_run_dir(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    run_dir = tmp_path / "run"
    code = main(["demo", "--dataset", str(recipe), "--run-dir", str(run_dir), "--steps", "512", "--num-envs", "8"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Equal-weight buy-and-hold" in out and "PPO" in out
    report = json.loads((run_dir / "report.json").read_text())
    assert report["period"]["name"] == "test"
    names = {p.stem for p in (run_dir / "backtests").glob("*.parquet")}
    assert {"ppo", "benchmark", "equal_weight", "equal_weight_daily"} <= names
    assert (run_dir / "checkpoints" / "best.safetensors").is_file()
    assert (run_dir / "metrics.parquet").is_file()


def test_demo_with_a_missing_recipe_exits_2(tmp_path: Path, capsys) -> None:
    code = main(["demo", "--dataset", str(tmp_path / "absent.toml"), "--run-dir", str(tmp_path / "run")])
    assert code == 2
    assert "absent" in capsys.readouterr().err
