"""`trader act RUN_DIR`: the run's decision at the latest bar (or ``--at``) from a book.

A thin layer over `trader.decision.act` (`trader.act`): the selected strategy's target weights and the
orders that take ``--book`` (default: all cash) there, under the run's own rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from podracer.cli.options import DatasetOption, DeviceOption
from podracer.cli.root import app
from trader.errors import UserError


@app.command("act")
def act_command(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (a training run or a tournament).")],
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Decide at the last bar at or before this time; default: the period's latest bar (its orders are then estimates at its close).",
        ),
    ] = None,
    book: Annotated[
        Path | None,
        typer.Option(
            "--book",
            help='JSON file {"cash": x, "holdings": {ticker: shares}}; default: all cash (the run\'s capital).',
        ),
    ] = None,
    strategy: Annotated[
        str, typer.Option("--strategy", help="The run's checkpoint that decides (best, final).")
    ] = "best",
    period: Annotated[
        str,
        typer.Option("--period", help="Bars the observation is built from: test, validation, train, START:END or all."),
    ] = "test",
    dataset: DatasetOption = None,
    output: Annotated[str, typer.Option("--output", help="table or json.")] = "table",
    device: DeviceOption = None,
) -> None:
    """The selected strategy's target weights and orders for one bar, from a given book."""
    if output not in ("table", "json"):
        raise UserError(f"--output must be table or json, got {output!r}")
    from trader.decision import act

    decision = act(run_dir, at=at, book=book, strategy=strategy, period=period, dataset=dataset, device=device or "cpu")
    if output == "json":
        print(json.dumps(decision.to_dict(), indent=2))
        return
    rows = decision.table()
    rows = rows[(rows["held"] != 0) | (rows["order"] != 0)]
    when = (
        f"fills at the open of {decision.fills_at}"
        if decision.fills_at is not None
        else "the latest bar: prices are its close, orders before the fill's cash limit, cap and costs"
    )
    print(f"{decision.strategy} at {decision.bar} ({when})")
    print(rows.to_string(float_format=lambda x: f"{x:,.6g}") if len(rows) else "no position and no order")
    costs = sum(decision.costs.values())
    print(
        f"cash {decision.cash_before:,.2f} -> {decision.cash_after:,.2f}; costs {costs:,.2f} "
        f"({', '.join(f'{k} {v:,.2f}' for k, v in decision.costs.items())}); gross weight "
        f"{decision.weights.abs().sum():.4f}"
    )
