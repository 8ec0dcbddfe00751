"""Every validation pass is a trial: recorded with its daily returns, counted, and
never informed by the test period (issue: "Is the edge real?")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs.data import from_frame
from market_envs.config import EnvConfig
from market_fixtures import random_walk_frame
from trader import metrics, rundir
from trader.training import train

TINY_PPO = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}


def daily_panel(seed: int = 3):
    """Three random walks over 170 business days; train / validation / test at 100 / 135
    (a validation pass then has 34 daily returns: enough for every statistic)."""
    frame = random_walk_frame(3, 170, seed=seed, start="2024-01-02", freq="B")
    panel = from_frame(frame, name="walk")
    stamps = panel.timestamps
    return replace(panel, meta={**panel.meta, "train_end": str(stamps[100].date()), "val_end": str(stamps[135].date())})


def scramble_after(panel, when: str, seed: int = 9):
    """The panel with every price and volume after ``when`` replaced by another walk."""
    start = int(panel.timestamps.searchsorted(pd.Timestamp(when, tz=panel.timestamps.tz)))
    features = panel.features.clone()
    rng = np.random.default_rng(seed)
    factor = torch.tensor(rng.uniform(0.5, 2.0, size=features[start:].shape), dtype=features.dtype)
    features[start:] = features[start:] * factor
    return replace(panel, features=features)


def run(panel, root: Path):
    return train(
        "ppo",
        panel,
        TINY_PPO,
        root,
        steps=1024,
        num_envs=4,
        eval_every=256,
        seed=0,
        env_config=EnvConfig(episode_length=40),
    )


def test_trials_are_every_validation_pass_and_the_test_period_cannot_move_them(tmp_path: Path) -> None:
    panel = daily_panel()
    first = run(panel, tmp_path / "a")
    keys, returns = rundir.read_trials(tmp_path / "a" / rundir.TRIALS)
    validations = first.metrics.dropna(subset=["val_score"])
    assert len(keys) == len(validations) >= 4
    assert keys["step"].tolist() == validations["step"].astype(int).tolist()
    np.testing.assert_allclose(keys["score"], validations["val_score"])
    assert returns.columns.min() >= pd.Timestamp(panel.meta["train_end"])
    assert returns.columns.max() < pd.Timestamp(panel.meta["val_end"])
    for (_, row), score in zip(returns.iterrows(), keys["score"], strict=True):  # the score is the trial's Sharpe
        assert metrics.sharpe_ratio(row.to_numpy(), period=metrics.DAILY) == pytest.approx(score)

    run(scramble_after(panel, panel.meta["val_end"]), tmp_path / "b")
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "a" / rundir.TRIALS), pd.read_parquet(tmp_path / "b" / rundir.TRIALS)
    )
    best = [rundir.read_json(tmp_path / r / "checkpoints" / "best.json")["info"] for r in ("a", "b")]
    assert best[0] == best[1]  # the same snapshot is selected

    changed = run(scramble_after(panel, panel.meta["train_end"]), tmp_path / "c")  # the control: validation matters
    assert not np.allclose(changed.metrics.dropna(subset=["val_score"])["val_score"], validations["val_score"])


def test_trials_frame_aligns_days_and_round_trips(tmp_path: Path) -> None:
    days = pd.date_range("2024-03-01", periods=4, freq="D")
    daily = [pd.Series([0.01, -0.02, 0.0, 0.03], index=days), pd.Series([0.02, 0.01], index=days[1:3])]
    keys = pd.DataFrame({"pod_id": ["p0000", "p0001"], "step": [10, 20], "score": [1.5, -0.5]})
    rundir.write_parquet(tmp_path / "trials.parquet", rundir.trials_frame(keys, daily))
    got_keys, returns = rundir.read_trials(tmp_path / "trials.parquet")
    pd.testing.assert_frame_equal(got_keys, keys)
    assert list(returns.columns) == list(days)
    assert returns.iloc[0].tolist() == [0.01, -0.02, 0.0, 0.03]
    assert np.isnan(returns.iloc[1, 0]) and returns.iloc[1, 1:3].tolist() == [0.02, 0.01]


def test_the_trials_sharpe_ratios_are_of_their_daily_returns_not_the_ranking_score(tmp_path: Path) -> None:
    """Validation ranks by the bars' Sharpe ratio; the DSR deflates by the spread of the trials' daily Sharpe
    ratios, so `run_trials` reads them from the daily returns (a trial of one day has none: NaN)."""
    from trader.backtesting.evidence import run_trials

    rng = np.random.default_rng(4)
    days = pd.bdate_range("2024-03-01", periods=30)
    daily = [pd.Series(rng.normal(0.001, 0.01, 30), index=days) for _ in range(3)]
    daily.append(pd.Series([0.01], index=days[:1]))
    keys = pd.DataFrame({"step": [10, 20, 30, 40], "score": [9.0, 8.0, 7.0, 6.0]})
    rundir.write_parquet(tmp_path / rundir.TRIALS, rundir.trials_frame(keys, daily))
    sharpes = run_trials(tmp_path, "train", None, [])["best"].sharpes
    np.testing.assert_allclose(sharpes[:3], [metrics.sharpe_ratio(d.to_numpy()) for d in daily[:3]], rtol=1e-12)
    assert np.isnan(sharpes[3])


def test_a_baselines_trial_sharpes_are_its_daily_sharpe_ratios_not_its_ranking_score(tmp_path: Path) -> None:
    """A baseline's sidecar keeps each validation's daily Sharpe ratio (``sharpe``) beside its ranking score (the
    bars' Sharpe ratio); the DSR's trial spread is of the former. A pass without one is counted, as NaN: the score
    never stands in for it."""
    from trader.backtesting.evidence import run_trials

    rows = [{"step": 10, "score": 30.0, "sharpe": 2.0}, {"step": 20, "score": 31.0, "sharpe": None}]
    old = [{"step": 10, "score": 1.5}, {"step": 20, "score": -0.5, "sharpe": -0.4}]
    for name, validation in (("sb3-ppo-s0", rows), ("sb3-sac-s0", old)):
        folder = tmp_path / name
        folder.mkdir()
        rundir.write_json(
            folder / rundir.BASELINE_SIDECAR, {"format_version": rundir.BASELINE_VERSION, "validation": validation}
        )
    found = run_trials(tmp_path, "train", None, [tmp_path / "sb3-ppo-s0", tmp_path / "sb3-sac-s0"])
    assert set(found) == {"sb3-ppo-s0", "sb3-sac-s0"}
    np.testing.assert_array_equal(found["sb3-ppo-s0"].sharpes, [2.0, np.nan])
    np.testing.assert_array_equal(found["sb3-sac-s0"].sharpes, [np.nan, -0.4])


def test_the_report_deflates_the_selected_snapshot_by_its_trials_and_judges_the_selection(tmp_path: Path) -> None:
    from trader.backtesting.engine import run_backtest
    from trader.backtesting.runs import backtest_config, contents_trials, read_run, run_selection, run_strategies

    panel = daily_panel()
    run(panel, tmp_path / "a")
    keys, _ = rundir.read_trials(tmp_path / "a" / rundir.TRIALS)
    contents = read_run(tmp_path / "a")
    trials = contents_trials(contents)
    best_step = rundir.read_json(tmp_path / "a" / "checkpoints" / "best.json")["info"]["step"]
    assert set(trials) == {"best"} and trials["best"].count == len(keys)
    assert keys["step"][trials["best"].winner] == best_step
    config = backtest_config(contents, tear_sheet=False)
    selection = run_selection(panel, trials, config, "cpu")
    run_backtest(
        panel,
        run_strategies(contents),
        period="test",
        config=config,
        run_dir=tmp_path / "a",
        trials=trials,
        selection=selection,
    )
    report = rundir.read_json(tmp_path / "a" / "report.json")
    assert report["evidence"]["best"]["n_trials"] == len(keys)  # selected: deflated by its trials
    assert report["evidence"]["final"]["n_trials"] is None and report["evidence"]["equal_weight"]["n_trials"] is None
    assert report["evidence"]["best"]["psr"] is not None  # 35 test days: enough for every statistic
    chosen = report["selection"]
    assert chosen["n_trials"] == len(keys) and chosen["pbo"]["n_trials"] == len(keys)
    assert chosen["winner"]["sharpe"] == pytest.approx(keys["score"][trials["best"].winner], rel=0.05)
    assert set(chosen["spa"]) == {"equal_weight"} and 0 <= chosen["spa"]["equal_weight"]["pvalue_consistent"] <= 1
    spa = chosen["spa"]["equal_weight"]  # the key stays; the sentence names the strategy as the report does
    assert spa["benchmark"] == "equal_weight" and "beat Equal-weight buy-and-hold: p = " in spa["sentence"]
    markdown = (tmp_path / "a" / "report.md").read_text()
    assert f"Selection on validation ({len(keys)} trials)" in markdown and "(SPA," in markdown
    assert "equal_weight" not in markdown.split("Selection on validation")[1]
