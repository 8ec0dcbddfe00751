"""The fill with its costs, for every device: the one home of the rule.

A step's orders (sells and buys in shares, after the env's masks) settle here at the fill
price: the participation cap, then the sales, then the buys within the cash, charging every term of
`market_envs.costs.CostModel` (`market_envs.env`'s module docstring states the rules in words;
`tests/reference_env.py` is the plain scalar version that the tests hold this one to). The
step calls one function, `fill_orders`, which picks the implementation:

- the flat rate per side, when no term of `CostModel` is on (`_fill_flat`): exact and linear;
- the C kernel, on the CPU (`_fill_with_costs_native`, eager and under torch.compile alike):
  `fill_costs.c`, built once per machine with its C compiler and bound here; it reads the fill
  prices from the panel's float32 open table in place (a panel of another dtype takes the torch
  kernels);
- elsewhere (CUDA, or a CPU where the C kernel cannot be built) the torch kernels:
  `_fill_with_costs` eager and `_fill_with_costs_fused` under torch.compile, the same rules
  arranged for each (tests/test_native_fill.py holds all three equal).

What a term needs lives here too: its table from the data (`market_tables`, read at the fill
bar), its constants (`FillRules`, `fill_rules`), and its bit of the C kernel's version
(`TERM_FLAGS`, from `CostModel.terms`). Beside the fill, the same rules answer two questions
for callers: which purchases the cash pays for (`within_cash`) and what each stock's fill
cost, by term (`fill_costs`). Adding a term touches `market_envs/costs.py`, this module and
`fill_costs.c` (docs/extending.md, "Add a cost term").

**The C kernel.** It exists for speed: the exact rules need about 14 sums per
sub-environment, which torch's kernels pay for with many passes over memory (eager) or with
sums ended lane by lane (inductor), while the C kernel takes a row in two passes with one
register per sum, in a version specialised for the terms that are on. With it the step with
every term costs about what the flat-rate step costs (benchmarks/RESULTS.md, "Costs in the env
step", fifth pass). CUDA, and a CPU where it cannot be built, keep the torch kernels.

The library is built with ``$CC`` (default ``cc``) into ``$XDG_CACHE_HOME/market_envs/native``
(default ``~/.cache/...``), one file per source, flags and CPU, so that a shared home directory
serves hosts of different CPUs (it is built for the CPU it runs on). Set
``MARKET_ENVS_NATIVE=0`` to use the torch kernels on the CPU too; a machine without a compiler
falls back to them with one warning (and fails tests/test_native_fill.py, which skips its tests of
the kernel only under ``MARKET_ENVS_NATIVE=0``).

The kernel's interface is declared once, in `INTERFACE`: the ctypes types (`argtypes`), the
operator's schema (`schema`) and the C call (`call_source`) are generated from it, and the tests
read fill_costs.c's signature and its ``TERM_*`` bits and fail when they differ from `INTERFACE`
and `TERM_FLAGS`. Which terms are on comes from `CostModel.terms` (`term_flags`).

**One side per stock, one signed array for the C kernel.** A stock is sold or bought in a fill,
never both: the orders reach `fill_orders` as its two sides, sells and buys (>= 0, at most one of
them non-zero per stock), and a NaN order is no order, as a NaN action is. The flat rate and the
torch kernels take the sides as they are, each made 0 where NaN (`order_sides`); the C kernel
takes one signed array, ``buys - sells`` (+ bought, - sold), formed in `fill_orders` and split in
its first pass: the sale ``max(-order, 0)``, the purchase ``max(order, 0)``, neither for a NaN
order (NaN on either side), the same fill. (The env's orders are NaN only where its prices or its
book are: a panel with a non-positive or NaN open, which the data loaders refuse.) The one signed
array and the prices read in place at the fill bars are what the compiled step writes less before
the C kernel's call: one [E, N] array where it wrote three, the subtraction fused into the loop
that makes the sides (benchmarks/RESULTS.md, "Signed orders and prices in place"); the flat rate
keeps the sides, so the eager flat step makes no signed array to split again.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import math
import os
import platform
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from torch import Tensor

from market_envs.costs import CostModel, Terms, abdi_ranaldo_half_spread, impact_coefficient

if TYPE_CHECKING:
    from market_envs.data.panel import MarketData


# --------------------------------------------------------------------- what the fill reads and gives


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


class _Side(NamedTuple):
    """The orders of one side (sales, or purchases) and what they cost, each [E]."""

    value: Tensor  # at the fill price
    commission: Tensor
    slipped: Tensor  # half-spread + impact
    spread: Tensor  # the half-spread's part of `slipped` (0 where not asked for)
    impact: Tensor  # the impact's part


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
    native = terms.in_fill and device.type == "cpu" and prices == PRICES_DTYPE and native_available()
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
        native_terms=term_flags(terms, weights_mode=weights_mode),
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


def _row(table: Tensor | None, t: Tensor | int) -> Tensor | None:
    """Rows `t` (int64 [E]) of a per-bar cost table, [E, N] float64 (widened exactly); a [1, N]
    table is the same every bar (`t` unread, and may be an int)."""
    if table is None:
        return None
    if table.shape[0] == 1:
        return table.double()
    return table.index_select(0, t).double()


def _at_bars(tables: Market, bars: Tensor, rules: FillRules) -> Market:
    """The market at the fill bars `bars` [E] for the kernel that `rules` takes: the tables as
    they are with `bars` for the C kernel, which reads them in place, else their rows."""
    if rules.native:
        return Market(tables.half_spread, tables.impact, tables.fill_cap, bars=bars)
    return Market(_row(tables.half_spread, bars), _row(tables.impact, bars), _row(tables.fill_cap, bars))


# --------------------------------------------------------------------- the fill


def fill_orders(
    cash: Tensor,
    holdings: Tensor,
    sells: Tensor,
    buys: Tensor,
    price: Tensor,
    open_prices: Tensor,
    tables: Market,
    bars: Tensor,
    rules: FillRules,
) -> Fill:
    """Settle the orders `sells` and `buys` (shares, float64 [E, N], >= 0, at most one of them
    non-zero per stock; a NaN is no order, see the module docstring) of accounts holding `cash`
    [E] and `holdings` [E, N] at the open of the fill bars `bars` [E]: `price` [E, N] float64,
    the rows `bars` of the open table `open_prices` [T, N] (which the C kernel reads in place
    instead); sells then buys, charging every cost term of `rules` with the market `tables`
    (`market_tables`); see `market_envs.env`'s module docstring for the rules. The one entry of
    the step into the fill: it takes the flat rate, the C kernel or a torch kernel (see the module
    docstring). `sells` and `buys` are read, never written to."""
    if rules.has_costs and rules.native:
        orders = buys - sells  # the C kernel's one signed array (fused into its producer when compiled)
        return _fill_with_costs_native(cash, holdings, orders, open_prices, _at_bars(tables, bars, rules), rules)
    sells, buys = order_sides(sells, buys, rules.fused)
    if not rules.has_costs:
        return _fill_flat(cash, holdings, sells, buys, price, rules)
    fill_with_costs = _fill_with_costs_fused if rules.fused else _fill_with_costs
    return fill_with_costs(cash, holdings, sells, buys, price, _at_bars(tables, bars, rules), rules)


def order_sides(sells: Tensor, buys: Tensor, fused: bool = False) -> tuple[Tensor, Tensor]:
    """The sides `sells` and `buys` [E, N] (>= 0, one of them 0 per stock) as the flat rate and the
    torch kernels take them, new tensors: each side where it is above 0, else +0 (a comparison
    with NaN is false), so that a NaN order, the other side 0, is no order: the torch kernels' half
    of the rule "a NaN order is no order", the C kernel's first pass the other. Exact for the
    other orders: the sides themselves, a zero as +0.

    Eager, each side by a threshold at 0 (0 for ``side <= 0``; a NaN passes) and its NaN made 0 in
    place: two passes that cost about a quarter of the `where` with a scalar, not vectorised eager
    on the CPU (benchmarks/RESULTS.md, "Signed orders and prices in place"). `fused` (under
    torch.compile): from the signed ``buys - sells`` by two `where`s, fused into the loop that makes
    the sides, so that the compiled step stores one [E, N] array for the fill's second loop, not
    two (and inductor vectorises the `where`s, while it tests `nan_to_num`'s NaN lane by lane).
    The kernels may work in place on what it gives (the flat rate does, eager)."""
    if fused:
        orders = buys - sells
        return torch.where(orders < 0.0, -orders, 0.0), torch.where(orders > 0.0, orders, 0.0)
    sells = torch.nn.functional.threshold(sells, 0.0, 0.0).nan_to_num_(nan=0.0, posinf=math.inf)
    buys = torch.nn.functional.threshold(buys, 0.0, 0.0).nan_to_num_(nan=0.0, posinf=math.inf)
    return sells, buys


def _fill_flat(cash: Tensor, holdings: Tensor, sells: Tensor, buys: Tensor, price: Tensor, rules: FillRules) -> Fill:
    """`fill_orders` at the flat commission rate per side, no other term on. Works in place on
    `sells` and `buys` (tensors of this step, `order_sides`'): eager, each operation that fills a
    new [E, N] tensor is one more allocation; compiled, the same loop either way."""
    held = holdings - sells
    sold_value = sells.mul_(price).sum(-1)  # `sells` is not read again
    sell_commission = sold_value * rules.sell_cost  # the rate is below 1: never more than the proceeds
    cash = cash + sold_value - sell_commission
    buys, wanted = _flat_buys_within_cash(buys, price, cash, rules, in_place=True)
    holdings = held.add_(buys)
    bought_value = buys.mul_(price).sum(-1)  # `buys` is not read again
    buy_commission = bought_value * rules.buy_cost
    left = cash - bought_value - buy_commission
    zero = torch.zeros_like(cash)
    return Fill(
        # the bill fits the cash up to rounding; only a debt owed before (a borrow fee) stays below 0
        cash=torch.maximum(left, cash.clamp_max(0.0)),
        holdings=holdings,
        traded=sold_value + bought_value,
        commission=sell_commission + buy_commission,
        spread=zero,
        impact=zero,
        ordered=sold_value + wanted,
        unfilled_value=zero,
        unfilled_shares=zero,
    )


def _flat_buys_within_cash(
    buys: Tensor, price: Tensor, cash: Tensor, rules: FillRules, in_place: bool = False
) -> tuple[Tensor, Tensor]:
    """`_buys_within_cash` at the flat rate per side: exact and linear, so the cash limit is one
    division. Returns the buys and the value of the full orders, [E]. `in_place`: the buys
    overwrite `buys` (which the caller no longer needs)."""
    wanted = (buys * price).sum(-1)
    needed = wanted * (1.0 + rules.buy_cost)
    scale = torch.where(needed > cash, cash.clamp_min(0.0) / needed.clamp_min(1e-300), torch.ones_like(cash))
    buys = buys.mul_(scale.unsqueeze(-1)) if in_place else buys * scale.unsqueeze(-1)
    if not rules.weights_mode:
        buys = buys.floor_()
    return buys, wanted


def _fill_with_costs(
    cash: Tensor, holdings: Tensor, sells: Tensor, buys: Tensor, price: Tensor, market: Market, rules: FillRules
) -> Fill:
    """`fill_orders` with the terms of `CostModel`: the participation cap, then the sales, then the buys
    within the cash (`_buys_within_cash`).

    Written for few passes over [E, N] memory in eager mode, where each operation is one: the
    rates of the sales and of the full buys are one tensor, sums of products are matrix
    products (`dot`), and the arithmetic works in place on tensors made in this step (an
    operation that fills a fresh [E, N] tensor costs several times one that works in place;
    benchmarks/RESULTS.md, "Costs in the env step"). Under torch.compile the kernel takes
    `_fill_with_costs_fused` instead, and on the CPU both give way to `_fill_with_costs_native`.
    """
    zero = torch.zeros_like(cash)
    unfilled_value = unfilled_shares = zero
    orders = sells + buys  # a stock is bought or sold, never both
    if market.fill_cap is not None:
        sells = sells.clamp_max_(market.fill_cap)
        buys = buys.clamp_max_(market.fill_cap)
        filled = sells + buys
        unfilled = orders.sub_(filled)
        unfilled_shares = unfilled.sum(-1)
        unfilled_value = dot(unfilled, price, rules)
        orders = filled
    # one side per stock, so one evaluation of the rates and of the commission before its caps
    # serves the sales and the full buys
    fee = _commission_before_caps(sells, buys, orders, price, rules)
    rate = _slippage(orders, market, in_place=True)
    sale = _side_costs(sells, price, rate, market, rules.sell_cost, rules, sale=True, fee=fee)
    cash = cash + sale.value - sale.commission - sale.slipped
    bought, wanted = _buys_within_cash(buys, price, cash, rate, fee, market, rules)
    if market.impact is not None:  # impact per share falls with the order: the rate of the bought shares
        rate = _slippage(bought, market)
    buy = _side_costs(bought, price, rate, market, rules.buy_cost, rules, sale=False)
    left = cash - buy.value - buy.commission - buy.slipped
    return Fill(
        # the bill fits the cash up to rounding; only a debt owed before (a borrow fee) stays below 0
        cash=torch.maximum(left, cash.clamp_max(0.0)),
        holdings=holdings - sells + bought,
        traded=sale.value + buy.value,
        commission=sale.commission + buy.commission,
        spread=sale.spread + buy.spread,
        impact=sale.impact + buy.impact,
        ordered=sale.value + wanted + unfilled_value,
        unfilled_value=unfilled_value,
        unfilled_shares=unfilled_shares,
    )


def _fill_with_costs_native(
    cash: Tensor, holdings: Tensor, orders: Tensor, open_prices: Tensor, market: Market, rules: FillRules
) -> Fill:
    """`_fill_with_costs` of the signed `orders` by the C kernel (`fill_with_costs_c`;
    `fill_with_costs_op` under torch.compile), which reads the open table `open_prices` and the
    market tables in place at `market.bars`. The arguments are named as `INTERFACE` declares them:
    a name it does not declare is an error."""
    fill = fill_with_costs_op if rules.fused else fill_with_costs_c
    holdings, sums = fill(
        orders=orders,
        holdings=holdings,
        cash=cash,
        bars=market.bars,
        open_prices=open_prices,
        half_spread=market.half_spread,
        impact=market.impact,
        fill_cap=market.fill_cap,
        buy_cost=rules.buy_cost,
        sell_cost=rules.sell_cost,
        per_share=rules.commission_per_share,
        minimum=rules.commission_min,
        max_rate=rules.commission_max_rate,
        terms=rules.native_terms,
    )
    return Fill(holdings=holdings, **dict(zip(OUTPUTS, sums.unbind(0), strict=True)))


def dot(a: Tensor, b: Tensor, rules: FillRules) -> Tensor:
    """``(a x b).sum(-1)``, [E], for `a` [E, N] and `b` [E, N] or [1, N] (both float64).

    Eager: a matrix product, one pass without an [E, N] temporary; compiled: the plain
    expression, which inductor fuses into the loop that produces `a`.
    """
    if rules.fused:
        return (a * b).sum(-1)
    if b.shape[0] == 1:
        return a @ b[0]
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).reshape(-1)


def _slippage(shares: Tensor, market: Market, in_place: bool = False) -> Tensor | None:
    """Half-spread plus impact of orders of `shares`, a fraction of the price (None: both off).

    At most 1, ``min(half_spread + impact, 1)``: impact is cut to ``1 - half_spread`` (a sale
    at a price >= 0). [E, N], or the [1, N] half-spread when it is fixed and impact is off.
    `in_place`: the rate overwrites `shares` (which the caller no longer needs).
    """
    if market.impact is None:
        return market.half_spread
    # sqrt of an exact 0 takes a slow path on x86 CPUs (several times the cost of the
    # whole term); 1e-300 changes no square root of a real order and no cost (value 0)
    rate = shares.clamp_min_(1e-300) if in_place else shares.clamp_min(1e-300)
    rate = rate.sqrt_()
    if market.half_spread is None:
        rate = rate.mul_(market.impact)
    else:  # one pass for half-spread + impact x sqrt(shares), written over the square roots
        rate = torch.addcmul(market.half_spread, rate, market.impact, out=rate)
    return rate.clamp_max_(1.0)


def _commission_before_caps(
    sells: Tensor, buys: Tensor, orders: Tensor, price: Tensor, rules: FillRules
) -> Tensor | None:
    """Each order's commission before its caps, [E, N], both sides at once (a stock is sold or
    bought, never both): ``rate x value + fee per share x shares``, at least the minimum (also where
    there is no order: the caps of `_side_costs` make that 0). None when the commission is the rate
    alone (`_side_costs` then needs no per-order commission for the buys)."""
    if not rules.per_order_commission:
        return None
    if rules.sell_cost == rules.buy_cost:
        fee = (orders * price).mul_(rules.sell_cost)
    else:
        fee = (sells * price).mul_(rules.sell_cost).addcmul_(buys, price, value=rules.buy_cost)
    if rules.commission_per_share > 0:
        fee = fee.add_(orders, alpha=rules.commission_per_share)
    if rules.commission_min > 0:
        fee = fee.clamp_min_(rules.commission_min)
    return fee


def _side_costs(
    shares: Tensor,
    price: Tensor,
    rate: Tensor | None,
    market: Market,
    commission_rate: float,
    rules: FillRules,
    sale: bool,
    split: bool = True,
    fee: Tensor | None = None,
) -> _Side:
    """The value of orders of `shares` (>= 0, one side) and their costs; `rate`: their `_slippage`,
    `fee`: their `_commission_before_caps` when computed for both sides (see `_order_commission`).
    `split`: also split the slippage into its half-spread and impact parts (the info entries);
    otherwise both are 0.
    """
    value = shares * price
    total = value.sum(-1)
    zero = torch.zeros_like(total)
    slipped = spread = impact = zero
    if rate is not None:
        slipped = dot(value, rate, rules)
        if split and market.impact is None:
            spread = slipped
        elif split and market.half_spread is None:
            impact = slipped
        elif split:  # rounding can leave a tiny negative difference where impact is 0
            spread = dot(value, market.half_spread, rules)
            impact = (slipped - spread).clamp_min(0.0)
    commission = _order_commission(shares, value, rate, commission_rate, rules, sale, fee, value_dead=True)
    commission = total * commission_rate if commission is None else commission.sum(-1)
    return _Side(total, commission, slipped, spread, impact)


def _order_commission(
    shares: Tensor,
    value: Tensor,
    rate: Tensor | None,
    commission_rate: float,
    rules: FillRules,
    sale: bool,
    fee: Tensor | None = None,
    value_dead: bool = False,
) -> Tensor | None:
    """The commission of each order of `shares` (one side) worth `value`, [E, N]; None when it is
    the rate alone, ``commission_rate x value`` (linear: the caller sums the values instead).

    ``commission_rate x value + fee per share x shares``, at least the minimum, at most the cap
    (when set), 0 for no order; a sale's at most what is left of its proceeds after half-spread
    and impact (`rate`). `fee`: the commission before the caps (`_commission_before_caps`),
    computed once for both sides; it is read, not changed. `value_dead`: `value` may be
    overwritten (the caller does not read it again).
    """
    if not (rules.per_order_commission or (sale and rate is not None)):
        return None  # the rate alone: below 1, so a sale never pays more than its proceeds
    shared = fee is not None
    if fee is None:
        fee = value * commission_rate
        if rules.commission_per_share > 0:
            fee = fee.add_(shares, alpha=rules.commission_per_share)
        if rules.commission_min > 0:
            fee = fee.clamp_min_(rules.commission_min)
    # the most an order pays, a fraction of its value: the cap (when set) and, for a sale, what is
    # left of its proceeds; a fraction of the value also makes the fee 0 for no order (value 0),
    # and for the other side's stocks in a `fee` of both sides
    most: Tensor | float | None = None
    if rules.commission_min > 0 or rules.commission_max_rate > 0 or shared:
        most = rules.commission_max_rate if rules.commission_max_rate > 0 else 1e300
    if sale and rate is not None:
        most = torch.rsub(rate, 1.0) if most is None else torch.rsub(rate, 1.0).clamp_max_(most)
    elif sale:
        most = 1.0 if most is None else min(most, 1.0)
    if most is None:
        return fee
    most_paid = value.mul_(most) if value_dead else value * most
    return most_paid.clamp_max_(fee)


def _buys_within_cash(
    buys: Tensor,
    price: Tensor,
    cash: Tensor,
    rate: Tensor | None,
    fee: Tensor | None,
    market: Market,
    rules: FillRules,
) -> tuple[Tensor, Tensor]:
    """Buys scaled by one common factor s in [0, 1] so that their whole bill fits `cash`.

    The bill of the full orders (s = 1) is computed exactly. When it exceeds the cash,
    s solves ``M + s x L = cash`` (0 when the cash does not cover M, or is a debt), with M the
    minimum commissions of the orders and L their value times (1 + rate + half-spread
    + impact of the full order) plus the fee per share: an upper bound of the bill at
    s, since impact per share only falls as an order shrinks and each order's
    commission is at most its minimum plus its linear part. So the scaled bill never
    exceeds the cash, whatever the order of the stocks. Shares mode then rounds down.
    `rate`: the `_slippage` of the full orders, `fee` their `_commission_before_caps`. Returns the
    buys and the value of the full orders, [E].
    """
    full = _side_costs(buys, price, rate, market, rules.buy_cost, rules, sale=False, split=False, fee=fee)
    needed = full.value + full.slipped + full.commission
    linear = full.value * (1.0 + rules.buy_cost) + full.slipped
    if rules.commission_per_share > 0:
        linear = linear + buys.sum(-1) * rules.commission_per_share
    count = torch.sign(buys).sum(-1) if rules.commission_min > 0 else None  # buys >= 0: one pass
    scale = _cash_scale(needed, linear, count, cash, rules)
    buys = buys.mul_(scale.unsqueeze(-1))
    if not rules.weights_mode:
        buys = buys.floor_()
    return buys, full.value


def _cash_scale(needed: Tensor, linear: Tensor, count: Tensor | None, cash: Tensor, rules: FillRules) -> Tensor:
    """The common factor s of the buys, [E]: 1 when their bill `needed` fits `cash`, else
    ``(cash - M) / L`` (at least 0) with L the `linear` bound and M the minimum commission
    times the `count` of orders (see `_buys_within_cash`)."""
    room = cash if count is None else cash - count * rules.commission_min
    return torch.where(needed > cash, room.clamp_min(0.0) / linear.clamp_min(1e-300), torch.ones_like(cash))


def _fill_with_costs_fused(
    cash: Tensor, holdings: Tensor, sells: Tensor, buys: Tensor, price: Tensor, market: Market, rules: FillRules
) -> Fill:
    """`_fill_with_costs` for torch.compile: the same rules and the same arithmetic per order,
    arranged for inductor, which makes one fused loop over the stocks of each row with one
    accumulator per row sum (and spills them to memory when there are many).

    So every row sum that the cash limit needs is one sum of its terms (the sales' net
    proceeds, the full buys' bill and its linear bound) instead of a sum per term, and the
    info entries of the sales (value, commission, half-spread, impact) are summed together with
    those of the bought shares, in the loop that rounds them; the rates of the sales and of the
    bought shares are one evaluation on the final orders (a stock is sold or bought, never
    both). Eager mode keeps `_fill_with_costs`, which makes fewer passes over memory instead.
    """
    zero = torch.zeros_like(cash)
    unfilled_value = unfilled_shares = zero
    orders = sells + buys  # a stock is bought or sold, never both
    if market.fill_cap is not None:
        sells = torch.minimum(sells, market.fill_cap)
        buys = torch.minimum(buys, market.fill_cap)
        unfilled = orders - (sells + buys)
        unfilled_shares = unfilled.sum(-1)
        unfilled_value = (unfilled * price).sum(-1)
        orders = sells + buys
    fee = _commission_before_caps(sells, buys, orders, price, rules)
    rate = _slippage(orders, market)
    slip: Tensor | float = 0.0 if rate is None else rate
    sold, wanted = sells * price, buys * price
    sale_fee = _order_commission(sells, sold, rate, rules.sell_cost, rules, sale=True, fee=fee)
    sale_fee = sold * rules.sell_cost if sale_fee is None else sale_fee
    buy_fee = _order_commission(buys, wanted, rate, rules.buy_cost, rules, sale=False, fee=fee)
    buy_fee = wanted * rules.buy_cost if buy_fee is None else buy_fee
    cash = cash + (sold - sold * slip - sale_fee).sum(-1)
    needed = (wanted + wanted * slip + buy_fee).sum(-1)
    linear = wanted * (1.0 + rules.buy_cost) + wanted * slip
    if rules.commission_per_share > 0:
        linear = linear + buys * rules.commission_per_share
    count = (buys > 0).sum(-1) if rules.commission_min > 0 else None
    bought = buys * _cash_scale(needed, linear.sum(-1), count, cash, rules).unsqueeze(-1)
    if not rules.weights_mode:
        bought = torch.floor(bought)
    if market.impact is not None:  # impact per share falls with the order: the rate of the bought shares
        rate = slip = _slippage(sells + bought, market)
    value = (sells + bought) * price
    bought_value = bought * price
    buy_fee = _order_commission(bought, bought_value, rate, rules.buy_cost, rules, sale=False)
    buy_fee = bought_value * rules.buy_cost if buy_fee is None else buy_fee
    left = cash - (bought_value + bought_value * slip + buy_fee).sum(-1)
    slipped = spread = impact = zero
    if rate is not None:
        slipped = (value * rate).sum(-1)
        if market.impact is None:
            spread = slipped
        elif market.half_spread is None:
            impact = slipped
        else:  # rounding can leave a tiny negative difference where impact is 0
            spread = (value * market.half_spread).sum(-1)
            impact = (slipped - spread).clamp_min(0.0)
    return Fill(
        # the bill fits the cash up to rounding; only a debt owed before (a borrow fee) stays below 0
        cash=torch.maximum(left, cash.clamp_max(0.0)),
        holdings=holdings - sells + bought,
        traded=value.sum(-1),
        commission=(sale_fee + buy_fee).sum(-1),
        spread=spread,
        impact=impact,
        ordered=(orders * price).sum(-1) + unfilled_value,
        unfilled_value=unfilled_value,
        unfilled_shares=unfilled_shares,
    )


# --------------------------------------------------------------------- the same rules, asked by callers


def _bar_row(table: Tensor | None, t: int | Tensor) -> Tensor | None:
    """Row `t` of a per-bar cost table as [1, N] float64 (widened exactly): sliced for an int (no
    index tensor to copy to the device); `t` may also be an int64 [1] tensor (inside
    `market_envs.rollout`'s chunks)."""
    if isinstance(t, Tensor) or table is None or table.shape[0] == 1:
        return _row(table, t)
    return table[t : t + 1].double()


def within_cash(
    buys: Tensor, cash: Tensor, price: Tensor, t1: int | Tensor, tables: Market, rules: FillRules
) -> Tensor:
    """`StockTradingVecEnv.buys_within_cash` for a fill at bar `t1` (an int, or an int64 [1]
    tensor), as a function of the market tables (`market_tables`) and the fill's rules."""
    buys = buys.to(torch.float64).clone()
    price = price.to(torch.float64).expand_as(buys)
    cash = cash.to(torch.float64)
    if not rules.has_costs:
        return _flat_buys_within_cash(buys, price, cash, rules)[0]
    market = Market(half_spread=_bar_row(tables.half_spread, t1), impact=_bar_row(tables.impact, t1), fill_cap=None)
    fee = _commission_before_caps(torch.zeros_like(buys), buys, buys, price, rules)
    rate = _slippage(buys.clone(), market, in_place=True)
    return _buys_within_cash(buys, price, cash, rate, fee, market, rules)[0]


FILL_PARTS = ("value", "commission", "spread", "impact")
"""What `fill_costs` gives per stock (beside the fill ``price``): the value traded and each cost term."""


def fill_costs(
    before: Tensor, after: Tensor, bars: Tensor, open_prices: Tensor, tables: Market, rules: FillRules
) -> dict[str, Tensor]:
    """Each stock's fill that took holdings from `before` to `after` [B, N] at the open of bar
    ``bars[b]`` [B] (a row of `open_prices` [T, N]), valued and charged by the step's own cost functions: ``price`` (the
    open), ``value`` (shares x open), ``commission``, ``spread``, ``impact``, each float64 [B, N].

    The step charges the shares that fill: the sales, and the buys after the participation
    cap and the cash limit. A stock is sold or bought in one fill, never both, so its half-spread
    and impact rate is `_slippage` of its filled shares and its commission `_order_commission`
    of its side, as in `_fill_with_costs`. Summed over the stocks, the parts equal the step's
    ``info`` entries (``turnover`` x value, ``cost_commission``, ``cost_spread``,
    ``cost_impact``; tests/test_trades.py); the borrow fee is the close's, not a fill's.
    """
    before, after = before.to(torch.float64), after.to(torch.float64)
    sold = (before - after).clamp_min(0.0)
    bought = (after - before).clamp_min(0.0)
    price = open_prices.index_select(0, bars).double()
    value = (sold + bought) * price
    zero = torch.zeros_like(value)
    if not rules.has_costs:
        return {
            "value": value,
            "commission": sold * price * rules.sell_cost + bought * price * rules.buy_cost,
            "spread": zero,
            "impact": zero,
            "price": price.expand_as(value),
        }
    market = Market(_row(tables.half_spread, bars), _row(tables.impact, bars), None)
    rate = _slippage(sold + bought, market)
    slipped = zero if rate is None else value * rate
    spread = zero if market.half_spread is None else value * market.half_spread
    impact = zero if market.impact is None else (slipped - spread).clamp_min(0.0)
    commission = []
    for shares, rate_of_side, sale in ((sold, rules.sell_cost, True), (bought, rules.buy_cost, False)):
        side_value = shares * price
        fee = _order_commission(shares, side_value, rate, rate_of_side, rules, sale)
        commission.append(side_value * rate_of_side if fee is None else fee)
    return {
        "value": value,
        "commission": commission[0] + commission[1],
        "spread": spread,
        "impact": impact,
        "price": price.expand_as(value),
    }


# --------------------------------------------------------------------- the C kernel

C_SOURCE = Path(__file__).with_name("fill_costs.c")
C_FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-shared",
    "-fPIC",
)
"""-ffp-contract=off: no fused multiply-adds, so each product rounds as torch's does.
-fno-math-errno (sqrt need not set errno) and -fno-trapping-math (floating-point exceptions need
not be raised where the source raises them) change no result; without them gcc leaves the loops
with square roots, floors and selects scalar or half-vectorised, 2x to 3.5x slower
(benchmarks/fill_layouts.py --native, a one-off last at 582a8d6; docs/notebook/)."""
OUTPUTS = ("cash", "traded", "commission", "spread", "impact", "ordered", "unfilled_value", "unfilled_shares")
"""The rows of the kernel's [8, E] result, in `Fill`'s order after the holdings."""
BUILD_SECONDS = 120


class Arg(NamedTuple):
    """One parameter of the kernel's interface (`INTERFACE`)."""

    name: str  # in fill_costs.c's signature, and in the operator's schema where it is an operator argument
    kind: Literal["rows", "columns", "array", "table", "real", "flags", "output"]
    element: str = "double"  # the C type of an array's or a table's elements
    term: str = ""  # a table: the term of `TERM_FLAGS` whose table it is (given exactly when the term is on)


INTERFACE: tuple[Arg, ...] = (
    Arg("num_envs", "rows"),
    Arg("n", "columns"),
    Arg("orders", "array"),
    Arg("holdings", "array"),
    Arg("cash", "array"),
    Arg("bars", "array", "int64_t"),
    Arg("open_prices", "table", "float"),
    Arg("half_spread", "table", "float", term="spread"),
    Arg("impact", "table", "float", term="impact"),
    Arg("fill_cap", "table", term="participation"),
    Arg("buy_cost", "real"),
    Arg("sell_cost", "real"),
    Arg("per_share", "real"),
    Arg("minimum", "real"),
    Arg("max_rate", "real"),
    Arg("terms", "flags"),
    Arg("holdings_out", "output"),
    Arg("out", "output"),
)
"""The interface of `fill_with_costs` in fill_costs.c, declared once: the C parameters
(`c_parameters`), the ctypes types, the operator's schema (`schema`) and the call are generated
from it, and tests/test_native_fill.py reads the C signature and fails when it differs.

The kinds: ``rows`` and ``columns``, E and N of the [E, N] orders (int64_t); ``array``, a tensor
read whole (``const element *``, made contiguous; ``Tensor`` in the schema); ``table``, a table
[T, N] or [1, N] read at the fill bars (``const element *`` and its row stride ``<name>_stride``,
0 for a [1, N] row): the open prices, always given (``Tensor``), and the market tables, None
where their term is off (``Tensor?``); ``real``, a rule (``double``; ``float``);
``flags``, the bits of `TERM_FLAGS` (``int64_t``; ``int``); ``output``, the results, made by
the call (``double *``): the new holdings [E, N] and the [8, E] rows of `OUTPUTS`. The call checks
each array's and table's dtype against its element (`C_DTYPES`): a float64 open table would be
read as floats otherwise."""

TERM_FLAGS = ("spread", "impact", "participation", "per_order_commission", "weights_mode")
"""Bit k of the kernel's ``terms`` is on when ``CostModel.terms()`` has this term on (the last
one: the env runs in weights mode); fill_costs.c names bit k ``TERM_<NAME>`` (tests hold them
equal). The tables' bits are set exactly when the table is given (`fill_with_costs_c` checks it)."""

_C_TYPES = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}
C_DTYPES = {"double": torch.float64, "float": torch.float32, "int64_t": torch.int64}
"""The torch dtype of each C element type of `INTERFACE`."""
PRICES_DTYPE = C_DTYPES[next(arg.element for arg in INTERFACE if arg.name == "open_prices")]
"""The dtype of the open table that the C kernel reads (`fill_rules` takes the torch kernels for another)."""
_SCHEMA_TYPES = {"array": "Tensor", "table": "Tensor?", "real": "float", "flags": "int"}
OPERATOR_ARGS = tuple(arg for arg in INTERFACE if arg.kind in _SCHEMA_TYPES)
"""The operator's arguments, in order: the parameters of `fill_with_costs_c` and of its schema."""
_OUTPUTS = tuple(arg.name for arg in INTERFACE if arg.kind == "output")
_HOLDINGS = [arg.name for arg in OPERATOR_ARGS].index("holdings")


READ_INTERFACES: dict[str, tuple[Arg, ...]] = {
    "read_actions": (
        Arg("num_envs", "rows"),
        Arg("n", "columns"),
        Arg("actions", "array", "float"),
        Arg("aims", "output"),
    ),
    "read_rate_actions": (
        Arg("num_envs", "rows"),
        Arg("n", "columns"),
        Arg("actions", "array", "float"),
        Arg("aims", "output"),
        Arg("rates", "output"),
    ),
}
"""The interfaces of fill_costs.c's two readers of the actions (`read_actions_c`), declared as
`INTERFACE` is: ``n`` is N, the stocks (the rate actions' rows are 2N wide), the outputs [E, N]."""


def c_parameters(interface: tuple[Arg, ...] = INTERFACE) -> list[tuple[str, str]]:
    """The C signature that `interface` (default `INTERFACE`) declares: (type, name) per parameter,
    types spelled as in fill_costs.c (``const double *``, ``int64_t``)."""
    spelled = {"rows": "int64_t", "columns": "int64_t", "real": "double", "flags": "int64_t", "output": "double *"}
    parameters = []
    for arg in interface:
        if arg.kind == "array":
            parameters.append((f"const {arg.element} *", arg.name))
        elif arg.kind == "table":
            parameters += [(f"const {arg.element} *", arg.name), ("int64_t", f"{arg.name}_stride")]
        else:
            parameters.append((spelled[arg.kind], arg.name))
    return parameters


def argtypes(interface: tuple[Arg, ...] = INTERFACE) -> list[type]:
    """The ctypes types of `c_parameters`: a pointer is a ``c_void_p`` (the call passes addresses)."""
    return [ctypes.c_void_p if c_type.endswith("*") else _C_TYPES[c_type] for c_type, _ in c_parameters(interface)]


def schema() -> str:
    """The torch operator's schema of `fill_with_costs`, from `INTERFACE`."""
    arguments = ", ".join(f"{_schema_type(arg)} {arg.name}" for arg in OPERATOR_ARGS)
    return f"fill_with_costs({arguments}) -> ({', '.join('Tensor' for _ in _OUTPUTS)})"


def _schema_type(arg: Arg) -> str:
    """An operator argument's type in the schema: a table without a term is always given."""
    return "Tensor" if arg.kind == "table" and not arg.term else _SCHEMA_TYPES[arg.kind]


def term_flags(terms: Terms, weights_mode: bool) -> int:
    """The kernel's ``terms`` argument: the bits of `TERM_FLAGS` for the terms on (`CostModel.terms`)."""
    on = {**terms._asdict(), "weights_mode": weights_mode}
    return sum(1 << bit for bit, name in enumerate(TERM_FLAGS) if on[name])


def native_enabled() -> bool:
    """Whether the env may take the native kernel (``MARKET_ENVS_NATIVE`` is not "0")."""
    return os.environ.get("MARKET_ENVS_NATIVE", "1") != "0"


def _cpu_identity() -> str:
    """What a library built with -march=native depends on: the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "market_envs" / "native"


def build_native(directory: Path | None = None, source: Path = C_SOURCE) -> Path:
    """Compile `source` into a shared library in `directory` (default: the cache), once: an
    existing library of the same source, flags and CPU is reused.

    Written under a temporary name and renamed, so that processes building at once (dask
    workers, test workers) never load a half-written file; and one at a time (a lock on
    `directory`), so that they wait for one build (about 30 s of a core) instead of each
    compiling the same file. Raises OSError or CalledProcessError.
    """
    compiler = os.environ.get("CC", "cc")
    text = source.read_bytes()
    key = hashlib.sha256(b"\0".join([text, " ".join((compiler, *C_FLAGS)).encode(), _cpu_identity().encode()]))
    directory = directory or _cache_dir()
    library = directory / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with _building(directory):
        if library.exists():  # built by the process that held the lock
            return library
        with tempfile.TemporaryDirectory(dir=directory) as scratch:
            partial = Path(scratch) / library.name
            subprocess.run(
                [compiler, *C_FLAGS, "-o", str(partial), str(source), "-lm"],
                check=True,
                capture_output=True,
                timeout=BUILD_SECONDS,
            )
            os.replace(partial, library)
    return library


@contextlib.contextmanager
def _building(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory` (flock on the folder itself: no lock file is left
    beside the libraries). Waits at most `BUILD_SECONDS` plus a little for a build to end, then
    goes on without the lock (a stuck holder must not stop this process; the rename keeps the
    result whole either way). No lock where the platform has no flock."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + BUILD_SECONDS + 10
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        yield  # the lock, if held, goes with the descriptor
    finally:
        os.close(handle)


@functools.cache
def native_library() -> ctypes.CDLL | None:
    """The loaded kernel, or None (disabled, or it could not be built: warned once)."""
    if not native_enabled():
        return None
    try:
        native = ctypes.CDLL(str(build_native()))
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        warnings.warn(
            f"market_envs: the CPU kernel for trading costs could not be built ({error}"
            f"{': ' + detail.decode(errors='replace').strip().splitlines()[0] if detail.strip() else ''}); "
            "the torch kernel is used instead (slower with costs; set MARKET_ENVS_NATIVE=0 to silence this)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return bind_native(native)


def bind_native(library: ctypes.CDLL) -> ctypes.CDLL:
    """`library`, a build of fill_costs.c, with its functions' types set from `INTERFACE` and
    `READ_INTERFACES` (`native_library` binds the env's own this way; benchmarks/env_throughput.py
    ``--kernel-sources`` binds other versions of the source to time them side by side)."""
    library.fill_with_costs.restype = None
    library.fill_with_costs.argtypes = argtypes()
    for name, interface in READ_INTERFACES.items():
        getattr(library, name).restype = None
        getattr(library, name).argtypes = argtypes(interface)
    return library


def reads_actions_natively(actions: Tensor, dtype: torch.dtype) -> bool:
    """Whether `read_actions_c` takes these actions: float32 [E, width] on the CPU read into float64,
    eagerly (compiled, inductor fuses torch's forms), with the kernel available."""
    return (  # compiling first: traced, the test ends there and guards nothing
        not torch.compiler.is_compiling()
        and actions.dtype == torch.float32
        and dtype == torch.float64
        and actions.dim() == 2
        and actions.device.type == "cpu"
        and native_available()
    )


def read_actions_c(actions: Tensor, rate_action: bool) -> tuple[Tensor, Tensor | None]:
    """The actions [E, N] (with `rate_action`, [E, 2N]: the aims, then the rate actions) read as the
    orders read them, by fill_costs.c in one pass: the aims [E, N] clipped to [-1, 1] with NaN as 0,
    float64, and with `rate_action` each stock's trade rate [E, N] (`market_envs.env.policy_rates`
    of its cleaned rate action); the same bits as the torch forms (tests/test_native_fill.py).
    Only where `reads_actions_natively`."""
    native = native_library()
    actions = actions.detach().contiguous()
    rows, width = actions.shape
    n = width // 2 if rate_action else width
    aims = actions.new_empty((rows, n), dtype=torch.float64)
    if not rate_action:
        native.read_actions(rows, n, actions.data_ptr(), aims.data_ptr())
        return aims, None
    rates = torch.empty_like(aims)
    native.read_rate_actions(rows, n, actions.data_ptr(), aims.data_ptr(), rates.data_ptr())
    return aims, rates


def native_available() -> bool:
    """Whether the kernel is on (`native_enabled`) and loaded (building it on first call); the env asks once
    per construction for the fill, and each eager step for the actions' read (`reads_actions_natively`)."""
    return native_enabled() and native_library() is not None


def call_source() -> str:
    """The source of `fill_with_costs_c`, generated from `INTERFACE` (read it with
    ``print(market_envs.fill.call_source())``).

    Generated rather than a loop over the declaration at each call: it runs once per step, and
    the loop measured slower (its first version here, one run on a loaded machine: 173 and 181 us
    a call against 55 and 118 us for the hand-written call; this code: 43 to 73 against 50 to 70).
    """
    names = [arg.name for arg in OPERATOR_ARGS]
    body = [
        f"def fill_with_costs_c({', '.join(names)}):",
        '    """The fill of `_fill_with_costs` by the C kernel, on CPU tensors: the',
        "    arguments of `OPERATOR_ARGS`; returns the new holdings [E, N] and the [8, E] rows of",
        '    `OUTPUTS`. Generated from `INTERFACE` (`call_source`)."""',
        "    native = native_library()",
        "    if native is None:",
        '        raise RuntimeError("the native fill is not available (see market_envs.fill.native_library)")',
    ]
    tables = [arg for arg in INTERFACE if arg.kind == "table" and arg.term]
    given = " | ".join(f"({arg.name} is not None) * {1 << TERM_FLAGS.index(arg.term)}" for arg in tables)
    mask = sum(1 << TERM_FLAGS.index(arg.term) for arg in tables)
    orders = next(arg.name for arg in INTERFACE if arg.kind == "array")  # [E, N]: the rows and columns
    body += [
        f"    if not 0 <= terms < {1 << len(TERM_FLAGS)} or (terms & {mask}) != ({given}):",
        '        raise ValueError(f"fill_with_costs: terms {terms:#b} do not match the tables given")',
    ]
    typed = [arg for arg in INTERFACE if arg.kind in ("array", "table")]
    wrong = " or ".join(
        f"{arg.name}.dtype != torch.{str(C_DTYPES[arg.element]).removeprefix('torch.')}"
        if arg.kind == "array" or not arg.term
        else f"({arg.name} is not None and {arg.name}.dtype != torch.{str(C_DTYPES[arg.element]).removeprefix('torch.')})"
        for arg in typed
    )
    expected = ", ".join(f"{arg.name} {str(C_DTYPES[arg.element]).removeprefix('torch.')}" for arg in typed)
    body += [
        f"    if {wrong}:",
        f'        raise TypeError("fill_with_costs: the arrays and tables must be {expected}")',
    ]
    call = []
    for arg in INTERFACE:
        if arg.kind == "rows":
            body.append(f"    {arg.name} = {orders}.shape[0]")
            call.append(arg.name)
        elif arg.kind == "columns":
            body.append(f"    {arg.name} = {orders}.shape[1]")
            call.append(arg.name)
        elif arg.kind == "array":  # contiguous, and referenced until the call returns
            body.append(f"    {arg.name} = {arg.name}.contiguous()")
            call.append(f"{arg.name}.data_ptr()")
        elif arg.kind == "table":  # None where the term is off; stride 0 for a [1, N] row every bar shares
            made = f"{arg.name} = {arg.name}.contiguous()"
            stride = f"{arg.name}_stride = 0 if {arg.name}.shape[0] == 1 else {arg.name}.shape[1]"
            if arg.term:
                body += [
                    f"    {arg.name}_stride = 0",
                    f"    if {arg.name} is not None:",
                    f"        {made}",
                    f"        {stride}",
                ]
            else:
                body += [f"    {made}", f"    {stride}"]
            pointer = (
                f"{arg.name}.data_ptr()" if not arg.term else f"None if {arg.name} is None else {arg.name}.data_ptr()"
            )
            call += [pointer, f"{arg.name}_stride"]
        elif arg.kind == "output":  # float64 on the CPU, as the orders (checked above): `new_empty` is the cheaper call
            shape = f"{orders}.shape" if arg.name == "holdings_out" else f"(len(OUTPUTS), {orders}.shape[0])"
            body.append(f"    {arg.name} = {orders}.new_empty({shape})")
            call.append(f"{arg.name}.data_ptr()")
        else:
            call.append(arg.name)
    body.append(f"    native.fill_with_costs({', '.join(call)})")
    body.append(f"    return {', '.join(_OUTPUTS)}")
    return "\n".join(body) + "\n"


def _generated() -> Callable[..., tuple[Tensor, Tensor]]:
    namespace: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}
    exec(compile(call_source(), "<market_envs.fill.call_source()>", "exec"), globals(), namespace)
    return namespace["fill_with_costs_c"]


fill_with_costs_c = _generated()


# `fill_with_costs_c` as an operator that torch.compile calls from its kernel as it is. Defined with
# torch.library's lower-level API, a CPU kernel and a fake one for tracing, rather than with
# `torch.library.custom_op`, whose autograd layers a step never needs and which cost about twice as
# much per call (benchmarks/RESULTS.md, "Costs in the env step", fifth pass).
_LIBRARY = torch.library.Library("market_envs", "DEF")
_LIBRARY.define(schema())
_LIBRARY.impl("fill_with_costs", fill_with_costs_c, "CPU")


@torch.library.register_fake("market_envs::fill_with_costs", lib=_LIBRARY)
def _(*arguments):
    holdings = arguments[_HOLDINGS]
    return torch.empty_like(holdings), holdings.new_empty((len(OUTPUTS), holdings.shape[0]))


fill_with_costs_op = torch.ops.market_envs.fill_with_costs.default
