"""trader.stats: known answers from the papers, reference implementations, calibration by simulation.

Every simulation is seeded. The calibration bands are binomial 99% bands
(`scipy.stats.binom.interval`) around the nominal rate, stated where they are used.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from arch.bootstrap import SPA, optimal_block_length
from scipy import stats as scipy_stats

from trader import metrics, stats
from trader.backtesting.evidence import pbo_json, pbo_verdict, series_evidence, spa_json, spa_verdict, verdict
from trader.errors import ConfigError

SQRT_YEAR = math.sqrt(metrics.TRADING_DAYS_PER_YEAR)


def _gaussian(seed: int, days: int, daily_sharpe: float = 0.0, vol: float = 0.01) -> np.ndarray:
    return np.random.default_rng(seed).normal(daily_sharpe * vol, vol, days)


def _correlated_pair(
    rng: np.random.Generator, days: int, first_sharpe: float, second_sharpe: float, rho: float, vol: float = 0.01
) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian daily series of the given per-day Sharpe ratios whose correlation is ``rho``."""
    shocks = math.sqrt(rho) * rng.normal(size=days) + math.sqrt(1.0 - rho) * rng.normal(size=(2, days))
    return first_sharpe * vol + vol * shocks[0], second_sharpe * vol + vol * shocks[1]


def _binomial_band(draws: int, rate: float, level: float = 0.99) -> tuple[float, float]:
    low, high = scipy_stats.binom.interval(level, draws, rate)
    return low / draws, high / draws


# --------------------------------------------------------------------- known answers


def test_the_2014_papers_worked_example() -> None:
    """Bailey and López de Prado (2014), section 5: SR0 = 0.1132, DSR = 0.9004."""
    variance, sharpe = 0.5 / 250, 2.5 / math.sqrt(250)
    assert stats.expected_max_sharpe(100, variance) == pytest.approx(0.1132, abs=1e-4)
    dsr = stats.deflated_sharpe_ratio(
        sharpe, 1250, skew=-3.0, kurtosis=10.0, n_trials=100, trials_sharpe_variance=variance
    )
    assert dsr == pytest.approx(0.9004, abs=1e-4)


def test_psr_with_normal_moments_is_the_normal_cdf_of_the_scaled_statistic() -> None:
    """Skew 0, kurtosis 3: PSR(0) = Phi(SR sqrt(T - 1) / sqrt(1 + SR^2 / 2)), exactly."""
    for sharpe, days in ((0.05, 250), (-0.1, 31), (0.3, 2000)):
        expected = scipy_stats.norm.cdf(sharpe * math.sqrt(days - 1) / math.sqrt(1 + sharpe**2 / 2))
        assert stats.probabilistic_sharpe_ratio(sharpe, 0.0, days, 0.0, 3.0) == pytest.approx(expected, rel=1e-14)


def test_psr_at_zero_is_close_to_the_t_statistics_cdf_for_small_sharpe() -> None:
    """Phi(t) of the one-sample t-test differs only by the SR^2/2 and T-1 terms."""
    returns = _gaussian(3, 1000, daily_sharpe=0.04)
    moments = stats.sharpe_moments(returns)
    t_statistic = scipy_stats.ttest_1samp(returns, 0.0).statistic
    psr = stats.probabilistic_sharpe_ratio(moments.sharpe, 0.0, moments.days)
    assert psr == pytest.approx(scipy_stats.norm.cdf(t_statistic), abs=2e-3)


def test_the_formulas_refuse_excess_kurtosis() -> None:
    with pytest.raises(ConfigError, match="RAW kurtosis"):
        stats.probabilistic_sharpe_ratio(0.1, 0.0, 100, skew=0.0, kurtosis=0.0)
    with pytest.raises(ConfigError, match="RAW kurtosis"):
        stats.deflated_sharpe_ratio(0.1, 100, skew=-2.0, kurtosis=4.0, n_trials=10, trials_sharpe_variance=0.01)


def test_lo_mertens_standard_error_on_a_hand_computed_case() -> None:
    """SR 0.1, T 100, skew -1, kurtosis 6: (1 + 0.1 + 5/4 * 0.01) / 100 = 0.011125."""
    assert stats.sharpe_standard_error(0.1, 100, skew=-1.0, kurtosis=6.0) == pytest.approx(0.10547511554864, rel=1e-12)
    assert stats.sharpe_standard_error(0.2, 50) == pytest.approx(math.sqrt(1.02 / 50), rel=1e-14)  # Lo: 1 + SR^2/2


def test_two_sharpe_ratios_on_the_same_days_known_answers() -> None:
    """The difference is the annualised Sharpe ratios' difference; swapping negates z; a day either
    lacks is dropped from both; the same series (or a scaled copy) has no difference to test."""
    first, second = _correlated_pair(np.random.default_rng(5), 250, 0.1, 0.0, 0.5)
    found = stats.sharpe_difference(first, second)
    own = [stats.sharpe_moments(x).annual_sharpe for x in (first, second)]
    assert found.reason is None and found.days == 250
    assert found.difference == pytest.approx(own[0] - own[1])
    assert found.correlation == pytest.approx(np.corrcoef(first, second)[0, 1])
    assert stats.sharpe_difference(second, first).z == pytest.approx(-found.z)
    assert found.p_value == pytest.approx(scipy_stats.norm.sf(found.z))
    holed = first.copy()
    holed[7] = np.nan
    assert stats.sharpe_difference(holed, second).days == 249
    assert stats.sharpe_difference(holed, second).z == pytest.approx(
        stats.sharpe_difference(np.delete(first, 7), np.delete(second, 7)).z
    )
    for same in (first, 2.0 * first):
        untested = stats.sharpe_difference(first, same)
        assert math.isnan(untested.z) and "no difference to test" in untested.reason
    assert "only 20 daily returns" in stats.sharpe_difference(first[:20], second[:20]).reason
    assert "constant" in stats.sharpe_difference(first, np.full(250, 1e-4)).reason


def test_the_analytic_interval_uses_scipys_moments_on_daily_returns() -> None:
    returns = np.random.default_rng(4).standard_t(5, 300) * 0.01 + 0.0005
    sharpe = returns.mean() / returns.std(ddof=1)
    skew = scipy_stats.skew(returns)
    kurtosis = scipy_stats.kurtosis(returns, fisher=False)
    se = math.sqrt((1 - skew * sharpe + (kurtosis - 1) / 4 * sharpe**2) / 300) * SQRT_YEAR
    half = scipy_stats.norm.ppf(0.95) * se
    interval = stats.sharpe_interval_analytic(returns, confidence=0.90)
    assert (interval.low, interval.high) == pytest.approx(
        (sharpe * SQRT_YEAR - half, sharpe * SQRT_YEAR + half), rel=1e-12
    )
    assert sharpe * SQRT_YEAR == pytest.approx(metrics.sharpe_ratio(returns), rel=1e-12)


@pytest.mark.parametrize(
    ("sharpe", "threshold", "skew", "kurtosis", "confidence"),
    [(0.1, 0.0, 0.0, 3.0, 0.95), (0.08, 0.02, -1.5, 9.0, 0.99), (0.3, -0.1, 0.5, 4.0, 0.80)],
)
def test_min_track_record_length_inverts_psr(sharpe, threshold, skew, kurtosis, confidence) -> None:
    length = stats.min_track_record_length(sharpe, threshold, skew, kurtosis, confidence)
    assert stats.probabilistic_sharpe_ratio(sharpe, threshold, length, skew, kurtosis) == pytest.approx(
        confidence, abs=1e-12
    )


def test_min_track_record_length_is_infinite_without_an_edge_over_the_threshold() -> None:
    assert stats.min_track_record_length(0.05, 0.05) == math.inf
    assert stats.min_track_record_length(-0.1) == math.inf


def test_expected_max_sharpe_against_a_simulated_maximum() -> None:
    """The Euler-Mascheroni approximation is within 2% of the simulated mean of the maximum."""
    draws = np.random.default_rng(5).standard_normal((20_000, 100)) * math.sqrt(0.004)
    simulated = draws.max(axis=1).mean()
    assert stats.expected_max_sharpe(100, 0.004) == pytest.approx(simulated, rel=0.02)
    assert stats.expected_max_sharpe(1, 0.004) == 0.0
    assert stats.expected_max_sharpe(10, 0.004) < stats.expected_max_sharpe(1000, 0.004)


def test_spa_equals_arch_on_the_same_data_and_seed() -> None:
    rng = np.random.default_rng(6)
    benchmark = rng.normal(0.0003, 0.01, 500)
    trials = rng.normal(0.0003, 0.01, (8, 500))
    ours = stats.spa_test(benchmark, trials, reps=300, seed=11, block_length=4)
    theirs = SPA(-benchmark, -trials.T, block_size=4, reps=300, seed=np.random.default_rng(11))
    theirs.compute()
    assert (ours.lower, ours.consistent, ours.upper) == tuple(theirs.pvalues[["lower", "consistent", "upper"]])
    assert ours.reason is None and ours.n_trials == 8 and ours.days == 500


def test_spa_finds_a_planted_edge_and_not_noise() -> None:
    rng = np.random.default_rng(7)
    benchmark = rng.normal(0.0, 0.01, 750)
    trials = benchmark + rng.normal(0.0, 0.005, (10, 750))
    assert stats.spa_test(benchmark, trials, reps=300, seed=0).consistent > 0.05
    trials[3] += 0.002
    assert stats.spa_test(benchmark, trials, reps=300, seed=0).consistent < 0.01


def test_spa_chooses_its_block_length_from_the_differences() -> None:
    rng = np.random.default_rng(8)
    benchmark, trials = rng.normal(0, 0.01, 400), rng.normal(0, 0.01, (3, 400))
    lengths = [max(1.0, optimal_block_length(row - benchmark)["stationary"].iloc[0]) for row in trials]
    assert stats.spa_test(benchmark, trials, reps=50).block_length == math.ceil(np.mean(lengths))


def test_the_bootstrap_is_archs_and_reproducible() -> None:
    returns = _gaussian(9, 400, daily_sharpe=0.05)
    first = stats.sharpe_interval_bootstrap(returns, reps=300, seed=1)
    assert first == stats.sharpe_interval_bootstrap(returns, reps=300, seed=1)
    assert first != stats.sharpe_interval_bootstrap(returns, reps=300, seed=2)
    assert first.low < metrics.sharpe_ratio(returns) < first.high
    assert first.block_length == max(1.0, optimal_block_length(returns)["stationary"].iloc[0])
    assert stats.sharpe_interval_bootstrap(returns, reps=300, seed=1, block_length=7.0).block_length == 7.0


def test_the_bootstrap_interval_is_archs_with_the_array_statistic_bit_for_bit() -> None:
    """The bootstrap's statistic is computed on two floats per replication; the interval equals arch's
    conf_int with the statistic written over numpy arrays (mean, std, where, nan_to_num), bit for bit,
    on ordinary series and on ones whose resamples are often constant (std 0: +-inf) or all zero."""
    from arch.bootstrap import StationaryBootstrap

    def array_statistic(sample: np.ndarray) -> np.ndarray:
        rows = sample[None, :]
        mean, std = rows.mean(axis=-1), rows.std(axis=-1, ddof=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(std > 0, mean / np.where(std > 0, std, 1.0), np.sign(mean) * np.inf)
        return np.nan_to_num(ratio, nan=0.0, posinf=np.inf, neginf=-np.inf) * math.sqrt(252)

    rng = np.random.default_rng(4)
    sparse_up = np.where(rng.random(120) < 0.05, 0.01, 0.0)  # mostly zero: many resamples all 0 or constant
    sparse_down = np.where(rng.random(120) < 0.05, -0.02, 0.0)
    series = [_gaussian(seed, 252, daily_sharpe=0.05) for seed in range(8)] + [sparse_up, sparse_down]
    for k, returns in enumerate(series):
        for method in ("percentile", "basic"):
            ours = stats.sharpe_interval_bootstrap(returns, reps=400, seed=k, block_length=3.0, method=method)
            bootstrap = StationaryBootstrap(3.0, returns, seed=np.random.default_rng(k))
            low, high = bootstrap.conf_int(array_statistic, reps=400, method=method, size=0.95)[:, 0]
            assert (ours.low, ours.high) == (float(low), float(high)) or (
                math.isnan(ours.low) and math.isnan(float(low))
            ), (k, method)


def test_intraday_returns_are_compounded_to_daily_first() -> None:
    days = pd.bdate_range("2024-01-02", periods=60)
    stamps = pd.DatetimeIndex([day + pd.Timedelta(hours=h) for day in days for h in (10, 12, 15)]).tz_localize(
        "America/New_York"
    )
    bars = np.random.default_rng(10).normal(0.0002, 0.004, len(stamps))
    daily = metrics.daily_returns(bars, stamps).to_numpy()
    assert len(daily) == 60
    assert stats.sharpe_moments(bars, stamps) == stats.sharpe_moments(daily)
    assert stats.sharpe_interval_bootstrap(bars, stamps, reps=100) == stats.sharpe_interval_bootstrap(daily, reps=100)
    matrix = np.vstack([bars, bars[::-1]])
    assert np.array_equal(stats.daily_matrix(matrix, stamps)[0], daily)
    assert stats.pbo_cscv(matrix, stamps, n_blocks=4).days == 60


# --------------------------------------------------------------------- one strategy, for report.json


def test_strategy_evidence_is_json_ready_and_agrees_with_the_parts() -> None:
    returns = _gaussian(12, 500, daily_sharpe=0.08)
    trial_sharpes = np.random.default_rng(13).normal(0.0, 1.0, 14)
    evidence = series_evidence(returns, n_trials=14, trial_sharpes=trial_sharpes, reps=200, seed=3)
    json.dumps(evidence, allow_nan=False)
    moments = stats.sharpe_moments(returns)
    assert evidence["sharpe"] == pytest.approx(metrics.sharpe_ratio(returns), rel=1e-12)
    assert evidence["psr"] == stats.probabilistic_sharpe_ratio(moments.sharpe, 0.0, 500, moments.skew, moments.kurtosis)
    variance = np.var(trial_sharpes, ddof=1) / metrics.TRADING_DAYS_PER_YEAR
    assert evidence["dsr"] == pytest.approx(
        stats.deflated_sharpe_ratio(moments.sharpe, 500, moments.skew, moments.kurtosis, 14, variance), rel=1e-12
    )
    assert evidence["expected_max_sharpe"] == pytest.approx(stats.expected_max_sharpe(14, variance) * SQRT_YEAR)
    boot = stats.sharpe_interval_bootstrap(returns, reps=200, seed=3)
    assert evidence["interval_bootstrap"] == [boot.low, boot.high]
    assert evidence["reasons"] == {}
    assert evidence["dsr"] < evidence["psr"]


def test_strategy_evidence_without_trials_gives_none_with_a_reason() -> None:
    evidence = series_evidence(_gaussian(14, 200), reps=50)
    json.dumps(evidence, allow_nan=False)
    assert evidence["dsr"] is None and "trial" in evidence["reasons"]["dsr"]
    assert evidence["psr"] is not None


def test_one_trial_means_no_deflation_and_too_few_trial_sharpes_are_refused() -> None:
    returns = _gaussian(22, 300, daily_sharpe=0.05)
    single = series_evidence(returns, n_trials=1, reps=50)
    assert single["dsr"] == single["psr"] and single["expected_max_sharpe"] == 0.0
    assert "fewer than 2" in series_evidence(returns, n_trials=5, trial_sharpes=[1.0], reps=50)["reasons"]["dsr"]
    with pytest.raises(ConfigError, match="n_trials"):
        series_evidence(returns, n_trials=2, trial_sharpes=[1.0, 0.5, 0.2], reps=50)


@pytest.mark.parametrize(
    ("psr", "dsr", "dsr_null", "expected"),
    [
        (0.99, 0.97, None, "above zero at 95% after 14 trials (DSR 0.97)"),
        (0.99, 0.62, None, "above zero at 95%, but not after 14 trials (DSR 0.62)"),
        (
            0.99,
            0.12,
            0.99,
            "above zero at 95% after 14 trials (DSR 0.99 against 14 zero-Sharpe trials; "
            "0.12 from the trials' own spread)",
        ),
        (
            0.99,
            0.97,
            0.62,
            "above zero at 95%, but not after 14 trials (DSR 0.62 against 14 zero-Sharpe trials; "
            "0.97 from the trials' own spread)",
        ),
        (0.99, None, None, "above zero at 95%"),
        (0.60, 0.10, 0.20, "not distinguishable from zero"),
        (0.01, 0.00, 0.00, "below zero at 95%"),
    ],
)
def test_the_verdict_sentences(psr, dsr, dsr_null, expected) -> None:
    """The trial count's judgement follows dsr_null when it is there, else dsr."""
    evidence = {
        "confidence": 0.95,
        "psr": psr,
        "dsr": dsr,
        "dsr_null": dsr_null,
        "n_trials": 14 if dsr is not None else None,
        "reasons": {},
    }
    assert verdict(evidence) == expected


def test_the_spa_and_pbo_sentences() -> None:
    result = stats.SPAResult(0.031, 0.02, 0.04, n_trials=14, days=500, block_length=3, reps=1000)
    assert spa_verdict(result, "equal-weight") == "beats equal-weight: p = 0.03 (SPA, 14 trials)"
    assert spa_verdict(stats.SPAResult(0.41, 0.3, 0.5, 14, 500, 3, 1000), "QQQ").startswith("does not beat QQQ")
    labelled = spa_json(result, "equal_weight", label="Equal-weight buy-and-hold")
    assert labelled["benchmark"] == "equal_weight"  # the key, for programs; the label, for people
    assert labelled["sentence"] == "beats Equal-weight buy-and-hold: p = 0.03 (SPA, 14 trials)"
    assert spa_json(result, "equal_weight")["sentence"].startswith("beats equal_weight:")
    pbo = stats.pbo_cscv(np.random.default_rng(15).normal(0, 0.01, (5, 200)), n_blocks=4)
    assert pbo_verdict(pbo).startswith(f"PBO {pbo.pbo:.2f}: the in-sample winner of 5 trials")
    payload = pbo_json(pbo)
    json.dumps(payload, allow_nan=False)
    assert len(payload["logits"]) == math.comb(4, 2)


# --------------------------------------------------------------------- calibration by simulation


def test_psr_false_positives_on_edge_free_returns() -> None:
    """i.i.d. Gaussian, true Sharpe 0, 250 days, 2,000 draws: PSR > 0.95 in about 5%.

    Band: binomial 99% interval of 2,000 draws at 5%, [0.038, 0.063].
    """
    draws = 2000
    hits = 0
    for seed in range(draws):
        moments = stats.sharpe_moments(_gaussian(seed, 250))
        hits += (
            stats.probabilistic_sharpe_ratio(moments.sharpe, 0.0, moments.days, moments.skew, moments.kurtosis) > 0.95
        )
    low, high = _binomial_band(draws, 0.05)
    assert low <= hits / draws <= high, hits / draws


def test_dsr_controls_false_discoveries_of_the_best_of_many() -> None:
    """The best of 20 edge-free trials: PSR > 0.95 far more often than 5%, DSR > 0.95 at most about 5%.

    1,000 draws of 20 i.i.d. Gaussian trials of 250 days; DSR's V[SR_n] estimated from
    the trials. Bound: the upper end of the binomial 99% band at 5%.
    """
    draws, n_trials = 1000, 20
    psr_hits = dsr_hits = 0
    for seed in range(draws):
        trials = np.random.default_rng(50_000 + seed).normal(0.0, 0.01, (n_trials, 250))
        sharpes = trials.mean(axis=1) / trials.std(axis=1, ddof=1)
        moments = stats.sharpe_moments(trials[np.argmax(sharpes)])
        args = (moments.sharpe, moments.days, moments.skew, moments.kurtosis)
        psr_hits += stats.probabilistic_sharpe_ratio(args[0], 0.0, *args[1:]) > 0.95
        dsr_hits += stats.deflated_sharpe_ratio(*args, n_trials, float(np.var(sharpes, ddof=1))) > 0.95
    assert psr_hits / draws > 0.4
    assert dsr_hits / draws <= _binomial_band(draws, 0.05)[1], dsr_hits / draws


@pytest.mark.parametrize(
    "days, sharpe, rho",
    [(250, 0.1, 0.9), (63, 1.3, 0.99)],  # a year of an ordinary strategy; a quarter of the tournament's pods
)
def test_the_sharpe_difference_test_holds_its_size_when_the_two_are_equal(days, sharpe, rho) -> None:
    """2,000 pairs of equal true Sharpe: z > 1.645 in the 99% band of 5%, [0.038, 0.063]. The second
    case is where the tournament applies it: near-copies (rho 0.99) of a per-day Sharpe of 1.3 over
    63 validation days."""
    rng, draws = np.random.default_rng(days), 2000
    hits = sum(
        stats.sharpe_difference(*_correlated_pair(rng, days, sharpe, sharpe, rho)).z > 1.645 for _ in range(draws)
    )
    low, high = _binomial_band(draws, 0.05)
    assert low <= hits / draws <= high, hits / draws


def test_the_sharpe_difference_test_sees_a_small_gap_between_near_copies() -> None:
    """A gap of 0.1 per-day Sharpe (1.6 a year) between series that correlate at 0.99: found on most
    of 500 draws of 250 days, where the two Sharpe ratios' own intervals overlap on every draw."""
    rng, draws = np.random.default_rng(11), 500
    found = overlapping = 0
    for _ in range(draws):
        first, second = _correlated_pair(rng, 250, 0.2, 0.1, 0.99)
        found += stats.sharpe_difference(first, second).z > 1.645
        low = stats.sharpe_interval_analytic(first).low
        overlapping += low <= stats.sharpe_interval_analytic(second).high
    assert found / draws > 0.9 and overlapping == draws, (found, overlapping)


def test_the_analytic_interval_covers_the_true_sharpe() -> None:
    """2,000 draws of 250 Gaussian days, true annual Sharpe 0.79: coverage in the 99% band of 95%, [0.937, 0.962]."""
    draws, true = 2000, 0.05 * SQRT_YEAR
    covered = 0
    for seed in range(draws):
        interval = stats.sharpe_interval_analytic(_gaussian(70_000 + seed, 250, daily_sharpe=0.05))
        covered += interval.low <= true <= interval.high
    low, high = _binomial_band(draws, 0.95)
    assert low <= covered / draws <= high, covered / draws


BOOTSTRAP_DRAWS = 500


def test_the_bootstrap_interval_covers_the_true_sharpe() -> None:
    """500 draws of 500 Gaussian days, true annual Sharpe 0.79, 200 replications each.

    Band: binomial 99% interval of 500 draws at 95%, [0.924, 0.974]: wide enough for
    the percentile bootstrap's small undercoverage on short samples, narrow enough to catch a wrong scale (sqrt(252) missing or doubled) or a
    broken resampling. 500 draws keep the test near 5 s on 2 cores.
    """
    true = 0.05 * SQRT_YEAR
    covered = 0
    for seed in range(BOOTSTRAP_DRAWS):
        interval = stats.sharpe_interval_bootstrap(
            _gaussian(90_000 + seed, 500, daily_sharpe=0.05), reps=200, seed=seed
        )
        covered += interval.low <= true <= interval.high
    low, high = _binomial_band(BOOTSTRAP_DRAWS, 0.95)
    assert low <= covered / BOOTSTRAP_DRAWS <= high, covered / BOOTSTRAP_DRAWS


def test_pbo_of_pure_noise_is_about_one_half() -> None:
    """20 noise trials of 500 days, S = 16: the mean PBO of 30 seeded sets lies in [0.35, 0.65].

    One set's PBO is itself a noisy estimate (its 5-95% range over sets is roughly
    0.2-0.85), so the band is put on the mean; with an even number of trials the
    expected value is exactly 1/2.
    """
    values = [stats.pbo_cscv(np.random.default_rng(1000 + seed).normal(0, 0.01, (20, 500))).pbo for seed in range(30)]
    assert 0.35 <= np.mean(values) <= 0.65, np.mean(values)


def test_pbo_of_a_planted_edge_among_noise_is_small() -> None:
    """19 noise trials and one with an annual Sharpe of about 3 over 1,000 days: PBO < 0.1 for each of 10 sets."""
    for seed in range(10):
        trials = np.random.default_rng(100 + seed).normal(0, 0.01, (20, 1000))
        trials[seed % 20] += 0.002
        result = stats.pbo_cscv(trials)
        assert result.pbo < 0.1, (seed, result.pbo)
        assert len(result.logits) == math.comb(16, 8) and result.n_trials == 20 and result.days == 1000


def test_pbo_logits_follow_the_definition_on_a_tiny_case() -> None:
    """S = 2: one split each way; the in-sample winner's out-of-sample rank gives the logit."""
    trials = np.random.default_rng(16).normal(0, 0.01, (4, 40))
    first, second = trials[:, :20], trials[:, 20:]

    def sharpe(block: np.ndarray) -> np.ndarray:
        return block.mean(axis=1) / block.std(axis=1, ddof=1)

    expected = []
    for train, test in ((first, second), (second, first)):
        winner = np.argmax(sharpe(train))
        rank = 1 + np.sum(sharpe(test) < sharpe(test)[winner])
        expected.append(math.log((rank / 5) / (1 - rank / 5)))
    result = stats.pbo_cscv(trials, n_blocks=2)
    assert result.logits.tolist() == pytest.approx(expected)
    assert result.pbo == np.mean(np.array(expected) <= 0)


# --------------------------------------------------------------------- edge cases


def test_fewer_than_thirty_days_give_nan_with_a_reason() -> None:
    short = _gaussian(17, 29)
    for result in (
        stats.sharpe_moments(short),
        stats.sharpe_interval_analytic(short),
        stats.sharpe_interval_bootstrap(short),
    ):
        assert "only 29 daily returns" in result.reason
    assert math.isnan(stats.sharpe_interval_bootstrap(short).low)
    assert "only 29" in stats.pbo_cscv(np.vstack([short, short + 0.001]), n_blocks=2).reason
    assert "only 29" in stats.spa_test(short, short[None, :] + 0.001).reason
    evidence = series_evidence(short)
    json.dumps(evidence, allow_nan=False)
    assert evidence["sentence"] == "no evidence: only 29 daily returns (at least 30 are needed)"
    assert stats.sharpe_moments(_gaussian(17, 30)).reason is None


def test_constant_returns_give_nan_with_a_reason() -> None:
    flat = np.full(100, 0.001)
    moments = stats.sharpe_moments(flat)
    assert math.isnan(moments.sharpe) and "constant" in moments.reason
    assert "constant" in stats.sharpe_interval_bootstrap(flat).reason
    assert "constant" in stats.pbo_cscv(np.zeros((5, 100))).reason
    assert "constant" in stats.spa_test(flat, np.vstack([flat + 0.001, flat])).reason
    assert series_evidence(np.zeros(100))["psr"] is None


def test_a_constant_trial_among_others_is_ranked_not_fatal() -> None:
    trials = np.random.default_rng(18).normal(0, 0.01, (5, 200))
    trials[2] = 0.0
    result = stats.pbo_cscv(trials, n_blocks=4)
    assert result.reason is None and np.isfinite(result.logits).all()


def test_nan_days_are_dropped_and_infinities_refused() -> None:
    returns = _gaussian(19, 120)
    holed = returns.copy()
    holed[[3, 50, 99]] = np.nan
    kept = np.delete(returns, [3, 50, 99])
    assert stats.sharpe_moments(holed) == stats.sharpe_moments(kept)
    assert stats.sharpe_moments(holed).days == 117
    matrix = np.vstack([holed, returns, returns * 2])
    assert stats.pbo_cscv(matrix, n_blocks=4).days == 117
    assert "only 0 daily returns" in stats.sharpe_moments(np.full(50, np.nan)).reason
    holed[7] = np.inf
    assert "infinite" in stats.sharpe_moments(holed).reason
    assert "infinite" in series_evidence(holed)["reasons"]["psr"]


def test_bad_block_counts() -> None:
    trials = np.random.default_rng(20).normal(0, 0.01, (4, 100))
    for odd in (3, 15, 0):
        with pytest.raises(ConfigError, match="even"):
            stats.pbo_cscv(trials, n_blocks=odd)
    too_many = stats.pbo_cscv(trials, n_blocks=52)
    assert math.isnan(too_many.pbo) and "52 blocks" in too_many.reason
    assert "2 trials" in stats.pbo_cscv(trials[:1]).reason


def test_bad_parameters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="n_trials"):
        stats.expected_max_sharpe(0, 0.01)
    with pytest.raises(ConfigError, match="confidence"):
        stats.sharpe_interval_analytic(_gaussian(21, 100), confidence=1.0)
    with pytest.raises(ConfigError, match="n_obs"):
        stats.probabilistic_sharpe_ratio(0.1, 0.0, 1)
    with pytest.raises(ConfigError, match="days"):
        stats.spa_test(np.zeros(50), np.zeros((2, 60)))
    with pytest.raises(ConfigError, match="DataFrame"):
        stats.pbo_cscv(pd.DataFrame(np.zeros((60, 3))))


def test_stats_imports_without_torch() -> None:
    code = "import sys, trader, trader.stats; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ the global null's deflation


def test_dsr_null_is_the_dsr_against_zero_sharpe_trials() -> None:
    rng = np.random.default_rng(5)
    returns = rng.normal(0.001, 0.01, 300)
    evidence = series_evidence(returns, n_trials=14, trial_sharpes=[0.1, 2.0, -1.5, 3.0], reps=50)
    moments = stats.sharpe_moments(returns)
    expected = stats.deflated_sharpe_ratio(
        moments.sharpe, moments.days, moments.skew, moments.kurtosis, 14, stats.null_sharpe_variance(moments.days)
    )
    assert evidence["dsr_null"] == pytest.approx(expected, abs=1e-12)
    assert evidence["expected_max_sharpe_null"] == pytest.approx(
        stats.expected_max_sharpe(14, 1 / moments.days) * np.sqrt(stats.TRADING_DAYS)
    )
    with pytest.raises(ConfigError):
        stats.null_sharpe_variance(1)


def test_dsr_null_controls_false_discoveries_under_the_global_null() -> None:
    """The best of 20 independent zero-Sharpe trials over 250 days: its DSR against 20
    zero-Sharpe trials exceeds 0.95 in at most 5% of draws (binomial 99% bound)."""
    rng = np.random.default_rng(11)
    draws, n_trials, days = 1000, 20, 250
    returns = rng.normal(0.0, 0.01, size=(draws, n_trials, days))
    sharpe = returns.mean(axis=2) / returns.std(axis=2, ddof=1)
    winners = returns[np.arange(draws), sharpe.argmax(axis=1)]
    found = 0
    for winner in winners:
        m = stats.sharpe_moments(winner)
        found += (
            stats.deflated_sharpe_ratio(
                m.sharpe, m.days, m.skew, m.kurtosis, n_trials, stats.null_sharpe_variance(m.days)
            )
            > 0.95
        )
    assert found / draws <= 0.05 + 2.576 * np.sqrt(0.05 * 0.95 / draws)
