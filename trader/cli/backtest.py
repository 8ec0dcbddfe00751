"""`trader backtest RUN_DIR`: backtest a run's strategies and the baselines, write the report.

A thin layer over `trader.backtest.run_backtest`: it finds the run's strategies
(`trader.backtest.runs`: a training run's checkpoints, a tournament's best pod and
ensemble, the baseline libraries' models in `RUN_DIR/baselines/`), picks the data
set (`--dataset`, else the one RUN_DIR records), the capital, costs and env rules
(the run's, unless given), runs, writes `RUN_DIR/backtests/`, `report.json`,
`report.md` and the tear sheet, and prints the metrics table (a rich table in a
terminal, plain text otherwise, or JSON).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trader.cli import app
from trader.cli.options import CostSetOption, CostsOption, resolve_costs
from trader.errors import CheckpointError, UserError
from trader.names import BASELINES

if TYPE_CHECKING:
    from trader.backtest.runs import RunContents


def _strategies(contents: RunContents, requested: str | None, device: str) -> tuple[dict[str, Any], list[str] | None]:
    """The run's strategies and the built-in baselines to run: all of them (baselines
    None: every one that applies to the data, as `run_backtest` decides), or those
    named in `requested` (names of the run's strategies, built-in baselines, or
    checkpoint paths)."""
    from trader.backtest.runs import run_strategies

    found = run_strategies(contents, device)
    if requested is None:
        return found, None
    policies, baselines = {}, []
    for name in (n.strip() for n in requested.split(",") if n.strip()):
        if name in BASELINES:
            baselines.append(name)
        elif name in found:
            policies[name] = found[name]
        elif Path(name).suffix in (".json", ".safetensors") or "/" in name:
            path = Path(name)
            if not path.with_suffix(".json").is_file():
                raise CheckpointError(f"checkpoint not found: {path.with_suffix('.json')}")
            policies[path.with_suffix("").name] = path.with_suffix("")
        else:
            known = ", ".join([*found, *BASELINES])
            raise CheckpointError(f"strategy {name!r} not found in {contents.run_dir} (strategies here: {known})")
    return policies, baselines


def print_result_table(result, output: str) -> None:
    """A `BacktestResult`'s metrics: JSON, a rich table in a terminal, plain text otherwise."""
    from trader.backtest.report import (
        context_lines, cost_rows, evidence_rows, plain_table, report_dict, selection_lines, table_rows,
    )  # fmt: skip

    if output == "json":
        print(json.dumps(report_dict(result), indent=2))
        return
    if sys.stdout.isatty():
        from rich.console import Console

        console = Console()
        console.print(_rich_table("Backtest", *table_rows(result), caption="\n".join(context_lines(result))))
        header, rows = cost_rows(result)
        if rows:
            console.print(_rich_table("Costs (bp of the value traded) and the breakeven cost (a multiple of the cost model)",
                                      header, rows))  # fmt: skip
        header, rows = evidence_rows(result)
        if rows:
            console.print(_rich_table("Is the edge real? (docs/reading-results.md)", header, rows,
                                      left=(0, len(header) - 1)))  # fmt: skip
        for line in selection_lines(result):
            console.print(line)
        return
    print("\n".join(context_lines(result)))
    print()
    print(plain_table(result))


def _rich_table(title: str, header: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,), caption: str | None = None):
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
    run_dir: Annotated[Path, typer.Argument(help="Run directory: checkpoints/ is read, backtests/ and report.* are written.")],
    dataset: Annotated[str | None, typer.Option("--dataset", help="Data set recipe (name or path); default: RUN_DIR/config.toml's dataset.")] = None,
    period: Annotated[str, typer.Option("--period", help="test, validation, or START:END (dates, END included).")] = "test",
    strategies: Annotated[str | None, typer.Option("--strategies", help=f"Comma-separated checkpoint names and baselines ({', '.join(BASELINES)}); default: all.")] = None,
    output: Annotated[str, typer.Option("--output", help="table or json.")] = "table",
    initial_cash: Annotated[float | None, typer.Option("--initial-cash", help="Starting capital of every strategy; default: the run's.")] = None,
    cost: Annotated[float | None, typer.Option("--cost", help="Commission rate per side (0.001 = 0.1%); default: the run's (0.1% when it records none).")] = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    breakeven: Annotated[bool, typer.Option("--breakeven/--no-breakeven", help="Also backtest at 0, 0.5, 2, 4 and 8 x the costs, in the same pass, for each strategy's breakeven cost.")] = True,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:1, ...")] = "cpu",
    tear_sheet: Annotated[bool, typer.Option("--tear-sheet/--no-tear-sheet", help="Draw a pyfolio tear sheet for each agent, against the benchmark.")] = True,
) -> None:
    """Backtest a run's checkpoints beside the benchmark and equal-weight baselines."""
    if output not in ("table", "json"):
        raise UserError(f"--output must be table or json, got {output!r}")
    named = resolve_costs(costs, cost_set)
    if named is not None and cost is not None:
        raise UserError("give --cost RATE or --costs MODEL, not both (--cost-set buy_cost=... sets a model's rate)")
    from trader.backtest import run_backtest
    from trader.backtest.periods import select_period
    from trader.backtest.runs import backtest_config, read_run, trading_in

    contents = read_run(run_dir)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(f"no data set given: pass --dataset RECIPE ({run_dir} records none in config.toml or tournament.toml)")
    policies, baselines = _strategies(contents, strategies, device)
    config = backtest_config(contents, initial_cash=initial_cash, cost=cost, tear_sheet=tear_sheet, costs=named,
                             breakeven=breakeven)  # fmt: skip
    data = contents.data(recipe)
    policies = trading_in(policies, select_period(data, period)[0].timestamps[0])
    result = run_backtest(data, policies, baselines=baselines, period=period, config=config, run_dir=run_dir, device=device)
    print_result_table(result, output)
    if output == "table":
        print(f"\nwrote {run_dir / 'report.md'}, {run_dir / 'report.json'} and {run_dir / 'backtests'}/")
