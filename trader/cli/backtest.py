"""`trader backtest RUN_DIR`: backtest a run's checkpoints and the baselines, write the report.

A thin layer over `trader.backtest.run_backtest`: it finds the checkpoints in
`RUN_DIR/checkpoints/` (`<name>.json` + `<name>.safetensors`), picks the data set
(`--dataset`, else the `dataset` key of `RUN_DIR/config.toml`), runs, writes
`RUN_DIR/backtests/`, `report.json`, `report.md` and the tear sheet, and prints the
metrics table (a rich table in a terminal, plain text otherwise, or JSON).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Annotated

import typer

from trader.backtest import BASELINES, BacktestConfig, run_backtest
from trader.backtest.report import context_lines, plain_table, report_dict, table_rows
from trader.cli import app
from trader.errors import CheckpointError, UserError


def _checkpoints(run_dir: Path) -> dict[str, Path]:
    """name -> checkpoint path (without suffix) for every sidecar in RUN_DIR/checkpoints."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return {}
    return {p.stem: p.with_suffix("") for p in sorted(folder.glob("*.json"))}


def _strategies(run_dir: Path, requested: str | None) -> tuple[dict[str, Path], list[str] | None]:
    """Checkpoints and baselines to run: all of them (baselines None: every one that
    applies to the data, as `run_backtest` decides), or those named in `requested`."""
    found = _checkpoints(run_dir)
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
            raise CheckpointError(f"checkpoint {name!r} not found in {run_dir / 'checkpoints'} (strategies here: {known})")
    return policies, baselines


def _dataset(run_dir: Path, dataset: str | None) -> str:
    """--dataset, else RUN_DIR/config.toml's `dataset` (top level or under [env], as `trader train` writes it)."""
    if dataset:
        return dataset
    config = run_dir / "config.toml"
    if config.is_file():
        try:
            resolved = tomllib.loads(config.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise UserError(f"{config} is not valid TOML: {err}") from err
        env = resolved.get("env")
        for value in (resolved.get("dataset"), env.get("dataset") if isinstance(env, dict) else None):
            if isinstance(value, str) and value:
                return value
    raise UserError(f"no data set given: pass --dataset RECIPE ({config} names none)")


def print_result_table(result, output: str) -> None:
    if output == "json":
        print(json.dumps(report_dict(result), indent=2))
        return
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        header, rows = table_rows(result)
        table = Table(title="Backtest", caption="\n".join(context_lines(result)))
        for i, column in enumerate(header):
            table.add_column(column, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    print("\n".join(context_lines(result)))
    print()
    print(plain_table(result))


@app.command("backtest")
def backtest(
    run_dir: Annotated[Path, typer.Argument(help="Run directory: checkpoints/ is read, backtests/ and report.* are written.")],
    dataset: Annotated[str | None, typer.Option("--dataset", help="Data set recipe (name or path); default: RUN_DIR/config.toml's dataset.")] = None,
    period: Annotated[str, typer.Option("--period", help="test, validation, or START:END (dates, END included).")] = "test",
    strategies: Annotated[str | None, typer.Option("--strategies", help=f"Comma-separated checkpoint names and baselines ({', '.join(BASELINES)}); default: all.")] = None,
    output: Annotated[str, typer.Option("--output", help="table or json.")] = "table",
    initial_cash: Annotated[float, typer.Option("--initial-cash", help="Starting capital of every strategy.")] = 1_000_000.0,
    cost: Annotated[float, typer.Option("--cost", help="Cost rate per side (0.001 = 0.1%).")] = 0.001,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:1, ...")] = "cpu",
    tear_sheet: Annotated[bool, typer.Option("--tear-sheet/--no-tear-sheet", help="Draw the pyfolio tear sheet of the best strategy.")] = True,
) -> None:
    """Backtest a run's checkpoints beside the benchmark and equal-weight baselines."""
    if output not in ("table", "json"):
        raise UserError(f"--output must be table or json, got {output!r}")
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"RUN_DIR {run_dir} is not a directory")
    policies, baselines = _strategies(run_dir, strategies)
    recipe = _dataset(run_dir, dataset)
    config = BacktestConfig(initial_cash=initial_cash, buy_cost=cost, sell_cost=cost, tear_sheet=tear_sheet)
    from trader.backtest.periods import load_dataset

    data = load_dataset(recipe)
    result = run_backtest(data, policies, baselines=baselines, period=period, config=config, run_dir=run_dir, device=device)
    print_result_table(result, output)
    if output == "table":
        print(f"\nwrote {run_dir / 'report.md'}, {run_dir / 'report.json'} and {run_dir / 'backtests'}/")
