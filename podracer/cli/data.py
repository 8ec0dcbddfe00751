"""`trader data`: build, inspect and validate market data sets.

A thin layer over `market_envs.data` (`load`, `read_files`, the recipes). Bad data
raises `DataError`, which the CLI shell turns into exit code 2 and one line.

    trader data list
    trader data build synthetic-minute [--data-dir DIR] [--refresh] [--set seed=3]
    trader data info nasdaq100-minute
    trader data validate ./my_bars/ [--assume-tz America/New_York]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trader.names import name_list
from podracer.cli.root import app

data_app = typer.Typer(
    help="Market data sets: build (fetch or generate, validate, cache), info, validate.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")

DATA_DIR_HELP = "Data directory (default: $PODRACER_DATA_DIR, else the user cache directory)."


def _console() -> Console:
    return Console(stderr=True, highlight=False, log_path=False)


def _summary_table(title: str, summary: dict) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in summary.items():
        table.add_row(str(key), f"{value:.4g}" if isinstance(value, float) else str(value))
    return table


@data_app.command("list")
def list_command() -> None:
    """List the recipes found by name, with their source and description."""
    from market_envs.data.recipes import available_recipes, find_recipe

    table = Table(title="recipes")
    for column in ("name", "source", "interval", "description"):
        table.add_column(column)
    for name, path in available_recipes().items():
        recipe = find_recipe(path)
        table.add_row(name, recipe.source, recipe.interval, recipe.description.split("\n")[0][:80])
    Console().print(table)


@data_app.command("build")
def build_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name (see `trader data list`) or path to a TOML file.")],
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help=DATA_DIR_HELP)] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Rebuild even if the panel is cached.")] = False,
    overrides: Annotated[
        list[str], typer.Option("--set", help="Override a recipe key: --set seed=3 (repeatable).")
    ] = [],
) -> None:
    """Fetch or generate a data set, validate it, cache it and print its summary."""
    from market_envs.data.chunks import DownloadBar
    from market_envs.data.recipes import load, parse_overrides

    console = _console()
    with console.status(f"building {recipe} ...") as status:

        def progress(line: str) -> None:
            console.log(line)
            status.update(line)

        data = load(
            recipe,
            data_dir=data_dir,
            refresh=refresh,
            progress=progress,
            bar=DownloadBar(console),
            **parse_overrides(overrides),
        )
    summary = data.summary()
    summary["train_end"] = data.meta.get("train_end")
    summary["val_end"] = data.meta.get("val_end")
    if data.meta.get("dropped_tickers"):
        summary["dropped_tickers"] = ", ".join(data.meta["dropped_tickers"])
    Console().print(_summary_table(f"data set {data.name}", summary))


@data_app.command("info")
def info_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or path to a TOML file.")],
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help=DATA_DIR_HELP)] = None,
    overrides: Annotated[list[str], typer.Option("--set", help="Override a recipe key (as for build).")] = [],
) -> None:
    """Show a recipe and, if it is built, its cached panel (never downloads or builds)."""
    from market_envs.data.cache import DataCache
    from market_envs.data.recipes import cached_panel_info, parse_overrides

    resolved, key, meta = cached_panel_info(recipe, data_dir, **parse_overrides(overrides))
    facts = {k: v for k, v in resolved.to_dict().items() if k not in ("options", "tickers", "universe")}
    facts["tickers"] = (
        "(from the source)"
        if resolved.tickers is None
        else f"{len(resolved.tickers)}: "
        + " ".join(resolved.tickers[:12])
        + (" ..." if len(resolved.tickers) > 12 else "")
    )
    for k, v in resolved.universe.items():
        facts[f"universe.{k}"] = v
    for k, v in resolved.options.items():
        facts[f"{resolved.source}.{k}"] = v
    facts["cache_key"] = key
    facts["cached"] = "no (run `trader data build`)" if meta is None else str(DataCache(data_dir).panel_dir(key))
    if meta is not None:
        facts.update(
            {f"built_{k}": meta[k] for k in ("bars", "start", "end", "benchmark_name", "created") if k in meta}
        )
        facts["built_tickers"] = len(meta["tickers"])
    Console().print(_summary_table(f"recipe {resolved.name}", facts))


@data_app.command("validate")
def validate_command(
    path: Annotated[Path, typer.Argument(help="A CSV/Parquet file or a folder of them (long or one file per ticker).")],
    assume_tz: Annotated[
        str | None, typer.Option("--assume-tz", help="Time zone of naive timestamps, e.g. America/New_York.")
    ] = None,
    benchmark: Annotated[
        str | None, typer.Option("--benchmark", help="Ticker in the files to use as benchmark.")
    ] = None,
    tickers: Annotated[
        str | None, typer.Option("--tickers", help="Comma-separated tickers that must be present.")
    ] = None,
) -> None:
    """Check files the way the files provider reads them; print the panel's summary."""
    from market_envs.data.files import read_files

    wanted = None if tickers is None else list(name_list(tickers, "--tickers"))
    with _console().status(f"validating {path} ..."):
        data = read_files(path, tickers=wanted, assume_tz=assume_tz, benchmark=benchmark)
    Console().print(_summary_table(f"{path}: valid", data.summary()))
