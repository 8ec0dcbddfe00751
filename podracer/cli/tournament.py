"""`trader tournament RUN_DIR`: a population of PPO, SAC and TD3 pods on dask.

A thin layer over `tournament.run`: flags override the keys of ``--config`` (a TOML
file of `TournamentConfig` keys, e.g. a run's tournament.toml), a live line shows
pods done / in flight, workers, the best score and pods per hour; at the end the
leaderboard's top 10 and the test-period backtest of the best pod and the ensemble.

SIGINT (Ctrl-C) or SIGTERM, at any stage, ends it with one line saying where it stopped and
the command that resumes it, and exit code 128 + the signal's number (130, 143); another
signal while it stops is ignored.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from podracer.cli.root import app
from podracer.cli.options import (
    AlgosOption,
    PresetOption,
    CommissionOption,
    CompileOption,
    CostSetOption,
    CostsOption,
    DatasetOption,
    DeviceOption,
    EnsembleWeightingOption,
    GpusOption,
    GroupSizeOption,
    InitialCashOption,
    InsecureOption,
    NoTradeBandOption,
    NumEnvsOption,
    SchedulerOption,
    SearchOption,
    SeedOption,
    TargetScoreOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    TradeRateOption,
    WeightsMapOption,
    WorkersOption,
    PopulationOption,
    cluster_flags,
    cost_flags,
    market_only,
    tournament_keys,
    with_rule_flags,
)
from trader.names import counted
from trader.errors import UserError
from trader.names import PRESET_COST


@app.command("tournament")
def tournament_command(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (created; with --resume, the one to continue).")],
    dataset: DatasetOption = None,
    env: Annotated[
        str | None, typer.Option("--env", help="Gymnasium env id instead of a data set, e.g. Ant-v5.")
    ] = None,
    algos: AlgosOption = None,
    population: PopulationOption = None,
    pod_steps: Annotated[int | None, typer.Option("--pod-steps", help="Transitions per pod (default 50000).")] = None,
    pods: Annotated[
        int | None, typer.Option("--pods", help="Pod budget (default 12 unless another stop is given).")
    ] = None,
    time_budget: Annotated[
        str | None,
        typer.Option(
            "--time-budget", help="Wall-clock budget: 90s, 30m, 2h. Pods running then stop, are validated and ranked."
        ),
    ] = None,
    target_score: TargetScoreOption = None,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure: InsecureOption = False,
    search: SearchOption = None,
    ensemble_weighting: EnsembleWeightingOption = None,
    gpus: GpusOption = None,
    num_envs: NumEnvsOption = None,
    group_size: GroupSizeOption = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
    compile: CompileOption = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML file of tournament keys; flags override it.")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the tournament in RUN_DIR.")] = False,
    preset: PresetOption = None,
    commission: CommissionOption = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    trade_rate: TradeRateOption = None,
    no_trade_band: NoTradeBandOption = None,
    weights_map: WeightsMapOption = None,
    initial_cash: InitialCashOption = None,
) -> None:
    """Train a population of pods on dask, rank them, breed new ones; backtest the best.

    Without --dataset or --env: synthetic-edge-minute (TournamentConfig.env)."""
    from tournament import TournamentConfig
    from tournament.config import DEFAULT_ENV, market_parts
    from trader.rundir import read_toml

    cost, named = cost_flags(commission, costs, cost_set)
    values: dict[str, Any] = read_toml(config) if config is not None else {}
    if dataset is not None and env is not None:
        raise UserError("give --dataset or --env, not both")
    cluster_keys = cluster_flags(workers, scheduler, gpus, device, (tls_ca, tls_cert, tls_key), insecure)
    market_only(env is not None, preset=preset, initial_cash=initial_cash)
    market = market_parts(values)  # the market of --config: its name, rules and windows, out of values
    if dataset is not None or env is not None:
        market["env"] = dataset or env
    flags = tournament_keys(
        algos=algos,
        population=population,
        pod_steps=pod_steps,
        pods=pods,
        time_budget=time_budget,
        target_score=target_score,
        num_envs=num_envs,
        search=search,
        ensemble_weighting=ensemble_weighting,
        compile=compile,
        cluster=cluster_keys,
    )
    if "pods" in values and flags.get("pods", 0) is None:
        del flags["pods"]  # a time or score stop given alone replaces the default pod budget, not --config's
    values.update(flags)
    given_settings = (("seed", seed), ("device", device), ("group_size", group_size))
    values.update({key: value for key, value in given_settings if value is not None})
    name = market.get("env") or DEFAULT_ENV
    rules = market.get("rules")
    if preset is not None:
        from podracer.presets import apply_preset

        defaults = TournamentConfig()
        rules, values["algo_configs"] = apply_preset(
            preset,
            name,
            PRESET_COST if cost is None else cost,
            values.get("algos", defaults.algos),
            steps=values.get("pod_steps", defaults.pod_steps),
            num_envs=values.get("num_envs", defaults.num_envs),
            env_config=rules,
            algo_configs=values.get("algo_configs"),
        )
    rules = with_rule_flags(
        rules, trade_rate=trade_rate, no_trade_band=no_trade_band, weights_map=weights_map, initial_cash=initial_cash
    )
    market["rules"] = rules
    given = market_given(market, preset, cost, named, trade_rate, no_trade_band, weights_map, initial_cash)
    if given:  # the market, resolved once here: a MarketSpec (the costs set on its rules as objects) or a gym id
        values["env"] = _resolve_market(name, rules, cost, named, market.get("periods"), market.get("windows"))
    values["run_dir"] = str(run_dir)
    from tournament.config import RESUME_KEYS
    from tournament.orchestrator import resolve_config, resume_config

    if resume:
        check_resume_options(run_dir, values, given)  # a refused setting is named before a missing stop
        settings = resume_config(run_dir, {key: values[key] for key in RESUME_KEYS if key in values})
    else:
        settings = resolve_config(TournamentConfig.from_dict(values), resume)
    stage = "cluster"
    with signals_as_interrupts() as caught:
        try:
            result = _run_on_cluster(settings, resume, caught)
            stage = "report"
            if caught:  # a signal whose KeyboardInterrupt Python swallowed (raised inside a gc callback)
                raise KeyboardInterrupt
            _print_result(result, run_dir)
        except KeyboardInterrupt as interrupt:
            print(interrupted_line(run_dir, interrupt, stage, caught), file=sys.stderr, flush=True)
            raise typer.Exit(128 + (caught[0] if caught else signal.SIGINT)) from None


def _run_on_cluster(settings: Any, resume: bool, caught: list[int]) -> Any:
    """`tournament.run` on the cluster of ``settings``, closed at the end (``caught``: the signals
    `signals_as_interrupts` caught so far)."""
    from tournament import cluster

    client = cluster.connect_for(settings)
    try:
        return _run_with_progress(settings, resume, client, caught)
    finally:
        cluster.close(client)


def _print_result(result: Any, run_dir: Path) -> None:
    """How it stopped, the leaderboard's top 10, the result and the final backtest's table."""
    Console(stderr=True).print(f"stopped ({result.stop_reason}) after {result.seconds:,.0f} s")
    _print_leaderboard(result.leaderboard)
    if result.selection is not None:
        print(result.selection.sentence())
    if result.backtest is not None:
        from podracer.cli.backtest import print_result_table

        print_result_table(result.backtest, "table")
        print(f"\nwrote {run_dir / 'report.md'}, {run_dir / 'report.json'}, leaderboard.json and pods.parquet")


@contextmanager
def signals_as_interrupts() -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread, once: the signal's number is
    appended to the list yielded, and a later signal is ignored while the run stops (its cluster
    closes; SIGKILL still ends it). The previous handlers come back at the end."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def interrupt(number: int, frame: Any) -> None:
        if caught:
            return
        caught.append(number)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted_line(run_dir: Path, interrupt: BaseException, stage: str, caught: list[int]) -> str:
    """The one line of a tournament stopped by a signal: the signal, where it stopped, what resumes it.

    :param stage: the CLI's stage when ``interrupt`` is not a `tournament.orchestrator.Interrupted`
        (which knows its own): "cluster" (starting it) or "report" (printing the results)."""
    from tournament.orchestrator import Interrupted
    from trader import rundir

    name = signal.Signals(caught[0]).name if caught else "SIGINT"
    command = f"trader tournament {shlex.quote(str(run_dir))} --resume"
    if isinstance(interrupt, Interrupted):
        return f"interrupted ({name}) {interrupt.where()}; resume with: {command}"
    if stage == "report":
        return f"interrupted ({name}) while printing the results; the tournament finished: see {run_dir / rundir.REPORT_MD}"
    if (run_dir / rundir.TOURNAMENT).is_file() and (run_dir / rundir.EVENTS).is_file():
        return f"interrupted ({name}) while starting the cluster; resume with: {command}"
    return f"interrupted ({name}) while starting the cluster, before the tournament began; run the same command again"


FLAGLESS = {"pods_per_gpu": "--config's pods_per_gpu"}
"""Keys of `tournament.config.RESUME_KEYS` without an option of their own."""


def resume_options() -> list[str]:
    """The options a resumed tournament takes (`tournament.config.RESUME_KEYS`: its stops and cluster)."""
    from tournament.config import RESUME_KEYS

    return [FLAGLESS.get(key, "--" + key.replace("_", "-")) for key in RESUME_KEYS]


SETTING_OPTIONS = {
    "env": "--dataset/--env",
    "rules": "--preset/--commission/--costs",
    "windows": "--config's windows or periods",
    "algos": "--algos",
    "population": "--population",
    "pod_steps": "--pod-steps",
    "num_envs": "--num-envs",
    "group_size": "--group-size",
    "seed": "--seed",
    "device": "--device",
    "compile": "--compile",
    "search": "--search",
    "ensemble_weighting": "--ensemble-weighting",
    "algo_configs": "--preset",
}
"""The options that set a tournament's settings (tournament.toml), by the key they set (the market's
three parts, ``env``, ``rules`` and ``windows``, each by its own)."""


def market_given(
    market: dict[str, Any],
    preset: str | None,
    cost: float | None,
    named: Any,
    trade_rate: str | None,
    no_trade_band: float | None,
    weights_map: str | None,
    initial_cash: float | None,
) -> list[str]:
    """The parts of the market (``env``, ``rules``, ``windows``) that the command line or --config
    sets (`tournament.config.market_parts`' ``market``, after the flags); [] when none is."""
    rules_flags = (preset, cost, named, trade_rate, no_trade_band, weights_map, initial_cash)
    parts = {
        "env": market.get("env") is not None,
        "rules": market.get("rules") is not None or any(flag is not None for flag in rules_flags),
        "windows": bool(market.get("periods") or market.get("windows")),
    }
    return [part for part, set_ in parts.items() if set_]


def check_resume_options(run_dir: Path, values: dict[str, Any], market: list[str] | None = None) -> None:
    """With ``--resume``, an option that would change the saved tournament (its data set,
    algorithms, pods' length, rules, ...) is refused with one line naming it, unless it gives
    the value saved (the first command line repeated with --resume appended); the stops and
    the cluster (`tournament.config.RESUME_KEYS`) act. ``market``: the parts of ``values["env"]``
    given (`market_given`), each compared alone."""
    from tournament import TournamentConfig
    from tournament.config import RESUME_KEYS
    from tournament.orchestrator import saved_settings
    from trader.rundir import json_ready, toml_ready

    def plain(config: Any) -> dict[str, Any]:  # as tournament.toml holds it: lists, no None
        values = json_ready(toml_ready(config.to_dict()))
        env = values.pop("env")
        if isinstance(env, dict):  # the market's parts, each its own setting
            values.update(env=env["dataset"], rules=env["rules"], windows=env.get("windows"))
        else:
            values.update(env=env)
        return values

    saved = plain(TournamentConfig.from_dict({**saved_settings(run_dir), "run_dir": str(run_dir)}))
    wanted = plain(TournamentConfig.from_dict(values))
    keys = set(values) - set(RESUME_KEYS) - {"run_dir", "env"} | set(market or [])
    for key in sorted(keys):
        if wanted.get(key) != saved.get(key):
            option = SETTING_OPTIONS.get(key, f"--config's {key}")
            shown = wanted.get(key) if key not in ("rules", "algo_configs") else "other rules"
            raise UserError(
                f"--resume: {option} gives {shown!r} where the tournament in {run_dir} has "
                f"{saved.get(key)!r} (tournament.toml); a resumed tournament keeps its settings "
                f"and takes only {', '.join(resume_options())}"
            )


def _run_with_progress(settings: Any, resume: bool, client: Any, caught: list[int]) -> Any:
    """`tournament.run` on ``client`` with a live line: pods, workers, best score, pods/h. A signal
    caught while the run goes on (its ``KeyboardInterrupt`` was raised where Python ignores
    exceptions, a gc callback) is raised again at the loop's next pass."""
    from tournament import run
    from trader.spec import market_name

    console = Console(stderr=True)
    console.print(
        f"[bold]tournament[/bold] {market_name(settings.env)}: {', '.join(settings.algos)}, population "
        f"{settings.population}, {settings.pod_steps:,} steps per pod, run directory {settings.run_dir}"
    )
    line = groups_line(settings)
    if line:
        console.print(line)
    with pods_progress(console) as bar:
        task = bar.add_task("pods", total=settings.pods, line="preparing the data ...")

        def show(state) -> None:
            if caught:
                raise KeyboardInterrupt
            bar.update(task, completed=state.done + state.failed, line=progress_line(state))

        return run(settings, resume=resume, client=client, on_progress=show)


def groups_line(settings: Any) -> str:
    """What a tournament of pod groups (``group_size`` > 1) trains together, and what it does not
    mutate for it, in one line; "" for a tournament of lone pods."""
    from tournament.generator import frozen_by_groups
    from trader.group_training import group_key

    if settings.group_size <= 1:
        return ""
    grouped = [algo for algo in settings.algos if group_key(algo, settings.base_config(algo)) is not None]
    alone = [algo for algo in settings.algos if algo not in grouped]  # an algorithm, or a network, no group takes
    if not grouped:
        return f"group size {settings.group_size}: {', '.join(alone)} pods train alone (no groups for them yet)"
    frozen = sorted({key for algo in grouped for key in frozen_by_groups(algo, settings.group_size)})
    line = f"pod groups of up to {settings.group_size} {'/'.join(grouped)} pods"
    if frozen:
        line += f"; not mutated, as they define a group: {', '.join(frozen)}"
    if alone:
        line += f"; {', '.join(alone)} pods train alone"
    return line


def progress_line(state: Any) -> str:
    """The live line of a tournament's `Progress`: pods in flight, failed, workers, best, pods/h
    (a resumed run's: of this session's pods over this session's time, and it says so)."""
    best = "-" if state.best_score is None else f"{state.best_score:.4g} ({state.best_algo})"
    return (
        f"{state.in_flight} in flight, {state.failed} failed, {counted(state.workers, 'worker')}, "
        f"best {best}, {state.pods_per_hour:,.0f} pods/h{' this session' if state.resumed else ''}"
    )


def _resolve_market(
    name: str,
    rules: dict[str, Any] | None,
    cost: float | None,
    named: Any,
    periods: dict[str, Any] | None,
    windows: dict[str, Any] | None,
) -> Any:
    """The tournament's market, resolved once (`trader.spec.resolve_market`): a `MarketSpec` whose
    rules hold ``--commission`` or ``--costs`` as objects, or a gymnasium id. Refused, before any pod
    runs: those flags for a gymnasium env, a model the data cannot feed (a participation cap or impact
    on close-only data)."""
    from market_envs.costs import check_costs_for_data
    from trader.environments import resolve_env
    from trader.spec import resolve_market

    market_only(resolve_env(name).is_gym, costs=named, commission=cost)
    market = resolve_market(name, rules or None, cost=cost, costs=named, periods=periods, windows=windows)
    if named is not None:
        from market_envs.data import load

        check_costs_for_data(named.costs, load(market.dataset))
    return market


def pods_progress(console: Console) -> Progress:
    """The live bar of a tournament (`trader tournament`, `trader demo`): pods done, `progress_line`."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} pods"),
        TextColumn("{task.fields[line]}"),
        TimeElapsedColumn(),
        console=console,
    )


def _print_leaderboard(board) -> None:
    table = Table(title="Leaderboard (validation score)")
    for column in ("rank", "pod", "algo", "score", "generation", "parent", "steps", "seconds"):
        table.add_column(column, justify="left" if column in ("pod", "algo", "parent") else "right")
    for rank, entry in enumerate(board.top(10), start=1):
        table.add_row(
            str(rank),
            entry.pod_id,
            entry.algo,
            f"{entry.score:.4g}",
            str(entry.generation),
            entry.parent_id or "-",
            f"{entry.steps:,}",
            f"{entry.seconds:.1f}",
        )
    Console().print(table)
