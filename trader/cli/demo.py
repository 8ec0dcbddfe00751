"""`trader demo`: the main job of `make demo` (see `trader.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trader.cli import app
from trader.cli.backtest import print_result_table


@app.command("demo")
def demo(
    recipe: Annotated[str, typer.Option("--dataset", help="Data set recipe (name or path).")] = "synthetic-minute",
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory for checkpoints and the report.")] = Path("runs/demo"),
    steps: Annotated[int, typer.Option("--steps", help="PPO training transitions; 0 backtests the baselines only.")] = 200_000,
    num_envs: Annotated[int, typer.Option("--num-envs", help="Batched sub-environments for training.")] = 256,
    seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
) -> None:
    """Build the default data set, train PPO briefly, backtest it beside the baselines."""
    from trader.demo import run_demo

    result = run_demo(recipe, run_dir, steps=steps, num_envs=num_envs, seed=seed, device=device)
    print()
    print_result_table(result.backtest, "table")
    print(f"\nrun directory: {run_dir} (report.md, report.json, backtests/, checkpoints/)")
