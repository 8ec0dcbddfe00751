"""`trader train`: train one agent on a gymnasium env or a market data set.

A thin layer over `trader.training.train`: every flag is checked, and the run directory
claimed, before anything is printed; once `train` has set the run up it prints the
resolved config, then a progress bar (steps, samples/s, last validation score) and the
run directory at the end. ``--config RUN/config.toml`` trains a run again from its
folder (`trader.resuming.rerun_arguments`), the flags given on top.

``trader train RUN --resume`` continues a run that a signal (or a full disk) stopped, from
its ``resume/last`` snapshot and its config.toml (`trader.train`'s ``resume``); a flag that
contradicts that config is refused. A first SIGINT or SIGTERM stops at the end of the
iteration in progress and prints one line: the step and the command that continues.
"""

from __future__ import annotations

import math
import shlex
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from podracer.cli.root import app
from podracer.cli.options import (
    PresetOption,
    CommissionOption,
    CompileOption,
    CostSetOption,
    CostsOption,
    DatasetOption,
    DeviceOption,
    InitialCashOption,
    NoTradeBandOption,
    NumEnvsOption,
    SeedOption,
    TradeRateOption,
    WeightsMapOption,
    cost_flags,
    market_only,
    with_rule_flags,
)
from trader.environments import resolve_env
from trader.errors import UnwritableError, UserError
from trader.names import ALGOS, PRESET_COST


@app.command("train")
def train_command(
    run_dir: Annotated[Path, typer.Argument(help="Run directory, new or empty (see --overwrite).")],
    algo: Annotated[
        str | None, typer.Option("--algo", help=f"Algorithm: {', '.join(ALGOS)} (default: a run config's).")
    ] = None,
    env: Annotated[str | None, typer.Option("--env", help="Gymnasium env id, e.g. Pendulum-v1.")] = None,
    dataset: DatasetOption = None,
    steps: Annotated[
        int | None, typer.Option("--steps", help="Environment transitions to collect (default 100,000).")
    ] = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
    num_envs: NumEnvsOption = None,
    eval_every: Annotated[
        int | None,
        typer.Option("--eval-every", help="Transitions between validations (0: only at the end; default 10,000)."),
    ] = None,
    eval_episodes: Annotated[
        int | None,
        typer.Option(
            "--eval-episodes",
            help="Gymnasium envs: validation episodes (default 5; a market validates on its whole validation period).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML file of algo config keys, or a run's config.toml: then the run's every input (data set, env rules, algo config, seed, steps, ...) and the flags given on top; it trains the run again, bit for bit on one worker.",
        ),
    ] = None,
    compile: CompileOption = None,
    preset: PresetOption = None,
    commission: CommissionOption = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace the run already in RUN_DIR whole (every file a run wrote there is removed first).",
        ),
    ] = False,
    trade_rate: TradeRateOption = None,
    no_trade_band: NoTradeBandOption = None,
    weights_map: WeightsMapOption = None,
    initial_cash: InitialCashOption = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the run in RUN_DIR that a signal or a full disk stopped, from its last snapshot "
            "(weights, optimiser, normaliser, random streams, best snapshot, records) under its config.toml; "
            "the training env restarts its episodes, and a SAC/TD3 replay buffer comes back only where a signal "
            "stopped the run (after a kill it starts empty, refilled by the restored policy). Flags that contradict "
            "the run's config are refused.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Also print the resolved config at start (config.toml holds it either way)."),
    ] = False,
    population: Annotated[
        int | None,
        typer.Option(
            "--population",
            help="Train P seeds (--seed, --seed + 1, ...) of one PPO, SAC or TD3 config side by side as one program (a pod "
            "group) on a market or a gymnasium id, into RUN_DIR/seed-<seed>/ each (a run directory of its own), and report each "
            "seed's validation score and their interquartile mean.",
        ),
    ] = None,
) -> None:
    """Train one PPO, SAC or TD3 agent and write config.toml, metrics.parquet, checkpoints/."""
    from trader import rundir
    from trader.resuming import ResumePoint, rerun_arguments
    from trader.stopping import Interrupted, stop_on_signals
    from trader.training import train

    if population is not None and population < 1:
        raise UserError(f"--population must be >= 1, got {population}")
    if population is not None and (resume or compile in ("all", True)):
        raise UserError(f"--population: {'--resume' if resume else '--compile all'} does not apply to a pod group yet")
    if resume:
        refused = [
            option
            for option, given in (
                ("--config", config is not None),
                ("--overwrite", overwrite),
                ("--commission", commission is not None),
                ("--costs", costs is not None),
                ("--cost-set", bool(cost_set)),
                ("--trade-rate", trade_rate is not None),
                ("--no-trade-band", no_trade_band is not None),
                ("--weights-map", weights_map is not None),
                ("--initial-cash", initial_cash is not None),
            )
            if given
        ]
        if refused:
            raise UserError(f"--resume: {refused[0]} cannot change a resumed run (its config.toml holds it)")
        ResumePoint.read(run_dir)  # one line now when there is nothing to resume
        config = run_dir / rundir.CONFIG
        _check_resume_flags(
            read_run_config(config),
            {"algo": algo, "steps": steps, "seed": seed, "device": device, "num_envs": num_envs}
            | {"eval_every": eval_every, "eval_episodes": eval_episodes, "compile": compile, "preset": preset},
            env or dataset,
        )
        algo = env = dataset = preset = None  # the run's own, read from its config.toml below
    cost, named = cost_flags(commission, costs, cost_set)
    for option, value, low in (
        ("--steps", steps, 1),
        ("--num-envs", num_envs, 1),
        ("--eval-every", eval_every, 0),
        ("--eval-episodes", eval_episodes, 1),
    ):
        if value is not None and value < low:
            raise UserError(f"{option} must be >= {low}, got {value}")
    if env is not None and dataset is not None:
        raise UserError("give exactly one of --env NAME or --dataset RECIPE")
    run = read_run_config(config) if config is not None else {}
    arguments = rerun_arguments(run) if run else {}
    if config is not None and not run:
        arguments["config"] = read_algo_config(config)
    if algo is not None and arguments.get("algo") not in (None, algo):
        raise UserError(f"--algo {algo}: {config} is a {arguments['algo']} run, whose algo config does not fit {algo}")
    if env is not None or dataset is not None:  # a flag's env replaces the run's: its periods go, its rules stay
        for key in ("periods", "dataset_periods", "eval_episodes", *(("env_config",) if env is not None else ())):
            arguments.pop(key, None)
        arguments["env"] = env or dataset
    flags = {
        "algo": algo,
        "steps": steps,
        "seed": seed,
        "device": device,
        "num_envs": num_envs,
        "eval_every": eval_every,
        "eval_episodes": eval_episodes,
        "compile": compile,
        "preset": preset,
    }
    arguments.update({key: value for key, value in flags.items() if value is not None})
    if arguments.get("algo") is None:
        raise UserError("give --algo ALGO (or --config RUN/config.toml, which names it)")
    if arguments.get("env") is None:
        raise UserError("give exactly one of --env NAME or --dataset RECIPE (or --config RUN/config.toml)")
    if preset is not None:
        from podracer.presets import PRESETS

        if preset not in PRESETS:
            raise UserError(f"--preset: unknown preset {preset!r}; choose {', '.join(PRESETS)}")
    market = not resolve_env(arguments["env"]).is_gym
    market_only(
        not market,
        commission=cost,
        costs=named,
        preset=preset,
        trade_rate=trade_rate,
        no_trade_band=no_trade_band,
        weights_map=weights_map,
        initial_cash=initial_cash,
    )
    if market and eval_episodes is not None:
        raise UserError(
            "--eval-episodes applies to gymnasium envs; a market validates once on its whole validation period"
        )
    if not resume:
        rundir.check_new_run(
            run_dir,
            remedy="pass --resume to continue it, --overwrite to replace it, or another run directory",
            overwrite=overwrite,
        )
    _apply_rules(arguments, preset, cost)
    arguments["env_config"] = with_rule_flags(
        arguments.get("env_config"),
        trade_rate=trade_rate,
        no_trade_band=no_trade_band,
        weights_map=weights_map,
        initial_cash=initial_cash,
    )
    if market:
        arguments["env"] = _market_spec(arguments, cost, named)
    if population is not None:
        _train_population(run_dir, population, arguments, overwrite)
        return
    console = Console(stderr=True)
    progress = _progress(console)
    total = arguments.get("steps", 100_000)
    task = progress.add_task("train", total=total, rate="-", score="-", start=False)

    def start(resolved: dict[str, Any]) -> None:
        where = resolved["env"].get("dataset") or resolved["env"].get("id")
        console.print(
            f"[bold]{resolved['algo']}[/bold] on {where}, seed {resolved['seed']}, "
            f"{resolved['steps']:,} steps, {resolved['device']}; run directory {run_dir} "
            f"(its {rundir.CONFIG} holds the resolved config{'' if verbose else ': --verbose prints it'})",
            markup=True,
            highlight=False,
        )
        if verbose:
            console.print({"algo_config": resolved["algo_config"], "env": resolved["env"]})
        progress.start()
        progress.start_task(task)

    report = _reporter(progress, task, total)

    algo_name = arguments.pop("algo")
    env_name = arguments.pop("env")
    try:
        with stop_on_signals():
            result = train(
                algo_name,
                env_name,
                run_dir=run_dir,
                overwrite=overwrite,
                resume=resume,
                on_start=start,
                on_iteration=report,
                **arguments,
            )
    except Interrupted as stop:
        if progress.live.is_started:
            progress.stop()
        console.print(interrupted_line(run_dir, stop, total), soft_wrap=True, highlight=False, markup=False)
        raise typer.Exit(stop.exit_code) from None
    except UnwritableError as err:
        saved = _saved_step(run_dir)
        if saved is None:
            raise
        raise UserError(
            f"{err}; the run keeps what it saved up to step {saved:,}: make room, then: {_resume_command(run_dir)}"
        ) from None
    finally:
        if progress.live.is_started:
            progress.stop()
    best = "-" if result.best_score is None else f"{result.best_score:.4g}"
    console.print(
        f"done: {result.steps:,} steps in {result.wall_time:,.1f} s, best validation score {best}; "
        f"run directory {result.run_dir}"
    )


def _train_population(run_dir: Path, population: int, arguments: dict[str, Any], overwrite: bool) -> None:
    """``--population P``: P seeds of one config as one pod group (`trader.group_training.train_group`),
    each into ``RUN_DIR/seed-<seed>/``; prints each seed's best validation score and their IQM with its
    95% bootstrap interval (`trader.aggregate`), and writes them to ``RUN_DIR/population.json``."""
    from trader import aggregate, rundir
    from trader.group_training import GROUP_ALGOS, train_group, trains_in_groups
    from trader.stopping import Interrupted, stop_on_signals

    algo = arguments.pop("algo")
    if algo not in GROUP_ALGOS:
        raise UserError(f"--population: {algo} pods do not train in groups yet (only {', '.join(GROUP_ALGOS)})")
    if not trains_in_groups(arguments["env"]):
        raise UserError(f"--population: pod groups train on a market or a gymnasium id, not on {arguments['env']!r}")
    first = int(arguments.get("seed", 0))
    seeds = [first + k for k in range(population)]
    roots = [run_dir / f"seed-{seed}" for seed in seeds]
    steps = int(arguments.get("steps", 100_000))
    console = Console(stderr=True, soft_wrap=True)
    console.print(
        f"[bold]{algo}[/bold], {population} seeds ({seeds[0]} to {seeds[-1]}) as one pod group, {steps:,} steps each; "
        f"run directories {run_dir}/seed-*",
        highlight=False,
    )
    progress = _progress(console)
    task = progress.add_task("train", total=steps, rate="-", score="-")

    report = _reporter(progress, task, steps, pods=population, seed=seeds[0])

    rundir.make_folder(run_dir)
    try:
        with stop_on_signals(), progress:
            results = train_group(
                algo,
                arguments.pop("env"),
                [arguments.get("config") or {}] * population,
                roots,
                seeds=seeds,
                steps=steps,
                device=arguments.get("device", "cpu"),
                num_envs=int(arguments.get("num_envs", 8)),
                eval_every=int(arguments.get("eval_every", 10_000)),
                eval_episodes=int(arguments.get("eval_episodes", 5)),
                preset=arguments.get("preset"),
                on_iteration=report,
                overwrite=overwrite,
                compile=arguments.get("compile", False),
            )
    except Interrupted as stop:
        console.print(
            f"interrupted ({signal.Signals(stop.signal).name}): each seed keeps its records and best snapshot so far "
            f"in {run_dir}/seed-*; a pod group does not resume yet",
            highlight=False,
        )
        raise typer.Exit(stop.exit_code) from None
    scores = [result.best_score for result in results]
    finite = [score for score in scores if score is not None and math.isfinite(score)]
    summary: dict[str, Any] = {"algo": algo, "group_size": population, "steps": steps}
    summary["pods"] = [
        {"seed": seed, "run_dir": str(root), "best_score": score} for seed, root, score in zip(seeds, roots, scores)
    ]
    for seed, score in zip(seeds, scores, strict=True):
        console.print(f"seed {seed}: best validation score {'-' if score is None else f'{score:.4g}'}", highlight=False)
    if finite:
        column = [[score] for score in finite]
        estimate = aggregate.stratified_interval(aggregate.iqm, column)
        summary["iqm"] = {"value": estimate.value, "low": estimate.low, "high": estimate.high}
        console.print(
            f"IQM of {len(finite)} seeds {estimate.value:.4g} (95% bootstrap interval {estimate.low:.4g} to "
            f"{estimate.high:.4g}); run directories {run_dir}/seed-*",
            highlight=False,
        )
    rundir.write_json(run_dir / "population.json", summary)


def _check_resume_flags(recorded: dict[str, Any], flags: dict[str, Any], env: str | None) -> None:
    """``--resume`` takes the run's config.toml whole: a flag given beside it must say what the
    config says (one `UserError` naming the first that contradicts it)."""
    from trader.training_envs import compile_choice

    if not recorded:
        raise UserError("--resume: the run's config.toml is not one trader train wrote")
    if flags["compile"] is not None:
        flags["compile"] = compile_choice(flags["compile"])
    for key, value in flags.items():
        if value is not None and recorded.get(key) != value:
            option = "--" + key.replace("_", "-")
            raise UserError(f"--resume: {option} {value} contradicts the run's config.toml ({recorded.get(key)})")
    table = recorded.get("env") or {}
    if env is not None:
        saved = table.get("dataset") or table.get("id")
        if resolve_env(env).value != resolve_env(str(saved)).value:
            raise UserError(f"--resume: --env/--dataset {env} contradicts the run's config.toml ({saved})")


def _resume_command(run_dir: Path) -> str:
    return f"trader train {shlex.quote(str(run_dir))} --resume"


def _saved_step(run_dir: Path) -> int | None:
    """The step of the run's resume point, None when it has none (or it cannot be read)."""
    from trader.resuming import ResumePoint

    try:
        return ResumePoint.read(run_dir).step
    except UserError:
        return None


def interrupted_line(run_dir: Path, stop: Any, total: int) -> str:
    """One line for a run a signal stopped (`trader.stopping.Interrupted`): where, what it kept,
    and the command that continues it."""
    from trader import rundir

    name = signal.Signals(stop.signal).name
    saved = stop.step if stop.step is not None else _saved_step(run_dir)
    if saved is None:
        return f"interrupted ({name}) before a first evaluation: nothing to resume; start it again with --overwrite"
    best = rundir.best_step(run_dir)
    kept = "its records" + ("" if best is None else f" and its best snapshot (step {best:,})")
    where = f"at step {saved:,}" if stop.step is not None else f"at once; its last saved point is step {saved:,}"
    return f"interrupted ({name}) {where} of {total:,}; the run keeps {kept}: continue with: {_resume_command(run_dir)}"


def _market_spec(arguments: dict[str, Any], cost: float | None, named: Any) -> Any:
    """The run's `trader.spec.MarketSpec`, built once here from ``arguments``' data set, env
    rules and recorded periods (which it takes out of them), with ``--commission`` / ``--costs``
    (which always act) set on the rules as objects."""
    from trader.spec import market_spec

    return market_spec(
        arguments.pop("env"),
        arguments.pop("env_config", None),
        cost=cost,
        costs=named,
        periods=arguments.pop("periods", None),
    )


def _apply_rules(arguments: dict[str, Any], preset: str | None, cost: float | None) -> None:
    """The env rules and algo config of ``arguments`` under ``--preset`` (its defaults under the
    keys already there, its commission rate ``--commission`` or 5 bp); PPO's annealed learning
    rate runs over this run's steps."""
    from podracer.presets import apply_preset

    algo = arguments["algo"]
    overrides = dict(arguments.get("config") or {})
    if preset is not None:
        rules, configs = apply_preset(
            preset,
            arguments["env"],
            PRESET_COST if cost is None else cost,
            [algo],
            steps=arguments.get("steps", 100_000),
            num_envs=arguments.get("num_envs", 8),
            env_config=arguments.get("env_config"),
            algo_configs={algo: overrides},
        )
        arguments["env_config"], overrides = rules, configs[algo]
    if algo == "ppo" and overrides.get("anneal_lr") and overrides.get("total_steps") is None:
        overrides["total_steps"] = arguments.get("steps", 100_000)  # the schedule runs over this run's --steps
    arguments["config"] = overrides


def _reporter(progress: Progress, task: Any, total: int, pods: int = 1, seed: int | None = None) -> Any:
    """The progress callback of a run's metrics rows: steps, samples/s (of ``pods`` pods: a group's
    row is one pod's) and the last validation score (of pod ``seed``, a group's first)."""

    def report(row: dict[str, float]) -> None:
        score = row.get("val_score")
        fields: dict[str, Any] = {"rate": f"{row['samples_per_s'] * pods:,.0f}"}
        if score is not None:
            fields["score"] = f"{score:.3g}" + ("" if seed is None else f" (seed {seed})")
        progress.update(task, completed=min(int(row["step"]), total), **fields)

    return report


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} samples/s"),
        TextColumn("val {task.fields[score]}"),
        TimeElapsedColumn(),
        console=console,
    )


def read_run_config(path: Path) -> dict[str, Any]:
    """A run's config.toml (as `trader.train` writes it: ``algo``, ``[env]`` and
    ``[algo_config]``), or {} when ``path`` is a plain file of algo config keys."""
    from trader.rundir import read_toml

    values = read_toml(path)
    return values if isinstance(values.get("env"), dict) and "algo" in values else {}


def read_algo_config(path: Path) -> dict[str, Any]:
    """Algo config keys from a TOML file; a run's config.toml gives its ``algo_config``."""
    from trader.rundir import read_toml

    values = read_toml(path)
    table = values.get("algo_config", values)
    if not isinstance(table, dict):
        raise UserError(f"config file {path}: 'algo_config' must be a table")
    return table
