"""Strategies a backtest runs: policies, and the baselines beside them.

A strategy turns what is known at bar t into actions for its sub-environments:
``decide(obs, account) -> actions``, with ``obs`` float32 [E_s, obs_dim] (the env's
observation rows of its sub-environments) and ``account`` an `Account` (bar index,
closes at t, cash, holdings and value of those rows). Nothing after bar t is ever
handed to a strategy; the env fills the order at bar t+1's open.

Baselines trade whole shares in the env's ``shares`` mode with a large
``max_shares``, so that "no order" is exactly zero (weights mode has no way to say
"hold": a target equal to the current weights still trades the drift between the
close and the next open). A desired order of ``k`` shares is encoded as the action
``(k + 0.5 sign k) / max_shares``, which the env's ``trunc(action x max_shares)``
turns back into exactly ``k``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from market_envs.rollout import Bar, CallableProgram, PerBar, Program
from trader.errors import UserError

BASELINE_MAX_SHARES = 1_000_000_000
"""max_shares of the baseline envs: any order a baseline wants fits in one step."""


@dataclass(frozen=True)
class Account:
    """What a strategy may look at when it decides at bar ``t`` (its rows only).

    :param t: bar index of the observation.
    :param new_day_next: the next bar opens a new exchange date (known from the
        calendar, not from prices); True at the last bar of each session.
    :param close: float64 [N] closes at bar t.
    :param cash: float64 [E_s] cash after the fills up to bar t.
    :param holdings: float64 [E_s, N] shares held.
    :param value: float64 [E_s] portfolio value at bar t's close.
    :param within_cash: ``buys -> buys``: of purchases in shares [E_s, N] (>= 0) at bar
        t's close, the part that these accounts' cash pays for under the env's cost model
        (`StockTradingVecEnv.buys_within_cash`).
    """

    t: int
    new_day_next: bool
    close: Tensor
    cash: Tensor
    holdings: Tensor
    value: Tensor
    within_cash: Callable[[Tensor], Tensor]


Decide = Callable[[Tensor, Account], Tensor]

Compiled = tuple[Program, Any] | None
"""A decider's rule as a `market_envs.rollout.Program` and its params, for a backtest that runs
many bars per compiled call (``BacktestConfig.compile``). A decider that has one offers
``program(obs, first, session_ends) -> Compiled``, built from the first bar's observation and
`Account` and ``session_ends`` (bool [T]: the next bar opens a new date; the calendar); the
others (a strategy's group then runs bar by bar) have no such method."""


def shares_to_actions(shares: Tensor, max_shares: int) -> Tensor:
    """Whole-share orders [E, N] as shares-mode actions that the env truncates back exactly."""
    nudged = shares + 0.5 * torch.sign(shares)
    return (nudged / max_shares).clamp(-1.0, 1.0).to(torch.float32)


class BuyAndHold:
    """Buy a fixed-weight portfolio once with the starting capital, then hold it.

    At its first decision it sets its target in whole shares: ``weight x starting
    value`` of each stock at that close, the commission rate kept aside, cut so that
    the whole bill under the env's cost model fits the cash (`Account.within_cash`); a
    stock the account already holds (a starting book) keeps its holdings as target.
    At every decision it orders what is not held yet of the target, as much as the
    cash pays for: the part of an order that the participation cap left unfilled, or
    that the tradable mask or a dearer open kept out, is ordered again, bar after bar,
    until the target is held. Then it never trades again; it never sells.

    :param weights: float64 [N] target weights (summing to at most 1).
    :param buy_cost: the env's buy cost rate per side, kept aside so that cash covers it
        (the other terms of the cost model are `Account.within_cash`'s).
    """

    def __init__(self, weights: Tensor, buy_cost: float) -> None:
        self.weights = weights
        self.buy_cost = buy_cost
        self._target: Tensor | None = None

    def __call__(self, obs: Tensor, account: Account) -> Tensor:
        if self._target is None or account.t == 0:
            budget = account.value.unsqueeze(-1) * self.weights.to(account.value.device)
            wanted = torch.floor(budget / (account.close * (1.0 + self.buy_cost)))
            held = account.holdings > 0
            affordable = account.within_cash(torch.where(held, torch.zeros_like(wanted), wanted))
            self._target = torch.where(held, account.holdings, affordable)
        # Where the target is held this is an order of 0 shares; asking the device whether it
        # is would cost a host sync every bar (a stall of the stream on a GPU).
        missing = (self._target - account.holdings).clamp_min(0.0)
        return shares_to_actions(account.within_cash(missing), BASELINE_MAX_SHARES)

    def program(self, obs: Tensor, first: Account, session_ends: Tensor) -> Compiled:
        """The same orders as a program: the target set at the first bar (as `__call__` sets it),
        then every bar what is not held yet of it, within the cash."""
        self(obs, first)
        return _BuyAndHoldProgram(), (self._target,)


@dataclass(frozen=True)
class _BuyAndHoldProgram:
    def prepare(self, params: Any, rows: Tensor) -> None:
        return None

    def decide(self, params: Any, prepared: Any, bar: Bar) -> Tensor:
        missing = (params[0] - bar.holdings).clamp_min(0.0)
        return shares_to_actions(bar.within_cash(missing, bar.cash), BASELINE_MAX_SHARES)


class DailyRebalance:
    """Hold fixed weights, rebalanced once a day at the open.

    At the first bar and at the last bar of each session the strategy orders the
    whole-share difference between its holdings and ``weight x value`` (at that
    close, the commission rate kept aside in cash); the order fills at the next
    session's open, where the env cuts the purchases to the cash when the other cost
    terms need more. Between rebalances it does not trade: what a participation cap
    left unfilled is part of the difference that the next rebalance orders anew.

    :param weights: float64 [N] target weights (summing to at most 1).
    :param buy_cost: the env's buy cost rate per side, kept aside in cash.
    """

    def __init__(self, weights: Tensor, buy_cost: float) -> None:
        self.weights = weights
        self.buy_cost = buy_cost

    def __call__(self, obs: Tensor, account: Account) -> Tensor:
        if not (account.t == 0 or account.new_day_next):
            return torch.zeros(account.holdings.shape, dtype=torch.float32, device=account.holdings.device)
        return _rebalance(self.weights.to(account.value.device), self.buy_cost, account)

    def program(self, obs: Tensor, first: Account, session_ends: Tensor) -> Compiled:
        """The same orders as a program, at the first bar and each session's last."""
        rebalance_bars = session_ends.clone()
        rebalance_bars[0] = True
        return _DailyRebalanceProgram(self.buy_cost), (self.weights.to(first.value.device), PerBar(rebalance_bars))


def _rebalance(weights: Tensor, buy_cost: float, account: Account | Bar) -> Tensor:
    """The whole-share orders from `account`'s holdings to ``weights`` of its value (`DailyRebalance`)."""
    budget = account.value.unsqueeze(-1) * weights
    target = torch.floor(budget / (account.close * (1.0 + buy_cost)))
    return shares_to_actions(target - account.holdings, BASELINE_MAX_SHARES)


@dataclass(frozen=True)
class _DailyRebalanceProgram:
    buy_cost: float

    def prepare(self, params: Any, rows: Tensor) -> None:
        return None

    def decide(self, params: Any, prepared: Any, bar: Bar) -> Tensor:
        weights, rebalance_bars = params
        orders = _rebalance(weights, self.buy_cost, bar)
        return torch.where(rebalance_bars[bar.step], orders, torch.zeros_like(orders))


class ActionSchedule:
    """Actions fixed in advance, one row per bar of the period: row t is the decision
    at bar t (e.g. an oracle's target weights, computed from data up to each bar).
    Every sub-environment of the strategy gets the same row. It runs under the
    policies' trading rules (`BacktestConfig.policy_env`).

    :param actions: float [T, act_dim] in [-1, 1], T = bars of the backtest period.
    """

    def __init__(self, actions: Tensor) -> None:
        if actions.dim() != 2:
            raise UserError(f"ActionSchedule needs actions of shape [bars, act_dim], got {tuple(actions.shape)}")
        self.actions = actions.to(torch.float32)

    def __call__(self, obs: Tensor, account: Account) -> Tensor:
        return self.actions[account.t].to(obs.device).expand(obs.shape[0], -1)

    def program(self, obs: Tensor, first: Account, session_ends: Tensor) -> Compiled:
        """Row t of the schedule at bar t, as a program."""
        return _ScheduleProgram(), (PerBar(self.actions.to(first.value.device)),)


@dataclass(frozen=True)
class _ScheduleProgram:
    def prepare(self, params: Any, rows: Tensor) -> None:
        return None

    def decide(self, params: Any, prepared: Any, bar: Bar) -> Tensor:
        return params[0][bar.step].expand(bar.cash.shape[0], -1)


class PolicyDecider:
    """A policy's deterministic actions: an agent's ``act(obs, deterministic=True)``
    or any callable ``obs [E, obs_dim] -> actions [E, act_dim]`` in [-1, 1].

    :param policy: the agent or callable.
    :param name: the strategy's name, for error messages.
    :param act_dim: the env's action dimension, checked on the first call.
    :param program: the policy as a program, when the caller has it (a `PolicyPopulation`'s).
    """

    def __init__(self, policy: Any, name: str, act_dim: int, program: Compiled = None) -> None:
        act = getattr(policy, "act", None)
        if act is None and not callable(policy):
            raise UserError(
                f"strategy {name!r}: a policy must be an agent with act() or a callable, got {type(policy).__name__}"
            )
        self._act = (lambda obs: act(obs, deterministic=True)) if act is not None else policy
        self._policy = policy
        self._program = program
        self.name = name
        self.act_dim = act_dim
        self._checked = False

    def __call__(self, obs: Tensor, account: Account) -> Tensor:
        with torch.no_grad():
            actions = self._act(obs)
        if not self._checked:
            self._check(actions, obs)
        return actions

    def program(self, obs: Tensor, first: Account, session_ends: Tensor) -> Compiled:
        """The policy as a program: a `PolicyPopulation`'s own, an agent's
        (`trader.agents.program.agents_program`: the first layer split, its features part
        computed per chunk of bars), else the callable traced as it is (`CallableProgram`).
        The first bar's actions are checked as `__call__` checks them."""
        from trader.agents.program import agents_program

        self(obs, first)
        if self._program is not None:
            return self._program
        if hasattr(self._policy, "deterministic_trunk"):
            built = agents_program([self._policy])
            if built is not None:
                return built
        return CallableProgram(self._act), ()

    def _check(self, actions: Any, obs: Tensor) -> None:
        """Shape and device of the first actions (later calls are trusted: no sync per step)."""
        if not isinstance(actions, Tensor):
            raise UserError(f"strategy {self.name!r}: policy returned {type(actions).__name__}, expected a tensor")
        expected = (obs.shape[0], self.act_dim)
        if tuple(actions.shape) != expected:
            raise UserError(
                f"strategy {self.name!r}: policy returned actions of shape {tuple(actions.shape)}, expected {expected}"
            )
        if actions.device != obs.device:
            raise UserError(
                f"strategy {self.name!r}: policy returned actions on {actions.device}, the env is on {obs.device}"
            )
        self._checked = True


class PolicyPopulation:
    """K policies evaluated in one call: ``policy(obs [K, obs_dim]) -> actions [K, N]``,
    row k being policy k's decision. Each row is its own strategy in the backtest
    (named ``names[k]``); the population is just a faster way to call them
    (one batched forward per bar instead of K), as PureJaxRL batches agents.

    :param policy: the batched callable.
    :param names: one strategy name per row.
    """

    def __init__(self, policy: Callable[[Tensor], Tensor], names: list[str], program: Compiled = None) -> None:
        if not names:
            raise UserError("PolicyPopulation needs at least one name")
        self.policy = policy
        self.names = list(names)
        self.program = program
        """The population as a `market_envs.rollout.Program` and its params, when it has one."""

    @classmethod
    def from_modules(cls, modules: dict[str, torch.nn.Module]) -> PolicyPopulation:
        """Stack modules of one architecture (``obs [1, D] -> actions [1, N]``) into one
        vmapped forward with `torch.func`; name -> module gives the strategy names."""
        from torch.func import functional_call, stack_module_state

        nets = list(modules.values())
        params, buffers = stack_module_state(nets)
        base = nets[0]

        def one(p: dict, b: dict, x: Tensor) -> Tensor:
            return functional_call(base, (p, b), (x.unsqueeze(0),)).squeeze(0)

        batched = torch.vmap(one, in_dims=(0, 0, 0))

        def forward(obs: Tensor) -> Tensor:
            return batched(params, buffers, obs)

        return cls(forward, list(modules), _modules_program(nets))


def _modules_program(nets: list[torch.nn.Module]) -> Compiled:
    """Flat MLPs over a market observation as one `trader.agents.program.PolicyProgram` (None
    for other modules, or an observation that is not the market layout)."""
    from trader.agents.program import sequential_layers, trunk_program

    first = nets[0][0] if sequential_layers(nets[0]) is not None else None
    if first is None:
        return None
    out = [m for m in nets[0] if isinstance(m, torch.nn.Linear)][-1].out_features
    return trunk_program(nets, first.in_features, out)


def agents_population(agents: dict[str, Any]) -> PolicyPopulation:
    """Agents of one algorithm and architecture as a `PolicyPopulation` (name -> agent): one
    program that decides every row (`trader.agents.program.agents_program`, the snapshots of a
    run or the pods of a tournament in one pass) where they have one; bar by bar, each agent
    decides its row."""
    from trader.agents.program import agents_program

    members = list(agents.values())

    def each(obs: Tensor) -> Tensor:
        return torch.cat([agent.act(obs[s : s + 1], deterministic=True) for s, agent in enumerate(members)])

    return PolicyPopulation(each, list(agents), agents_program(members))


@dataclass(frozen=True)
class ExternalPolicy:
    """A policy trained outside podracer-trader's agents (a baseline library's model),
    with the report's label for it and the env rules it was trained under.

    One policy, or several over consecutive windows of time (FinRL's ensemble: each
    window is traded by the learner chosen on the validation window before it):
    ``starts[k]`` is the first timestamp policy ``k`` decides, ``starts[0]`` may be
    None (from the start of any period). A backtest period that begins before
    ``starts[0]`` is refused: the policy was trained on data after it.

    :param policies: objects with ``act(obs, deterministic=True)`` or callables
        ``obs [E, obs_dim] -> actions [E, N]``.
    :param starts: one start per policy, increasing.
    :param label: the report's row label ("SB3 PPO (seed 0)").
    :param source: where it comes from (its model folder), for the report.
    :param env_config: the trading rules it was trained under (an `EnvConfig`).
    :param training: how it was trained (its sidecar's budget, steps, seconds, ...),
        copied into the report.
    """

    policies: tuple[Any, ...]
    starts: tuple[Any, ...]
    label: str
    source: str
    env_config: Any
    training: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.policies or len(self.policies) != len(self.starts):
            raise UserError(f"ExternalPolicy {self.label!r}: needs one start per policy")

    def decider(self, timestamps: Any, name: str, act_dim: int) -> Decide:
        """The decision rule over a period with these bar `timestamps`."""
        deciders = [PolicyDecider(policy, name, act_dim) for policy in self.policies]
        first = self.starts[0]
        if first is not None and timestamps[0] < first:
            raise UserError(
                f"strategy {name!r} trades from {first} on (it was trained on data up to then); "
                f"the backtest period starts at {timestamps[0]}"
            )
        if len(deciders) == 1:
            return deciders[0]
        bars = [0] + [int(timestamps.searchsorted(start, "left")) for start in self.starts[1:]]
        return _Windowed(deciders, bars)


class _Windowed:
    """Decider ``k`` decides the bars from ``bars[k]`` up to ``bars[k + 1]``."""

    def __init__(self, deciders: list[Decide], bars: list[int]) -> None:
        self.deciders = deciders
        self.bars = bars

    def __call__(self, obs: Tensor, account: Account) -> Tensor:
        k = bisect.bisect_right(self.bars, account.t) - 1
        return self.deciders[k](obs, account)
