"""Small random-walk market panels for the env tests.

Built through `from_frame`, so they carry the real indicators and tradable mask
(the first `WARMUP_BARS` bars are untradable, gaps are filled forward and masked).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from market_envs.data import MarketData, from_frame


def random_walk_frame(
    n_tickers: int,
    n_bars: int,
    seed: int = 0,
    gap_prob: float = 0.0,
    start: str = "2024-01-02 09:30",
    freq: str = "1min",
) -> pd.DataFrame:
    """A long OHLCV frame of geometric random walks, one row per (bar, ticker).

    :param gap_prob: chance that a (bar, ticker) row is missing (never the first bar),
        which `from_frame` fills forward and marks untradable.
    """
    rng = np.random.default_rng(seed)
    stamps = pd.date_range(start, periods=n_bars, freq=freq, tz="America/New_York")
    level = rng.uniform(20.0, 300.0, size=n_tickers)
    log_returns = rng.normal(0.0, 0.004, size=(n_bars, n_tickers))
    close = level * np.exp(np.cumsum(log_returns, axis=0))
    open_ = close * np.exp(rng.normal(0.0, 0.002, size=close.shape))
    high = np.maximum(open_, close) * (1.0 + rng.uniform(0.0, 0.003, size=close.shape))
    low = np.minimum(open_, close) * (1.0 - rng.uniform(0.0, 0.003, size=close.shape))
    volume = rng.integers(100, 10_000, size=close.shape).astype(float)
    tickers = [f"T{i:03d}" for i in range(n_tickers)]
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, n_tickers),
            "ticker": np.tile(tickers, n_bars),
            "open": open_.ravel(),
            "high": high.ravel(),
            "low": low.ravel(),
            "close": close.ravel(),
            "volume": volume.ravel(),
        }
    )
    if gap_prob > 0:
        keep = rng.random(len(frame)) >= gap_prob
        keep[:n_tickers] = True
        frame = frame[keep].reset_index(drop=True)
    return frame


def random_panel(
    n_tickers: int = 3,
    n_bars: int = 80,
    seed: int = 0,
    gap_prob: float = 0.0,
    warmup_tradable: bool = True,
) -> MarketData:
    """A random-walk `MarketData` panel.

    :param warmup_tradable: mark the indicator warm-up bars tradable (short test
        panels would otherwise spend most bars untradable); gaps stay masked.
    """
    frame = random_walk_frame(n_tickers, n_bars, seed=seed, gap_prob=gap_prob)
    panel = from_frame(frame, name=f"random-walk-{seed}")
    if warmup_tradable:
        observed = _observed_mask(frame, panel)
        panel = replace(panel, tradable=observed)
    return panel


def _observed_mask(frame: pd.DataFrame, panel: MarketData) -> torch.Tensor:
    """True where the frame really had a row (not filled forward)."""
    present = frame.assign(present=True).pivot(index="timestamp", columns="ticker", values="present")
    present = present.reindex(index=panel.timestamps, columns=list(panel.tickers))
    return torch.from_numpy(present.notna().to_numpy().copy())


TINY_RECIPE = """
name = "tiny-synthetic"
description = "4 synthetic tickers over 8 sessions"
source = "synthetic"
interval = "1min"
start = "2023-01-03"
end = "2023-01-13"
train_end = "2023-01-09"
val_end = "2023-01-11"

[synthetic]
n_tickers = 4
seed = 1
"""
"""The smallest market a run trains, validates and backtests on: 4 synthetic tickers,
minute bars over 8 sessions (train, validation and test periods of a few days)."""


TINY_DAILY_RECIPE = """
name = "tiny-daily"
description = "8 synthetic tickers, daily bars"
source = "synthetic"
interval = "1D"
start = "2019-01-02"
end = "2023-01-01"
train_end = "2021-01-01"
val_end = "2022-01-01"

[synthetic]
n_tickers = 8
seed = 2
"""
"""A tiny daily market over four years (train 2019-2020, validation 2021, test 2022): the
seed paper's experiment runs on it end to end in a test."""


def write_tiny_recipe(folder: Path, interval: str = "1min") -> Path:
    """`TINY_RECIPE` as ``folder/tiny.toml``; returns its path (give it as the data set).

    :param interval: the bar; ``"5min"`` gives the same 8 sessions in a fifth of the bars (78 a
        session), for tests whose cost is a bar-by-bar pass (a backtest, a replay) and whose
        rule does not depend on the bar's length.
    """
    path = Path(folder) / "tiny.toml"
    path.write_text(TINY_RECIPE.replace('interval = "1min"', f'interval = "{interval}"'))
    return path


def with_leavers(panel: MarketData, seed: int, switches: int = 4, member_first: float = 0.7) -> MarketData:
    """`panel` under a random point-in-time universe, masked as `apply_membership` masks it:
    each ticker goes in and out of the index at `switches` random bars (a member at the first
    bar with probability `member_first`); a non-member is untradable, and its bars with a price
    (`MarketData.priced`) are `reducible`."""
    rng = np.random.default_rng(seed)
    t, n = panel.num_bars, panel.num_tickers
    member = np.empty((t, n), dtype=bool)
    for j in range(n):  # a few tickers, once per test panel
        cuts = np.sort(rng.choice(np.arange(1, t), size=min(switches, t - 1), replace=False))
        flips = np.zeros(t, dtype=int)
        flips[cuts] = 1
        member[:, j] = (np.cumsum(flips) % 2 == 0) == (rng.random() < member_first)
    member = torch.from_numpy(member)
    priced = panel.priced
    return replace(panel, tradable=priced & member, reducible=priced & ~member)
