"""Alpaca's trading API on loopback, beside the bars API of `vendor_server.VendorServer`.

`trader paper --broker alpaca` is pointed at it with ``--broker-url`` and
``--data-url``, so alpaca-py's `TradingClient` and `StockHistoricalDataClient` run
unchanged. It follows Alpaca's documented API (https://docs.alpaca.markets/reference):

- ``GET /v2/clock`` -> ``{"timestamp", "is_open", "next_open", "next_close"}``. The server's
  time moves only when a client reads the clock: each read adds ``tick_s`` seconds, and a
  read while the market is closed jumps to the next open. A trading day takes seconds,
  and the run does not depend on the machine's speed.
- ``GET /v2/account`` (``account_number`` "PA..." for a paper account, ``status``,
  ``cash``, ``equity``, ``buying_power``), ``GET /v2/positions`` (``symbol``, ``qty``, ...).
- ``POST /v2/orders`` (market, day): filled at once at the open of the minute bar the
  server's time lies in, plus ``slippage_bp`` against the buyer or seller; ``partial``
  fills a fraction of a symbol's orders and leaves the rest open; ``reject`` refuses a
  symbol's orders (403 insufficient buying power, 422 not tradable); a second order with
  a ``client_order_id`` already used gets 422; a buy beyond the cash gets 403.
- ``GET /v2/orders/{id}``, ``GET /v2/orders:by_client_order_id``, ``DELETE /v2/orders/{id}``.
- ``GET /v2/stocks/trades/latest`` (the data API): the open of the bar the time lies in.
- 429 (``throttle``), 503 (``fail_next``, or ``fail_after_accept``: the order is taken and
  the answer lost), 403 for wrong keys, everywhere; ``hold_order``: the n-th order is
  taken and its answer held until ``release`` (a test kills the client meanwhile).

The data API shows only bars that have closed by the server's time. Every order the
server takes is kept in ``orders`` with the time it arrived.
"""

from __future__ import annotations

import itertools
import threading
import uuid

import numpy as np
import pandas as pd

from vendor_server import KEY_ID, NY, SECRET, VendorServer, bars_frame

TICKERS = ("AAA", "BBB")
BENCHMARK = "QQQ"
HISTORY = ("2020-11-02", "2020-11-21")  # the run's data set: train, validation, test
TRAIN_END, VAL_END = "2020-11-17", "2020-11-19"
PAPER = ("2020-11-23", "2020-12-02")  # paper trading: Thanksgiving (11-26) closed, 11-27 closes at 13:00


def sessions_by_hand(start: str, end: str, extra: tuple[str, ...] = ()) -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
    """NYSE sessions written by hand (no calendar library): weekdays, Thanksgiving off, 13:00 the day
    after; ``extra`` adds a session on a day the exchange is closed (a broker clock gone wrong)."""
    out = {}
    for day in pd.date_range(start, end, freq="D"):
        text = f"{day:%Y-%m-%d}"
        if (day.weekday() >= 5 or text == "2020-11-26") and text not in extra:
            continue
        close = "13:00" if text == "2020-11-27" else "16:00"
        out[text] = (pd.Timestamp(f"{text} 09:30", tz=NY), pd.Timestamp(f"{text} {close}", tz=NY))
    return out


def served_market() -> dict[str, pd.DataFrame]:
    """Minute bars (UTC) of every session from the history's start to the paper days' end."""
    days = sessions_by_hand(HISTORY[0], PAPER[1])
    stamps = pd.DatetimeIndex(
        np.concatenate([pd.date_range(o, c, freq="1min", inclusive="left").tz_convert("UTC") for o, c in days.values()])
    )
    return {
        ticker: bars_frame(stamps, seed=10 + i, level=40.0 + 60 * i) for i, ticker in enumerate((*TICKERS, BENCHMARK))
    }


class BrokerServer(VendorServer):
    """The bars of `bars` and a paper account, on loopback (see the module docstring)."""

    def __init__(
        self,
        bars: dict[str, pd.DataFrame],
        start: str,
        *,
        cash: float = 100_000.0,
        tick_s: float = 2.0,
        extra_sessions: tuple[str, ...] = (),
        account_number: str = "PA3XKTEST01",
    ) -> None:
        super().__init__(bars, page_size=10_000)
        self.now = pd.Timestamp(start, tz=NY)
        self.tick = pd.Timedelta(seconds=tick_s)
        self.sessions = sessions_by_hand(HISTORY[0], PAPER[1], extra_sessions)
        self.cash = float(cash)
        self.positions: dict[str, float] = {}
        self.orders: dict[str, dict] = {}
        self.by_client: dict[str, str] = {}
        self.posts: list[str] = []  # client ids of every order sent, taken or not
        self.account_number = account_number
        self.partial: dict[str, float] = {}
        self.reject: dict[str, tuple[int, str]] = {}
        self.slippage_bp = 0.0
        self.fail_next = 0
        self.fail_after_accept = 0
        self.hold_order: int | None = None
        self.order_held = threading.Event()
        self.frozen = False  # True: the clock stops (a test inspects the account)
        self.fast_days: set[str] = set()  # on these days a clock read moves 10 minutes (a session no one trades)
        self._opens = {t: f.set_index("timestamp")["open"] for t, f in bars.items()}
        self._counter = itertools.count(1)

    # ---------------------------------------------------------------- time
    def session_at(self, when: pd.Timestamp) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        day = self.sessions.get(f"{when.tz_convert(NY):%Y-%m-%d}")
        return day if day is not None and day[0] <= when < day[1] else None

    def next_open(self, when: pd.Timestamp) -> pd.Timestamp:
        return min(o for o, _ in self.sessions.values() if o > when)

    def visible(self, frame: pd.DataFrame, minutes: int) -> pd.DataFrame:
        closes = pd.DatetimeIndex(frame["timestamp"]) + pd.Timedelta(minutes=minutes)
        return frame[np.asarray(closes <= self.now)]

    def price(self, ticker: str) -> float:
        """The open of the minute bar the server's time lies in."""
        minute = self.now.tz_convert("UTC").floor("1min")
        return float(self._opens[ticker].loc[minute])

    # ---------------------------------------------------------------- routes
    def route(self, handler, method: str, path: str, query: dict, body: dict, throttled: bool):
        if handler.headers.get("APCA-API-KEY-ID") != KEY_ID or handler.headers.get("APCA-API-SECRET-KEY") != SECRET:
            return _reply(handler, 403, {"code": 40310000, "message": "forbidden: request is not authorized"})
        if throttled:
            return _reply(handler, 429, {"code": 42910000, "message": "rate limit exceeded"})
        with self._lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                return _reply(handler, 503, {"code": 50300000, "message": "service unavailable"})
            if path == "/v2/clock":
                return _reply(handler, 200, self._clock())
            if path == "/v2/account":
                return _reply(handler, 200, self._account())
            if path == "/v2/positions" and method == "GET":
                return _reply(
                    handler,
                    200,
                    [
                        {
                            "symbol": s,
                            "qty": repr(q),
                            "side": "long" if q > 0 else "short",
                            "market_value": repr(q * self.price(s) if self.session_at(self.now) else 0.0),
                        }
                        for s, q in sorted(self.positions.items())
                    ],
                )
            if path == "/v2/orders" and method == "POST":
                return self._post_order(handler, body)
            if path == "/v2/orders:by_client_order_id":
                order_id = self.by_client.get(query.get("client_order_id"))
                if order_id is None:
                    return _reply(handler, 404, {"code": 40410000, "message": "order not found"})
                return _reply(handler, 200, self.orders[order_id])
            if path.startswith("/v2/orders/"):
                order = self.orders.get(path.removeprefix("/v2/orders/"))
                if order is None:
                    return _reply(handler, 404, {"code": 40410000, "message": "order not found"})
                if method == "DELETE":
                    if order["status"] in ("new", "accepted", "partially_filled"):
                        order["status"], order["canceled_at"] = "canceled", self.now.isoformat()
                    return _reply(handler, 204, {})
                return _reply(handler, 200, order)
            if path == "/v2/stocks/trades/latest":
                symbols = query["symbols"].split(",")
                return _reply(
                    handler,
                    200,
                    {
                        "trades": {
                            s: {"t": self.now.isoformat(), "p": self.price(s), "s": 100}
                            for s in symbols
                            if s in self._opens
                        }
                    },
                )
        return None

    def _clock(self) -> dict:
        if not self.frozen:
            if self.session_at(self.now) is None:
                self.now = max(self.now, self.next_open(self.now))
            elif f"{self.now.tz_convert(NY):%Y-%m-%d}" in self.fast_days:
                self.now = self.now + pd.Timedelta(minutes=10)
            else:
                self.now = self.now + self.tick
        session = self.session_at(self.now)
        upcoming = self.next_open(self.now)
        close = session[1] if session else self.sessions[f"{upcoming:%Y-%m-%d}"][1]
        return {
            "timestamp": self.now.isoformat(),
            "is_open": session is not None,
            "next_open": upcoming.isoformat(),
            "next_close": close.isoformat(),
        }

    def _account(self) -> dict:
        equity = (
            self.cash + sum(q * self.price(s) for s, q in self.positions.items())
            if self.session_at(self.now)
            else self.cash
        )
        return {
            "id": "acct-1",
            "account_number": self.account_number,
            "status": "ACTIVE",
            "currency": "USD",
            "cash": repr(self.cash),
            "equity": repr(equity),
            "buying_power": repr(max(self.cash, 0.0)),
            "trading_blocked": False,
            "account_blocked": False,
            "pattern_day_trader": False,
        }

    def _post_order(self, handler, body: dict):
        client_id, symbol, side = body["client_order_id"], body["symbol"], body["side"]
        qty = float(body["qty"])
        self.posts.append(client_id)
        if client_id in self.by_client:
            return _reply(handler, 422, {"code": 40010001, "message": "client_order_id must be unique"})
        if symbol in self.reject:
            status, message = self.reject[symbol]
            return _reply(handler, status, {"code": status * 100000, "message": message})
        if self.session_at(self.now) is None:
            return _reply(
                handler, 422, {"code": 42210000, "message": "market is closed (test server takes no queued order)"}
            )
        price = self.price(symbol) * (1 + (1 if side == "buy" else -1) * self.slippage_bp * 1e-4)
        if side == "buy" and qty * price > self.cash + 1e-6:
            return _reply(handler, 403, {"code": 40310000, "message": "insufficient buying power"})
        filled = qty * self.partial.get(symbol, 1.0)
        order_id = str(uuid.UUID(int=next(self._counter)))
        sign = 1.0 if side == "buy" else -1.0
        self.cash -= sign * filled * price
        held = self.positions.get(symbol, 0.0) + sign * filled
        if abs(held) < 1e-12:
            self.positions.pop(symbol, None)
        else:
            self.positions[symbol] = held
        order = {
            "id": order_id,
            "client_order_id": client_id,
            "symbol": symbol,
            "side": side,
            "type": "market",
            "time_in_force": body.get("time_in_force"),
            "qty": repr(qty),
            "filled_qty": repr(filled),
            "filled_avg_price": repr(price) if filled else None,
            "submitted_at": self.now.isoformat(),
            "status": "filled" if filled >= qty else "partially_filled",
        }
        self.orders[order_id] = order
        self.by_client[client_id] = order_id
        if self.hold_order is not None and len(self.orders) == self.hold_order:
            self.order_held.set()
            self._lock.release()
            try:
                self.release.wait(timeout=60)
            finally:
                self._lock.acquire()
            return _reply(handler, 503, {"code": 50300000, "message": "held"})
        if self.fail_after_accept > 0:
            self.fail_after_accept -= 1
            return _reply(handler, 503, {"code": 50300000, "message": "the answer was lost"})
        return _reply(handler, 200, order)


def _reply(handler, status: int, body) -> bool:
    """Send the answer; True tells `VendorServer` the route was handled."""
    handler._send(status, body)
    return True
