"""`trader dashboard`: start the Streamlit dashboard (`dashboards/app.py`) on a runs folder."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from dashboards.app_pages import titles
from podracer.cli.root import app
from trader.errors import UserError

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
"""The app's script; `dashboards` is installed beside `trader` (pyproject's packages)."""


def streamlit_command(runs_dir: Path, port: int, host: str) -> list[str]:
    """The `streamlit run` command line for the dashboard."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]


def exposure_notice(host: str, port: int, runs_dir: Path) -> str | None:
    """The warning printed when the dashboard listens beyond loopback (None on loopback)."""
    from trader.addresses import is_loopback

    if is_loopback(host):
        return None
    where = f"port {port} on any address of this machine" if host in ("0.0.0.0", "::") else f"{host}:{port}"
    return (
        f"warning: the dashboard has no login: anyone who can reach {where} sees every run in "
        f"{runs_dir.resolve()} (use --host 127.0.0.1 and an SSH tunnel to keep it private)"
    )


def check_port_free(host: str, port: int) -> None:
    """Refuse, with one line, a port that something already listens on (another dashboard?).

    Streamlit itself would print its URL first and only then fail; this asks before
    anything is started or printed. A bind test, so a port in TIME_WAIT counts as free.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise UserError(
                f"--port {port}: {host}:{port} is in use ({err.strerror}); "
                f"stop what listens there or choose another --port"
            ) from err


def _die_with_parent() -> None:
    """In the Streamlit child, before it runs (Linux): a SIGTERM when `trader dashboard` dies,
    by any signal, SIGKILL included, so no orphan keeps holding the port."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the signal handlers below still stop it
        pass


def run_streamlit(command: list[str], env: dict[str, str]) -> int:
    """Run Streamlit until it exits or this process is told to stop; return its exit code.

    SIGTERM, SIGHUP and Ctrl+C stop the child too: it is terminated, given 10 s, then
    killed. Its exit code is returned (0 when it was stopped on request).
    """
    child = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    stopping = False

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        child.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # a second Ctrl+C while waiting
                stop(signal.SIGINT, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return 0 if stopping else code


HELP = (
    f"Open the dashboard on RUNS_DIR; its pages: {titles()}. Ctrl+C or SIGTERM stops it and its "
    "Streamlit server; a busy --port is refused before anything starts."
)
"""The command's help: the pages named from `dashboards.app_pages.PAGES`, the list the app's navigation is made of."""


@app.command("dashboard", help=HELP)
def dashboard(
    runs_dir: Annotated[
        Path, typer.Argument(help="Folder of run directories (training runs, backtests, tournaments).")
    ] = Path("runs"),
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (0.0.0.0 to reach it from other machines).")
    ] = "127.0.0.1",
) -> None:
    """Open the dashboard on RUNS_DIR (its help: `HELP`)."""
    if not runs_dir.is_dir():
        raise UserError(f"RUNS_DIR {runs_dir} is not a directory (train or backtest into it first)")
    if not 0 < port < 65536:
        raise UserError(f"--port must be in 1..65535, got {port}")
    if not APP.exists():
        raise UserError(f"the dashboard app is missing at {APP}: reinstall podracer-trader from a checkout")
    check_port_free(host, port)
    notice = exposure_notice(host, port, runs_dir)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    env = {**os.environ, "PODRACER_RUNS_DIR": str(runs_dir.resolve())}
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    print(f"dashboard on {runs_dir}: http://{shown}:{port}  (Ctrl+C stops it)", flush=True)
    raise typer.Exit(run_streamlit(streamlit_command(runs_dir, port, host), env))
