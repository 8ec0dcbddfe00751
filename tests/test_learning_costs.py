"""benchmarks/learning_costs.py end to end on small recipes (every agent trained briefly)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import learning_costs

RECIPE = """name = "{name}"
source = "synthetic"
start = "2023-01-03"
end = "2023-02-01"
train_end = "2023-01-18"
val_end = "2023-01-25"
[synthetic]
n_tickers = 6
seed = 0
[synthetic.model]
tail_df = 4.0
half_spread_bps = 1.5
"""
EDGE = '[synthetic.edge]\nkind = "mean_reversion"\nstrength_sharpe = 30.0\nhorizon = 60\nfraction = 1.0\n'


@pytest.mark.slow
def test_learning_costs_script_on_small_recipes(tmp_path, monkeypatch):
    """Every agent of every seed and both oracles are backtested under the institutional model on
    validation and test; the claims and the paired tests are printed; a second run into the same
    --runs folder reuses the trained agents and gives the same results."""
    (tmp_path / "synthetic-edge-minute-costs.toml").write_text(RECIPE.format(name="synthetic-edge-minute-costs") + EDGE)
    (tmp_path / "synthetic-minute-costs.toml").write_text(RECIPE.format(name="synthetic-minute-costs"))
    monkeypatch.setenv("PODRACER_RECIPES_PATH", str(tmp_path))
    out, again, runs = tmp_path / "costs.json", tmp_path / "again.json", tmp_path / "runs"
    assert learning_costs.main(["--quick", "--runs", str(runs), "--out", str(out)]) == 0
    assert sorted(p.name for p in runs.iterdir()) == [
        f"{v}-{s}" for v in ("ppo-costs", "ppo-null", "ppo-zero", "sac-costs") for s in (0, 1)
    ]
    assert learning_costs.main(["--quick", "--runs", str(runs), "--out", str(again)]) == 0
    payload, reused = json.loads(out.read_text()), json.loads(again.read_text())
    assert reused["results"] == payload["results"] and set(reused["train_seconds"].values()) == {0.0}
    assert set(payload["results"]) == {"0", "1"}
    for per in payload["results"].values():
        assert set(per) == {"validation", "test", "null_test"}
        for period in ("validation", "test"):
            rows = per[period]
            assert set(rows) == {"ppo-costs", "ppo-zero", "sac-costs", "oracle", "oracle_costs"}
            assert rows["oracle_costs"]["label"].startswith("Oracle under costs")
            for row in rows.values():
                assert row["costs_capital_bps"] >= 0 and 0.0 <= row["unfilled"] <= 1.0
            assert rows["oracle"]["costs_bps"] > 0  # the institutional model charges
    claims = payload["claims"]
    assert any("Wilcoxon one-sided p" in line for line in claims)
    assert any(line.startswith("edge-free twin") and "DSR" in line for line in claims)
    assert len(payload["summary"]["null_dsr"]) == 2
    # the tiny test period has fewer days than a DSR needs (trader.stats.MIN_DAYS): NaN, said so
    assert all(d != d or 0.0 <= d <= 1.0 for d in payload["summary"]["null_dsr"])


def test_untrained_turnover_falls_with_the_noise_under_the_linear_aim(tmp_path, monkeypatch):
    """--untrained: the linear aim trades less with less noise, and less than the normalized book."""
    (tmp_path / "synthetic-edge-minute-costs.toml").write_text(RECIPE.format(name="synthetic-edge-minute-costs") + EDGE)
    monkeypatch.setenv("PODRACER_RECIPES_PATH", str(tmp_path))
    module = learning_costs
    data = module.load("synthetic-edge-minute-costs")
    loud = module.untrained_turnover(data, {}, {"ppo": {"init_log_std": -0.5}}, [0], steps=60)
    quiet = module.untrained_turnover(data, {}, {"ppo": {"init_log_std": -2.5}}, [0], steps=60)
    today, linear = "today (normalized, rate 1, no band)", "linear, rate 1, no band"
    assert quiet[linear] < 0.5 * loud[linear]  # the linear aim's noise trades with its size
    assert quiet[today] > 2 * quiet[linear]  # the normalized book rescales small noise up (6 stocks: up to gross 1)


def test_the_null_agents_dsr_is_the_psr_above_the_best_of_the_trials():
    """`deflated`: one trial is the PSR against 0; more trials raise the bar, so the DSR falls."""
    from trader import stats

    module = learning_costs
    rng = np.random.default_rng(0)
    daily = (rng.standard_normal(63) * 0.01 + 0.002).tolist()
    moments = stats.sharpe_moments(np.asarray(daily))
    one = module.deflated(daily, 1, [2.0])
    assert one == pytest.approx(
        stats.probabilistic_sharpe_ratio(moments.sharpe, 0.0, moments.days, moments.skew, moments.kurtosis), rel=1e-9
    )
    assert module.deflated(daily, 5, [2.0, -1.0, 0.5, 3.0, 1.0]) < one
