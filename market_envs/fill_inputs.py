"""What the fill reads and gives: the market's per-bar cost tables (`Market`, `market_tables`),
the fill's constants (`FillRules`, `fill_rules`) and its result (`Fill`). `market_envs.fill`
settles the orders with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from market_envs import native_fill
from market_envs.costs import CostModel, abdi_ranaldo_half_spread, impact_coefficient

if TYPE_CHECKING:
    from market_envs.data.panel import MarketData


class Market(NamedTuple):
    """What the cost terms read at the fill bar, one row per sub-environment (None: term off).

    The env holds the terms' per-bar tables in this shape too (`market_tables`: [T, N], or
    [1, N] for a half-spread that is the same every bar, and no `bars`); `fill_orders` takes
    their rows at the fill bars for the torch kernels, while the C kernel reads the tables in
    place: with `bars`, the fields are the tables and sub-environment e reads their row
    ``bars[e]``.
    """

    half_spread: Tensor | None  # [E, N] float64, or [1, N] when the same every bar (the tables: float32)
    impact: Tensor | None  # [E, N] float64 (the table: float32)
    fill_cap: Tensor | None  # [E, N] float64, the most shares an order fills
    bars: Tensor | None = None  # int64 [E]: the fill bars, when the fields above are tables


class Fill(NamedTuple):
    """What a fill did to each sub-environment: its account after the fill and what it traded and paid."""

    cash: Tensor  # [E], after the fill
    holdings: Tensor  # [E, N]
    traded: Tensor  # [E], value traded at the fill price
    commission: Tensor  # [E], the cost terms paid in this fill
    spread: Tensor
    impact: Tensor
    ordered: Tensor  # [E], value of the orders before the participation cap
    unfilled_value: Tensor  # [E], value the participation cap left unfilled
    unfilled_shares: Tensor  # [E]


@dataclass(frozen=True)
class FillRules:
    """The constants of the fill (static under torch.compile), built by `fill_rules`."""

    weights_mode: bool = False  # the orders are fractional (shares mode rounds the buys down to whole shares)
    buy_cost: float = 0.0  # the commission rate per side, a fraction of the value
    sell_cost: float = 0.0
    per_order_commission: bool = False  # a fee per share, a minimum or a cap: commission per order
    commission_per_share: float = 0.0
    commission_min: float = 0.0
    commission_max_rate: float = 0.0  # 0: no cap
    has_costs: bool = False  # any term of CostModel on in the fill: `_fill_with_costs` or its kin, not the flat rate
    fused: bool = False  # the fill runs under torch.compile (see `dot`)
    native: bool = False  # the cost terms take the C kernel (the CPU, where it could be built)
    native_terms: int = 0  # the C kernel's version: `term_flags` of the terms on and the action mode


def fill_rules(
    costs: CostModel,
    buy_cost: float,
    sell_cost: float,
    weights_mode: bool,
    device: torch.device,
    fused: bool,
    prices: torch.dtype = torch.float32,
) -> FillRules:
    """The fill's constants for the cost model `costs`, the commission rates per side, the action
    mode, the env's `device` and whether its step runs under torch.compile (`fused`); the C kernel
    is taken on the CPU when a term of `costs` is on in the fill, the kernel is available and the
    open table's dtype `prices` is the one it reads (`INTERFACE`: the panel's float32)."""
    terms = costs.terms()
    native = (
        terms.in_fill and device.type == "cpu" and prices == native_fill.PRICES_DTYPE and native_fill.native_available()
    )
    return FillRules(
        weights_mode=weights_mode,
        buy_cost=float(buy_cost),
        sell_cost=float(sell_cost),
        per_order_commission=terms.per_order_commission,
        commission_per_share=float(costs.commission_per_share),
        commission_min=float(costs.commission_min),
        commission_max_rate=float(costs.commission_max_rate or 0.0),
        has_costs=terms.in_fill,
        fused=bool(fused),
        native=native,
        native_terms=native_fill.term_flags(terms, weights_mode=weights_mode),
    )


def market_tables(
    data: MarketData, costs: CostModel, weights_mode: bool, bars_per_day: int, device: torch.device
) -> Market:
    """The per-bar tables of `CostModel`'s terms on `data` (on `device`; None for a term that is
    off), [T, N], or [1, N] for a half-spread that is the same every bar. Each row is
    computed from the bars before it, but for the participation cap, which reads its own bar's
    volume (`market_envs.costs`).

    The trailing estimates (the high-low half-spread, the impact's volatility and
    volume) also read the bars before the panel's first (`MarketData.lookback`, a
    period's earlier bars), so that the first bars of a validation or test period are
    charged like the others, not as if nothing had traded before them.

    The half-spread and impact tables are float32, the precision of the prices their estimates
    come from (a fixed or per-ticker half-spread is rounded to float32 too: 5 bp is
    0.000500000024): half the bytes of float64, which the C kernel reads at random bars
    (benchmarks/RESULTS.md, "The half-spread and impact tables in float32"); the kernels widen a
    row to float64 exactly before they use it. The fill cap stays float64: a cap above 2**24
    shares is not a float32."""
    terms = costs.terms()
    windows = [costs.spread_window + 1] if terms.spread and costs.spread_model == "high_low" else []
    if terms.impact:
        windows.append(costs.impact_window_days * bars_per_day + 1)
    features, earlier = data.features_with_lookback(max(windows, default=0))

    def column(name: str) -> Tensor:
        data.feature(name)  # a missing feature raises the panel's own error
        return features[:, :, data.feature_names.index(name)]

    half_spread = None
    if terms.spread and costs.spread_model == "high_low":
        half_spread = (
            abdi_ranaldo_half_spread(column("high"), column("low"), column("close"), costs.spread_window)[earlier:]
            .mul(costs.spread_scale)
            .clamp_max(1.0)
            .float()
            .contiguous()
        )
    elif terms.spread:
        per_ticker = costs.spread_model == "per_ticker"
        bps = costs.spread_bps_per_ticker if per_ticker else (costs.spread_bps,) * data.num_tickers
        half_spread = (torch.tensor([bps], dtype=torch.float64, device=device) * 1e-4).float()
    impact = None
    if terms.impact:
        window = costs.impact_window_days * bars_per_day
        impact = impact_coefficient(column("close"), column("volume"), window, costs.impact_eta)[earlier:]
        impact = impact.float().contiguous()
    fill_cap = None
    if terms.participation:
        fill_cap = data.volume.double().clamp_min(0.0) * costs.participation
        if not weights_mode:
            fill_cap = torch.floor(fill_cap)
        fill_cap = fill_cap.contiguous()
    return Market(half_spread=half_spread, impact=impact, fill_cap=fill_cap)
