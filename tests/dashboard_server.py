"""`trader dashboard` served by the console entry point in a subprocess, on a free loopback port.

A test cannot hand Streamlit port 0, and a port the kernel has just handed out and released
is only probably still free when Streamlit binds it a few seconds later: a test running beside
it (a dask cluster, another server) may take it first. The CLI then exits (2 when its own probe
finds the port in use, Streamlit's code when the bind fails), so `serve_dashboard` starts again
on another port, a bounded number of times, and waits for Streamlit's health check each time.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ENTRY_POINT = [sys.executable, "-c", "from trader.app.cli import entry_point; entry_point()"]


def free_port() -> int:
    """A loopback port the kernel handed out and released (probably still free)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(port: int) -> bool:
    """Whether a Streamlit server on `port` answers its health check with "ok"."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.read().decode() == "ok"
    except OSError:
        return False


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
        deadline = time.monotonic() + seconds
        while server.poll() is None and time.monotonic() < deadline:
            if healthy(port):
                return server, port
            time.sleep(0.5)
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
            raise AssertionError(f"trader dashboard did not answer on port {port} within {seconds} s")
        exits.append(server.returncode)
    raise AssertionError(f"trader dashboard exited before answering, {tries} times (exit codes {exits})")
