"""Joining a dask scheduler safely, tested without leaving the machine.

- Address rules (`tournament.cluster.check_scheduler`): plain TCP off loopback is
  refused unless ``insecure``; the CLI's refusal is checked inside ``unshare -n`` (a
  network namespace with no links), so nothing could leave even if the code tried.
- Foreign servers on loopback (a web server, a server that speaks first) give one
  `UserError` within the connect timeout.
- The local cluster listens on loopback; TLS settings are checked before connecting.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tournament import cluster
from tournament.cluster import TlsFiles, check_scheduler
from trader.addresses import is_loopback, split_address
from tournament.config import TournamentConfig
from trader.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from podracer.cli import main; sys.exit(main(sys.argv[1:]))"
REMOTE = "tcp://10.0.0.5:8786"
"""A non-loopback address; used only inside `unshare -n`, where no route exists."""


# --------------------------------------------------------------------------- address rules


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("tcp://127.0.0.1:8786", ("tcp", "127.0.0.1", "8786")),
        ("10.0.0.5:8786", ("tcp", "10.0.0.5", "8786")),
        ("tls://[::1]:8786", ("tls", "::1", "8786")),
        ("TLS://sched.example:9000", ("tls", "sched.example", "9000")),
    ],
)
def test_addresses_split_without_resolving(address: str, expected: tuple[str, str, str]) -> None:
    assert split_address(address) == expected


def test_only_loopback_addresses_count_as_loopback() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.8.7", "::1", "localhost", "LOCALHOST"))
    assert not any(
        is_loopback(h) for h in ("10.0.0.5", "0.0.0.0", "192.168.1.2", "::", "sched.example", "localhost.evil")
    )


@pytest.mark.parametrize(
    "address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "ws://10.0.0.5:8786", "tcp://sched.example:8786"]
)
def test_plain_addresses_off_loopback_are_refused_with_the_tls_hint(address: str) -> None:
    with pytest.raises(ConfigError, match=r"refusing plain .*tls://HOST:PORT.*--insecure"):
        check_scheduler(address)
    assert check_scheduler(address, insecure=True) in cluster.PLAIN_SCHEMES
    with pytest.raises(ConfigError, match="refusing plain"):  # the config refuses it too, before any connection
        TournamentConfig(scheduler=address)


def test_loopback_plain_and_tls_anywhere_are_allowed_and_bad_mixes_refused() -> None:
    assert check_scheduler("tcp://127.0.0.1:8786") == "tcp"
    assert check_scheduler("tls://10.0.0.5:8786") == "tls"
    with pytest.raises(ConfigError, match="need a tls:// scheduler"):
        check_scheduler("tcp://127.0.0.1:8786", tls=TlsFiles(ca="ca.pem"))
    with pytest.raises(ConfigError, match="unknown scheme"):
        check_scheduler("http://10.0.0.5:8786")
    with pytest.raises(ConfigError, match="need a tls:// scheduler"):
        TournamentConfig(tls_ca="ca.pem")


def test_tls_needs_all_three_files_and_they_must_exist(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="together"):
        cluster.security("tls://10.0.0.5:8786", TlsFiles(ca=str(tmp_path / "ca.pem")))
    with pytest.raises(UserError, match=r"--tls-ca .*ca.pem: no such file"):
        cluster.security("tls://10.0.0.5:8786", TlsFiles(*(str(tmp_path / n) for n in ("ca.pem", "c.pem", "k.pem"))))
    assert cluster.security("tcp://127.0.0.1:8786") is None


# --------------------------------------------------------------------------- the CLI in a namespace with no links


def _unshare() -> list[str]:
    """The command prefix for a fresh network namespace with no links, or a skip."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    prefix = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode != 0:
        pytest.skip("cannot make a network namespace here (needs root or user namespaces)")
    return prefix


def _cli(args: list[str], prefix: list[str] = (), timeout: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*prefix, sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_cli_refuses_plain_tcp_off_loopback_inside_an_empty_namespace(tmp_path: Path) -> None:
    prefix = _unshare()
    done = _cli(["tournament", str(tmp_path / "run"), "--scheduler", REMOTE, "--pods", "1"], prefix)
    assert done.returncode == 2, done.stderr
    assert len(_error_lines(done.stderr)) == 1 and "Traceback" not in done.stderr
    assert "refusing plain tcp://" in done.stderr and "tls://HOST:PORT" in done.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written

    insecure = _cli(["tournament", str(tmp_path / "run"), "--scheduler", REMOTE, "--pods", "1", "--insecure"], prefix)
    assert "--insecure: joining tcp://10.0.0.5:8786 over plain tcp://" in insecure.stderr  # the warning, every run
    # one line and exit 2 whether the connect fails at once or runs into the timeout, as the kernel answers
    assert insecure.returncode == 2 and "cannot reach the dask scheduler at tcp://10.0.0.5:8786" in insecure.stderr
    assert "Traceback" not in insecure.stderr


# --------------------------------------------------------------------------- foreign servers on loopback


class _SpeaksFirst:
    """A loopback TCP server that greets every connection with bytes (an SSH banner)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n" * 4)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def speaks_first():
    server = _SpeaksFirst()
    yield server
    server.close()


@pytest.fixture
def web_server(tmp_path: Path):
    """An HTTP server on a loopback port the kernel picks (`loopback_http`), serving `tmp_path`."""
    import functools
    import http.server

    from loopback_http import http_server

    with http_server(functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))) as port:
        yield port


def test_a_web_server_is_one_error_within_the_connect_timeout(web_server: int) -> None:
    start = time.monotonic()
    with pytest.raises(
        UserError, match=f"cannot reach the dask scheduler at tcp://127.0.0.1:{web_server}: no answer within 2 s"
    ):
        cluster.connect(scheduler=f"tcp://127.0.0.1:{web_server}", timeout=2.0)
    assert time.monotonic() - start < 4.0


def test_a_server_that_speaks_first_is_one_error_not_a_memory_error(speaks_first: _SpeaksFirst) -> None:
    with pytest.raises(UserError, match="does not speak dask's protocol"):
        cluster.connect(scheduler=f"tcp://127.0.0.1:{speaks_first.port}", timeout=2.0)


def test_the_probe_works_from_inside_a_running_event_loop(speaks_first: _SpeaksFirst) -> None:
    """As in a notebook, where a loop is running in the caller's thread."""

    async def inside() -> None:
        with pytest.raises(UserError, match="does not speak dask's protocol"):
            cluster.probe_scheduler(f"tcp://127.0.0.1:{speaks_first.port}", timeout=2.0)

    asyncio.run(inside())


def _assert_cli_fails_fast(port: int, says: str, run_dir: Path, limit: float) -> None:
    start = time.monotonic()
    done = _cli(["tournament", str(run_dir), "--scheduler", f"tcp://127.0.0.1:{port}", "--pods", "1"])
    assert done.returncode == 2, done.stderr
    assert _error_lines(done.stderr) == [line for line in done.stderr.splitlines() if line.strip()]
    assert says in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - start < limit + 30  # + the interpreter's start (torch) on a busy 2-core machine


def test_cli_exits_2_with_one_line_against_a_server_that_speaks_first(
    speaks_first: _SpeaksFirst, tmp_path: Path
) -> None:
    _assert_cli_fails_fast(speaks_first.port, "does not speak dask's protocol", tmp_path / "run", 5.0)


@pytest.mark.slow
def test_cli_exits_2_with_one_line_against_a_web_server(web_server: int, tmp_path: Path) -> None:
    _assert_cli_fails_fast(web_server, "no answer within 10 s", tmp_path / "run", cluster.CONNECT_TIMEOUT + 2.0)


def test_nothing_listening_is_one_error() -> None:
    with socket.socket() as probe:
        # Bound, never listening: a connect is refused, and no other process (another test
        # worker's cluster) can take the port while the test runs, as it could once closed.
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(UserError, match="cannot reach the dask scheduler"):
            cluster.connect(scheduler=f"tcp://127.0.0.1:{port}", timeout=2.0)
        assert time.monotonic() - start < 4.0


# --------------------------------------------------------------------------- the local cluster


def test_the_local_cluster_listens_on_loopback_only() -> None:
    """Every listening socket of the client's process (scheduler, its HTTP server) and of
    the worker processes is bound to 127.0.0.1."""
    psutil = pytest.importorskip("psutil")
    client = cluster.connect(workers=1)
    try:
        addresses = [client.scheduler.address, *client.scheduler_info()["workers"]]
        pids = [os.getpid(), *client.run(os.getpid).values()]
        listening = [
            c.laddr.ip
            for pid in pids
            for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
    finally:
        cluster.close(client)
    assert all(split_address(a)[1] == "127.0.0.1" for a in addresses), addresses
    assert len(listening) >= 3 and set(listening) == {"127.0.0.1"}, listening


# --------------------------------------------------------------------------- the dashboard


@pytest.mark.parametrize(
    ("host", "warned"), [("127.0.0.1", False), ("localhost", False), ("0.0.0.0", True), ("10.1.2.3", True)]
)
def test_the_dashboard_says_it_has_no_login_when_it_listens_beyond_loopback(
    host: str, warned: bool, tmp_path: Path, monkeypatch, capsys
) -> None:
    from podracer.cli import main

    from podracer.cli import dashboard

    started = []
    monkeypatch.setattr(dashboard, "run_streamlit", lambda command, env: started.append(command) or 0)  # no streamlit
    monkeypatch.setattr(dashboard, "check_port_free", lambda host, port: None)  # binds nothing, on no address
    assert main(["dashboard", str(tmp_path), "--host", host]) == 0
    assert started and started[0][started[0].index("--server.address") + 1] == host
    err = capsys.readouterr().err
    where = "port 8501 on any address of this machine" if host == "0.0.0.0" else f"{host}:8501"
    assert ("has no login" in err and where in err and str(tmp_path) in err) is warned, err


# --------------------------------------------------------------------------- resume


def test_resume_replaces_a_saved_plain_remote_scheduler_before_checking_it(tmp_path: Path) -> None:
    """A run saved before the TLS rules (scheduler = tcp://10.0.0.5:8786) resumes on the
    cluster given now; the saved address is never checked, nor joined."""
    from tournament.orchestrator import resolve_config
    from trader import rundir

    run_dir = tmp_path / "old"
    rundir.write_toml(
        run_dir / rundir.TOURNAMENT,
        {"env": "Pendulum-v1", "pods": 3, "population": 2, "scheduler": REMOTE, "backtest": False},
    )
    (run_dir / rundir.EVENTS).write_text("")
    now = TournamentConfig(
        run_dir=str(run_dir),
        scheduler="tls://10.0.0.5:8786",
        tls_ca="ca.pem",
        tls_cert="c.pem",
        tls_key="k.pem",
        pods=5,
    )
    resumed = resolve_config(now, resume=True)
    assert (resumed.scheduler, resumed.tls_ca, resumed.pods, resumed.population) == (
        "tls://10.0.0.5:8786",
        "ca.pem",
        5,
        2,
    )
