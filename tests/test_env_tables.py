"""The env's observation table, written feature by feature into place, equals the
table computed the plain way: every feature in float64, stacked, cleaned, cast."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from market_fixtures import random_panel

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.env import PRICE_LIKE_FEATURES, feature_block_rows, observed_feature_table, return_tstat_table


def plain_table(data, names, clip):
    """Reference: the whole [T, N, F] table in float64, then nan_to_num, clip and cast."""
    mean, std = data.feature_mean.double(), data.feature_std.double()
    close = data.close.double()
    prev = torch.cat([close[:1], close[:-1]])
    columns = []
    for name in names:
        i = data.feature_names.index(name)
        x = data.features[:, :, i].double()
        if name in PRICE_LIKE_FEATURES:
            columns.append(100.0 * torch.log(x.clamp_min(1e-12) / prev))
        elif name == "volume":
            columns.append(torch.log1p(x.clamp_min(0.0)) - torch.log1p(mean[i].clamp_min(0.0)))
        else:
            columns.append((x - mean[i]) / std[i])
    table = torch.stack(columns, dim=-1)
    return torch.nan_to_num(table, nan=0.0, posinf=clip, neginf=-clip).clamp(-clip, clip).float()


@pytest.fixture
def panel():
    data = random_panel(n_tickers=5, n_bars=120, seed=11, gap_prob=0.05)
    data = data.with_normalization(*data.fit_normalization())
    features = data.features.clone()
    macd = data.feature_names.index("macd")
    features[3, 1, macd] = float("nan")  # nan_to_num's three cases and the clip, all in one table
    features[4, 2, macd] = float("inf")
    features[5, 3, macd] = -float("inf")
    features[6, 0, macd] = 1e9
    return replace(data, features=features)


@pytest.mark.parametrize("block", [None, 64 * 5], ids=["one-block", "blocks-of-64-bars"])
@pytest.mark.parametrize("features, windows", [(None, ()), (("close", "volume", "rsi_30"), (5, 20))])
def test_the_env_table_equals_the_plain_table_bit_for_bit(panel, features, windows, block, monkeypatch):
    """Whole columns or blocks of bars (`normalized_feature_table`'s blocks: here 64 bars of the 120,
    the NaN, infinities and clip inside the first block, a block's first bar reading the previous
    block's last close): the same table, bit for bit."""
    if block is not None:
        monkeypatch.setattr("market_envs.env.FEATURE_BLOCK_ELEMENTS", block)
        assert feature_block_rows(panel.num_tickers) == 64 < panel.num_bars
    config = EnvConfig(features=features, return_windows=windows, feature_clip=7.0)
    env = StockTradingVecEnv(panel, 3, "cpu", config)
    names = features if features is not None else panel.feature_names
    want = plain_table(panel, names, 7.0)
    if windows:
        want = torch.cat([want, return_tstat_table(panel.close, windows, 7.0)], dim=-1)
    n = panel.num_tickers
    got = env._tables.obs[:, 1 + n :].reshape(panel.num_bars, n, -1)
    assert got.shape == want.shape and torch.equal(got, want)
    assert (env._tables.obs[:, : 1 + n] == 0).all()  # the account columns are filled per step
    assert torch.equal(observed_feature_table(panel, config), want)  # the same table without an env
    macd = names.index("macd") if "macd" in names else None
    if macd is not None:
        assert got[3, 1, macd] == 0 and got[4, 2, macd] == 7.0 and got[5, 3, macd] == -7.0 and got[6, 0, macd] == 7.0


def test_envs_on_one_panel_and_rules_share_their_tables_built_once():
    """A tournament worker's pods build the same training and validation envs again: the panel's
    periods are split once and each (panel, device, rules) builds its tables once, while the panel
    lives; other rules build their own."""
    import gc
    import weakref

    from market_envs.env import TABLES_PER_PANEL, tables_held

    panel = random_panel(n_tickers=3, n_bars=80, seed=5)
    panel = replace(panel, meta={**panel.meta, "train_end": panel.timestamps[50], "val_end": panel.timestamps[65]})
    assert panel.period("train") is panel.period("train")
    train = panel.period("train")
    first, second = (StockTradingVecEnv(train, n, "cpu", EnvConfig(return_windows=(5,))) for n in (2, 4))
    assert first._tables is second._tables
    other = StockTradingVecEnv(train, 2, "cpu", EnvConfig(return_windows=(6,)))
    assert other._tables is not first._tables
    assert not torch.equal(other._tables.obs, first._tables.obs)
    for window in range(7, 7 + TABLES_PER_PANEL):
        StockTradingVecEnv(train, 1, "cpu", EnvConfig(return_windows=(window,)))
    assert tables_held(train) == TABLES_PER_PANEL  # the oldest went first
    gone = weakref.ref(train)
    del panel, train, first, second, other
    gc.collect()
    assert gone() is None  # the cache does not keep a panel alive
