"""A backtest's strategies, resolved and placed in groups: the baselines that apply, the
oracles, checkpoints loaded and checked against the panel, and the groups of strategies that
share one batched env (the same panel and trading rules), each strategy a row of it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from market_envs.data import DataError, MarketData
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from trader import rundir
from trader.backtesting import yardsticks
from trader.backtesting.result import StrategyInfo
from trader.backtesting.strategies import (
    BASELINE_MAX_SHARES,
    ActionSchedule,
    BuyAndHold,
    DailyRebalance,
    Decide,
    ExternalPolicy,
    PolicyDecider,
    PolicyPopulation,
)
from trader.errors import CheckpointError, UserError
from trader.names import BASELINES
from trader.backtesting.assembly import sharpe_ratios
from trader.backtesting.config import BacktestConfig, Book
from trader.backtesting.simulation import Caller, Group, Member, simulate


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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
    group = Group(data=train, rules=fit.env_config(oracle_rules(0.5, 1.0 / n)))  # rate and band on: set per row
    schedule = oracle_schedule(data, train)
    group.members.extend(Member(StrategyInfo(f"candidate{k}", "", "baseline", ""), k) for k in range(len(grid)))
    group.callers.append(Caller(schedule, 0, len(grid)))
    group.env = StockTradingVecEnv(train, num_envs=len(grid), device=device, config=group.rules, compile=config.compile)
    group.env.set_pace(torch.tensor([r for r, _ in grid]), torch.tensor([b for _, b in grid]))
    records = simulate([group], train.timestamps, "day", device, positions_of=0)
    sharpes = sharpe_ratios(train, [group], records, fit).fillna(-np.inf).to_numpy()
    best = int(np.argmax(sharpes))
    chosen = oracle_rules(*grid[best])
    _ORACLE_FITS[key] = SlowOracle(
        chosen,
        f"{where}, {train.start:%Y-%m-%d} .. {train.end:%Y-%m-%d}",
        float(sharpes[best]),
        tuple((r, b, float(x)) for (r, b), x in zip(grid, sharpes)),
    )
    return _ORACLE_FITS[key]


def resolve_baselines(
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


def build_groups(
    data: MarketData,
    policies: Mapping[str, Any],
    baselines: tuple[str, ...],
    config: BacktestConfig,
    device: torch.device,
    oracle: ActionSchedule | None = None,
    loaded: dict[str, Any] | None = None,
    slow: SlowOracle | None = None,
) -> list[Group]:
    """Strategies grouped by (panel, trading rules), each group with its env built.

    `oracle` is the planted rule's schedule (`oracle_schedule`) when "oracle" or "oracle_costs" is
    asked for; `slow` the rules of "oracle_costs" (`oracle_under_costs`).
    `loaded` keeps the checkpoints loaded by an earlier call (the groups of each cost
    multiple are built by one call each; a checkpoint is read once).
    """
    loaded = {} if loaded is None else loaded
    _check_names(policies, baselines)
    groups: dict[tuple[str, EnvConfig], Group] = {}

    def group(panel_key: str, panel: MarketData, rules: EnvConfig) -> Group:
        key = (panel_key, rules)
        if key not in groups:
            groups[key] = Group(data=panel, rules=rules)
        return groups[key]

    def add(target: Group, decide: Decide, infos: list[StrategyInfo], dims: tuple[int, int] | None = None) -> None:
        start = len(target.members)
        target.members.extend(Member(info, start + k, dims) for k, info in enumerate(infos))
        target.callers.append(Caller(decide, start, len(target.members)))

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


def place_books(groups: list[Group], books: Mapping[str, Book], data: MarketData) -> None:
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


def _check_policy_dims(member: Member, env: StockTradingVecEnv) -> None:
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
