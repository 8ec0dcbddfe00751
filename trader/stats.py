"""Is the edge real? Sharpe-ratio inference corrected for the number of trials.

Pure functions, numbers in and numbers out, torch-free (the dashboard imports this
module); what a report says of them, in JSON and in sentences, is
`trader.backtesting.evidence`'s. Two layers:

- **Formulas** on numbers (`probabilistic_sharpe_ratio`, `expected_max_sharpe`,
  `deflated_sharpe_ratio`, `min_track_record_length`, `sharpe_standard_error`):
  every Sharpe ratio in them is **per period** (per day: not annualised), ``n_obs``
  counts periods, ``kurtosis`` is the **raw** fourth standardised moment (3 for a
  normal). Bad parameters raise `ConfigError`; NaN in gives NaN out.
- **Statistics of return series** (`sharpe_moments`, `sharpe_difference`, `benchmark_fit`, `sharpe_interval_analytic`,
  `sharpe_interval_bootstrap`, `pbo_cscv`, `spa_test`): simple
  returns go in; when ``timestamps`` are intraday they are first compounded to one
  return per exchange date by `trader.metrics.daily_returns`, as every metric of the
  project is. Annualised figures use `trader.metrics.TRADING_DAYS_PER_YEAR`.

One rule for data that cannot support a number, everywhere: the result carries
``reason`` (a sentence saying why) and NaN values, never an exception and never a
number that means nothing. A result whose ``reason`` is None is valid. The
reasons: fewer than `MIN_DAYS` daily returns, constant returns (the Sharpe ratio is
undefined), infinite returns, too few bars for the CSCV blocks. NaN returns are
missing days: they are dropped (in a matrix, the whole day, for every trial), as
`trader.metrics` skips them, and ``days`` counts what is left.

**Raw kurtosis.** The Bailey-López de Prado formulas need the raw kurtosis
(normal = 3). vectorbt's and quantstats' deflated Sharpe ratios pass the excess
kurtosis (normal = 0) where it belongs, which understates the standard error of
fat-tailed strategies. Every function here takes raw kurtosis and refuses a value
below 1 + skew**2 (no distribution has one): excess kurtosis of a near-normal
series lands there and is caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from trader import metrics
from trader.errors import ConfigError

TRADING_DAYS = metrics.TRADING_DAYS_PER_YEAR

MIN_DAYS = 30
"""Fewer daily returns than this give NaN with a reason: the asymptotic formulas,
the bootstrap and the block-length choice mean nothing on less."""

EULER_GAMMA = float(np.euler_gamma)


# ------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Moments:
    """The per-day moments every Sharpe statistic of one series is made of.

    :param days: number of daily returns used (NaN days dropped).
    :param sharpe: per-day Sharpe ratio, mean / std (ddof=1), as `trader.metrics`.
    :param skew: sample skewness m3 / m2**1.5 (moment estimator).
    :param kurtosis: sample **raw** kurtosis m4 / m2**2 (normal = 3).
    :param reason: why the moments are NaN; None when they are valid.
    """

    days: int
    sharpe: float
    skew: float
    kurtosis: float
    reason: str | None = None

    @property
    def annual_sharpe(self) -> float:
        """The Sharpe ratio annualised by sqrt(252), as `trader.metrics.sharpe_ratio`."""
        return self.sharpe * math.sqrt(TRADING_DAYS)


@dataclass(frozen=True)
class Interval:
    """A confidence interval of the annualised Sharpe ratio (NaN ends when ``reason`` is set).

    :param block_length: the bootstrap's mean block length in days (NaN for the analytic one).
    """

    low: float
    high: float
    confidence: float
    method: str
    reason: str | None = None
    block_length: float = float("nan")


@dataclass(frozen=True)
class BenchmarkFit:
    """A strategy's daily returns regressed on the benchmark's: ``r = a + beta x f + e``.

    :param alpha: annualised alpha, ``(1 + a) ** 252 - 1`` (`trader.metrics.alpha_beta`'s).
    :param alpha_low: the annualised low end of the intercept's interval (ordinary least
        squares, i.i.d. errors, Student's t with days - 2 degrees of freedom).
    :param alpha_high: its high end.
    :param beta: the least-squares slope.
    :param tracking_error: annualised standard deviation of ``r - f``.
    :param information_ratio: annualised mean over standard deviation of ``r - f``.
    :param correlation: of the daily returns with the benchmark's.
    :param days: the days both series have.
    :param intercept: the daily intercept ``a`` and `intercept_se` its standard error.
    """

    alpha: float
    alpha_low: float
    alpha_high: float
    beta: float
    tracking_error: float
    information_ratio: float
    correlation: float
    days: int
    confidence: float
    intercept: float = math.nan
    intercept_se: float = math.nan
    reason: str | None = None


@dataclass(frozen=True)
class PBOResult:
    """Probability of backtest overfitting by CSCV, with the logits it is the share of.

    :param pbo: share of the combinations whose in-sample best trial ranks at or
        below the median out of sample (logit <= 0).
    :param logits: one logit of the out-of-sample relative rank per combination.
    :param n_blocks: S, the number of blocks the bars were cut into.
    :param n_trials: N, the number of trials compared.
    :param days: the number of (daily) bars used.
    """

    pbo: float
    logits: np.ndarray = field(repr=False)
    n_blocks: int
    n_trials: int
    days: int
    reason: str | None = None


@dataclass(frozen=True)
class SPAResult:
    """Hansen's SPA test of "no trial beats the benchmark" (arch's three p-values).

    :param consistent: Hansen's consistent p-value (the one to report).
    :param lower: p-value never re-centring a trial worse than the benchmark (liberal bound).
    :param upper: p-value re-centring no trial (White's Reality Check, conservative bound).
    """

    consistent: float
    lower: float
    upper: float
    n_trials: int
    days: int
    block_length: int
    reps: int
    reason: str | None = None


@dataclass(frozen=True)
class SharpeDifference:
    """The difference of two Sharpe ratios measured on the same days, and its z statistic.

    :param difference: annualised Sharpe ratio of the first minus that of the second.
    :param z: the difference over its standard error (Jobson-Korkie with Memmel's correction).
    :param correlation: the two series' correlation, which the standard error shrinks with.
    :param days: the days both series have.
    """

    difference: float
    z: float
    correlation: float
    days: int
    reason: str | None = None

    @property
    def p_value(self) -> float:
        """One-sided: P[a z this large] if the two true Sharpe ratios were equal."""
        return float(scipy_stats.norm.sf(self.z))


# ------------------------------------------------------------------------- formulas


def _check_moments(skew: Any, kurtosis: Any) -> None:
    """Refuse a kurtosis below 1 + skew**2: no distribution has one (excess kurtosis passed?)."""
    skew, kurtosis = np.broadcast_arrays(np.asarray(skew, dtype=float), np.asarray(kurtosis, dtype=float))
    impossible = np.isfinite(kurtosis) & np.isfinite(skew) & (kurtosis < 1.0 + skew**2 - 1e-12)
    if np.any(impossible):
        bad_kurtosis, bad_skew = kurtosis[impossible].ravel()[0], skew[impossible].ravel()[0]
        raise ConfigError(
            f"kurtosis must be the RAW kurtosis (normal = 3), at least 1 + skew**2; got {bad_kurtosis:g} "
            f"with skew {bad_skew:g} (excess kurtosis passed by mistake?)"
        )


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1); got {confidence}")


def sharpe_variance_factor(sharpe: Any, skew: Any, kurtosis: Any) -> Any:
    """1 - skew * SR + (kurtosis - 1) / 4 * SR**2: T times the variance of the Sharpe estimate.

    Mertens (2002) for i.i.d. non-normal returns; written with the raw kurtosis
    gamma4 (the form Bailey and López de Prado use). Equal to 1 + SR**2 / 2 for normal
    returns (Lo 2002). Never negative when kurtosis >= 1 + skew**2 (its discriminant
    skew**2 - (kurtosis - 1) is then <= 0).
    """
    _check_moments(skew, kurtosis)
    return 1.0 - np.asarray(skew) * sharpe + (np.asarray(kurtosis) - 1.0) / 4.0 * np.square(sharpe)


def sharpe_standard_error(sharpe: Any, n_obs: Any, skew: Any = 0.0, kurtosis: Any = 3.0) -> Any:
    """Standard error of a per-period Sharpe estimate from ``n_obs`` i.i.d. returns.

    SE(SR) = sqrt((1 - gamma3 SR + (gamma4 - 1) / 4 SR**2) / T)

    with gamma3 the skewness and gamma4 the RAW kurtosis. References: Lo, A. (2002),
    "The Statistics of Sharpe Ratios", Financial Analysts Journal 58(4) (normal case,
    1 + SR**2 / 2); Mertens, E. (2002), "Comments on variance of the IID estimator in
    Lo (2002)" (non-normal case); Opdyke (2007) shows the same holds for stationary
    ergodic returns up to serial correlation, which this form ignores. Multiply by
    sqrt(periods per year) for the annualised Sharpe's error.
    """
    n_obs = np.asarray(n_obs, dtype=float)
    if np.any(n_obs < 2):
        raise ConfigError(f"n_obs must be at least 2; got {n_obs.min()}")
    result = np.sqrt(sharpe_variance_factor(sharpe, skew, kurtosis) / n_obs)
    return float(result) if np.ndim(result) == 0 else result


def probabilistic_sharpe_ratio(sharpe: Any, threshold: Any, n_obs: Any, skew: Any = 0.0, kurtosis: Any = 3.0) -> Any:
    """Probability that the true Sharpe ratio exceeds ``threshold`` (PSR).

    PSR(SR*) = Phi( (SR - SR*) sqrt(T - 1) / sqrt(1 - gamma3 SR + (gamma4 - 1) / 4 SR**2) )

    SR the estimated per-period Sharpe ratio, SR* the per-period threshold, T the
    number of returns, gamma3 their skewness and gamma4 their **RAW kurtosis (normal
    = 3; do not pass excess kurtosis)**. Reference: Bailey, D. and López de Prado, M.
    (2012), "The Sharpe Ratio Efficient Frontier", Journal of Risk 15(2), eq. (11).
    With skew 0 and kurtosis 3 it is Phi(SR sqrt(T - 1) / sqrt(1 + SR**2 / 2)): the
    t-statistic's normal CDF up to the 1 + SR**2 / 2 term and T - 1 for T.
    """
    if np.any(np.asarray(n_obs, dtype=float) < 2):
        raise ConfigError(f"n_obs must be at least 2; got {np.min(n_obs)}")
    spread = np.sqrt(sharpe_variance_factor(sharpe, skew, kurtosis))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.asarray(sharpe) - threshold) * np.sqrt(np.asarray(n_obs, dtype=float) - 1.0) / spread
    result = scipy_stats.norm.cdf(z)
    return float(result) if np.ndim(result) == 0 else result


def expected_max_sharpe(n_trials: int, trials_sharpe_variance: float) -> float:
    """Expected maximum of ``n_trials`` independent Sharpe estimates whose true Sharpe is 0.

    E[max SR_n] ~= sqrt(V[SR_n]) ((1 - gamma) Z^-1(1 - 1/N) + gamma Z^-1(1 - 1/(N e)))

    gamma the Euler-Mascheroni constant, Z^-1 the standard normal quantile, N the
    number of independent trials, V[SR_n] the variance of the trials' (per-period)
    Sharpe ratios. Reference: Bailey, D. and López de Prado, M. (2014), "The Deflated
    Sharpe Ratio", Journal of Portfolio Management 40(5), eq. (2) (and Bailey, Borwein,
    López de Prado, Zhu 2014, "Pseudo-Mathematics and Financial Charlatanism").
    The approximation is for large N; with one trial there is no selection and the
    expected maximum is 0. Correlated trials count as fewer: pass the effective N.
    """
    if n_trials < 1 or int(n_trials) != n_trials:
        raise ConfigError(f"n_trials must be a whole number >= 1; got {n_trials}")
    if not trials_sharpe_variance >= 0:
        raise ConfigError(f"trials_sharpe_variance must be >= 0; got {trials_sharpe_variance}")
    if n_trials == 1:
        return 0.0
    quantiles = (1.0 - EULER_GAMMA) * scipy_stats.norm.ppf(1.0 - 1.0 / n_trials) + EULER_GAMMA * scipy_stats.norm.ppf(
        1.0 - 1.0 / (n_trials * math.e)
    )
    return float(math.sqrt(trials_sharpe_variance) * quantiles)


def null_sharpe_variance(n_obs: int) -> float:
    """V[SR_n] of a per-period Sharpe estimate whose true Sharpe is 0: 1 / n_obs.

    The Lo (2002) / Mertens (2002) variance, (1 - skew SR + (kurtosis - 1) / 4 SR^2) / T,
    at SR = 0, for any skew and kurtosis. With it, `expected_max_sharpe` is the
    expected best of N trials that all have no edge (the global null), whatever the
    trials really were. Bailey and López de Prado estimate V[SR_n] from the trials
    themselves instead: when trials differ in true skill (a tournament whose pods
    learn), that variance counts the skill as luck and the DSR loses its power; both
    are reported (docs/reading-results.md)."""
    if n_obs < 2:
        raise ConfigError(f"n_obs must be >= 2; got {n_obs}")
    return 1.0 / n_obs


def deflated_sharpe_ratio(
    sharpe: float,
    n_obs: int,
    skew: float,
    kurtosis: float,
    n_trials: int,
    trials_sharpe_variance: float,
) -> float:
    """Deflated Sharpe ratio: the PSR at the expected maximum Sharpe of the trials.

    DSR = PSR(SR0),  SR0 = `expected_max_sharpe`(N, V[SR_n])

    The probability that the selected strategy's true Sharpe ratio is above what the
    best of N edge-free trials would show by luck. All Sharpe ratios per period;
    ``kurtosis`` RAW (normal = 3). Reference: Bailey and López de Prado (2014), "The
    Deflated Sharpe Ratio", eq. (1)-(2); their worked example (N = 100, V = 0.5/250,
    T = 1250, SR = 2.5/sqrt(250), skew -3, kurtosis 10) gives SR0 = 0.1132, DSR = 0.9004.
    """
    threshold = expected_max_sharpe(n_trials, trials_sharpe_variance)
    return probabilistic_sharpe_ratio(sharpe, threshold, n_obs, skew, kurtosis)


def min_track_record_length(
    sharpe: float, threshold: float = 0.0, skew: float = 0.0, kurtosis: float = 3.0, confidence: float = 0.95
) -> float:
    """Minimum track record length: the T at which PSR(threshold) reaches ``confidence``.

    MinTRL = 1 + (1 - gamma3 SR + (gamma4 - 1) / 4 SR**2) (Z_alpha / (SR - SR*))**2

    in periods (days for daily returns); SR, SR* per period; gamma4 RAW kurtosis;
    Z_alpha the standard normal quantile of ``confidence``. Reference: Bailey and
    López de Prado (2012), "The Sharpe Ratio Efficient Frontier", eq. (13). It inverts
    `probabilistic_sharpe_ratio` exactly. +inf when SR <= SR* (no length suffices).
    """
    _check_confidence(confidence)
    if not sharpe > threshold:
        return float("inf") if np.isfinite(sharpe) else float("nan")
    factor = float(sharpe_variance_factor(sharpe, skew, kurtosis))
    return 1.0 + factor * (scipy_stats.norm.ppf(confidence) / (sharpe - threshold)) ** 2


# ------------------------------------------------------------------------- return series


def daily_matrix(returns: Any, timestamps: Any = None) -> np.ndarray:
    """Returns as a float64 [series x days] array, intraday bars compounded per exchange date.

    :param returns: (T,) one series or [series x T] several (trials x bars), simple returns.
    :param timestamps: the T bar timestamps; when they are intraday the bars are
        compounded by `trader.metrics.daily_returns`. None: the returns are daily already.
    :return: a 2-D array, one row per series (one row for a 1-D input).
    """
    if isinstance(returns, pd.DataFrame):
        raise ConfigError(
            "returns must be a (T,) or [series x T] array, not a DataFrame, whose orientation is ambiguous: "
            "pass frame.to_numpy().T for a frame of dates x strategies"
        )
    values = np.asarray(returns, dtype=np.float64)
    if values.ndim not in (1, 2):
        raise ConfigError(f"returns must be (T,) or [series x T]; got shape {values.shape}")
    values = np.atleast_2d(values)
    if timestamps is None or not metrics.is_intraday(timestamps):
        if timestamps is not None and len(timestamps) != values.shape[1]:
            raise ConfigError(f"{len(timestamps)} timestamps for {values.shape[1]} returns")
        return values
    return metrics.daily_returns(values.T, timestamps).to_numpy(dtype=np.float64).T


def _clean_days(values: np.ndarray) -> tuple[np.ndarray, str | None]:
    """Drop NaN days (whole columns of a [series x days] array); a reason for what cannot be used."""
    if np.isinf(values).any():
        return values, f"returns hold {int(np.isinf(values).sum())} infinite value(s)"
    kept = values[:, ~np.isnan(values).any(axis=0)]
    if kept.shape[1] < MIN_DAYS:
        return kept, f"only {kept.shape[1]} daily returns (at least {MIN_DAYS} are needed)"
    return kept, None


def sharpe_moments(returns: Any, timestamps: Any = None) -> Moments:
    """Days, per-day Sharpe ratio, skewness and raw kurtosis of one return series.

    NaN days are dropped. NaN with a reason for fewer than `MIN_DAYS` days, constant
    returns (the Sharpe ratio is undefined) or infinite returns.
    """
    return _series(returns, timestamps)[1]


def _series(returns: Any, timestamps: Any) -> tuple[np.ndarray, Moments]:
    """One series' daily returns (NaN days dropped) and their `Moments`."""
    values, reason = _clean_days(daily_matrix(returns, timestamps))
    if values.shape[0] != 1:
        raise ConfigError(f"expected one return series; got {values.shape[0]}")
    daily = values[0]
    if reason is None and daily.max() == daily.min():
        reason = f"returns are constant ({daily[0]:g} every day): the Sharpe ratio is undefined"
    if reason is not None:
        return daily, Moments(len(daily), math.nan, math.nan, math.nan, reason)
    centred = daily - daily.mean()
    m2, m3, m4 = (np.mean(centred**k) for k in (2, 3, 4))
    sharpe = daily.mean() / daily.std(ddof=1)
    return daily, Moments(len(daily), float(sharpe), float(m3 / m2**1.5), float(m4 / m2**2))


def sharpe_difference(first: Any, second: Any, timestamps: Any = None) -> SharpeDifference:
    """Is the first series' Sharpe ratio above the second's? Both measured on the same days.

    z = (SR1 - SR2) sqrt(T) / sqrt(2 (1 - rho) + (SR1**2 + SR2**2 - 2 SR1 SR2 rho**2) / 2)

    per-day Sharpe ratios, rho the correlation of the two series, T their common days
    (a day NaN in either is dropped from both). Jobson, J. and Korkie, B. (1981),
    "Performance Hypothesis Testing with the Sharpe and Treynor Measures", Journal of
    Finance 36(4), as corrected by Memmel, C. (2003), "Performance Hypothesis Testing
    with the Sharpe Ratio", Finance Letters 1. It assumes i.i.d. normal returns. The
    correlation is what makes it sharp: two strategies that hold nearly the same book
    differ by much less than either's own error. NaN with a reason when either series
    cannot support a Sharpe ratio, or when the two move together exactly (the same
    series, up to rounding and scale: no difference to test).
    """
    values, reason = _clean_days(np.vstack([daily_matrix(first, timestamps), daily_matrix(second, timestamps)]))
    if values.shape[0] != 2:
        raise ConfigError(f"expected two return series; got {values.shape[0]}")
    days = values.shape[1]
    if reason is None and (values.max(axis=1) == values.min(axis=1)).any():
        reason = "a series is constant: its Sharpe ratio is undefined"
    if reason is not None:
        return SharpeDifference(math.nan, math.nan, math.nan, days, reason)
    sharpe = values.mean(axis=1) / values.std(axis=1, ddof=1)
    rho = float(np.corrcoef(values)[0, 1])
    variance = 2.0 * (1.0 - rho) + 0.5 * (sharpe[0] ** 2 + sharpe[1] ** 2 - 2.0 * sharpe[0] * sharpe[1] * rho**2)
    if variance < 1e-12:  # T times the variance of SR1 - SR2; 0 for the same series, up to rounding and scale
        reason = "the two series move together exactly (correlation 1, equal Sharpe ratios): no difference to test"
        return SharpeDifference(math.nan, math.nan, rho, days, reason)
    z = (sharpe[0] - sharpe[1]) * math.sqrt(days / variance)
    return SharpeDifference(float((sharpe[0] - sharpe[1]) * math.sqrt(TRADING_DAYS)), float(z), rho, days)


def benchmark_fit(returns: Any, benchmark: Any, timestamps: Any = None, confidence: float = 0.95) -> BenchmarkFit:
    """Beta, alpha with its interval, tracking error, information ratio and correlation of one
    strategy's returns against the benchmark's (both simple returns over the same bars or days;
    intraday bars compounded per exchange date first). A day NaN in either is dropped from both.

    The interval is the ordinary least-squares one of the intercept (i.i.d. errors): the
    figures equal a plain least-squares fit's (``numpy.linalg.lstsq``, statsmodels' OLS). NaN
    with a reason for fewer than `MIN_DAYS` days, or when the benchmark or the strategy does not move.
    """
    _check_confidence(confidence)
    values, reason = _clean_days(np.vstack([daily_matrix(returns, timestamps), daily_matrix(benchmark, timestamps)]))
    if values.shape[0] != 2:
        raise ConfigError(f"expected one return series and the benchmark's; got {values.shape[0]} series")
    y, x = values
    days = values.shape[1]
    if reason is None and x.max() == x.min():
        reason = "the benchmark's returns are constant: no beta to fit"
    if reason is None and y.max() == y.min():
        reason = f"returns are constant ({y[0]:g} every day): nothing to fit"
    if reason is not None:
        return BenchmarkFit(*([math.nan] * 7), days=days, confidence=confidence, reason=reason)
    alpha, beta = metrics.alpha_beta(y, x)
    intercept = float(np.mean(y - beta * x))
    residuals = y - intercept - beta * x
    centred = x - x.mean()
    scale = float(np.sum(residuals**2)) / (days - 2)
    se = math.sqrt(scale * (1.0 / days + x.mean() ** 2 / float(np.sum(centred**2))))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, days - 2)) * se
    yearly = metrics.TRADING_DAYS_PER_YEAR
    return BenchmarkFit(
        alpha=float(alpha),
        alpha_low=(1.0 + intercept - half) ** yearly - 1.0,
        alpha_high=(1.0 + intercept + half) ** yearly - 1.0,
        beta=float(beta),
        tracking_error=float(metrics.tracking_error(y, x)),
        information_ratio=float(metrics.information_ratio(y, x)),
        correlation=float(metrics.benchmark_correlation(y, x)),
        days=days,
        confidence=confidence,
        intercept=intercept,
        intercept_se=se,
    )


def sharpe_interval_analytic(returns: Any, timestamps: Any = None, confidence: float = 0.95) -> Interval:
    """Interval of the annualised Sharpe ratio from the analytic standard error (Lo / Mertens).

    SR_a +- Z^-1((1 + c) / 2) sqrt(252) SE(SR), with SE from `sharpe_standard_error`
    (sample skew and raw kurtosis; i.i.d. returns assumed: serial correlation is not
    corrected, see `sharpe_interval_bootstrap`).
    """
    _check_confidence(confidence)
    moments = sharpe_moments(returns, timestamps)
    if moments.reason is not None:
        return Interval(math.nan, math.nan, confidence, "analytic", moments.reason)
    half = (
        scipy_stats.norm.ppf(0.5 + confidence / 2.0)
        * math.sqrt(TRADING_DAYS)
        * sharpe_standard_error(moments.sharpe, moments.days, moments.skew, moments.kurtosis)
    )
    return Interval(float(moments.annual_sharpe - half), float(moments.annual_sharpe + half), confidence, "analytic")


def _annual_sharpe_of_sample(sample: np.ndarray) -> np.ndarray:
    """Annualised Sharpe ratio of one daily series, as the one-element array that arch's bootstrap
    wants from a statistic; 0/0 -> 0, x/0 -> +-inf, NaN -> 0.

    The bootstrap calls it once per replication (1,000 a strategy, 67,000 for a backtest of 64
    policies): numpy's mean and std of the 1-D sample, then Python arithmetic on the two floats,
    which numpy's array-wide `where` and `nan_to_num` on one value cost several times more than
    (the same values, bit for bit, as those array operations give: tests/test_stats.py)."""
    mean, std = float(sample.mean()), float(sample.std(ddof=1))
    if std > 0:
        ratio = mean / std
    elif mean != 0 and not math.isnan(mean):
        ratio = math.copysign(math.inf, mean)
    else:
        ratio = 0.0
    return np.array([ratio * math.sqrt(TRADING_DAYS)])


def optimal_block_length(returns: np.ndarray) -> float:
    """Mean block length for a stationary bootstrap of a daily series, at least 1.

    Politis and White (2004), corrected by Patton, Politis and White (2009), as
    computed by `arch.bootstrap.optimal_block_length`.
    """
    from arch.bootstrap import optimal_block_length as arch_block_length

    return max(1.0, float(arch_block_length(np.asarray(returns, dtype=float))["stationary"].iloc[0]))


def sharpe_interval_bootstrap(
    returns: Any,
    timestamps: Any = None,
    confidence: float = 0.95,
    reps: int = 1000,
    seed: int = 0,
    block_length: float | None = None,
    method: str = "percentile",
) -> Interval:
    """Interval of the annualised Sharpe ratio by the stationary bootstrap (arch).

    Resamples the daily returns in blocks of geometric length with mean
    ``block_length`` (Politis and Romano 1994, "The Stationary Bootstrap", JASA
    89(428)), which keeps short-range serial dependence and volatility clustering that
    the analytic interval ignores; no normality assumed. The interval is arch's
    `conf_int` of the annualised Sharpe ratio, percentile method by default.

    :param reps: bootstrap replications.
    :param seed: seed of the resampling; the same seed gives the same interval.
    :param block_length: mean block length in days; None: `optimal_block_length`.
    :param method: any `arch.bootstrap.StationaryBootstrap.conf_int` method
        ("percentile", "basic", "bca", "norm", ...).
    """
    from arch.bootstrap import StationaryBootstrap

    _check_confidence(confidence)
    if reps < 10:
        raise ConfigError(f"reps must be at least 10; got {reps}")
    daily, moments = _series(returns, timestamps)
    if moments.reason is not None:
        return Interval(math.nan, math.nan, confidence, "stationary bootstrap", moments.reason)
    block = optimal_block_length(daily) if block_length is None else float(block_length)
    if not block >= 1:
        raise ConfigError(f"block_length must be at least 1 day; got {block_length}")
    bootstrap = StationaryBootstrap(block, daily, seed=np.random.default_rng(seed))
    low, high = bootstrap.conf_int(_annual_sharpe_of_sample, reps=reps, method=method, size=confidence)[:, 0]
    return Interval(float(low), float(high), confidence, "stationary bootstrap", block_length=block)


# ------------------------------------------------------------------------- many trials


def pbo_cscv(trial_returns: Any, timestamps: Any = None, n_blocks: int = 16) -> PBOResult:
    """Probability of backtest overfitting by combinatorially symmetric cross-validation.

    The [trials x days] matrix M is cut along time into S equal blocks (the
    remainder of T / S days goes to the first blocks). For each of the C(S, S/2) ways
    to pick S/2 blocks as the in-sample set J (the rest, J', out of sample):
    n* = argmax_n SR_n(J); omega = rank of SR_n*(J') among the N trials / (N + 1)
    (rank 1 = worst, ties averaged); logit lambda = ln(omega / (1 - omega)).
    PBO = share of combinations with lambda <= 0: how often the in-sample winner is at
    or below the out-of-sample median. Performance is the Sharpe ratio (a constant
    trial ranks by the sign of its mean). Reference: Bailey, D., Borwein, J.,
    López de Prado, M. and Zhu, Q. (2017), "The Probability of Backtest Overfitting",
    Journal of Computational Finance 20(4).

    Pure noise gives PBO near 1/2; a real edge that persists gives PBO near 0. Blocks
    of consecutive days keep serial correlation inside each block.

    :param trial_returns: [trials x bars] simple returns, one row per trial.
    :param timestamps: bar timestamps (intraday bars are compounded to daily).
    :param n_blocks: S, even, at least 2. C(16, 8) = 12,870 combinations.
    """
    if n_blocks < 2 or n_blocks % 2:
        raise ConfigError(f"n_blocks must be even and at least 2; got {n_blocks}")
    values, reason = _clean_days(daily_matrix(trial_returns, timestamps))
    n_trials, days = values.shape
    if reason is None and n_trials < 2:
        reason = f"CSCV needs at least 2 trials; got {n_trials}"
    if reason is None and np.all(values.max(axis=1) == values.min(axis=1)):
        reason = "every trial's returns are constant: there is nothing to rank"
    if reason is None and days < 2 * n_blocks:
        reason = f"only {days} daily returns for {n_blocks} blocks (at least 2 days per block are needed)"
    if reason is not None:
        return PBOResult(math.nan, np.array([]), n_blocks, n_trials, days, reason)
    blocks = np.array_split(np.arange(days), n_blocks)
    count = np.array([len(b) for b in blocks], dtype=float)
    sums = np.stack([values[:, b].sum(axis=1) for b in blocks])  # [S, N]
    squares = np.stack([(values[:, b] ** 2).sum(axis=1) for b in blocks])
    chosen = np.zeros((math.comb(n_blocks, n_blocks // 2), n_blocks))
    for row, picked in enumerate(combinations(range(n_blocks), n_blocks // 2)):
        chosen[row, list(picked)] = 1.0
    train = _sharpe_from_sums(chosen @ sums, chosen @ squares, chosen @ count)
    test = _sharpe_from_sums((1 - chosen) @ sums, (1 - chosen) @ squares, (1 - chosen) @ count)
    best = np.argmax(train, axis=1)
    best_test = test[np.arange(len(best)), best][:, None]
    rank = (test < best_test).sum(axis=1) + 0.5 * ((test == best_test).sum(axis=1) + 1)
    omega = rank / (n_trials + 1)
    logits = np.log(omega / (1.0 - omega))
    return PBOResult(float(np.mean(logits <= 0)), logits, n_blocks, n_trials, days)


def _sharpe_from_sums(sums: np.ndarray, squares: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per-day Sharpe (ddof=1) from sums and sums of squares; 0/0 -> 0, x/0 -> +-inf."""
    count = count[:, None]
    mean = sums / count
    variance = np.maximum((squares - count * mean**2) / (count - 1), 0.0)
    std = np.sqrt(variance)
    tiny = std <= 1e-6 * np.abs(mean)
    constant = np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tiny | (std == 0), constant, mean / np.where(std == 0, 1.0, std))


def spa_test(
    benchmark_returns: Any,
    trial_returns: Any,
    timestamps: Any = None,
    reps: int = 1000,
    seed: int = 0,
    block_length: int | None = None,
) -> SPAResult:
    """Hansen's test of superior predictive ability: does any trial beat the benchmark?

    H0: no trial's expected daily return exceeds the benchmark's, max_k E[r_k - r_b] <= 0.
    Losses are the negated daily returns; the studentised statistic
    max_k sqrt(T) mean(d_k) / sigma_k is compared with its stationary-bootstrap
    distribution under H0, by `arch.bootstrap.SPA`. Reference: Hansen, P. R. (2005),
    "A Test for Superior Predictive Ability", Journal of Business & Economic
    Statistics 23(4); White, H. (2000), "A Reality Check for Data Snooping",
    Econometrica 68(5). It compares mean returns, not Sharpe ratios: a trial with
    more leverage beats the benchmark more easily.

    :param benchmark_returns: (T,) the benchmark's (e.g. equal-weight's) returns.
    :param trial_returns: [trials x T] every tried strategy's returns on the same bars.
    :param block_length: mean block length in days; None: the mean over trials of
        `optimal_block_length` of the return differences, rounded up.
    """
    from arch.bootstrap import SPA

    if reps < 10:
        raise ConfigError(f"reps must be at least 10; got {reps}")
    bench = daily_matrix(benchmark_returns, timestamps)
    trials = daily_matrix(trial_returns, timestamps)
    if bench.shape[0] != 1 or bench.shape[1] != trials.shape[1]:
        raise ConfigError(f"benchmark has shape {bench.shape[1:]} but trials have {trials.shape[1]} days")
    values, reason = _clean_days(np.vstack([bench, trials]))
    differences = values[1:] - values[:1]
    if reason is None and np.all(differences.max(axis=1) == differences.min(axis=1)):
        reason = "every trial's return differs from the benchmark's by a constant: nothing to test"
    if reason is not None:
        nan = math.nan
        return SPAResult(nan, nan, nan, trials.shape[0], values.shape[1], 0, reps, reason)
    if block_length is None:
        varying = differences[differences.max(axis=1) > differences.min(axis=1)]
        block_length = math.ceil(np.mean([optimal_block_length(row) for row in varying]))
    if block_length < 1:
        raise ConfigError(f"block_length must be at least 1 day; got {block_length}")
    spa = SPA(-values[0], -values[1:].T, block_size=int(block_length), reps=reps, seed=np.random.default_rng(seed))
    spa.compute()
    pvalues = spa.pvalues
    return SPAResult(
        float(pvalues["consistent"]),
        float(pvalues["lower"]),
        float(pvalues["upper"]),
        trials.shape[0],
        values.shape[1],
        int(block_length),
        reps,
    )
