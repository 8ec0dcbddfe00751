"""The backtest engine: strategies run through `StockTradingVecEnv` itself.

One code path: fills, costs and cash rules are the env's. The env runs in its
deterministic full-period mode (``random_start=False``, ``episode_length=None``):
every sub-environment starts at the first bar of the period and runs one episode
to the last bar. Each strategy is one sub-environment. Strategies that share the
env's trading rules (action mode, max_shares, observed features) share one batched
env; the env's rules are per env, not per sub-environment, so policies (their
training rules), the equal-weight baselines (whole shares, see
`trader.backtesting.strategies`) and the benchmark (a one-ticker panel) form up to a
few groups, all stepped together bar by bar. The loop runs over time only.

Per-bar records (value, cash, traded value, costs and their parts, ordered and
unfilled value, holdings) stay on the env's device in preallocated tensors and come
to the host once, at the end.

Every strategy trades under the backtest's one cost model (`BacktestConfig`'s rates
and `CostModel`), whatever rules a checkpoint was trained under; the benchmark, a
close-only series, leaves out the terms that need volume, high or low.

Breakeven cost (``BacktestConfig.cost_multiples``): the same strategies are run at
several multiples of the cost model (`CostModel.scaled`) in the same pass: one more
set of groups per multiple, stepped in the same time loop. Each strategy's Sharpe
ratio against the multiple is interpolated to its zero crossing (`breakeven`).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from market_envs.costs import CostModel, NamedCosts, described
from market_envs.data import DataError, MarketData
from market_envs.data.membership import period_membership
from market_envs.devices import resolve_device
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.rollout import gross_value
from trader import metrics, rundir
from trader.backtesting import yardsticks
from trader.backtesting.evidence import benchmark_evidence, strategy_evidence, yardstick_verdicts
from trader.backtesting.periods import load_dataset, require_bars, select_period
from trader.backtesting.result import BacktestResult, PeriodInfo, StrategyInfo
from trader.backtesting.shards import check_workers, map_forked, run_forked, shared_zeros, split_rows
from trader.backtesting.strategies import (
    BASELINE_MAX_SHARES,
    Account,
    ActionSchedule,
    BuyAndHold,
    DailyRebalance,
    Decide,
    ExternalPolicy,
    PolicyDecider,
    PolicyPopulation,
)
from trader.backtesting.yardsticks import FactorParams
from trader.errors import CheckpointError, ConfigError, UserError
from trader.names import BASELINES

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

BREAKEVEN_MULTIPLES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
"""The multiples of the cost model that `trader backtest` and the demo run to find each
strategy's breakeven cost."""


@dataclass(frozen=True)
class BacktestConfig:
    """How a backtest trades and what it records.

    :param initial_cash: starting capital of every strategy.
    :param buy_cost: cost rate on the value bought (0.001 = 0.1% per side), for all.
    :param sell_cost: cost rate on the value sold, for all.
    :param record_positions: "bar" keeps the holdings of every bar; "day" only at
        each session's last bar (a year of minute bars x 100 tickers x 64 policies
        is gigabytes per bar).
    :param risk_free: daily risk-free return for Sharpe and Sortino.
    :param tear_sheet: draw pyfolio's returns tear sheet of each agent (against the benchmark)
        when writing to a run directory.
    :param compile: run the envs' step through ``torch.compile``, many bars per compiled call
        (`market_envs.rollout.Rollout`, with the strategies' decisions inside) wherever every
        strategy of a group has a program (agents, populations of flat MLPs, plain callables,
        action schedules and the baselines; a baseline library's model runs bar by bar): a
        one-off compile per group, then far faster bars; worth it for long periods
        (benchmarks/RESULTS.md, "Backtest speed"). The figures equal the eager path's within
        float rounding.
    :param policy_env: trading rules of policies given as agents or callables
        (action mode, max_shares, features, ...); checkpoints whose sidecar holds
        an ``env_config`` use theirs (unless `recorded_rules` is False). Cash, costs (rates and
        `CostModel`) and the deterministic full-period mode are always the backtest's.
    :param workers: processes that run the backtest (`trader.backtesting.shards`): with ``compile``, on a
        CPU, each group of more than `WHOLE_GROUP_MAX_ROWS` policies run as one
        program (a population, checkpoints of one architecture) is cut into ``workers`` shards of
        consecutive rows; shard 0 runs in this process, each other in a forked worker process, all at
        once, and the groups kept whole (the baselines') are dealt to the processes, the smallest to this
        one. The results are one process's (each policy's
        sub-environment is independent): bit for bit where the chunks run eagerly and at the benchmark's
        scale compiled (64 MLPs, shards of 32); compiled, a chunk is specialised on its rows, and on a
        small fixture (shards of 4 against 8) the decisions came out a float32 last bit apart, the
        values 1e-8 relative (tests/test_backtest_shards.py). Default 1: a backtest is often one
        of several jobs on a machine (a tournament's workers, a walk-forward's folds) and each process
        keeps to one torch thread; ask for more where the cores are free, at most ``os.cpu_count()``
        (benchmarks/backtest_speed.py ``--workers``). Each worker costs a fork (its memory is this
        process's, copied on write); what a worker runs is compiled in this process before the fork, the
        first time in a session, and inherited.
    :param recorded_rules: True: each checkpoint trades under the rules its files record (its
        sidecar, else its run's config.toml). False: checkpoints trade under `policy_env` and no
        recorded rules are read: the caller holds the rules they were trained under (a
        walk-forward fold's `trader.spec.MarketSpec`). A baseline library's model
        (`ExternalPolicy`) carries its rules itself.
    :param costs: every cost and fill term beyond the rates (`market_envs.costs.CostModel`), for
        every strategy: policies (a checkpoint's own terms are replaced), baselines and the
        benchmark (which leaves out the terms that need volume, high or low). A dict is read
        by `CostModel.from_mapping`.
    :param cost_model: the name of the model the rates and terms came from (`market_envs.costs.COST_MODELS`,
        a run's), for the report; None: named by what it charges (`market_envs.costs.described`).
    :param cost_multiples: multiples of the cost model to run beside the backtest, in the same pass,
        for each strategy's breakeven cost (`BREAKEVEN_MULTIPLES`); () runs none. 1 is the backtest itself.
    :param factors: the yardsticks' parameters (`trader.backtesting.yardsticks.FactorParams`, in bars);
        None: the defaults for the panel's bars (`FactorParams.for_interval`).
    """

    initial_cash: float = 1_000_000.0
    buy_cost: float = 0.001
    sell_cost: float = 0.001
    record_positions: Literal["bar", "day"] = "bar"
    risk_free: float = 0.0
    tear_sheet: bool = True
    compile: bool = False
    policy_env: EnvConfig = field(default_factory=EnvConfig)
    costs: CostModel = field(default_factory=CostModel)
    cost_model: str | None = None
    cost_multiples: tuple[float, ...] = ()
    recorded_rules: bool = True
    workers: int = 1
    factors: FactorParams | None = None

    def __post_init__(self) -> None:
        if isinstance(self.costs, Mapping):
            object.__setattr__(self, "costs", CostModel.from_mapping(self.costs))
        if not isinstance(self.costs, CostModel):
            raise ConfigError(f"BacktestConfig.costs must be a CostModel, got {type(self.costs).__name__}")
        multiples = self.cost_multiples
        if isinstance(multiples, (str, int, float)) or any(
            isinstance(k, bool) or not isinstance(k, (int, float)) or not (k >= 0 and np.isfinite(k)) for k in multiples
        ):
            raise ConfigError(f"BacktestConfig.cost_multiples must be numbers >= 0, got {multiples!r}")
        object.__setattr__(self, "cost_multiples", tuple(sorted({float(k) for k in multiples})))
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"BacktestConfig.workers must be an integer >= 1, got {self.workers!r}")
        if self.workers > 1 and not self.compile:
            raise ConfigError("BacktestConfig.workers > 1 cuts the groups of a compiled backtest; set compile=True")
        if self.record_positions not in ("bar", "day"):
            raise ConfigError(f"BacktestConfig.record_positions must be 'bar' or 'day', got {self.record_positions!r}")
        if self.factors is not None and not isinstance(self.factors, FactorParams):
            raise ConfigError(f"BacktestConfig.factors must be a FactorParams, got {type(self.factors).__name__}")
        if not isinstance(self.policy_env, EnvConfig):
            raise ConfigError(f"BacktestConfig.policy_env must be an EnvConfig, got {type(self.policy_env).__name__}")
        # EnvConfig validates cash and cost rates; build one to fail early with its message.
        self.env_config(EnvConfig())

    def env_config(self, rules: EnvConfig) -> EnvConfig:
        """`rules` with this backtest's cash and costs (rates and `CostModel`), in the
        deterministic full-period mode."""
        return replace(
            rules,
            initial_cash=float(self.initial_cash),
            buy_cost=float(self.buy_cost),
            sell_cost=float(self.sell_cost),
            costs=self.costs,
            random_start=False,
            episode_length=None,
        )

    @property
    def named_costs(self) -> NamedCosts:
        """The cost model in force: rates, terms, name (without `cost_model`, named by what it
        charges) and the sources of the named model it equals or comes nearest to
        (`market_envs.costs.described`)."""
        found = described(float(self.buy_cost), float(self.sell_cost), self.costs)
        return found if self.cost_model is None else replace(found, name=self.cost_model)

    def with_costs(self, named: NamedCosts) -> BacktestConfig:
        """This config under the cost model `named` (its rates, terms and name)."""
        return replace(
            self, buy_cost=named.buy_cost, sell_cost=named.sell_cost, costs=named.costs, cost_model=named.name
        )

    def at_multiple(self, multiple: float) -> BacktestConfig:
        """This config with every charge of its cost model times `multiple` (no breakeven runs of its own)."""
        scaled = self.named_costs.scaled(multiple)
        return replace(self.with_costs(scaled), cost_model=self.cost_model, cost_multiples=())

    @property
    def breakeven_multiples(self) -> tuple[float, ...]:
        """The multiples run for the breakeven cost, 1 included; () when none are asked for or
        the model charges nothing (no multiple of nothing crosses anything)."""
        if not self.cost_multiples or self.named_costs.charges_nothing:
            return ()
        return tuple(sorted({*self.cost_multiples, 1.0}))

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form; ``policy_env`` as the rules in force (the backtest's cash, costs and mode)."""
        values = asdict(self)
        values.pop("compile")  # how fast it ran, not what it traded
        values.pop("workers")  # how fast it ran, not what it traded
        values.pop("recorded_rules")  # where the rules were read, not what they are: policy_env says that
        rules = asdict(self.env_config(self.policy_env))
        values["policy_env"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in rules.items()}
        values["costs"] = values["policy_env"]["costs"] = self.named_costs.as_dict()["costs"]
        values["cost_model"] = self.cost_model
        values["cost_multiples"] = list(self.cost_multiples)
        return values


@dataclass(frozen=True)
class Book:
    """An account a strategy starts a backtest from, instead of all cash: how a
    walk-forward fold's policy takes over the previous fold's positions (and pays for
    the trades of the switch like any other).

    :param cash: cash, in the data's currency.
    :param holdings: shares per ticker of the backtest's panel, in its order.
    :param value: the book's value at its last mark (the previous period's last
        close): the base of the first bar's return, so a record stitched from several
        backtests compounds without a break.
    """

    cash: float
    holdings: tuple[float, ...]
    value: float

    def to_dict(self) -> dict[str, Any]:
        return {"cash": float(self.cash), "holdings": [float(h) for h in self.holdings], "value": float(self.value)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Book:
        return cls(float(values["cash"]), tuple(float(h) for h in values["holdings"]), float(values["value"]))

    @classmethod
    def final(cls, result: BacktestResult, name: str) -> Book:
        """Strategy ``name``'s book at the last bar of ``result`` (positions recorded per bar or per day)."""
        series, positions = result.series[name], result.positions[name]
        return cls(
            float(series["cash"].iloc[-1]), tuple(float(h) for h in positions.iloc[-1]), float(series["value"].iloc[-1])
        )


@dataclass
class _Member:
    """One strategy: its description, decision rule and row in its group's env."""

    info: StrategyInfo
    row: int
    dims: tuple[int, int] | None = None  # a checkpoint's (obs_dim, act_dim), checked against the env
    book: Book | None = None  # where it starts (None: all cash)


@dataclass
class _Caller:
    """One decision call per bar, for the consecutive rows [start, stop) of its group."""

    decide: Decide
    start: int
    stop: int


@dataclass
class _Group:
    """Strategies sharing one batched env (same panel, same trading rules)."""

    data: MarketData
    rules: EnvConfig
    members: list[_Member] = field(default_factory=list)
    callers: list[_Caller] = field(default_factory=list)
    env: StockTradingVecEnv | None = None
    close: Tensor | None = None  # float64 [T, N] closes on the env's device, set when the run starts


def run_backtest(
    data: MarketData | str,
    policies: Mapping[str, Any] | None = None,
    *,
    baselines: Sequence[str] | None = None,
    period: str | None = None,
    config: BacktestConfig | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    device: torch.device | str = "cpu",
    trials: Mapping[str, Any] | None = None,
    selection: dict[str, Any] | None = None,
    initial_books: Mapping[str, Book] | None = None,
) -> BacktestResult:
    """Backtest policies and baselines over one period, all through the batched env.

    :param data: a `MarketData` panel, or a data set recipe name or path.
    :param policies: strategy name -> a checkpoint path (loaded with
        `trader.agents.checkpoint.load_policy`), an agent with ``act(obs,
        deterministic=True)``, a callable ``obs [E, obs_dim] -> actions [E, N]``, a
        `PolicyPopulation`, an `ActionSchedule` (actions fixed per bar), or an
        `ExternalPolicy` (a baseline library's model, with its label and rules).
    :param baselines: any of `BASELINES`: "benchmark" (buy-and-hold of the data
        set's benchmark, run as a one-ticker panel), "equal_weight" (equal-weight
        buy-and-hold), "equal_weight_daily" (equal weight, rebalanced every
        session), "oracle" (a synthetic data set's planted rule, traded as target
        weights with short selling, every bar: the ceiling at zero cost), "oracle_costs"
        (the same rule through the trade rate or no-trade band best on the training
        period under this backtest's costs, `oracle_under_costs`: the ceiling under
        costs); "momentum", "momentum_long", "reversal", "inverse_vol" (the classical factor
        portfolios, `trader.backtesting.yardsticks`, with `BacktestConfig.factors`). None: all
        that apply ("benchmark" when the data has one, both oracles when it has a planted edge,
        each factor portfolio whose window fits: `yardsticks.applies`).
    :param period: "test", "validation", "train", "START:END", or "all". None:
        "test" when `data` is a recipe, the whole panel when it is a `MarketData`.
    :param config: capital, costs and recording (`BacktestConfig`).
    :param run_dir: when given, write `backtests/<strategy>.parquet`, report.json,
        report.md, the tear sheet and dataset.json (`MarketData.describe`) there.
    :param device: where the envs and policies run ("cpu", "cuda", ...).
    :param trials: strategy name -> the `trader.backtesting.evidence.Trials` it was
        selected from: its evidence then carries the deflated Sharpe ratio.
    :param selection: the run's selection statistics (`evidence.selection_evidence`),
        carried into the report as they are.
    :param initial_books: strategy name -> the `Book` it starts from instead of
        ``initial_cash`` in cash (a policy or a baseline on the stocks' panel).
    :return: the `BacktestResult` (``.metrics``, ``.series``, ``.evidence``, ...).
    """
    config = config or BacktestConfig()
    device = resolve_device(device)
    check_workers(config.workers, device)
    if isinstance(data, (str, os.PathLike)):
        data = load_dataset(str(data))
        period = "test" if period is None else period
    panel, period_name = select_period(data, period)
    require_bars(panel)
    chosen = _resolve_baselines(panel, baselines, config.factors)
    oracle = oracle_schedule(data, panel) if {"oracle", "oracle_costs"} & set(chosen) else None
    slow = oracle_under_costs(data, config, device) if "oracle_costs" in chosen else None
    loaded: dict[str, Any] = {}
    groups = _build_groups(panel, policies or {}, chosen, config, device, oracle, loaded, slow)
    multiples = [k for k in config.breakeven_multiples if k != 1.0]
    scaled = [
        _build_groups(panel, policies or {}, chosen, config.at_multiple(k), device, oracle, loaded, slow)
        for k in multiples
    ]
    for built in (groups, *scaled):
        _place_books(built, initial_books or {}, panel)
    records = _simulate(
        groups + [g for more in scaled for g in more],
        panel.timestamps,
        config.record_positions,
        device,
        positions_of=len(groups),
        chunked=config.compile,
        workers=config.workers,
    )
    result = _assemble(panel, period_name, groups, records[: len(groups)], config)
    if config.record_positions == "bar":
        result = replace(result, trades=_trade_lists(groups, result))
    if multiples:
        curves, offset = {1.0: result.metrics["sharpe_ratio"]}, len(groups)
        for k, more in zip(multiples, scaled):
            curves[k] = _sharpe_ratios(panel, more, records[offset : offset + len(more)], config)
            offset += len(more)
        result = replace(result, breakeven=breakeven_table(curves, list(result.strategies)))
    result = replace(result, evidence=_evidence(result.daily_returns, trials, config.workers), selection=selection)
    result = _against_the_market(result, panel)
    if run_dir is not None:
        from trader.backtesting.report import write_report

        files = write_report(result, run_dir, tear_sheet=config.tear_sheet, dataset_card=data.describe())
        result = replace(result, files=files)
    return result


# --------------------------------------------------------------------- strategies


def _evidence(daily: pd.DataFrame, trials: Mapping[str, Any] | None, workers: int) -> dict[str, dict[str, Any]]:
    """`strategy_evidence` of every strategy, strategy by strategy over `workers` processes
    (`shards.map_forked`): the same figures as in one (each strategy's evidence is its own, from the
    same seed), in about 1 / workers of the time: the 67 strategies of a year's benchmark took 3.8 to
    6.7 s in one process (benchmarks/RESULTS.md, "The C++ wrapper for a shard, the small groups dealt")."""
    if workers == 1:
        return strategy_evidence(daily, trials)
    names = list(daily.columns)
    found = map_forked(lambda name: strategy_evidence(daily[[name]], trials)[str(name)], names, workers)
    return dict(zip(map(str, names), found, strict=True))


def benchmark_daily_returns(panel: MarketData) -> pd.Series | None:
    """The benchmark index's own daily returns over `panel`'s bars, on the dates of every
    strategy's (`metrics.daily_returns`; the first bar's return 0, as a strategy's); None without one."""
    if panel.benchmark is None:
        return None
    close = panel.benchmark.double().cpu().numpy()
    bars = np.concatenate([[0.0], close[1:] / close[:-1] - 1.0])
    return metrics.daily_returns(pd.Series(bars), panel.timestamps)


def _against_the_market(result: BacktestResult, panel: MarketData) -> BacktestResult:
    """Each strategy against the benchmark (`benchmark_evidence`) and each agent against the
    yardstick of its kind (`yardstick_verdicts`)."""
    benchmark = benchmark_daily_returns(panel)
    versus = {} if benchmark is None else benchmark_evidence(result.daily_returns, benchmark)
    agents = [n for n, s in result.strategies.items() if s.kind in ("policy", "library")]
    kinds = {y: y in yardsticks.DOLLAR_NEUTRAL for y in yardsticks.YARDSTICKS if y in result.strategies}
    verdicts = yardstick_verdicts(result.daily_returns, result.series, agents, kinds, result.labels()) if agents else {}
    return replace(result, versus_benchmark=versus, versus_yardsticks=verdicts)


def _has_edge(data: MarketData) -> bool:
    return bool(data.meta.get("edge"))


def oracle_schedule(data: MarketData, panel: MarketData, spec: Any = None) -> ActionSchedule:
    """The planted rule's target weights (`market_envs.data.edge.oracle_weights`) for `panel`'s bars.

    Computed on the whole of `data` (closes up to each bar only) and cut to the
    period, so the rule needs no warm-up inside it. `spec`: the rule (an `EdgeSpec`);
    default the one `data` was built with (its meta).
    """
    from market_envs.data.edge import EdgeSpec, oracle_weights

    weights = oracle_weights(data, spec if spec is not None else EdgeSpec.from_dict(dict(data.meta["edge"])))
    offset = int(data.timestamps.get_loc(panel.timestamps[0]))
    return ActionSchedule(weights[offset : offset + panel.num_bars])


ORACLE_RATES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005)
"""The trade rates tried for the oracle under costs (`oracle_under_costs`), with no band."""
ORACLE_BANDS = (0.1, 0.25, 0.5, 1.0, 2.0)
"""The no-trade bands per stock tried for the oracle under costs, at rate 1, in units of 1 / N
(the planted rule's weights are rank scores of size about 1 / N)."""


@dataclass(frozen=True)
class SlowOracle:
    """The oracle under costs: the rules it trades through and where they were fitted."""

    rules: EnvConfig
    fitted_on: str  # the period and its Sharpe ratio, for the report
    sharpe: float
    candidates: tuple[tuple[float, float, float], ...] = ()  # (rate, band, net Sharpe on the fit period) of each


_ORACLE_FITS: dict[tuple[Any, ...], SlowOracle] = {}


def oracle_rules(rate: float = 1.0, band: float = 0.0) -> EnvConfig:
    """The env rules of the planted rule's weights: weights mode, short selling, through trade rate
    `rate` and a no-trade band of `band` per stock (a weight)."""
    return EnvConfig(
        action_mode="weights", short_selling=True, features=("close",), trade_rate=rate, no_trade_band=band
    )


def oracle_under_costs(data: MarketData, config: BacktestConfig, device: torch.device) -> SlowOracle:
    """The planted rule traded through the trade rate or no-trade band (`EnvConfig.trade_rate`,
    `no_trade_band`) that maximise its net Sharpe ratio on the training period, under `config`'s
    cost model: every rate of `ORACLE_RATES` without a band, every band of `ORACLE_BANDS` at rate 1.

    The training period is ``data.period("train")`` (the whole panel when `data` has no split, which
    the report says). The candidates are the rows of one env (`StockTradingVecEnv.set_pace`), stepped
    once through the training bars, once per process for a given data set, period and cost model (the
    fit is remembered)."""
    try:
        train, where = data.period("train"), "the training period"
    except DataError:
        train, where = data, "the backtest period itself (the data has no training period)"
    costs = config.named_costs
    key = (
        data.name,
        train.start,
        train.end,
        train.num_tickers,
        costs.buy_cost,
        costs.sell_cost,
        costs.costs,
        float(config.initial_cash),
        device.type,
    )
    if key in _ORACLE_FITS:
        return _ORACLE_FITS[key]
    n = train.num_tickers
    grid = [(rate, 0.0) for rate in ORACLE_RATES] + [(1.0, b / n) for b in ORACLE_BANDS]
    fit = replace(config, record_positions="day", cost_multiples=())
    group = _Group(data=train, rules=fit.env_config(oracle_rules(0.5, 1.0 / n)))  # rate and band on: set per row
    schedule = oracle_schedule(data, train)
    group.members.extend(_Member(StrategyInfo(f"candidate{k}", "", "baseline", ""), k) for k in range(len(grid)))
    group.callers.append(_Caller(schedule, 0, len(grid)))
    group.env = StockTradingVecEnv(train, num_envs=len(grid), device=device, config=group.rules, compile=config.compile)
    group.env.set_pace(torch.tensor([r for r, _ in grid]), torch.tensor([b for _, b in grid]))
    records = _simulate([group], train.timestamps, "day", device, positions_of=0)
    sharpes = _sharpe_ratios(train, [group], records, fit).fillna(-np.inf).to_numpy()
    best = int(np.argmax(sharpes))
    chosen = oracle_rules(*grid[best])
    _ORACLE_FITS[key] = SlowOracle(
        chosen,
        f"{where}, {train.start:%Y-%m-%d} .. {train.end:%Y-%m-%d}",
        float(sharpes[best]),
        tuple((r, b, float(x)) for (r, b), x in zip(grid, sharpes)),
    )
    return _ORACLE_FITS[key]


def _resolve_baselines(
    data: MarketData, baselines: Sequence[str] | None, factors: yardsticks.FactorParams | None = None
) -> tuple[str, ...]:
    if baselines is None:
        return tuple(
            b
            for b in BASELINES
            if (b != "benchmark" or data.benchmark is not None)
            and (b not in ("oracle", "oracle_costs") or _has_edge(data))
            and (b not in yardsticks.YARDSTICKS or yardsticks.applies(b, data, factors))
        )
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise UserError(f"unknown baseline(s) {unknown}; choose from {list(BASELINES)}")
    if "benchmark" in baselines and data.benchmark is None:
        raise DataError(f"data set {data.name!r} has no benchmark series; drop the 'benchmark' strategy")
    for oracle in ("oracle", "oracle_costs"):
        if oracle in baselines and not _has_edge(data):
            raise DataError(f"data set {data.name!r} has no planted edge; drop the {oracle!r} strategy")
    return tuple(dict.fromkeys(baselines))


def _build_groups(
    data: MarketData,
    policies: Mapping[str, Any],
    baselines: tuple[str, ...],
    config: BacktestConfig,
    device: torch.device,
    oracle: ActionSchedule | None = None,
    loaded: dict[str, Any] | None = None,
    slow: SlowOracle | None = None,
) -> list[_Group]:
    """Strategies grouped by (panel, trading rules), each group with its env built.

    `oracle` is the planted rule's schedule (`oracle_schedule`) when "oracle" or "oracle_costs" is
    asked for; `slow` the rules of "oracle_costs" (`oracle_under_costs`).
    `loaded` keeps the checkpoints loaded by an earlier call (the groups of each cost
    multiple are built by one call each; a checkpoint is read once).
    """
    loaded = {} if loaded is None else loaded
    _check_names(policies, baselines)
    groups: dict[tuple[str, EnvConfig], _Group] = {}

    def group(panel_key: str, panel: MarketData, rules: EnvConfig) -> _Group:
        key = (panel_key, rules)
        if key not in groups:
            groups[key] = _Group(data=panel, rules=rules)
        return groups[key]

    def add(target: _Group, decide: Decide, infos: list[StrategyInfo], dims: tuple[int, int] | None = None) -> None:
        start = len(target.members)
        target.members.extend(_Member(info, start + k, dims) for k, info in enumerate(infos))
        target.callers.append(_Caller(decide, start, len(target.members)))

    for name, source in policies.items():
        if isinstance(source, ActionSchedule):
            _check_schedule(name, source, data)
            info = StrategyInfo(name, name, "policy", f"action schedule of {source.actions.shape[0]} bars")
            add(group("stocks", data, config.env_config(config.policy_env)), source, [info])
            continue
        if isinstance(source, ExternalPolicy):
            info = StrategyInfo(name, source.label, "library", source.source, source.training)
            external = config.env_config(source.env_config)
            add(
                group("stocks", data, external),
                source.decider(data.timestamps, name, data.num_tickers * external.actions_per_stock),
                [info],
            )
            continue
        if isinstance(source, PolicyPopulation):
            _check_names(dict.fromkeys(source.names), baselines)
            infos = [
                StrategyInfo(n, n, "policy", f"row {k} of population {name!r}") for k, n in enumerate(source.names)
            ]
            add(
                group("stocks", data, config.env_config(config.policy_env)),
                PolicyDecider(
                    source.policy, name, data.num_tickers * config.policy_env.actions_per_stock, source.program
                ),
                infos,
            )
            continue
        if name not in loaded:
            loaded[name] = load_checkpoint_strategy(name, source, data, config, device)
        policy, rules, info, dims = loaded[name]
        add(
            group("stocks", data, config.env_config(rules)),
            PolicyDecider(policy, name, data.num_tickers * rules.actions_per_stock),
            [info],
            dims,
        )

    baseline_rules = config.env_config(
        EnvConfig(action_mode="shares", max_shares=BASELINE_MAX_SHARES, features=("close",))
    )
    benchmark_rules = replace(baseline_rules, costs=config.costs.without_volume())
    equal = torch.full((data.num_tickers,), 1.0 / data.num_tickers, dtype=torch.float64)
    factors = config.factors or yardsticks.FactorParams.for_interval(data.interval)
    for name in baselines:
        if name in yardsticks.YARDSTICKS:
            target = group("stocks", data, config.env_config(yardsticks.rules(name)))
            decide = yardsticks.yardstick_schedule(name, data, factors)
            info = StrategyInfo(
                name, yardsticks.label(name, factors), "baseline", yardsticks.description(name, factors)
            )
        elif name == "benchmark":
            target = group("benchmark", benchmark_panel(data), benchmark_rules)
            decide = BuyAndHold(torch.ones(1, dtype=torch.float64), config.buy_cost)
            dropped = (
                ""
                if benchmark_rules.costs == config.costs
                else ("; a close-only series: the cost terms that need volume, high or low are left out")
            )
            info = StrategyInfo(
                name,
                f"{data.benchmark_name or 'Benchmark'} buy-and-hold",
                "baseline",
                "benchmark close, target weight 1, bought once" + dropped,
            )
        elif name == "oracle":
            target = group("stocks", data, config.env_config(oracle_rules()))
            decide = oracle
            info = StrategyInfo(
                name,
                "Oracle (the planted rule)",
                "baseline",
                "the planted edge's dollar-neutral target weights, rebalanced every bar",
            )
        elif name == "oracle_costs":
            target = group("stocks", data, config.env_config(slow.rules))
            decide = oracle
            how = (
                f"trade rate {slow.rules.trade_rate:g}"
                if slow.rules.no_trade_band == 0
                else f"no-trade band {slow.rules.no_trade_band * data.num_tickers:g}/N per stock"
            )
            info = StrategyInfo(
                name,
                f"Oracle under costs ({how})",
                "baseline",
                f"the planted edge's dollar-neutral weights as the aim, traded at the {how} that "
                f"maximises its net Sharpe ratio ({slow.sharpe:.2f}) on {slow.fitted_on} under this "
                f"backtest's cost model",
            )
        elif name == "equal_weight":
            target = group("stocks", data, baseline_rules)
            decide = BuyAndHold(equal, config.buy_cost)
            info = StrategyInfo(
                name, "Equal-weight buy-and-hold", "baseline", "1/N of the capital per stock, bought once"
            )
        else:
            target = group("stocks", data, baseline_rules)
            decide = DailyRebalance(equal, config.buy_cost)
            info = StrategyInfo(
                name, "Equal-weight, rebalanced daily", "baseline", "1/N per stock, rebalanced at each open"
            )
        add(target, decide, [info])

    names = [m.info.name for g in groups.values() for m in g.members]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"strategy names must be unique; repeated: {duplicates}")
    for g in groups.values():
        g.env = StockTradingVecEnv(
            g.data, num_envs=len(g.members), device=device, config=g.rules, compile=config.compile
        )
    for g in groups.values():
        for member in g.members:
            _check_policy_dims(member, g.env)
    if not groups:
        raise UserError("nothing to backtest: no policy and no baseline given")
    return list(groups.values())


def _place_books(groups: list[_Group], books: Mapping[str, Book], data: MarketData) -> None:
    """Give each member its starting `Book`; a book for no strategy, or of another width, is an error."""
    members = {m.info.name: (g, m) for g in groups for m in g.members}
    for name, book in books.items():
        if name not in members:
            raise UserError(f"initial book for {name!r}, which is not a strategy of this backtest")
        group, member = members[name]
        if group.data is not data or len(book.holdings) != data.num_tickers:
            raise UserError(
                f"initial book of {name!r} holds {len(book.holdings)} tickers; the backtest trades {data.num_tickers}"
            )
        member.book = book


def _check_schedule(name: str, schedule: ActionSchedule, data: MarketData) -> None:
    """A schedule needs one row per bar of the period and one column per ticker."""
    expected = (data.num_bars, data.num_tickers)
    if tuple(schedule.actions.shape) != expected:
        raise UserError(
            f"strategy {name!r}: action schedule has shape {tuple(schedule.actions.shape)}, "
            f"the period needs {expected} (bars, tickers)"
        )


def _check_names(policies: Mapping[str, Any], baselines: tuple[str, ...]) -> None:
    for name in policies:
        if not isinstance(name, str) or not _NAME.match(name):
            raise UserError(f"strategy name {name!r} must be letters, digits, '_', '-' or '.' (it names a file)")
        if name in baselines:
            raise UserError(f"strategy name {name!r} is taken by a baseline; rename the policy")


def load_checkpoint_strategy(
    name: str, source: Any, data: MarketData, config: BacktestConfig, device: torch.device
) -> tuple[Any, EnvConfig, StrategyInfo, tuple[int, int] | None]:
    """The policy object, its env rules, its description and (for checkpoints) its dims."""
    if not isinstance(source, (str, os.PathLike)):
        info = StrategyInfo(name, name, "policy", type(source).__name__)
        return source, config.env_config(config.policy_env), info, None
    from trader.agents.checkpoint import load_policy, read_metadata

    meta = read_metadata(source)
    _check_checkpoint_tickers(name, meta, data)
    recorded = _checkpoint_env_rules(meta, Path(source), config.policy_env) if config.recorded_rules else None
    rules = config.env_config(recorded or config.policy_env)
    agent = load_policy(source, device)
    info = StrategyInfo(name, f"{str(meta['algo']).upper()} {name}", "policy", str(source))
    return agent, rules, info, (int(meta["obs_dim"]), int(meta["act_dim"]))


def _checkpoint_env_rules(meta: Mapping[str, Any], path: Path, default: EnvConfig) -> EnvConfig:
    """The env rules a checkpoint was trained under.

    Looked up in the sidecar (``env_config`` at its top level, in ``data_window`` or
    in ``info``), else in the run directory's config.toml (``[env.env_config]``, as
    `trader.train` writes it; the checkpoint lies in ``RUN_DIR/checkpoints/``),
    else `default`.
    """
    places = (meta, meta.get("data_window") or {}, meta.get("info") or {})
    recorded = next((p["env_config"] for p in places if isinstance(p, Mapping) and "env_config" in p), None)
    if recorded is None:  # a sidecar without the rules: config.toml is read only then
        recorded = rundir.recorded_env(path.parent.parent).get("env_config")
    if recorded is None:
        return default
    return rundir.recorded_rules(recorded, f"checkpoint {path}")


def _check_checkpoint_tickers(name: str, meta: Mapping[str, Any], data: MarketData) -> None:
    """Refuse a checkpoint trained on other tickers than the data's (when it records them)."""
    window = meta.get("data_window") or {}
    tickers = window.get("tickers") if isinstance(window, Mapping) else None
    if tickers is not None and tuple(tickers) != tuple(data.tickers):
        missing = [t for t in tickers if t not in data.tickers]
        extra = [t for t in data.tickers if t not in tickers]
        detail = (
            f"missing from the data: {missing[:10]}; not in the checkpoint: {extra[:10]}"
            if missing or extra
            else "same tickers in another order"
        )
        raise CheckpointError(
            f"checkpoint {name!r} was trained on {len(tickers)} tickers that do not match the "
            f"{data.num_tickers} of data set {data.name!r} ({detail})"
        )


def _check_policy_dims(member: _Member, env: StockTradingVecEnv) -> None:
    """A checkpoint's obs/act dims must equal the env's."""
    if member.dims is None:
        return
    obs_dim, act_dim = member.dims
    if (obs_dim, act_dim) != (env.obs_dim, env.act_dim):
        raise CheckpointError(
            f"checkpoint {member.info.name!r} does not fit the data: it trades {act_dim} tickers "
            f"(obs_dim {obs_dim}), the data has {env.act_dim} tickers (obs_dim {env.obs_dim})"
            if env.actions_per_stock == 1
            else f"checkpoint {member.info.name!r} does not fit the data: it takes {act_dim} actions "
            f"(obs_dim {obs_dim}); under its rules (rate_action) the data's {env.num_stocks} tickers "
            f"take {env.act_dim} (obs_dim {env.obs_dim})"
        )


def benchmark_panel(data: MarketData) -> MarketData:
    """The data's benchmark as a one-ticker panel (open = high = low = close).

    The benchmark series carries closes only, so its orders fill at the next bar's
    close; it is tradable on every bar.
    """
    if data.benchmark is None:
        raise DataError(f"data set {data.name!r} has no benchmark series")
    close = data.benchmark.to(torch.float32).reshape(-1, 1)
    features = torch.stack([close, close, close, close, torch.zeros_like(close)], dim=-1)
    name = data.benchmark_name or "benchmark"
    panel = MarketData(
        timestamps=data.timestamps,
        tickers=(name,),
        features=features,
        tradable=torch.ones_like(close, dtype=torch.bool),
        feature_names=("open", "high", "low", "close", "volume"),
        interval=data.interval,
        name=f"{data.name}:{name}",
    )
    # A buy-and-hold never reads its observations; explicit statistics say so (no warning).
    return panel.with_normalization(*panel.fit_normalization())


# --------------------------------------------------------------------- simulation


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
class _Records:
    """Per-bar records of one group, on the device until `_assemble` brings them over."""

    bars: Tensor  # float64 [len(RECORDED), T, E]
    positions: Tensor | None  # float64 [R, E, N]; None where positions are not kept (cost-multiple runs)


def _session_flags(timestamps: pd.DatetimeIndex) -> tuple[list[bool], np.ndarray]:
    """Per bar: does the next bar open a new date; and the session-close bar indices."""
    dates = timestamps.tz_localize(None).normalize() if timestamps.tz is not None else timestamps.normalize()
    change = np.asarray(dates[1:] != dates[:-1])
    new_day_next = [bool(x) for x in change] + [True]
    return new_day_next, np.flatnonzero(np.asarray(new_day_next))


WHOLE_GROUP_MAX_ROWS = 4
"""With `BacktestConfig.workers` > 1, groups of at most this many rows are never cut into shards
(`_shards`): their time is their chunks' fixed cost a call, which a cut does not divide (the
baselines' groups: the benchmark, 1 row; the equal-weight pair, 2); they are dealt whole (`_deal`)."""


def _simulate(
    groups: list[_Group],
    timestamps: pd.DatetimeIndex,
    record_positions: str,
    device: torch.device,
    positions_of: int | None = None,
    chunked: bool = False,
    workers: int = 1,
) -> list[_Records]:
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
    new_day_next, session_ends = _session_flags(timestamps)
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


def _deal(groups: list[_Group], whole: list[int], processes: int) -> list[tuple[int, int]]:
    """(group, process) for the chunked groups kept whole (`whole`, indices into `groups`), dealt in turn
    from the last worker down to this process (0), the largest (rows x stocks) first (one process: all
    in it). The workers' shards are equal and this process also builds the groups before
    the pass and assembles the results after it, so it takes the smallest: in the year of 64 MLPs on 2
    cores (benchmarks/RESULTS.md, "The C++ wrapper for a shard, the small groups dealt") the pair of equal-weight
    baselines (2 x 100) goes to the worker and the benchmark (1 x 1) stays here."""
    largest = sorted(whole, key=lambda k: -groups[k].env.num_envs * groups[k].env.num_stocks)
    return [(k, processes - 1 - n % processes) for n, k in enumerate(largest)]


def _shards(
    group: _Group, built: tuple[_GroupProgram, tuple], workers: int
) -> list[tuple[int, int, _Group, tuple[_GroupProgram, tuple]]] | None:
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
            shard = _Group(data=group.data, rules=group.rules, members=members, close=group.close)
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
    the process `_simulate` gives it to. `rows` (a shard, `_shards`): its rows [start, stop) of the whole
    group's `records`; None: the group's own records."""

    group: _Group
    built: tuple[_GroupProgram, tuple]
    obs: Tensor
    records: _Records
    slot_of: dict[int, int]
    rows: tuple[int, int] | None = None

    def _records(self) -> _Records:
        if self.rows is None:
            return self.records
        start, stop = self.rows
        positions = self.records.positions
        return _Records(self.records.bars[:, :, start:stop], None if positions is None else positions[:, start:stop])

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


def _group_program(group: _Group, obs: Tensor, calendar: Tensor, new_day: bool) -> tuple[_GroupProgram, tuple] | None:
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
    group: _Group, built: tuple[_GroupProgram, tuple], obs: Tensor, records: _Records, slot_of: dict[int, int]
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


def _rollout(group: _Group, built: tuple[_GroupProgram, tuple], records: _Records) -> Any:
    """The `market_envs.rollout.Rollout` of the group's chunked pass, recording what `_run_chunked` keeps."""
    from market_envs.rollout import Rollout

    return Rollout(group.env, built[0], record=chunk_record(records.positions is not None))


def _reset(group: _Group) -> Tensor:
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
    group: _Group, num_bars: int, num_slots: int | None, device: torch.device, shared: bool = False
) -> tuple[_Records, Tensor]:
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
    records = _Records(bars, positions)
    records.bars[RECORDED.index("value"), 0] = env.value
    records.bars[RECORDED.index("cash"), 0] = env.cash
    group.close = env.data.close.double()
    return records, obs


def _advance(
    group: _Group, obs: Tensor, records: _Records, ruined: Tensor, t: int, new_day_next: bool, slot: int | None
):
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


# --------------------------------------------------------------------- results


def _assemble(
    data: MarketData, period_name: str, groups: list[_Group], records: list[_Records], config: BacktestConfig
) -> BacktestResult:
    """Host-side series, positions and the metrics table (via `trader.metrics.summary`)."""
    timestamps = data.timestamps
    _, session_ends = _session_flags(timestamps)
    recorded = timestamps if config.record_positions == "bar" else timestamps[session_ends]
    series, positions, strategies = {}, {}, {}
    cost_totals = {}
    index = pd.DatetimeIndex(timestamps, name="timestamp")
    for g, rec in zip(groups, records):
        host = dict(zip(RECORDED, rec.bars.cpu().numpy()))
        host_positions = rec.positions.cpu().numpy()
        block, totals = _group_series(host, [_starting_value(m, config) for m in g.members], [m.row for m in g.members])
        for k, member in enumerate(g.members):
            name, r = member.info.name, member.row
            series[name] = pd.DataFrame(block[k].numpy().T, index=index, columns=SERIES_COLUMNS, copy=False)
            cost_totals[name] = cost_breakdown({key: float(totals[key][k]) for key in TOTALLED})
            positions[name] = pd.DataFrame(
                host_positions[:, r, :],
                index=pd.DatetimeIndex(recorded, name="timestamp"),
                columns=list(g.data.tickers),
            )
            strategies[name] = member.info
    order = [name for name in _given_order(groups) if name in series]
    returns = pd.DataFrame({name: series[name]["return"] for name in order})
    traded = pd.DataFrame({name: series[name]["traded_value"] for name in order})
    values = pd.DataFrame({name: series[name]["value"] for name in order})
    table = metrics.summary(
        returns, timestamps=timestamps, risk_free=config.risk_free, traded_value=traded, portfolio_value=values
    )
    table = table.sort_values("sharpe_ratio", ascending=False, na_position="last", kind="stable")
    return BacktestResult(
        metrics=table,
        series={name: series[name] for name in order},
        positions={name: positions[name] for name in order},
        daily_returns=metrics.daily_returns(returns, timestamps),
        strategies={name: strategies[name] for name in order},
        dataset=data.name,
        benchmark_name=data.benchmark_name,
        tickers=tuple(data.tickers),
        period=PeriodInfo(
            period_name, timestamps[0], timestamps[-1], len(timestamps), int(pd.Index(timestamps.date).nunique())
        ),
        config=config.as_dict(),
        missing_columns=tuple(data.meta.get("missing_columns", ())),
        costs={name: cost_totals[name] for name in order},
        cost_model=config.named_costs.as_dict(),
        membership=period_membership(data.meta.get("membership"), timestamps[0], timestamps[-1]),
    )


SERIES_COLUMNS = ("value", "return", "cash", "gross_value", "turnover", "traded_value", "costs")
"""The columns of a strategy's per-bar series (`BacktestResult.series`)."""

_SERIES_RECORDS = {"value": 0, "cash": 2, "gross_value": 3, "traded": 5, "costs": 6}
"""The records copied into `SERIES_COLUMNS`, by position; "return" and "turnover" are computed."""


def _group_series(host: Mapping[str, np.ndarray], starts: Sequence[float], rows: Sequence[int]) -> tuple[Tensor, dict]:
    """A group's members' series as one block [members, len(SERIES_COLUMNS), T] (member k's frame is the
    transpose of ``block[k]``, made without a copy), and each `TOTALLED` record's sum per member.

    `host`: the group's records by name, [T, E]; `starts`: each member's starting value; `rows`: its
    row. Each record is read once, transposed by torch's blocked copy: a column per strategy read the
    whole record once per strategy, and numpy's transposed copy is 4x slower (a year's assembly of 67
    strategies: 1.8 to 2.0 s against 2.2 to 2.4 s, benchmarks/RESULTS.md, "The year on a Zen 4 host").
    Returns and turnover by `_simple_returns` and `metrics.turnover`, the sums numpy's, as before."""
    num_bars = next(iter(host.values())).shape[0]
    block = torch.empty((len(rows), len(SERIES_COLUMNS), num_bars), dtype=torch.float64)
    spare = torch.empty((len(rows), num_bars), dtype=torch.float64)
    in_order = list(rows) == list(range(host["value"].shape[1]))
    order = None if in_order else torch.as_tensor(list(rows))

    def transposed(key: str, into: Tensor) -> np.ndarray:
        record = torch.from_numpy(host[key]).t()  # [E, T], a view
        return into.copy_(record if order is None else record[order]).numpy()

    for key, column in _SERIES_RECORDS.items():
        transposed(key, block[:, column])
    totals = {  # numpy's pairwise sums along each row, as over each strategy's column before
        key: (block[:, _SERIES_RECORDS[key]].numpy() if key in _SERIES_RECORDS else transposed(key, spare)).sum(axis=1)
        for key in TOTALLED
    }
    value = block[:, 0].numpy()
    previous = _previous_values(value, np.asarray(starts, dtype=np.float64))
    block[:, 1] = torch.from_numpy(_simple_returns(value, previous))
    block[:, 4] = torch.from_numpy(metrics.turnover(block[:, 5].numpy(), previous))
    return block, totals


def _trade_lists(groups: list[_Group], result: BacktestResult) -> dict[str, pd.DataFrame]:
    """Each strategy's fills, from its per-bar positions (`trader.backtesting.trades`)."""
    from trader.backtesting.trades import trade_list

    lists = {}
    for group in groups:
        for member in group.members:
            name = member.info.name
            lists[name] = trade_list(group.env, result.positions[name], result.series[name]["value"].to_numpy())
    return {name: lists[name] for name in result.series}


def _starting_value(member: _Member, config: BacktestConfig) -> float:
    """The value a strategy starts the period with: its `Book`'s, else the initial cash."""
    return config.initial_cash if member.book is None else member.book.value


def _previous_values(value: np.ndarray, start: float | np.ndarray) -> np.ndarray:
    """Each bar's value before it, [..., T]: `start` (one per series) before the first bar."""
    first = np.broadcast_to(np.asarray(start, dtype=np.float64), value.shape[:-1])[..., None]
    return np.concatenate([first, value[..., :-1]], axis=-1)


def _simple_returns(value: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Bar returns of value series [..., T] from each bar's value before it (`_previous_values`; 0 after ruin)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(previous > 0, value / previous - 1.0, 0.0)


def _sharpe_ratios(
    data: MarketData, groups: list[_Group], records: list[_Records], config: BacktestConfig
) -> pd.Series:
    """Each strategy's Sharpe ratio (as in the metrics table) from the value records of `groups`."""
    returns = {}
    for g, rec in zip(groups, records):
        values = rec.bars[RECORDED.index("value")].cpu().numpy()
        for member in g.members:
            value = values[:, member.row]
            returns[member.info.name] = _simple_returns(value, _previous_values(value, _starting_value(member, config)))
    table = metrics.summary(pd.DataFrame(returns), timestamps=data.timestamps, risk_free=config.risk_free)
    return table["sharpe_ratio"]


COST_PARTS = ("commission", "spread", "impact", "borrow")
"""The parts of a strategy's costs, as the env records them (``info["cost_<part>"]``)."""


def cost_breakdown(totals: Mapping[str, float]) -> dict[str, float | None]:
    """A strategy's costs over the period, from the sums of its per-bar records.

    Totals in the data's currency (``costs`` and ``cost_<part>`` for each of
    `COST_PARTS`), the value traded, ordered and left unfilled by the participation cap,
    each cost in basis points of the value traded (``<part>_bps``, ``costs_bps``; None
    without trades) and ``unfilled_share``: the unfilled value over the value ordered
    (None without orders)."""
    traded, ordered = totals["traded"], totals["ordered_value"]
    out: dict[str, float | None] = {
        "costs": totals["costs"],
        **{f"cost_{part}": totals[f"cost_{part}"] for part in COST_PARTS},
        "traded_value": traded,
        "ordered_value": ordered,
        "unfilled_value": totals["unfilled_value"],
        "unfilled_shares": totals["unfilled_shares"],
    }
    out["costs_bps"] = 1e4 * totals["costs"] / traded if traded > 0 else None
    for part in COST_PARTS:
        out[f"{part}_bps"] = 1e4 * totals[f"cost_{part}"] / traded if traded > 0 else None
    out["unfilled_share"] = totals["unfilled_value"] / ordered if ordered > 0 else None
    return out


def breakeven(multiples: Sequence[float], sharpes: Sequence[float]) -> dict[str, Any]:
    """The multiple of the cost model at which a strategy's Sharpe ratio reaches 0.

    `sharpes[i]` is the Sharpe ratio at ``multiples[i]`` (increasing). The curve is
    interpolated linearly between the points, and the breakeven is its first zero
    crossing from above. Returns ``multiples``, ``sharpe`` (None for NaN), ``multiple``
    (the crossing, or None), ``status`` and ``text`` (multiples without a Sharpe ratio
    beyond the first are skipped):

    - "crossed": the Sharpe ratio is > 0 at the first multiple and <= 0 at a later one;
    - "above": still > 0 at the largest multiple ("above 8x");
    - "below": <= 0 already at the smallest ("below 0 even at no cost" when that is 0);
    - "undefined": no Sharpe ratio at the smallest multiple (no returns to rate).
    """
    points = sorted(zip((float(k) for k in multiples), (float(s) for s in sharpes)))
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    out: dict[str, Any] = {"multiples": xs, "sharpe": [y if np.isfinite(y) else None for y in ys], "multiple": None}
    lowest = "no cost" if xs[0] == 0 else f"{xs[0]:g}x the costs"
    if not np.isfinite(ys[0]):
        return {**out, "status": "undefined", "text": "n/a (no Sharpe ratio)"}
    if ys[0] <= 0:
        return {**out, "status": "below", "text": f"below 0 even at {lowest}"}
    rated = [(k, s) for k, s in points if np.isfinite(s)]  # a multiple without a Sharpe ratio is skipped
    for (a, sa), (b, sb) in zip(rated, rated[1:]):
        if sb <= 0:
            crossing = a + (b - a) * sa / (sa - sb)
            return {**out, "multiple": crossing, "status": "crossed", "text": f"{crossing:.2f}x"}
    return {**out, "status": "above", "text": f"above {rated[-1][0]:g}x"}


def breakeven_table(curves: Mapping[float, pd.Series], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Strategy name -> `breakeven` of its Sharpe ratios at each multiple (`curves`: multiple -> Sharpe by name)."""
    multiples = sorted(curves)
    return {name: breakeven(multiples, [float(curves[k].get(name, np.nan)) for k in multiples]) for name in names}


def _given_order(groups: list[_Group]) -> list[str]:
    """Policies first, then baselines, each in the order given."""
    members = [m for g in groups for m in g.members]
    return [m.info.name for m in members if m.info.kind == "policy"] + [
        m.info.name for m in members if m.info.kind != "policy"
    ]
