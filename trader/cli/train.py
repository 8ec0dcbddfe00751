"""`trader train`: train one agent on a gymnasium env or a market data set.

A thin layer over `trader.train.train`; prints the resolved config, shows a progress
bar (steps, samples/s, last validation score) and the run directory at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trader.agents import ALGOS, make_config
from trader.rundir import config_to_dict
from trader.cli import app
from trader.errors import UserError


@app.command("train")
def train_command(
    algo: str = typer.Option(..., "--algo", help=f"Algorithm: {', '.join(ALGOS)}."),
    env: str | None = typer.Option(None, "--env", help="Gymnasium env id, e.g. Pendulum-v1."),
    dataset: str | None = typer.Option(
        None, "--dataset", help="Data set recipe (name or path): trains on the market env."
    ),
    steps: int = typer.Option(100_000, "--steps", help="Environment transitions to collect."),
    run_dir: Path = typer.Option(Path("runs/train"), "--run-dir", help="Run directory."),
    seed: int = typer.Option(0, "--seed", help="Seed of the agent and the envs."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    num_envs: int = typer.Option(8, "--num-envs", help="Sub-environments of the training env."),
    eval_every: int = typer.Option(
        10_000, "--eval-every", help="Transitions between validations (0: only at the end)."
    ),
    eval_episodes: int = typer.Option(5, "--eval-episodes", help="Gymnasium validation episodes."),
    config: Path | None = typer.Option(
        None, "--config", help="TOML file of algo config keys (or a run's config.toml)."
    ),
    compile: bool = typer.Option(False, "--compile", help="Use torch.compile (opt-in)."),
    preset: str | None = typer.Option(
        None, "--preset", help="market: the env rules and algo config that learn the planted edges (trader.presets)."
    ),
    cost: float = typer.Option(0.0005, "--cost", help="With --preset market: costs per side (5e-4: 5 bp)."),
) -> None:
    """Train one PPO, SAC or TD3 agent and write config.toml, metrics.parquet, checkpoints/."""
    from trader.train import train

    if (env is None) == (dataset is None):
        raise UserError("give exactly one of --env NAME or --dataset RECIPE")
    overrides = _read_config(config) if config is not None else {}
    env_config = None
    if preset is not None:
        from trader.presets import apply_preset

        env_config, configs = apply_preset(preset, dataset, cost, [algo], steps=steps, num_envs=num_envs,
                                           algo_configs={algo: overrides})  # fmt: skip
        overrides = configs[algo]
    if algo == "ppo" and overrides.get("anneal_lr") and overrides.get("total_steps") is None:
        overrides["total_steps"] = steps  # the schedule runs over this run's --steps
    algo_config = make_config(algo, overrides)
    console = Console(stderr=True)
    console.print(f"[bold]{algo}[/bold] on {env or dataset}, seed {seed}, {steps} steps, {device}")
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
        f"done: {result.steps} steps in {result.wall_time:.1f}s, best validation score {best}; "
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


def _read_config(path: Path) -> dict[str, Any]:
    """Algo config keys from a TOML file; a run's config.toml gives its ``algo_config``."""
    from trader.rundir import read_toml

    values = read_toml(path)
    table = values.get("algo_config", values)
    if not isinstance(table, dict):
        raise UserError(f"config file {path}: 'algo_config' must be a table")
    return table
