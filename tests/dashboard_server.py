"""`trader dashboard` served by the console entry point in a subprocess, on a free loopback port.

A test cannot hand Streamlit port 0, and a port the kernel has just handed out and released
is only probably still free when Streamlit binds it a few seconds later: a test running beside
it (a dask cluster, another server) may take it first. The CLI then exits (2 when its own probe
finds the port in use, Streamlit's code when the bind fails), so `serve_dashboard` starts again
on another port, a bounded number of times. It waits as `make screenshots` does
(tools/dashboard_screenshots.py: `free_port`, `answering`): for a health check answered on a port
the CLI's own process tree listens on, never another server's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # a developer's tool, outside the package
from dashboard_screenshots import answering, free_port

ENTRY_POINT = [sys.executable, "-c", "from podracer.cli import entry_point; entry_point()"]


def serve_dashboard(
    runs: str | Path, *, cwd: Path | None = None, tries: int = 3, seconds: float = 60
) -> tuple[subprocess.Popen, int]:
    """``trader dashboard RUNS --port P`` in a subprocess, returned with P once the server answers.

    A start whose process exits before it answers is tried again on another port, `tries` times in
    all; a start that neither answers nor exits within `seconds` is killed and fails the test."""
    exits = []
    for _ in range(tries):
        port = free_port()
        server = subprocess.Popen(
            [*ENTRY_POINT, "dashboard", str(runs), "--port", str(port)],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            if answering(server, port, seconds) is not None:
                return server, port
        except RuntimeError as late:
            server.kill()
            server.wait(timeout=30)
            raise AssertionError(f"trader dashboard: {late}") from late
        exits.append(server.returncode)
    raise AssertionError(f"trader dashboard exited before answering, {tries} times (exit codes {exits})")
