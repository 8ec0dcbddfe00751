"""The simulated broker: fills as the backtest fills, through the env's own step.

`EnvFiller` is the backtest's fill of one decision from one book: a
`StockTradingVecEnv` of one sub-environment over the data, reset at the decision bar
with the book (`trader.decision.reset_at`), stepped once with the policy's action. The
fill is therefore the env's, rule for rule (the next bar's open, the tradable mask, the
turbulence guard, the participation cap, sells before buys, the cash limit and every
cost term), and no rule of it is written a second time here. The paper loop uses it
for the backtest's expectation of every live bar, and `SimulatedBroker` uses it to fill.

`SimulatedBroker` is the broker of ``--broker replay`` (a historical period replayed
as if live, its clock jumping from one event to the next) and of ``--dry-run`` (the
broker's real clock and data, no order sent). It fills a bar's orders when it holds
the bar they fill at: each order up to what the env's step filled of that ticker. When
the loop sent the env's own orders (no risk limit cut them) the simulated book is the
env's to the last bit, which is how a replay ends with the backtest's record to the
cent. When a risk limit cut an order below the env's fill, the cut order fills at the
same open and the bar's costs are the env's for the uncut orders (an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from trader.decision import reset_at
from podracer.paper.hours import MarketHours
from podracer.paper.orders import Book, Clock, Intent, OrderReport


@dataclass(frozen=True)
class Fill:
    """The env's fill of one decision: the book after it (marked at the fill bar's close)."""

    holdings: np.ndarray  # float64 [N]
    cash: float
    costs: float  # everything the step charged (commission, spread, impact, borrow)
    value: float  # cash + holdings x the fill bar's close
    open: np.ndarray  # the fill price per ticker (the fill bar's open)
    close: np.ndarray  # the fill bar's close


class EnvFiller:
    """The backtest's fill of decisions on one panel, under the backtest's rules.

    :param panel: the bars (a replayed period, or the data fetched through the fill bar).
    :param rules: the env rules a backtest of the strategy trades under (cash and costs
        included: `trader.backtesting.config.BacktestConfig.env_config`).
    """

    def __init__(self, panel: Any, rules: EnvConfig, device: str = "cpu") -> None:
        self.panel, self.rules, self.device = panel, rules, device
        self._envs: dict[bool, StockTradingVecEnv] = {}

    def env(self, flatten: bool = False) -> StockTradingVecEnv:
        """The env that fills a decision (``flatten``: an env in weights mode, whose zero action
        closes every position, whatever the strategy's action mode)."""
        if flatten not in self._envs:
            rules = replace(self.rules, action_mode="weights") if flatten else self.rules
            self._envs[flatten] = StockTradingVecEnv(self.panel, num_envs=1, device=self.device, config=rules)
        return self._envs[flatten]

    def bar_of(self, stamp: pd.Timestamp) -> int | None:
        """The panel's index of bar ``stamp`` (None when the panel does not hold it)."""
        index = self.panel.timestamps.get_indexer([pd.Timestamp(stamp)])[0]
        return None if index < 0 else int(index)

    def can_fill(self, stamp: pd.Timestamp) -> bool:
        """The panel holds the decision bar and the bar after it."""
        t = self.bar_of(stamp)
        return t is not None and t + 1 < self.panel.num_bars

    def fill(self, stamp: pd.Timestamp, cash: float, held: np.ndarray, action: np.ndarray | None) -> Fill:
        """Fill the decision ``action`` (None: flatten) taken at bar ``stamp`` from (cash, held)."""
        t = self.bar_of(stamp)
        env = self.env(flatten=action is None)
        reset_at(env, t, cash, held)
        if action is None:
            actions = torch.zeros((1, env.act_dim), dtype=torch.float32, device=env.device)
            actions[:, env.num_stocks :] = 1.0  # a policy's rates (EnvConfig.rate_action): all the way to cash
        else:
            actions = torch.as_tensor(np.asarray(action), dtype=torch.float32, device=env.device).reshape(1, -1)
        _, _, _, _, info = env.step(actions)
        return Fill(
            holdings=info["holdings"][0].double().cpu().numpy().copy(),
            cash=float(info["cash"][0]),
            costs=float(info["costs"][0]),
            value=float(info["value"][0]),
            open=self.panel.open[t + 1].double().cpu().numpy(),
            close=self.panel.close[t + 1].double().cpu().numpy(),
        )


class SimulatedBroker:
    """A broker whose fills are the backtest's (`EnvFiller`); see the module docstring.

    :param panel: the bars it fills on; a dry run hands it each newly fetched panel (`observe`).
    :param rules: the backtest's env rules for the strategy.
    :param tickers: the run's tickers, in the panel's order.
    :param cash: the starting cash; ``holdings``: the starting shares per ticker.
    :param now: the clock's start; ``clock``: a callable giving the real broker's clock (a
        dry run), or None to keep a simulated clock that `wait_until` moves (a replay).
    """

    def __init__(
        self,
        panel: Any,
        rules: EnvConfig,
        tickers: tuple[str, ...],
        cash: float,
        holdings: np.ndarray,
        hours: MarketHours,
        now: pd.Timestamp | None = None,
        clock: Any = None,
        wait: Any = None,
        device: str = "cpu",
    ) -> None:
        self.filler = EnvFiller(panel, rules, device)
        self.tickers = tuple(tickers)
        self.cash = float(cash)
        self.holdings = np.asarray(holdings, dtype=np.float64).copy()
        self.hours = hours
        self.now = now
        self._clock, self._wait = clock, wait
        self._pending: list[tuple[Intent, list[OrderReport]]] = []
        self._charges = 0.0
        self.fills = 0

    # ---------------------------------------------------------------- the clock
    def clock(self) -> Clock:
        if self._clock is not None:
            return self._clock()
        return Clock(self.now, self.hours.is_open(self.now), self.hours.next_open(self.now), None)

    def wait_until(self, when: pd.Timestamp, interrupted: Any = None) -> bool:
        if self._wait is not None:
            return self._wait(when, interrupted)
        if interrupted is not None and interrupted():
            return False
        self.now = max(self.now, pd.Timestamp(when))  # a replay does not sleep: it is faster than real time
        return True

    # ---------------------------------------------------------------- the account
    def book(self) -> Book:
        positions = {t: float(q) for t, q in zip(self.tickers, self.holdings) if q != 0}
        charges, self._charges = self._charges, 0.0
        return Book(self.cash, positions, charges=charges)

    def execute(self, intent: Intent, within_cash: Any = None, send: bool = True) -> list[OrderReport]:
        """Take the orders; fill them now when the panel holds their fill bar, else at `observe`.

        The cash limit is the env's own (the step cuts purchases to the cash), so
        ``within_cash`` is not applied here."""
        reports = [OrderReport(order, status="accepted", submitted_at=str(self.now)) for order in intent.orders]
        if not send:
            for report in reports:
                report.status, report.message = "skipped", "not sent: the bar's send window had passed"
            return reports
        self._pending.append((intent, reports))
        self._fill_pending()
        return reports

    def observe(self, panel: Any) -> list[OrderReport] | None:
        """A newer panel (a dry run's data through the fill bar): fill what waited for it."""
        if panel is not self.filler.panel:
            self.filler = EnvFiller(panel, self.filler.rules, self.filler.device)
        return self._fill_pending()

    def _fill_pending(self) -> list[OrderReport] | None:
        done = None
        for intent, reports in list(self._pending):
            if not self.filler.can_fill(intent.bar):
                continue
            self._fill(intent, reports)
            self._pending.remove((intent, reports))
            done = reports
        return done

    def _fill(self, intent: Intent, reports: list[OrderReport]) -> None:
        """Each order filled up to the env's fill of its ticker; see the module docstring."""
        fill = self.filler.fill(intent.bar, self.cash, self.holdings, intent.action)
        env_fill = fill.holdings - self.holdings
        tolerance = 1e-9 * np.maximum(1.0, np.abs(self.holdings))  # float64 rounding of holdings +- orders
        index = {t: i for i, t in enumerate(self.tickers)}
        ordered = np.zeros_like(env_fill)
        for report in reports:
            ordered[index[report.order.ticker]] = report.order.qty if report.order.side == "buy" else -report.order.qty
        # where the env filled a ticker beyond its order (a risk limit cut it), fill the order only
        same_side = np.sign(ordered) == np.sign(env_fill)
        beyond = np.abs(env_fill) > np.abs(ordered) + tolerance
        actual = np.where(same_side, np.where(beyond, ordered, env_fill), 0.0)
        if np.all(np.abs(actual - env_fill) <= tolerance):  # the env's own orders: its book, bit for bit
            holdings, cash, actual = fill.holdings, fill.cash, env_fill
        else:
            holdings = self.holdings + actual
            cash = fill.cash + float(((env_fill - actual) * fill.open).sum())
        traded = np.abs(actual) * fill.open
        total = float(traded.sum())
        for report in reports:
            i = index[report.order.ticker]
            shares = float(abs(actual[i]))
            report.filled_qty = shares
            report.filled_avg_price = float(fill.open[i]) if shares > 0 else None
            report.fees = fill.costs * float(traded[i]) / total if total > 0 else 0.0
            report.status = "filled" if shares >= report.order.qty - float(tolerance[i]) else "canceled"
            if report.status == "canceled":
                report.message = (
                    "partly filled: the env's fill (cash limit, tradable mask or participation cap) left the rest"
                )
        if total == 0:
            self._charges += fill.costs  # a borrow fee on a book that did not trade: charged outside any order
        self.holdings, self.cash = holdings, cash
        self.fills += 1
