"""What a broker and the market charge for a trade: the cost and fill model of the env.

`CostModel` is the nested part of `EnvConfig` (``EnvConfig.costs``) that holds every
cost term beyond the commission rate per side (``EnvConfig.buy_cost``/``sell_cost``,
which stay where they were). Every term defaults to "off", so ``CostModel()`` is the
flat-rate env of before. The rules, as `market_envs.kernel`'s step kernel applies them
to one order of q shares of one stock filled at the open p of bar k:

- **Commission** per order: ``rate x q x p + commission_per_share x q``, at least
  ``commission_min`` and at most ``commission_max_rate x q x p`` (when set); nothing
  for an order that does not fill. A sale never pays more commission than is left of
  its proceeds after spread and impact.
- **Half-spread** h (a fraction of p): buys pay ``h x q x p``, sells receive that much
  less. ``spread_model="fixed"``: ``spread_bps`` for every stock; ``"per_ticker"``:
  ``spread_bps_per_ticker`` in the order of ``data.tickers``; ``"high_low"``: estimated
  from the bars' high, low and close by Abdi & Ranaldo's estimator (see
  `abdi_ranaldo_half_spread`), over the ``spread_window`` bars before bar k.
- **Market impact**, the square-root law: the fill moves the price against the order
  by ``impact_eta x sigma_day x sqrt(q / ADV)`` (a fraction of p, paid like the
  half-spread), with sigma_day the daily volatility and ADV the average daily volume,
  both from the ``impact_window_days`` days of bars before bar k (see
  `impact_coefficient`). Spread plus impact never exceed 1 (a sale at a price >= 0).
- **Participation cap**: at most ``participation x volume`` of bar k fills (whole
  shares in shares mode); the rest of the order is dropped, not carried over, and the
  env reports it (``info["unfilled_value"]``, ``info["unfilled_shares"]``). A bar
  without volume fills nothing.
- **Borrow fee**: ``borrow_rate`` a year on the short notional (short shares x the
  close), accrued every bar: a bar is ``1 / (252 x bars_per_day)`` of a year, with
  `bars_per_day` counted from the data's timestamps (1 for daily bars, 390 for full
  sessions of minute bars).

Everything the tables need from the data (half-spreads, volatility, volume) comes
from bars strictly before the fill bar (for a period cut from a longer panel, its
earlier bars too: `MarketData.lookback`), except the participation cap, which reads
the fill bar's own volume, as a broker's fill would (zipline's volume-share slippage
does the same): an order never depends on it, only how much of it fills.

Named cost models (`cost_model`, `COST_MODELS`) bundle the commission rates with a
`CostModel` and say which published figures they rest on; `described` names any rates
and terms by the named model they equal or come nearest to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

from market_envs.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where the tables are built, not for the configs
    import pandas as pd
    from torch import Tensor


class ChargedRules(Protocol):
    """What `NamedCosts` reads and sets in an env config (`market_envs.config.EnvConfig`, which
    imports this module: the config is named by its shape, not imported back)."""

    buy_cost: float
    sell_cost: float
    costs: CostModel


Rules = TypeVar("Rules", bound=ChargedRules)

SPREAD_MODELS = ("fixed", "per_ticker", "high_low")
TRADING_DAYS = 252
SQRT_LAW_ETA = 1.0
"""The square-root law's prefactor (Y in the literature) used by the named models.

Tóth, Lempérière, Deremble, de Lataillade, Kockelkoren & Bouchaud, "Anomalous price
impact and the critical nature of liquidity in financial markets", Phys. Rev. X 1,
021006 (2011), find impact = Y sigma sqrt(Q/V) with Y "of order unity" across futures
and equities; Bouchaud, Bonart, Donier & Gould, "Trades, Quotes and Prices" (CUP
2018, ch. 12) quote Y between 0.5 and 1 for equities. 1 is the cautious end. (Almgren,
Thum, Hauptmann & Li, "Direct estimation of equity market impact", Risk 2005, fit a
3/5 power instead, eta = 0.142 for the temporary part on a participation-rate scale,
which is not this formula's eta.)"""


class Terms(NamedTuple):
    """The terms of a `CostModel` that are on (`CostModel.terms`); a term that is off costs a
    step nothing: the env builds no table for it and the kernels take no pass for it."""

    per_order_commission: bool  # a fee per share, a minimum or a cap: the commission is priced per order
    spread: bool  # a half-spread table (fixed, per ticker or high-low)
    impact: bool  # the square-root impact table
    participation: bool  # the cap on the share of a bar's volume that fills
    borrow: bool  # the fee on the short notional, charged at the close (not in the fill)

    @property
    def in_fill(self) -> bool:
        """Whether the fill charges more than the commission rate per side (the fill with costs)."""
        return self.per_order_commission or self.spread or self.impact or self.participation


@dataclass(frozen=True)
class CostModel:
    """Cost and fill terms charged on top of the commission rate per side (``EnvConfig.buy_cost``/``sell_cost``).

    Every default is "off". See the module docstring of `market_envs.costs` for the rules.

    :param commission_per_share: fee per share traded, in the data's currency (IBKR Pro Fixed: 0.005 USD).
    :param commission_min: the least commission of one order (one stock, one step) that fills (IBKR Pro Fixed: 1 USD).
    :param commission_max_rate: the most commission of one order as a fraction of its value (IBKR: 0.01); None: no cap.
    :param spread_model: ``"fixed"`` (``spread_bps``), ``"per_ticker"`` (``spread_bps_per_ticker``) or
        ``"high_low"`` (Abdi & Ranaldo's estimate from past bars' high, low and close; needs data with high and low).
    :param spread_bps: the half-spread in basis points of the price, ``"fixed"`` model.
    :param spread_bps_per_ticker: half-spreads in basis points, one per ticker in the order of ``data.tickers``,
        ``"per_ticker"`` model.
    :param spread_window: ``"high_low"`` model: bars (pairs of consecutive bars) averaged by the estimator.
    :param impact_eta: the square-root law's prefactor: impact = eta x daily volatility x sqrt(shares / average
        daily volume); 0 charges no impact. `SQRT_LAW_ETA` (1.0) is the documented default of the named models.
        Needs data with volume.
    :param impact_window_days: days of past bars behind the volatility and the average daily volume.
    :param participation: the most of a bar's volume one order may fill, in (0, 1]; None: no cap. Needs data
        with volume.
    :param borrow_rate: annual fee on the short notional (0.005 = 0.5% a year), accrued every bar.
    :param spread_scale: multiplies the ``"high_low"`` model's estimated half-spreads (the other
        models scale their basis points); `scaled` sets it for backtests at a multiple of the costs.
    """

    commission_per_share: float = 0.0
    commission_min: float = 0.0
    commission_max_rate: float | None = None
    spread_model: Literal["fixed", "per_ticker", "high_low"] = "fixed"
    spread_bps: float = 0.0
    spread_bps_per_ticker: tuple[float, ...] = ()
    spread_window: int = 390
    impact_eta: float = 0.0
    impact_window_days: int = 20
    participation: float | None = None
    borrow_rate: float = 0.0
    spread_scale: float = 1.0

    def __post_init__(self) -> None:
        for key in (
            "commission_per_share",
            "commission_min",
            "spread_bps",
            "impact_eta",
            "borrow_rate",
            "spread_scale",
        ):
            _non_negative(key, getattr(self, key))
        if self.commission_max_rate is not None and not (0.0 < self.commission_max_rate <= 1.0):
            raise ConfigError(
                f"EnvConfig.costs.commission_max_rate must be in (0, 1] or None, got {self.commission_max_rate}"
            )
        if self.spread_model not in SPREAD_MODELS:
            raise ConfigError(f"EnvConfig.costs.spread_model must be one of {SPREAD_MODELS}, got {self.spread_model!r}")
        if isinstance(self.spread_bps_per_ticker, (str, int, float)):
            raise ConfigError(
                f"EnvConfig.costs.spread_bps_per_ticker must be a list of numbers, got {self.spread_bps_per_ticker!r}"
            )
        object.__setattr__(self, "spread_bps_per_ticker", tuple(float(x) for x in self.spread_bps_per_ticker))
        for bps in self.spread_bps_per_ticker:
            _non_negative("spread_bps_per_ticker", bps)
        if self.spread_model == "per_ticker" and not self.spread_bps_per_ticker:
            raise ConfigError("EnvConfig.costs.spread_model='per_ticker' needs spread_bps_per_ticker (one per ticker)")
        if self.spread_bps >= 1e4 or any(bps >= 1e4 for bps in self.spread_bps_per_ticker):
            raise ConfigError("EnvConfig.costs.spread_bps: a half-spread must be below 10000 bps (the whole price)")
        for key in ("spread_window", "impact_window_days"):
            value = getattr(self, key)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ConfigError(f"EnvConfig.costs.{key} must be a positive integer, got {value!r}")
        if self.participation is not None and not (0.0 < self.participation <= 1.0):
            raise ConfigError(f"EnvConfig.costs.participation must be in (0, 1] or None, got {self.participation}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CostModel:
        """A `CostModel` from a dict (a TOML table, a JSON sidecar); unknown keys raise `ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"unknown EnvConfig.costs key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}"
            )
        return cls(**dict(values))

    def terms(self) -> Terms:
        """Which terms are on: the one place that decides it, for the fill's tables, rules and
        kernels and for the C kernel's version (`market_envs.fill_inputs`: `market_tables`,
        `fill_rules`; `market_envs.native_fill.term_flags`)."""
        return Terms(
            per_order_commission=(
                self.commission_per_share > 0 or self.commission_min > 0 or self.commission_max_rate is not None
            ),
            spread=self.spread_model != "fixed" or self.spread_bps > 0,
            impact=self.impact_eta > 0,
            participation=self.participation is not None,
            borrow=self.borrow_rate > 0,
        )

    @property
    def needs_volume(self) -> tuple[str, ...]:
        """The keys set here that read the data's volume."""
        terms = self.terms()
        return tuple(key for key, on in (("impact_eta", terms.impact), ("participation", terms.participation)) if on)

    def scaled(self, multiple: float) -> CostModel:
        """This model with every charge times `multiple` (>= 0): the fee per share, the minimum
        and the cap of the commission, the half-spread, the impact's eta and the borrow rate.

        The participation cap is a fill rule, not a charge, and stays as it is; a
        half-spread is kept below the whole price (10000 bps)."""
        k = _multiple(multiple)
        cap = None if self.commission_max_rate is None or k == 0 else min(1.0, self.commission_max_rate * k)
        below_price = 1e4 * (1.0 - 1e-12)
        return replace(
            self,
            commission_per_share=self.commission_per_share * k,
            commission_min=self.commission_min * k,
            commission_max_rate=cap,
            spread_bps=min(self.spread_bps * k, below_price),
            spread_bps_per_ticker=tuple(min(bps * k, below_price) for bps in self.spread_bps_per_ticker),
            spread_scale=self.spread_scale * k,
            impact_eta=self.impact_eta * k,
            borrow_rate=self.borrow_rate * k,
        )

    def without_volume(self) -> CostModel:
        """This model for a close-only series (a benchmark): the terms that read volume, high
        or low (impact, participation cap, the ``"high_low"`` spread) left out."""
        spread = {"spread_model": "fixed", "spread_bps": 0.0} if self.spread_model == "high_low" else {}
        return replace(self, impact_eta=0.0, participation=None, **spread)


def _multiple(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"a cost multiple must be a finite number >= 0, got {value!r}")
    return float(value)


def _non_negative(key: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"EnvConfig.costs.{key} must be a finite number >= 0, got {value!r}")


# --------------------------------------------------------------------- named models


@dataclass(frozen=True)
class NamedCosts:
    """A named cost model: the commission rates per side and a `CostModel`, with their sources."""

    name: str
    buy_cost: float
    sell_cost: float
    costs: CostModel = field(default_factory=CostModel)
    sources: str = ""

    def __post_init__(self) -> None:
        for key in ("buy_cost", "sell_cost"):
            rate = getattr(self, key)
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (0.0 <= rate < 1.0):
                raise ConfigError(f"EnvConfig.{key} must be in [0, 1), got {rate!r}")
        if isinstance(self.costs, Mapping):
            object.__setattr__(self, "costs", CostModel.from_mapping(self.costs))

    def apply(self, config: Rules) -> Rules:
        """`config` with this model's commission rates and cost terms (its other rules kept)."""
        return replace(config, buy_cost=self.buy_cost, sell_cost=self.sell_cost, costs=self.costs)

    def with_overrides(self, values: Mapping[str, Any]) -> NamedCosts:
        """This model with some keys replaced: ``buy_cost``, ``sell_cost`` or any `CostModel` key
        (``--cost-set participation=0.05``). Unknown keys and bad values raise `ConfigError`."""
        if not values:
            return self
        rates = {k: v for k, v in values.items() if k in ("buy_cost", "sell_cost")}
        for key, rate in rates.items():
            if isinstance(rate, bool) or not isinstance(rate, (int, float)):
                raise ConfigError(f"EnvConfig.{key} must be in [0, 1), got {rate!r}")
        terms = {k: v for k, v in values.items() if k not in rates}
        try:
            costs = CostModel.from_mapping({**self.as_dict()["costs"], **terms})
        except (TypeError, ValueError) as err:  # a string where a number belongs
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"EnvConfig.costs: bad value in {terms!r}: {err}") from None
        return replace(self, name=_overridden(self.name, values), costs=costs, **rates)

    def scaled(self, multiple: float) -> NamedCosts:
        """This model with every charge times `multiple`: the commission rates and `CostModel.scaled`."""
        k = _multiple(multiple)
        return replace(
            self,
            name=f"{self.name} x {k:g}",
            buy_cost=min(self.buy_cost * k, 1.0 - 1e-12),
            sell_cost=min(self.sell_cost * k, 1.0 - 1e-12),
            costs=self.costs.scaled(k),
        )

    @property
    def charges_nothing(self) -> bool:
        """Whether no trade and no position ever pays anything under this model."""
        c = self.costs
        spread = c.terms().spread and (
            c.spread_scale > 0
            if c.spread_model == "high_low"
            else c.spread_bps > 0 or any(b > 0 for b in c.spread_bps_per_ticker)
        )
        return not (
            self.buy_cost
            or self.sell_cost
            or c.commission_per_share
            or c.commission_min
            or spread
            or c.impact_eta
            or c.borrow_rate
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON- and TOML-able form: name, rates, the `CostModel` keys (lists for tuples), sources."""
        from dataclasses import asdict

        terms = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.costs).items()}
        return {
            "name": self.name,
            "buy_cost": self.buy_cost,
            "sell_cost": self.sell_cost,
            "costs": terms,
            "sources": self.sources,
        }

    @classmethod
    def from_config(cls, config: ChargedRules, name: str | None = None) -> NamedCosts:
        """The cost part of an env config (its rates and `CostModel`) as a model named `name`
        (None: named by what it charges, `described`)."""
        if name is None:
            return described(float(config.buy_cost), float(config.sell_cost), config.costs)
        return cls(name, float(config.buy_cost), float(config.sell_cost), config.costs)


def _overridden(name: str, values: Mapping[str, Any]) -> str:
    """A model's name with the keys set over it: ``retail (participation=0.05)``."""
    changed = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return f"{name} ({changed})"


COST_MODELS: dict[str, NamedCosts] = {
    "zero": NamedCosts("zero", 0.0, 0.0, CostModel(), "No cost at all: a ceiling, for learning checks."),
    "flat": NamedCosts(
        "flat",
        0.001,
        0.001,
        CostModel(),
        "The env's default: 0.1% of the value traded per side, nothing else (FinRL's default rate).",
    ),
    "retail": NamedCosts(
        "retail",
        0.0,
        0.0,
        CostModel(
            commission_per_share=0.005,
            commission_min=1.0,
            commission_max_rate=0.01,
            spread_model="fixed",
            spread_bps=2.0,
            impact_eta=SQRT_LAW_ETA,
            impact_window_days=20,
            participation=None,
            borrow_rate=0.005,
        ),
        "Commission: Interactive Brokers Pro Fixed pricing for US stocks, USD 0.005 a share, at least USD 1.00 "
        "and at most 1% of the trade value per order (interactivebrokers.com/en/pricing/commissions-stocks.php; "
        "regulatory and exchange fees left out). Half-spread: 2 bps, a marketable order crossing half of a "
        "quoted spread of 4 bps, above the one-cent spreads of large caps priced over USD 50 (0.1-1 bp) and "
        "cautious for the rest of the NASDAQ-100. Impact: the square-root law with eta = 1 (SQRT_LAW_ETA; "
        "Toth et al. 2011), negligible at retail sizes. Borrow: 0.5% a year, twice the 0.25% value-weighted "
        "average fee of general-collateral stocks in D'Avolio, 'The market for borrowing stock', JFE 66 (2002), "
        "since retail brokers keep part of the lending fee. No participation cap: retail orders are small.",
    ),
    "institutional": NamedCosts(
        "institutional",
        0.0,
        0.0,
        CostModel(
            commission_per_share=0.001,
            commission_min=0.35,
            commission_max_rate=0.01,
            spread_model="high_low",
            spread_window=390,
            impact_eta=SQRT_LAW_ETA,
            impact_window_days=20,
            participation=0.1,
            borrow_rate=0.0025,
        ),
        "Commission: Interactive Brokers Pro Tiered pricing for US stocks, its tier for 20-100 million shares a "
        "month, USD 0.0010 a share, at least USD 0.35 and at most 1% of the trade value per order (the tiers: "
        "<= 300k shares USD 0.0035, <= 3M 0.0020, <= 20M 0.0015, <= 100M 0.0010, above 0.0005; "
        "interactivebrokers.com/en/pricing/commissions-stocks.php; exchange, clearing and regulatory fees left "
        "out). Half-spread: estimated from the data's high, low and close (Abdi & Ranaldo 2017) over the last "
        "390 bars (a session of minutes). Impact: the square-root law with eta = 1 (SQRT_LAW_ETA: Toth et al. "
        "2011; Bouchaud et al. 2018), daily volatility and volume over 20 days. Participation: at most 10% of a "
        "bar's volume, the common ceiling of percent-of-volume execution algorithms (zipline's default is "
        "2.5%). Borrow: 0.25% a year, the value-weighted average fee of general-collateral stocks in D'Avolio "
        "(2002). Needs data with high, low and volume.",
    ),
}


def described(buy_cost: float, sell_cost: float, costs: CostModel) -> NamedCosts:
    """Commission rates and cost terms as a model whose name says what they charge.

    - The named model (`COST_MODELS`) they equal, with its sources: ``institutional``.
    - Rates alone (every `CostModel` term off): ``flat 0.05% per side`` (or ``flat 0.05% per
      buy, 0.1% per sell``).
    - Otherwise the named model from which the fewest keys differ (ties: a model that charges
      something, then the order of `COST_MODELS`), with those keys in the form of
      `NamedCosts.with_overrides`: ``retail (spread_bps=1.0)``, which is the name
      ``--costs retail --cost-set spread_bps=1.0`` gives the same model.
    """
    values = {"buy_cost": buy_cost, "sell_cost": sell_cost, **_terms(costs)}
    differences = []
    for rank, model in enumerate(COST_MODELS.values()):
        known = {"buy_cost": model.buy_cost, "sell_cost": model.sell_cost, **_terms(model.costs)}
        changed = {k: v for k, v in values.items() if v != known[k]}
        if not changed:
            return model
        differences.append(((len(changed), model.charges_nothing, rank), model, changed))
    if costs == CostModel():
        rates = (
            f"{100 * buy_cost:.4g}% per side"
            if buy_cost == sell_cost
            else f"{100 * buy_cost:.4g}% per buy, {100 * sell_cost:.4g}% per sell"
        )
        return NamedCosts(f"flat {rates}", buy_cost, sell_cost, costs, "A commission rate per side, nothing else.")
    _, nearest, changed = min(differences, key=lambda row: row[0])
    return NamedCosts(_overridden(nearest.name, changed), buy_cost, sell_cost, costs, nearest.sources)


def _terms(costs: CostModel) -> dict[str, Any]:
    return {f.name: getattr(costs, f.name) for f in fields(costs)}


def cost_model(name: str) -> NamedCosts:
    """The named cost model `name`; an unknown name raises `ConfigError` listing the known ones."""
    try:
        return COST_MODELS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown cost model {name!r}; known: {', '.join(COST_MODELS)}") from None


def check_costs_for_data(costs: CostModel, data: Any) -> None:
    """Refuse, with one `ConfigError`, cost terms that need columns `data` (a `MarketData`) lacks
    (close-only data), or a per-ticker list of the wrong length. The env checks this when it is
    built; a command that builds its envs later (on dask workers) calls it first."""
    unavailable = set(data.unavailable_features)
    lacking = [key for key in costs.needs_volume if "volume" in unavailable]
    if lacking:
        raise ConfigError(
            f"EnvConfig.costs.{lacking[0]} needs volume, which data set {data.name!r} lacks "
            f"(close-only data: {', '.join(data.meta.get('missing_columns', ()))} missing)"
        )
    if costs.spread_model == "high_low" and {"high", "low"} & unavailable:
        raise ConfigError(
            f"EnvConfig.costs.spread_model='high_low' needs high and low prices, which data set "
            f"{data.name!r} lacks; use 'fixed' or 'per_ticker'"
        )
    if costs.spread_model == "per_ticker" and len(costs.spread_bps_per_ticker) != data.num_tickers:
        raise ConfigError(
            f"EnvConfig.costs.spread_bps_per_ticker has {len(costs.spread_bps_per_ticker)} values; "
            f"data set {data.name!r} has {data.num_tickers} tickers"
        )


# --------------------------------------------------------------------- causal tables


def bars_per_day(timestamps: pd.DatetimeIndex) -> int:
    """Bars in a typical session: the median count of bars per exchange date (1 for daily bars)."""
    import numpy as np

    if len(timestamps) == 0:
        return 1
    _, counts = np.unique(timestamps.normalize().asi8, return_counts=True)
    return max(1, int(np.median(counts)))


def _trailing_mean(x: Tensor, valid: Tensor, window: int) -> Tensor:
    """Row k: the mean of ``x[j]`` over valid rows j in [k - window, k - 1] (0 where none).

    `x` and `valid` are [T, N]; exclusive prefix sums make it one pass, causal by
    construction (row k never reads row k or later).
    """
    import torch

    zero = torch.zeros_like(x[:1])
    total = torch.cat([zero, torch.cumsum(torch.where(valid, x, torch.zeros_like(x)), 0)])  # [T + 1]
    count = torch.cat([zero, torch.cumsum(valid.to(x.dtype), 0)])
    rows = torch.arange(x.shape[0], device=x.device)
    lo = (rows - window).clamp_min(0)
    sums = total[rows] - total[lo]
    counts = count[rows] - count[lo]
    return torch.where(counts > 0, sums / counts.clamp_min(1.0), torch.zeros_like(sums))


def abdi_ranaldo_half_spread(high: Tensor, low: Tensor, close: Tensor, window: int) -> Tensor:
    """Half-spread estimate for fills at each bar, from earlier bars only: float64 [T, N].

    Abdi & Ranaldo, "A Simple Estimation of Bid-Ask Spreads from Daily Close, High, and
    Low Prices", Review of Financial Studies 30(12), 4437-4480 (2017): with c the log
    close and eta the mid-range ``(log high + log low) / 2``, the squared relative spread
    is ``S^2 = 4 E[(c_j - eta_j)(c_j - eta_{j+1})]``. Row k averages the products of the
    (up to) `window` pairs (j, j+1) with j + 1 <= k - 1, sets a negative mean to 0
    (their treatment of negative estimates), and returns the half-spread ``S / 2``. Rows
    without a complete pair before them are 0.

    Why this estimator and not Corwin & Schultz (2012, Journal of Finance 67(2)): it
    uses the close, which every bar has, needs no correction for overnight returns
    (Corwin & Schultz adjust the high and low for them) and, in Abdi & Ranaldo's
    comparison with TAQ spreads, correlates better with the effective spread and is
    less biased in illiquid stocks.
    """
    import torch

    c = torch.log(close.double())
    mid = 0.5 * (torch.log(high.double()) + torch.log(low.double()))
    products = torch.zeros_like(c)
    products[1:] = 4.0 * (c[:-1] - mid[:-1]) * (c[:-1] - mid[1:])  # row j + 1: pair (j, j + 1), known at bar j + 1
    valid = torch.zeros_like(c, dtype=torch.bool)
    valid[1:] = True
    mean = _trailing_mean(products, valid, window)  # rows j + 1 <= k - 1: the pairs known before bar k
    return 0.5 * torch.sqrt(mean.clamp_min(0.0))


def impact_coefficient(close: Tensor, volume: Tensor, window: int, eta: float) -> Tensor:
    """The impact fraction per sqrt(share) for fills at each bar, from earlier bars only: float64 [T, N].

    The square-root law: impact = eta x sigma_day x sqrt(q / ADV). Over the `window`
    bars before bar k, sigma_bar is the root mean square of the close-to-close log
    returns and v_bar the mean volume per bar; with B bars a day, sigma_day =
    sigma_bar sqrt(B) and ADV = v_bar B, so impact = eta x sigma_bar x sqrt(q / v_bar):
    row k holds ``eta x sigma_bar / sqrt(v_bar)``. Rows without a past return or
    without volume in the window are 0 (no impact can be estimated there).
    """
    import torch

    c = torch.log(close.double().clamp_min(1e-300))
    squared = torch.zeros_like(c)
    squared[1:] = (c[1:] - c[:-1]) ** 2
    has_return = torch.zeros_like(c, dtype=torch.bool)
    has_return[1:] = True
    variance = _trailing_mean(squared, has_return, window)
    mean_volume = _trailing_mean(volume.double().clamp_min(0.0), torch.ones_like(has_return), window)
    ok = mean_volume > 0
    return torch.where(ok, eta * torch.sqrt(variance) / torch.sqrt(mean_volume.clamp_min(1e-300)), torch.zeros_like(c))
