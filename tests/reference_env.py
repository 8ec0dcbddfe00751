"""A plain scalar reference of the market env: one sub-environment in explicit Python.

Written for clarity, not speed: Python floats and loops over stocks, the rules of
`market_envs.env` spelled out line by line. The tests step it beside the batched env
and compare value, cash, holdings, reward and observation.
"""

from __future__ import annotations

import math

import numpy as np

from market_envs.data import MarketData
from market_envs.env import PRICE_LIKE_FEATURES, EnvConfig


class ReferenceEnv:
    """One trading account over the panel, from bar `start` until bar `end`."""

    def __init__(self, data: MarketData, config: EnvConfig) -> None:
        self.config = config
        self.open = data.open.double().cpu().numpy()
        self.close = data.close.double().cpu().numpy()
        self.tradable = data.tradable.cpu().numpy()
        self.features = data.features.double().cpu().numpy()
        self.feature_names = list(data.feature_names)
        self.observed = list(config.features or data.feature_names)
        if data.feature_mean is not None:
            self.mean = data.feature_mean.double().cpu().numpy()
            self.std = data.feature_std.double().cpu().numpy()
        else:
            mean, std = data.fit_normalization()
            self.mean, self.std = mean.double().cpu().numpy(), std.double().cpu().numpy()
        self.n = self.close.shape[1]
        self.turbulent = self._turbulence_flags()

    # ---------------------------------------------------------------- episode
    def reset(self, start: int, end: int) -> list[float]:
        self.t = start
        self.end = end
        self.cash = float(self.config.initial_cash)
        self.holdings = [0.0] * self.n
        self.value = self.cash
        return self.observation()

    def portfolio_value(self, bar: int) -> float:
        value = self.cash
        for i in range(self.n):
            value += self.holdings[i] * self.close[bar, i]
        return value

    def step(self, action: list[float]) -> tuple[list[float], float, bool, bool, dict]:
        cfg = self.config
        bar = self.t + 1  # orders fill at the next bar's open
        price = [float(p) for p in self.open[bar]]
        action = [min(1.0, max(-1.0, float(a))) for a in action]
        sells, buys = self.requested_orders(action, price)
        if self.turbulent[self.t]:
            sells = [max(h, 0.0) for h in self.holdings]
            buys = [0.0] * self.n
        for i in range(self.n):
            if not self.tradable[bar, i]:
                sells[i] = 0.0
                buys[i] = 0.0

        # sells settle first
        sold_value = 0.0
        for i in range(self.n):
            sold_value += sells[i] * price[i]
            self.holdings[i] -= sells[i]
        sell_costs = sold_value * cfg.sell_cost
        self.cash += sold_value - sell_costs

        # then buys, all scaled down by one factor when the cash is short
        needed = sum(buys[i] * price[i] for i in range(self.n)) * (1.0 + cfg.buy_cost)
        if needed > self.cash:
            factor = self.cash / needed
            buys = [b * factor for b in buys]
            if cfg.action_mode == "shares":
                buys = [math.floor(b) for b in buys]
        bought_value = 0.0
        for i in range(self.n):
            bought_value += buys[i] * price[i]
            self.holdings[i] += buys[i]
        buy_costs = bought_value * cfg.buy_cost
        self.cash = max(0.0, self.cash - bought_value - buy_costs)

        previous_value = self.value
        self.t = bar
        self.value = self.portfolio_value(bar)
        reward = (self.value - previous_value) * cfg.reward_scale
        terminated = self.value <= 0.0
        truncated = (not terminated) and self.t >= self.end
        info = {
            "value": self.value,
            "cash": self.cash,
            "costs": sell_costs + buy_costs,
            "traded": sold_value + bought_value,
            "turnover": (sold_value + bought_value) / max(abs(previous_value), 1e-9),
        }
        return self.observation(), reward, terminated, truncated, info

    def requested_orders(self, action: list[float], price: list[float]) -> tuple[list[float], list[float]]:
        """Sells and buys in shares (>= 0) that the action asks for."""
        cfg = self.config
        if cfg.action_mode == "shares":
            delta = [float(math.trunc(a * cfg.max_shares)) for a in action]
        else:
            if cfg.short_selling:
                gross = sum(abs(a) for a in action)
                weights = [a / max(1.0, gross) for a in action]
            else:
                longs = [min(1.0, max(0.0, a)) for a in action]
                weights = [w / max(1.0, sum(longs)) for w in longs]
            value_at_fill = self.cash + sum(self.holdings[i] * price[i] for i in range(self.n))
            delta = [weights[i] * value_at_fill / price[i] - self.holdings[i] for i in range(self.n)]
        sells, buys = [], []
        for i in range(self.n):
            sell = max(0.0, -delta[i])
            if not cfg.short_selling:
                sell = min(sell, max(0.0, self.holdings[i]))
            elif cfg.action_mode == "shares":
                sell = max(0.0, min(sell, self.holdings[i] + cfg.max_shares))
            sells.append(sell)
            buys.append(max(0.0, delta[i]))
        return sells, buys

    # ---------------------------------------------------------------- observation
    def observation(self) -> list[float]:
        value = self.value if abs(self.value) > 1e-9 else 1.0
        shares = [self.cash / value]
        shares += [self.holdings[i] * self.close[self.t, i] / value for i in range(self.n)]
        low, high = (-self.config.feature_clip, self.config.feature_clip) if self.config.short_selling else (0.0, 1.0)
        obs = [min(high, max(low, s)) for s in shares]
        for i in range(self.n):
            for name in self.observed:
                obs.append(self.feature(self.t, i, name))
        return obs

    def feature(self, bar: int, stock: int, name: str) -> float:
        index = self.feature_names.index(name)
        x = self.features[bar, stock, index]
        if name in PRICE_LIKE_FEATURES:
            previous_close = self.close[max(bar - 1, 0), stock]
            value = 100.0 * math.log(max(x, 1e-12) / previous_close)
        elif name == "volume":
            value = math.log1p(max(x, 0.0)) - math.log1p(max(self.mean[index], 0.0))
        else:
            value = (x - self.mean[index]) / self.std[index]
        clip = self.config.feature_clip
        return min(clip, max(-clip, value))

    def _turbulence_flags(self) -> list[bool]:
        """FinRL's turbulence index per bar against the threshold (bars before `window`: 0)."""
        cfg = self.config
        flags = [False] * len(self.close)
        if cfg.turbulence_threshold is None:
            return flags
        window = cfg.turbulence_window
        returns = np.zeros_like(self.close)
        returns[1:] = self.close[1:] / self.close[:-1] - 1.0
        for t in range(window, len(self.close)):
            past = returns[t - window : t]
            mu = past.mean(axis=0)
            cov = np.cov(past, rowvar=False, ddof=1).reshape(self.n, self.n)
            deviation = returns[t] - mu
            flags[t] = float(deviation @ np.linalg.pinv(cov, hermitian=True) @ deviation) > cfg.turbulence_threshold
        return flags
