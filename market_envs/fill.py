"""The fill with its costs, for every device: the one home of the rule.

A step's orders (sells and buys in shares, after the env's masks) settle here at the fill
price: the participation cap, then the sales, then the buys within the cash, charging every term of
`market_envs.costs.CostModel` (`market_envs.config`'s module docstring states the rules in words;
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

The C kernel, its interface and its build are `market_envs.native_fill`; the constants and
tables the fill reads, and what it gives, are `market_envs.fill_inputs`.

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

import math
from typing import NamedTuple

import torch
from torch import Tensor

from market_envs.fill_inputs import Fill, FillRules, Market
from market_envs.native_fill import OUTPUTS, fill_with_costs_c, fill_with_costs_op


class _Side(NamedTuple):
    """The orders of one side (sales, or purchases) and what they cost, each [E]."""

    value: Tensor  # at the fill price
    commission: Tensor
    slipped: Tensor  # half-spread + impact
    spread: Tensor  # the half-spread's part of `slipped` (0 where not asked for)
    impact: Tensor  # the impact's part


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
    (`market_tables`); see `market_envs.config`'s module docstring for the rules. The one entry of
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
