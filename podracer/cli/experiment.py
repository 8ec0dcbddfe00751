"""`trader experiment podracer RUN_DIR`: the seed paper's experiment on a data set (`podracer.experiment`).

A thin layer over `podracer.experiment.run_experiment`: one line per stage, then Table 2
(ours and the paper's rows) and where Figure 7 went. The same command on the same
RUN_DIR resumes it; a signal (SIGINT, SIGTERM) or a place that cannot be written stops it
with one line naming the stage and that command (`stopped_line`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from podracer.cli.options import (
    BaselinesOption,
    CommissionOption,
    DatasetOption,
    DeviceOption,
    PresetOption,
    SeedOption,
    WorkersOption,
)
from podracer.cli.interrupts import same_command, signal_name
from podracer.cli.root import app
from trader.errors import UnwritableError, UserError
from trader.names import name_list

experiment_app = typer.Typer(help="Published experiments, run end to end on any data set.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")

STAND_IN = "synthetic-edge-minute-costs"
"""The data set without vendor keys: the calibrated minute market where costs decide (30
large caps, 2023, a planted edge of a session's horizon; datasets/synthetic-edge-minute-costs.toml)."""


@experiment_app.command("podracer")
def podracer(
    context: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory (created; the same one with the same flags resumes).")],
    dataset: DatasetOption = None,
    minutes: Annotated[
        float | None, typer.Option("--minutes", help="Wall-clock of each learner (equal wall-clock; default 10).")
    ] = None,
    pods: Annotated[
        int | None,
        typer.Option(
            "--pods",
            help="Equal work instead: the tournament's pods; every other learner gets pods x pod-steps transitions.",
        ),
    ] = None,
    pod_steps: Annotated[int, typer.Option("--pod-steps", help="Transitions per tournament pod.")] = 50_000,
    workers: WorkersOption = None,
    tickers: Annotated[
        int | None, typer.Option("--tickers", help="A synthetic data set's tickers (a laptop-sized run).")
    ] = None,
    years: Annotated[
        float | None, typer.Option("--years", help="Only the data set's last YEARS, split in the paper's proportions.")
    ] = None,
    commission: CommissionOption = None,
    preset: PresetOption = None,
    extra_costs: Annotated[
        str | None,
        typer.Option(
            "--extra-costs",
            metavar="MODELS",
            help="Named cost models to backtest under as well, comma-separated (extra Sharpe columns); the learners train at --commission.",
        ),
    ] = None,
    baselines: BaselinesOption = None,
    snapshot_every: Annotated[
        float | None,
        typer.Option("--snapshot-every", help="Seconds between Figure 7's snapshots (default: a tenth of the budget)."),
    ] = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
) -> None:
    """The seed paper's Table 2 and Figure 7: a PPO:SAC:TD3 tournament against vanilla PPO, the libraries and QQQ.

    By default on nasdaq100-minute-alpaca with Alpaca keys in the environment, else the synthetic
    stand-in (synthetic-edge-minute-costs), at the paper's 0.2% commission per side."""
    from market_envs.costs import cost_model
    from podracer.experiment import ExperimentConfig, run_experiment, table_markdown
    from trader.stopping import Interrupted, stop_on_signals

    models = name_list(extra_costs, "--extra-costs")
    for name in models:
        cost_model(name)  # an unknown model is one line before anything runs
    config = ExperimentConfig(
        run_dir=str(run_dir),
        dataset=dataset or default_dataset(),
        minutes=minutes if minutes is not None or pods is not None else 10.0,
        pods=pods,
        pod_steps=pod_steps,
        workers=2 if workers is None else workers,
        tickers=tickers,
        years=years,
        **({} if commission is None else {"cost": commission}),
        **({} if preset is None else {"preset": preset}),  # default: market-costs at the paper's 0.2%
        extra_costs=models,
        **({} if baselines is None else {"libraries": name_list(baselines, "--baselines")}),
        snapshot_every=snapshot_every,
        seed=seed or 0,
        device=device or "cpu",
    )
    console = Console(stderr=True)
    said: list[str] = []

    def say(line: str) -> None:
        console.print(line)
        said.append(line)

    try:
        with stop_on_signals():
            result = run_experiment(config, on_progress=say)
    except Interrupted as stop:
        console.print(
            stopped_line(context, f"interrupted ({signal_name(stop.signal)})", said),
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        raise typer.Exit(stop.exit_code) from None
    except UnwritableError as err:
        raise UserError(stopped_line(context, str(err), said)) from None
    print(table_markdown(result.table))
    print(f"wrote {run_dir / 'table2.md'}, experiment.json, report.md and figure7.png/.parquet into {run_dir}")


def stopped_line(context: typer.Context, what: str, said: list[str]) -> str:
    """One line for an experiment that ``what`` stopped (a signal, a full disk): the stage it was
    in (its last progress line), what it keeps, and the command that resumes it (the same one)."""
    where = f" during {said[-1].rstrip(' .')!r}" if said else ""
    return (
        f"{what}{where}; every finished stage is kept (a tournament resumes from its log, an unfinished "
        f"vanilla PPO run trains again from its start): resume with the same command: {same_command(context)}"
    )


def default_dataset() -> str:
    """The paper's data set where Alpaca's keys are set, else the synthetic stand-in."""
    import os

    keys = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")
    return "nasdaq100-minute-alpaca" if all(os.environ.get(k) for k in keys) else STAND_IN
