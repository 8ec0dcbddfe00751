"""Backtest speed: 64 policies over one year of minute bars for 100 tickers, on this CPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/backtest_speed.py [--days 252] [--policies 64]

The panel is built directly as tensors (random-walk prices; indicator columns are
random too, as their values do not change the work done), one trading year =
252 sessions x 390 minute bars. Each policy is its own small MLP
(obs_dim -> 64 -> 64 -> N, tanh) on its own sub-environment. `--mode population`
(default) evaluates the 64 MLPs in one vmapped call per bar (`PolicyPopulation`);
`--mode each` calls them one by one, as separate checkpoints are called. The three
baselines run beside them, as in every backtest.
Positions are recorded once per session (`record_positions="day"`). Prints a table.

`--network per_stock`: instead, 64 untrained PPO agents with the market preset's
per-stock network and rules (target weights, the 30-bar return t-statistic observed),
as `agents_population` (one program for the 64; bar by bar, each agent in turn, as 64
checkpoints are run).

`--paths old,new` (default) runs both in one process, the old path first: "old" is the
bar-by-bar loop with the env step compiled (every backtest before issue 43); "new" runs
each group many bars per compiled call (`market_envs.rollout`). Both with `--compile`
(implied by `--paths`), compile time included and also given apart (a first run on one
session, then the timed run), CPU seconds beside wall seconds, peak RSS growth of each
path (`ru_maxrss` after it, less before it; the old path runs first), and the largest
difference of the two paths' final values.

`--workers 2` (default 1): the backtest's policies' group cut into 2 shards, the second run by a
forked worker process (`BacktestConfig.workers`, `trader.backtesting.shards`), the baselines beside
them in this one. The CPU seconds are then this process's and its workers' together (the "of which
workers" column: the workers' alone, `RUSAGE_CHILDREN`); the wall seconds are the backtest's time.

`--stages` (with `--paths new`): also the wall seconds of the timed backtest's stages in this process
(the groups built, each group's chunked pass or shard, the series assembled, the strategies' evidence):
what the second process cannot share is what is not a shard.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from market_envs.data import FEATURE_NAMES, MarketData
from market_envs.kernel import own_code
from market_envs.rollout import DEFAULT_BLOCK, DEFAULT_CHUNK, Bar, Rollout, chunk_options
from trader.backtesting import BacktestConfig, PolicyPopulation, run_backtest

BARS_PER_SESSION = 390


def minute_panel(num_days: int, num_tickers: int, seed: int = 0) -> MarketData:
    """A random-walk panel of `num_days` full sessions, built straight as tensors, carrying its
    features' normalisation statistics as a data set's panel does (`market_envs.data.load` attaches
    its training period's): the envs then normalise with them instead of fitting them again, each
    with a look-ahead warning. Here they are the panel's own (the prices are random)."""
    days = pd.bdate_range("2023-01-03", periods=num_days)
    minutes = pd.to_timedelta(np.arange(BARS_PER_SESSION), unit="min") + pd.Timedelta(hours=9, minutes=31)
    stamps = pd.DatetimeIndex((days.values[:, None] + minutes.values[None, :]).ravel()).tz_localize("America/New_York")
    generator = torch.Generator().manual_seed(seed)
    num_bars = len(stamps)
    log_close = torch.cumsum(torch.randn(num_bars, num_tickers, generator=generator) * 1e-3, dim=0) + 4.0
    close = log_close.exp()
    features = torch.randn(num_bars, num_tickers, len(FEATURE_NAMES), generator=generator)
    features[:, :, 0] = close * (1.0 + 1e-4 * torch.randn(num_bars, num_tickers, generator=generator))
    features[:, :, 1] = features[:, :, :1].amax(-1).maximum(close) * 1.0005
    features[:, :, 2] = features[:, :, :1].amin(-1).minimum(close) * 0.9995
    features[:, :, 3] = close
    features[:, :, 4] = 1000.0
    panel = MarketData(
        timestamps=stamps,
        tickers=tuple(f"S{i:03d}" for i in range(num_tickers)),
        features=features,
        tradable=torch.ones(num_bars, num_tickers, dtype=torch.bool),
        benchmark=close.mean(dim=1),
        benchmark_name="BENCH",
        name=f"speed-{num_days}d-{num_tickers}t",
    )
    return panel.with_normalization(*panel.fit_normalization())


def mlp_policy(obs_dim: int, act_dim: int, seed: int) -> torch.nn.Module:
    """One small deterministic MLP policy."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(obs_dim, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, act_dim),
        torch.nn.Tanh(),
    )
    return net.eval()


def per_stock_agents(obs_dim: int, act_dim: int, count: int) -> dict:
    """`count` untrained PPO agents with the market preset's per-stock network."""
    from trader.agents import make_agent, make_config
    from podracer.presets import market_algo_config

    config = make_config("ppo", market_algo_config("ppo", steps=1, num_envs=1))
    return {f"p{k:02d}": make_agent("ppo", obs_dim, act_dim, config, seed=k) for k in range(count)}


STAGES = {
    "engine.build_groups": "build the groups (envs, their tables)",
    "simulation._run_chunked": "a chunked pass in this process: a group kept whole, or a shard",
    "engine.assemble": "assemble the series and metrics",
    "engine.backtest_evidence": "the strategies' evidence (over the processes)",
}
"""The backtest's functions timed by ``--stages`` (``module.name`` in `trader.backtesting`, the module
that calls it), and what each is."""


@contextlib.contextmanager
def timed_stages(into: list[tuple[str, float]]) -> Iterator[None]:
    """Append ``(stage, wall seconds)`` to `into` for each call of a `STAGES` function meanwhile; a chunked
    pass's stage names its rows and stocks."""
    import importlib

    modules = {name: importlib.import_module("trader.backtesting." + name.split(".")[0]) for name in STAGES}
    originals = {name: getattr(modules[name], name.split(".")[1]) for name in STAGES}

    def timer(name: str, function: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                size = (
                    f" ({args[0].env.num_envs} x {args[0].env.num_stocks})" if name == "simulation._run_chunked" else ""
                )
                into.append((STAGES[name] + size, time.perf_counter() - start))

        return call

    for name, function in originals.items():
        setattr(modules[name], name.split(".")[1], timer(name, function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(modules[name], name.split(".")[1], function)


def run_path(
    path: str, data: MarketData, policies: dict, config: BacktestConfig, device: str, stages: list | None = None
) -> dict:
    """One timed backtest on `path` ("old": bar by bar, the step compiled; "new": chunked),
    after a warm-up on the first session (its compilation). `stages`: a list that receives the
    timed backtest's `timed_stages`."""
    import resource

    import trader.backtesting.simulation as engine

    original = engine._group_program
    if path == "old":  # every group falls back to the bar-by-bar loop
        engine._group_program = lambda *args, **kwargs: None
    try:
        start = time.perf_counter()
        run_backtest(data.take(slice(0, BARS_PER_SESSION)), policies, period="all", config=config, device=device)
        warm = time.perf_counter() - start
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        children = _children_cpu()
        start, cpu = time.perf_counter(), time.process_time()
        with timed_stages([] if stages is None else stages):
            result = run_backtest(data, policies, period="all", config=config, device=device)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        workers_cpu = _children_cpu() - children
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    finally:
        engine._group_program = original
    return {
        "path": path,
        "warm": warm,
        "seconds": seconds,
        "cpu": cpu + workers_cpu,
        "workers_cpu": workers_cpu,
        "peak_mb": peak / 1024,
        "result": result,
    }


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (a sharded backtest's worker processes)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def setup(args: argparse.Namespace) -> tuple[MarketData, dict, BacktestConfig]:
    """The panel, the policies (`--network`) and the backtest's config, compiled."""
    data = minute_panel(args.days, args.tickers)
    rules, obs_dim = None, 1 + args.tickers * (1 + len(FEATURE_NAMES))
    if args.network == "per_stock":
        from podracer.presets import market_rules

        rules = market_rules()
        obs_dim = 1 + 2 * args.tickers
        from trader.backtesting import agents_population

        policies = {"ppo": agents_population(per_stock_agents(obs_dim, args.tickers, args.policies))}
    else:
        nets = {f"p{k:02d}": mlp_policy(obs_dim, args.tickers, k).to(args.device) for k in range(args.policies)}
        policies = {"mlp": PolicyPopulation.from_modules(nets)}
    config = BacktestConfig(
        record_positions="day",
        tear_sheet=False,
        compile=True,
        workers=args.workers,
        **({"policy_env": rules} if rules is not None else {}),
    )
    return data, policies, config


def compare_paths(args: argparse.Namespace) -> None:
    import os

    data, policies, config = setup(args)
    print(
        f"{args.days} sessions x {BARS_PER_SESSION} bars = {data.num_bars:,} bars, {args.tickers} tickers, "
        f"{args.policies} {args.network} policies + baselines; torch {torch.__version__}, 1 thread, {args.device}; "
        f"{args.workers} process(es); load {os.getloadavg()[0]:.2f}\n"
    )
    print(
        "| path | workers | warm-up s (1 session, compile) | backtest s | CPU s | of which workers | bars/s "
        "| peak RSS growth MB | load after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    finals, stages = {}, []
    for path in args.paths.split(","):
        row = run_path(path, data, policies, config, args.device, stages if path == "new" else None)
        finals[path] = pd.DataFrame({n: s["value"] for n, s in row["result"].series.items()}).iloc[-1]
        print(
            f"| {path} | {args.workers} | {row['warm']:.1f} | {row['seconds']:.1f} | {row['cpu']:.1f} | "
            f"{row['workers_cpu']:.1f} | {data.num_bars / row['seconds']:,.0f} | {row['peak_mb']:.0f} | "
            f"{os.getloadavg()[0]:.2f} |",
            flush=True,
        )
    if args.stages and stages:
        print("\n| stage of the new path, in this process | wall s |\n|---|---:|")
        for stage, seconds in stages:
            print(f"| {stage} | {seconds:.2f} |")
    if len(finals) == 2:
        old, new = finals.values()
        print(
            f"\nfinal values, largest relative difference of the two paths: {float(((new - old) / old).abs().max()):.2e}"
        )


@dataclass(frozen=True)
class FixedActions:
    """A program whose actions are its param, the same every bar: the env step without a policy."""

    def prepare(self, params: tuple, rows: torch.Tensor) -> None:
        return None

    def decide(self, params: tuple, prepared: None, bar: Bar) -> torch.Tensor:
        return params[0]


def _policies_alone(program, chunk: int, width: int):
    """`chunk` bars of the program's decisions, no env: each bar's account columns are the cash
    column and the last bar's actions (a chain of bars, as in a pass, that no compiler can fold)."""

    def decide_chunk(params, prepared, account, cash, holdings, value, close, t):
        for k in range(chunk):
            bar = Bar(k, t, account, account, cash, holdings, value, close, None)
            actions = program.decide(params, tuple(part[k] for part in prepared), bar)
            account = torch.cat([account[:, :1], actions[:, : width - 1]], dim=1)
        return account

    return own_code(decide_chunk)


def _timed(function) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - start, time.process_time() - cpu


def parts_of(data: MarketData, policies: dict, config: BacktestConfig, device: torch.device) -> list[tuple]:
    """The backtest's parts on `data`, each timed alone: rows (part, wall s, CPU s)."""
    from trader.backtesting import groups as lineup
    from trader.backtesting import simulation as engine

    groups = lineup.build_groups(data, policies, lineup.resolve_baselines(data, None), config, device)
    new_day_next, session_ends = engine.session_flags(data.timestamps)
    slot_of = {int(t): k for k, t in enumerate(session_ends)}
    calendar = torch.tensor(new_day_next, dtype=torch.bool, device=device)

    def start(group: Any) -> tuple:
        records, obs = engine._start(group, data.num_bars, len(session_ends), device)
        return records, obs, engine._group_program(group, obs, calendar, new_day_next[0])

    def whole(group: Any) -> None:
        records, obs, built = start(group)
        engine._run_chunked(group, built, obs, records, slot_of)

    policy_group, others = groups[0], groups[1:]
    env = policy_group.env
    record = engine.chunk_record(True)
    actions = (torch.rand(env.num_envs, env.act_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1).to(device)
    fixed = (FixedActions(), (actions,))
    rows = [("backtest's groups, each a chunked pass with its records", *_timed(lambda: [whole(g) for g in groups]))]
    rows.append((f"  policies' group ({env.num_envs} sub-environments)", *_timed(lambda: whole(policy_group))))
    rows.append(("  the baselines' and benchmark's groups", *_timed(lambda: [whole(g) for g in others])))

    def env_with_records() -> None:
        records, obs, _ = start(policy_group)
        engine._run_chunked(policy_group, fixed, obs, records, slot_of)

    rows.append(("(a) env step alone, fixed actions, with the records", *_timed(env_with_records)))
    env_alone = Rollout(env, fixed[0], record=record)
    rows.append(
        ("(a) env step alone, fixed actions, no records", *_timed(lambda: env_alone.run(fixed[1], on_chunk=_drop)))
    )

    program, params = start(policy_group)[2]
    options = chunk_options(device, False)
    decide = torch.compile(_policies_alone(program, DEFAULT_CHUNK, env.num_stocks + 1), dynamic=False, options=options)
    e, n = env.num_envs, env.num_stocks
    t = torch.zeros(e, dtype=torch.int64, device=device)
    cash, value = torch.ones(e, dtype=torch.float64, device=device), torch.ones(e, dtype=torch.float64, device=device)
    holdings, close = torch.zeros(e, n, dtype=torch.float64, device=device), env.data.close[0].double()
    blocks = [  # as `Rollout.run` cuts them: the last bar repeated past the end
        (torch.arange(DEFAULT_BLOCK, device=device) + first).clamp_max(data.num_bars - 1)
        for first in range(0, data.num_bars - 1, DEFAULT_BLOCK)
    ]
    ready = [program.prepare(params, env.tables.obs.index_select(0, bars)) for bars in blocks]

    def prepare_all() -> None:
        for bars in blocks:
            program.prepare(params, env.tables.obs.index_select(0, bars))

    def decide_all() -> None:
        account = torch.zeros(e, n + 1, device=device)
        for block in ready:
            for at in range(0, DEFAULT_BLOCK, DEFAULT_CHUNK):
                account = decide(
                    params,
                    tuple(part[at : at + DEFAULT_CHUNK] for part in block),
                    account,
                    cash,
                    holdings,
                    value,
                    close,
                    t,
                )

    rows.append(("(b) policies alone: `prepare` per block (features' product)", *_timed(prepare_all)))
    rows.append((f"(b) policies alone: `decide`, {DEFAULT_CHUNK} bars per compiled call", *_timed(decide_all)))

    def trivial(state, obs, params, prepared, tables, first, new_start, new_end):
        out = {key: torch.zeros((DEFAULT_CHUNK, *value.shape), dtype=value.dtype) for key, value in shapes.items()}
        return state._replace(t=state.t + DEFAULT_CHUNK), obs + 0, out

    shapes = {key: value[0] for key, value in Rollout(env, fixed[0], record=record).run(fixed[1]).items()}
    fixed_cost = Rollout(env, fixed[0], record=record)
    fixed_cost._run_chunk = torch.compile(own_code(trivial), dynamic=False, options=options)
    rows.append(
        (
            "(c) fixed cost: a pass of empty compiled chunks (guards, wrapper, loop)",
            *_timed(lambda: fixed_cost.run(fixed[1], on_chunk=_drop)),
        )
    )
    return rows


def _drop(first: int, steps: int, rows: dict) -> None:
    """A pass's `on_chunk` that keeps nothing."""


def time_parts(args: argparse.Namespace) -> None:
    """`--parts`: where a backtest's time goes, each part timed alone after a warm-up on one session."""
    import os

    data, policies, config = setup(args)
    device = torch.device(args.device)
    parts_of(data.take(slice(0, BARS_PER_SESSION)), policies, config, device)  # compiles every part
    load = os.getloadavg()[0]
    rows = parts_of(data, policies, config, device)
    print(
        f"{args.days} sessions x {BARS_PER_SESSION} bars = {data.num_bars:,} bars, {args.tickers} tickers, "
        f"{args.policies} {args.network} policies + baselines; torch {torch.__version__}, 1 thread, {args.device}; "
        f"load {load:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    bars = data.num_bars - 1
    print("| part | s | CPU s | CPU ms a bar | a year (98,280 bars) s |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds, cpu in rows:
        print(f"| {name} | {seconds:.2f} | {cpu:.2f} | {1e3 * cpu / bars:.3f} | {cpu / bars * 98_280:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=252, help="trading sessions (252 = one year)")
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--policies", type=int, default=64)
    parser.add_argument("--mode", choices=("population", "each"), default="population")
    parser.add_argument("--compile", action="store_true", help="torch.compile the env step kernel")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    parser.add_argument(
        "--paths", default="old,new", help="comma list of old and new (compiled); '' for the single run below"
    )
    parser.add_argument("--network", choices=("mlp", "per_stock"), default="mlp")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes running the backtest (BacktestConfig.workers): the policies' group cut into this many shards",
    )
    parser.add_argument(
        "--stages", action="store_true", help="with --paths new: also the timed backtest's stages in this process"
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="time the chunked backtest's parts alone (env step, policies, fixed costs per chunk) instead",
    )
    args = parser.parse_args()
    unknown = set(filter(None, args.paths.split(","))) - {"old", "new"}
    if unknown:
        parser.error(f"--paths: unknown path {', '.join(sorted(unknown))} (choose old, new or old,new)")
    if args.stages and (args.parts or "new" not in args.paths.split(",")):
        parser.error("--stages times the new path's backtest: give it with --paths new (or old,new), not --parts")
    torch.set_num_threads(1)
    if args.parts:
        time_parts(args)
        return
    if args.paths:
        compare_paths(args)
        return

    start = time.perf_counter()
    data = minute_panel(args.days, args.tickers)
    build_s = time.perf_counter() - start
    obs_dim = 1 + args.tickers * (1 + len(FEATURE_NAMES))
    nets = {f"p{k:02d}": mlp_policy(obs_dim, args.tickers, k).to(args.device) for k in range(args.policies)}
    policies = {"mlp": PolicyPopulation.from_modules(nets)} if args.mode == "population" else nets
    config = BacktestConfig(record_positions="day", tear_sheet=False, compile=args.compile, workers=args.workers)

    start = time.perf_counter()
    result = run_backtest(data, policies, period="all", config=config, device=args.device)
    run_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        from trader.backtesting import write_report

        write_report(result, scratch, tear_sheet=False)
        write_s = time.perf_counter() - start

    bars = data.num_bars
    strategies = len(result.series)
    rows = [
        (
            "machine",
            f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, {args.device}",
        ),
        ("panel", f"{args.days} sessions x {BARS_PER_SESSION} bars = {bars} bars, {args.tickers} tickers"),
        ("strategies", f"{args.policies} MLP policies ({args.mode}) + {strategies - args.policies} baselines"),
        ("env step kernel", "torch.compile (compile time included below)" if args.compile else "eager"),
        ("build panel", f"{build_s:.1f} s"),
        ("backtest (run_backtest)", f"{run_s:.1f} s"),
        ("bars / s", f"{bars / run_s:,.0f}"),
        ("policy decisions / s", f"{bars * args.policies / run_s:,.0f}"),
        ("write parquet + report", f"{write_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
