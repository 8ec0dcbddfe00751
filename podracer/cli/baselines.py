"""`trader baselines RUN_DIR`: SB3 and FinRL's ensemble on the run's data, rules and periods.

A thin layer over `trader.libraries.baselines`: prints one line per validation and
per baseline on stderr while it trains, then the test-period table with every
strategy of the run directory (its own, the baselines', the built-in ones).
Exit code 2 on bad input (before any training); 1 when a baseline failed (the
others still ran and the report holds them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from podracer.cli.root import app
from podracer.cli.options import (
    BaselineAlgosOption,
    BaselinesOption,
    CostSetOption,
    CostsOption,
    DatasetOption,
    DeviceOption,
    NumEnvsOption,
    resolve_costs,
)
from trader.names import name_list
from trader.errors import UserError


APPLIES = {
    "--baseline-algos": ("sb3", "sb3-dummy", "rllib"),
    "--hyperparameters": ("sb3", "sb3-dummy"),
    "--num-envs": ("sb3", "sb3-dummy", "finrl"),
    "--eval-every": ("sb3", "sb3-dummy", "rllib"),
    "--windows": ("finrl",),
}
"""The libraries each option acts on (`trader.libraries.run`: FinRL's ensemble has its own
learners and hyperparameters and validates each once; RLlib steps one env of its own)."""


def check_applies(libraries: list[str], **given: object) -> None:
    """Refuse an option given for libraries none of which it acts on (one line, exit code 2)."""
    for key, value in given.items():
        option = "--" + key.replace("_", "-")
        if value is not None and not set(APPLIES[option]) & set(libraries):
            raise UserError(
                f"{option} applies to {', '.join(APPLIES[option])}, not to --baselines {','.join(libraries)}"
            )


@app.command("baselines")
def baselines_command(
    run_dir: Annotated[
        Path, typer.Argument(help="Run directory (trader train / trader tournament), or a new folder with --dataset.")
    ],
    baseline_libraries: BaselinesOption = None,
    baseline_algos: BaselineAlgosOption = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", help="Env steps per learner (equal work). Default 100,000 without --time-budget."),
    ] = None,
    time_budget: Annotated[
        str | None, typer.Option("--time-budget", help="Wall-clock per learner (equal wall-clock), e.g. 90s, 10m, 1h.")
    ] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds 0..K-1 of each baseline.")] = 1,
    dataset: DatasetOption = None,
    hyperparameters: Annotated[
        str | None,
        typer.Option(
            "--hyperparameters",
            metavar="PRESET",
            help="sb3, sb3-dummy: SB3's hyperparameters: sb3 (SB3's defaults; the default) or finrl (FinRL's published ones).",
        ),
    ] = None,
    num_envs: NumEnvsOption = None,
    eval_every: Annotated[
        int | None,
        typer.Option(
            "--eval-every",
            help="sb3, sb3-dummy, rllib: env steps between validations (0: at the end only; default 10,000).",
        ),
    ] = None,
    windows: Annotated[
        int | None,
        typer.Option("--windows", help="finrl: trading windows of FinRL's ensemble over the test period (default 4)."),
    ] = None,
    device: DeviceOption = None,
    backtest: Annotated[
        bool, typer.Option("--backtest/--no-backtest", help="Backtest the run directory on the test period afterwards.")
    ] = True,
    tear_sheet: Annotated[
        bool | None,
        typer.Option(
            "--tear-sheet/--no-tear-sheet",
            help="Draw a pyfolio tear sheet for each agent in the backtest (default: yes).",
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", help="The backtest's table: table (the default) or json.")
    ] = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Train again a baseline that RUN_DIR/baselines/ holds finished (replaced when the new one finishes).",
        ),
    ] = False,
) -> None:
    """Train baseline libraries on a run's data and rules; backtest them beside the run."""
    from trader.libraries import baselines
    from trader.durations import parse_duration

    if steps is not None and time_budget is not None:
        raise UserError("give --steps or --time-budget, not both")
    if output not in (None, "table", "json"):
        raise UserError(f"--output must be table or json, got {output!r}")
    if (num_envs is not None and num_envs < 1) or (eval_every is not None and eval_every < 0):
        raise UserError("--num-envs must be at least 1 and --eval-every at least 0")
    chosen = list(name_list(baseline_libraries or "sb3", "--baselines", required=True, lower=True))
    check_applies(
        chosen,
        baseline_algos=baseline_algos,
        hyperparameters=hyperparameters,
        num_envs=num_envs,
        eval_every=eval_every,
        windows=windows,
    )
    if not backtest and (tear_sheet is not None or output is not None):
        raise UserError("--tear-sheet and --output apply to the backtest; drop them or --no-backtest")
    output = output or "table"
    seconds = parse_duration(time_budget, "--time-budget") if time_budget is not None else None
    named = resolve_costs(costs, cost_set)
    result = baselines(
        run_dir,
        chosen,
        list(name_list(baseline_algos or "ppo", "--baseline-algos", required=True, lower=True)),
        steps=steps,
        time_budget=seconds,
        seeds=seeds,
        dataset=dataset,
        preset=hyperparameters or "sb3",
        num_envs=1 if num_envs is None else num_envs,
        eval_every=10_000 if eval_every is None else eval_every,
        windows=4 if windows is None else windows,
        device=device or "cpu",
        backtest=backtest,
        tear_sheet=tear_sheet is not False,
        costs=named,
        overwrite=overwrite,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if result.report is not None:
        from podracer.cli.backtest import print_result_table

        print_result_table(result.report, output)
        if output == "table":
            report = Path(result.report.files["report.md"])
            print(f"\nBudget: {result.budget.terms}. Wrote {run_dir / 'baselines'}/ and {report}")
    failed = [o for o in result.outcomes if o.status == "failed"]
    for outcome in failed:
        print(
            f"failed: {outcome.name}: {outcome.error} (details in {outcome.folder / 'baseline.json'})", file=sys.stderr
        )
    if failed:
        raise typer.Exit(1)
