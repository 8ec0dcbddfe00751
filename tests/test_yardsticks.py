"""The classical factor portfolios (trader.backtesting.yardsticks): known answers, no look-ahead,
the bars before a period read, trading through the env, and the report's verdicts against them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from golden.case import session_panel

from trader.backtesting import BacktestConfig, run_backtest
from trader.backtesting.yardsticks import (
    DAILY,
    DOLLAR_NEUTRAL,
    MINUTE,
    YARDSTICKS,
    FactorParams,
    applies,
    yardstick_weights,
)
from trader.errors import ConfigError

SHORT = FactorParams(momentum_lookback=6, momentum_skip=2, reversal_lookback=3, volatility_window=5, fraction=0.25)
"""Windows that fit a test panel of a few sessions."""
QUIET = BacktestConfig(tear_sheet=False, factors=SHORT)


def _perturbed_after(data, bar: int, seed: int):
    """The same panel with every price and benchmark value after `bar` scaled at random."""
    rng = np.random.default_rng(seed)
    features, bench = data.features.clone(), data.benchmark.clone()
    features[bar + 1 :, :, :4] *= torch.from_numpy(rng.uniform(0.5, 1.5, features[bar + 1 :, :, :4].shape)).float()
    bench[bar + 1 :] *= torch.from_numpy(rng.uniform(0.5, 1.5, bench[bar + 1 :].shape)).float()
    return replace(data, features=features, benchmark=bench)


def _wavy(obs: torch.Tensor) -> torch.Tensor:
    """A policy that trades a fixed pattern of the six tickers of these tests' panels."""
    return 0.5 * torch.sin(torch.arange(6.0) + obs[:, :1] * 0.0 + obs.shape[0]).expand(obs.shape[0], -1)


def _panel_from_closes(closes: np.ndarray):
    """A daily panel of the given closes [T, N] (open = high = low = close)."""
    data = session_panel(n_tickers=closes.shape[1], n_days=closes.shape[0], bars_per_day=1, seed=0, benchmark=False)
    close = torch.as_tensor(closes, dtype=torch.float32)
    features = data.features.clone()
    for column in ("open", "high", "low", "close"):
        features[:, :, data.feature_names.index(column)] = close
    return replace(data, features=features, tradable=torch.ones_like(close, dtype=torch.bool))


def test_momentum_and_reversal_rank_the_trailing_returns_known_answer() -> None:
    # Four stocks, returns over the window: +30%, +10%, -10%, -30% (in that order of the columns).
    ends = np.array([1.3, 1.1, 0.9, 0.7])
    closes = np.vstack([np.ones(4), np.ones(4), ends, ends, ends])  # bars 0..4
    panel = _panel_from_closes(closes)
    params = FactorParams(momentum_lookback=4, momentum_skip=1, reversal_lookback=2, volatility_window=2, fraction=0.25)
    momentum = yardstick_weights("momentum", panel, params)
    # Bar 4: the return from bar 0 to bar 3 ranks the columns 0 > 1 > 2 > 3; a quarter a side: one stock.
    assert momentum[4].tolist() == [0.5, 0.0, 0.0, -0.5]
    assert (momentum[:4] == 0).all()  # a window of 4 bars is not known before bar 4
    assert yardstick_weights("momentum_long", panel, params)[4].tolist() == [1.0, 0.0, 0.0, 0.0]
    reversal = yardstick_weights("reversal", panel, params)
    # Bar 2: the last two bars' returns rank the same way; reversal buys the loser, sells the winner.
    assert reversal[2].tolist() == [-0.5, 0.0, 0.0, 0.5]
    # Flat over bars 2..4: every score ties at 0, and ties go by ticker order (the first is "top").
    assert reversal[4].tolist() == [0.5, 0.0, 0.0, -0.5]
    assert reversal.sum(dim=1).abs().max() == 0


def test_inverse_volatility_weights_are_one_over_the_trailing_standard_deviation() -> None:
    rng = np.random.default_rng(0)
    scale = np.array([0.01, 0.02, 0.04])
    closes = np.exp(np.cumsum(rng.normal(0, 1, (40, 3)) * scale, axis=0))
    panel = _panel_from_closes(closes)
    weights = yardstick_weights("inverse_vol", panel, replace(DAILY, volatility_window=10))
    log_returns = np.diff(np.log(closes.astype(np.float32).astype(np.float64)), axis=0)
    for t in (10, 25, 39):
        std = log_returns[t - 10 : t].std(axis=0, ddof=1)
        expected = (1 / std) / (1 / std).sum()
        assert weights[t].double().numpy() == pytest.approx(expected, rel=1e-5)
    assert (weights[:10] == 0).all() and weights[10:].sum(dim=1).double().numpy() == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("name", YARDSTICKS)
def test_a_yardsticks_weights_at_bar_t_never_use_a_price_after_t(name: str) -> None:
    data = session_panel(n_tickers=6, n_days=4, bars_per_day=12, seed=8)
    original = yardstick_weights(name, data, SHORT)
    assert original.abs().sum() > 0
    for bar in (5, 11, 30):
        perturbed = yardstick_weights(name, _perturbed_after(data, bar, seed=bar), SHORT)
        assert torch.equal(original[: bar + 1], perturbed[: bar + 1]), f"{name}: a weight up to bar {bar} changed"
        assert not torch.equal(original, perturbed)


def test_the_yardsticks_orders_and_records_up_to_bar_t_never_use_a_price_after_t() -> None:
    """Through the engine: every series and position up to `bar` stays the same under a perturbation after it."""
    data = session_panel(n_tickers=6, n_days=4, bars_per_day=12, seed=9)
    bar = 23
    runs = [
        run_backtest(panel, {"wavy": _wavy}, baselines=list(YARDSTICKS), config=QUIET)
        for panel in (data, _perturbed_after(data, bar, seed=3))
    ]
    for name in YARDSTICKS:
        pd.testing.assert_frame_equal(runs[0].series[name].iloc[: bar + 1], runs[1].series[name].iloc[: bar + 1])
        pd.testing.assert_frame_equal(runs[0].positions[name].iloc[: bar + 1], runs[1].positions[name].iloc[: bar + 1])
        assert not runs[0].series[name]["value"].equals(runs[1].series[name]["value"])


def test_a_period_reads_its_lookback_and_is_not_idle_at_its_start() -> None:
    data = session_panel(n_tickers=6, n_days=4, bars_per_day=12, seed=10)
    whole = {name: yardstick_weights(name, data, SHORT) for name in YARDSTICKS}
    part = data.take(slice(24, 48))
    for name in YARDSTICKS:
        assert torch.equal(yardstick_weights(name, part, SHORT), whole[name][24:48])
        assert whole[name][24].abs().sum() > 0  # trades from the period's first bar


def test_the_yardsticks_trade_through_the_env_under_its_rules() -> None:
    data = session_panel(n_tickers=6, n_days=4, bars_per_day=12, seed=11)
    result = run_backtest(data, baselines=list(YARDSTICKS), config=QUIET)
    for name in YARDSTICKS:
        series, positions = result.series[name], result.positions[name]
        assert series["traded_value"].iloc[1:].sum() > 0 and series["costs"].sum() > 0
        assert (series["cash"] >= -1e-6).all()
        invested = (series["value"] - series["cash"]) / series["value"]
        held = series["gross_value"] > 0
        if name in DOLLAR_NEUTRAL:
            assert invested[held].abs().max() < 0.05 and (positions.to_numpy() < 0).any()
            assert (series["gross_value"] / series["value"]).max() < 1.05
        else:
            assert (positions.to_numpy() >= 0).all() and invested[held].iloc[-1] > 0.9
    assert result.strategies["momentum"].label == "Momentum 6-2 (long-short)"
    assert report_dict_config(result)["factors"]["momentum_lookback"] == 6


def report_dict_config(result) -> dict:
    from trader.backtesting.report import report_dict

    return report_dict(result)["config"]


def test_defaults_follow_the_bars_and_bad_parameters_are_refused() -> None:
    assert FactorParams.for_interval("1D") is DAILY and FactorParams.for_interval("1min") is MINUTE
    assert (DAILY.momentum_lookback, DAILY.momentum_skip, DAILY.reversal_lookback) == (252, 21, 5)
    with pytest.raises(ConfigError, match="momentum_skip"):
        FactorParams(momentum_lookback=5, momentum_skip=5)
    with pytest.raises(ConfigError, match="fraction"):
        FactorParams(fraction=0.6)
    with pytest.raises(ConfigError, match="reversal_lookback"):
        FactorParams(reversal_lookback=0)
    small = session_panel(n_tickers=3, n_days=2, bars_per_day=10, seed=1)
    assert not applies("reversal", small) and applies("reversal", small, SHORT)
    with pytest.raises(ConfigError, match="FactorParams"):
        BacktestConfig(factors={"momentum_lookback": 3})


def test_every_strategy_carries_beta_and_alpha_and_an_agent_its_matched_verdict() -> None:
    data = session_panel(n_tickers=6, n_days=40, bars_per_day=3, seed=12)
    result = run_backtest(data, {"wavy": _wavy}, config=QUIET)
    assert set(YARDSTICKS) <= set(result.series)
    assert set(result.versus_benchmark) == set(result.series)
    bench = result.versus_benchmark["benchmark"]
    assert bench["beta"] == pytest.approx(1.0, abs=0.05) and bench["correlation"] > 0.95
    for name in DOLLAR_NEUTRAL:
        assert abs(result.versus_benchmark[name]["beta"]) < 0.5
    verdict = result.versus_yardsticks["wavy"]
    matched = list(DOLLAR_NEUTRAL) if verdict["book"] == "dollar-neutral" else ["momentum_long", "inverse_vol"]
    assert verdict["matched"] == matched and verdict["yardstick"] in matched
    assert verdict["book"] in verdict["sentence"] and "p = " in verdict["sentence"]


def test_report_json_md_the_cli_table_and_the_dashboard_carry_beta_alpha_and_the_verdicts(tmp_path) -> None:
    import json

    from dashboards import figures
    from trader.backtesting.report import market_rows, markdown_report, plain_table, report_dict

    data = session_panel(n_tickers=6, n_days=40, bars_per_day=3, seed=13)
    result = run_backtest(data, {"wavy": _wavy}, config=QUIET)
    report = json.loads(json.dumps(report_dict(result)))  # what report.json holds
    assert report["versus_benchmark"]["reversal"]["alpha_interval"] is not None
    assert report["versus_yardsticks"]["wavy"]["sentence"] == result.versus_yardsticks["wavy"]["sentence"]
    header, rows = market_rows(result)
    assert header[:3] == ["Strategy", "Beta", "Alpha"] and len(rows) == len(result.metrics)
    text, md = plain_table(result), markdown_report(result)
    for shown in (text, md):
        assert "Information ratio" in shown and result.versus_yardsticks["wavy"]["sentence"] in shown
    table = figures.market_table(report, ["wavy", "benchmark"])
    assert list(table.index) == [n for n in report["order"] if n in ("wavy", "benchmark")]
    assert table.loc["benchmark", "Beta"] == pytest.approx(report["versus_benchmark"]["benchmark"]["beta"])
    assert figures.yardstick_sentences(report) == [f"wavy: {result.versus_yardsticks['wavy']['sentence']}"]
    assert figures.market_table({"order": ["a"], "metrics": {}}).empty  # a report written before these figures


@pytest.mark.slow
def test_reversal_at_the_planted_horizon_sees_the_edge_as_the_oracle_does() -> None:
    """synthetic-edge-daily plants a one-week reversal: the reversal yardstick (5 days, the planted
    horizon) earns a Sharpe ratio inside the oracle's 95% interval, at the demo's costs on the test
    period and before costs on validation (benchmarks: 6.12 in [5.82, 9.16]; 5.92 in [5.51, 8.98])."""
    from trader.backtesting.periods import load_dataset
    from trader.names import DEMO_COST

    data = load_dataset("synthetic-edge-daily")
    assert data.meta["edge"]["horizon"] == DAILY.reversal_lookback
    for period, cost in (("test", DEMO_COST), ("validation", 0.0)):
        config = BacktestConfig(tear_sheet=False, buy_cost=cost, sell_cost=cost)
        result = run_backtest(data, baselines=["oracle", "reversal"], period=period, config=config)
        low, high = result.evidence["oracle"]["interval_bootstrap"]
        assert low <= result.evidence["reversal"]["sharpe"] <= high, (period, result.evidence["reversal"]["sharpe"])
        assert abs(result.versus_benchmark["reversal"]["beta"]) < 0.1


@pytest.mark.slow
def test_on_the_edge_free_twin_every_yardstick_is_not_distinguishable_from_zero() -> None:
    """The same market as synthetic-edge-daily without its planted edge (seed 0, 2014-2023): over
    the test period, with the bars before it read, no yardstick's Sharpe ratio is told from zero."""
    from market_envs.data.synthetic import synthetic
    from trader.names import DEMO_COST

    twin = synthetic(100, "2014-01-02", "2024-01-01", seed=0, interval="1D", name="synthetic-daily-twin")
    config = BacktestConfig(tear_sheet=False, buy_cost=DEMO_COST, sell_cost=DEMO_COST)
    result = run_backtest(twin, baselines=list(YARDSTICKS), period="2022-07-01:2023-12-29", config=config)
    for name in YARDSTICKS:
        assert result.series[name]["traded_value"].iloc[:5].sum() > 0  # trading from the period's start
        assert result.evidence[name]["sentence"] == "not distinguishable from zero", (name, result.evidence[name])
