"""What a backtest runs under: `BacktestConfig` (capital, costs, recording, the envs' rules,
workers) and `Book` (an account a strategy starts from instead of all cash)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from market_envs.costs import CostModel, NamedCosts, described
from market_envs.config import EnvConfig
from trader.backtesting.result import BacktestResult
from trader.backtesting.yardsticks import FactorParams
from trader.errors import ConfigError


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
