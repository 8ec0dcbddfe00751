"""The classical factor portfolios a quant sets a strategy against: the yardsticks.

Each is a rule on past closes only, decided for every bar of a period at once (a tensor of
target weights [T, N], row t from closes up to bar t), then traded like the oracle: an
`ActionSchedule` through the same env, fills, costs and cash rules as every strategy,
rebalanced to its weights at every bar (weights mode with short selling, gross exposure 1,
the oracle's rules: `rules`; the long-only ones never sell short). Trailing windows read the bars before the period (`MarketData.lookback`),
so a yardstick is not idle at a period's start when the data set has bars before it.

- ``momentum``: cross-sectional momentum (Jegadeesh and Titman 1993): rank the stocks on
  their return from ``momentum_lookback`` bars ago to ``momentum_skip`` bars ago (the last
  ``skip`` bars left out: they reverse), long the top `FactorParams.fraction` and short the
  bottom, equal weights, 0.5 of the value a side: dollar-neutral.
- ``momentum_long``: the same ranking, long the top fraction only, fully invested.
- ``reversal``: short-term reversal (Lehmann 1990; Lo and MacKinlay 1990): rank on the
  last ``reversal_lookback`` bars' return, long the losers and short the winners,
  dollar-neutral.
- ``inverse_vol``: weights proportional to 1 / the standard deviation of each stock's last
  ``volatility_window`` log returns (the diagonal of a trailing covariance; risk parity
  without correlations), long only, fully invested.

A stock is ranked at bar t when it is tradable then and its whole window lies inside the
bars known (the period's and its lookback's); until some are, the weights are 0 (all cash).

Defaults (`FactorParams.for_interval`): daily bars take the literature's, 12-1 months
momentum (252 and 21 trading days), one-week reversal (5 days), three months of volatility
(63 days), and the top and bottom 30% a side (Fama and French's breakpoints for their factor
portfolios; with a universe of 100 a decile is 10 stocks and noisy). Minute bars have no literature of their own; their defaults are
stated as ours: one session of momentum skipping its last half hour (390 and 30 bars),
a half-hour reversal (30 bars), a week of volatility (1950 bars).

The parameters are fixed, not searched: a yardstick adds no trial to any DSR. A report that
searched a grid of them on validation would have to count each point as a trial.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from market_envs.data import MarketData
from market_envs.config import EnvConfig
from trader.backtesting.strategies import ActionSchedule
from trader.errors import ConfigError

YARDSTICKS = ("momentum", "momentum_long", "reversal", "inverse_vol")
"""The factor portfolios, in the order a report lists them (`trader.names.BASELINES` holds them too)."""

DOLLAR_NEUTRAL = ("momentum", "reversal")
"""The yardsticks whose books are dollar-neutral (long and short, 0.5 of the value a side); the
others are long-only and fully invested."""

LABELS = {
    "momentum": "Momentum {momentum_lookback}-{momentum_skip} (long-short)",
    "momentum_long": "Momentum {momentum_lookback}-{momentum_skip} (long only)",
    "reversal": "Reversal {reversal_lookback} (long-short)",
    "inverse_vol": "Inverse volatility {volatility_window}",
}


@dataclass(frozen=True)
class FactorParams:
    """The yardsticks' parameters, in bars of the panel they trade.

    :param momentum_lookback: momentum's window: the return from this many bars ago ...
    :param momentum_skip: ... to this many bars ago (0: up to the bar itself); below the lookback.
    :param reversal_lookback: reversal's window: the return of the last this many bars.
    :param volatility_window: inverse volatility's window of log returns (>= 2).
    :param fraction: the share of the ranked stocks held on each side (long top, short bottom),
        in (0, 0.5]; at least one stock a side once two are ranked.
    """

    momentum_lookback: int = 252
    momentum_skip: int = 21
    reversal_lookback: int = 5
    volatility_window: int = 63
    fraction: float = 0.3

    def __post_init__(self) -> None:
        for name in ("momentum_lookback", "reversal_lookback", "volatility_window", "momentum_skip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "momentum_skip" else 1):
                raise ConfigError(f"FactorParams.{name} must be a whole number of bars >= 1, got {value!r}")
        if self.momentum_skip >= self.momentum_lookback:
            raise ConfigError(
                f"FactorParams.momentum_skip ({self.momentum_skip}) must be below momentum_lookback "
                f"({self.momentum_lookback})"
            )
        if self.volatility_window < 2:
            raise ConfigError(f"FactorParams.volatility_window must be >= 2 bars, got {self.volatility_window}")
        if not 0.0 < self.fraction <= 0.5:
            raise ConfigError(f"FactorParams.fraction must be in (0, 0.5], got {self.fraction!r}")

    @classmethod
    def for_interval(cls, interval: str) -> FactorParams:
        """The defaults for a panel's bars: the literature's for daily bars, ours for intraday ones."""
        return DAILY if interval.upper() in ("1D", "D", "1B", "B") else MINUTE

    def window(self, name: str) -> int:
        """The bars before a decision that yardstick `name` reads."""
        return {
            "momentum": self.momentum_lookback,
            "momentum_long": self.momentum_lookback,
            "reversal": self.reversal_lookback,
            "inverse_vol": self.volatility_window,
        }[name]


DAILY = FactorParams()
"""Daily bars: 12-1 months momentum, one-week reversal, three months of volatility, 30% a side."""

MINUTE = FactorParams(momentum_lookback=390, momentum_skip=30, reversal_lookback=30, volatility_window=1950)
"""Minute bars (ours, not the literature's): a session of momentum less its last half hour, a
half-hour reversal, a week of volatility."""


def label(name: str, params: FactorParams) -> str:
    """A yardstick's row label in the report ("Momentum 252-21 (long-short)")."""
    return LABELS[name].format(**params.__dict__)


def description(name: str, params: FactorParams) -> str:
    """What the yardstick holds, in words, for the report's strategy list."""
    side = f"top and bottom {100 * params.fraction:g}%"
    return {
        "momentum": f"long the {side} by the return from {params.momentum_lookback} to {params.momentum_skip} "
        "bars ago (short the bottom), equal weights, dollar-neutral, rebalanced every bar",
        "momentum_long": f"long the top {100 * params.fraction:g}% by the return from {params.momentum_lookback} "
        f"to {params.momentum_skip} bars ago, equal weights, fully invested, rebalanced every bar",
        "reversal": f"long the bottom and short the top {100 * params.fraction:g}% by the last "
        f"{params.reversal_lookback} bars' return, equal weights, dollar-neutral, rebalanced every bar",
        "inverse_vol": f"weights proportional to 1 / the volatility of the last {params.volatility_window} "
        "log returns, fully invested, rebalanced every bar",
    }[name]


def rules(name: str) -> EnvConfig:
    """The env rules every yardstick trades under: weights mode with short selling, gross exposure
    at most 1, the oracle's (`trader.backtesting.groups.oracle_rules`). A long-only yardstick's
    weights are >= 0 and sum to 1, which the rule maps to themselves (as the long-only rule would):
    it never sells short, and all four share one env with the oracle (one group per cost multiple)."""
    if name not in YARDSTICKS:
        raise ConfigError(f"unknown yardstick {name!r}; choose from {list(YARDSTICKS)}")
    return EnvConfig(action_mode="weights", short_selling=True, features=("close",))


def yardstick_weights(name: str, panel: MarketData, params: FactorParams) -> Tensor:
    """Yardstick `name`'s target weights [T, N] (float32, on the panel's device) for `panel`'s bars:
    row t from the closes up to bar t only (those of `MarketData.lookback` included), 0 for a
    stock that is not tradable at t."""
    if name not in YARDSTICKS:
        raise ConfigError(f"unknown yardstick {name!r}; choose from {list(YARDSTICKS)}")
    features, before = panel.features_with_lookback(params.window(name))
    close = features[:, :, panel.feature_names.index("close")].double()
    rows = torch.arange(close.shape[0], device=close.device)
    tradable = torch.cat(
        [torch.zeros(before, panel.num_tickers, dtype=torch.bool, device=close.device), panel.tradable.to(close.device)]
    )
    if name == "inverse_vol":
        weights = _inverse_volatility(close, params.volatility_window, tradable)
    else:
        if name == "reversal":
            lookback, skip, sign = params.reversal_lookback, 0, -1.0
        else:
            lookback, skip, sign = params.momentum_lookback, params.momentum_skip, 1.0
        score = sign * (_shifted(close, skip) / _shifted(close, lookback) - 1.0)
        ranked = tradable & (rows >= lookback).unsqueeze(1) & torch.isfinite(score)
        weights = _top_bottom(score, ranked, params.fraction, long_only=name == "momentum_long")
    return weights[before:].float()


def _shifted(close: Tensor, bars: int) -> Tensor:
    """``close[t - bars]`` at row t (NaN before the first bar)."""
    if bars == 0:
        return close
    earlier = torch.full_like(close, float("nan"))
    earlier[bars:] = close[:-bars]
    return earlier


def _top_bottom(score: Tensor, ranked: Tensor, fraction: float, long_only: bool) -> Tensor:
    """Equal weights on the top `fraction` of the ranked stocks of each row (0.5 of the value),
    minus equal weights on the bottom (0.5); long only: the top at 1 in all. Ties by ticker order."""
    count = ranked.sum(dim=1, keepdim=True)
    held = torch.where(count >= 2, torch.clamp(torch.floor(fraction * count), min=1.0), torch.zeros_like(count))
    order = torch.argsort(torch.where(ranked, score, -torch.inf), dim=1, descending=True, stable=True)
    position = torch.empty_like(order).scatter_(
        1, order, torch.arange(score.shape[1], device=score.device).expand_as(order)
    )
    top = ranked & (position < held)
    bottom = ranked & (position >= count - held)
    size = 1.0 if long_only else 0.5
    weights = torch.where(top, size / held.clamp_min(1.0), torch.zeros_like(score))
    if not long_only:
        weights = weights - torch.where(bottom, size / held.clamp_min(1.0), torch.zeros_like(score))
    return weights


def _inverse_volatility(close: Tensor, window: int, tradable: Tensor) -> Tensor:
    """Weights proportional to 1 / the trailing standard deviation (ddof=1) of `window` log returns."""
    log_returns = torch.zeros_like(close)
    log_returns[1:] = torch.log(close[1:] / close[:-1])
    sums = torch.cumsum(torch.cat([torch.zeros_like(close[:1]), log_returns]), dim=0)
    squares = torch.cumsum(torch.cat([torch.zeros_like(close[:1]), log_returns**2]), dim=0)
    total = sums[window:] - sums[:-window]  # rows window-1 .. end: the last `window` returns
    square = squares[window:] - squares[:-window]
    variance = torch.full_like(close, float("nan"))
    variance[window - 1 :] = (square - total**2 / window) / (window - 1)
    rows = torch.arange(close.shape[0], device=close.device).unsqueeze(1)
    usable = tradable & (rows >= window) & torch.isfinite(variance) & (variance > 0)
    inverse = torch.where(usable, 1.0 / variance.clamp_min(1e-300).sqrt(), torch.zeros_like(close))
    return inverse / inverse.sum(dim=1, keepdim=True).clamp_min(1e-300)


def applies(name: str, panel: MarketData, params: FactorParams | None = None) -> bool:
    """Whether yardstick `name` is in a backtest by default: its window fits in the bars known before
    the period (`MarketData.lookback`) and half the period's, so it trades at least half the period
    (a short panel, a test fixture's, would leave it idle)."""
    chosen = params if params is not None else FactorParams.for_interval(panel.interval)
    before = 0 if panel.lookback is None else panel.lookback.shape[0]
    return chosen.window(name) <= before + panel.num_bars // 2


def yardstick_schedule(name: str, panel: MarketData, params: FactorParams | None = None) -> ActionSchedule:
    """Yardstick `name` over `panel`'s bars as an `ActionSchedule` (the weights as actions)."""
    chosen = params if params is not None else FactorParams.for_interval(panel.interval)
    return ActionSchedule(yardstick_weights(name, panel, chosen))


__all__ = [
    "DAILY",
    "DOLLAR_NEUTRAL",
    "MINUTE",
    "YARDSTICKS",
    "FactorParams",
    "description",
    "label",
    "rules",
    "yardstick_schedule",
    "yardstick_weights",
]
