"""`trader backtest RUN_DIR`: backtest a run's strategies and the baselines, write the report.

A thin layer over `trader.backtesting.runs.backtest_run`, the reader the tournament and
the demo backtest with: it finds the run's strategies (a training run's checkpoints, a
tournament's best pod and ensemble, the baseline libraries' models in
`RUN_DIR/baselines/`), picks the data set (`--dataset`, else the one RUN_DIR records),
the capital, costs and env rules (the run's, unless given), runs, writes the report
(the run's own `report.json`, `report.md`, `backtests/` and tear sheets when the run is
backtested as it was configured, else `RUN_DIR/reports/<name>/`), and prints the
metrics table (a rich table in a terminal, plain text otherwise, or JSON).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from podracer.cli.root import app
from podracer.cli.options import (
    CommissionOption,
    CostSetOption,
    CostsOption,
    DatasetOption,
    DeviceOption,
    InitialCashOption,
    checked_initial_cash,
    cost_flags,
)
from trader.names import counted, name_list
from trader.errors import UserError
from trader.names import BASELINES


def print_result_table(result, output: str) -> None:
    """A `BacktestResult`'s metrics: JSON, a rich table in a terminal, plain text otherwise."""
    from trader.backtesting.report import (
        context_lines,
        cost_rows,
        evidence_rows,
        market_rows,
        plain_table,
        report_dict,
        selection_lines,
        spread_lines,
        table_rows,
        yardstick_lines,
    )

    if output == "json":
        print(json.dumps(report_dict(result), indent=2))
        return
    if sys.stdout.isatty():
        from rich.console import Console

        console = Console()
        console.print(_rich_table("Backtest", *table_rows(result), caption="\n".join(context_lines(result))))
        header, rows = cost_rows(result)
        if rows:
            console.print(
                _rich_table(
                    "Costs (bp of the value traded) and the breakeven cost (a multiple of the cost model)", header, rows
                )
            )
        header, rows = evidence_rows(result)
        if rows:
            console.print(
                _rich_table("Is the edge real? (docs/reading-results.md)", header, rows, left=(0, len(header) - 1))
            )
        header, rows = market_rows(result)
        if rows:
            console.print(
                _rich_table(f"Against the benchmark ({result.benchmark_name}), from daily returns", header, rows)
            )
        for line in yardstick_lines(result) + selection_lines(result) + spread_lines(result):
            console.print(line)
        return
    print("\n".join(context_lines(result)))
    print()
    print(plain_table(result))


def _rich_table(
    title: str, header: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,), caption: str | None = None
):
    """A rich `Table` of ``rows``: the columns in ``left`` aligned left, the others right."""
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for i, column in enumerate(header):
        table.add_column(column, justify="left" if i in left else "right")
    for row in rows:
        table.add_row(*row)
    return table


@app.command("backtest")
def backtest(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory: its strategies are backtested and the report written into it (or a new folder, with --dataset: the built-in baselines)."
        ),
    ],
    dataset: DatasetOption = None,
    period: Annotated[
        str, typer.Option("--period", help="test, validation, or START:END (dates, END included).")
    ] = "test",
    strategies: Annotated[
        str | None,
        typer.Option(
            "--strategies",
            help=f"Comma-separated: the run's strategies, checkpoint paths and baselines ({', '.join(BASELINES)}); default: all.",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", help="table or json.")] = "table",
    initial_cash: InitialCashOption = None,
    commission: CommissionOption = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    breakeven: Annotated[
        bool,
        typer.Option(
            "--breakeven/--no-breakeven",
            help="Also backtest at 0, 0.5, 2, 4 and 8 x the costs, in the same pass, for each strategy's breakeven cost.",
        ),
    ] = True,
    device: DeviceOption = None,
    tear_sheet: Annotated[
        bool,
        typer.Option(
            "--tear-sheet/--no-tear-sheet", help="Draw a pyfolio tear sheet for each agent, against the benchmark."
        ),
    ] = True,
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            help="Write the report into RUN_DIR/reports/NAME/ (default: the run's own report when the run is backtested as it was configured, else reports/ named by what differs: period, strategies, costs, capital, data).",
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the report already there, whole.")] = False,
) -> None:
    """Backtest a run's strategies beside the built-in baselines; write its report (its own, or one in reports/)."""
    if output not in ("table", "json"):
        raise UserError(f"--output must be table or json, got {output!r}")
    cost, named = cost_flags(commission, costs, cost_set)
    checked_initial_cash(initial_cash)
    from trader.backtesting.runs import backtest_config, backtest_run, check_report_name, read_run

    if report is not None:
        check_report_name(report)
    config = backtest_config(
        read_run(run_dir), initial_cash=initial_cash, cost=cost, tear_sheet=tear_sheet, costs=named, breakeven=breakeven
    )
    requested = None if strategies is None else list(name_list(strategies, "--strategies"))
    runs = ", and at 0 to 8 x the costs (breakeven)" if breakeven else ""

    def start(count: int) -> None:  # the work takes seconds to minutes: say what it is first
        what = f"{counted(count, 'strategy', 'strategies')} of {run_dir} beside the built-in baselines"
        print(f"backtesting {what} on the {period} period{runs} ...", file=sys.stderr, flush=True)

    result = backtest_run(
        run_dir,
        dataset=dataset,
        period=period,
        strategies=requested,
        config=config,
        device=device or "cpu",
        report=report,
        overwrite=overwrite,
        on_start=start,
    )
    print_result_table(result, output)
    if output == "table":
        folder = Path(result.files["report.json"]).parent
        print(f"\nwrote {folder / 'report.md'}, {folder / 'report.json'} and {folder / 'backtests'}/")
