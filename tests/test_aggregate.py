"""trader.aggregate: known answers from the papers' definitions, a reference (scipy's
Mann-Whitney U) for the probability of improvement, and the bootstrap's coverage by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from trader import aggregate
from trader.errors import ConfigError


def test_the_iqm_is_the_mean_of_the_middle_half_of_every_run_pooled() -> None:
    assert aggregate.iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    by_task = np.arange(1.0, 9.0).reshape(4, 2)  # the same eight runs over two tasks
    assert aggregate.iqm(by_task) == pytest.approx(4.5)
    outlier = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 1e9])
    assert aggregate.iqm(outlier) == pytest.approx(4.5)  # one wild run moves the mean, not the IQM


@pytest.mark.parametrize("shape", [(12, 5), (7, 3), (3, 1), (10, 6)])
def test_the_iqm_equals_scipys_25_percent_trimmed_mean(shape) -> None:
    scores = np.random.default_rng(3).normal(size=shape)
    assert aggregate.iqm(scores) == pytest.approx(scipy_stats.trim_mean(scores.ravel(), 0.25))


def test_cvar_is_the_mean_of_the_lowest_share_of_runs() -> None:
    scores = np.arange(1.0, 11.0)
    assert aggregate.cvar(scores, 0.1) == 1.0
    assert aggregate.cvar(scores, 0.2) == 1.5
    assert aggregate.cvar(scores, 0.25) == 2.0  # ceil(2.5) = 3 runs: 1, 2, 3
    assert aggregate.cvar(scores[:5], 0.1) == 1.0  # at least one run
    assert aggregate.cvar(scores, 1.0) == scores.mean()


def test_the_failure_rate_counts_runs_below_the_threshold() -> None:
    scores = np.array([[0.2, 0.9], [0.6, 0.4], [1.0, 0.5]])
    assert aggregate.failure_rate(scores, 0.5) == pytest.approx(2 / 6)  # 0.5 itself is no failure


def test_the_performance_profile_falls_from_one_to_zero() -> None:
    scores = np.random.default_rng(0).normal(size=(10, 6))
    taus = np.linspace(-5, 5, 41)
    profile = aggregate.score_distribution(scores, taus)
    assert profile[0] == 1.0 and profile[-1] == 0.0
    assert np.all(np.diff(profile) <= 0)
    assert aggregate.score_distribution(np.array([1.0, 2.0, 3.0, 4.0]), [2.5])[0] == 0.5


def test_the_probability_of_improvement_is_the_mann_whitney_u_share_averaged_over_tasks() -> None:
    generator = np.random.default_rng(7)
    x = generator.normal(0.3, 1.0, size=(10, 4)).round(1)  # rounded: ties happen and count one half
    y = generator.normal(0.0, 1.0, size=(8, 4)).round(1)
    expected = np.mean(
        [scipy_stats.mannwhitneyu(x[:, t], y[:, t]).statistic / (len(x) * len(y)) for t in range(x.shape[1])]
    )
    assert aggregate.probability_of_improvement(x, y) == pytest.approx(expected)
    assert aggregate.probability_of_improvement(x, y) + aggregate.probability_of_improvement(y, x) == pytest.approx(1)


def test_the_probability_of_improvement_knows_the_extremes() -> None:
    low, high = np.zeros((5, 3)), np.ones((5, 3))
    assert aggregate.probability_of_improvement(high, low) == 1.0
    assert aggregate.probability_of_improvement(low, low) == 0.5
    assert aggregate.probability_of_improvement([[1.0], [3.0]], [[2.0]]) == 0.5
    with pytest.raises(ConfigError, match="same tasks"):
        aggregate.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 3)))


def test_the_stratified_bootstrap_keeps_each_tasks_runs_within_that_task() -> None:
    """A task whose runs are all equal stays equal in every resample: only runs move, never tasks."""
    scores = np.column_stack([np.full(6, 10.0), np.arange(6.0)])
    seen = []
    estimate = aggregate.stratified_interval(lambda m: seen.append(m.copy()) or float(m.mean()), scores, resamples=100)
    assert all((draw[:, 0] == 10.0).all() and set(draw[:, 1]) <= set(range(6)) for draw in seen)
    assert estimate.low <= estimate.value <= estimate.high
    assert estimate.resamples == 100


def test_the_iqm_interval_covers_the_true_iqm_at_its_stated_rate() -> None:
    """Calibration by simulation: 10 runs on each of 5 tasks from a normal whose IQM is its mean;
    the 90% interval should hold it about 90% of the time (binomial 2-sigma band over 120 trials)."""
    generator = np.random.default_rng(11)
    trials, hits = 120, 0
    for k in range(trials):
        scores = generator.normal(1.0, 1.0, size=(10, 5))
        estimate = aggregate.stratified_interval(aggregate.iqm, scores, confidence=0.9, resamples=200, seed=k)
        hits += estimate.low <= 1.0 <= estimate.high
    assert 0.80 <= hits / trials <= 0.97


def test_a_difference_interval_and_the_non_inferiority_verdict() -> None:
    generator = np.random.default_rng(5)
    better = generator.normal(1.0, 0.2, size=(10, 6))
    same = better + generator.normal(0.0, 0.01, size=better.shape)
    worse = better - 0.5
    gap = aggregate.difference_interval(aggregate.iqm, better, worse, resamples=500)
    assert gap.low > 0 and gap.value == pytest.approx(0.5)
    assert aggregate.non_inferior(same, better, margin=0.1, resamples=500)[0]
    assert not aggregate.non_inferior(worse, better, margin=0.1, resamples=500)[0]


def test_bad_scores_and_parameters_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="finite"):
        aggregate.iqm([1.0, float("nan")])
    with pytest.raises(ConfigError, match="matrix"):
        aggregate.iqm(np.zeros((2, 2, 2)))
    with pytest.raises(ConfigError, match="alpha"):
        aggregate.cvar([1.0], 0.0)
    with pytest.raises(ConfigError, match="resamples"):
        aggregate.stratified_interval(aggregate.iqm, [1.0, 2.0], resamples=10)
    with pytest.raises(ConfigError, match="margin"):
        aggregate.non_inferior([1.0], [1.0], margin=-1.0)


def test_a_standing_places_a_score_among_its_draws_with_known_answers() -> None:
    draws = np.array([3.0, -1.0, 2.0, 5.0, 0.5, 2.0, 4.0, 1.0, -2.0, 6.0])
    found = aggregate.standing(4.0, draws)  # the result is one of the draws: it counts among them
    assert (found.n, found.rank, found.percentile) == (10, 3, 80.0)  # 5 and 6 above; 8 of 10 at or below
    assert found.median == 2.0 and found.best == 6.0 and found.worst == -2.0
    assert found.iqm == pytest.approx(np.mean([0.5, 1.0, 2.0, 2.0, 3.0, 4.0]))  # 2 cut from each end
    assert found.cvar10 == -2.0  # ceil(0.1 x 10) = 1 draw: the worst
    tie = aggregate.standing(2.0, draws)
    assert (tie.rank, tie.percentile) == (5, 60.0)  # ties share the better rank, and count as at or below
    assert aggregate.standing(7.0, draws).rank == 1 and aggregate.standing(7.0, draws).percentile == 100.0
    assert aggregate.standing(-3.0, draws).rank == 11 and aggregate.standing(-3.0, draws).percentile == 0.0
    assert aggregate.standing(1.0, [1.0]).as_dict() == {
        "value": 1.0,
        "n": 1,
        "rank": 1,
        "percentile": 100.0,
        "median": 1.0,
        "iqm": 1.0,
        "cvar10": 1.0,
        "best": 1.0,
        "worst": 1.0,
    }


def test_a_standings_percentile_is_scipys_weak_percentile_of_score_and_its_tail_the_cvar() -> None:
    generator = np.random.default_rng(11)
    for n in (2, 7, 20, 64):
        draws = generator.normal(size=n).round(1)  # rounded: ties happen
        value = float(draws[generator.integers(n)]) if n % 2 else float(generator.normal())
        found = aggregate.standing(value, draws)
        assert found.percentile == pytest.approx(scipy_stats.percentileofscore(draws, value, kind="weak"))
        assert found.rank == 1 + int(np.sum(draws > value))
        assert found.iqm == pytest.approx(scipy_stats.trim_mean(draws, 0.25))
        assert found.cvar10 == pytest.approx(np.sort(draws)[: int(np.ceil(0.1 * n))].mean())


def test_a_standing_refuses_no_draws_and_scores_that_are_not_finite() -> None:
    for value, draws, says in ((1.0, [], "at least one"), (1.0, [1.0, np.nan], "finite"), (np.nan, [1.0], "finite")):
        with pytest.raises(ConfigError, match=says):
            aggregate.standing(value, draws)
