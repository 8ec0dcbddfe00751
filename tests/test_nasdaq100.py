"""The shipped point-in-time NASDAQ-100 (datasets/nasdaq100-membership.csv) and its converter.

Known answers come from the source, jmccarrell/n100tickers (MIT): its 2020 file's
``tickers_on_Jan_1`` and its dated changes. The converter is also run on a small
source tree written here, so its rules are tested without the source repository.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.data import from_frame
from market_envs.data.membership import (
    apply_membership,
    members_in_window,
    read_membership,
    read_renames,
    symbol_segments,
    uncovered_days,
)
from market_envs.data.recipes import find_recipe
from market_fixtures import random_walk_frame

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
SHIPPED = DATASETS / "nasdaq100-membership.csv"

JAN_1_2020 = set(
    "AAL AAPL ADBE ADI ADP ADSK ALGN ALXN AMAT AMD AMGN AMZN ANSS ASML ATVI AVGO BIDU BIIB BKNG BMRN CDNS CDW "
    "CERN CHKP CHTR CMCSA COST CPRT CSCO CSGP CSX CTAS CTSH CTXS DLTR EA EBAY EXC EXPE FAST FB FISV FOX FOXA "
    "GILD GOOG GOOGL IDXX ILMN INCY INTC INTU ISRG JD KHC KLAC LBTYA LBTYK LRCX LULU MAR MCHP MDLZ MELI MNST "
    "MSFT MU MXIM NFLX NTAP NTES NVDA NXPI ORLY PAYX PCAR PEP PYPL QCOM REGN ROST SBUX SGEN SIRI SNPS SPLK "
    "SWKS TCOM TMUS TSLA TTWO TXN UAL ULTA VRSK VRSN VRTX WBA WDAY WDC WLTW XEL XLNX".split()
)
"""n100-ticker-changes-2020.yaml's tickers_on_Jan_1 (103 tickers: GOOG and GOOGL, FOX and FOXA, ...)."""


def converter():
    spec = importlib.util.spec_from_file_location("convert_n100tickers", DATASETS / "convert_n100tickers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def members_on(membership: pd.DataFrame, day: str) -> set[str]:
    return set(members_in_window(membership, day, pd.Timestamp(day) + pd.Timedelta(days=1)))


# --------------------------------------------------------------------------- the shipped file


def test_the_members_on_1_january_2020_are_that_years_list_with_renames_resolved():
    membership = read_membership(SHIPPED)
    renamed = {"FB": "META", "CTRP": "TCOM"}  # FB joined META's stay: one firm under its later symbol
    assert members_on(membership, "2020-01-01") == {renamed.get(t, t) for t in JAN_1_2020}
    assert membership.attrs["covers"] == (pd.Timestamp("2015-01-01"), pd.Timestamp("2026-06-24"))


def test_a_removal_takes_effect_on_its_dated_day():
    """2020-04-20: AAL out, DXCM in (a Monday): AAL's last day in is Friday 2020-04-17."""
    membership = read_membership(SHIPPED)
    assert "AAL" in members_on(membership, "2020-04-17") and "DXCM" not in members_on(membership, "2020-04-17")
    assert "AAL" not in members_on(membership, "2020-04-20") and "DXCM" in members_on(membership, "2020-04-20")
    frame = random_walk_frame(2, 4 * 390, seed=2, start="2020-04-16 09:30", freq="1min")
    frame["ticker"] = frame["ticker"].map({"T000": "AAL", "T001": "DXCM"})
    frame = frame[frame["timestamp"].dt.hour.between(9, 15)]
    data = from_frame(frame, name="aal")
    data = apply_membership(
        replace(data, tradable=torch.ones_like(data.tradable)), membership, "2020-04-16", "2020-04-21"
    )
    day = data.timestamps.tz_localize(None).normalize()
    before = np.asarray(day < pd.Timestamp("2020-04-20"))
    assert data.tradable[before, 0].all() and not data.tradable[~before, 0].any()  # AAL
    assert not data.tradable[before, 1].any() and data.tradable[~before, 1].all()  # DXCM


def test_renamed_tickers_resolve_to_one_stay_and_the_renames_table_names_the_old_symbols():
    membership = read_membership(SHIPPED)
    stays = {t: membership[membership["ticker"] == t] for t in ("META", "FB", "TCOM", "CTRP")}
    assert stays["FB"].empty and stays["CTRP"].empty
    assert len(stays["META"]) == 1 and stays["META"]["from"].iloc[0] == pd.Timestamp("2015-01-01")
    assert pd.isna(stays["META"]["to"].iloc[0])  # a member from 2015 on, across the rename of 2022-06-09
    renames = {(r.old, r.ticker, f"{r.until:%Y-%m-%d}") for r in read_renames(DATASETS / "nasdaq100-renames.csv")}
    assert renames == {("FB", "META", "2022-06-09"), ("CTRP", "TCOM", "2019-11-05")}


def test_the_ticker_on_is_on_semiconductor_not_a_yaml_boolean():
    membership = read_membership(SHIPPED)
    assert "ON" in members_on(membership, "2024-01-02") and "TRUE" not in set(membership["ticker"])


def test_the_three_nasdaq100_recipes_use_the_file_and_warn_only_outside_what_it_covers():
    for name in ("nasdaq100-minute-alpaca", "nasdaq100-daily-alpaca", "nasdaq100-minute-polygon"):
        recipe = find_recipe(name).resolved()
        assert recipe.membership_path() == SHIPPED and recipe.tickers is None
    membership = read_membership(SHIPPED)
    assert uncovered_days(membership, "2016-01-04", "2021-05-27") == 0
    assert uncovered_days(membership, "2014-01-01", "2015-01-05") == 365
    assert uncovered_days(membership, "2026-06-01", "2026-07-01") == 6  # 2026-06-25 .. 2026-06-30


def test_members_the_panel_lacks_are_counted_by_their_share_of_member_days():
    """AAL and DXCM served, over 2020-04-16 .. 2020-04-20 (three sessions): the other 100
    members of those days are unserved; of the 3 x 103 member-days, AAL holds 2 and DXCM 1."""
    from market_envs.data.membership import unserved

    membership = read_membership(SHIPPED)
    stamps = pd.DatetimeIndex(["2020-04-16 10:00", "2020-04-17 10:00", "2020-04-20 10:00"], tz="America/New_York")
    missing, share = unserved(membership, stamps, ["AAL", "DXCM"], "2020-04-16", "2020-04-21")
    assert "AAL" not in missing and "DXCM" not in missing and len(missing) == 102
    assert share == pytest.approx(1 - 3 / 309)


@pytest.mark.parametrize("short_selling", [False, True])
def test_the_env_trades_a_non_member_of_the_shipped_file_only_toward_zero(short_selling):
    """AAL (out from 2020-04-20) and DXCM (in from then) under random actions: on a day a ticker
    is out of the index, a position in it only shrinks and never turns through zero, and a
    ticker not held is not bought; a policy that wants out of AAL when it leaves sells it all."""
    membership = read_membership(SHIPPED)
    frame = random_walk_frame(2, 24 * 6, seed=5, start="2020-04-16 09:30", freq="1h")  # through 2020-04-22
    frame["ticker"] = frame["ticker"].map({"T000": "AAL", "T001": "DXCM"})
    data = from_frame(frame, name="aal")
    data = apply_membership(
        replace(data, tradable=torch.ones_like(data.tradable)), membership, "2020-04-16", "2020-04-23"
    )
    member = data.tradable
    day = data.timestamps.tz_localize(None).normalize()
    left = int(np.argmax(np.asarray(day >= pd.Timestamp("2020-04-20"))))  # AAL's first bar out
    assert 0 < left < data.num_bars - 1 and member[:left, 0].all() and not member[left:, 0].any()
    assert data.reducible[left:, 0].all() and not member[:left, 1].any() and member[left:, 1].all()
    config = EnvConfig(random_start=False, buy_cost=0.0, sell_cost=0.0, short_selling=short_selling)
    env = StockTradingVecEnv(data, 4, "cpu", config)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    for _ in range(data.num_bars - 1):
        before, t = env.holdings.clone(), env.t.clone()
        _, _, _, _, info = env.step(torch.rand((4, 2), generator=generator) * 2 - 1)
        outside = ~member[t + 1]
        after, held = info["holdings"][outside], before[outside]
        assert (after.abs() <= held.abs()).all() and (after * held >= 0).all() and (after[held == 0] == 0).all()
    # a policy that holds the members and wants out of a leaver (weights: 1 a member, 0 or -1 not)
    out = -1.0 if short_selling else 0.0
    wants = torch.where(member, 1.0, out).float()
    env = StockTradingVecEnv(data, 1, "cpu", replace(config, action_mode="weights"))
    env.reset(seed=0)
    aal = []
    for t in range(data.num_bars - 1):
        _, _, _, _, info = env.step(wants[t : t + 1])
        aal.append(float(info["holdings"][0, 0]))  # after the fill at bar t + 1
    assert aal[left - 2] > 0  # held the bar before it left; its decision at the last bar in still wants it
    assert aal[left - 1] > 0 and aal[left] == 0.0 and all(a == 0.0 for a in aal[left:])  # sold at the first chance


# --------------------------------------------------------------------------- the converter


def write_source(folder: Path, years: dict[int, str]) -> Path:
    for year, text in years.items():
        (folder / f"n100-ticker-changes-{year}.yaml").write_text(textwrap.dedent(text))
    return folder


SOURCE = {
    2019: """\
        year: 2019
        tickers_on_Jan_1:
          - AAA
          - OLD
        changes:
          '2019-03-04':
            difference:
              - AAA
            union:
              - 'ON'
          '2019-06-10':
            difference:
              - OLD
            union:
              - NEW
        """,
    2020: """\
        year: 2020
        tickers_on_Jan_1:
          - ON
          - NEW
        changes:
          '2020-02-03':
            union:
              - AAA
        """,
}


def test_the_converter_replays_changes_joins_renames_and_writes_its_header(tmp_path: Path):
    tool = converter()
    source = write_source(tmp_path, SOURCE)
    (tmp_path / "renames.csv").write_text("ticker,old_symbol,until\nNEW,OLD,2019-06-10\n")
    out = tmp_path / "members.csv"
    assert (
        tool.main(
            [
                str(source),
                "--out",
                str(out),
                "--renames",
                str(tmp_path / "renames.csv"),
                "--commit",
                "abc123",
                "--covers-to",
                "2020-12-31",
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "# source: https://github.com/jmccarrell/n100tickers at commit abc123" in text and "MIT" in text
    membership = read_membership(out)
    rows = {
        (t, f"{a:%Y-%m-%d}", "" if pd.isna(b) else f"{b:%Y-%m-%d}") for t, a, b in membership.itertuples(index=False)
    }
    assert rows == {
        ("AAA", "2019-01-01", "2019-03-04"),
        ("AAA", "2020-02-03", ""),
        ("ON", "2019-03-04", ""),
        ("NEW", "2019-01-01", ""),
    }
    assert membership.attrs["covers"] == (pd.Timestamp("2019-01-01"), pd.Timestamp("2020-12-31"))


@pytest.mark.parametrize(
    "change, words",
    [
        ("'2019-06-10':\n            difference:\n              - ZZZ", "ZZZ is removed but is not a member"),
        ("'2019-06-10':\n            union:\n              - ON", "ON is added but is a member already"),
        ("'2019-06-10':\n            union:\n              - XYZ", "1 January's list differs"),
    ],
)
def test_the_converter_refuses_a_source_that_contradicts_itself(tmp_path: Path, change: str, words: str):
    tool = converter()
    broken = dict(SOURCE)
    broken[2019] = SOURCE[2019].split("'2019-06-10'")[0] + change + "\n"
    broken[2020] = broken[2020].replace("  - NEW", "  - OLD")
    (tmp_path / "renames.csv").write_text("ticker,old_symbol,until\n")
    with pytest.raises(SystemExit, match=words):
        tool.main(
            [
                str(write_source(tmp_path, broken)),
                "--out",
                str(tmp_path / "m.csv"),
                "--renames",
                str(tmp_path / "renames.csv"),
            ]
        )
    assert not (tmp_path / "m.csv").exists()
