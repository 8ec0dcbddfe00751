"""The settings of a paper-trading loop, resolved once at the entry point.

`PaperConfig` is what `trader paper` turns its options into and what
`podracer.paper.paper` takes; `RiskLimits` are the limits the loop enforces on every
bar. Both are frozen and validated on construction: a bad value is one `ConfigError`
naming the option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from trader.errors import ConfigError

BROKERS = ("alpaca", "replay")
FEEDS = ("iex", "sip")
LIVE_HOSTS = ("api.alpaca.markets",)
"""Alpaca's live trading endpoint: refused, whatever the account."""
PAPER_URL = "https://paper-api.alpaca.markets"


@dataclass(frozen=True)
class RiskLimits:
    """Limits checked on every bar; None switches a limit off.

    :param max_order_value: the largest value of one order, in the account's currency
        (priced at the open it is sent at); a larger order is cut to it.
    :param max_gross_exposure: the largest gross exposure of the book after a bar's
        orders, sum |shares| x price, as a multiple of the book's value; the orders
        that add exposure are cut by one common factor to stay within it.
    :param daily_loss_limit: the largest loss in one session, as a fraction of the
        value at the previous session's last close (0.03 = 3%); reaching it
        flattens the book at the next open and stops the loop.
    :param max_drawdown: the largest fall from the highest value the journal has seen,
        as a fraction (0.10 = 10%); reaching it flattens the book and stops the loop
        (the kill switch).
    """

    max_order_value: float | None = None
    max_gross_exposure: float | None = None
    daily_loss_limit: float | None = None
    max_drawdown: float | None = None

    def __post_init__(self) -> None:
        options = {
            "max_order_value": "--max-order-value",
            "max_gross_exposure": "--max-gross-exposure",
            "daily_loss_limit": "--daily-loss-limit",
            "max_drawdown": "--max-drawdown",
        }
        for key, flag in options.items():
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{flag} must be a positive number, got {value!r}")
            object.__setattr__(self, key, float(value))
        for key in ("daily_loss_limit", "max_drawdown"):
            value = getattr(self, key)
            if value is not None and value >= 1:
                raise ConfigError(f"{options[key]} is a fraction of the book's value and must be below 1, got {value}")

    def as_dict(self) -> dict[str, float | None]:
        return {
            "max_order_value": self.max_order_value,
            "max_gross_exposure": self.max_gross_exposure,
            "daily_loss_limit": self.daily_loss_limit,
            "max_drawdown": self.max_drawdown,
        }


@dataclass(frozen=True)
class PaperConfig:
    """How `podracer.paper.paper` trades a run's selected strategy.

    :param broker: "alpaca" (Alpaca's paper trading API through alpaca-py; its paper
        endpoint only) or "replay" (a simulated broker over a historical period of the
        run's data set, filling as the backtest does, faster than real time).
    :param broker_url: alpaca: the trading API's base URL (default Alpaca's paper
        endpoint); for a mirror or a test server. Alpaca's live endpoint is refused.
    :param data_url: alpaca: the market data API's base URL (default alpaca-py's).
    :param feed: alpaca: the data feed, "iex" (real time on a free account) or "sip"
        (every exchange; a free account gets it 15 minutes late, too late to trade on).
    :param period: replay: the period replayed ("test", "validation", "START:END", ...).
    :param max_bars: stop after this many bars (decisions journaled by this run); None: no limit.
    :param dry_run: alpaca: the same loop against the broker's clock and data, but no
        order is sent; the orders are filled by the backtest's rules (the env's step at
        the next bar's open) on a simulated book that starts from the account's.
    :param limits: the risk limits (`RiskLimits`).
    :param flatten_before_close: intraday bars: at each session's second-to-last bar the
        decision is replaced by closing every position, filled at the session's last bar,
        so the book holds nothing overnight.
    :param fill_timeout_s: seconds of the broker's time to wait for a bar's orders to fill
        before the rest is cancelled.
    :param send_window_s: seconds of the broker's time after the open a bar's orders may
        still go out; a later start skips the bar (the backtest would have filled at the open).
    :param poll_s: seconds of real time between two looks at the broker's clock or orders.
    :param backoff_s: alpaca: the first wait after a 429 or a 5xx, doubled at each of at most
        five retries (the data provider's back-off).
    :param cash_tolerance: the largest difference between the cash the journal expects
        and the broker's, in the account's currency, before the loop stops.
    :param share_tolerance: the same for each position, in shares.
    :param device: where the env and the policy run.
    """

    broker: str = "replay"
    broker_url: str | None = None
    data_url: str | None = None
    feed: str = "iex"
    period: str = "test"
    max_bars: int | None = None
    dry_run: bool = False
    limits: RiskLimits = field(default_factory=RiskLimits)
    flatten_before_close: bool = False
    fill_timeout_s: float = 60.0
    send_window_s: float = 30.0
    poll_s: float = 1.0
    backoff_s: float = 1.0
    cash_tolerance: float = 0.01
    share_tolerance: float = 1e-6
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.broker not in BROKERS:
            raise ConfigError(f"--broker must be one of {', '.join(BROKERS)}, got {self.broker!r}")
        if self.feed not in FEEDS:
            raise ConfigError(f"--feed must be one of {', '.join(FEEDS)}, got {self.feed!r}")
        if self.broker == "replay":
            for key, flag in (("broker_url", "--broker-url"), ("data_url", "--data-url")):
                if getattr(self, key) is not None:
                    raise ConfigError(f"{flag} does not apply to --broker replay (it replays the run's own data)")
            if self.dry_run:
                raise ConfigError("--dry-run does not apply to --broker replay (a replay sends no order anyway)")
        for key, flag in (("broker_url", "--broker-url"), ("data_url", "--data-url")):
            url = getattr(self, key)
            if url is not None:
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.hostname:
                    raise ConfigError(f"{flag} {url!r} is not an http(s) URL")
        if self.broker_url is not None and urlsplit(self.broker_url).hostname in LIVE_HOSTS:
            raise ConfigError(
                f"--broker-url {self.broker_url} is Alpaca's live endpoint; trader paper trades a "
                f"paper account only ({PAPER_URL})"
            )
        if self.max_bars is not None and (
            isinstance(self.max_bars, bool) or int(self.max_bars) != self.max_bars or self.max_bars < 1
        ):
            raise ConfigError(f"--max-bars must be a positive whole number, got {self.max_bars!r}")
        for key, flag in (
            ("fill_timeout_s", "--fill-timeout"),
            ("send_window_s", "--send-window"),
            ("cash_tolerance", "--cash-tolerance"),
            ("share_tolerance", "share_tolerance"),
        ):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} must be a positive number, got {value!r}")
        for key, flag in (("poll_s", "--poll"), ("backoff_s", "--backoff")):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 60):
                raise ConfigError(f"{flag} must be a number of seconds in [0, 60], got {value!r}")
        if not isinstance(self.limits, RiskLimits):
            raise ConfigError(f"PaperConfig.limits must be a RiskLimits, got {type(self.limits).__name__}")

    @property
    def simulated(self) -> bool:
        """No order reaches a broker: a replay, or a dry run."""
        return self.broker == "replay" or self.dry_run

    def as_dict(self) -> dict:
        """JSON-ready, for the journal's session record (no keys: they never leave the environment)."""
        return {
            "broker": self.broker,
            "broker_url": self.broker_url,
            "data_url": self.data_url,
            "feed": self.feed,
            "period": self.period if self.broker == "replay" else None,
            "max_bars": self.max_bars,
            "dry_run": self.dry_run,
            "limits": self.limits.as_dict(),
            "flatten_before_close": self.flatten_before_close,
            "fill_timeout_s": self.fill_timeout_s,
            "send_window_s": self.send_window_s,
            "poll_s": self.poll_s,
            "backoff_s": self.backoff_s,
            "cash_tolerance": self.cash_tolerance,
            "share_tolerance": self.share_tolerance,
        }
