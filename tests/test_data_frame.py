"""`from_frame`: each bad input raises a `DataError` naming ticker and timestamp;
gaps are filled forward and masked; indicators are causal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from market_envs.data import DataError, from_frame
from market_envs.data.indicators import WARMUP_BARS
from market_fixtures import random_walk_frame

N_BARS = 90


def good_frame() -> pd.DataFrame:
    """Two tickers, 90 one-minute bars, sorted by timestamp then ticker."""
    return random_walk_frame(2, N_BARS, seed=1)


def _at(frame: pd.DataFrame, ticker: str, bar: int) -> int:
    """Row label of `ticker` at bar number `bar`."""
    return frame.index[frame["ticker"] == ticker][bar]


def _set(column: str, value, bar: int = 70, ticker: str = "T001"):
    def mutate(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[_at(frame, ticker, bar), column] = value
        return frame

    return mutate


def _duplicate(frame: pd.DataFrame) -> pd.DataFrame:
    row = _at(frame, "T001", 70)
    return pd.concat([frame, frame.loc[[row]]], ignore_index=True)


def _unsorted(frame: pd.DataFrame) -> pd.DataFrame:
    a, b = _at(frame, "T001", 70), _at(frame, "T001", 71)
    frame.loc[[a, b], "timestamp"] = frame.loc[[b, a], "timestamp"].to_numpy()
    return frame


def _mixed_zones(frame: pd.DataFrame) -> pd.DataFrame:
    text = frame["timestamp"].astype(str)
    text[_at(frame, "T001", 70)] = str(frame.loc[_at(frame, "T001", 70), "timestamp"].tz_localize(None))
    return frame.assign(timestamp=text)


def _naive(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(timestamp=frame["timestamp"].dt.tz_localize(None))


def _no_overlap(frame: pd.DataFrame) -> pd.DataFrame:
    late = frame[frame["ticker"] == "T000"].iloc[-10:].assign(ticker="LATE")
    late["timestamp"] = late["timestamp"] + pd.Timedelta(days=3)
    early = frame[frame["ticker"] == "T001"].iloc[:10].assign(ticker="EARLY")
    return pd.concat([frame, early, late], ignore_index=True)


# (id, mutation, words the message must contain). Shared with the files, cache,
# recipes and CLI tests, which check the same cases through their own entry points.
BAD_CASES = [
    ("nan_price", _set("close", np.nan), ["T001", "2024-01-02 10:40", "close", "NaN"]),
    ("infinite_price", _set("close", np.inf), ["T001", "2024-01-02 10:40", "close", "infinite"]),
    ("infinite_volume", _set("volume", -np.inf), ["T001", "2024-01-02 10:40", "volume", "infinite"]),
    ("zero_price", _set("open", 0.0), ["T001", "2024-01-02 10:40", "open", "positive"]),
    ("negative_price", _set("low", -1.0), ["T001", "2024-01-02 10:40", "low", "positive"]),
    ("high_below_low", _set("high", 1.0), ["T001", "2024-01-02 10:40", "high", "low"]),
    ("negative_volume", _set("volume", -5.0), ["T001", "2024-01-02 10:40", "volume", "negative"]),
    ("duplicate_timestamp", _duplicate, ["T001", "2024-01-02 10:40", "duplicate"]),
    ("unsorted_timestamps", _unsorted, ["T001", "2024-01-02 10:40", "sorted"]),
    ("mixed_time_zones", _mixed_zones, ["mixed time zones", "2024-01-02 10:40"]),
    ("missing_time_zone", _naive, ["no time zone", "2024-01-02 09:30"]),
    ("missing_column", lambda f: f.drop(columns="close"), ["missing column", "close"]),
    ("no_overlap", _no_overlap, ["EARLY", "no overlap"]),
    ("empty", lambda f: f.iloc[:0], ["no rows"]),
]


@pytest.mark.parametrize("case_id, mutate, words", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_raises_data_error_naming_where(case_id, mutate, words):
    with pytest.raises(DataError) as err:
        from_frame(mutate(good_frame()), source="bars.csv")
    message = str(err.value)
    assert message.startswith("bars.csv: ")
    for word in words:
        assert word in message, f"{case_id}: {word!r} not in {message!r}"


def test_absent_requested_ticker_is_named():
    with pytest.raises(DataError, match=r"requested ticker\(s\) \['ZZZ'\]"):
        from_frame(good_frame(), tickers=["T000", "ZZZ"])


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def test_valid_frame_builds_panel():
    data = from_frame(good_frame(), name="ok")
    assert data.features.shape == (N_BARS, 2, 13)
    assert data.features.dtype == torch.float32
    assert str(data.timestamps.tz) == "America/New_York"
    assert data.interval == "1min"
    assert not data.tradable[:WARMUP_BARS].any() and data.tradable[WARMUP_BARS:].all()


def test_gaps_are_filled_forward_and_masked():
    frame = good_frame()
    gone = [_at(frame, "T001", bar) for bar in (70, 71, 72)]
    data = from_frame(frame.drop(index=gone))
    j = data.tickers.index("T001")
    assert not data.tradable[70:73, j].any()
    assert data.tradable[69, j] and data.tradable[73, j] and data.tradable[70:73, 0].all()
    close = data.close[:, j]
    assert torch.equal(close[70:73], close[69].expand(3))
    for name in ("open", "high", "low"):
        assert torch.equal(data.feature(name)[70:73, j], close[70:73])
    assert (data.volume[70:73, j] == 0).all()


def test_string_timestamps_with_offsets_across_dst_are_exchange_time():
    frame = random_walk_frame(1, 3, start="2024-03-08 15:58")
    frame = pd.concat([frame, random_walk_frame(1, 3, start="2024-03-11 09:30", seed=2)], ignore_index=True)
    frame["timestamp"] = frame["timestamp"].astype(str)  # "-05:00" then "-04:00"
    data = from_frame(frame)
    assert data.timestamps[3] == pd.Timestamp("2024-03-11 09:30", tz="America/New_York")
    assert data.interval == "1min"


def test_naive_timestamps_accepted_with_assume_tz():
    data = from_frame(_naive(good_frame()), assume_tz="America/New_York")
    assert data.timestamps[0] == pd.Timestamp("2024-01-02 09:30", tz="America/New_York")


def test_naive_timestamp_objects_are_not_read_as_utc():
    frame = _naive(good_frame())
    frame["timestamp"] = frame["timestamp"].astype(object)
    with pytest.raises(DataError, match="no time zone"):
        from_frame(frame)


@given(t=st.integers(0, 2 * N_BARS - 2), seed=st.integers(0, 2**16))
def test_indicators_are_causal(t, seed):
    """Changing every bar after t changes no feature and no mask at or before t."""
    frame = random_walk_frame(3, 2 * N_BARS, seed=3, gap_prob=0.05)
    before = from_frame(frame)
    stamp = before.timestamps[t]
    later = frame["timestamp"] > stamp
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 2.0, size=int(later.sum()))
    changed = frame.copy()
    for column in ("open", "high", "low", "close"):
        changed.loc[later, column] = frame.loc[later, column] * scale
    changed.loc[later, "volume"] = rng.integers(0, 10**6, size=int(later.sum()))
    after = from_frame(changed)
    assert after.timestamps.equals(before.timestamps)
    assert torch.equal(after.features[: t + 1], before.features[: t + 1])
    assert torch.equal(after.tradable[: t + 1], before.tradable[: t + 1])
    if t + 1 < before.num_bars:  # the change is real: the future did move
        assert not torch.equal(after.features[t + 1 :], before.features[t + 1 :])


def test_the_summarys_median_total_return_is_the_statistical_median() -> None:
    """Two tickers, +3,476% and -38%: the median is their mean (torch.median gives the
    lower one, -38%, which `trader data build` printed)."""
    frame = good_frame()
    for ticker, growth in (("T000", 35.76), ("T001", 0.62)):
        rows = frame["ticker"] == ticker
        path = np.linspace(1.0, growth, int(rows.sum()))
        for column in ("open", "high", "low", "close"):
            frame.loc[rows, column] = 100.0 * path
    summary = from_frame(frame).summary()
    assert summary["median_total_return"] == pytest.approx((34.76 - 0.38) / 2)


def _daily_frame(split_ratio: float | None) -> pd.DataFrame:
    """Two tickers, 60 daily bars; T001's prices from bar 40 on divided by `split_ratio`."""
    frame = random_walk_frame(2, 60, seed=3, freq="B", start="2024-01-02 09:30")
    if split_ratio is not None:
        after = (frame["ticker"] == "T001") & (frame["timestamp"] >= frame["timestamp"].unique()[40])
        frame.loc[after, ["open", "high", "low", "close"]] /= split_ratio
    return frame


@pytest.mark.parametrize("ratio", [2.0, 0.1])  # a 2:1 split and a 1:10 reverse split
def test_unadjusted_split_is_named_in_a_warning(ratio):
    import re

    day = str(pd.Timestamp(_daily_frame(None)["timestamp"].unique()[40]).date())
    with pytest.warns(UserWarning, match=rf"prices.csv: .*unadjusted stock splits: T001 on {day} \(x") as caught:
        data = from_frame(_daily_frame(ratio), source="prices.csv")
    assert data.num_tickers == 2  # a warning: the panel is still built
    shown = float(re.search(r"\(x([0-9.]+)\)", str(caught[0].message)).group(1))
    assert abs(np.log(shown * ratio)) < 0.04  # the move shown is the split's, up to that day's own return


def test_no_split_warning_for_ordinary_moves_or_intraday_bars(recwarn):
    from_frame(_daily_frame(None))
    minute = good_frame()
    half = (minute["ticker"] == "T001") & (minute["timestamp"] >= minute["timestamp"].unique()[50])
    minute.loc[half, ["open", "high", "low", "close"]] /= 2.0  # inside a session: a crash, not a split
    from_frame(minute)
    assert not [w for w in recwarn if "split" in str(w.message)]
