"""The env's observation table, written feature by feature into place, equals the
table computed the plain way: every feature in float64, stacked, cleaned, cast."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from market_fixtures import random_panel, random_walk_frame

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.data import MarketData, from_frame
from market_envs.data.panel import PERIODS
from market_envs.config import PRICE_LIKE_FEATURES
from market_envs.tables import feature_block_rows, observed_feature_table, return_tstat_table


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
        monkeypatch.setattr("market_envs.tables.FEATURE_BLOCK_ELEMENTS", block)
        assert feature_block_rows(panel.num_tickers) == 64 < panel.num_bars
    config = EnvConfig(features=features, return_windows=windows, feature_clip=7.0)
    env = StockTradingVecEnv(panel, 3, "cpu", config)
    names = features if features is not None else panel.feature_names
    want = plain_table(panel, names, 7.0)
    if windows:
        want = torch.cat([want, return_tstat_table(panel.close, windows, 7.0)], dim=-1)
    n = panel.num_tickers
    got = env.tables.obs[:, 1 + n :].reshape(panel.num_bars, n, -1)
    assert got.shape == want.shape and torch.equal(got, want)
    assert (env.tables.obs[:, : 1 + n] == 0).all()  # the account columns are filled per step
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

    from market_envs.tables import TABLES_PER_PANEL, tables_held

    panel = random_panel(n_tickers=3, n_bars=80, seed=5)
    panel = replace(panel, meta={**panel.meta, "train_end": panel.timestamps[50], "val_end": panel.timestamps[65]})
    assert panel.period("train") is panel.period("train")
    train = panel.period("train")
    first, second = (StockTradingVecEnv(train, n, "cpu", EnvConfig(return_windows=(5,))) for n in (2, 4))
    assert first.tables is second.tables
    other = StockTradingVecEnv(train, 2, "cpu", EnvConfig(return_windows=(6,)))
    assert other.tables is not first.tables
    assert not torch.equal(other.tables.obs, first.tables.obs)
    for window in range(7, 7 + TABLES_PER_PANEL):
        StockTradingVecEnv(train, 1, "cpu", EnvConfig(return_windows=(window,)))
    assert tables_held(train) == TABLES_PER_PANEL  # the oldest went first
    gone = weakref.ref(train)
    del panel, train, first, second, other
    gc.collect()
    assert gone() is None  # the cache does not keep a panel alive


# ------------------------------------------------------------------ periods and folds warm up


WARM_RULES = EnvConfig(return_windows=(5, 30), turbulence_threshold=5.0, turbulence_window=10, random_start=False)
"""Rules whose observation reads trailing windows: two t-statistics and the turbulence guard."""


def split_panel() -> MarketData:
    """A panel of 150 bars with split dates: train 0 .. 69, validation 70 .. 109, test 110 .. 149."""
    data = random_panel(n_tickers=4, n_bars=150, seed=13, gap_prob=0.05)
    return replace(data, meta={**data.meta, "train_end": data.timestamps[70], "val_end": data.timestamps[110]})


def tables_of(data: MarketData):
    return StockTradingVecEnv(data, 1, "cpu", WARM_RULES).tables


def assert_rows_are_the_whole_panels(part: MarketData, whole: MarketData) -> int:
    """`part`'s observation table and guard equal `whole`'s rows at the same bars (both under `part`'s
    normalisation statistics); returns the bar of `whole` where `part` starts."""
    k = int(whole.timestamps.get_loc(part.start))
    stats = whole.with_normalization(part.feature_mean, part.feature_std)
    full, cut = tables_of(stats), tables_of(part)
    assert torch.equal(cut.obs, full.obs[k : k + part.num_bars]), f"bar {k}"
    assert torch.equal(cut.guard, full.guard[k : k + part.num_bars]), f"bar {k}"
    return k


def test_each_period_observes_its_first_bar_as_the_whole_panel_does():
    """Known answer: the training env (`trader.training`: the training and validation periods), the
    evaluator's validation pass and the test period observe at their row 0 the whole panel's row at
    the same bar, every window read across the boundary."""
    from trader.agents.evaluator import market_evaluator

    data = split_panel()
    assert [assert_rows_are_the_whole_panels(data.period(p), data) for p in PERIODS] == [0, 70, 110]
    validation = market_evaluator(data.period("validation"), WARM_RULES).env
    assert torch.equal(validation.tables.obs, tables_of(data.period("validation")).obs)
    n = data.num_tickers
    first = tables_of(data.period("validation")).obs[0, 1 + n :].view(n, -1)[:, -2:]
    assert (first != 0).all()  # both t-statistics warmed up at the validation period's first bar


def test_each_fold_observes_its_first_bars_as_the_whole_panel_does():
    """Known answer: every window of every walk-forward fold (`trader.folds`, as the walk-forward
    cuts them: `MarketData.with_windows`) observes the whole panel's rows at its bars."""
    from trader.folds import FoldSpec, make_folds

    data = from_frame(random_walk_frame(3, 160, seed=17, freq="1D"))
    folds = make_folds(data.timestamps, FoldSpec("60d", "20d", "20d", embargo=2))
    assert len(folds) >= 3
    for fold in folds:
        cut = data.with_windows(fold.windows.as_dict())
        for name in PERIODS:
            part = cut.period(name)
            assert assert_rows_are_the_whole_panels(part, data) == fold.windows.window(name)[0]


@pytest.mark.parametrize("t", [69, 70, 85, 109, 110, 125])  # the last and first bars of the periods
def test_no_bar_after_t_reaches_any_period_at_t(t):
    """Perturb every bar after t (prices, volume, every indicator, the tradable mask): no period's
    observation or guard at a bar <= t changes, though each period's windows read the bars before it."""
    data = split_panel()
    g = torch.Generator().manual_seed(t)
    noise = torch.exp(torch.randn(data.features.shape, generator=g) * 0.2)
    noise[: t + 1] = 1.0
    tradable = data.tradable.clone()
    tradable[t + 1 :] = ~tradable[t + 1 :]
    changed = replace(data, features=data.features * noise, tradable=tradable)
    for name in PERIODS:
        left, right = tables_of(data.period(name)), tables_of(changed.period(name))
        upto = t + 1 - int(data.timestamps.get_loc(data.period(name).start))  # the period's rows at bars <= t
        if upto > 0:
            assert torch.equal(left.obs[:upto], right.obs[:upto]), name
            assert torch.equal(left.guard[:upto], right.guard[:upto]), name
        if upto < data.period(name).num_bars:
            assert not torch.equal(left.obs[max(upto, 0) :], right.obs[max(upto, 0) :]), name


def test_a_bar_shortly_before_each_period_changes_its_first_observations():
    """The warm-up reads the bars before each period: the close of the bar 2 before a period's first
    changes that period's first t-statistics; a panel cut from the data's first bar has no such bar."""
    data = split_panel()
    close = data.feature_names.index("close")
    for name, k in (("validation", 70), ("test", 110)):
        features = data.features.clone()
        features[k - 2, :, close] *= 1.03
        left = tables_of(data.period(name)).obs[0]
        right = tables_of(replace(data, features=features).period(name)).obs[0]
        n = data.num_tickers
        assert (left[1 + n :].view(n, -1)[:, -2:] != right[1 + n :].view(n, -1)[:, -2:]).all(), name
    assert data.period("train").lookback is None
