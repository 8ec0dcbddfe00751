"""A backtest's results, from the simulation's records: the series and metrics of each
strategy (`BacktestResult`), its trade list, its costs by part, the breakeven cost over the cost
multiples, the evidence and the comparison with the market."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from market_envs.data import MarketData
from market_envs.data.membership import period_membership
from trader import metrics
from trader.backtesting import yardsticks
from trader.backtesting.evidence import benchmark_evidence, strategy_evidence, yardstick_verdicts
from trader.backtesting.result import BacktestResult, PeriodInfo
from trader.backtesting.shards import map_forked
from trader.backtesting.config import BacktestConfig
from trader.backtesting.simulation import Group, Member, RECORDED, Records, TOTALLED, session_flags


def backtest_evidence(daily: pd.DataFrame, trials: Mapping[str, Any] | None, workers: int) -> dict[str, dict[str, Any]]:
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


def against_the_market(result: BacktestResult, panel: MarketData) -> BacktestResult:
    """Each strategy against the benchmark (`benchmark_evidence`) and each agent against the
    yardstick of its kind (`yardstick_verdicts`)."""
    benchmark = benchmark_daily_returns(panel)
    versus = {} if benchmark is None else benchmark_evidence(result.daily_returns, benchmark)
    agents = [n for n, s in result.strategies.items() if s.kind in ("policy", "library")]
    kinds = {y: y in yardsticks.DOLLAR_NEUTRAL for y in yardsticks.YARDSTICKS if y in result.strategies}
    verdicts = yardstick_verdicts(result.daily_returns, result.series, agents, kinds, result.labels()) if agents else {}
    return replace(result, versus_benchmark=versus, versus_yardsticks=verdicts)


def assemble(
    data: MarketData, period_name: str, groups: list[Group], records: list[Records], config: BacktestConfig
) -> BacktestResult:
    """Host-side series, positions and the metrics table (via `trader.metrics.summary`)."""
    timestamps = data.timestamps
    _, session_ends = session_flags(timestamps)
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


def trade_lists(groups: list[Group], result: BacktestResult) -> dict[str, pd.DataFrame]:
    """Each strategy's fills, from its per-bar positions (`trader.backtesting.trades`)."""
    from trader.backtesting.trades import trade_list

    lists = {}
    for group in groups:
        for member in group.members:
            name = member.info.name
            lists[name] = trade_list(group.env, result.positions[name], result.series[name]["value"].to_numpy())
    return {name: lists[name] for name in result.series}


def _starting_value(member: Member, config: BacktestConfig) -> float:
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


def sharpe_ratios(data: MarketData, groups: list[Group], records: list[Records], config: BacktestConfig) -> pd.Series:
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


def _given_order(groups: list[Group]) -> list[str]:
    """Policies first, then baselines, each in the order given."""
    members = [m for g in groups for m in g.members]
    return [m.info.name for m in members if m.info.kind == "policy"] + [
        m.info.name for m in members if m.info.kind != "policy"
    ]
