"""tools/dashboard_screenshots.py's server: the URL it yields is its own dashboard's, on a port it found free.

`make screenshots` and benchmarks/dashboard_paint.py start the dashboard through `serve`. A port handed out by
the kernel and released is only probably free when Streamlit binds it; another server may hold it by then, and
its health check answers just as Streamlit's would."""

from __future__ import annotations

import sys
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from loopback_http import http_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # a developer's tool, outside the package
import dashboard_screenshots as screenshots


class _AlwaysHealthy(BaseHTTPRequestHandler):
    """Another process's server: 200 "ok" to every request, as Streamlit's health check answers."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def test_a_busy_port_is_never_taken_for_the_dashboard(tmp_path: Path) -> None:
    with (
        http_server(_AlwaysHealthy) as busy,
        pytest.raises(RuntimeError, match="exited before it answered, 1 time"),
        screenshots.serve(tmp_path, busy, timeout=60),
    ):
        pytest.fail("serve yielded the URL of a server that is not its dashboard")


def test_a_port_taken_before_streamlit_binds_it_is_tried_again_on_another(tmp_path: Path, monkeypatch) -> None:
    with http_server(_AlwaysHealthy) as busy:
        ports = iter([busy, screenshots.free_port()])  # the first "free" port is taken by the time Streamlit binds
        monkeypatch.setattr(screenshots, "free_port", lambda: next(ports))
        with screenshots.serve(tmp_path, timeout=60) as url:
            assert not url.endswith(f":{busy}")
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as response:
                assert response.read() == b"ok"
            with urllib.request.urlopen(f"{url}/_stcore/host-config", timeout=5) as response:
                assert response.status == 200  # Streamlit's own endpoint: the foreign server has no such page
