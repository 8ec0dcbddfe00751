"""The paper-trading loop: one decision per bar, filled at the next bar's open, journaled whole.

`paper(run_dir, config)` (``trader paper RUN_DIR``) trades a run's selected strategy
(`trader.decision.selected_strategy`: a tournament's result, best pod or ensemble, or a
training run's best checkpoint) under the rules recorded in the run directory: its data
set's universe, features and normalisation statistics, the checkpoint's env rules (the
action mapping) and the run's cost model, read as `trader backtest` reads them. Nothing
is typed by hand.

Each bar, after it closes (by the broker's clock):

1. the panel through the bar (`podracer.paper.feed`: the replayed period, or the last
   sessions fetched from Alpaca's data API and built by the data sets' own code);
2. the book from the broker; the observation is the env's, reset at the bar with that
   book (`trader.decision.reset_at`); the policy's deterministic action;
3. at the next bar's open, the orders: the env's own mapping of the action to shares
   (`StockTradingVecEnv.requested_orders`, at the prices of that open: whole shares or
   fractions, the cash, leverage and any band or rate of the action mode; a stock out of
   a point-in-time index at the bar only toward zero, `market_envs.kernel.toward_zero`) and
   its turbulence guard, less the book; then the risk limits (`podracer.paper.risk`);
4. the orders go to the broker, sells first, each with a ``client_order_id`` from the
   journal's session, the bar and the ticker; the broker waits for the fills within a
   bound and cancels what is left (`podracer.paper.alpaca`), or fills them as the
   backtest does (`podracer.paper.simulated`);
5. after the fill bar closes: the broker's positions and cash are reconciled with the
   fills (a difference beyond the tolerances stops the loop with one line); the
   backtest's fill of the same decision from the same book on the same bars is the
   expectation; the record goes into the journal (`podracer.paper.journal`), whole.

**Orders go out at the open, not before it.** The backtest fills bar t's decision at
bar t+1's open, sizing weights at that open's prices. Sent at the open (at the latest
trade when it opens), an order has the backtest's size and the session's price; queued
before the open (Alpaca's market-on-open orders), it would be sized at bar t's close
and miss the backtest's size by the gap between the two. The price paid against the
backtest's (bar t+1's open in the data) is each fill's slippage, in the journal. An
order goes out only within ``send_window_s`` of that open, and only when the broker's
clock and the exchange calendar both say the session is open: never on a weekend or a
holiday, never after the last bar of a replayed period.

SIGINT and SIGTERM (``stop``) end the loop after the bar in hand; a restart resumes
from the journal (and finishes a bar whose orders were going out, from
``pending.json``). Risk limits (`podracer.paper.config.RiskLimits`) cut orders; the daily
loss limit and the drawdown kill switch flatten the book at the next open and stop.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from market_envs.data.panel import MarketData
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from trader.decision import reset_at
from trader.errors import UserError
from podracer.paper.config import PaperConfig
from podracer.paper.hours import MarketHours
from podracer.paper.journal import Journal
from podracer.paper.orders import Book, Intent, Order, OrderReport, client_order_id
from podracer.paper.risk import RiskState, cut_orders
from podracer.paper.simulated import EnvFiller


class PaperStop(Exception):
    """The loop stopped on something that is not bad input: a reconciliation mismatch, or a
    risk limit that flattened the book. The CLI prints it in one line and exits 1."""


@dataclass
class Strategy:
    """What trades, as the run directory records it."""

    run_dir: Path
    name: str
    policy: Any
    rules: EnvConfig  # the backtest's rules for it (cash and costs included)
    data: MarketData  # the run's data set: universe, interval, normalisation, benchmark
    initial_cash: float
    dataset: str

    @property
    def tickers(self) -> tuple[str, ...]:
        return tuple(self.data.tickers)


@dataclass
class PaperResult:
    """How a loop ended: the bars it journaled and why it stopped."""

    bars: int
    reason: str
    records: list[dict[str, Any]] = field(default_factory=list)


def load_strategy(run_dir: str | Path, dataset: str | None = None, device: str = "cpu") -> Strategy:
    """The run's selected strategy and the rules a backtest of it trades under; one line
    (`UserError`) when the run has none, or names no data set."""
    from trader.backtesting.runs import backtest_config, read_run
    from trader.decision import selected_strategy

    root = Path(run_dir)
    if not root.is_dir():
        raise UserError(f"no such run directory: {run_dir}")
    contents = read_run(root)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(f"no data set given: pass --dataset RECIPE ({root} records none)")
    data = contents.data(recipe)
    config = backtest_config(contents, tear_sheet=False)
    name, policy, rules = selected_strategy(contents, data, config, device)
    return Strategy(root, name, policy, rules, data, float(config.initial_cash), str(recipe))


class PaperLoop:
    """The loop over bars of one journal (see the module docstring)."""

    def __init__(
        self,
        strategy: Strategy,
        config: PaperConfig,
        broker: Any,
        feed: Any,
        journal: Journal,
        hours: MarketHours,
        stop: threading.Event | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.strategy, self.config, self.broker, self.feed = strategy, config, broker, feed
        self.journal, self.hours = journal, hours
        self.stop = stop or threading.Event()
        self.progress = progress or (lambda line: None)
        self.tickers = strategy.tickers
        self.session = journal.session["session"]
        self.records = journal.records()
        self.risk = RiskState.from_records(self.records, config.limits)
        self.written = 0
        self._envs: tuple[Any, StockTradingVecEnv] | None = None
        self._fillers: tuple[Any, EnvFiller] | None = None

    # ------------------------------------------------------------------ the loop
    def run(self) -> PaperResult:
        panel, t = self.feed.panel_at(self.broker.clock().now)
        pending = self.journal.pending()
        if pending is not None:
            panel, t = self._finish_pending(pending, panel)
        while True:
            reason = self._stop_reason()
            if reason is not None:
                return PaperResult(self.written, reason, self.records)
            fill_open = self.feed.next_open(panel, t)
            if fill_open is None:
                return PaperResult(
                    self.written,
                    f"the period ended at its last bar, {panel.timestamps[t]}: no later open to fill at",
                    self.records,
                )
            late = self.broker.clock().now - fill_open
            if self._done(panel.timestamps[t]) or late > pd.Timedelta(seconds=self.config.send_window_s):
                if not self._done(panel.timestamps[t]):
                    self.progress(
                        f"skipped {panel.timestamps[t]}: the open it fills at, {fill_open}, passed {late} ago"
                    )
                if not self.broker.wait_until(self.hours.bar_end(fill_open), self.stop.is_set):
                    return PaperResult(self.written, "stopped by a signal between bars", self.records)
                panel, t = self._panel_through(fill_open)
                continue
            panel, t = self._cycle(panel, t, fill_open, self._kind(fill_open))

    def _stop_reason(self) -> str | None:
        if self.risk.stopped is not None:
            raise PaperStop(self.risk.stopped)
        if self.stop.is_set():
            return "stopped by a signal after the bar in hand"
        if self.config.max_bars is not None and self.written >= self.config.max_bars:
            return f"--max-bars {self.config.max_bars} reached"
        return None

    def _done(self, stamp: pd.Timestamp) -> bool:
        """The journal already holds the decision at ``stamp`` or a later one."""
        return bool(self.records) and pd.Timestamp(self.records[-1]["bar"]) >= stamp

    def _kind(self, fill_open: pd.Timestamp) -> str:
        """ "flatten" after a risk limit, or before the close with ``flatten_before_close``; else "bar"."""
        if self.risk.kill is not None:
            return "flatten"
        if self.config.flatten_before_close and self.hours.minutes is not None:
            session = self.hours.session_of(fill_open)
            if session is not None and self.hours.bar_end(fill_open) >= session[1]:
                return "flatten"
        return "bar"

    def _panel_through(self, stamp: pd.Timestamp) -> tuple[MarketData, int]:
        """The feed's panel once it holds the bar stamped ``stamp`` (data can lag the clock a little)."""
        deadline = None
        while True:
            now = self.broker.clock().now
            panel, t = self.feed.panel_at(now)
            if t is not None and panel.timestamps[t] >= stamp:
                return panel, t
            deadline = deadline or now + pd.Timedelta(seconds=self.config.fill_timeout_s)
            if now >= deadline:
                raise PaperStop(f"the data API has no bar at {stamp} {self.config.fill_timeout_s:g} s after it closed")
            self.broker.wait_until(now + pd.Timedelta(seconds=max(self.config.poll_s, 1e-3)))

    # ------------------------------------------------------------------ one bar
    def _cycle(self, panel: MarketData, t: int, fill_open: pd.Timestamp, kind: str) -> tuple[MarketData, int]:
        stamp = panel.timestamps[t]
        book = self._book()
        held, cash = book.vector(self.tickers), float(book.cash)
        env = self._decision_env(panel)
        obs = reset_at(env, t, cash, held)
        action = None if kind == "flatten" else self._act(obs)
        self.broker.wait_until(fill_open)
        clock = self.broker.clock()
        self.hours.check_clock(clock.now, clock.is_open)
        send = clock.now <= fill_open + pd.Timedelta(seconds=self.config.send_window_s)
        price = self.feed.prices(panel, t, clock.now)
        sells, buys = self._orders(env, panel, t, action, price, held)
        sells, buys, cuts = cut_orders(sells, buys, held, cash, price, self.config.limits, self.tickers)
        orders = self._order_list(stamp, kind, sells, buys, price)
        before = {
            "cash": cash,
            "positions": held.tolist(),
            "value": cash + float(held @ panel.close[t].double().cpu().numpy()),
        }
        pending = {
            "bar": str(stamp),
            "fills_at": str(fill_open),
            "kind": kind,
            "sent": send,
            "action": None if action is None else action.tolist(),
            "orders": [o.as_dict() for o in orders],
            "price": price.tolist(),
            "cuts": cuts,
            "before": before,
            "obs_sha256": hashlib.sha256(obs.detach().cpu().numpy().tobytes()).hexdigest(),
            "data": {
                "first": str(panel.timestamps[0]),
                "last": str(stamp),
                "untradable": [self.tickers[i] for i in np.flatnonzero(~panel.tradable[t].cpu().numpy())],
            },
        }
        self.journal.set_pending(pending)
        intent = Intent(stamp, action, tuple(orders))
        reports = self.broker.execute(intent, self._within_cash(env, panel, t, price), send=send)
        return self._settle(pending, intent, reports)

    def _finish_pending(self, pending: dict[str, Any], panel: MarketData) -> tuple[MarketData, int]:
        """Finish the bar a killed loop was sending orders for, with the same orders and ids."""
        stamp, fill_open = pd.Timestamp(pending["bar"]), pd.Timestamp(pending["fills_at"])
        if self._done(stamp):  # the record made it into the journal before the kill
            self.journal.clear_pending()
            t = panel.timestamps.get_indexer([stamp])[0]
            return panel, (int(t) if t >= 0 else None)
        orders = tuple(Order(**o) for o in pending["orders"])
        action = None if pending["action"] is None else np.asarray(pending["action"], dtype=np.float32)
        intent = Intent(stamp, action, orders, resumed=True)
        clock = self.broker.clock()
        send = pending["sent"] and clock.now <= fill_open + pd.Timedelta(seconds=self.config.send_window_s)
        self.progress(f"finishing {stamp} (its orders were going out when the loop stopped)")
        within = None
        if send and self.hours.is_open(clock.now):
            t = panel.timestamps.get_indexer([stamp])[0]
            if t >= 0:
                within = self._within_cash(self._decision_env(panel), panel, int(t), np.asarray(pending["price"]))
        reports = self.broker.execute(intent, within, send=send and self.hours.is_open(clock.now))
        return self._settle(pending, intent, reports)

    def _settle(self, pending: dict[str, Any], intent: Intent, reports: list[OrderReport]) -> tuple[MarketData, int]:
        """After the fill bar closes: reconcile, compare with the backtest, journal the bar."""
        stamp, fill_open = pd.Timestamp(pending["bar"]), pd.Timestamp(pending["fills_at"])
        self.broker.wait_until(self.hours.bar_end(fill_open))
        panel, t = self._panel_through(fill_open)
        self.broker.observe(panel)
        after = self._book()
        before = pending["before"]
        held_before = np.asarray(before["positions"], dtype=np.float64)
        mismatch = self._reconcile(before["cash"], held_before, reports, after)
        f = panel.timestamps.get_indexer([fill_open])[0]
        close = panel.close[f].double().cpu().numpy()
        positions = after.vector(self.tickers)
        value = float(after.cash) + float(positions @ close)
        expected = self._filler(panel).fill(stamp, before["cash"], held_before, intent.action)
        record = {
            "kind": pending["kind"],
            "bar": pending["bar"],
            "fills_at": pending["fills_at"],
            "sent": pending["sent"],
            "time": str(self.broker.clock().now),
            "data": pending["data"],
            "obs_sha256": pending["obs_sha256"],
            "action": pending["action"],
            "price": pending["price"],
            "cuts": pending["cuts"],
            "orders": [r.as_dict() for r in reports],
            "before": before,
            "after": {
                "cash": float(after.cash),
                "positions": positions.tolist(),
                "value": value,
                "equity": after.equity,
                "close": close.tolist(),
            },
            "benchmark": None if panel.benchmark is None else float(panel.benchmark[f]),
            "expected": {
                "cash": expected.cash,
                "positions": expected.holdings.tolist(),
                "value": expected.value,
                "costs": expected.costs,
                "open": expected.open.tolist(),
            },
            "slippage_bp": _slippage(reports, self.tickers, expected.open),
        }
        record["risk"] = self.risk.update(record, self.hours)
        record["stop"] = mismatch or self.risk.stopped
        self.journal.append(record)
        self.journal.clear_pending()
        self.records.append(record)
        self.written += 1
        filled = sum(1 for r in reports if r.filled_qty > 0)
        self.progress(
            f"{record['kind']} {stamp} -> {fill_open}: {filled}/{len(reports)} orders filled; value "
            f"{value:,.2f} (backtest {expected.value:,.2f})"
        )
        if mismatch:
            raise PaperStop(mismatch)
        return panel, t

    # ------------------------------------------------------------------ the pieces
    def _book(self) -> Book:
        book = self.broker.book()
        outside = book.outside(self.tickers)
        if outside:
            raise UserError(
                f"the account holds positions the run does not trade: {outside[:10]}; close them first "
                "(trader paper keeps to the run's universe)"
            )
        return book

    def _decision_env(self, panel: MarketData) -> StockTradingVecEnv:
        """The env the decision is read from: one sub-environment over the panel (built once per panel)."""
        if self._envs is None or self._envs[0] is not panel:
            env = StockTradingVecEnv(panel, num_envs=1, device=self.config.device, config=self.strategy.rules)
            self._envs = (panel, env)
        return self._envs[1]

    def _filler(self, panel: MarketData) -> EnvFiller:
        if self._fillers is None or self._fillers[0] is not panel:
            self._fillers = (panel, EnvFiller(panel, self.strategy.rules, self.config.device))
        return self._fillers[1]

    def _act(self, obs: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            actions = self.strategy.policy.act(obs, deterministic=True)
        return actions[0].detach().to(torch.float32).cpu().numpy()

    def _orders(
        self,
        env: StockTradingVecEnv,
        panel: MarketData,
        t: int,
        action: np.ndarray | None,
        price: np.ndarray,
        held: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sells, buys) in shares: the env's mapping of the action at ``price`` and its guard."""
        if action is None:  # flatten: close every position
            return np.clip(held, 0.0, None), np.clip(-held, 0.0, None)
        known = np.isfinite(price)
        priced = np.where(known, price, panel.close[t].double().cpu().numpy())
        actions = torch.as_tensor(action, dtype=torch.float32, device=env.device).reshape(1, -1)
        sells, buys = env.requested_orders(actions, torch.as_tensor(priced, dtype=torch.float64))
        sells, buys = sells[0].cpu().numpy(), buys[0].cpu().numpy()
        if bool(env.turbulence_guard[t]):  # the env's guard: sell every long position, buy nothing
            sells, buys = np.clip(held, 0.0, None), np.zeros_like(buys)
        return np.where(known, sells, 0.0), np.where(known, buys, 0.0)

    def _order_list(
        self, stamp: pd.Timestamp, kind: str, sells: np.ndarray, buys: np.ndarray, price: np.ndarray
    ) -> list[Order]:
        """Sells first, then buys; a ticker with nothing to trade gets no order."""
        orders = []
        for side, shares in (("sell", sells), ("buy", buys)):
            for i in np.flatnonzero(shares > 0):
                ticker = self.tickers[i]
                orders.append(
                    Order(
                        client_order_id(self.session, stamp, ticker, kind),
                        ticker,
                        side,
                        float(shares[i]),
                        float(price[i]),
                    )
                )
        return orders

    def _within_cash(self, env: StockTradingVecEnv, panel: MarketData, t: int, price: np.ndarray) -> Callable:
        """The env's cash limit for purchases, for a broker that does not apply it itself:
        ``(buys by ticker, cash) -> buys cut to it`` (costs from the last closed bar's estimates)."""
        row = min(t, panel.num_bars - 2)
        priced = torch.as_tensor(np.where(np.isfinite(price), price, 0.0), dtype=torch.float64)

        def within(buys: dict[str, float], cash: float) -> dict[str, float]:
            wanted = torch.tensor([[buys.get(ticker, 0.0) for ticker in self.tickers]], dtype=torch.float64)
            cut = env.buys_within_cash(wanted, torch.tensor([max(cash, 0.0)], dtype=torch.float64), priced, max(row, 0))
            return {ticker: float(q) for ticker, q in zip(self.tickers, cut[0].tolist()) if ticker in buys}

        return within

    def _reconcile(self, cash: float, held: np.ndarray, reports: list[OrderReport], after: Book) -> str | None:
        """The broker's book against the book before plus the fills; a sentence when they differ."""
        index = {ticker: i for i, ticker in enumerate(self.tickers)}
        expected = held.copy()
        expected_cash = cash - after.charges
        for report in reports:
            if report.filled_qty > 0:
                expected[index[report.order.ticker]] += report.signed_fill
                expected_cash -= report.signed_fill * float(report.filled_avg_price) + report.fees
        positions = after.vector(self.tickers)
        off = np.flatnonzero(np.abs(positions - expected) > self.config.share_tolerance)
        if len(off):
            i = off[0]
            return (
                f"reconciliation failed: the broker holds {positions[i]:g} {self.tickers[i]}, the fills leave "
                f"{expected[i]:g} ({len(off)} ticker(s) differ)"
            )
        if abs(after.cash - expected_cash) > self.config.cash_tolerance:
            return (
                f"reconciliation failed: the broker's cash is {after.cash:,.2f}, the fills leave "
                f"{expected_cash:,.2f} (tolerance {self.config.cash_tolerance:g})"
            )
        return None


def _slippage(reports: list[OrderReport], tickers: tuple[str, ...], backtest_open: np.ndarray) -> dict[str, float]:
    """Each filled order's price against the backtest's (the fill bar's open), in basis points;
    positive is worse (a buy above it, a sale below it)."""
    index = {ticker: i for i, ticker in enumerate(tickers)}
    out = {}
    for report in reports:
        if report.filled_qty > 0 and report.filled_avg_price is not None:
            reference = float(backtest_open[index[report.order.ticker]])
            sign = 1.0 if report.order.side == "buy" else -1.0
            out[report.order.client_order_id] = sign * (report.filled_avg_price / reference - 1.0) * 1e4
    return out
