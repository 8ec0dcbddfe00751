"""The Parquet cache: exact panel round trips, atomic entries, data directory choice."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import market_envs.data.cache as cache_module
from market_envs.data import DataError, from_frame
from market_envs.data.cache import DataCache, interleave_into, cache_key, data_dir
from market_fixtures import random_walk_frame


def panel():
    frame = random_walk_frame(3, 120, seed=2, gap_prob=0.05)
    bench = random_walk_frame(1, 120, seed=3).assign(ticker="QQQ")
    data = from_frame(frame, bench, benchmark_name="QQQ", name="tiny")
    mean, std = data.fit_normalization()
    return replace(data, feature_mean=mean, feature_std=std, meta={"train_end": "2024-01-02 10:30", "recipe": "tiny"})


def test_panel_round_trip_is_exact(tmp_path):
    data = panel()
    store = DataCache(tmp_path)
    folder = store.save_panel("k1", data, extra={"recipe": {"name": "tiny"}})
    assert sorted(p.name for p in folder.iterdir()) == ["benchmark.parquet", "meta.json", "panel.parquet"]
    back = store.load_panel("k1")
    assert back.timestamps.equals(data.timestamps) and str(back.timestamps.tz) == "America/New_York"
    assert back.tickers == data.tickers and back.feature_names == data.feature_names
    assert torch.equal(back.features, data.features)
    assert torch.equal(back.tradable, data.tradable)
    assert torch.equal(back.benchmark, data.benchmark) and back.benchmark_name == "QQQ"
    assert torch.equal(back.feature_mean, data.feature_mean)
    assert torch.equal(back.feature_std, data.feature_std)
    assert back.meta == data.meta and back.name == "tiny" and back.interval == data.interval
    assert store.panel_meta("k1")["recipe"] == {"name": "tiny"}


@pytest.mark.parametrize("block", [7, 30, 1 << 11])
def test_interleave_in_row_blocks_equals_the_stacked_columns(block):
    """The load's copy of a row group's columns into the [R, F] features, in blocks of rows that
    do not divide R, one block, or the default: the columns side by side."""
    rng = np.random.default_rng(0)
    columns = [rng.standard_normal(30).astype(np.float32) for _ in range(4)]
    out = np.full((30, 4), np.nan, dtype=np.float32)
    interleave_into(out, [pa.array(c) for c in columns], block)
    assert np.array_equal(out, np.stack(columns, axis=1))


def test_panel_file_is_long(tmp_path):
    data = panel()
    folder = DataCache(tmp_path).save_panel("k", data)
    long = pd.read_parquet(folder / "panel.parquet")
    assert len(long) == data.num_bars * data.num_tickers
    assert list(long.columns[:2]) == ["timestamp", "ticker"] and "tradable" in long.columns


def test_failure_mid_write_leaves_no_entry(tmp_path, monkeypatch):
    store = DataCache(tmp_path)
    real = cache_module._write_panel

    def crash_after_panel_file(folder, data, key, extra):
        real(folder, data, key, extra)
        (folder / "meta.json").unlink()
        raise OSError("disk full")

    monkeypatch.setattr(cache_module, "_write_panel", crash_after_panel_file)
    with pytest.raises(OSError, match="disk full"):
        store.save_panel("k", panel())
    assert not store.has_panel("k")
    assert list((tmp_path / "panels").iterdir()) == []  # no entry, no temporary


def test_failed_download_write_leaves_no_file(tmp_path, monkeypatch):
    store = DataCache(tmp_path)
    frame = random_walk_frame(2, 10)

    def half_written(self, path, *args, **kwargs):
        open(path, "wb").write(b"PAR1 half")
        raise OSError("killed")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", half_written)
    with pytest.raises(OSError, match="killed"):
        store.save_frame("yahoo", "abc", frame)
    assert store.load_frame("yahoo", "abc") is None
    assert list(store.download_path("yahoo", "abc").parent.iterdir()) == []


def test_download_round_trip(tmp_path):
    store = DataCache(tmp_path)
    frame = random_walk_frame(2, 10)
    store.save_frame("yahoo", "abc", frame)
    pd.testing.assert_frame_equal(store.load_frame("yahoo", "abc"), frame)
    assert store.entries() == [store.download_path("yahoo", "abc")]


def test_leftover_temporary_is_not_an_entry_and_is_cleaned_when_stale(tmp_path):
    store = DataCache(tmp_path)
    stale = tmp_path / "panels" / ".tmp-k-deadbeef"
    stale.mkdir(parents=True)
    (stale / "panel.parquet").write_bytes(b"half")
    assert store.entries() == [] and store.panels() == [] and not store.has_panel("k")
    old = time.time() - 2 * cache_module.STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    store.save_panel("k", panel())
    assert not stale.exists() and store.has_panel("k")


def test_saving_again_replaces_the_entry(tmp_path):
    store = DataCache(tmp_path)
    data = panel()
    store.save_panel("k", data)
    store.save_panel("k", replace(data, name="renamed"))
    assert store.load_panel("k").name == "renamed"
    assert [p.name for p in (tmp_path / "panels").iterdir()] == ["k"]


def test_damaged_entry_is_a_data_error(tmp_path):
    store = DataCache(tmp_path)
    folder = store.save_panel("k", panel())
    meta = (folder / "meta.json").read_text().replace('"bars": 120', '"bars": 119')
    (folder / "meta.json").write_text(meta)
    with pytest.raises(DataError, match="rows"):
        store.load_panel("k")
    with pytest.raises(DataError, match="no cached panel"):
        store.load_panel("other")


def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env"
    assert data_dir(tmp_path / "flag") == tmp_path / "flag"
    monkeypatch.delenv("PODRACER_DATA_DIR")
    assert "podracer-trader" in str(data_dir())


def test_cache_key_is_stable_and_order_free():
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 2})
