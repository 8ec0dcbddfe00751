"""The fixed backtest case behind the golden report, shared by the tests and
`tools/regen_golden_report.py`.

A seeded multi-session minute panel (built through `from_frame`, with a benchmark)
and a fixed linear policy; everything is deterministic, so the report's numbers
are too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from market_envs.data import MarketData, from_frame

GOLDEN_SEED = 20240304


def session_stamps(n_days: int, bars_per_day: int, start: str = "2024-03-04") -> pd.DatetimeIndex:
    """`bars_per_day` one-minute bars from 09:31 on each of `n_days` weekdays, exchange time."""
    days = pd.bdate_range(start, periods=n_days)
    offsets = pd.Timedelta(hours=9, minutes=31) + pd.to_timedelta(np.arange(bars_per_day), unit="min")
    stamps = [day + offset for day in days for offset in offsets]
    return pd.DatetimeIndex(stamps).tz_localize("America/New_York")


def session_panel(
    n_tickers: int = 3,
    n_days: int = 4,
    bars_per_day: int = 20,
    seed: int = 0,
    benchmark: bool = True,
    name: str = "toy",
) -> MarketData:
    """A random-walk panel over whole sessions, every bar tradable, split dates in `meta`.

    Train / validation / test are the first half, the next quarter and the rest of the days.
    """
    rng = np.random.default_rng(seed)
    stamps = session_stamps(n_days, bars_per_day)
    num_bars = len(stamps)
    close = rng.uniform(20.0, 200.0, n_tickers) * np.exp(
        np.cumsum(rng.normal(0.0, 0.004, (num_bars, n_tickers)), axis=0)
    )
    open_ = close * np.exp(rng.normal(0.0, 0.002, close.shape))
    tickers = [f"T{i}" for i in range(n_tickers)]
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, n_tickers),
            "ticker": np.tile(tickers, num_bars),
            "open": open_.ravel(),
            "high": (np.maximum(open_, close) * 1.001).ravel(),
            "low": (np.minimum(open_, close) * 0.999).ravel(),
            "close": close.ravel(),
            "volume": 1000.0,
        }
    )
    bench = pd.Series(100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.002, num_bars))), index=stamps) if benchmark else None
    data = from_frame(frame, benchmark=bench, name=name, benchmark_name="QQQ" if benchmark else None)
    days = pd.DatetimeIndex(stamps.normalize().unique())
    meta = {"train_end": str(days[n_days // 2].date()), "val_end": str(days[(3 * n_days) // 4].date())}
    return replace(data, tradable=torch.ones_like(data.tradable), meta=meta)


class LinearPolicy:
    """A fixed, seeded linear policy: actions = tanh(obs @ W), W ~ N(0, 0.1)."""

    def __init__(self, obs_dim: int, act_dim: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.randn(obs_dim, act_dim, generator=generator, dtype=torch.float32) * 0.1

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(obs @ self.weight.to(obs.device))


def golden_inputs() -> tuple[MarketData, dict[str, LinearPolicy]]:
    """The panel and policies of the golden report (3 tickers, 16 sessions of 30 bars)."""
    data = session_panel(n_tickers=3, n_days=16, bars_per_day=30, seed=GOLDEN_SEED, name="golden-synthetic")
    obs_dim = 1 + 3 * (1 + len(data.feature_names))
    policies = {"linear_a": LinearPolicy(obs_dim, 3, seed=1), "linear_b": LinearPolicy(obs_dim, 3, seed=2)}
    return data, policies


def golden_report(report: dict) -> dict:
    """The parts of report.json the golden file pins (no paths)."""
    return {
        key: report[key]
        for key in (
            "dataset",
            "benchmark",
            "tickers",
            "period",
            "config",
            "order",
            "best",
            "metrics",
            "versus_benchmark",
        )
    }
