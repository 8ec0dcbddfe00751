"""`trader train`: train one agent on a gymnasium env or a market data set.

A thin layer over `trader.train.train`; prints the resolved config, shows a progress
bar (steps, samples/s, last validation score) and the run directory at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trader.cli import app
from trader.cli.options import (
    CostSetOption,
    CostsOption,
    NoTradeBandOption,
    TradeRateOption,
    WeightsMapOption,
    resolve_costs,
    with_aim_rules,
)
from trader.errors import UserError
from trader.names import ALGOS


@app.command("train")
def train_command(
    algo: Annotated[str, typer.Option("--algo", help=f"Algorithm: {', '.join(ALGOS)}.")],
    env: Annotated[str | None, typer.Option("--env", help="Gymnasium env id, e.g. Pendulum-v1.")] = None,
    dataset: Annotated[str | None, typer.Option("--dataset", help="Data set recipe (name or path): trains on the market env.")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Environment transitions to collect.")] = 100_000,
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory.")] = Path("runs/train"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of the agent and the envs.")] = 0,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")] = "cpu",
    num_envs: Annotated[int, typer.Option("--num-envs", help="Sub-environments of the training env.")] = 8,
    eval_every: Annotated[int, typer.Option("--eval-every", help="Transitions between validations (0: only at the end).")] = 10_000,
    eval_episodes: Annotated[int, typer.Option("--eval-episodes", help="Gymnasium validation episodes.")] = 5,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file of algo config keys (or a run's config.toml).")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="Use torch.compile (opt-in).")] = False,
    preset: Annotated[str | None, typer.Option("--preset", help="market: the env rules and algo config that learn the planted edges; market-costs: the same with the action that can hold, for costly markets (trader.presets).")] = None,
    cost: Annotated[float, typer.Option("--cost", help="With --preset market: costs per side (5e-4: 5 bp).")] = 0.0005,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    trade_rate: TradeRateOption = None,
    no_trade_band: NoTradeBandOption = None,
    weights_map: WeightsMapOption = None,
) -> None:
    """Train one PPO, SAC or TD3 agent and write config.toml, metrics.parquet, checkpoints/."""
    from trader.agents import make_config
    from trader.rundir import config_to_dict
    from trader.train import train

    if (env is None) == (dataset is None):
        raise UserError("give exactly one of --env NAME or --dataset RECIPE")
    overrides = read_algo_config(config) if config is not None else {}
    env_config = None
    if preset is not None:
        from trader.presets import apply_preset

        env_config, configs = apply_preset(preset, dataset, cost, [algo], steps=steps, num_envs=num_envs,
                                           algo_configs={algo: overrides})  # fmt: skip
        overrides = configs[algo]
    if dataset is None and (trade_rate, no_trade_band, weights_map) != (None, None, None):
        raise UserError("--trade-rate, --no-trade-band and --weights-map apply to market data sets (--dataset)")
    env_config = with_aim_rules(env_config, weights_map, trade_rate, no_trade_band)
    named = resolve_costs(costs, cost_set)
    if named is not None:
        if dataset is None:
            raise UserError("--costs applies to market data sets (--dataset), not to gymnasium envs")
        env_config = with_cost_model(env_config, named)
    if algo == "ppo" and overrides.get("anneal_lr") and overrides.get("total_steps") is None:
        overrides["total_steps"] = steps  # the schedule runs over this run's --steps
    algo_config = make_config(algo, overrides)
    console = Console(stderr=True)
    console.print(f"[bold]{algo}[/bold] on {env or dataset}, seed {seed}, {steps:,} steps, {device}")
    console.print(config_to_dict(algo_config))
    with _progress(console) as progress:
        task = progress.add_task("train", total=steps, rate="-", score="-")

        def report(row: dict[str, float]) -> None:
            score = row.get("val_score")
            fields: dict[str, Any] = {"rate": f"{row['samples_per_s']:,.0f}"}
            if score is not None:
                fields["score"] = f"{score:.3g}"
            progress.update(task, completed=min(int(row["step"]), steps), **fields)

        result = train(
            algo, env if env is not None else dataset, algo_config, run_dir, steps=steps,
            seed=seed, device=device, num_envs=num_envs, eval_every=eval_every,
            eval_episodes=eval_episodes, env_config=env_config, compile=compile, on_iteration=report,
        )  # fmt: skip
    best = "-" if result.best_score is None else f"{result.best_score:.4g}"
    console.print(
        f"done: {result.steps:,} steps in {result.wall_time:,.1f} s, best validation score {best}; "
        f"run directory {result.run_dir}"
    )


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


def read_algo_config(path: Path) -> dict[str, Any]:
    """Algo config keys from a TOML file; a run's config.toml gives its ``algo_config``."""
    from trader.rundir import read_toml

    values = read_toml(path)
    table = values.get("algo_config", values)
    if not isinstance(table, dict):
        raise UserError(f"config file {path}: 'algo_config' must be a table")
    return table


def with_cost_model(env_config: dict[str, Any] | None, named: Any) -> dict[str, Any]:
    """Env rules (a dict of `EnvConfig` keys, or None for the defaults) under the cost model `named`:
    its commission rates and `CostModel` replace the rules' own (``--costs`` over ``--preset``'s ``--cost``)."""
    terms = named.as_dict()
    return {**(env_config or {}), "buy_cost": named.buy_cost, "sell_cost": named.sell_cost, "costs": terms["costs"]}
