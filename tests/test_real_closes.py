"""Real closes: skfolio's S&P 500 data set, its converter (datasets/convert_skfolio_sp500.py)
and recipe sp500-20-daily.

The converter runs on a wheel fabricated here (a zip holding two small gzipped CSV files
in skfolio's layout), so its rules have known answers and no test touches the network.
The real download (`make real-data`) is checked by the slow tests at the end, which skip
when its files are absent.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.costs import cost_model
from market_envs.data import DataError, load, read_files
from market_envs.data.calendar import sessions
from market_envs.data.recipes import find_recipe
from market_envs.errors import ConfigError
from podracer.cli import main
from trader.folds import FoldSpec, make_folds

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
RECIPE = DATASETS / "sp500-20-daily.toml"
TICKERS = ("AAPL", "KO", "XOM")
FIRST, END = "2021-01-04", "2021-07-01"  # 124 NYSE sessions: past the 60-bar warm-up, three periods


def converter():
    spec = importlib.util.spec_from_file_location("convert_skfolio_sp500", DATASETS / "convert_skfolio_sp500.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CONVERT = converter()


def source_frames(first: str = FIRST, end: str = END, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """skfolio's two tables: ``Date`` and one column per ticker (three decimals), ``Date`` and SP500."""
    days = pd.DatetimeIndex(sessions(first, end).index)
    rng = np.random.default_rng(seed)
    walk = np.exp(np.cumsum(rng.normal(0.0, 0.02, (len(days), len(TICKERS) + 1)), axis=0))
    prices = np.round(walk * [0.5, 50.0, 80.0, 3800.0], 3)
    dates = days.strftime("%Y-%m-%d")
    stocks = pd.DataFrame({"Date": dates, **{t: prices[:, i] for i, t in enumerate(TICKERS)}})
    index = pd.DataFrame({"Date": dates, "SP500": prices[:, -1]})
    return stocks, index


def gzipped_csv(frame: pd.DataFrame) -> bytes:
    return gzip.compress(frame.to_csv(index=False).encode())


def fabricated_wheel(folder: Path, stocks: pd.DataFrame | None = None, index: pd.DataFrame | None = None) -> Path:
    """A zip with skfolio's data members and licence, named as the pinned wheel."""
    default_stocks, default_index = source_frames()
    stocks = default_stocks if stocks is None else stocks
    index = default_index if index is None else index
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / CONVERT.WHEEL
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(CONVERT.STOCKS, gzipped_csv(stocks))
        archive.writestr(CONVERT.INDEX, gzipped_csv(index))
        archive.writestr(f"skfolio-{CONVERT.VERSION}.dist-info/licenses/LICENSE", "BSD 3-Clause License\n(test)\n")
    return wheel


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def convert(tmp_path: Path, wheel: Path | None = None) -> Path:
    wheel = wheel or fabricated_wheel(tmp_path / "download")
    out = tmp_path / "data" / "skfolio-sp500"
    CONVERT.convert(wheel, out, digest(wheel))
    return out


# --------------------------------------------------------------------------- the converter


def test_closes_dates_and_tickers_round_trip_exactly(tmp_path):
    stocks, index = source_frames()
    out = convert(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(CONVERT.FILES)
    written = pd.read_parquet(out / "closes.parquet")
    assert list(written.columns) == ["timestamp", "ticker", "close"]
    wide = written.pivot(index="timestamp", columns="ticker", values="close")
    for ticker in TICKERS:  # float64, the source's three decimals exactly
        assert np.array_equal(wide[ticker].to_numpy(), stocks[ticker].to_numpy())
    assert np.array_equal(wide["SP500"].to_numpy(), index["SP500"].to_numpy())
    stamps = pd.DatetimeIndex(wide.index)
    assert str(stamps.tz) == "America/New_York"
    assert (stamps.hour == 9).all() and (stamps.minute == 30).all()  # a daily bar is stamped at the open
    assert list(stamps.strftime("%Y-%m-%d")) == list(stocks["Date"])


def test_the_library_reads_the_files_as_close_only_with_the_index_as_benchmark(tmp_path):
    stocks, index = source_frames()
    data = read_files(convert(tmp_path), benchmark="SP500")
    assert data.tickers == TICKERS and data.benchmark_name == "SP500"
    assert data.interval == "1D" and data.num_bars == len(stocks)
    close = data.features[..., list(data.feature_names).index("close")]
    assert torch.equal(close, torch.tensor(stocks[list(TICKERS)].to_numpy(), dtype=torch.float32))
    assert torch.equal(data.benchmark, torch.tensor(index["SP500"].to_numpy(), dtype=torch.float32))
    assert data.meta["missing_columns"] == ["open", "high", "low", "volume"] and data.fill_price == "close"


def test_source_json_records_the_wheel_and_the_window(tmp_path):
    wheel = fabricated_wheel(tmp_path / "download")
    record = json.loads((convert(tmp_path, wheel) / "source.json").read_text())
    assert record["sha256"] == digest(wheel) and record["wheel"] == CONVERT.WHEEL
    assert record["tickers"] == list(TICKERS) and record["benchmark"] == "SP500"
    assert (record["first_day"], record["last_day"], record["days"]) == ("2021-01-04", "2021-06-30", 124)
    assert record["rows"] == 124 * (len(TICKERS) + 1)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_wrong_sha256_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    wheel = fabricated_wheel(tmp_path / "download")
    out = tmp_path / "data" / "skfolio-sp500"
    with pytest.raises(SystemExit) as refused:
        CONVERT.convert(wheel, out)  # the pinned sha256 is the real wheel's, not this one's
    message = str(refused.value)
    assert "sha256" in message and digest(wheel) in message and CONVERT.WHEEL_SHA256 in message
    assert "\n" not in message
    assert leftovers(tmp_path / "data") == []


def test_a_failed_conversion_keeps_the_earlier_one_and_leaves_no_temporary(tmp_path):
    out = convert(tmp_path)
    before = (out / "closes.parquet").read_bytes()
    stocks, index = source_frames()
    stocks.loc[5, "KO"] = -1.0
    bad = fabricated_wheel(tmp_path / "bad", stocks, index)
    with pytest.raises(SystemExit, match="KO"):
        CONVERT.convert(bad, out, digest(bad))
    assert (out / "closes.parquet").read_bytes() == before
    assert leftovers(tmp_path / "data") == ["skfolio-sp500"]


def test_a_second_conversion_replaces_the_first_whole(tmp_path):
    out = convert(tmp_path)
    stocks, index = source_frames(seed=1)
    wheel = fabricated_wheel(tmp_path / "other", stocks, index)
    CONVERT.convert(wheel, out, digest(wheel))
    written = pd.read_parquet(out / "closes.parquet")
    assert np.array_equal(written.loc[written["ticker"] == "XOM", "close"].to_numpy(), stocks["XOM"].to_numpy())
    assert leftovers(tmp_path / "data") == ["skfolio-sp500"]


@pytest.mark.parametrize(
    "spoil, words",
    [
        (lambda s, i: (s, i.iloc[:-1]), "different dates"),
        (lambda s, i: (s, i.rename(columns={"SP500": "SPX"})), "no SP500 column"),
        (lambda s, i: (pd.concat([s, s.iloc[[3]]]), i), "unsorted or repeated"),
        (lambda s, i: (s.assign(Date=s["Date"].str.replace("-", "/")), i), "YYYY-MM-DD"),
    ],
    ids=["dates-differ", "no-index-column", "repeated-date", "bad-date"],
)
def test_a_source_that_is_not_skfolios_layout_is_refused_by_name(tmp_path, spoil, words):
    stocks, index = spoil(*source_frames())
    wheel = fabricated_wheel(tmp_path / "download", stocks, index)
    with pytest.raises(SystemExit, match=words):
        CONVERT.convert(wheel, tmp_path / "data" / "skfolio-sp500", digest(wheel))
    assert leftovers(tmp_path / "data") == []


def test_not_a_zip_is_refused(tmp_path):
    wheel = tmp_path / CONVERT.WHEEL
    wheel.write_bytes(b"not a zip")
    with pytest.raises(SystemExit, match="not a zip"):
        CONVERT.convert(wheel, tmp_path / "out", digest(wheel))


def test_main_converts_a_given_wheel_and_says_what_it_wrote(tmp_path, capsys):
    wheel = fabricated_wheel(tmp_path / "download")
    out = tmp_path / "out"
    assert CONVERT.main([str(wheel), "--out", str(out), "--sha256", digest(wheel)]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out}: 496 closes of 3 tickers and SP500, 2021-01-04 .. 2021-06-30 (124 days)" in said


def test_download_asks_this_pythons_pip_for_the_pinned_wheel_only_and_cleans_up(tmp_path, monkeypatch, capsys):
    """--download without the network: pip is replaced by a fake that writes a fabricated wheel."""
    made = fabricated_wheel(tmp_path / "made")
    commands = []

    def fake_run(command, check):
        commands.append(command)
        folder = Path(command[command.index("-d") + 1])
        (folder / CONVERT.WHEEL).write_bytes(made.read_bytes())

    monkeypatch.setattr(CONVERT.subprocess, "run", fake_run)
    out = tmp_path / "data" / "skfolio-sp500"
    assert CONVERT.main(["--download", "--out", str(out), "--sha256", digest(made)]) == 0
    assert commands[0][:3] == [sys.executable, "-m", "pip"]
    assert commands[0][3:7] == ["download", "-q", "--no-deps", f"skfolio=={CONVERT.VERSION}"]
    assert leftovers(tmp_path / "data") == ["skfolio-sp500"]  # the download folder is gone
    assert "wrote" in capsys.readouterr().out


def test_a_failed_download_is_one_line(tmp_path, monkeypatch):
    def fail(command, check):
        raise CONVERT.subprocess.CalledProcessError(1, command)

    monkeypatch.setattr(CONVERT.subprocess, "run", fail)
    with pytest.raises(SystemExit, match=r"pip download skfolio==1.12.2 failed \(exit code 1\)"):
        CONVERT.main(["--download", "--out", str(tmp_path / "data" / "skfolio-sp500")])
    assert leftovers(tmp_path / "data") == []


# --------------------------------------------------------------------------- the recipe


def test_the_recipe_parses():
    recipe = find_recipe("sp500-20-daily")
    assert recipe.path == RECIPE and recipe.source == "files" and recipe.interval == "1D"
    assert (recipe.start, recipe.train_end, recipe.val_end, recipe.end) == (
        "2005-01-03",
        "2016-01-01",
        "2019-01-01",
        "2022-12-29",
    )
    assert recipe.benchmark == "SP500" and len(recipe.tickers) == 20 and recipe.tickers == tuple(sorted(recipe.tickers))
    assert recipe.options == {"path": "data/skfolio-sp500", "made_by": "make real-data"}
    for words in ("skfolio", "BSD 3-Clause", "Nothing is planted", "make real-data", "institutional"):
        assert words in recipe.description


def test_the_walk_forward_the_description_names_has_eleven_yearly_folds():
    """Known answer from the exchange calendar alone: 4,529 sessions in the recipe's window,
    and 5y/1y/1y folds test 2011 to 2021 (2022's test window would end after the data's last day)."""
    recipe = find_recipe("sp500-20-daily")
    days = pd.DatetimeIndex(sessions(recipe.start, recipe.end).index)
    stamps = days.tz_localize("America/New_York") + pd.Timedelta(hours=9, minutes=30)
    assert len(stamps) == 4529 and f"{stamps[-1]:%Y-%m-%d}" == "2022-12-28"
    folds = make_folds(stamps, FoldSpec("5y", "1y", "1y"))
    assert "--train 5y --validation 1y --test 1y (11 folds, tests 2011-2021)" in recipe.description
    assert len(folds) == 11
    assert [stamps[f.test[0]].year for f in folds] == list(range(2011, 2022))


def test_the_makefile_the_converter_and_the_recipe_name_one_folder():
    """`make real-data` writes where the converter writes by default and the recipe reads."""
    import re

    makefile = (DATASETS.parent / "Makefile").read_text()
    folder = re.search(r"^REAL_DATA := (\S+)$", makefile, re.MULTILINE).group(1)
    assert "datasets/convert_skfolio_sp500.py --download --out $(REAL_DATA)" in makefile
    recipe = find_recipe("sp500-20-daily")
    assert (recipe.path.parent / recipe.options["path"]).resolve() == (DATASETS.parent / folder).resolve()
    assert CONVERT.DEFAULT_OUT.resolve() == (DATASETS.parent / folder).resolve()


def test_missing_files_are_one_error_naming_make_real_data(tmp_path, capsys):
    absent = tmp_path / "absent"
    with pytest.raises(DataError, match=r"is not there yet|are not there yet") as missing:
        load("sp500-20-daily", path=str(absent))
    assert "`make real-data` writes them" in str(missing.value) and str(absent) in str(missing.value)
    assert main(["data", "build", "sp500-20-daily", "--set", f"path={absent}"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "make real-data" in err and "Traceback" not in err


def test_made_by_is_not_part_of_the_cache_key(tmp_path):
    out = convert(tmp_path)
    recipe = find_recipe("sp500-20-daily").with_overrides(path=str(out))
    assert recipe.key() == recipe.with_overrides(made_by="something else").key()


def test_the_recipe_loads_converted_files_and_refuses_institutional_costs(tmp_path):
    out = convert(tmp_path)
    data = load(
        "sp500-20-daily",
        path=str(out),
        tickers=list(TICKERS),
        start=FIRST,
        train_end="2021-05-01",
        val_end="2021-06-01",
        end=END,
    )
    assert data.tickers == TICKERS and data.benchmark_name == "SP500" and data.meta["recipe"] == "sp500-20-daily"
    StockTradingVecEnv(data, 2, "cpu", EnvConfig(buy_cost=5e-4, sell_cost=5e-4))  # flat bp costs apply
    with pytest.raises(ConfigError, match="needs volume"):
        StockTradingVecEnv(data, 2, "cpu", cost_model("institutional").apply(EnvConfig()))


# --------------------------------------------------------------------------- the real download

REAL = DATASETS / "data" / "skfolio-sp500"
needs_real = pytest.mark.skipif(
    not (REAL / "closes.parquet").is_file(), reason=f"{REAL} is absent: run `make real-data` (downloads 1.5 MB)"
)


@pytest.mark.slow
@needs_real
def test_the_real_conversion_is_the_pinned_wheels_twenty_stocks_and_index():
    record = json.loads((REAL / "source.json").read_text())
    assert record["sha256"] == CONVERT.WHEEL_SHA256 and record["wheel"] == CONVERT.WHEEL
    assert (record["first_day"], record["last_day"], record["days"]) == ("1990-01-02", "2022-12-28", 8313)
    assert len(record["tickers"]) == 20 and record["rows"] == 8313 * 21


@pytest.mark.slow
@needs_real
def test_the_real_recipe_builds_every_session_of_its_window():
    """The files hold 1990-2022, so the build sees two moves before the recipe's start that look
    like splits: AAPL's real fall of 52% on 2000-09-29 and RRC's in its stale quotes of 1990."""
    with pytest.warns(UserWarning, match=r"RRC on 1990-04-10 \(x0.33\); AAPL on 2000-09-29 \(x0.48\)"):
        data = load("sp500-20-daily")
    assert data.num_bars == 4529 and data.num_tickers == 20 and data.benchmark_name == "SP500"
    assert bool(data.tradable[60:].all())  # no session missing, nothing filled after the warm-up
    assert pd.DatetimeIndex(data.timestamps).equals(
        pd.DatetimeIndex(sessions("2005-01-03", "2022-12-29").index).tz_localize("America/New_York")
        + pd.Timedelta(hours=9, minutes=30)
    )
