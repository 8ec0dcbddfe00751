"""FinRL's technical indicators, computed causally on wide [T, N] price frames.

Every indicator at bar t reads bars <= t only (pandas rolling and ewm look
backwards). Windows that are not yet full are computed from the bars there are
(`min_periods=1`) and the first `WARMUP_BARS` rows of each ticker are masked as not
tradable by the caller, so no value is ever back-filled from the future.

Definitions (as stockstats, which FinRL uses, defines them):
- macd: EMA(close, 12) - EMA(close, 26)
- boll_ub / boll_lb: SMA(close, 20) +/- 2 x rolling std(close, 20)
- rsi_30: Wilder's RSI over 30 bars
- cci_30: (TP - SMA(TP, 30)) / (0.015 x mean absolute deviation of TP over 30), TP = (H+L+C)/3
- dx_30: Wilder's directional movement index over 30 bars
- close_30_sma, close_60_sma: simple moving averages of the close

`trailing_tstat` is this project's own: the t-statistic of the last `window` log
returns, the env's ``ret_tstat_{w}`` observation feature and the statistic the
synthetic market's planted edge ranks (`market_envs.data.edge`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from market_envs.data.panel import INDICATOR_NAMES

WARMUP_BARS = 60  # the longest window (close_60_sma)


def _ema(x: pd.DataFrame, span: int) -> pd.DataFrame:
    return x.ewm(span=span, adjust=False, min_periods=1).mean()


def _wilder(x: pd.DataFrame, window: int) -> pd.DataFrame:
    return x.ewm(alpha=1.0 / window, adjust=False, min_periods=1).mean()


def _sma(x: pd.DataFrame, window: int) -> pd.DataFrame:
    return x.rolling(window, min_periods=1).mean()


def _rolling_mean_abs_dev(x: np.ndarray, window: int) -> np.ndarray:
    """Mean absolute deviation from the window mean over the last `window` rows.

    Vectorised over columns; chunked over time so memory stays O(chunk x N x window).
    Rows with fewer than `window` predecessors use the rows available.
    """
    t, n = x.shape
    padded = np.concatenate([np.full((window - 1, n), np.nan), x], axis=0)
    out = np.empty_like(x)
    chunk = max(1, 2_000_000 // max(1, n * window))
    for lo in range(0, t, chunk):  # loop over time chunks, not tickers
        hi = min(t, lo + chunk)
        windows = np.lib.stride_tricks.sliding_window_view(padded[lo : hi + window - 1], window, axis=0)
        mean = np.nanmean(windows, axis=-1, keepdims=True)
        out[lo:hi] = np.nanmean(np.abs(windows - mean), axis=-1)
    return out


def _rsi(close: pd.DataFrame, window: int) -> pd.DataFrame:
    change = close.diff()
    gain = _wilder(change.clip(lower=0.0), window)
    loss = _wilder((-change).clip(lower=0.0), window)
    total = gain + loss
    rsi = 100.0 * gain / total.where(total > 0)
    return rsi.fillna(50.0)


def _dx(high: pd.DataFrame, low: pd.DataFrame, close: pd.DataFrame, window: int) -> pd.DataFrame:
    up = high.diff()
    down = -low.diff()
    plus_dm = up.where((up > down) & (up > 0), 0.0)
    minus_dm = down.where((down > up) & (down > 0), 0.0)
    prev_close = close.shift(1)
    # fmax ignores the NaN of the first bar, which has no previous close
    true_range = np.fmax(np.fmax(high - low, (high - prev_close).abs()), (low - prev_close).abs())
    atr = _wilder(true_range, window)
    plus_di = 100.0 * _wilder(plus_dm, window) / atr.where(atr > 0)
    minus_di = 100.0 * _wilder(minus_dm, window) / atr.where(atr > 0)
    total = plus_di + minus_di
    dx = 100.0 * (plus_di - minus_di).abs() / total.where(total > 0)
    return _wilder(dx.fillna(0.0), window)


def compute_indicators(high: pd.DataFrame, low: pd.DataFrame, close: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """FinRL's indicator set on wide frames (rows: bars, columns: tickers).

    Returns a dict keyed by `INDICATOR_NAMES`, each a frame shaped like `close`.
    """
    sma20 = _sma(close, 20)
    std20 = close.rolling(20, min_periods=1).std(ddof=0)
    typical = (high + low + close) / 3.0
    mad = pd.DataFrame(
        _rolling_mean_abs_dev(typical.to_numpy(dtype=np.float64), 30),
        index=close.index,
        columns=close.columns,
    )
    cci = (typical - _sma(typical, 30)) / (0.015 * mad.where(mad > 0))
    out = {
        "macd": _ema(close, 12) - _ema(close, 26),
        "boll_ub": sma20 + 2.0 * std20,
        "boll_lb": sma20 - 2.0 * std20,
        "rsi_30": _rsi(close, 30),
        "cci_30": cci.fillna(0.0),
        "dx_30": _dx(high, low, close, 30),
        "close_30_sma": _sma(close, 30),
        "close_60_sma": _sma(close, 60),
    }
    assert tuple(out) == INDICATOR_NAMES
    return out


def trailing_tstat(log_returns: torch.Tensor, window: int) -> torch.Tensor:
    """``sum(r) / sqrt(sum(r^2))`` of rows t-window+1 .. t of `log_returns` [T, N], float64.

    Row 0 of `log_returns` is the unknown return of the first bar, so rows t < window
    are 0; so is a window without movement (e.g. gap-filled bars), measured against the
    cumulative sums' rounding up to row t (never a later row's: a return after t changes
    nothing at t). Cumulative sums over time. The statistic the planted rule ranks, and the
    env's ``ret_tstat`` feature.
    """
    r = log_returns.double()
    out = torch.zeros_like(r)
    if window >= r.shape[0]:
        return out
    zero = torch.zeros_like(r[:1])
    sum1 = torch.cat([zero, torch.cumsum(r, 0)])  # row j: returns of rows < j
    sum2 = torch.cat([zero, torch.cumsum(r * r, 0)])
    window_sum = sum1[window + 1 :] - sum1[1:-window]  # row t >= window: rows t-window+1 .. t
    window_sq = sum2[window + 1 :] - sum2[1:-window]
    flat = window_sq <= 1e-10 * sum2[window + 1 :]  # no movement, up to the rounding of the sums to row t
    out[window:] = torch.where(flat, 0.0, window_sum / window_sq.clamp_min(1e-300).sqrt())
    return out
