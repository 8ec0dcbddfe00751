"""The paper loop's risk limits: orders cut before they go out, and the kill switch.

- `cut_orders`: the largest order value (each order cut to it) and the largest gross
  exposure (the parts of the orders that add exposure cut by one common factor), at
  the prices the orders are sent at. The cuts are listed in the journal.
- `RiskState`: after every bar, the book's loss since the previous session's last
  close and its fall from the highest value seen. Reaching the daily loss limit or the
  drawdown limit sets `kill`: the next bar flattens the book (and the next, until no
  position is left: a participation cap or a partial fill may leave some), and then
  `stopped` says why the loop ends. It is rebuilt from the journal on a restart, so a killed loop stays
  stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from podracer.paper.config import RiskLimits


def cut_orders(
    sells: np.ndarray,
    buys: np.ndarray,
    held: np.ndarray,
    cash: float,
    price: np.ndarray,
    limits: RiskLimits,
    tickers: tuple[str, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The orders (sells, buys in shares, >= 0) within the order-value and gross-exposure limits."""
    cuts: list[str] = []
    names = tickers or tuple(str(i) for i in range(len(held)))
    priced = np.where(np.isfinite(price) & (price > 0), price, 0.0)
    delta = buys - sells
    if limits.max_order_value is not None:
        value = np.abs(delta) * priced
        over = value > limits.max_order_value
        for i in np.flatnonzero(over):
            cuts.append(f"{names[i]}: order of {value[i]:,.2f} cut to --max-order-value {limits.max_order_value:,.2f}")
        delta = np.where(over, np.sign(delta) * limits.max_order_value / np.where(priced > 0, priced, 1.0), delta)
    if limits.max_gross_exposure is not None:
        book_value = cash + float(held @ priced)
        toward_zero = (np.sign(delta) == -np.sign(held)) & (held != 0)
        reduce = np.where(toward_zero, np.sign(delta) * np.minimum(np.abs(delta), np.abs(held)), 0.0)
        add = delta - reduce
        kept = float(np.abs(held + reduce) @ priced)
        added = float(np.abs(add) @ priced)
        room = limits.max_gross_exposure * max(book_value, 0.0) - kept
        if added > 0 and room < added:
            k = max(0.0, room) / added
            cuts.append(
                f"orders adding exposure cut to {k:.1%} to keep the gross exposure within "
                f"--max-gross-exposure {limits.max_gross_exposure:g}"
            )
            delta = reduce + k * add
    if not cuts:
        return sells, buys, cuts
    return np.clip(-delta, 0.0, None), np.clip(delta, 0.0, None), cuts


@dataclass
class RiskState:
    """How close the book has come to each limit; see the module docstring."""

    limits: RiskLimits
    peak: float | None = None
    day_start: float | None = None
    day: Any = None
    last_value: float | None = None
    kill: str | None = None
    stopped: str | None = None

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], limits: RiskLimits) -> RiskState:
        state = cls(limits)
        for record in records:
            state.update(record)
        if records:  # what the journal says was decided stands, whatever limits this run was given
            state.kill = records[-1]["risk"].get("kill")
            state.stopped = records[-1].get("stop")
        return state

    def update(self, record: dict[str, Any], hours: Any = None) -> dict[str, Any]:
        """Take one journal record (its ``before``, ``after``, ``orders`` and ``kind``); return its
        ``risk`` entry."""
        value, before = float(record["after"]["value"]), float(record["before"]["value"])
        day = pd.Timestamp(record["fills_at"]).date()
        if self.peak is None:
            self.peak, self.day_start, self.day = before, before, day
        elif day != self.day:
            self.day_start, self.day = self.last_value, day
        self.peak = max(self.peak, value)
        self.last_value = value
        close = np.asarray(record["after"]["close"], dtype=np.float64)
        positions = np.asarray(record["after"]["positions"], dtype=np.float64)
        orders = [o["qty"] * o["price"] for o in record["orders"]]
        entry = {
            "largest_order_value": max(orders, default=0.0),
            "gross_exposure": float(np.abs(positions) @ close) / value if value > 0 else None,
            "day_loss": max(0.0, 1.0 - value / self.day_start) if self.day_start else 0.0,
            "drawdown": max(0.0, 1.0 - value / self.peak) if self.peak else 0.0,
            "peak": self.peak,
            "day_start": self.day_start,
        }
        if record["kind"] == "flatten" and self.kill is not None:
            if not np.any(positions):  # a partial fill (a participation cap) flattens again at the next bar
                self.stopped = f"{self.kill}; the book was flattened at {record['fills_at']} and the loop stopped"
        elif self.kill is None:
            limit = self.limits
            if limit.daily_loss_limit is not None and entry["day_loss"] >= limit.daily_loss_limit:
                self.kill = (
                    f"the day's loss reached {entry['day_loss']:.2%} at {record['fills_at']} "
                    f"(--daily-loss-limit {limit.daily_loss_limit:.2%})"
                )
            elif limit.max_drawdown is not None and entry["drawdown"] >= limit.max_drawdown:
                self.kill = (
                    f"the drawdown reached {entry['drawdown']:.2%} at {record['fills_at']} "
                    f"(--max-drawdown {limit.max_drawdown:.2%}): kill switch"
                )
        entry["kill"] = self.kill
        return entry
