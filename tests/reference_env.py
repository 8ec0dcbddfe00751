"""A plain scalar reference of the market env: one sub-environment in explicit Python.

Written for clarity, not speed: Python floats and loops over stocks, the rules of
`market_envs.env` and `market_envs.costs` spelled out line by line (the cost tables
too, by explicit loops over past bars). The tests step it beside the batched env and
compare value, cash, holdings, reward, every cost term and observation.
"""

from __future__ import annotations

import math

import numpy as np

from market_envs.data import MarketData
from market_envs.config import PRICE_LIKE_FEATURES, EnvConfig


class ReferenceEnv:
    """One trading account over the panel, from bar `start` until bar `end`."""

    def __init__(self, data: MarketData, config: EnvConfig) -> None:
        self.config = config
        # The bars before the panel's first (`MarketData.lookback`) come first, so that every
        # trailing window (features, turbulence, cost estimates) reads them; bars are counted from
        # the first of them, and episodes start `offset` bars in.
        earlier = data.lookback.double().cpu().numpy() if data.lookback is not None else None
        self.offset = 0 if earlier is None else len(earlier)
        features = data.features.double().cpu().numpy()
        self.features = features if earlier is None else np.concatenate([earlier, features])
        self.feature_names = list(data.feature_names)
        self.open = self.features[:, :, self.feature_names.index("open")]
        self.close = self.features[:, :, self.feature_names.index("close")]
        before = np.zeros((self.offset, data.num_tickers), dtype=bool)  # never a fill bar
        self.tradable = np.concatenate([before, data.tradable.cpu().numpy()])
        self.reducible = None if data.reducible is None else np.concatenate([before, data.reducible.cpu().numpy()])
        self.observed = list(config.features or data.feature_names)
        if data.feature_mean is not None:
            self.mean = data.feature_mean.double().cpu().numpy()
            self.std = data.feature_std.double().cpu().numpy()
        else:
            mean, std = data.fit_normalization()
            self.mean, self.std = mean.double().cpu().numpy(), std.double().cpu().numpy()
        self.n = self.close.shape[1]
        self.turbulent = self._turbulence_flags()
        self.volume = self.features[:, :, self.feature_names.index("volume")]
        self.high = self.features[:, :, self.feature_names.index("high")]
        self.low = self.features[:, :, self.feature_names.index("low")]
        per_date: dict = {}
        for stamp in data.timestamps:
            per_date[stamp.date()] = per_date.get(stamp.date(), 0) + 1
        self.bars_per_day = max(1, int(np.median(list(per_date.values()))))

    # ---------------------------------------------------------------- episode
    def reset(self, start: int, end: int) -> list[float]:
        """Start at the panel's bar `start`, truncate at its bar `end`."""
        self.t = start + self.offset
        self.end = end + self.offset
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
        cfg, costs = self.config, self.config.costs
        bar = self.t + 1  # orders fill at the next bar's open
        price = [float(p) for p in self.open[bar]]
        action = [min(1.0, max(-1.0, float(a))) for a in action]
        sells, buys = self.requested_orders(action, price)
        if self.turbulent[self.t]:
            sells = [max(h, 0.0) for h in self.holdings]
            buys = [0.0] * self.n
        for i in range(self.n):
            if self.tradable[bar, i]:
                continue
            if self.reducible is not None and self.reducible[bar, i]:  # out of the index: only toward zero
                sells[i] = min(sells[i], max(self.holdings[i], 0.0))
                buys[i] = min(buys[i], max(-self.holdings[i], 0.0))
            else:
                sells[i] = 0.0
                buys[i] = 0.0
        # the fill takes one signed order per stock: its sale max(-order, 0), its purchase
        # max(order, 0), and none where the order is NaN (max(0.0, nan) is 0.0)
        orders = [buys[i] - sells[i] for i in range(self.n)]
        sells = [max(0.0, -order) for order in orders]
        buys = [max(0.0, order) for order in orders]

        # the participation cap: at most a fraction of the fill bar's volume fills
        ordered = sum((sells[i] + buys[i]) * price[i] for i in range(self.n))
        unfilled_value = unfilled_shares = 0.0
        if costs.participation is not None:
            for i in range(self.n):
                cap = costs.participation * max(self.volume[bar, i], 0.0)
                if cfg.action_mode == "shares":
                    cap = math.floor(cap)
                cut = (sells[i] - min(sells[i], cap)) + (buys[i] - min(buys[i], cap))
                sells[i], buys[i] = min(sells[i], cap), min(buys[i], cap)
                unfilled_shares += cut
                unfilled_value += cut * price[i]

        # sells settle first: proceeds less commission, half-spread and impact
        commission = spread_paid = impact_paid = 0.0
        sold_value = 0.0
        for i in range(self.n):
            value = sells[i] * price[i]
            spread = value * self.half_spread(bar, i)
            impact = value * self.impact_rate(bar, i, sells[i])
            fee = min(self.commission(sells[i], value, cfg.sell_cost), value - spread - impact)
            sold_value += value
            commission += fee
            spread_paid += spread
            impact_paid += impact
            self.cash += value - fee - spread - impact
            self.holdings[i] -= sells[i]

        # then buys; when their whole bill exceeds the cash, all shrink by one factor
        needed = linear = minimum = 0.0
        for i in range(self.n):
            value = buys[i] * price[i]
            slippage = self.half_spread(bar, i) + self.impact_rate(bar, i, buys[i])
            needed += value * (1.0 + slippage) + self.commission(buys[i], value, cfg.buy_cost)
            linear += value * (1.0 + cfg.buy_cost + slippage) + buys[i] * costs.commission_per_share
            if buys[i] > 0:
                minimum += costs.commission_min
        if needed > self.cash:
            factor = max(self.cash - minimum, 0.0) / linear
            buys = [b * factor for b in buys]
            if cfg.action_mode == "shares":
                buys = [math.floor(b) for b in buys]
        bought_value = spent = 0.0
        for i in range(self.n):
            value = buys[i] * price[i]
            fee = self.commission(buys[i], value, cfg.buy_cost)
            spread = value * self.half_spread(bar, i)
            impact = value * self.impact_rate(bar, i, buys[i])
            bought_value += value
            commission += fee
            spread_paid += spread
            impact_paid += impact
            spent += value + fee + spread + impact
            self.holdings[i] += buys[i]
        # the bill fits the cash up to rounding; a debt owed before (a borrow fee) stays
        self.cash = max(self.cash - spent, min(self.cash, 0.0))

        # the borrow fee of the bar on the short notional at its close
        borrow = 0.0
        for i in range(self.n):
            if self.holdings[i] < 0:
                borrow += -self.holdings[i] * self.close[bar, i] * costs.borrow_rate / (252 * self.bars_per_day)
        self.cash -= borrow

        previous_value = self.value
        self.t = bar
        self.value = self.portfolio_value(bar)
        reward = (self.value - previous_value) * cfg.reward_scale
        if cfg.reward == "aim":  # the aim's return over the bar, at the value at the fill, less the costs
            aim, value_at_fill = self.aim_and_value
            earned = value_at_fill * sum(aim[i] * (self.close[bar, i] / price[i] - 1.0) for i in range(self.n))
            reward = (earned - (commission + spread_paid + impact_paid + borrow)) * cfg.reward_scale
        terminated = self.value <= 0.0
        truncated = (not terminated) and self.t >= self.end
        info = {
            "value": self.value,
            "cash": self.cash,
            "costs": commission + spread_paid + impact_paid + borrow,
            "cost_commission": commission,
            "cost_spread": spread_paid,
            "cost_impact": impact_paid,
            "cost_borrow": borrow,
            "ordered_value": ordered,
            "unfilled_value": unfilled_value,
            "unfilled_shares": unfilled_shares,
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
            # the config's trade rate; with rate_action each stock's own, ((1 + r) / 2)^2 of its rate action
            if cfg.rate_action:
                action, rates = action[: self.n], [((1.0 + r) / 2.0) ** 2 for r in action[self.n :]]
            else:
                rates = [cfg.trade_rate] * self.n
            # "linear": an action of 1 asks for linear_scale x max_leverage / N of the value in one stock
            scale = cfg.linear_scale * cfg.max_leverage / self.n if cfg.weights_map == "linear" else 1.0
            if cfg.short_selling:
                if cfg.market_neutral:
                    mean = sum(action) / len(action)
                    action = [a - mean for a in action]
                action = [a * scale for a in action]
                gross = sum(abs(a) for a in action)
                weights = [a / max(1.0, gross / cfg.max_leverage) for a in action]
            else:
                longs = [min(1.0, max(0.0, a)) * scale for a in action]
                weights = [w / max(1.0, sum(longs)) for w in longs]
            value_at_fill = self.cash + sum(self.holdings[i] * price[i] for i in range(self.n))
            self.aim_and_value = (weights, value_at_fill)
            if cfg.trade_rate == 1.0 and cfg.no_trade_band == 0.0 and not cfg.rate_action:  # all the way
                delta = [weights[i] * value_at_fill / price[i] - self.holdings[i] for i in range(self.n)]
            else:
                # the aim's value less the book's, through the no-trade band, times the trade rate
                gaps = [weights[i] * value_at_fill - self.holdings[i] * price[i] for i in range(self.n)]
                room = abs(value_at_fill) * cfg.no_trade_band
                if cfg.band_scope == "book":
                    distance = sum(abs(g) for g in gaps)
                    keep = max(0.0, 1.0 - room / distance) if distance > 0 else 0.0
                    gaps = [g * keep for g in gaps]
                else:
                    gaps = [math.copysign(max(abs(g) - room, 0.0), g) for g in gaps]
                delta = [rates[i] * gaps[i] / price[i] for i in range(self.n)]
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

    # ---------------------------------------------------------------- costs
    def commission(self, shares: float, value: float, rate: float) -> float:
        """Commission of one order: rate x value + fee x shares, within [minimum, cap]; 0 if nothing fills."""
        costs = self.config.costs
        if shares <= 0:
            return 0.0
        fee = max(value * rate + shares * costs.commission_per_share, costs.commission_min)
        if costs.commission_max_rate is not None:
            fee = min(fee, value * costs.commission_max_rate)
        return fee

    def half_spread(self, bar: int, stock: int) -> float:
        """The half-spread (a fraction of the price) of fills at `bar`."""
        costs = self.config.costs
        # the env keeps every half-spread in float32, as the prices (a fixed one too: 5 bp is 0.000500000024)
        if costs.spread_model == "fixed":
            return float(np.float32(costs.spread_bps * 1e-4))
        if costs.spread_model == "per_ticker":
            return float(np.float32(costs.spread_bps_per_ticker[stock] * 1e-4))
        # Abdi & Ranaldo (2017) over the pairs (j, j + 1) of bars completed before `bar`
        products = []
        for j in range(max(bar - costs.spread_window, 1) - 1, bar - 1):
            c = math.log(self.close[j, stock])
            mid = 0.5 * (math.log(self.high[j, stock]) + math.log(self.low[j, stock]))
            mid_next = 0.5 * (math.log(self.high[j + 1, stock]) + math.log(self.low[j + 1, stock]))
            products.append(4.0 * (c - mid) * (c - mid_next))
        if not products:
            return 0.0
        half_spread = min(1.0, costs.spread_scale * 0.5 * math.sqrt(max(sum(products) / len(products), 0.0)))
        return float(np.float32(half_spread))  # the env keeps its estimates in float32, as the prices

    def impact_rate(self, bar: int, stock: int, shares: float) -> float:
        """Square-root impact (a fraction of the price) of an order of `shares` filled at `bar`."""
        costs = self.config.costs
        if costs.impact_eta == 0:
            return 0.0
        window = costs.impact_window_days * self.bars_per_day
        squared, volumes = [], []
        for r in range(max(bar - window, 0), bar):  # the bars before `bar`
            volumes.append(max(self.volume[r, stock], 0.0))
            if r >= 1:
                squared.append(math.log(self.close[r, stock] / self.close[r - 1, stock]) ** 2)
        mean_volume = sum(volumes) / len(volumes) if volumes else 0.0
        if not squared or mean_volume <= 0:
            return 0.0
        sigma_bar = math.sqrt(sum(squared) / len(squared))
        # eta x sigma_day x sqrt(q / ADV) with sigma_day = sigma_bar sqrt(B), ADV = mean volume x B;
        # the env keeps eta x sigma_day / sqrt(ADV) per bar and stock in float32, as the prices
        sigma_day = sigma_bar * math.sqrt(self.bars_per_day)
        adv = mean_volume * self.bars_per_day
        per_root_share = float(np.float32(costs.impact_eta * sigma_day / math.sqrt(adv)))
        impact = per_root_share * math.sqrt(shares)
        return min(impact, 1.0 - self.half_spread(bar, stock))

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
            for window in self.config.return_windows:
                obs.append(self.return_tstat(self.t, i, window))
        return obs

    def return_tstat(self, bar: int, stock: int, window: int) -> float:
        """``ret_tstat_{window}``: sum(r) / sqrt(sum(r^2)) of the log returns of bars
        bar-window+1 .. bar (0 before the data holds that many returns, or without movement)."""
        if bar < window:
            return 0.0
        returns = [math.log(self.close[j, stock] / self.close[j - 1, stock]) for j in range(bar - window + 1, bar + 1)]
        squares = sum(r * r for r in returns)
        if squares == 0.0:
            return 0.0
        clip = self.config.feature_clip
        return min(clip, max(-clip, sum(returns) / math.sqrt(squares)))

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
