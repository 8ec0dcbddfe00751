"""trader.metrics agrees with empyrical-reloaded, for numpy, pandas and torch inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import empyrical
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trader import metrics
from trader.errors import ConfigError, UserError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RTOL = 1e-9
ATOL = 1e-12

# Named fixture series: the edge cases empyrical documents, and ordinary ones.
FIXTURES: dict[str, np.ndarray] = {
    "empty": np.array([], dtype=np.float64),
    "one_return": np.array([0.01]),
    "all_positive": np.array([0.01, 0.02, 0.003, 0.015, 0.007]),
    "mixed": np.array([0.01, -0.02, 0.03, -0.005, 0.012, -0.04, 0.025, 0.001]),
    "flat": np.zeros(6),
    "flat_positive": np.full(6, 0.001),
    "all_negative": np.array([-0.01, -0.02, -0.003, -0.015]),
    "with_nan": np.array([0.01, np.nan, -0.02, 0.03, np.nan, -0.01, 0.02]),
    "crash": np.array([0.05, -0.5, 0.2, -0.3, 0.1]),
}

# (our function, empyrical's, keyword arguments) for every metric.
METRICS: dict[str, tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]] = {
    "cum_returns_final": (metrics.cum_returns_final, empyrical.cum_returns_final, {}),
    "cum_returns_final_start": (metrics.cum_returns_final, empyrical.cum_returns_final, {"starting_value": 100.0}),
    "annual_return": (metrics.annual_return, empyrical.annual_return, {}),
    "annual_return_weekly": (metrics.annual_return, empyrical.annual_return, {"period": "weekly"}),
    "annual_volatility": (metrics.annual_volatility, empyrical.annual_volatility, {}),
    "annual_volatility_alpha": (
        metrics.annual_volatility,
        empyrical.annual_volatility,
        {"alpha": 3.0, "annualization": 50},
    ),
    "sharpe_ratio": (metrics.sharpe_ratio, empyrical.sharpe_ratio, {}),
    "sharpe_ratio_rf": (metrics.sharpe_ratio, empyrical.sharpe_ratio, {"risk_free": 0.0004}),
    "sortino_ratio": (metrics.sortino_ratio, empyrical.sortino_ratio, {}),
    "sortino_ratio_required": (
        metrics.sortino_ratio,
        empyrical.sortino_ratio,
        {"required_return": 0.002, "period": "monthly"},
    ),
    "downside_risk": (metrics.downside_risk, empyrical.downside_risk, {}),
    "max_drawdown": (metrics.max_drawdown, empyrical.max_drawdown, {}),
    "calmar_ratio": (metrics.calmar_ratio, empyrical.calmar_ratio, {}),
    "value_at_risk": (metrics.value_at_risk, empyrical.value_at_risk, {}),
    "value_at_risk_cutoff": (metrics.value_at_risk, empyrical.value_at_risk, {"cutoff": 0.2}),
    "tail_ratio": (metrics.tail_ratio, empyrical.tail_ratio, {}),
    "stability": (metrics.stability, empyrical.stability_of_timeseries, {}),
}

# empyrical computes these column by column on 2-D input itself.
NATIVE_2D = {
    "cum_returns_final",
    "annual_return",
    "annual_volatility",
    "sharpe_ratio",
    "sharpe_ratio_rf",
    "sortino_ratio",
    "downside_risk",
    "max_drawdown",
}

KINDS = ("numpy", "pandas", "torch")


def as_kind(values: np.ndarray, kind: str) -> Any:
    """The same float64 values as a numpy array, a pandas object or a torch tensor."""
    if kind == "numpy":
        return values.copy()
    if kind == "torch":
        return torch.tensor(values, dtype=torch.float64)
    index = pd.date_range("2024-01-02", periods=len(values), freq="B")
    if values.ndim == 1:
        return pd.Series(values, index=index)
    return pd.DataFrame(values, index=index, columns=[f"s{k}" for k in range(values.shape[1])])


def to_numpy(result: Any) -> np.ndarray:
    """Any metric result as a float64 array."""
    if isinstance(result, torch.Tensor):
        return result.cpu().numpy()
    if isinstance(result, pd.Series):
        return result.to_numpy(dtype=np.float64)
    return np.asarray(result, dtype=np.float64)


def assert_same(ours: Any, expected: Any) -> None:
    """Equal to RTOL, with NaN == NaN and inf == inf of the same sign."""
    np.testing.assert_allclose(to_numpy(ours), to_numpy(expected), rtol=RTOL, atol=ATOL, equal_nan=True)


def reference_per_column(name: str, values: np.ndarray) -> np.ndarray:
    """empyrical's value for each column of a (T, K) array, through its 1-D path."""
    _, reference, kwargs = METRICS[name]
    return np.array([reference(values[:, k].copy(), **kwargs) for k in range(values.shape[1])], dtype=float)


def check_metric(name: str, values: np.ndarray, kind: str) -> None:
    """Our metric on `values` as `kind` equals empyrical's, shaped like the input."""
    ours, reference, kwargs = METRICS[name]
    result = ours(as_kind(values, kind), **kwargs)
    if values.ndim == 1:
        assert isinstance(result, float)
        assert_same(result, reference(values.copy(), **kwargs))
        return
    assert_same(result, reference_per_column(name, values))
    expected_type = {"numpy": np.ndarray, "pandas": pd.Series, "torch": torch.Tensor}[kind]
    assert isinstance(result, expected_type)
    if name in NATIVE_2D and len(values) > 0:
        assert_same(result, reference(values.copy(), **kwargs))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
@pytest.mark.parametrize("name", sorted(METRICS))
def test_fixture_series_match_empyrical(name: str, fixture: str, kind: str) -> None:
    check_metric(name, FIXTURES[fixture], kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(METRICS))
def test_fixture_columns_match_empyrical(name: str, kind: str) -> None:
    """All fixtures of one length side by side as columns of one 2-D input."""
    columns = [FIXTURES[k][:5] for k in ("all_positive", "mixed", "flat", "flat_positive", "with_nan", "crash")]
    check_metric(name, np.column_stack(columns), kind)


def test_empty_2d_gives_nan_per_column() -> None:
    for name, (ours, _, kwargs) in METRICS.items():
        result = ours(np.empty((0, 3)), **kwargs)
        assert result.shape == (3,) and np.isnan(result).all(), name


def test_documented_edge_cases() -> None:
    assert np.isnan(metrics.sharpe_ratio([0.01]))
    assert np.isnan(metrics.annual_volatility(np.array([0.01])))
    assert np.isnan(metrics.calmar_ratio(FIXTURES["all_positive"]))
    assert np.isnan(metrics.sharpe_ratio(FIXTURES["flat"]))
    assert metrics.sharpe_ratio(FIXTURES["flat_positive"]) == np.inf
    assert metrics.max_drawdown(FIXTURES["all_positive"]) == 0.0
    assert np.isnan(metrics.value_at_risk(FIXTURES["with_nan"]))
    # Two NaNs and nothing else: empyrical's stability raises here; ours says NaN.
    assert np.isnan(metrics.stability(np.array([np.nan, np.nan])))


def test_torch_float32_and_device_kept() -> None:
    values = np.random.default_rng(3).normal(0.001, 0.01, size=(40, 2)).astype(np.float32)
    tensor = torch.from_numpy(values)
    result = metrics.sharpe_ratio(tensor)
    assert result.dtype == torch.float64 and result.device == tensor.device
    assert_same(result, empyrical.sharpe_ratio(values.astype(np.float64)))


# Returns quantised to a tenth of a basis point: realistic, and free of the
# near-identical values whose spread is rounding noise (where any two correct
# implementations of a ratio to the spread disagree).
_returns_1d = hnp.arrays(
    np.float64,
    st.integers(min_value=2, max_value=60),
    elements=st.integers(min_value=-3000, max_value=3000).map(lambda k: k / 1e5),
)


def _with_nans(values: np.ndarray, mask_seed: int) -> np.ndarray:
    """Blank about a tenth of the values, keeping the first two."""
    rng = np.random.default_rng(mask_seed)
    values = values.copy()
    blank = rng.random(values.shape) < 0.1
    blank[:2] = False
    values[blank] = np.nan
    return values


@settings(max_examples=40, deadline=None)
@given(
    values=_returns_1d,
    mask_seed=st.integers(0, 2**16),
    with_nan=st.booleans(),
    kind=st.sampled_from(KINDS),
    name=st.sampled_from(sorted(METRICS)),
)
def test_random_series_match_empyrical(
    values: np.ndarray, mask_seed: int, with_nan: bool, kind: str, name: str
) -> None:
    if with_nan:
        values = _with_nans(values, mask_seed)
    check_metric(name, values, kind)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(2, 80),
    cols=st.integers(1, 5),
    kind=st.sampled_from(KINDS),
    name=st.sampled_from(sorted(METRICS)),
)
def test_random_panels_match_empyrical(seed: int, rows: int, cols: int, kind: str, name: str) -> None:
    rng = np.random.default_rng(seed)
    values = np.round(rng.normal(0.0005, 0.02, size=(rows, cols)), 5)
    check_metric(name, values, kind)


@settings(max_examples=50, deadline=None)
@given(values=_returns_1d, shift=st.floats(-0.01, 0.01), risk_free=st.floats(-0.001, 0.001))
def test_sharpe_unchanged_when_returns_and_risk_free_shift_together(
    values: np.ndarray, shift: float, risk_free: float
) -> None:
    base = metrics.sharpe_ratio(values, risk_free=risk_free)
    shifted = metrics.sharpe_ratio(values + shift, risk_free=risk_free + shift)
    if np.isfinite(base) and np.ptp(values) > 0:
        assert shifted == pytest.approx(base, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("drift", [0.001, -0.001])
def test_noise_never_raises_sharpe_magnitude_in_expectation(drift: float) -> None:
    """Mean over 400 seeds of |Sharpe(r + noise)| stays below |Sharpe(r)|."""
    rng = np.random.default_rng(11)
    returns = rng.normal(drift, 0.01, size=250)
    noise = np.random.default_rng(12).normal(0.0, 0.01, size=(250, 400))
    noisy = metrics.sharpe_ratio(returns[:, None] + noise)
    clean = metrics.sharpe_ratio(returns)
    assert abs(clean) > 0.5
    assert np.mean(noisy) * np.sign(clean) < abs(clean)
    assert np.mean(np.abs(noisy)) < abs(clean)


def _two_sessions() -> pd.DatetimeIndex:
    """Three bars on 2024-03-04 and two on 2024-03-05, exchange time."""
    stamps = ["2024-03-04 09:31", "2024-03-04 12:00", "2024-03-04 16:00", "2024-03-05 09:31", "2024-03-05 16:00"]
    return pd.DatetimeIndex(stamps).tz_localize("America/New_York")


def test_daily_compounding_known_answer() -> None:
    returns = np.array([0.01, 0.02, -0.01, 0.005, np.nan])
    daily = metrics.daily_returns(returns, _two_sessions())
    assert list(daily.index) == [pd.Timestamp("2024-03-04"), pd.Timestamp("2024-03-05")]
    assert daily.iloc[0] == pytest.approx(1.01 * 1.02 * 0.99 - 1.0, rel=1e-12)
    assert daily.iloc[1] == pytest.approx(0.005, rel=1e-12)


def test_daily_compounding_2d_and_all_nan_day() -> None:
    returns = torch.tensor([[0.01, np.nan], [0.02, np.nan], [0.0, np.nan], [0.1, 0.2], [-0.1, 0.0]])
    daily = metrics.daily_returns(returns, _two_sessions())
    assert daily.shape == (2, 2)
    assert daily.iloc[0, 0] == pytest.approx(1.01 * 1.02 - 1.0, rel=1e-6)
    assert np.isnan(daily.iloc[0, 1])
    assert daily.iloc[1, 0] == pytest.approx(1.1 * 0.9 - 1.0, rel=1e-6)


def test_daily_returns_group_by_exchange_date_not_utc() -> None:
    """A 19:30 New York bar falls on the next UTC date but on the same exchange date."""
    stamps = pd.DatetimeIndex(["2024-03-04 10:00", "2024-03-04 19:30"]).tz_localize("America/New_York")
    daily = metrics.daily_returns(np.array([0.01, 0.01]), stamps)
    assert len(daily) == 1
    assert len(metrics.daily_returns(np.array([0.01, 0.01]), stamps, tz="UTC")) == 2


def test_summary_of_intraday_equals_summary_of_daily() -> None:
    rng = np.random.default_rng(5)
    days = pd.bdate_range("2024-01-02", periods=30)
    minutes = pd.DatetimeIndex([d + pd.Timedelta(hours=9, minutes=31 + 60 * i) for d in days for i in range(6)])
    minutes = minutes.tz_localize("America/New_York")
    returns = pd.DataFrame(rng.normal(0.0002, 0.003, size=(len(minutes), 2)), columns=["agent", "qqq"])
    table = metrics.summary(returns, timestamps=minutes)
    daily = metrics.daily_returns(returns, minutes)
    assert list(table.index) == ["agent", "qqq"]
    assert list(table.columns) == [*metrics.SUMMARY_METRICS, "days"]
    assert (table["days"] == 30).all()
    for name in metrics.SUMMARY_METRICS:
        assert_same(table[name].to_numpy(), reference_per_column(name, daily.to_numpy()))
    one = metrics.summary(returns["agent"].to_numpy(), timestamps=minutes)
    assert isinstance(one, dict) and one["sharpe_ratio"] == pytest.approx(table.loc["agent", "sharpe_ratio"])


def test_bar_sharpe_known_answer_nan_bars_skipped_and_days_counted_from_defined_bars() -> None:
    returns = np.array([0.01, 0.02, -0.01, 0.005, np.nan])  # 4 defined bars over 2 exchange dates
    bars = returns[:4]
    expected = bars.mean() / bars.std(ddof=1) * np.sqrt(4 / 2 * metrics.TRADING_DAYS_PER_YEAR)
    assert metrics.bar_sharpe_ratio(returns, _two_sessions()) == pytest.approx(expected, rel=1e-12)
    only_first_day = np.array([0.01, 0.02, -0.01, np.nan, np.nan])  # 3 bars, one date
    first = only_first_day[:3]
    expected = first.mean() / first.std(ddof=1) * np.sqrt(3 * metrics.TRADING_DAYS_PER_YEAR)
    assert metrics.bar_sharpe_ratio(only_first_day, _two_sessions()) == pytest.approx(expected, rel=1e-12)


def test_bar_sharpe_of_one_bar_a_day_is_the_daily_sharpe_and_columns_keep_their_names() -> None:
    rng = np.random.default_rng(3)
    days = pd.bdate_range("2024-01-02", periods=40).tz_localize("America/New_York") + pd.Timedelta(hours=16)
    returns = pd.DataFrame(rng.normal(0.001, 0.01, size=(40, 2)), columns=["a", "b"])
    returns.iloc[5, 1] = np.nan
    bar = metrics.bar_sharpe_ratio(returns, days)
    assert list(bar.index) == ["a", "b"]
    daily = metrics.sharpe_ratio(metrics.daily_returns(returns, days))
    np.testing.assert_allclose(bar.to_numpy(), daily.to_numpy(), rtol=1e-12)
    assert isinstance(metrics.bar_sharpe_ratio(returns["a"].to_numpy(), days), float)


def test_bar_sharpe_estimates_the_daily_sharpe_with_a_smaller_error_calibrated_by_simulation() -> None:
    """Uncorrelated minute bars (78 a day, 63 days: a validation period) of a strategy whose true annualised
    Sharpe ratio is 20: the bar Sharpe ratio is centred on it as the daily one is, with a smaller spread
    (theory: the daily estimate's variance is about 1 + SR_day^2 / 2 = 1.79 times the bar estimate's)."""
    rng = np.random.default_rng(11)
    per_day, days, true = 78, 63, 20.0
    stamps = pd.DatetimeIndex(
        [d + pd.Timedelta(minutes=5 * i) for d in pd.bdate_range("2024-01-02", periods=days) for i in range(per_day)]
    )
    bar_sigma = 0.001
    bar_mean = true / np.sqrt(metrics.TRADING_DAYS_PER_YEAR * per_day) * bar_sigma
    returns = rng.normal(bar_mean, bar_sigma, size=(per_day * days, 400))
    bar = metrics.bar_sharpe_ratio(returns, stamps)
    daily = metrics.sharpe_ratio(metrics.daily_returns(returns, stamps).to_numpy())
    assert abs(np.mean(bar) - true) < 3 * np.std(bar) / np.sqrt(400)
    assert abs(np.mean(daily) - true) < 0.05 * true  # the daily estimate's small-sample bias is about 1%
    assert 1.4 < np.var(daily) / np.var(bar) < 2.5


def test_summary_turnover_is_daily_traded_over_closing_value() -> None:
    returns = np.zeros(5)
    traded = np.array([100.0, 50.0, 0.0, 300.0, 0.0])
    value = np.array([1000.0, 1000.0, 1000.0, 1500.0, 1500.0])
    table = metrics.summary(returns, timestamps=_two_sessions(), traded_value=traded, portfolio_value=value)
    assert table["turnover"] == pytest.approx(np.mean([150.0 / 1000.0, 300.0 / 1500.0]))
    assert table["days"] == 2.0


def test_turnover_known_answer_and_types() -> None:
    assert metrics.turnover(50.0, 1000.0) == pytest.approx(0.05)
    ratio = metrics.turnover(torch.tensor([[10.0, 20.0], [0.0, 5.0]]), torch.tensor([100.0, 0.0]))
    assert isinstance(ratio, torch.Tensor)
    np.testing.assert_allclose(ratio.numpy(), [[0.1, 0.2], [np.nan, np.nan]])
    series = metrics.turnover(pd.Series([1.0, 2.0]), pd.Series([10.0, 10.0]))
    assert isinstance(series, pd.Series) and series.tolist() == pytest.approx([0.1, 0.2])


def test_bad_input_raises_clear_errors() -> None:
    with pytest.raises(UserError, match="1-D"):
        metrics.sharpe_ratio(np.zeros((2, 2, 2)))
    with pytest.raises(ConfigError, match="period cannot be 'hourly'"):
        metrics.sharpe_ratio(np.zeros(5), period="hourly")
    with pytest.raises(UserError, match="numeric"):
        metrics.max_drawdown(["a", "b"])
    with pytest.raises(ConfigError, match="cutoff"):
        metrics.value_at_risk(np.zeros(5), cutoff=5)
    with pytest.raises(UserError, match="risk_free has 2 periods"):
        metrics.sharpe_ratio(np.zeros(5), risk_free=np.zeros(2))
    with pytest.raises(UserError, match="timestamps has 4 entries"):
        metrics.daily_returns(np.zeros(5), _two_sessions()[:4])
    with pytest.raises(UserError, match="strictly increasing"):
        metrics.daily_returns(np.zeros(5), _two_sessions()[::-1])
    with pytest.raises(UserError, match="does not match"):
        metrics.turnover(np.zeros((3, 2)), np.ones(4))
    with pytest.raises(UserError, match="both traded_value and portfolio_value"):
        metrics.summary(np.zeros(5), traded_value=np.zeros(5))


def test_annualisation_constant_stated_once() -> None:
    assert metrics.TRADING_DAYS_PER_YEAR == 252
    assert metrics.annualization_factor("daily", None) == 252
    assert metrics.annualization_factor("minute", None) == 252 * metrics.MINUTES_PER_SESSION
    assert metrics.annualization_factor("daily", 12) == 12


# ----------------------------------------------------------------------------
# Against the benchmark: alpha, beta, tracking error, information ratio
# ----------------------------------------------------------------------------


def _yahoo_returns(symbol: str) -> np.ndarray:
    from pathlib import Path

    frame = pd.read_csv(Path(__file__).parent / "fixtures" / "yahoo" / f"{symbol}_1d.csv")
    return frame["Close"].pct_change().to_numpy()[1:]


def test_alpha_beta_agree_with_empyrical_and_a_plain_least_squares_fit() -> None:
    from trader import stats

    market, stock = _yahoo_returns("QQQ"), _yahoo_returns("AAPL")
    ours = metrics.alpha_beta(stock, market)
    theirs = empyrical.alpha_beta(stock, market)
    assert ours == pytest.approx(tuple(theirs), rel=1e-12)
    (intercept, slope), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(market), market]), stock, rcond=None)
    assert ours[1] == pytest.approx(slope, abs=1e-10)
    assert ours[0] == pytest.approx((1 + intercept) ** 252 - 1, abs=1e-10)
    fit = stats.benchmark_fit(stock, market)
    assert fit.intercept == pytest.approx(intercept, abs=1e-10) and fit.beta == pytest.approx(slope, abs=1e-10)
    assert fit.correlation == pytest.approx(np.corrcoef(stock, market)[0, 1], abs=1e-12)
    active = stock - market
    assert fit.tracking_error == pytest.approx(active.std(ddof=1) * np.sqrt(252), rel=1e-12)
    assert fit.information_ratio == pytest.approx(active.mean() / active.std(ddof=1) * np.sqrt(252), rel=1e-12)


def test_the_alpha_interval_is_the_ordinary_least_squares_one() -> None:
    import statsmodels.api as sm

    from trader import stats

    market, stock = _yahoo_returns("QQQ"), _yahoo_returns("MSFT")
    ols = sm.OLS(stock, sm.add_constant(market)).fit()
    fit = stats.benchmark_fit(stock, market)
    assert fit.intercept == pytest.approx(ols.params[0], abs=1e-10)
    assert fit.beta == pytest.approx(ols.params[1], abs=1e-10)
    assert fit.intercept_se == pytest.approx(ols.bse[0], rel=1e-9)
    low, high = ols.conf_int(0.05)[0]
    assert (fit.alpha_low, fit.alpha_high) == pytest.approx(((1 + low) ** 252 - 1, (1 + high) ** 252 - 1), rel=1e-9)
    assert fit.alpha_low < fit.alpha < fit.alpha_high


def test_the_benchmark_levered_twice_has_beta_2_and_alpha_0_and_a_dollar_neutral_book_beta_0() -> None:
    from trader import stats

    rng = np.random.default_rng(3)
    market = rng.normal(0.0004, 0.01, 500)
    levered = stats.benchmark_fit(2.0 * market, market)
    assert levered.beta == pytest.approx(2.0, abs=1e-12) and levered.alpha == pytest.approx(0.0, abs=1e-12)
    assert levered.correlation == pytest.approx(1.0)
    assert levered.tracking_error == pytest.approx(market.std(ddof=1) * np.sqrt(252), rel=1e-12)
    # Long the benchmark with half the book, short it with the other half, plus an idiosyncratic leg.
    # The leg is made uncorrelated with the benchmark in sample, so its beta is 0 exactly.
    noise = rng.normal(0.0, 0.005, 500)
    centred = market - market.mean()
    idiosyncratic = 0.0002 + noise - centred * (centred @ noise) / (centred @ centred)
    fit = stats.benchmark_fit(0.5 * market - 0.5 * market + idiosyncratic, market)
    assert fit.beta == pytest.approx(0.0, abs=1e-12) and fit.correlation == pytest.approx(0.0, abs=1e-12)
    assert fit.alpha == pytest.approx((1 + idiosyncratic.mean()) ** 252 - 1, rel=1e-9)
    exact = stats.benchmark_fit(0.5 * market - 0.5 * market + 0.001, market)
    assert exact.reason is not None and "constant" in exact.reason


def test_benchmark_metrics_per_column_and_nan_pairs_dropped() -> None:
    rng = np.random.default_rng(4)
    market = rng.normal(0, 0.01, 60)
    frame = pd.DataFrame({"a": 1.5 * market + 0.001, "b": rng.normal(0, 0.01, 60)})
    frame.iloc[5, 1] = np.nan
    alpha, beta = metrics.alpha_beta(frame, market)
    assert list(beta.index) == ["a", "b"] and beta["a"] == pytest.approx(1.5)
    for column in frame:
        expected = empyrical.alpha_beta(frame[column].to_numpy(), market)
        assert (alpha[column], beta[column]) == pytest.approx(tuple(expected), rel=1e-12)
    assert np.isnan(metrics.beta(np.array([0.01]), np.array([0.02])))
    with pytest.raises(UserError, match="factor_returns has 3 periods"):
        metrics.alpha_beta(market, market[:3])
