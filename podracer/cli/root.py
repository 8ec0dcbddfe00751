"""The `trader` command's Typer app and its root options; each command module adds its
commands to `app` (`podracer.cli` imports them all, then runs it)."""

from __future__ import annotations

from typing import Annotated

import typer

from podracer.cli.budget import HELP

app = typer.Typer(
    name="trader",
    help="podracer-trader: market data, training, tournaments, backtests and the dashboard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    epilog=HELP,
)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the library version and exit.")] = False,
) -> None:
    """podracer-trader: market data, training, tournaments, backtests and the dashboard."""
    if version:
        from trader import __version__

        print(f"podracer-trader {__version__}")
        raise typer.Exit(0)
