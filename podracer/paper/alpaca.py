"""Alpaca's paper trading API through alpaca-py's `TradingClient`: the paper loop's real broker.

- **Paper only.** The client is built for the paper endpoint (``paper=True``;
  ``--broker-url`` for a mirror or a test server). Alpaca's live host is refused before
  any request (`podracer.paper.config`), and so is an account whose number is not a paper
  account's (Alpaca numbers paper accounts ``PA...``).
- **Time** is the broker's: ``/v2/clock`` (now, open or closed, next open and close).
  `wait_until` polls it; nothing reads the machine's clock.
- **Orders** are market orders for the day, sells first: the loop's orders are sent,
  waited for (``fill_timeout_s`` of the broker's time, polled every ``poll_s``), and only
  then is the cash read again and the purchases cut to it by the env's cost model (the
  loop's ``within_cash``); a partly filled order is cancelled when the bound passes, and
  its filled part is what counts. An order under `MIN_ORDER_VALUE` is not sent (Alpaca's
  least fractional order); its report says so.
- **Idempotent.** Each order carries the loop's ``client_order_id`` (session, bar,
  ticker). Alpaca refuses a second order with the same id (HTTP 422); the broker then
  adopts the order that id already names, so a restarted loop never sends an order twice.
- **Failures.** 429 and 5xx are retried with the data provider's bounded back-off
  (`market_envs.data.vendors.with_backoff`); refused keys (401/403 on the account) are one
  `ConfigError`; a refused order (403 buying power, 422 not tradable, ...) is reported as
  ``rejected`` with the broker's message, and the loop goes on.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pandas as pd

from market_envs.data.alpaca import api_message
from market_envs.data.vendors import (
    AUTH_STATUS,
    RETRY_STATUS,
    Backoff,
    Retryable,
    env_credentials,
    one_line,
    with_backoff,
)
from trader.errors import ConfigError, UserError
from podracer.paper.orders import Book, Clock, Intent, OrderReport

ENV_KEY_ID = "APCA_API_KEY_ID"
ENV_SECRET_KEY = "APCA_API_SECRET_KEY"
MIN_ORDER_VALUE = 1.0
"""The smallest order value sent, in dollars: Alpaca's least fractional order."""
DUPLICATE = 422


class BrokerError(UserError):
    """The broker refused something the loop cannot go on without (the account, the clock)."""


class AlpacaBroker:
    """A paper account at Alpaca (see the module docstring).

    :param url: the trading API's base URL (None: Alpaca's paper endpoint).
    :param fill_timeout_s: seconds of the broker's time to wait for fills before cancelling.
    :param poll_s: real seconds between two looks at the clock or an order.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        fill_timeout_s: float = 60.0,
        poll_s: float = 1.0,
        backoff: Backoff | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        key_id, secret = env_credentials(
            "alpaca", (ENV_KEY_ID, ENV_SECRET_KEY), " (the keys of an Alpaca paper account)"
        )
        from alpaca.trading.client import TradingClient

        self.url = url
        self.fill_timeout_s, self.poll_s = fill_timeout_s, poll_s
        self.backoff = backoff or Backoff(retries=5, base_s=1.0, cap_s=30.0)
        self._client = TradingClient(key_id, secret, paper=True, raw_data=True, url_override=url)
        self._client._retry = 0  # our bounded back-off replaces alpaca-py's fixed one
        self._client._session.request = functools.partial(self._client._session.request, timeout=timeout_s)

    # ---------------------------------------------------------------- requests
    def _call(self, what: str, request, refuse_keys: bool = False):
        """``request()`` with the back-off; ``APIError`` becomes one line (see the module docstring)."""
        import requests
        from alpaca.common.exceptions import APIError

        def once():
            try:
                return request()
            except APIError as err:
                status = err.status_code or 0
                if status in RETRY_STATUS:
                    raise Retryable(status, api_message(err)) from None
                raise
            except (requests.ConnectionError, requests.Timeout) as err:
                raise Retryable(0, one_line(type(err).__name__)) from None

        try:
            return with_backoff(once, self.backoff, f"alpaca: {what}")
        except APIError as err:
            status = err.status_code or 0
            if refuse_keys and status in AUTH_STATUS:
                raise ConfigError(
                    f"alpaca refused the keys for {what} (HTTP {status}: {api_message(err)}); check "
                    f"{ENV_KEY_ID} and {ENV_SECRET_KEY} (a paper account's keys)"
                ) from None
            raise BrokerError(f"alpaca: {what} failed (HTTP {status}: {api_message(err)})") from None

    def check_account(self) -> dict[str, Any]:
        """The account, refused unless it is an active paper account that may trade."""
        account = self._call("reading the account", self._client.get_account, refuse_keys=True)
        number = str(account.get("account_number") or "")
        if not number.startswith("PA"):
            raise ConfigError(
                f"the account at {self.url or 'the paper endpoint'} ({number or 'no number'}) is not "
                "an Alpaca paper account (their numbers start with PA); trader paper trades paper accounts only"
            )
        if (
            account.get("trading_blocked")
            or account.get("account_blocked")
            or account.get("status") not in (None, "ACTIVE")
        ):
            raise ConfigError(
                f"the paper account {number} may not trade (status {account.get('status')}, "
                f"trading_blocked {account.get('trading_blocked')})"
            )
        return account

    # ---------------------------------------------------------------- the clock
    def clock(self) -> Clock:
        raw = self._call("reading the clock", self._client.get_clock)
        return Clock(
            pd.Timestamp(raw["timestamp"]),
            bool(raw["is_open"]),
            _stamp(raw.get("next_open")),
            _stamp(raw.get("next_close")),
        )

    def wait_until(self, when: pd.Timestamp, interrupted: Any = None) -> bool:
        """Poll the clock until it reads ``when`` or later; False when ``interrupted()`` says stop."""
        when = pd.Timestamp(when)
        while True:
            if interrupted is not None and interrupted():
                return False
            now = self.clock().now
            if now >= when:
                return True
            time.sleep(min(self.poll_s, max(0.0, (when - now).total_seconds())))

    # ---------------------------------------------------------------- the account
    def book(self) -> Book:
        account = self._call("reading the account", self._client.get_account)
        positions = self._call("reading the positions", self._client.get_all_positions)
        held = {p["symbol"]: float(p["qty"]) for p in positions if float(p["qty"]) != 0}
        return Book(float(account["cash"]), held, float(account["equity"]) if account.get("equity") else None)

    # ---------------------------------------------------------------- orders
    def execute(self, intent: Intent, within_cash: Any = None, send: bool = True) -> list[OrderReport]:
        """Sells, then buys cut to the cash the sells left; see the module docstring."""
        sells = [OrderReport(o) for o in intent.orders if o.side == "sell"]
        buys = [OrderReport(o) for o in intent.orders if o.side == "buy"]
        self._send_and_wait(sells, send, intent.resumed)
        if buys and send and within_cash is not None:
            cash = self.book().cash
            cut = within_cash({r.order.ticker: r.order.qty for r in buys}, cash)
            for report in buys:
                qty = float(cut.get(report.order.ticker, 0.0))
                if qty < report.order.qty:
                    report.order = type(report.order)(**{**report.order.as_dict(), "qty": qty})
                    report.message = "cut to the cash left after the sells"
        self._send_and_wait(buys, send, intent.resumed)
        return sells + buys

    def _send_and_wait(self, reports: list[OrderReport], send: bool, resumed: bool = False) -> None:
        for report in reports:
            order = report.order
            if order.qty * order.price < MIN_ORDER_VALUE or not order.qty > 0:
                report.status = "skipped"
                report.message = report.message or f"not sent: under ${MIN_ORDER_VALUE:g} (Alpaca's least order)"
                continue
            self._submit(report, send, resumed)
        waiting = [r for r in reports if not r.final]
        if not waiting:
            return
        deadline = self.clock().now + pd.Timedelta(seconds=self.fill_timeout_s)
        while waiting:
            for report in waiting:
                self._refresh(report)
            waiting = [r for r in waiting if not r.final]
            if not waiting or self.clock().now >= deadline:
                break
            time.sleep(self.poll_s)
        for report in waiting:  # what is left is cancelled before the next bar
            self._call(
                f"cancelling order {report.order.client_order_id}",
                functools.partial(self._client.cancel_order_by_id, report.broker_id),
            )
        for _ in range(50):
            for report in waiting:
                self._refresh(report)
            waiting = [r for r in waiting if not r.final]
            if not waiting:
                break
            time.sleep(self.poll_s)

    def _submit(self, report: OrderReport, send: bool, resumed: bool = False) -> None:
        """Send the order, or adopt the order its client id already names (a restart: looked up
        first, so nothing is sent twice; a lost answer: Alpaca's 422 on the repeated id)."""
        from alpaca.trading.enums import OrderSide, TimeInForce
        from alpaca.trading.requests import MarketOrderRequest

        order = report.order
        if not send or resumed:
            existing = self._by_client_id(order.client_order_id)
            if existing is not None:
                self._update(report, existing)
                return
            if not send:
                report.status, report.message = "skipped", "not sent: the bar's send window had passed"
                return
        request = MarketOrderRequest(
            symbol=order.ticker,
            qty=round(order.qty, 9),
            client_order_id=order.client_order_id,
            side=OrderSide.BUY if order.side == "buy" else OrderSide.SELL,
            time_in_force=TimeInForce.DAY,
        )
        try:
            raw = self._call(
                f"sending order {order.client_order_id}", functools.partial(self._client.submit_order, request)
            )
        except BrokerError as err:
            existing = self._by_client_id(order.client_order_id) if f"HTTP {DUPLICATE}" in str(err) else None
            if existing is None:
                report.status, report.message = "rejected", str(err).removeprefix("alpaca: ")
                return
            raw = existing  # sent before a restart: the same order, adopted
        self._update(report, raw)

    def _by_client_id(self, client_id: str) -> dict | None:
        try:
            return self._call(
                f"looking up order {client_id}", functools.partial(self._client.get_order_by_client_id, client_id)
            )
        except BrokerError as err:
            if "HTTP 404" in str(err):
                return None
            raise

    def _refresh(self, report: OrderReport) -> None:
        raw = self._call(
            f"reading order {report.order.client_order_id}",
            functools.partial(self._client.get_order_by_id, report.broker_id),
        )
        self._update(report, raw)

    @staticmethod
    def _update(report: OrderReport, raw: dict) -> None:
        report.broker_id = str(raw["id"])
        report.status = str(raw["status"]).lower().removeprefix("orderstatus.")
        report.filled_qty = float(raw.get("filled_qty") or 0.0)
        price = raw.get("filled_avg_price")
        report.filled_avg_price = float(price) if price not in (None, "") else None
        report.submitted_at = raw.get("submitted_at") or report.submitted_at

    def observe(self, panel: Any) -> None:
        return None


def _stamp(value: Any) -> pd.Timestamp | None:
    return None if value in (None, "") else pd.Timestamp(value)
