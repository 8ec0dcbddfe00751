"""A backtest's simulation: every group stepped bar by bar through its env (eagerly, or
chunked and compiled through `market_envs.rollout`), in this process or dealt to forked workers,
the per-bar records kept on the device and brought to the host once, at the end."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from market_envs.data import MarketData
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.rollout import gross_value
from trader.backtesting.result import StrategyInfo
from trader.backtesting.shards import run_forked, shared_zeros, split_rows
from trader.backtesting.strategies import (
    Account,
    Decide,
)
from trader.backtesting.config import Book


@dataclass
class Member:
    """One strategy: its description, decision rule and row in its group's env."""

    info: StrategyInfo
    row: int
    dims: tuple[int, int] | None = None  # a checkpoint's (obs_dim, act_dim), checked against the env
    book: Book | None = None  # where it starts (None: all cash)


@dataclass
class Caller:
    """One decision call per bar, for the consecutive rows [start, stop) of its group."""

    decide: Decide
    start: int
    stop: int


@dataclass
class Group:
    """Strategies sharing one batched env (same panel, same trading rules)."""

    data: MarketData
    rules: EnvConfig
    members: list[Member] = field(default_factory=list)
    callers: list[Caller] = field(default_factory=list)
    env: StockTradingVecEnv | None = None
    close: Tensor | None = None  # float64 [T, N] closes on the env's device, set when the run starts


RECORDED = (
    "value",
    "cash",
    "gross_value",
    "traded",
    "costs",
    "cost_commission",
    "cost_spread",
    "cost_impact",
    "cost_borrow",
    "ordered_value",
    "unfilled_value",
    "unfilled_shares",
)
"""What is recorded per bar and strategy: the env's ``info`` entries of the same names
(``gross_value``: the positions' gross market value at the bar's close, sum of
|shares| x close, longs and shorts alike; ``traded``: value traded, the turnover times
the value at the previous close)."""

TOTALLED = RECORDED[3:]
"""The records summed over the period for `cost_breakdown`."""


@dataclass
class Records:
    """Per-bar records of one group, on the device until `assemble` brings them over."""

    bars: Tensor  # float64 [len(RECORDED), T, E]
    positions: Tensor | None  # float64 [R, E, N]; None where positions are not kept (cost-multiple runs)


def session_flags(timestamps: pd.DatetimeIndex) -> tuple[list[bool], np.ndarray]:
    """Per bar: does the next bar open a new date; and the session-close bar indices."""
    dates = timestamps.tz_localize(None).normalize() if timestamps.tz is not None else timestamps.normalize()
    change = np.asarray(dates[1:] != dates[:-1])
    new_day_next = [bool(x) for x in change] + [True]
    return new_day_next, np.flatnonzero(np.asarray(new_day_next))


WHOLE_GROUP_MAX_ROWS = 4
"""With `BacktestConfig.workers` > 1, groups of at most this many rows are never cut into shards
(`_shards`): their time is their chunks' fixed cost a call, which a cut does not divide (the
baselines' groups: the benchmark, 1 row; the equal-weight pair, 2); they are dealt whole (`_deal`)."""


def simulate(
    groups: list[Group],
    timestamps: pd.DatetimeIndex,
    record_positions: str,
    device: torch.device,
    positions_of: int | None = None,
    chunked: bool = False,
    workers: int = 1,
) -> list[Records]:
    """Step every group's env from the first bar to the last; return the records.

    Positions are kept for the first `positions_of` groups (None: all). `chunked`: a group
    whose every strategy has a program runs many bars per compiled call (`_run_chunked`);
    the others, and all without `chunked`, bar by bar (`_advance`). `workers` > 1 (with
    `chunked`): the large chunked groups are cut into that many shards, shard 0 run here, each
    other shard in a forked worker process (`trader.backtesting.shards`); the chunked groups kept
    whole are dealt to the processes (`_deal`), and the groups without a program run here. What a
    worker will run is compiled here first (`_Pass.compile_here`): the worker inherits it, and the
    next backtest of the session finds it compiled."""
    num_bars = len(timestamps)
    new_day_next, session_ends = session_flags(timestamps)
    recorded = np.arange(num_bars) if record_positions == "bar" else session_ends
    slot_of = {int(t): k for k, t in enumerate(recorded)}
    keep = len(groups) if positions_of is None else positions_of
    records = [  # with workers, any chunked group may run in one (`_deal`): its records are shared
        _start(g, num_bars, len(recorded) if k < keep else None, device, shared=workers > 1 and chunked)
        for k, g in enumerate(groups)
    ]
    observations = [obs for _, obs in records]
    if 0 in slot_of:  # bar 0's record is the start: all cash, or each member's book
        for g, (rec, _) in zip(groups, records):
            if rec.positions is not None:
                rec.positions[slot_of[0]] = g.env.holdings
    by_bar = list(range(len(groups)))
    jobs: list[list[_Pass]] = [[] for _ in range(workers)]  # per process: this one, the workers
    if chunked:
        calendar = torch.tensor(new_day_next, dtype=torch.bool, device=device)
        programs = [_group_program(g, observations[k], calendar, new_day_next[0]) for k, g in enumerate(groups)]
        whole = []  # the chunked groups kept whole
        for k, g in enumerate(groups):
            if programs[k] is None:
                continue
            pieces = _shards(g, programs[k], workers) if workers > 1 else None
            if pieces is None:
                whole.append(k)
                continue
            for w, (start, stop, shard, built) in enumerate(pieces):
                jobs[w].append(_Pass(shard, built, _reset(shard), records[k][0], slot_of, (start, stop)))
        forked = any(jobs[1:])
        for k, w in _deal(groups, whole, workers if forked else 1):
            jobs[w].append(_Pass(groups[k], programs[k], observations[k], records[k][0], slot_of))
        for job in (job for part in jobs[1:] for job in part):  # what a worker would compile, and lose, compiled here
            job.compile_here()
        by_bar = [k for k in by_bar if programs[k] is None]

    def here() -> None:
        for job in jobs[0]:
            job.run()
        ruined = [torch.zeros(g.env.num_envs, dtype=torch.bool, device=device) for g in groups]
        for t in range(num_bars - 1) if by_bar else ():
            slot = slot_of.get(t + 1)
            for k in by_bar:
                g = groups[k]
                observations[k], ruined[k] = _advance(
                    g, observations[k], records[k][0], ruined[k], t, new_day_next[t], slot
                )

    run_forked([functools.partial(_run_all, part) for part in jobs[1:] if part], here)
    return [rec for rec, _ in records]


def _run_all(jobs: Sequence[_Pass]) -> None:
    for job in jobs:
        job.run()


def _deal(groups: list[Group], whole: list[int], processes: int) -> list[tuple[int, int]]:
    """(group, process) for the chunked groups kept whole (`whole`, indices into `groups`), dealt in turn
    from the last worker down to this process (0), the largest (rows x stocks) first (one process: all
    in it). The workers' shards are equal and this process also builds the groups before
    the pass and assembles the results after it, so it takes the smallest: in the year of 64 MLPs on 2
    cores (benchmarks/RESULTS.md, "The C++ wrapper for a shard, the small groups dealt") the pair of equal-weight
    baselines (2 x 100) goes to the worker and the benchmark (1 x 1) stays here."""
    largest = sorted(whole, key=lambda k: -groups[k].env.num_envs * groups[k].env.num_stocks)
    return [(k, processes - 1 - n % processes) for n, k in enumerate(largest)]


def _shards(
    group: Group, built: tuple[_GroupProgram, tuple], workers: int
) -> list[tuple[int, int, Group, tuple[_GroupProgram, tuple]]] | None:
    """The group cut into `workers` shards of consecutive rows (`shards.split_rows`), each a group of
    its own with its env and its rows of the params: (start, stop, shard, its program and params); None
    when it stays whole: a group of at most `WHOLE_GROUP_MAX_ROWS` rows (its time is the chunk's fixed
    cost, which a cut does not divide) or with a part that is not a `PolicyProgram` (whose params
    `take_rows` cuts)."""
    from trader.agents.program import PolicyProgram, take_rows

    program, params = built
    rows = group.env.num_envs
    if rows <= WHOLE_GROUP_MAX_ROWS or not all(isinstance(part, PolicyProgram) for part, _, _ in program.parts):
        return None
    pieces = []
    with torch.random.fork_rng(devices=[]):  # an env seeds its generator from the global one: leave it as it was
        for start, stop in split_rows(rows, min(workers, rows)):
            parts, cut = [], []
            for (part, first, last), param in zip(program.parts, params, strict=True):
                low, high = max(first, start), min(last, stop)
                if low < high:
                    parts.append((part, low - start, high - start))
                    cut.append(take_rows(part, param, low - first, high - first))
            members = [replace(m, row=m.row - start) for m in group.members[start:stop]]
            shard = Group(data=group.data, rules=group.rules, members=members, close=group.close)
            shard.env = StockTradingVecEnv(
                group.data,
                num_envs=stop - start,
                device=group.env.device,
                config=group.rules,
                compile=group.env.compiled,
            )
            pieces.append((start, stop, shard, (_GroupProgram(tuple(parts)), tuple(cut))))
    return pieces


@dataclass
class _Pass:
    """A chunked group's pass (`_run_chunked`) from `obs`, the first observation of its env just reset, for
    the process `simulate` gives it to. `rows` (a shard, `_shards`): its rows [start, stop) of the whole
    group's `records`; None: the group's own records."""

    group: Group
    built: tuple[_GroupProgram, tuple]
    obs: Tensor
    records: Records
    slot_of: dict[int, int]
    rows: tuple[int, int] | None = None

    def _records(self) -> Records:
        if self.rows is None:
            return self.records
        start, stop = self.rows
        positions = self.records.positions
        return Records(self.records.bars[:, :, start:stop], None if positions is None else positions[:, start:stop])

    def run(self) -> None:
        _run_chunked(self.group, self.built, self.obs, self._records(), self.slot_of)

    def compile_here(self) -> None:
        """Compile its chunk in this process (`market_envs.rollout.Rollout.compile_here`) before a forked
        worker runs it; the env is left as it was."""
        _rollout(self.group, self.built, self._records()).compile_here(self.built[1], self.obs)


@dataclass(frozen=True)
class _GroupProgram:
    """The programs of a group's strategies, each deciding its rows [start, stop), as one program."""

    parts: tuple[tuple[Any, int, int], ...]  # (program, start, stop)

    def prepare(self, params: tuple, rows: Tensor) -> tuple:
        return tuple(program.prepare(p, rows) for (program, _, _), p in zip(self.parts, params))

    def decide(self, params: tuple, prepared: tuple, bar: Any) -> Tensor:
        return torch.cat(
            [
                program.decide(p, ready, bar.rows(start, stop)).to(torch.float32)
                for (program, start, stop), p, ready in zip(self.parts, params, prepared)
            ]
        )


def _group_program(group: Group, obs: Tensor, calendar: Tensor, new_day: bool) -> tuple[_GroupProgram, tuple] | None:
    """The group's strategies as one program and its params (from the first bar, after the
    reset), or None when one of them has no program."""
    if not all(hasattr(caller.decide, "program") for caller in group.callers):
        return None
    env = group.env
    close = group.close[0]
    parts, params = [], []
    for caller in group.callers:
        rows = slice(caller.start, caller.stop)
        account = Account(
            t=0,
            new_day_next=new_day,
            close=close,
            cash=env.cash[rows],
            holdings=env.holdings[rows],
            value=env.value[rows],
            within_cash=functools.partial(env.buys_within_cash, cash=env.cash[rows], price=close, t=0),
        )
        built = caller.decide.program(obs[rows], account, calendar)
        if built is None:
            return None
        parts.append((built[0], caller.start, caller.stop))
        params.append(built[1])
    merged, stacked = _stacked(parts, params)
    return _GroupProgram(merged), tuple(stacked)


def _stacked(parts: list[tuple[Any, int, int]], params: list[Any]) -> tuple[tuple, list[Any]]:
    """Adjacent parts that are equal `PolicyProgram`s (agents of one algorithm and architecture: the
    checkpoints of a run, a tournament's pods) as one part deciding all their rows, their params
    stacked (`trader.agents.program.stack_params`): one program call per bar instead of one each."""
    from trader.agents.program import PolicyProgram, stack_params

    merged: list[tuple[Any, int, int]] = []
    groups: list[list[Any]] = []
    for (program, start, stop), param in zip(parts, params, strict=True):
        if merged and isinstance(program, PolicyProgram) and merged[-1][0] == program and merged[-1][2] == start:
            merged[-1] = (program, merged[-1][1], stop)
            groups[-1].append(param)
        else:
            merged.append((program, start, stop))
            groups.append([param])
    stacked = [group[0] if len(group) == 1 else stack_params(part[0], group) for part, group in zip(merged, groups)]
    return tuple(merged), stacked


def chunk_record(positions: bool) -> tuple[str, ...]:
    """The ``info`` entries a chunked pass records per bar (`market_envs.rollout.Rollout`'s ``record``):
    those `_run_chunked` writes, and the holdings where `positions` are kept."""
    return (
        *(("holdings",) if positions else ()),
        "terminated",
        "previous_value",
        "turnover",
        *(key for key in RECORDED if key != "traded"),
    )


def _run_chunked(
    group: Group, built: tuple[_GroupProgram, tuple], obs: Tensor, records: Records, slot_of: dict[int, int]
) -> None:
    """The group's whole pass by `market_envs.rollout.Rollout` (many bars per compiled call),
    recorded as `_advance` records it.

    The chunks' rows are written into the records once per `market_envs.rollout.DEFAULT_BLOCK`
    bars, not once per chunk: the eager operations of a write (the ruin mask, the traded value,
    the table's masked copy) cost the same whatever their rows, so a chunk of 8 bars paid them 32
    times as often (the gross value is recorded in the compiled chunk, ``gross_value``)."""
    from market_envs.rollout import DEFAULT_BLOCK

    rollout = _rollout(group, built, records)
    env, record = group.env, rollout.record
    steps_in_pass = env.num_bars - 1
    ruined = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    pending: list[dict[str, Tensor]] = []  # the rows of the chunks not written yet
    held: list[tuple[int, int, Tensor]] = []  # (slot, row among the pending, holdings) at session ends
    since = 0  # the first step of the pending rows

    def write() -> None:
        nonlocal ruined
        rows = {key: torch.cat([chunk[key] for chunk in pending]) for key in record if key != "holdings"}
        bars = slice(since + 1, since + 1 + rows["terminated"].shape[0])  # step k ends at bar k + 1
        ruined = torch.cumsum(rows["terminated"].to(torch.int32), dim=0).bool() | ruined  # [steps, E]
        kept = ~ruined
        rows["traded"] = rows["turnover"] * rows["previous_value"].abs().clamp_min(1e-9)
        table = torch.stack([rows[key].to(torch.float64) for key in RECORDED], dim=0)  # [len(RECORDED), steps, E]
        records.bars[:, bars] = torch.where(kept, table, torch.zeros_like(table))
        for slot, k, holdings in held:  # session ends: one per 390 bars
            records.positions[slot] = torch.where(kept[k].unsqueeze(-1), holdings, torch.zeros_like(holdings))
        ruined = ruined[-1]
        pending.clear()
        held.clear()

    def keep(first: int, steps: int, rows: dict[str, Tensor]) -> None:
        nonlocal since
        if not pending:
            since = first
        pending.append(rows)
        if records.positions is not None:  # Python ints (no sync)
            held.extend(
                (slot_of[first + 1 + k], first - since + k, rows["holdings"][k])
                for k in range(steps)
                if first + 1 + k in slot_of
            )
        if first + steps - since >= DEFAULT_BLOCK or first + steps >= steps_in_pass:
            write()

    rollout.run(built[1], obs, on_chunk=keep)


def _rollout(group: Group, built: tuple[_GroupProgram, tuple], records: Records) -> Any:
    """The `market_envs.rollout.Rollout` of the group's chunked pass, recording what `_run_chunked` keeps."""
    from market_envs.rollout import Rollout

    return Rollout(group.env, built[0], record=chunk_record(records.positions is not None))


def _reset(group: Group) -> Tensor:
    """Reset the group's env (members with a `Book` start from it); the first observation."""
    env = group.env
    e, n = env.num_envs, env.num_stocks
    books = [m.book for m in group.members]
    if any(b is not None for b in books):
        cash = [env.config.initial_cash if b is None else b.cash for b in books]
        holdings = [[0.0] * n if b is None else list(b.holdings) for b in books]
        obs, _ = env.reset(
            options={
                "cash": torch.tensor(cash, dtype=torch.float64),
                "holdings": torch.tensor(holdings, dtype=torch.float64).reshape(e, n),
            }
        )
    else:
        obs, _ = env.reset()
    return obs


def _start(
    group: Group, num_bars: int, num_slots: int | None, device: torch.device, shared: bool = False
) -> tuple[Records, Tensor]:
    """Reset the group's env (`_reset`), allocate its records (in shared memory when `shared`: worker
    processes write shards of them, `trader.backtesting.shards`), record bar 0 (all cash, or the book
    marked at its close)."""
    env = group.env
    e, n = env.num_envs, env.num_stocks
    obs = _reset(group)

    def zeros(*shape: int) -> Tensor:
        return shared_zeros(shape, torch.float64) if shared else torch.zeros(shape, dtype=torch.float64, device=device)

    bars = zeros(len(RECORDED), num_bars, e)
    positions = None if num_slots is None else zeros(num_slots, e, n)
    records = Records(bars, positions)
    records.bars[RECORDED.index("value"), 0] = env.value
    records.bars[RECORDED.index("cash"), 0] = env.cash
    group.close = env.data.close.double()
    return records, obs


def _advance(group: Group, obs: Tensor, records: Records, ruined: Tensor, t: int, new_day_next: bool, slot: int | None):
    """Decide at bar t for every member, step the env once, record bar t+1."""
    env = group.env
    close = group.close[t]
    cash, holdings, value = env.cash, env.holdings, env.value
    actions = torch.cat(
        [
            caller.decide(
                obs[caller.start : caller.stop],
                Account(
                    t=t,
                    new_day_next=new_day_next,
                    close=close,
                    cash=cash[caller.start : caller.stop],
                    holdings=holdings[caller.start : caller.stop],
                    value=value[caller.start : caller.stop],
                    within_cash=functools.partial(
                        env.buys_within_cash, cash=cash[caller.start : caller.stop], price=close, t=t
                    ),
                ),
            ).to(torch.float32)
            for caller in group.callers
        ]
    )
    obs, _, terminated, _, info = env.step(actions)
    ruined = ruined | terminated
    keep = ~ruined
    info["traded"] = info["turnover"] * value.abs().clamp_min(1e-9)
    info["gross_value"] = gross_value(info["holdings"], group.close[t + 1])
    row = torch.stack([info[key].to(torch.float64) for key in RECORDED])  # [len(RECORDED), E]
    records.bars[:, t + 1] = torch.where(keep, row, torch.zeros_like(row))
    if slot is not None and records.positions is not None:
        records.positions[slot] = torch.where(keep.unsqueeze(-1), info["holdings"], torch.zeros_like(info["holdings"]))
    return obs, ruined
