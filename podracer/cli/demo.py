"""`trader demo`: the main job of `make demo` (see `podracer.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from podracer.cli.root import app
from podracer.cli.backtest import print_result_table
from podracer.cli.options import (
    CommissionOption,
    DatasetOption,
    DeviceOption,
    GroupSizeOption,
    SeedOption,
    WorkersOption,
    cost_rate,
)
from trader.errors import UserError
from trader.names import DEMO_COST, DEMO_POD_STEPS, DEMO_RECIPE


@app.command("demo")
def demo(
    run_dir: Annotated[
        Path | None,
        typer.Argument(
            help="Run directory, new or empty (default: runs/demo, else runs/demo-2, ...).", show_default=False
        ),
    ] = None,
    recipe: DatasetOption = None,
    minutes: Annotated[
        float,
        typer.Option("--minutes", help="The tournament's wall-clock budget; SB3 PPO gets what the tournament took."),
    ] = 3.0,
    workers: WorkersOption = None,
    pods: Annotated[int | None, typer.Option("--pods", help="Also stop the tournament after this many pods.")] = None,
    pod_steps: Annotated[int, typer.Option("--pod-steps", help="Transitions per tournament pod.")] = DEMO_POD_STEPS,
    group_size: GroupSizeOption = None,
    commission: CommissionOption = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
    tear_sheet: Annotated[
        bool, typer.Option("--tear-sheet/--no-tear-sheet", help="Draw a tear sheet per agent (pyfolio; seconds each).")
    ] = True,
) -> None:
    """Build a data set, run a small tournament, train an SB3 baseline, backtest them all.

    By default on synthetic-edge-daily (DEMO_RECIPE), under the market preset's rules at 5 bp per side."""
    from rich.console import Console

    from market_envs.data.chunks import DownloadBar
    from podracer.cli.tournament import pods_progress, progress_line
    from podracer.demo import run_demo

    cost = cost_rate(commission)
    if not minutes > 0:
        raise UserError(f"--minutes must be > 0, got {minutes}")
    workers = 2 if workers is None else workers
    group_size = 1 if group_size is None else group_size
    if pod_steps < 1 or workers < 1 or group_size < 1 or (pods is not None and pods < 1):
        raise UserError(
            f"--pod-steps, --workers, --group-size and --pods must be >= 1, got {pod_steps}, {workers}, "
            f"{group_size} and {pods}"
        )
    from trader import rundir

    run_dir = run_dir if run_dir is not None else free_run_dir(Path("runs/demo"))
    rundir.check_new_run(run_dir, remedy="give another run directory (the demo never overwrites a run)")
    console = Console(stderr=True)
    bar = pods_progress(console)
    task = bar.add_task("pods", total=None, line="")

    def show(state) -> None:
        if not bar.live.is_started:  # drawn from the tournament's first news: a data set that
            bar.start()  # cannot be built (a missing key) stops the demo with its one line alone
        bar.update(task, completed=state.done + state.failed, line=progress_line(state))

    try:
        result = run_demo(
            recipe or DEMO_RECIPE,
            run_dir,
            tournament_seconds=60 * minutes,
            pods=pods,
            workers=workers,
            pod_steps=pod_steps,
            group_size=group_size,
            cost=DEMO_COST if cost is None else cost,
            seed=seed or 0,
            device=device or "cpu",
            tear_sheet=tear_sheet,
            log=console.print,
            on_progress=show,
            data_bar=DownloadBar(console),
        )
    finally:
        if bar.live.is_started:
            bar.stop()
    print()
    print_result_table(result.backtest, "table")
    runs = run_dir.parent
    print(f"\nrun directory: {run_dir} (report.md, leaderboard.json, pods/, baselines/)")
    print(f"open the dashboard on it: make dashboard RUNS={runs}   (or: trader dashboard {runs})")


def free_run_dir(first: Path) -> Path:
    """The demo's default run directory: `first` when it is missing or empty, else the first
    free ``first-2``, ``first-3``, ...: a second `make demo` writes a new run beside the first."""
    from trader import rundir

    candidate, number = first, 1
    while rundir.run_entries(candidate) or candidate.is_file():
        number += 1
        candidate = first.with_name(f"{first.name}-{number}")
    return candidate
