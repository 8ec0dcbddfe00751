"""FinRL-style single trading environments, the baseline of `env_throughput.py`.

`PandasFinRLEnv` follows the step logic FinRL documents for its `StockTradingEnv`
(finrl/meta/env_stock_trading/env_stocktrading.py), written here from that
description, not copied:

- state = [cash] + closes [N] + holdings [N] + indicators [N x K], as a Python list;
- actions in [-1, 1]^N times ``hmax`` (100), cast to int;
- stocks to sell first (most negative first), then stocks to buy (largest first),
  each one in a Python loop; a buy takes at most ``cash // (price x (1 + cost))``
  shares; costs 0.1% each way; **the fill price is the close the agent just saw**;
- ``day += 1`` and ``data = df.loc[day, :]``: one DataFrame row lookup per step;
- reward = change of total asset x reward scaling; memories of assets, rewards,
  actions and dates appended every step, as FinRL does.

`NumpyFinRLEnv` is its twin with the same rules and loops, the DataFrame replaced by
[T, N] numpy arrays, so the two differ only in how a bar is looked up.

`benchmark_panel` builds the random-walk panel both benchmarks share.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from market_envs.data import MarketData, from_frame

FINRL_INDICATORS = ("macd", "boll_ub", "boll_lb", "rsi_30", "cci_30", "dx_30", "close_30_sma", "close_60_sma")


def benchmark_panel(n_tickers: int, n_bars: int, seed: int = 0) -> MarketData:
    """A random-walk minute panel of `n_tickers` stocks and `n_bars` bars (via `from_frame`)."""
    rng = np.random.default_rng(seed)
    stamps = pd.date_range("2024-01-02 09:30", periods=n_bars, freq="1min", tz="America/New_York")
    close = rng.uniform(20, 300, n_tickers) * np.exp(np.cumsum(rng.normal(0, 0.002, (n_bars, n_tickers)), axis=0))
    open_ = close * np.exp(rng.normal(0, 0.001, close.shape))
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, n_tickers),
            "ticker": np.tile([f"S{i:03d}" for i in range(n_tickers)], n_bars),
            "open": open_.ravel(),
            "high": (np.maximum(open_, close) * 1.001).ravel(),
            "low": (np.minimum(open_, close) * 0.999).ravel(),
            "close": close.ravel(),
            "volume": rng.integers(100, 10_000, close.size).astype(float),
        }
    )
    data = from_frame(frame, name=f"bench-{n_tickers}x{n_bars}")
    # the statistics the env would fit on the panel itself anyway, attached so that it does not
    # warn of look-ahead: a speed benchmark has no validation period to look into
    return data.with_normalization(*data.fit_normalization())


def finrl_frame(data: MarketData) -> pd.DataFrame:
    """The panel as FinRL's long frame: index = day number, one row per ticker."""
    frame = data.to_frame().rename(columns={"timestamp": "date", "ticker": "tic"})
    frame.index = np.repeat(np.arange(data.num_bars), data.num_tickers)
    return frame


class PandasFinRLEnv:
    """FinRL's stock trading step on a DataFrame (see the module docstring)."""

    def __init__(
        self,
        df: pd.DataFrame,
        stock_dim: int,
        hmax: int = 100,
        initial_amount: float = 1_000_000.0,
        buy_cost_pct: float = 0.001,
        sell_cost_pct: float = 0.001,
        reward_scaling: float = 1e-4,
        tech_indicator_list: tuple[str, ...] = FINRL_INDICATORS,
    ) -> None:
        self.df = df
        self.stock_dim = stock_dim
        self.hmax = hmax
        self.initial_amount = initial_amount
        self.buy_cost_pct = buy_cost_pct
        self.sell_cost_pct = sell_cost_pct
        self.reward_scaling = reward_scaling
        self.tech_indicator_list = list(tech_indicator_list)
        self.last_day = len(df.index.unique()) - 1
        self.reset()

    def reset(self) -> np.ndarray:
        self.day = 0
        self.data = self.df.loc[self.day, :]
        self.state = (
            [self.initial_amount]
            + self.data.close.values.tolist()
            + [0] * self.stock_dim
            + sum((self.data[tech].values.tolist() for tech in self.tech_indicator_list), [])
        )
        self.cost = 0.0
        self.trades = 0
        self.asset_memory = [self.initial_amount]
        self.rewards_memory: list[float] = []
        self.actions_memory: list[np.ndarray] = []
        self.date_memory = [self.data.date.unique()[0]]
        return np.array(self.state, dtype=np.float32)

    def _total_asset(self) -> float:
        n = self.stock_dim
        return self.state[0] + sum(np.array(self.state[1 : n + 1]) * np.array(self.state[n + 1 : 2 * n + 1]))

    def _sell_stock(self, index: int, action: int) -> int:
        n = self.stock_dim
        price, held = self.state[index + 1], self.state[index + n + 1]
        if price <= 0 or held <= 0:
            return 0
        shares = min(abs(action), held)
        self.state[0] += price * shares * (1 - self.sell_cost_pct)
        self.state[index + n + 1] -= shares
        self.cost += price * shares * self.sell_cost_pct
        self.trades += 1
        return shares

    def _buy_stock(self, index: int, action: int) -> int:
        price = self.state[index + 1]
        if price <= 0:
            return 0
        available = self.state[0] // (price * (1 + self.buy_cost_pct))
        shares = min(available, action)
        self.state[0] -= price * shares * (1 + self.buy_cost_pct)
        self.state[index + self.stock_dim + 1] += shares
        self.cost += price * shares * self.buy_cost_pct
        self.trades += 1
        return shares

    def _next_bar(self) -> None:
        """Look up bar `day` (one DataFrame row lookup) and rebuild the state list."""
        n = self.stock_dim
        self.data = self.df.loc[self.day, :]
        self.state = (
            [self.state[0]]
            + self.data.close.values.tolist()
            + list(self.state[n + 1 : 2 * n + 1])
            + sum((self.data[tech].values.tolist() for tech in self.tech_indicator_list), [])
        )
        self.date_memory.append(self.data.date.unique()[0])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        actions = (actions * self.hmax).astype(int)
        begin_total_asset = self._total_asset()
        order = np.argsort(actions)
        sell_index = order[: np.where(actions < 0)[0].shape[0]]
        buy_index = order[::-1][: np.where(actions > 0)[0].shape[0]]
        for index in sell_index:
            actions[index] = self._sell_stock(index, actions[index]) * (-1)
        for index in buy_index:
            actions[index] = self._buy_stock(index, actions[index])
        self.actions_memory.append(actions)

        self.day += 1
        self._next_bar()
        end_total_asset = self._total_asset()
        self.asset_memory.append(end_total_asset)
        reward = (end_total_asset - begin_total_asset) * self.reward_scaling
        self.rewards_memory.append(reward)
        terminal = self.day >= self.last_day
        return np.array(self.state, dtype=np.float32), reward, terminal, False, {}


class NumpyFinRLEnv(PandasFinRLEnv):
    """The same rules and loops, bars looked up in [T, N] numpy arrays."""

    def __init__(self, df: pd.DataFrame, stock_dim: int, **kwargs) -> None:
        days = len(df.index.unique())
        self.close_table = df["close"].to_numpy(np.float64).reshape(days, stock_dim)
        techs = kwargs.get("tech_indicator_list", FINRL_INDICATORS)
        self.tech_table = np.stack(
            [df[t].to_numpy(np.float64).reshape(days, stock_dim) for t in techs], axis=1
        ).reshape(days, -1)  # per bar: all stocks' first indicator, then the second, ...
        self.dates = df["date"].to_numpy()[::stock_dim]
        super().__init__(df, stock_dim, **kwargs)

    def reset(self) -> np.ndarray:
        self.day = 0
        self.state = (
            [self.initial_amount] + self.close_table[0].tolist() + [0] * self.stock_dim + self.tech_table[0].tolist()
        )
        self.cost = 0.0
        self.trades = 0
        self.asset_memory = [self.initial_amount]
        self.rewards_memory = []
        self.actions_memory = []
        self.date_memory = [self.dates[0]]
        return np.array(self.state, dtype=np.float32)

    def _next_bar(self) -> None:
        """Look up bar `day` in the arrays and rebuild the state list."""
        n = self.stock_dim
        self.state = (
            [self.state[0]]
            + self.close_table[self.day].tolist()
            + list(self.state[n + 1 : 2 * n + 1])
            + self.tech_table[self.day].tolist()
        )
        self.date_memory.append(self.dates[self.day])
