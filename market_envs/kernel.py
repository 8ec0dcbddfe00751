"""The env's step kernel: actions to orders (the aim, the no-trade band, the trade rate, the masks),
the accounting of one step as a pure function of tensors, the recycled observation buffers and the
compile machinery (one compiled kernel per rules and shapes).

The rules it applies are stated in `market_envs.config`; `market_envs.env.StockTradingVecEnv` holds
the state and calls it, and `market_envs.rollout` steps it too.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from market_envs.config import EnvConfig
from market_envs.errors import ConfigError, UserError
from market_envs.fill import dot, fill_orders
from market_envs.fill_inputs import FillRules
from market_envs.native_fill import read_actions_c, reads_actions_natively
from market_envs.tables import Tables


class State(NamedTuple):
    """The state of E sub-environments; a step returns a new one."""

    t: Tensor  # int64 [E], bar of the last observation
    end: Tensor  # int64 [E], bar at which the episode is truncated
    cash: Tensor  # float64 [E]
    holdings: Tensor  # float64 [E, N]
    value: Tensor  # float64 [E], cash + holdings x close[t]


@dataclass(frozen=True)
class Rules:
    """The constants of the step kernel (static under torch.compile)."""

    weights_mode: bool
    max_shares: float
    reward_scale: float
    initial_cash: float
    short_selling: bool
    market_neutral: bool
    account_low: float  # bounds of the cash and position shares in the observation
    account_high: float
    max_leverage: float = 1.0
    borrow_per_bar: float = 0.0  # the annual borrow rate x the bar's fraction of a year
    linear_weights: float = 0.0  # weights_map="linear": the aim is the action x this (else 0: "normalized")
    has_rate: bool = False  # a trade rate below 1 (`Tables.trade_rate`)
    has_band: bool = False  # a no-trade band (`Tables.band`)
    book_band: bool = False  # the band bounds sum |aim - w| (else each |aim_i - w_i|)
    rate_action: bool = False  # the actions' second block holds each stock's trade rate (`policy_rates`)
    aim_reward: bool = False  # EnvConfig.reward == "aim"
    leavers: bool = False  # the panel has bars where a position may only shrink (`Tables.reducible`)
    fill: FillRules = FillRules()  # the fill's constants: its commission, cost terms and kernel (`market_envs.fill`)


def _aim_weights(actions: Tensor, rules: Rules) -> Tensor:
    """Weights mode: the aim portfolio of the actions, [E, N] (`EnvConfig.weights_map`)."""
    if rules.short_selling:
        if rules.market_neutral:
            actions = actions - actions.mean(-1, keepdim=True)
        if rules.linear_weights:  # in place on the centred copy, never on the caller's actions
            actions = actions.mul_(rules.linear_weights) if rules.market_neutral else actions * rules.linear_weights
        gross = actions.abs().sum(-1, keepdim=True)
        if rules.max_leverage != 1.0:
            gross = gross / rules.max_leverage
        return actions / gross.clamp_min(1.0)
    weights = actions.clamp(0.0, 1.0)
    if rules.linear_weights:
        weights = weights * rules.linear_weights
    return weights / weights.sum(-1, keepdim=True).clamp_min(1.0)


def policy_rates(rate_actions: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """`EnvConfig.rate_action`: each stock's trade rate from its rate action (clipped to [-1, 1]),
    ``((1 + r) / 2)^2``: 0 at -1 (no trade), 1 at +1 (all the way), 0.25 at 0; a new tensor of
    `dtype` (default the actions'). ``(1 + r) / 2`` is computed as ``0.5 + 0.5 r`` (the same float:
    halving is exact) in the pass that converts to `dtype`, then squared in place: two passes."""
    dtype = dtype or rate_actions.dtype
    half = torch.full((1,) * max(rate_actions.dim(), 1), 0.5, dtype=dtype, device=rate_actions.device)
    return torch.add(half, rate_actions, alpha=0.5).square_()  # `half` a tensor: the sum takes its dtype


def rate_actions(rates: Tensor) -> Tensor:
    """The rate actions whose `policy_rates` are `rates` (in [0, 1]): ``2 sqrt(kappa) - 1``."""
    return rates.clamp(0.0, 1.0).sqrt().mul(2.0).sub(1.0)


def read_actions(actions: Tensor, rules: Rules, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """The actions as the orders read them, new tensors of `dtype`: the aims' (or the shares') block
    [E, N], clipped to [-1, 1] with NaN as 0 (`clean_actions`), and with `EnvConfig.rate_action`
    each stock's trade rate [E, N], `policy_rates` of the second block cleaned alike (a NaN rate
    action counts as 0: rate 0.25); None without it.

    Both blocks are cleaned together, in the actions' own dtype; then each is read into a new
    contiguous tensor: the aims by a copy, the rates by `policy_rates`' first pass. No
    view of a shared tensor is written to: under torch.compile such a write into half a tensor
    becomes a scatter, which inductor recomputed in every loop that read the other half.
    (Cleaning and converting both blocks at once, the aims a view, measured no faster on the
    quiet grid of 2026-11-27 and slower compiled with every cost term: benchmarks/RESULTS.md.)

    Eager on the CPU, float32 actions read into float64 (`market_envs.native_fill.reads_actions_natively`)
    are read by fill_costs.c instead, both blocks in one pass with the same bits
    (`market_envs.native_fill.read_actions_c`): torch's five eager ops had a fixed cost each, most of
    what the policy's rate added to the step at 1,024 sub-environments."""
    if reads_actions_natively(actions, dtype):  # eager on the CPU: one pass of fill_costs.c, the same bits
        return read_actions_c(actions, rules.rate_action)
    if not rules.rate_action:
        return clean_actions(actions, dtype), None
    aims, rates = clean_actions(actions, actions.dtype).chunk(2, dim=-1)  # the one cleaning rule, no conversion
    return aims.to(dtype, copy=True), policy_rates(rates, dtype)


class Pace(NamedTuple):
    """How far a step moves the book toward its aim: per sub-environment, float64 [E, 1], or per
    stock [E, N] (a rate the policy chooses, `EnvConfig.rate_action`)."""

    rate: Tensor | None  # the trade rate (None: 1)
    band: Tensor | None  # the no-trade band, a weight (None: 0)


def _toward_aim(aim_value: Tensor, held_value: Tensor, value: Tensor, pace: Pace, rules: Rules) -> Tensor:
    """The value to trade per stock, [E, N] (+ buy, - sell): from the book `held_value` toward
    the aim `aim_value` ([E, N], at the fill price), through the no-trade band and at the trade
    rate (`EnvConfig.no_trade_band`, `trade_rate`); `value` [E, 1] is the portfolio's at the fill
    price, the band's unit."""
    gap = aim_value.sub_(held_value)  # in place: both are [E, N] tensors of this step (few passes, eager)
    if pace.band is not None:
        room = value.abs() * pace.band
        if rules.book_band:  # to the edge of the ball sum |aim - w| <= band
            distance = gap.abs().sum(-1, keepdim=True)
            gap = gap.mul_((1.0 - room / distance.clamp_min(1e-300)).clamp_min(0.0))
        else:  # each stock to the edge of its own band: the part of the gap beyond +-band
            gap = gap.sub_(torch.clamp(gap, -room, room))
    if pace.rate is not None:
        gap = gap.mul_(pace.rate)
    return gap


def orders(
    actions: Tensor,
    holdings: Tensor,
    price: Tensor,
    cash: Tensor,
    rules: Rules,
    pace: Pace | None = None,
    rates: Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Requested sells and buys in shares (both >= 0) before cash limits and masks, for `actions`
    [E, N] and, with `rules.rate_action`, each stock's trade `rates` [E, N] (both as
    `read_actions` gives them); `pace`: the trade rate and band (weights mode, when `rules` has
    either). The policy's rates apply after the band. `weights`: the aim of `actions`
    (`_aim_weights`) where the caller holds it already (read, not written to), else computed."""
    if rules.weights_mode:
        weights = _aim_weights(actions, rules) if weights is None else weights
        if rates is not None and pace is not None:  # the band first, then each stock's own rate
            pace = Pace(rates, pace.band)
        if pace is None:  # today's rule: all the way to the aim (with the policy's rates: that share of it)
            value_at_fill = cash + (holdings * price).sum(-1)
            delta = weights * value_at_fill.unsqueeze(-1) / price - holdings
            if rates is not None:  # in place, and at rate 1 exactly today's orders
                delta = delta.mul_(rates)
        else:
            held = holdings * price
            value_at_fill = (cash + held.sum(-1)).unsqueeze(-1)
            delta = _toward_aim(weights * value_at_fill, held, value_at_fill, pace, rules).div_(price)
    else:
        delta = torch.trunc(actions * rules.max_shares)
    sells = (-delta).clamp_min(0.0)
    buys = delta.clamp_min(0.0)
    if not rules.short_selling:
        sells = torch.minimum(sells, holdings.clamp_min(0.0))
    elif not rules.weights_mode:
        sells = torch.minimum(sells, holdings + rules.max_shares).clamp_min(0.0)
    return sells, buys


def mapping_rules(config: EnvConfig, num_stocks: int) -> dict[str, Any]:
    """The fields of `Rules` that map actions to orders (`orders`), from `config`."""
    linear = config.weights_map == "linear" and config.action_mode == "weights"
    return {
        "weights_mode": config.action_mode == "weights",
        "max_shares": float(config.max_shares),
        "short_selling": bool(config.short_selling),
        "market_neutral": bool(config.market_neutral),
        "max_leverage": float(config.max_leverage),
        "linear_weights": config.linear_scale * float(config.max_leverage) / num_stocks if linear else 0.0,
        "has_rate": config.trade_rate != 1.0,
        "has_band": config.no_trade_band != 0.0,
        "book_band": config.band_scope == "book",
        "rate_action": bool(config.rate_action),
    }


def pace_of(config: EnvConfig, rules: Rules, rows: int, device: torch.device) -> Pace | None:
    """`config`'s trade rate and band for `rows` accounts, [rows, 1] each (None where off)."""
    if not (rules.has_rate or rules.has_band):
        return None

    def column(x: float) -> Tensor:
        return torch.full((rows, 1), x, dtype=torch.float64, device=device)

    return Pace(
        column(config.trade_rate) if rules.has_rate else None, column(config.no_trade_band) if rules.has_band else None
    )


def clean_actions(actions: Tensor, dtype: torch.dtype) -> Tensor:
    """Actions clipped to [-1, 1], NaN as 0 (no order), a new tensor of `dtype`: checking them would
    cost a sync. Cleaned in the actions' own dtype, then converted (the same values: the clip's
    bounds and every float32 are exact in float64); three passes, two of them over float32.

    Compiled, NaN is found as ``a != a`` (then +-inf clipped to +-1 as nan_to_num's +-max are): the
    same values, but inductor vectorizes the comparison where it tests ``isnan`` one element at a
    time, and the compiled step cleans the actions again in every loop that reads them (the mean,
    the gross exposure, the orders: three or four times a step). Eager keeps nan_to_num's one pass
    (the comparison and the `where` would be two)."""
    if torch.compiler.is_compiling():
        return torch.where(actions != actions, 0.0, actions).clamp(-1.0, 1.0).to(dtype)
    return torch.nan_to_num(actions, nan=0.0).clamp_(-1.0, 1.0).to(dtype)


def _mapping_only(config: EnvConfig, num_stocks: int) -> Rules:
    """`Rules` holding only what maps actions to orders (the rest neutral)."""
    return Rules(
        **mapping_rules(config, num_stocks),
        reward_scale=1.0,
        initial_cash=float(config.initial_cash),
        account_low=0.0,
        account_high=1.0,
    )


def aim_weights(actions: Tensor, config: EnvConfig) -> Tensor:
    """Weights mode: the aim portfolio of `actions` [B, N] under `config`'s mapping (clipped,
    NaN as 0, market-neutral, linear or normalized, within the leverage), float64 [B, N]: the
    book the step moves toward at its trade rate and band. With `EnvConfig.rate_action` the
    actions are [B, 2N] and the aim is that of their first block."""
    if config.action_mode != "weights":
        raise ConfigError("aim_weights: the aim portfolio is a weights-mode idea (action_mode='weights')")
    rules = _mapping_only(config, actions.shape[-1] // config.actions_per_stock)
    return _aim_weights(read_actions(actions, rules, torch.float64)[0], rules)


def aim_actions(aim: Tensor, config: EnvConfig) -> Tensor:
    """Actions whose aim portfolio (`aim_weights`) is `aim` [B, N], for a valid aim: one the
    mapping can give (within the leverage; long only without short selling; dollar-neutral
    when market-neutral), such as a weighted mean of other actions' aims. The mapping is
    ``aim = s x a`` below its gross limit (``s`` the linear scale, 1 when normalized), so the
    action is ``aim / s``, clipped to [-1, 1] (only rounding is clipped for a valid aim). With
    `EnvConfig.rate_action` these are the aims' block only: the caller appends the rates'."""
    rules = _mapping_only(config, aim.shape[-1])
    scale = rules.linear_weights or 1.0
    return (aim.to(torch.float64) / scale).clamp(-1.0, 1.0)


def target_holdings(actions: Tensor, holdings: Tensor, price: Tensor, cash: Tensor, config: EnvConfig) -> Tensor:
    """The shares each account asks to hold after a step of `actions`: the env's own mapping.

    `actions` [B, N] (clipped to [-1, 1], NaN as 0, as `StockTradingVecEnv.step` takes them),
    `holdings` [B, N] shares, `price` [N] or [B, N] the fill price (or the caller's estimate
    of it), `cash` [B], `config` the env rules (`EnvConfig`: action mode, weights map, trade
    rate, no-trade band, short selling, leverage). Returns float64 [B, N]: the holdings plus
    the orders of `orders`, before the turbulence guard, the tradable mask (and the rule for
    a stock that left the index, `toward_zero`), the participation cap and the cash limit,
    which a step applies next. A live trader (`trader act`) turns a
    policy's actions into orders with it, by the rules the policy was trained under.
    """
    holdings = holdings.to(torch.float64)
    price = price.to(torch.float64).expand_as(holdings)
    rules = _mapping_only(config, holdings.shape[-1])
    if actions.shape[-1] != holdings.shape[-1] * config.actions_per_stock:
        raise UserError(
            f"target_holdings: {holdings.shape[-1]} stocks take {holdings.shape[-1] * config.actions_per_stock} "
            f"actions each under these rules, got {actions.shape[-1]}"
        )
    pace = pace_of(config, rules, holdings.shape[0], holdings.device)
    actions, rates = read_actions(actions, rules, torch.float64)
    sells, buys = orders(actions, holdings, price, cash.to(torch.float64), rules, pace, rates)
    return holdings - sells + buys


def toward_zero(sells: Tensor, buys: Tensor, holdings: Tensor, where: Tensor) -> tuple[Tensor, Tensor]:
    """The orders `sells`, `buys` (shares, >= 0) from `holdings`, all [B, N], cut where `where`
    (bool, broadcast to [B, N]) so that a position may only shrink: a sale at most the long
    position, a purchase at most the short one; no purchase of a long or of a flat stock, no
    new or larger short, no turn through zero. The rule for a stock that has left the index
    (`MarketData.reducible`), in the env's fill (`tradable_orders`) and in the orders a live
    trader sends (`StockTradingVecEnv.requested_orders`)."""
    sells = torch.where(where, torch.minimum(sells, holdings.clamp_min(0.0)), sells)
    buys = torch.where(where, torch.minimum(buys, (-holdings).clamp_min(0.0)), buys)
    return sells, buys


def tradable_orders(
    sells: Tensor, buys: Tensor, holdings: Tensor, tradable: Tensor, reducible: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The part of the orders [B, N] that a fill at a bar with the masks `tradable` and `reducible`
    (rows of `MarketData.tradable` and `.reducible`; None: no such bar) lets through: all of it on
    a tradable bar, the part that shrinks the position on a reducible one (`toward_zero`), none
    elsewhere (a bar filled over a gap, a warm-up bar)."""
    zero = torch.zeros_like(sells)
    if reducible is None:
        return torch.where(tradable, sells, zero), torch.where(tradable, buys, zero)
    shrunk_sells, shrunk_buys = toward_zero(sells, buys, holdings, reducible)
    sells = torch.where(tradable, sells, torch.where(reducible, shrunk_sells, zero))
    buys = torch.where(tradable, buys, torch.where(reducible, shrunk_buys, zero))
    return sells, buys


def _step_orders(
    state: State,
    actions: Tensor,
    price: Tensor,
    tradable: Tensor,
    guard: Tensor,
    rules: Rules,
    pace: Pace | None = None,
    reducible: Tensor | None = None,
    rates: Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The orders that reach the fill (sells and buys in shares, [E, N], as `fill_orders` takes
    them): the orders of the actions and rates (`orders`, with the aim `weights` where the caller
    holds it), all sold where the turbulence `guard` is on, and what the fill bar's masks
    `tradable` and `reducible` let through (`tradable_orders`). A stock is sold or bought, never
    both."""
    holdings = state.holdings
    sells, buys = orders(actions, holdings, price, state.cash, rules, pace, rates, weights)
    guard = guard.unsqueeze(-1)
    sells = torch.where(guard, holdings.clamp_min(0.0), sells)
    buys = torch.where(guard, torch.zeros_like(buys), buys)
    return tradable_orders(sells, buys, holdings, tradable, reducible)


def account_columns(cash: Tensor, holdings: Tensor, value: Tensor, close: Tensor, rules: Rules) -> Tensor:
    """Cash share and position shares of value, clipped to the space's bounds: float32 [E, 1 + N]."""
    denominator = torch.where(value.abs() > 1e-9, value, torch.ones_like(value)).unsqueeze(-1)
    shares = torch.cat([cash.unsqueeze(-1), holdings * close], dim=-1).div(denominator)
    return shares.clamp(rules.account_low, rules.account_high).float()


def step_kernel(state: State, actions: Tensor, new_start: Tensor, new_end: Tensor, tables: Tables, rules: Rules):
    """The accounting of one step of every sub-environment; pure function of tensors.

    Returns the next state, reward, terminated, truncated, the info entries, and the
    account columns of the final and of the returned observations; the feature part
    of the observations is gathered afterwards (into recycled buffers).
    """
    t1 = state.t + 1
    price = tables.open.index_select(0, t1).double()
    tradable = tables.tradable.index_select(0, t1)
    reducible = tables.reducible.index_select(0, t1) if rules.leavers else None
    guard = tables.guard.index_select(0, state.t)
    actions, rates = read_actions(actions, rules, price.dtype)
    pace = Pace(tables.trade_rate, tables.band) if (rules.has_rate or rules.has_band) else None
    weights = _aim_weights(actions, rules) if rules.aim_reward else None  # the orders' and the reward's aim, once
    sells, buys = _step_orders(state, actions, price, tradable, guard, rules, pace, reducible, rates, weights)
    fill = fill_orders(state.cash, state.holdings, sells, buys, price, tables.open, tables.market, t1, rules.fill)
    holdings = fill.holdings

    close = tables.close.index_select(0, t1).double()
    if rules.borrow_per_bar > 0:  # the bar's borrow fee on the short notional at the close
        borrow = dot(holdings.clamp_max(0.0), close, rules.fill) * -rules.borrow_per_bar
        cash = fill.cash - borrow
    else:
        borrow = torch.zeros_like(fill.cash)
        cash = fill.cash
    value = cash + (holdings * close).sum(-1)
    if rules.aim_reward:  # the aim's return over the bar, at the value at the fill, less the step's costs
        value_at_fill = state.cash + (state.holdings * price).sum(-1)
        earned = value_at_fill * (weights * (close / price - 1.0)).sum(-1)
        paid = fill.commission + fill.spread + fill.impact + borrow
        reward = ((earned - paid) * rules.reward_scale).float()
    else:
        reward = ((value - state.value) * rules.reward_scale).float()
    terminated = value <= 0.0
    truncated = (t1 >= state.end) & ~terminated
    done = terminated | truncated
    info = {
        "t": t1,
        "value": value,
        "cash": cash,
        "holdings": holdings,
        "turnover": fill.traded / state.value.abs().clamp_min(1e-9),
        "costs": fill.commission + fill.spread + fill.impact + borrow,
        "cost_commission": fill.commission,
        "cost_spread": fill.spread,
        "cost_impact": fill.impact,
        "cost_borrow": borrow,
        "ordered_value": fill.ordered,
        "unfilled_value": fill.unfilled_value,
        "unfilled_shares": fill.unfilled_shares,
    }

    fresh_cash = torch.full_like(cash, rules.initial_cash)
    next_state = State(
        t=torch.where(done, new_start, t1),
        end=torch.where(done, new_end, state.end),
        cash=torch.where(done, fresh_cash, cash),
        holdings=torch.where(done.unsqueeze(-1), torch.zeros_like(holdings), holdings),
        value=torch.where(done, fresh_cash, value),
    )
    final_account = account_columns(cash, holdings, value, close, rules)
    account = torch.where(done.unsqueeze(-1), fresh_account(final_account), final_account)
    return next_state, reward, terminated, truncated, info, final_account, account


def fresh_account(like: Tensor) -> Tensor:
    """The account columns of a fresh episode: all cash, no positions. [1, 1 + N]."""
    fresh = torch.zeros((1, like.shape[-1]), dtype=like.dtype, device=like.device)
    fresh[:, 0] = 1.0
    return fresh


class RecyclingBuffers:
    """Output tensors of one shape, reused once nobody but this pool holds them.

    On the CPU every fresh [E, obs_dim] output of tens of MB is a new mapping of
    memory whose pages fault in on first write; that cost more than the step itself
    (over half of a step's time at E=4096, N=30). So the env writes observations into
    buffers it recycles, but only a buffer that no tensor, view or numpy array outside
    this pool still references: what a caller keeps is never overwritten. On CUDA the
    caching allocator already recycles memory and a fresh tensor is returned.
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, size: int = 4) -> None:
        self.shape, self.dtype, self.device, self.size = shape, dtype, device, size
        self.buffers: list[Tensor] = []
        self.enabled = device.type == "cpu" and hasattr(torch._C, "_storage_Use_Count")
        if self.enabled:  # references to a buffer that only this pool holds, counted the same way
            probe = [torch.empty(1)]
            self.baseline = self._references(probe, 0)

    @staticmethod
    def _references(buffers: list[Tensor], index: int) -> tuple[int, int]:
        """(Python references, storage users) of ``buffers[index]``, pool's own included."""
        buffer = buffers[index]
        return sys.getrefcount(buffer), torch._C._storage_Use_Count(buffer.untyped_storage()._cdata)

    def take(self) -> Tensor:
        if self.enabled:
            for index in range(len(self.buffers)):
                if self._references(self.buffers, index) == self.baseline:
                    return self.buffers[index]
        fresh = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        if self.enabled and len(self.buffers) < self.size:
            self.buffers.append(fresh)
        return fresh


def observe(tables: Tables, t: Tensor, account: Tensor, out: Tensor) -> Tensor:
    """Observation rows for bars `t` with the given account columns, written into `out`."""
    torch.index_select(tables.obs, 0, t, out=out)
    out[:, : account.shape[1]] = account
    return out


def compile_options(device: torch.device) -> dict[str, Any] | None:
    """Inductor's options for the step kernel: on a CPU with AVX-512, 256-bit vectors (AVX2).

    With AVX-512 inductor vectorises float64 in pairs of 512-bit registers, 16 lanes, and the
    step's rows of N stocks (N = 30: one full vector and a masked tail of 14) with their many
    row sums ran markedly slower that way than with AVX2's 8 lanes, flat rate and costs alike
    (benchmarks/RESULTS.md, "Costs in the env step", third pass). Other CPUs keep inductor's
    own choice, and CUDA is untouched.
    """
    if device.type == "cpu" and torch.backends.cpu.get_cpu_capability() == "AVX512":
        return {"cpp.simdlen": 256}
    return None


def own_code(function: Callable) -> Callable:
    """A copy of `function` (a closure) with a code object of its own.

    torch.compile keeps the graphs it compiled per code object, at most
    ``torch._dynamo.config.recompile_limit`` (8) of them, and runs the function eagerly past
    that, silently. A closure made by one ``def`` (or a ``functools.partial`` of one function)
    shares its code object with every other closure made there: so each compiled kernel gets a
    copy of its own."""
    return types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


_KERNELS: dict[tuple, Callable] = {}
"""The compiled step kernels built so far, by (rules, device, sub-environments, table shapes): an env
with the same rules and sizes (a tournament worker's next pod, a backtest's next group) reuses one,
and each holds a single graph (`own_code`)."""


def table_shapes(tables: tuple) -> tuple:
    """The shapes of `tables` (a NamedTuple of tensors, None and NamedTuples of the same), nested
    as they are: a key that tells apart tables a compiled kernel cannot share."""
    return tuple(
        table_shapes(table) if isinstance(table, tuple) else None if table is None else tuple(table.shape)
        for table in tables
    )


def compiled_step_kernel(rules: Rules, device: torch.device, key: tuple = ()) -> Callable:
    """`step_kernel` with `rules` bound, through torch.compile, shared by equal (`rules`, `device`,
    `key`): ``key`` names the shapes of the inputs (see `_KERNELS`)."""
    full_key = (rules, device, *key)
    if full_key not in _KERNELS:

        def kernel(state, actions, new_start, new_end, tables):
            return step_kernel(state, actions, new_start, new_end, tables, rules)

        _KERNELS[full_key] = torch.compile(own_code(kernel), dynamic=False, options=compile_options(device))
    return _KERNELS[full_key]
