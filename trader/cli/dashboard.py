"""`trader dashboard`: start the Streamlit dashboard (`dashboards/app.py`) on a runs folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from trader.cli import app
from trader.errors import UserError

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
"""The app's script; `dashboards` is installed beside `trader` (pyproject's packages)."""


def streamlit_command(runs_dir: Path, port: int, host: str) -> list[str]:
    """The `streamlit run` command line for the dashboard."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port), "--server.address", host,
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def exposure_notice(host: str, port: int, runs_dir: Path) -> str | None:
    """The warning printed when the dashboard listens beyond loopback (None on loopback)."""
    from trader.addresses import is_loopback

    if is_loopback(host):
        return None
    where = f"port {port} on any address of this machine" if host in ("0.0.0.0", "::") else f"{host}:{port}"
    return (f"warning: the dashboard has no login: anyone who can reach {where} sees every run in "
            f"{runs_dir.resolve()} (use --host 127.0.0.1 and an SSH tunnel to keep it private)")  # fmt: skip


@app.command("dashboard")
def dashboard(
    runs_dir: Annotated[Path, typer.Argument(help="Folder of run directories (training runs, backtests, tournaments).")] = Path("runs"),
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to bind (0.0.0.0 to reach it from other machines).")] = "127.0.0.1",
) -> None:
    """Open the dashboard on RUNS_DIR: strategies, tournament, training and data pages."""
    if not runs_dir.is_dir():
        raise UserError(f"RUNS_DIR {runs_dir} is not a directory (train or backtest into it first)")
    if not 0 < port < 65536:
        raise UserError(f"--port must be in 1..65535, got {port}")
    if not APP.exists():
        raise UserError(f"the dashboard app is missing at {APP}: reinstall podracer-trader from a checkout")
    notice = exposure_notice(host, port, runs_dir)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    env = {**os.environ, "PODRACER_RUNS_DIR": str(runs_dir.resolve())}
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    print(f"dashboard on {runs_dir}: http://{shown}:{port}  (Ctrl+C stops it)", flush=True)
    try:
        code = subprocess.call(streamlit_command(runs_dir, port, host), env=env)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)
