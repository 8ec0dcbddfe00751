"""Recipes and `load`: parsing, lookup by name or path, overrides, the cache, the
training-only normalisation, and bad data that leaves the cache empty."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

import market_envs.data.files as files_module
from market_envs.data import DataError, load
from market_envs.data.cache import DataCache
from market_envs.data.recipes import available_recipes, find_recipe, parse_recipe, resolve_date
from market_fixtures import random_walk_frame
from test_data_frame import BAD_CASES, good_frame
from trader.errors import ConfigError

REPO_DATASETS = Path(__file__).resolve().parents[1] / "datasets"

FILES_RECIPE = """
name = "tiny-files"
description = "Three random-walk tickers for the tests."
source = "files"
interval = "1min"
start = "2024-01-02"
end = "2024-01-03"
train_end = "2024-01-02 12:00"
val_end = "2024-01-02 13:00"
benchmark = "QQQ"

[files]
path = "bars"
"""


def write_files_recipe(folder: Path, frame: pd.DataFrame | None = None) -> Path:
    """A files recipe in `folder` reading `folder/bars/bars.csv`: `frame` (default: a random
    walk) plus a QQQ benchmark copied from its ticker T000 (so bad cases stay bad alike)."""
    if frame is None:
        frame = random_walk_frame(3, 300, seed=6, gap_prob=0.02)
    qqq = frame[frame["ticker"] == "T000"].assign(ticker="QQQ")
    frame = pd.concat([frame, qqq], ignore_index=True)
    (folder / "bars").mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "bars" / "bars.csv", index=False)
    recipe = folder / "tiny-files.toml"
    recipe.write_text(FILES_RECIPE)
    return recipe


def all_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*")] if root.exists() else []


def test_load_builds_caches_and_sets_meta(tmp_path):
    recipe = write_files_recipe(tmp_path)
    data = load(recipe, data_dir=tmp_path / "cache")
    assert data.name == "tiny-files" and data.tickers == ("T000", "T001", "T002")
    assert data.benchmark_name == "QQQ" and data.benchmark is not None
    assert data.meta["train_end"] == "2024-01-02 12:00" and data.meta["val_end"] == "2024-01-02 13:00"
    assert data.meta["recipe"] == "tiny-files" and data.meta["source"] == "files"
    assert len(DataCache(tmp_path / "cache").panels()) == 1
    train, validation, test = (data.period(p) for p in ("train", "validation", "test"))
    assert train.end < pd.Timestamp("2024-01-02 12:00", tz="America/New_York") <= validation.start
    assert test.start == pd.Timestamp("2024-01-02 13:00", tz="America/New_York")


def test_normalisation_is_fitted_on_the_training_period_only(tmp_path):
    data = load(write_files_recipe(tmp_path), data_dir=tmp_path / "cache")
    mean, std = data.slice(None, "2024-01-02 12:00").fit_normalization()
    whole_mean, _ = data.fit_normalization()
    assert torch.equal(data.feature_mean, mean) and torch.equal(data.feature_std, std)
    assert not torch.equal(data.feature_mean, whole_mean)


def test_cache_hit_reads_no_source(tmp_path, monkeypatch):
    recipe = write_files_recipe(tmp_path)
    first = load(recipe, data_dir=tmp_path / "cache")

    def refuse(*args, **kwargs):
        raise AssertionError("the source was read although the panel is cached")

    monkeypatch.setattr(files_module, "read_files", refuse)
    again = load(recipe, data_dir=tmp_path / "cache")
    assert torch.equal(again.features, first.features) and torch.equal(again.tradable, first.tradable)
    assert torch.equal(again.feature_mean, first.feature_mean) and again.meta == first.meta


def test_a_built_panel_and_its_cached_copy_observe_their_first_bars_alike(tmp_path):
    """Files holding bars before the recipe's start: the data set is the recipe's bars (no
    `lookback` of the source's earlier ones, which the cache does not keep), so the panel built
    on the first load and the one read back from the cache give the same env tables."""
    from market_envs import EnvConfig, StockTradingVecEnv

    frame = random_walk_frame(3, 960, seed=8, start="2024-01-01 23:00")  # an hour before the start
    recipe = write_files_recipe(tmp_path, frame)
    built = load(recipe, data_dir=tmp_path / "cache")
    cached = load(recipe, data_dir=tmp_path / "cache")
    assert built.start == pd.Timestamp("2024-01-02", tz="America/New_York")
    assert built.lookback is None and cached.lookback is None
    rules = EnvConfig(return_windows=(30,), turbulence_threshold=5.0, turbulence_window=10)
    tables = [StockTradingVecEnv(d.period("train"), 1, "cpu", rules).tables for d in (built, cached)]
    assert torch.equal(tables[0].obs, tables[1].obs) and torch.equal(tables[0].guard, tables[1].guard)


def test_changed_files_are_rebuilt(tmp_path):
    recipe = write_files_recipe(tmp_path)
    first = load(recipe, data_dir=tmp_path / "cache")
    frame = pd.read_csv(tmp_path / "bars" / "bars.csv")
    frame = frame[frame["ticker"] != "T002"]
    frame.to_csv(tmp_path / "bars" / "bars.csv", index=False)
    again = load(recipe, data_dir=tmp_path / "cache")
    assert first.tickers != again.tickers == ("T000", "T001")


def test_overrides_replace_keys_and_unknown_ones_are_refused(tmp_path):
    recipe = write_files_recipe(tmp_path)
    data = load(recipe, data_dir=tmp_path / "cache", tickers=["T002", "T000"], val_end="2024-01-02 13:30")
    assert data.tickers == ("T002", "T000") and data.meta["val_end"] == "2024-01-02 13:30"
    with pytest.raises(ConfigError, match="unknown override 'n_ticker'"):
        load(recipe, data_dir=tmp_path / "cache", n_ticker=3)


@pytest.mark.parametrize("case_id, mutate, words", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_data_raises_and_leaves_nothing_in_the_cache(tmp_path, case_id, mutate, words):
    recipe = write_files_recipe(tmp_path, mutate(good_frame()))
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as err:
        load(recipe, data_dir=cache)
    for word in words:
        assert word in str(err.value)
    assert all_files(cache) == []


def test_absent_requested_ticker_leaves_nothing_in_the_cache(tmp_path):
    recipe = write_files_recipe(tmp_path)
    with pytest.raises(DataError, match="ZZZ"):
        load(recipe, data_dir=tmp_path / "cache", tickers=["T000", "ZZZ"])
    assert all_files(tmp_path / "cache") == []


def test_empty_period_is_a_data_error(tmp_path):
    recipe = write_files_recipe(tmp_path)
    with pytest.raises(DataError, match="holds no bar"):
        load(recipe, data_dir=tmp_path / "cache", train_end="2024-01-02 20:00", val_end="2024-01-02 21:00")
    assert all_files(tmp_path / "cache") == []


def test_recipe_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['strat'\]; expected"):
        parse_recipe("strat = 1\n" + FILES_RECIPE)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['pth'\] in \[files\]"):
        parse_recipe(FILES_RECIPE.replace("path =", "pth ="))
    with pytest.raises(ConfigError, match="missing key"):
        parse_recipe('source = "files"\nstart = "2024-01-01"\n')
    with pytest.raises(ConfigError, match="is not one of"):
        parse_recipe(FILES_RECIPE.replace('"files"\ninterval', '"bloomberg"\ninterval'))
    with pytest.raises(ConfigError, match="do not belong"):
        parse_recipe(FILES_RECIPE + "\n[yahoo]\ndrop_missing = true\n")
    bad_order = parse_recipe(FILES_RECIPE.replace('val_end = "2024-01-02 13:00"', 'val_end = "2024-01-02 11:00"'))
    with pytest.raises(ConfigError, match="train_end .* must be before val_end"):
        bad_order.resolved()
    with pytest.raises(ConfigError, match="no recipe 'no-such-recipe'"):
        find_recipe("no-such-recipe")


def test_relative_dates():
    today = pd.Timestamp("2026-11-22 15:00", tz="America/New_York")
    assert resolve_date("today", today) == "2026-11-22"
    assert resolve_date("today-29d", today) == "2026-10-24"
    assert resolve_date("2024-01-31", today) == "2024-01-31"
    with pytest.raises(ConfigError, match="neither ISO"):
        resolve_date("yesterday", today)


def test_shipped_recipes_parse_and_are_found_by_name():
    shipped = {p.stem for p in REPO_DATASETS.glob("*.toml")}
    assert {"nasdaq100-minute"} <= shipped <= set(available_recipes())
    for name in shipped:
        recipe = find_recipe(name)
        assert recipe.name == name and recipe.description
        recipe.resolved()


def test_nasdaq100_recipe_states_its_universe():
    recipe = find_recipe("nasdaq100-minute")
    assert recipe.source == "yahoo" and recipe.benchmark == "QQQ" and recipe.interval == "1min"
    assert 100 <= len(recipe.tickers) <= 102 and len(set(recipe.tickers)) == len(recipe.tickers)
    assert {"AAPL", "MSFT", "NVDA", "PLTR"} <= set(recipe.tickers) and "QQQ" not in recipe.tickers
    assert recipe.universe["as_of"] and "survivorship" in recipe.universe["note"].lower()
    resolved = recipe.resolved(pd.Timestamp("2026-11-22", tz="America/New_York"))
    assert pd.Timestamp(resolved.end) - pd.Timestamp(resolved.start) <= pd.Timedelta(days=30)


def test_yahoo_recipe_loads_through_an_injected_download(tmp_path):
    """A yahoo recipe end to end on a download that serves a recorded-shaped response."""
    frame = random_walk_frame(3, 300, seed=8)
    qqq = random_walk_frame(1, 300, seed=9).assign(ticker="QQQ")
    long = pd.concat([frame.replace({"T000": "AAA", "T001": "BBB", "T002": "CCC"}), qqq])
    calls = []

    def download(symbols, start, end, interval, **kwargs):
        calls.append((tuple(symbols), interval))
        wide = long.set_index(["timestamp", "ticker"]).unstack("ticker")
        wide.columns = wide.columns.set_names(["Price", "Ticker"])
        return wide.rename(columns=str.capitalize, level=0)

    recipe = tmp_path / "y.toml"
    recipe.write_text(
        FILES_RECIPE.replace('"files"', '"yahoo"').replace('[files]\npath = "bars"', 'tickers = ["AAA", "BBB", "CCC"]')
    )
    data = load(recipe, data_dir=tmp_path / "cache", download=download)
    assert data.tickers == ("AAA", "BBB", "CCC") and data.benchmark_name == "QQQ"
    assert calls == [(("AAA", "BBB", "CCC", "QQQ"), "1m")]
    again = load(recipe, data_dir=tmp_path / "cache", download=None)  # from the cache: no download
    assert torch.equal(again.features, data.features)


def test_synthetic_recipe_loads_with_overrides(tmp_path):
    if "synthetic-minute" not in available_recipes():
        pytest.skip("datasets/synthetic-minute.toml is not there yet")
    data = load(
        "synthetic-minute",
        data_dir=tmp_path,
        n_tickers=3,
        start="2024-03-04",
        end="2024-03-09",
        train_end="2024-03-06",
        val_end="2024-03-07",
    )
    assert data.num_tickers == 3 and data.meta["source"] == "synthetic"
    assert data.benchmark is not None and data.feature_mean is not None
