"""benchmarks/learning_costs.py end to end on a small recipe (PPO trained four times, briefly)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmark():
    spec = importlib.util.spec_from_file_location("learning_costs", ROOT / "benchmarks" / "learning_costs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_learning_costs_script_on_a_small_recipe(tmp_path, monkeypatch):
    """Both agents of each seed are backtested under the costly model; the replay's costs by
    term add up to the backtest's costs, and the table has a verdict per seed. A second run
    into the same --runs folder reuses the trained agents and gives the same table."""
    (tmp_path / "synthetic-edge-minute.toml").write_text(
        'name = "synthetic-edge-minute"\nsource = "synthetic"\nstart = "2023-01-03"\nend = "2023-03-01"\n'
        'train_end = "2023-02-01"\nval_end = "2023-02-15"\n[synthetic]\nn_tickers = 10\nseed = 0\n'
        '[synthetic.edge]\nkind = "mean_reversion"\nstrength_sharpe = 30.0\nhorizon = 30\nfraction = 1.0\n'
    )
    monkeypatch.setenv("PODRACER_RECIPES_PATH", str(tmp_path))
    out, again, runs = tmp_path / "costs.json", tmp_path / "again.json", tmp_path / "runs"
    assert _benchmark().main(["--quick", "--runs", str(runs), "--out", str(out)]) == 0
    assert sorted(p.name for p in runs.iterdir()) == ["costly-0", "costly-1", "flat-0", "flat-1"]
    assert _benchmark().main(["--quick", "--runs", str(runs), "--out", str(again)]) == 0
    payload = json.loads(out.read_text())
    reused = json.loads(again.read_text())
    assert reused["results"] == payload["results"] and set(reused["train_seconds"].values()) == {0.0}
    assert set(payload["results"]) == {"0", "1"} and len(payload["verdicts"]) == 2
    for rows in payload["results"].values():
        assert set(rows) == {"costly", "flat"}
        for row in rows.values():
            parts = row["commission_bp"] + row["spread_bp"] + row["impact_bp"] + row["borrow_bp"]
            assert row["costs_bp"] == pytest.approx(parts, rel=1e-9, abs=1e-9)
            assert row["spread_bp"] > 0 and row["impact_bp"] > 0  # the costly model charges both agents
            assert row["commission_bp"] == 0.0
            assert 0.0 <= row["unfilled_share"] <= 1.0
