"""Point-in-time universes: the membership file, its tradable mask (known answer on a
tiny panel), the recipe that names it, the env and the backtest that never trade a
non-member but toward zero (a stock held when it leaves can be sold), the report that
counts the changes, and the survivorship warning without one."""

from __future__ import annotations

import json
import textwrap
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.data import DataError, from_frame, load, write_files
from market_envs.data.membership import (
    apply_membership,
    members_in_window,
    membership_changes,
    read_membership,
    survivorship_gap,
)
from market_fixtures import random_walk_frame

MEMBERS = """\
ticker,from,to
T000,2020-01-01,
T001,2023-06-01,2024-01-05
T002,2024-01-06,
T003,2019-01-01,2023-01-01
"""
# the panel: hourly bars of T000..T002 from 2024-01-02 00:00 to 2024-01-09 23:00 (8 days)
START, END = "2024-01-02", "2024-01-10"


def write(folder: Path, text: str = MEMBERS) -> Path:
    path = folder / "members.csv"
    path.write_text(text)
    return path


def tiny_panel():
    frame = random_walk_frame(3, 24 * 8, seed=4, start="2024-01-02 00:00", freq="1h")
    return frame, from_frame(frame, name="tiny")


def test_window_members_and_changes(tmp_path):
    members = read_membership(write(tmp_path))
    assert members_in_window(members, START, END) == ["T000", "T001", "T002"]  # T003 left in 2023
    assert membership_changes(members, START, END) == {"joined": ["T002"], "left": ["T001"]}
    assert members_in_window(members, "2024-01-06", END) == ["T000", "T002"]  # T001's `to` is exclusive


def test_mask_known_answer(tmp_path):
    _, data = tiny_panel()
    masked = apply_membership(data, read_membership(write(tmp_path)), START, END, source="members.csv")
    day = data.timestamps.tz_localize(None).normalize()
    expected = data.tradable.numpy().copy()
    expected[:, 1] &= np.asarray(day < pd.Timestamp("2024-01-05"))  # T001 out from 2024-01-05
    expected[:, 2] &= np.asarray(day >= pd.Timestamp("2024-01-06"))  # T002 in from 2024-01-06
    np.testing.assert_array_equal(masked.tradable.numpy(), expected)
    # a non-member's bars with a price are reducible (a position may only shrink), and only those
    np.testing.assert_array_equal(masked.reducible.numpy(), data.tradable.numpy() & ~expected)
    assert masked.reducible[:, 1].any() and not masked.reducible[:, 0].any()
    assert data.reducible is None and torch.equal(masked.priced, data.tradable)
    assert expected[:, 1].any() and expected[:, 2].any() and not expected[:, 2][day < pd.Timestamp("2024-01-06")].any()
    assert torch.equal(masked.features, data.features)  # prices stay: the observation keeps its shape
    assert masked.meta["membership"] == {
        "file": "members.csv",
        "members": 3,
        "changes": 2,
        "joined": ["T002"],
        "left": ["T001"],
        "events": [
            {"date": "2024-01-05", "ticker": "T001", "change": "left"},
            {"date": "2024-01-06", "ticker": "T002", "change": "joined"},
        ],
        "unserved": [],
        "unserved_share": 0.0,
    }
    assert masked.summary()["membership_changes"] == 2 and masked.describe()["membership_changes"] == 2


@pytest.mark.parametrize(
    "text, words",
    [
        ("ticker,from\nA,2020-01-01\n", "missing column(s) ['to']"),
        ("ticker,from,to\nA,2020-13-01,\n", "row 2 (A): from '2020-13-01' is not a date"),
        ("ticker,from,to\nA,,2020-01-01\n", "row 2 (A): from '' is not a date"),
        ("ticker,from,to\nA,2020-01-01,2019-01-01\n", "row 2 (A): to must be after from"),
        ("ticker,from,to\nA,2020-01-01,2021-01-01\nB,2020-01-01,\nA,2020-06-01,\n", "row 4 (A): this stay overlaps"),
        ("ticker,from,to\nA,2020-01-01,\nA,2021-06-01,\n", "row 3 (A): this stay overlaps"),
    ],
)
def test_bad_membership_files_are_refused(tmp_path, text, words):
    with pytest.raises(DataError) as err:
        read_membership(write(tmp_path, text))
    assert words in str(err.value) and "members.csv" in str(err.value)


def test_a_ticker_may_come_back(tmp_path):
    members = read_membership(write(tmp_path, "ticker,from,to\nA,2020-01-01,2021-01-01\nA,2022-01-01,\n"))
    assert membership_changes(members, "2019-01-01", "2023-01-01") == {"joined": ["A", "A"], "left": ["A"]}


def membership_recipe(folder: Path, frame: pd.DataFrame) -> Path:
    write_files(from_frame(frame, name="bars"), folder / "bars")
    write(folder)
    recipe = folder / "pit.toml"
    recipe.write_text(
        textwrap.dedent(
            f"""\
            source = "files"
            interval = "1h"
            start = "{START}"
            end = "{END}"
            train_end = "2024-01-06"
            val_end = "2024-01-08"
            membership = "members.csv"

            [files]
            path = "bars"
            """
        )
    )
    return recipe


def test_a_recipe_with_a_membership_file(tmp_path):
    frame, _ = tiny_panel()
    recipe = membership_recipe(tmp_path, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no survivorship warning with a membership file
        data = load(recipe, data_dir=tmp_path / "data")
    assert data.tickers == ("T000", "T001", "T002")
    assert data.meta["membership"]["changes"] == 2
    again = load(recipe, data_dir=tmp_path / "data")  # from the cache, mask and record included
    assert torch.equal(again.tradable, data.tradable) and again.meta["membership"] == data.meta["membership"]
    assert data.reducible is not None and torch.equal(again.reducible, data.reducible)
    day = data.timestamps.tz_localize(None).normalize()
    assert not data.tradable[np.asarray(day >= pd.Timestamp("2024-01-05")), 1].any()


def test_tickers_and_a_membership_file_exclude_each_other(tmp_path):
    from market_envs.errors import ConfigError

    frame, _ = tiny_panel()
    with pytest.raises(ConfigError, match="tickers or a membership file, not both"):
        load(membership_recipe(tmp_path, frame), cache=False, tickers=["T000"])


@pytest.mark.parametrize("short_selling", [False, True])
def test_the_env_trades_a_non_member_only_toward_zero(tmp_path, short_selling):
    """Under random actions, a position in a ticker that is out of the index only shrinks (long
    and short books), never turns through zero, and a ticker never held while out is never traded."""
    _, data = tiny_panel()
    data = apply_membership(
        replace(data, tradable=torch.ones_like(data.tradable)), read_membership(write(tmp_path)), START, END
    )
    member = data.tradable
    config = EnvConfig(random_start=False, buy_cost=0.0, sell_cost=0.0, short_selling=short_selling)
    env = StockTradingVecEnv(data, 4, "cpu", config)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    traded = torch.zeros(3, dtype=torch.bool)
    shrunk = 0
    for _ in range(data.num_bars - 1):
        before, t = env.holdings.clone(), env.t.clone()
        actions = torch.rand((4, 3), generator=generator) * 2 - 1
        _, _, _, _, info = env.step(actions)
        after, outside = info["holdings"][~member[t + 1]], ~member[t + 1]
        assert (after.abs() <= before[outside].abs()).all() and (after * before[outside] >= 0).all()
        assert (after[before[outside] == 0] == 0).all()
        shrunk += int((after.abs() < before[outside].abs()).sum())
        traded |= (info["holdings"] != before).any(0)
    assert traded.all()  # every ticker was traded while a member
    assert shrunk > 0  # and positions in T001 were cut after it left
    day = data.timestamps.tz_localize(None).normalize()
    assert not member[np.asarray(day < pd.Timestamp("2024-01-06")), 2].any()


def test_survivorship_warning_names_the_gap(tmp_path):
    assert survivorship_gap("2024-12-23", "2016-01-04", "2021-05-26") == 3276
    assert survivorship_gap("2020-01-01", "2019-06-01", "2020-06-01") == 214
    frame, _ = tiny_panel()
    write_files(from_frame(frame, name="bars"), tmp_path / "bars")
    recipe = tmp_path / "fixed.toml"
    recipe.write_text(
        textwrap.dedent(
            f"""\
            source = "files"
            interval = "1h"
            start = "{START}"
            end = "{END}"
            train_end = "2024-01-06"
            val_end = "2024-01-08"
            tickers = ["T000", "T001", "T002"]

            [universe]
            as_of = "2022-06-30"

            [files]
            path = "bars"
            """
        )
    )
    with pytest.warns(UserWarning, match=r"survivorship bias: .*as of 2022-06-30.*reaches 558 days \(1\.5 years\)"):
        load(recipe, cache=False)
    recipe.write_text(recipe.read_text().replace("2022-06-30", "2023-06-30"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(recipe, cache=False)


def test_a_ticker_that_lists_late_is_a_flat_untradable_line_until_its_first_bar():
    from market_envs.data.indicators import WARMUP_BARS

    frame, _ = tiny_panel()
    first = pd.Timestamp("2024-01-05 10:00", tz="America/New_York")
    late = frame[(frame["ticker"] != "T002") | (frame["timestamp"] >= first)]
    strict = from_frame(late)
    assert strict.start == first  # without ragged the grid starts where every ticker has begun
    data = from_frame(late, ragged=True)
    assert data.start == frame["timestamp"].min() and data.num_bars == 24 * 8
    before = np.asarray(data.timestamps < first)
    opening = late[(late["ticker"] == "T002")].iloc[0]
    j = data.tickers.index("T002")
    for name in ("open", "high", "low", "close"):
        assert (data.feature(name)[before, j] == np.float32(opening["open"])).all()
    assert (data.volume[before, j] == 0).all() and not data.tradable[before, j].any()
    k = int(before.sum())
    assert not data.tradable[k : k + WARMUP_BARS, j].any() and data.tradable[k + WARMUP_BARS :, j].all()
    assert data.tradable[WARMUP_BARS:, 0].all()
    assert torch.isfinite(data.features).all()


@pytest.mark.parametrize(
    "period, changes, joined, left",
    [
        ("all", 2, ["T002"], ["T001"]),  # T001 out from 2024-01-05, T002 in from 2024-01-06
        ("2024-01-05:2024-01-09", 1, ["T002"], []),  # T001 left on the period's first day: out all along
        ("validation", 0, [], []),  # 2024-01-06 .. 2024-01-07: T002 joined on its first day
    ],
)
def test_the_backtest_never_trades_a_non_member_and_its_report_counts_the_changes(
    tmp_path, period, changes, joined, left
):
    from trader.backtesting import ActionSchedule, BacktestConfig, run_backtest
    from trader.backtesting.periods import select_period

    _, data = tiny_panel()  # every bar tradable but for membership, so that T001 is bought before it leaves
    split = {"train_end": "2024-01-06", "val_end": "2024-01-08"}
    data = replace(data, tradable=torch.ones_like(data.tradable), meta={**data.meta, **split})
    data = apply_membership(data, read_membership(write(tmp_path)), START, END, source="members.csv")
    config = BacktestConfig(tear_sheet=False, buy_cost=0.0, sell_cost=0.0, policy_env=EnvConfig(action_mode="weights"))
    # a policy that wants the members of each bar, equally weighted, and nothing else
    members = ActionSchedule(select_period(data, period)[0].tradable.float())
    result = run_backtest(
        data,
        policies={"members": members},
        baselines=["equal_weight_daily"],
        period=period,
        config=config,
        run_dir=tmp_path / "run",
    )
    for name in ("equal_weight_daily", "members"):  # through the env
        held = result.positions[name]
        day = held.index.tz_localize(None).normalize()
        t001, t002 = held["T001"].to_numpy(), held["T002"].to_numpy()
        out = np.asarray(day >= pd.Timestamp("2024-01-05"))
        # from the last bar before T001 left, its position only shrinks (daily rebalancing still
        # wants it; the env sells, never buys)
        since = np.abs(t001[max(0, int(np.argmax(out)) - 1) :]) if out.any() else np.zeros(0)
        assert (np.diff(since) <= 0).all(), name
        assert (t002[np.asarray(day < pd.Timestamp("2024-01-06"))] == 0).all()  # never bought before it joined
        if period == "all":
            assert (t001[~out] > 0).any() and (t002 > 0).any() and len(set(t001[~out])) > 1  # traded while members
    if period == "all":  # a member's position sold out when it left, by a policy that wants out
        t001 = result.positions["members"]["T001"].to_numpy()
        out = np.asarray(result.positions["members"].index.tz_localize(None).normalize() >= pd.Timestamp("2024-01-05"))
        assert t001[np.argmax(out) - 1] > 0 and (t001[np.argmax(out) + 1 :] == 0).all()
    # and the report says how many members changed, over the window and in the period
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    window = {
        "file": "members.csv",
        "members": 3,
        "changes": 2,
        "joined": ["T002"],
        "left": ["T001"],
        "unserved": [],
        "unserved_share": 0.0,
    }
    assert report["membership"] == {**window, "period": {"changes": changes, "joined": joined, "left": left}}
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert (
        "Point-in-time universe (members.csv): 3 tickers were members in the data set's window; "
        "membership changes in it: 2 (joined T002; left T001)." in markdown
    )
    names = "; ".join(f"{kind} {', '.join(who)}" for kind, who in (("joined", joined), ("left", left)) if who)
    assert f"Membership changes in this period: {changes}" + (f" ({names})" if names else "") + "\n" in markdown


def test_a_report_without_a_membership_file_says_nothing_of_it(tmp_path):
    from trader.backtesting import BacktestConfig, run_backtest

    _, data = tiny_panel()
    run_backtest(data, baselines=["equal_weight"], config=BacktestConfig(tear_sheet=False), run_dir=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "report.json").read_text())["membership"] is None
    assert "Universe" not in (tmp_path / "run" / "report.md").read_text()
