"""`trader train`: train one agent on a gymnasium env or a market data set.

A thin layer over `trader.training.train`: every flag is checked, and the run directory
claimed, before anything is printed; once `train` has set the run up it prints the
resolved config, then a progress bar (steps, samples/s, last validation score) and the
run directory at the end. ``--config RUN/config.toml`` trains a run again from its
folder (`trader.training.rerun_arguments`), the flags given on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trader.app.cli.root import app
from trader.app.cli.options import (
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
    with_aim_rules,
    with_initial_cash,
)
from trader.environments import resolve_env
from trader.errors import UserError
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
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Also print the resolved config at start (config.toml holds it either way)."),
    ] = False,
) -> None:
    """Train one PPO, SAC or TD3 agent and write config.toml, metrics.parquet, checkpoints/."""
    from trader import rundir
    from trader.training import rerun_arguments, train

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
        from trader.presets import PRESETS

        if preset not in PRESETS:
            raise UserError(f"--preset: unknown preset {preset!r}; choose {', '.join(PRESETS)}")
    market = not resolve_env(arguments["env"]).is_gym
    if not market:
        for option, given in (
            ("--commission", cost is not None),
            ("--costs", named is not None),
            ("--preset", preset is not None),
            ("--trade-rate", trade_rate is not None),
            ("--no-trade-band", no_trade_band is not None),
            ("--weights-map", weights_map is not None),
            ("--initial-cash", initial_cash is not None),
        ):
            if given:
                raise UserError(f"{option} applies to market data sets (--dataset), not to gymnasium envs")
    elif eval_episodes is not None:
        raise UserError(
            "--eval-episodes applies to gymnasium envs; a market validates once on its whole validation period"
        )
    rundir.check_new_run(
        run_dir, remedy="pass --overwrite to replace it, or another run directory", overwrite=overwrite
    )
    _apply_rules(arguments, preset, cost)
    arguments["env_config"] = with_aim_rules(arguments.get("env_config"), weights_map, trade_rate, no_trade_band)
    arguments["env_config"] = with_initial_cash(arguments.get("env_config"), initial_cash)
    if market:
        arguments["env"] = _market_spec(arguments, cost, named)
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

    def report(row: dict[str, float]) -> None:
        score = row.get("val_score")
        fields: dict[str, Any] = {"rate": f"{row['samples_per_s']:,.0f}"}
        if score is not None:
            fields["score"] = f"{score:.3g}"
        progress.update(task, completed=min(int(row["step"]), total), **fields)

    algo_name = arguments.pop("algo")
    env_name = arguments.pop("env")
    try:
        result = train(
            algo_name, env_name, run_dir=run_dir, overwrite=overwrite, on_start=start, on_iteration=report, **arguments
        )
    finally:
        if progress.live.is_started:
            progress.stop()
    best = "-" if result.best_score is None else f"{result.best_score:.4g}"
    console.print(
        f"done: {result.steps:,} steps in {result.wall_time:,.1f} s, best validation score {best}; "
        f"run directory {result.run_dir}"
    )


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
    from trader.presets import apply_preset

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
