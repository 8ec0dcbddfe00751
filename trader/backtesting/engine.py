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
ratio against the multiple is interpolated to its zero crossing
(`trader.backtesting.assembly.breakeven`).

`run_backtest` is here; its parts are one module per role: `trader.backtesting.config` (what a
backtest runs under), `trader.backtesting.groups` (the strategies, resolved and placed in groups),
`trader.backtesting.simulation` (the groups stepped bar by bar) and `trader.backtesting.assembly`
(the results, from the records).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from market_envs.data import MarketData
from market_envs.devices import resolve_device
from trader.backtesting.periods import load_dataset, require_bars, select_period
from trader.backtesting.result import BacktestResult
from trader.backtesting.shards import check_workers
from trader.backtesting.assembly import (
    against_the_market,
    assemble,
    backtest_evidence,
    breakeven_table,
    sharpe_ratios,
    trade_lists,
)
from trader.backtesting.config import BacktestConfig, Book
from trader.backtesting.groups import build_groups, oracle_schedule, oracle_under_costs, place_books, resolve_baselines
from trader.backtesting.simulation import simulate


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
    spread: dict[str, Any] | None = None,
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
    :param spread: a tournament's result against its own pods (`trader.backtesting.spread.spread`),
        carried into the report as it is.
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
    chosen = resolve_baselines(panel, baselines, config.factors)
    oracle = oracle_schedule(data, panel) if {"oracle", "oracle_costs"} & set(chosen) else None
    slow = oracle_under_costs(data, config, device) if "oracle_costs" in chosen else None
    loaded: dict[str, Any] = {}
    groups = build_groups(panel, policies or {}, chosen, config, device, oracle, loaded, slow)
    multiples = [k for k in config.breakeven_multiples if k != 1.0]
    scaled = [
        build_groups(panel, policies or {}, chosen, config.at_multiple(k), device, oracle, loaded, slow)
        for k in multiples
    ]
    for built in (groups, *scaled):
        place_books(built, initial_books or {}, panel)
    records = simulate(
        groups + [g for more in scaled for g in more],
        panel.timestamps,
        config.record_positions,
        device,
        positions_of=len(groups),
        chunked=config.compile,
        workers=config.workers,
    )
    result = assemble(panel, period_name, groups, records[: len(groups)], config)
    if config.record_positions == "bar":
        result = replace(result, trades=trade_lists(groups, result))
    if multiples:
        curves, offset = {1.0: result.metrics["sharpe_ratio"]}, len(groups)
        for k, more in zip(multiples, scaled):
            curves[k] = sharpe_ratios(panel, more, records[offset : offset + len(more)], config)
            offset += len(more)
        result = replace(result, breakeven=breakeven_table(curves, list(result.strategies)))
    result = replace(
        result,
        evidence=backtest_evidence(result.daily_returns, trials, config.workers),
        selection=selection,
        spread=spread,
    )
    result = against_the_market(result, panel)
    if run_dir is not None:
        from trader.backtesting.report import write_report

        files = write_report(result, run_dir, tear_sheet=config.tear_sheet, dataset_card=data.describe())
        result = replace(result, files=files)
    return result
