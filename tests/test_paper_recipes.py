"""The shipped vendor recipes: the seed paper's NASDAQ-100 experiment on Alpaca, its
daily twin and its Polygon variant; without keys they stop at once with one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from market_envs.data import load
from market_envs.data.recipes import find_recipe
from podracer.cli import main
from vendor_server import END, KEY_ID, SECRET, START, VendorServer, served_bars

RECIPES = {
    "nasdaq100-minute-alpaca": ("alpaca", "1min"),
    "nasdaq100-daily-alpaca": ("alpaca", "1D"),
    "nasdaq100-minute-polygon": ("polygon", "1min"),
}
KEY_VARIABLES = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY", "MASSIVE_API_KEY", "POLYGON_API_KEY")


@pytest.mark.parametrize("name", RECIPES)
def test_the_paper_split_universe_and_benchmark(name):
    recipe = find_recipe(name).resolved()
    assert (recipe.source, recipe.interval) == RECIPES[name]
    # train 2016-01-04 .. 2019-05-24, validation .. 2020-05-25, test .. 2021-05-26, ends included
    assert (recipe.start, recipe.train_end, recipe.val_end, recipe.end) == (
        "2016-01-04",
        "2019-05-25",
        "2020-05-26",
        "2021-05-27",
    )
    assert recipe.benchmark == "QQQ" and recipe.tickers is None  # the universe is the point-in-time file's
    assert recipe.membership_path().name == "nasdaq100-membership.csv" and "Point in time" in recipe.universe["note"]
    assert recipe.options["drop_missing"] is True and recipe.options["outside_session"] == "drop"


@pytest.mark.parametrize(
    "name, variables",
    [
        ("nasdaq100-minute-alpaca", "APCA_API_KEY_ID and APCA_API_SECRET_KEY"),
        ("nasdaq100-daily-alpaca", "APCA_API_KEY_ID and APCA_API_SECRET_KEY"),
        ("nasdaq100-minute-polygon", "MASSIVE_API_KEY (or POLYGON_API_KEY)"),
    ],
)
def test_without_keys_the_build_stops_with_one_line(name, variables, monkeypatch, tmp_path, capsys):
    for variable in KEY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert main(["data", "build", name, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and variables in err
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_alpaca_recipe_builds_from_the_server(monkeypatch, tmp_path):
    """The recipe as shipped, cut to the served tickers and days and pointed at the server."""
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    members = tmp_path / "members.csv"  # the served tickers as the index: AAA all along, BBB from 2021-01-04
    members.write_text("ticker,from,to\nAAA,2015-01-01,\nBBB,2021-01-04,\n")
    with VendorServer(served_bars(), page_size=10_000).running() as server:
        data = load(
            "nasdaq100-minute-alpaca",
            data_dir=tmp_path,
            url=server.url,
            membership=str(members),
            start=START,
            end=END,
            train_end="2020-11-03",
            val_end="2021-03-13",
        )
    assert data.name == "nasdaq100-minute-alpaca" and data.tickers == ("AAA", "BBB") and data.benchmark_name == "QQQ"
    assert data.meta["membership"]["joined"] == ["BBB"]
    assert data.meta["provider"] == "alpaca" and data.start == pd.Timestamp("2020-10-30 09:30", tz="America/New_York")
    assert all(q["feed"] == "sip" and q["adjustment"] == "all" for _, q in server.requests)


def test_bad_retry_options_are_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    assert (
        main(["data", "build", "nasdaq100-daily-alpaca", "--data-dir", str(tmp_path), "--set", 'retries="many"']) == 2
    )
    assert "retries must be an integer" in capsys.readouterr().err
    assert main(["data", "build", "nasdaq100-daily-alpaca", "--data-dir", str(tmp_path), "--set", "backoff_s=-1"]) == 2
    assert "back-off needs retries >= 0" in capsys.readouterr().err


def test_the_demo_on_the_paper_recipe_without_keys_exits_2(monkeypatch, tmp_path, capsys):
    for variable in KEY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    assert main(["demo", "--dataset", "nasdaq100-minute-alpaca", str(tmp_path / "run")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1  # the one line, and no progress bar before it
    assert out.err.startswith("error: alpaca: set APCA_API_KEY_ID and APCA_API_SECRET_KEY in the environment")
    assert not (tmp_path / "data").exists() or list((tmp_path / "data").rglob("*.parquet")) == []
    assert not (tmp_path / "run").exists()


MAKE_VARIABLES = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")


def test_make_demo_on_the_paper_recipe_without_keys_exits_2_with_one_line(tmp_path):
    """`make demo DATASET=nasdaq100-minute-alpaca` as a user types it, on this venv's `trader`
    (`-o` keeps make from reinstalling the venv), in a folder of its own."""
    venv = Path(sys.executable).parent.parent
    make, trader = shutil.which("make"), venv / "bin" / "trader"
    if make is None or not trader.is_file():
        pytest.skip("needs make and the venv's trader script (make test installs both)")
    root = Path(__file__).parents[1]
    # Under `make test` make's own variables (MAKELEVEL, MAKEFLAGS) would make this a sub-make,
    # whose notes read "make[1]: ***"; a user's shell has none of them.
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES and k not in MAKE_VARIABLES}
    env.update(
        PODRACER_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [
            make,
            "-s",
            "-f",
            str(root / "Makefile"),
            "-o",
            f"{venv}/.installed-dev",
            "demo",
            f"VENV={venv}",
            "DATASET=nasdaq100-minute-alpaca",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    ours = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]  # make adds its own
    assert done.returncode == 2 and done.stdout == "" and len(ours) == 1, done.stderr
    assert ours[0].startswith("error: alpaca: set APCA_API_KEY_ID and APCA_API_SECRET_KEY in the environment")
    assert "demo] Error 2" in done.stderr  # make's note of the command's exit status 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run directory, no data
