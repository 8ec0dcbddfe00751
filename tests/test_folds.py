"""Walk-forward fold boundaries (trader.folds): known answers and the no-look-ahead invariant."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trader.durations import parse_calendar_length
from trader.errors import UserError
from trader.folds import FoldSpec, consecutive, make_folds


def days(n: int, start: str = "2020-01-01") -> pd.DatetimeIndex:
    """One bar a day, every calendar day, at the close (exchange time)."""
    return pd.date_range(f"{start} 16:00", periods=n, freq="D", tz="America/New_York")


def windows(folds):
    return [(f.train, f.validation, f.test) for f in folds]


def test_rolling_known_answer() -> None:
    folds = make_folds(days(30), FoldSpec("10d", "5d", "5d"))
    assert windows(folds) == [
        ((0, 10), (10, 15), (15, 20)),
        ((5, 15), (15, 20), (20, 25)),
        ((10, 20), (20, 25), (25, 30)),
    ]
    assert consecutive(folds)


def test_expanding_known_answer() -> None:
    folds = make_folds(days(30), FoldSpec("10d", "5d", "5d", expanding=True))
    assert [f.train for f in folds] == [(0, 10), (0, 15), (0, 20)]
    assert [f.test for f in folds] == [(15, 20), (20, 25), (25, 30)]


def test_embargo_purges_the_end_of_train_and_validation() -> None:
    folds = make_folds(days(30), FoldSpec("10d", "5d", "5d", embargo=2))
    assert windows(folds)[0] == ((0, 8), (10, 13), (15, 20))
    assert windows(folds)[2] == ((10, 18), (20, 23), (25, 30))
    assert consecutive(folds)


def test_step_longer_than_test_leaves_gaps_and_a_partial_last_window_is_dropped() -> None:
    folds = make_folds(days(32), FoldSpec("10d", "5d", "5d", step="7d"))
    assert [f.test for f in folds] == [(15, 20), (22, 27)]
    assert not consecutive(folds)


def test_month_and_year_lengths_on_business_days() -> None:
    stamps = pd.bdate_range("2010-01-01", "2012-12-31", tz="America/New_York")
    folds = make_folds(stamps, FoldSpec("1y", "6m", "3m"))
    first = folds[0]
    assert stamps[first.validation[0]].date() == pd.Timestamp("2011-01-03").date()
    assert stamps[first.test[0]].date() == pd.Timestamp("2011-07-01").date()
    assert stamps[first.test[1] - 1].date() == pd.Timestamp("2011-09-30").date()
    assert len(folds) == 6  # test windows from 2011-07 to 2012-12, a quarter each
    assert consecutive(folds)


def test_a_last_window_that_misses_only_closed_days_is_whole() -> None:
    stamps = pd.bdate_range("2014-01-02", "2023-12-29", tz="America/New_York")  # ends on a Friday
    folds = make_folds(stamps, FoldSpec("3y", "1y", "1y"))
    assert [stamps[f.test[0]].year for f in folds] == [2018, 2019, 2020, 2021, 2022, 2023]
    assert stamps[folds[-1].test[1] - 1].date() == pd.Timestamp("2023-12-29").date()
    # a window that ends two sessions after the data is not whole
    assert len(make_folds(stamps[:-2], FoldSpec("3y", "1y", "1y"))) == 5


def test_periods_are_inclusive_timestamps() -> None:
    stamps = days(30)
    periods = make_folds(stamps, FoldSpec("10d", "5d", "5d"))[1].periods(stamps)
    assert periods["train"] == [stamps[5].isoformat(), stamps[14].isoformat()]
    assert periods["test"] == [stamps[20].isoformat(), stamps[24].isoformat()]


@pytest.mark.parametrize(
    ("spec", "n", "message"),
    [
        (FoldSpec("1y", "1m", "1m"), 100, "too short for one fold"),
        (FoldSpec("10d", "5d", "5d", step="3d"), 60, "would overlap"),
        (FoldSpec("10d", "2d", "5d", embargo=1), 60, "validation window"),
    ],
)
def test_windows_that_do_not_fit_are_one_clear_error(spec: FoldSpec, n: int, message: str) -> None:
    with pytest.raises(UserError, match=message) as err:
        make_folds(days(n), spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["6", "6x", "0m", "-1y", "1.5y", ""])
def test_bad_calendar_lengths(text: str) -> None:
    with pytest.raises(UserError, match="--test"):
        FoldSpec("1y", "1m", text)


def test_calendar_length_means_months_for_m() -> None:
    assert pd.Timestamp("2020-01-31") + parse_calendar_length("1m") == pd.Timestamp("2020-02-29")
    assert pd.Timestamp("2020-01-01") + parse_calendar_length("2w") == pd.Timestamp("2020-01-15")


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(40, 400),
    lengths=st.tuples(st.integers(5, 60), st.integers(3, 30), st.integers(2, 30)),
    extra_step=st.integers(0, 10),
    expanding=st.booleans(),
    embargo=st.integers(0, 3),
)
def test_no_train_or_validation_bar_reaches_its_test_window(n, lengths, extra_step, expanding, embargo) -> None:
    train, validation, test = lengths
    spec = FoldSpec(
        f"{train}d", f"{validation}d", f"{test}d", step=f"{test + extra_step}d", expanding=expanding, embargo=embargo
    )
    try:
        folds = make_folds(days(n), spec)
    except UserError:
        return
    for fold in folds:
        assert fold.train[1] + embargo <= fold.validation[0] < fold.validation[1]
        assert fold.validation[1] + embargo <= fold.test[0] < fold.test[1] <= n
        assert fold.train[0] < fold.train[1]
    for a, b in zip(folds, folds[1:]):
        assert a.test[1] <= b.test[0]  # test windows never overlap
    assert consecutive(folds) == (extra_step == 0 or len(folds) == 1)
