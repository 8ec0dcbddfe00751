"""Many bars per call: a full-period pass of `StockTradingVecEnv` with the decisions inside.

A validation pass or a backtest steps one env through every bar of a period and
decides at every bar from what it observes. Bar by bar, with few sub-environments,
the time is a fixed cost per bar (a call through torch.compile's wrapper, the
policy's small kernels, the observation gather), not arithmetic
(benchmarks/RESULTS.md, "Validation pass"). `Rollout` runs ``chunk`` bars per call
instead: one function holds ``chunk`` copies of (decide, the env's `step_kernel`,
observe), compiled once, so the fixed cost is paid once per chunk of bars.

The decision is a `Program`, a pure function of tensors:

- ``prepare(params, rows)``, once per block of ``block`` bars (several chunks), outside the
  compiled chunk: from the observation-table rows of the block's bars (the market
  features, which no decision changes; the account columns are 0), whatever the
  decisions can compute ahead, e.g. a network's first layer applied to the features of
  every bar of the block in one matrix product (a large one: 64 policies' first layers
  are read once per block instead of once per bar);
- ``decide(params, prepared, bar)``, every bar: actions [E, N] from this bar's slice of
  ``prepared`` and the `Bar` (observation, account, closes).

``params`` are the program's tensors (weights), inputs of the compiled function, so a
new snapshot of the same network runs without recompiling.

The accounting is the env's `step_kernel`, the same function `StockTradingVecEnv.step`
calls, and observations are built as ``step`` builds them; only the deterministic
full-period mode (``random_start=False``, ``episode_length=None``: every
sub-environment at the same bar, one episode from the first bar to the last) is
supported. A chunk that runs past the last bar goes on into the autoreset episode;
those steps are dropped. Nothing is copied to the host and nothing waits on the
device inside a pass: the bar of every step is known in advance.

Results equal the bar-by-bar path's within float rounding: the same kernel, traced
into a larger graph, and programs that split a matrix product in two (features and
account) sum in another order (tests/test_rollout.py states the tolerances).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from market_envs.env import StockTradingVecEnv
from market_envs.kernel import compile_options, own_code, step_kernel
from market_envs.tables import PER_ENV_TABLES
from market_envs.fill import within_cash
from market_envs.errors import UserError

DEFAULT_BLOCK = 256
"""Bars per `Program.prepare` call (its product with the features is then a matrix of 256
rows, fast on a CPU, where 8 rows read the weights nearly as often as 1), and per cut of the
env's tables (every chunk of a block reads the same cut: no table is copied per chunk)."""

DEFAULT_CHUNK = 8
"""Bars per call. Compile time grows with it and the time per bar falls (on the CPU,
N=30, one sub-environment: about 63 us a bar at 1, 24 at 8, 19 at 32)."""

CHUNK_OPTIONS = {"cpp_wrapper": True}
"""Inductor's options for a chunk of a pass with few sub-environments on a CPU (`Rollout`'s
``cpp_wrapper``), beside the env step's (`market_envs.kernel.compile_options`). A chunk's code is a
few fused kernels a bar, called by a wrapper that also allocates and views their buffers; in
Python (inductor's default) that bookkeeping was most of a validation pass's time, in C++ it is
a small part (benchmarks/RESULTS.md, "Validation pass"). It costs compile time (the wrapper goes
through the C++ compiler too, once per process; inductor's on-disk cache keeps it for the next),
and a backtest of 64 sub-environments, whose bars are arithmetic, gained nothing from it
("Backtest speed"). On CUDA the same option exists (a C++ wrapper launching the kernels) but has
not been run on a GPU here, so a CUDA chunk keeps inductor's default; CUDA graphs are the other
remedy there (benchmarks/RESULTS.md, "Still to run on a GPU")."""

CPP_WRAPPER_MAX_ENVS = 32
"""`Rollout`'s default ``cpp_wrapper``: on a CPU, for passes of at most this many sub-environments: a
validation pass (1), a backtest's small groups, the baselines' (the equal-weight pair: 2) and the
benchmark's (1), whose chunks are mostly the wrapper's bookkeeping (the pair's Python wrapper made about
270 allocations and views a call), and a shard of a backtest's policies over two processes
(`trader.backtesting.shards`: 32 of 64), whose Python wrapper made about 260. In the year of 64 policies
on 2 cores a shard of 32 MLPs took 46.1 and 47.8 s with the C++ wrapper against 54.0 and 56.5 s without,
32 per-stock agents 53.9 against 62.3 s; the whole group of 64 in one process ran slower with it (98.0
against 90.7 s; so did it in "The baselines' groups' fixed cost"), so passes of more keep inductor's
Python wrapper (benchmarks/RESULTS.md, "The C++ wrapper for a shard, the small groups dealt"). Results
are the same bit for bit either way (the same kernels)."""


STORE_OPTIONS = {"deterministic": True, "realize_reads_threshold": 1}
"""Inductor's options for every chunk on a CPU: store, rather than recompute, a value that a later
operation reads many times over. A policy's first layer reads each bar's account columns (cash and
positions as shares of the book: divisions, clamps and a conversion of float64 state) once per
output unit, through a broadcast; inductor's heuristics inline such a cheap producer into the
reduction, so a flat MLP of 64 units computed every account column 64 times a bar. With these options
a broadcast input that reads more than one buffer is stored first (``deterministic`` makes a
broadcast's reuse count as a reuse, as it did before torch 2.13; ``realize_reads_threshold`` lowers the
count of buffers read that makes it worth storing, 4 by default). On a CPU ``deterministic`` changes
nothing else a chunk uses (it also turns off autotuning's benchmarks, which a chunk does not run).
Results are the same bit for bit (the same operations, stored and read back); the year of 64 policies on
2 cores took 0.66x to 0.75x its time before with MLPs, 0.88x to 0.91x with per-stock networks, and the
validation pass was no slower (benchmarks/RESULTS.md, "A chunk stores what it reads many times"). CUDA
keeps inductor's defaults (not measured there)."""


def chunk_options(device: torch.device, cpp_wrapper: bool) -> dict[str, Any] | None:
    """Inductor's options for a chunk on `device`: on a CPU `STORE_OPTIONS`, and `CHUNK_OPTIONS` with
    `cpp_wrapper`."""
    options = compile_options(device)
    if device.type != "cpu":
        return options
    return {**(options or {}), **STORE_OPTIONS, **(CHUNK_OPTIONS if cpp_wrapper else {})}


class PerBar:
    """A program's param with one row per bar of the period, [T, ...]: a pass hands the program
    only the rows of each chunk's bars (so the compiled graph does not depend on T), and the
    program reads row ``bar.step``."""

    def __init__(self, table: Tensor) -> None:
        self.table = table


def _is_per_bar(x: Any) -> bool:
    return isinstance(x, PerBar)


def _rows(prepared: Any, start: int, stop: int) -> Any:
    """Rows [start, stop) of every tensor of a program's `prepare` (a plain tensor needs no pytree walk)."""
    if prepared is None or isinstance(prepared, Tensor):
        return None if prepared is None else prepared[start:stop]
    return tree_map(lambda x: None if x is None else x[start:stop], prepared)


class Bar(NamedTuple):
    """What a program may read when it decides at bar ``t`` (rows of its sub-environments)."""

    step: int  # the bar's row in the chunk: row ``step`` of a `PerBar` param is bar t's
    t: Tensor  # int64 [E], the bar of the observation (the same for every row)
    obs: Tensor  # float32 [E, obs_dim]
    account: Tensor  # float32 [E, 1 + N], ``obs[:, :1 + N]`` (cash and position shares)
    cash: Tensor  # float64 [E]
    holdings: Tensor  # float64 [E, N]
    value: Tensor  # float64 [E], at bar t's close
    close: Tensor  # float64 [N], closes at bar t
    within_cash: Callable[[Tensor, Tensor], Tensor]
    """``(buys [B, N], cash [B]) -> buys``: the part of purchases at bar t's close that the cash
    pays for under the env's cost model (`StockTradingVecEnv.buys_within_cash`)."""

    def rows(self, start: int, stop: int) -> Bar:
        """The rows [start, stop) of the per-row fields (a group's strategy of several rows)."""
        return self._replace(
            obs=self.obs[start:stop],
            account=self.account[start:stop],
            cash=self.cash[start:stop],
            holdings=self.holdings[start:stop],
            value=self.value[start:stop],
        )


class Program(Protocol):
    """A decision rule as pure functions of tensors (see the module docstring)."""

    def prepare(self, params: Any, rows: Tensor) -> Any:
        """Per chunk: a pytree of tensors whose leading dimension is the chunk's bars."""

    def decide(self, params: Any, prepared: Any, bar: Bar) -> Tensor:
        """Per bar: float32 actions [E, N]; ``prepared`` is this bar's slice."""


class CallableProgram:
    """A plain ``obs [E, obs_dim] -> actions [E, N]`` callable as a `Program` (nothing prepared).

    The callable is traced into the compiled chunk as it is; its tensors are constants of
    the graph, so a callable whose weights change needs a new `Rollout`."""

    def __init__(self, policy: Callable[[Tensor], Tensor]) -> None:
        self.policy = policy

    def prepare(self, params: Any, rows: Tensor) -> None:
        return None

    def decide(self, params: Any, prepared: Any, bar: Bar) -> Tensor:
        return self.policy(bar.obs).to(torch.float32)


def _at(prepared: Any, k: int) -> Any:
    return tree_map(lambda x: None if x is None else x[k], prepared)


def _chunk(
    state,
    obs,
    params,
    prepared,
    tables,
    first,
    new_start,
    new_end,
    *,
    program,
    rules,
    steps: int,
    record: tuple[str, ...],
    width: int,
):
    """``steps`` bars of (decide, `step_kernel`, observe); returns the state, the last
    observation and the recorded ``info`` entries, each stacked [steps, ...]. `prepared`:
    the program's `prepare` of these bars.

    `tables` holds the ``block + 1`` bars from `first` (an int64 [1] tensor: the first bar of the
    chunk's block) on and the state's bars count from `first` (`Rollout.run` cuts the tables once
    per block and shifts the state), so the compiled graph's shapes do not depend on the period's
    length: one compilation serves every period.

    A program that reads a bar's account columns (`Bar.account`) but not its whole observation
    leaves that bar's observation unbuilt: the compiler drops it, and only the chunk's last one
    ([E, obs_dim], the next chunk's first) is written (64 policies over 100 stocks x 14 columns:
    358 KB a bar not written and not gathered from the table)."""
    rows: dict[str, list[Tensor]] = {key: [] for key in record}
    account = obs[:, :width]
    for k in range(steps):
        t = state.t
        close = tables.close.index_select(0, t[:1])[0].double()
        cash_limit = functools.partial(_within_cash, price=close, t1=t[:1] + 1, tables=tables, rules=rules)
        bar = Bar(k, t + first, obs, account, state.cash, state.holdings, state.value, close, cash_limit)
        actions = program.decide(params, _at(prepared, k), bar)
        before = state
        state, reward, terminated, truncated, info, _, account = step_kernel(
            state, actions, new_start, new_end, tables, rules
        )
        info["reward"], info["terminated"], info["truncated"] = reward, terminated, truncated
        info["previous_value"] = before.value
        if "gross_value" in record:  # at the close of the bar the step ends at
            info["gross_value"] = gross_value(info["holdings"], tables.close.index_select(0, t[:1] + 1)[0].double())
        obs = torch.cat([account, tables.obs.index_select(0, state.t)[:, width:]], dim=1)
        for key in record:
            rows[key].append(info[key])
    return state, obs, {key: torch.stack(values) for key, values in rows.items()}


def gross_value(holdings: Tensor, close: Tensor) -> Tensor:
    """The positions' gross market value [E]: the sum over stocks of |shares| x close (`holdings`
    [E, N], `close` [N]); the backtest's ``gross_value`` record, chunked or bar by bar."""
    return (holdings.abs() * close).sum(-1)


def _cut(tables: Any, bars: Tensor, num_bars: int) -> Any:
    """The rows `bars` of every per-bar table, in nested tables too (the cost terms' tables,
    `market_envs.fill_inputs.Market`); a [1, N] table, the same every bar, stays; the
    per-sub-environment tables, `PER_ENV_TABLES`, stay whole even when E equals T."""
    cut = {}
    for name, table in tables._asdict().items():
        if isinstance(table, tuple):
            cut[name] = _cut(table, bars, num_bars)
        elif name not in PER_ENV_TABLES and table is not None and table.shape[0] == num_bars:
            cut[name] = table.index_select(0, bars)
    return tables._replace(**cut)


def _within_cash(buys: Tensor, cash: Tensor, *, price: Tensor, t1: Tensor, tables: Any, rules: Any) -> Tensor:
    return within_cash(buys, cash, price, t1, tables.market, rules.fill)


_CALLED: set[tuple] = set()
"""The keys of `_CHUNKS` whose function has run in this process (and so is compiled here, when
compiled). A forked worker inherits the set as it was at the fork; what the worker compiles, and adds,
ends with it (`Rollout.compile_here`)."""

_CHUNKS: dict[tuple, Callable] = {}
"""The chunk functions built so far, by (program, rules, chunk, block, record, width, sub-environments,
device, compile, C++ wrapper), each with one graph (`market_envs.kernel.own_code`):
a pass with the same program and rules (the next snapshot, the next pod in a worker
process) reuses the compiled function instead of compiling again. Programs and rules
are frozen dataclasses, equal by value."""


def _chunk_function(program: Program, rules: Any, steps: int, record: tuple[str, ...], width: int) -> Callable:
    """`_chunk` with its static arguments bound, as a function with a code object of its own.

    torch.compile keeps the graphs it compiled per code object, at most
    ``torch._dynamo.config.recompile_limit`` (8) of them, and runs eagerly past that; every
    ``functools.partial`` it compiles shares one wrapper's code object. A backtest with its
    cost multiples has more groups than that, each with its own rules, so each chunk
    function gets a copy of the code of its own."""

    def chunk(state, obs, params, prepared, tables, first, new_start, new_end):
        return _chunk(
            state,
            obs,
            params,
            prepared,
            tables,
            first,
            new_start,
            new_end,
            program=program,
            rules=rules,
            steps=steps,
            record=record,
            width=width,
        )

    return own_code(chunk)


RECORDABLE = (
    "value",
    "cash",
    "holdings",
    "turnover",
    "costs",
    "cost_commission",
    "cost_spread",
    "cost_impact",
    "cost_borrow",
    "ordered_value",
    "unfilled_value",
    "unfilled_shares",
    "reward",
    "terminated",
    "truncated",
    "previous_value",
    "gross_value",
)
"""The ``info`` entries a `Rollout` can record per bar (those of `StockTradingVecEnv.step`, and
``reward``, ``terminated``, ``truncated``, ``previous_value``, the value before the step, and
``gross_value``, the positions' gross value at the close of the bar the step ends at: the sum of
|shares| x close)."""


class Rollout:
    """Full-period passes of `env` with `program`'s decisions, ``chunk`` bars per call.

    :param env: a `StockTradingVecEnv` in the deterministic full-period mode.
    :param program: the decisions (`Program`).
    :param record: the ``info`` entries to record per bar (`RECORDABLE`).
    :param chunk: bars per call (`DEFAULT_CHUNK`).
    :param block: bars per `Program.prepare` call, a multiple of ``chunk`` (`DEFAULT_BLOCK`).
    :param compile: run the chunk through ``torch.compile`` (default: as the env's step).
        Uncompiled, the chunk runs the same operations eagerly (a check, not faster).
    :param cpp_wrapper: compiled on a CPU, call the chunk's kernels from C++ (`CHUNK_OPTIONS`);
        default: for passes of at most `CPP_WRAPPER_MAX_ENVS` sub-environments (a validation pass, a
        backtest's baseline groups, a shard of its policies).
    """

    def __init__(
        self,
        env: StockTradingVecEnv,
        program: Program,
        record: Sequence[str] = ("value",),
        chunk: int = DEFAULT_CHUNK,
        compile: bool | None = None,
        block: int | None = None,
        cpp_wrapper: bool | None = None,
    ) -> None:
        if env.config.random_start or env.config.episode_length is not None:
            raise UserError(
                "Rollout needs the env's deterministic full-period mode (random_start=False, episode_length=None)"
            )
        unknown = sorted(set(record) - set(RECORDABLE))
        if unknown:
            raise UserError(f"Rollout cannot record {unknown}; it records {list(RECORDABLE)}")
        if int(chunk) != chunk or chunk < 1:
            raise UserError(f"Rollout: chunk must be a positive integer, got {chunk}")
        self.env = env
        self.program = program
        self.record = tuple(record)
        self.chunk = int(chunk)
        block = DEFAULT_BLOCK if block is None else block
        self.block = max(self.chunk, int(block) // self.chunk * self.chunk)
        compile = env.compiled if compile is None else compile
        key = (program, env.rules, self.chunk, self.block, self.record, 1 + env.num_stocks, env.num_envs, env.device)
        cpp_wrapper = env.num_envs <= CPP_WRAPPER_MAX_ENVS if cpp_wrapper is None else bool(cpp_wrapper)
        key = (*key, compile, cpp_wrapper and compile)
        if key not in _CHUNKS:
            step = _chunk_function(program, env.rules, self.chunk, self.record, 1 + env.num_stocks)
            options = chunk_options(env.device, cpp_wrapper)
            _CHUNKS[key] = torch.compile(step, dynamic=False, options=options) if compile else step
        self._key = key
        self._run_chunk = _CHUNKS[key]

    @property
    def has_run_here(self) -> bool:
        """Whether a pass of this chunk (the same program, rules and shapes) has run in this process, so
        that the chunk is compiled here when it is compiled (`compile_here`)."""
        return self._key in _CALLED

    @torch.no_grad()
    def compile_here(self, params: Any = (), obs: Tensor | None = None) -> None:
        """Compile the chunk in this process unless a pass of it has run here already: the pass's first
        chunk, its results dropped. The env is left as it was (a chunk is a pure function of the env's
        state; with `obs` None the env is reset first, as `run` does).

        For a pass a forked worker will run (`trader.backtesting.shards`): the worker inherits the
        compiled chunk instead of compiling it itself, which it would do again in every backtest, since
        what a worker compiles ends with it."""
        if not self.has_run_here:
            self._pass(params, obs, None, first_chunk_only=True)

    @torch.no_grad()
    def run(
        self,
        params: Any = (),
        obs: Tensor | None = None,
        on_chunk: Callable[[int, int, dict[str, Tensor]], None] | None = None,
    ) -> dict[str, Tensor]:
        """One pass from the first bar to the last.

        :param params: the program's tensors.
        :param obs: the first observation when the env was just reset by the caller (from a
            starting book, say); None resets the env here.
        :param on_chunk: called after every chunk with ``(first step, steps, rows)``, rows the
            recorded entries of the chunk's real steps, each [steps, ...]; when given, nothing
            is collected (the caller keeps what it needs; a year of holdings would not fit).
        :returns: without `on_chunk`, each recorded entry over the pass, [T - 1, ...] (step k
            ends at bar k + 1); with it, {}.
        """
        return self._pass(params, obs, on_chunk)

    def _pass(
        self,
        params: Any,
        obs: Tensor | None,
        on_chunk: Callable[[int, int, dict[str, Tensor]], None] | None,
        first_chunk_only: bool = False,
    ) -> dict[str, Tensor]:
        """`run`; with `first_chunk_only`, its first chunk only, and the env left as it was."""
        env = self.env
        if obs is None:
            obs, _ = env.reset()
        state = env.require_reset()
        new_start = torch.zeros_like(state.t)  # the autoreset episode after the last bar is dropped
        steps, last = env.num_bars - 1, env.num_bars - 1
        collected: dict[str, list[Tensor]] = {key: [] for key in self.record}
        block_bars = torch.arange(self.block + 1, device=env.device)
        leaves, spec = tree_flatten(params, is_leaf=_is_per_bar)
        per_bar = [isinstance(x, PerBar) for x in leaves] if any(isinstance(x, PerBar) for x in leaves) else []
        for first in range(0, steps, self.chunk):
            if first % self.block == 0:
                # the block's bars first .. first + block (its last chunk's fills read one bar ahead), the
                # last bar repeated past the end: the tables' rows, cut once per block; bar indices in a
                # chunk are relative to the block's first bar
                bars = (block_bars + first).clamp_max(last)
                tables = _cut(env.tables, bars, env.num_bars)
                ready = self.program.prepare(params, env.tables.obs.index_select(0, bars[: self.block]))
                has_ready = bool(tree_leaves(ready))  # else (no tensor) nothing to cut per chunk
                origin, start = first, torch.full((1,), first, dtype=torch.int64, device=env.device)
                state = state._replace(t=state.t - origin, end=state.end - origin)
                if per_bar:  # the block's rows of the per-bar params (bars first .. first + block), cut once
                    block_rows = [x.table.index_select(0, bars) if isinstance(x, PerBar) else x for x in leaves]
            at = first % self.block
            prepared = _rows(ready, at, at + self.chunk) if has_ready else ready
            cut = params
            if per_bar:  # the chunk's rows of per-bar params: row k is bar first + k
                rows_of = (x[at : at + self.chunk + 1] if per_bar[k] else x for k, x in enumerate(block_rows))
                cut = tree_unflatten(list(rows_of), spec)
            state, obs, rows = self._run_chunk(state, obs, cut, prepared, tables, start, new_start, state.end)
            if first == 0:  # once a pass, not at every chunk (the key holds the program and the rules)
                _CALLED.add(self._key)
                if first_chunk_only:
                    return {}
            if (first + self.chunk) % self.block == 0 or first + self.chunk >= steps:
                state = state._replace(t=state.t + origin, end=state.end + origin)
            real = min(self.chunk, steps - first)
            if real < self.chunk:
                rows = {key: value[:real] for key, value in rows.items()}
            if on_chunk is not None:
                on_chunk(first, real, rows)
            else:
                for key, value in rows.items():
                    collected[key].append(value)
        env.close()  # the state ran into the next episode: a later use resets first
        return {} if on_chunk is not None else {key: torch.cat(values) for key, values in collected.items()}
