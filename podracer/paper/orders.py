"""What the paper loop and its brokers exchange: the clock, the book, orders and their reports.

Plain values, no broker in them: `podracer.paper.simulated` and `podracer.paper.alpaca`
take and give these, and the journal stores them as they are (`as_dict`).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

FINAL_STATUSES = ("filled", "canceled", "expired", "rejected", "done_for_day", "skipped")
"""Order states after which nothing more fills (`skipped`: never sent, see `OrderReport.message`)."""


@dataclass(frozen=True)
class Clock:
    """The broker's clock (Alpaca's ``/v2/clock``): its time, whether the market is open,
    and when it next opens and closes."""

    now: pd.Timestamp
    is_open: bool
    next_open: pd.Timestamp | None = None
    next_close: pd.Timestamp | None = None


@dataclass(frozen=True)
class Book:
    """An account as the broker reports it: cash and shares per ticker (non-zero only).

    :param equity: the broker's own mark of the account, where it reports one.
    :param charges: cash the broker charged outside any order since the last look (a
        simulated broker's borrow fee on a bar without trades).
    """

    cash: float
    positions: dict[str, float]
    equity: float | None = None
    charges: float = 0.0

    def vector(self, tickers: tuple[str, ...]) -> np.ndarray:
        """Shares per ticker in ``tickers``' order, float64 (0 where none are held)."""
        return np.array([float(self.positions.get(t, 0.0)) for t in tickers], dtype=np.float64)

    def outside(self, tickers: tuple[str, ...]) -> list[str]:
        """Positions in tickers the run does not trade."""
        return sorted(t for t, q in self.positions.items() if q != 0 and t not in set(tickers))


@dataclass(frozen=True)
class Order:
    """One market order of a bar.

    :param client_order_id: derived from the journal's session, the bar and the ticker
        (`client_order_id`), so a restarted loop sends the same id and the broker refuses
        it twice.
    :param side: "buy" or "sell".
    :param qty: shares, > 0 (fractional in weights mode).
    :param price: the price the order was sized at (the open it is sent at).
    """

    client_order_id: str
    ticker: str
    side: str
    qty: float
    price: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OrderReport:
    """What became of an order: its state, the shares filled and their mean price."""

    order: Order
    status: str = "new"
    filled_qty: float = 0.0
    filled_avg_price: float | None = None
    fees: float = 0.0
    broker_id: str | None = None
    message: str | None = None
    submitted_at: str | None = None

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def signed_fill(self) -> float:
        """Shares bought (+) or sold (-)."""
        return self.filled_qty if self.order.side == "buy" else -self.filled_qty

    def as_dict(self) -> dict[str, Any]:
        values = {k: v for k, v in asdict(self).items() if k != "order"}
        return {**self.order.as_dict(), **values}


@dataclass(frozen=True)
class Intent:
    """The decision behind a bar's orders, for a broker that fills as the env's step does
    (`podracer.paper.simulated`): the decision bar, and the policy's action there (None: flatten
    the book). A real broker receives the orders only; ``resumed`` says they may have been
    sent before a restart (look each up by its client id before sending it)."""

    bar: pd.Timestamp
    action: np.ndarray | None
    orders: tuple[Order, ...] = field(default_factory=tuple)
    resumed: bool = False


class Broker(Protocol):
    """What the loop needs of a broker: `podracer.paper.alpaca.AlpacaBroker` (a paper account)
    and `podracer.paper.simulated.SimulatedBroker` (a replay, or a dry run)."""

    def clock(self) -> Clock: ...

    def book(self) -> Book: ...

    def wait_until(self, when: pd.Timestamp, interrupted: Any = None) -> bool:
        """Wait until the broker's clock reaches ``when``; False when ``interrupted()`` said stop first."""

    def execute(self, intent: Intent, within_cash: Any, send: bool = True) -> list[OrderReport]:
        """Send the intent's orders (sells first), wait for their fills within the bound, cancel
        what is left; with ``send`` False only look up orders already sent (a restart after the
        bar's send window)."""

    def observe(self, panel: Any) -> list[OrderReport] | None:
        """The data through the bar the orders filled at: a simulated broker fills then what it
        could not fill before; returns its reports (None: nothing changed)."""


def client_order_id(session: str, bar: pd.Timestamp, ticker: str, kind: str = "bar") -> str:
    """The id of the order for ``ticker`` decided at ``bar`` in the journal ``session``:
    ``pt-<session>-<bar as UTC yyyymmddHHMM>-<ticker>`` (``-flat`` for a flattening), at most 48
    characters (Alpaca allows 128). Sells and buys of one ticker never share a bar."""
    stamp = pd.Timestamp(bar).tz_convert("UTC").strftime("%Y%m%d%H%M")
    suffix = "-flat" if kind == "flatten" else ""
    text = f"pt-{session}-{stamp}-{ticker}{suffix}"
    if len(text) > 48:  # a long ticker: keep the id short and still unique
        text = f"pt-{session}-{stamp}-{hashlib.sha256(ticker.encode()).hexdigest()[:12]}{suffix}"
    return text
