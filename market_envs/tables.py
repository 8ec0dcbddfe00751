"""The env's per-bar tables: their `Tables` tuple, how they are precomputed at construction (the
normalised features, the return t-statistics, the turbulence index) and the per-panel cache that
envs of the same data and rules share.

The observation layout and the normalisation they implement are stated in `market_envs.config`.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from market_envs.config import PRICE_LIKE_FEATURES, EnvConfig
from market_envs.data.indicators import trailing_tstat
from market_envs.data.panel import MarketData
from market_envs.fill_inputs import Market


class Tables(NamedTuple):
    """Per-bar data the step reads, precomputed on the device at construction."""

    open: Tensor  # [T, N] fill prices, the panel's float32 (widened to float64 exactly in the step)
    close: Tensor  # [T, N] mark prices, likewise
    tradable: Tensor  # bool [T, N]
    obs: Tensor  # float32 [T, obs_dim]; columns [0, 1+N) are zero, filled per step
    guard: Tensor  # bool [T], turbulence guard on (all False when disabled)
    market: Market  # the cost terms' tables, [T, N] (None: term off; `market_envs.fill_inputs.market_tables`)
    # the trade rate and the no-trade band of each sub-environment, float64 [E, 1] (None: off)
    trade_rate: Tensor | None = None
    band: Tensor | None = None
    reducible: Tensor | None = None  # bool [T, N]: `MarketData.reducible` (None: the panel has no leaver)


PER_ENV_TABLES = frozenset({"trade_rate", "band"})
"""The fields of `Tables` with one row per sub-environment, [E, 1]; every other table has one
row per bar, [T, ...] (or one row for every bar, [1, N])."""


FEATURE_BLOCK_ELEMENTS = 1 << 15
"""About how many elements (bars x stocks) `normalized_feature_table` computes at a time: its
float64 temporaries of a block stay in the CPU's cache (a whole column of a year of minute bars
is tens of MB, read and written once per operation)."""


def feature_block_rows(num_tickers: int) -> int:
    """Bars per block of `normalized_feature_table`: a multiple of 64, so that every block but the
    last holds a multiple of 64 elements and each element meets the same (vectorised or scalar
    tail) code of every elementwise kernel as in one pass over the whole column: the same bits."""
    return max(64, FEATURE_BLOCK_ELEMENTS // max(num_tickers, 1) // 64 * 64)


def normalized_feature_table(
    data: MarketData, names: tuple[str, ...], clip: float, out: Tensor | None = None
) -> Tensor:
    """The observed features of every bar, normalised as the module docstring says.

    Returns float32 [T, N, len(names)] on the data's device: `out` when given (a
    float32 [T, N, len(names)] tensor or view, such as the env's observation table),
    else a new tensor. Each feature is computed in float64 and written into its
    column, a block of bars at a time (`feature_block_rows`), so the work space is a few
    float64 temporaries of one block, never a float64 copy of the whole table, and they stay
    in the CPU's cache (a tournament worker's first pod builds these tables: about 3x faster
    than whole columns on the training period of synthetic-edge-minute; the same values, bit
    for bit, tests/test_env_tables.py).
    """
    stats = (data.feature_mean, data.feature_std)
    if stats[0] is None or stats[1] is None:
        warnings.warn(
            f"panel {data.name!r} carries no training statistics: its features are normalised with "
            f"statistics fitted on the panel itself ({data.start} .. {data.end}); for a validation or "
            f"test period that looks ahead. Cut periods with MarketData.split / period, or load the data "
            f"set by recipe (market_envs.data.load attaches its training statistics).",
            UserWarning,
            stacklevel=3,
        )
        stats = data.fit_normalization()
    if out is None:
        out = torch.empty((data.num_bars, data.num_tickers, len(names)), dtype=torch.float32, device=data.device)
    mean, std = stats
    mean, std = mean.double(), std.double()
    indices = [data.feature_names.index(name) for name in names]
    rows = feature_block_rows(data.num_tickers)
    before = data.lookback_bars(1, ("close",))[:, :, 0]  # the bar before the first, when the panel knows it
    for lo in range(0, data.num_bars, rows):  # a loop over blocks of bars, once, at construction
        hi = min(data.num_bars, lo + rows)
        close = data.close[max(lo - 1, 0) : hi].double()  # from the bar before the block's first
        prev_close = close[: hi - lo] if lo else torch.cat([before.double() if len(before) else close[:1], close[:-1]])
        for k, (name, index) in enumerate(zip(names, indices)):  # the few feature names
            x = data.features[lo:hi, :, index].double()
            if name in PRICE_LIKE_FEATURES:
                column = 100.0 * torch.log(x.clamp_min(1e-12) / prev_close)
            elif name == "volume":
                column = torch.log1p(x.clamp_min(0.0)) - torch.log1p(mean[index].clamp_min(0.0))
            else:
                column = (x - mean[index]) / std[index]
            del x
            out[lo:hi, :, k] = torch.nan_to_num(column, nan=0.0, posinf=clip, neginf=-clip).clamp_(-clip, clip)
    return out


def return_tstat_table(close: Tensor, windows: tuple[int, ...], clip: float) -> Tensor:
    """The ``ret_tstat_{w}`` features of `EnvConfig.return_windows`: float32 [T, N, len(windows)].

    Row t, window w: `trailing_tstat` of the log close-to-close returns, bars
    t-w+1 .. t (0 for rows t < w and for windows without movement); clipped to
    [-clip, clip].
    """
    close = close.double()
    returns = torch.zeros_like(close)
    returns[1:] = torch.log(close[1:].clamp_min(1e-12) / close[:-1].clamp_min(1e-12))
    columns = [trailing_tstat(returns, w) for w in windows]  # the few windows, once, at construction
    table = torch.stack(columns, dim=-1) if columns else close.new_zeros((*close.shape, 0))
    return torch.nan_to_num(table, nan=0.0).clamp(-clip, clip).float()


def default_features(data: MarketData) -> tuple[str, ...]:
    """The panel features observed when ``EnvConfig.features`` is None: all of them but
    those the data cannot supply (`MarketData.unavailable_features`, close-only data)."""
    unavailable = set(data.unavailable_features)
    return tuple(name for name in data.feature_names if name not in unavailable)


def observed_feature_table(data: MarketData, config: EnvConfig, out: Tensor | None = None) -> Tensor:
    """Every feature the env observes per stock, in observation order: float32 [T, N, F].

    The panel features (`normalized_feature_table` of ``config.features``) followed by
    the ``ret_tstat_{w}`` features of ``config.return_windows``, written into `out`
    when given (float32 [T, N, F]; the env passes a view of its observation table).

    Trailing windows read the bars before the panel's first (`MarketData.lookback`: a period's
    or a fold's earlier bars), as the cost tables do: a period's row 0 equals the longer panel's
    row at the same bar (the previous close of the price-like features, and every window w the
    lookback covers); only bars the data has no past for (the very start of the data) see less.
    """
    names = config.features if config.features is not None else default_features(data)
    if out is None:
        width = len(names) + len(config.return_windows)
        out = torch.empty((data.num_bars, data.num_tickers, width), dtype=torch.float32, device=data.device)
    if names:
        normalized_feature_table(data, names, config.feature_clip, out=out[:, :, : len(names)])
    if config.return_windows:
        close, earlier = close_with_lookback(data, max(config.return_windows))
        out[:, :, len(names) :] = return_tstat_table(close, config.return_windows, config.feature_clip)[earlier:]
    return out


def close_with_lookback(data: MarketData, bars: int) -> tuple[Tensor, int]:
    """The closes [h + T, N] of `data` with the h <= `bars` bars of its lookback before them, and h
    (`MarketData.features_with_lookback`)."""
    close, earlier = data.features_with_lookback(bars, ("close",))
    return close[:, :, 0], earlier


def turbulence_table(data: MarketData, window: int) -> Tensor:
    """`turbulence_index` of `data`'s bars, float64 [T], its windows reading the bars before the
    first (`close_with_lookback`: window + 1 closes give the first bar a full window of returns)."""
    close, earlier = close_with_lookback(data, window + 1)
    return turbulence_index(close, window)[earlier:]


def turbulence_index(close: Tensor, window: int, chunk: int = 256) -> Tensor:
    """FinRL's turbulence index per bar, causal: float64 [T].

    For bar t: d_t = (r_t - mu)^T pinv(Sigma) (r_t - mu), with r the close-to-close
    returns and mu, Sigma their mean and covariance over bars t-window .. t-1. Bars
    with less history get 0. Computed in chunks over time (a loop over time only).
    """
    close = close.double()
    returns = torch.cat([torch.zeros_like(close[:1]), close[1:] / close[:-1] - 1.0], dim=0)
    num_bars = returns.shape[0]
    out = torch.zeros(num_bars, dtype=torch.float64, device=close.device)
    if num_bars <= window:
        return out
    history = returns.unfold(0, window, 1)  # [T - window + 1, N, window]; row k = bars k .. k+window-1
    for lo in range(window, num_bars, chunk):
        hi = min(num_bars, lo + chunk)
        past = history[lo - window : hi - window]  # bars t-window .. t-1 for t in [lo, hi)
        mu = past.mean(dim=-1)
        centred = past - mu.unsqueeze(-1)
        cov = centred @ centred.transpose(1, 2) / (window - 1)
        deviation = (returns[lo:hi] - mu).unsqueeze(-1)
        out[lo:hi] = (deviation.transpose(1, 2) @ torch.linalg.pinv(cov, hermitian=True) @ deviation).reshape(-1)
    return out


_TABLES: weakref.WeakKeyDictionary[MarketData, dict[tuple, Tables]] = weakref.WeakKeyDictionary()
"""The tables built so far, per panel (held weakly: they go with it) and (device, `EnvConfig`)."""

TABLES_PER_PANEL = 4
"""Tables kept per panel (the oldest goes first): a training and a validation env's, and more."""


def shared_tables(data: MarketData, key: tuple, build: Callable[[], Tables]) -> Tables:
    """The env tables of `data` under `key`, built once per process while `data` lives.

    Building them (the normalised features and return statistics of every bar, the cost terms) is
    seconds for a year of minute bars; a tournament worker's pods and a backtest's groups build the
    same ones again and again (benchmarks/RESULTS.md, "Tournament scaling"). Nothing writes into a
    table after it is built, so envs share them."""
    built = _TABLES.setdefault(data, {})
    if key not in built:
        while len(built) >= TABLES_PER_PANEL:
            built.pop(next(iter(built)))
        built[key] = build()
    return built[key]


def tables_held(data: MarketData) -> int:
    """How many envs' tables are held for panel `data` (at most `TABLES_PER_PANEL`)."""
    return len(_TABLES.get(data, {}))
