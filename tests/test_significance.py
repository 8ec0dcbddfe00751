"""dashboards.significance: the figures draw exactly what trader.stats computes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dashboards import significance
from trader import stats
from trader.backtesting.evidence import series_evidence


def _evidence() -> dict[str, dict]:
    rng = np.random.default_rng(0)
    trials = rng.normal(0.0, 1.0, 14)
    return {
        "best pod": series_evidence(rng.normal(0.001, 0.01, 400), n_trials=14, trial_sharpes=trials, reps=100),
        "equal-weight": series_evidence(rng.normal(0.0004, 0.01, 400), reps=100),
        "short": series_evidence(rng.normal(0.0, 0.01, 20), reps=100),
    }


def test_the_interval_figure_draws_the_evidence_bars() -> None:
    evidence = _evidence()
    figure = significance.interval_figure(evidence)
    assert len(figure.data) == 2
    for trace, key in zip(figure.data, significance.INTERVALS):
        for row, name in enumerate(["best pod", "equal-weight"]):
            sharpe = evidence[name]["sharpe"]
            low, high = evidence[name][key]
            assert trace.x[row] == sharpe
            assert trace.error_x.array[row] == pytest.approx(high - sharpe)
            assert trace.error_x.arrayminus[row] == pytest.approx(sharpe - low)
        assert math.isnan(trace.x[2]) and math.isnan(trace.error_x.array[2])  # "short": no number, no bar
    assert list(figure.layout.yaxis.ticktext) == ["best pod", "equal-weight", "short"]
    assert "95%" in figure.layout.title.text


def test_the_interval_frame_keeps_the_sentences_and_nans() -> None:
    evidence = _evidence()
    frame = significance.interval_frame(evidence)
    assert frame.loc["best pod", "dsr"] == evidence["best pod"]["dsr"]
    assert math.isnan(frame.loc["equal-weight", "dsr"])
    assert frame.loc["short", "sentence"].startswith("no evidence: only 20 daily returns")


def test_the_trial_figure_sorts_the_trials_and_draws_the_reports_null_maxima() -> None:
    sharpes = [0.4, -1.2, 2.0, 0.1, float("nan")]
    luck = {"zero-Sharpe trials": 1.3, "trials' spread": 1.9, "not computed": None}
    figure = significance.trial_sharpe_figure(
        sharpes, labels=["a", "b", "c", "d", "e"], luck=luck, selected={"best": 2.0}
    )
    points = figure.data[0]
    assert list(points.y[:4]) == [2.0, 0.4, 0.1, -1.2] and math.isnan(points.y[4])
    assert list(points.text) == ["c", "a", "d", "b", "e"]
    assert [shape.y0 for shape in figure.layout.shapes] == pytest.approx([1.3, 1.9, 2.0])


def test_the_trial_figure_without_null_maxima_draws_only_the_selection() -> None:
    assert significance.trial_sharpe_figure([1.0]).layout.shapes == ()
    assert (
        len(significance.trial_sharpe_figure([1.0, 0.5], luck={"x": float("nan")}, selected={"b": 1.0}).layout.shapes)
        == 1
    )


def test_the_pbo_figure_is_the_logit_histogram_of_cscv() -> None:
    result = stats.pbo_cscv(np.random.default_rng(1).normal(0, 0.01, (10, 300)), n_blocks=8)
    figure = significance.pbo_figure(result.logits)
    assert np.array_equal(figure.data[0].x, result.logits)
    assert figure.layout.shapes[0].x0 == 0.0
    assert figure.layout.title.text.endswith(f"PBO = {result.pbo:.2f}")
    assert significance.pbo_figure([], None).layout.title.text == "Probability of backtest overfitting"


def test_counts_agree_with_their_nouns() -> None:
    """Issue 75, finding 11: "1 trials". A count of one takes the singular, in every sentence that prints one."""
    from trader.backtesting.evidence import sentences, spa_verdict, verdict
    from trader.names import counted

    assert (counted(1, "trial"), counted(0, "trial"), counted(1250, "trial")) == ("1 trial", "0 trials", "1,250 trials")
    assert (
        counted(1, "strategy", "strategies") == "1 strategy" and counted(2, "strategy", "strategies") == "2 strategies"
    )
    spa = stats.SPAResult(0.5, 0.4, 0.6, n_trials=1, days=100, block_length=5, reps=10)
    assert spa_verdict(spa, "equal weight").endswith("(SPA, 1 trial)")
    one = {"confidence": 0.95, "psr": 0.99, "dsr": 0.99, "dsr_null": 0.99, "n_trials": 1}
    assert (
        verdict(one)
        == "above zero at 95% after 1 trial (DSR 0.99 against 1 zero-Sharpe trial; 0.99 from the trials' own spread)"
    )
    selection = {"n_trials": 1, "winner": {"sharpe": 1.0, "sentence": "above zero"}}
    assert sentences({}, selection, {})[0].startswith("Selection on validation (1 trial):")
