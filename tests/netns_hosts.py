"""Separate hosts on one machine: Linux network namespaces joined by a private bridge.

`HostLab` makes a bridge in the root namespace (10.213.N.1/24, an N no interface uses)
and, per host, a namespace with one end of a veth pair at 10.213.N.(10+i); nothing
has a default route, so traffic stays on the lab's own addresses. Processes start
inside a host with `HostLab.start` (``ip netns exec``), each in its own session.
`HostLab.close` kills every process it started and everything left in its namespaces,
then deletes the namespaces, the veths and the bridge; it runs even when a test
fails (use the lab as a context manager). A lab's names carry its creator's process
id, so a new lab first sweeps away the labs of processes killed before their cleanup
(`sweep_dead_labs`). Needs root and iproute2 (`lab_available`).

Used by tests/test_cluster_hosts.py and benchmarks/cluster_hosts.py.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def lab_available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "needs iproute2's ip (make installs it where it can)"
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    return None


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    veth_root: str
    veth_host: str
    processes: list[subprocess.Popen] = field(default_factory=list)


class HostLab:
    """Namespaces as hosts on a private bridge; see the module docstring."""

    def __init__(self, logs: Path) -> None:
        self.tag = f"p{os.getpid():06x}{secrets.token_hex(1)}"  # names stay within Linux's 15 characters
        self.subnet = _free_subnet()
        self.bridge = f"{self.tag}br"
        self.gateway = f"10.213.{self.subnet}.1"
        self.logs = logs
        self.hosts: dict[str, Host] = {}
        self._made_bridge = False

    def __enter__(self) -> HostLab:
        sweep_dead_labs()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        """A namespace joined to the bridge, with its own address."""
        index = len(self.hosts)
        host = Host(
            name,
            f"{self.tag}-{name}",
            f"10.213.{self.subnet}.{10 + index}",
            f"{self.tag}v{index}r",
            f"{self.tag}v{index}h",
        )
        self.hosts[name] = host
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.veth_root, "type", "veth", "peer", "name", host.veth_host)
        _ip("link", "set", host.veth_host, "netns", host.namespace)
        _ip("link", "set", host.veth_root, "master", self.bridge, "up")
        inside = ("netns", "exec", host.namespace, "ip")
        _ip(*inside, "addr", "add", f"{host.address}/24", "dev", host.veth_host)
        _ip(*inside, "link", "set", host.veth_host, "up")
        _ip(*inside, "link", "set", "lo", "up")
        return host

    def start(self, name: str, argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        """Run ``argv`` inside host ``name``, its output in ``logs/<log>.log``."""
        host = self.hosts[name]
        out = open(self.logs / f"{log}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        host.processes.append(process)
        return process

    def link_down(self, name: str) -> None:
        """Pull the host's cable: its veth goes down on both ends."""
        host = self.hosts[name]
        _ip("link", "set", host.veth_root, "down")
        _ip("netns", "exec", host.namespace, "ip", "link", "set", host.veth_host, "down")

    def kill_host(self, name: str) -> None:
        """Every process in the host's namespace, killed at once (a host that lost power)."""
        host = self.hosts[name]
        for process in host.processes:
            _kill_group(process)
        for pid in _ip("netns", "pids", host.namespace, check=False).stdout.split():
            _kill_pid(int(pid))
        for process in host.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def close(self) -> None:
        """Kill what the lab started, delete its namespaces, veths and bridge (idempotent)."""
        for name in list(self.hosts):
            self.kill_host(name)
        for host in self.hosts.values():
            _ip("netns", "del", host.namespace, check=False)
            _ip("link", "del", host.veth_root, check=False)  # gone with the namespace; kept for a half-made host
        self.hosts.clear()
        if self._made_bridge:
            _ip("link", "del", self.bridge, check=False)
            self._made_bridge = False


TAG = re.compile(r"\bp([0-9a-f]{6})([0-9a-f]{2})")
"""A lab's tag: ``p``, the creating process's id in 6 hex digits, 2 random hex digits."""


def sweep_dead_labs() -> list[str]:
    """Delete the namespaces and links of labs whose creating process is gone (a test
    killed before its ``finally``); return their tags. Labs of live processes stay."""
    names = _ip("netns", "list", check=False).stdout.split() + [
        line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", "show", check=False).stdout.splitlines()
    ]
    dead = sorted({m.group(0) for n in names if (m := TAG.match(n)) and not _alive(int(m.group(1), 16))})
    for tag in dead:
        for name in names:
            if name.startswith(tag):
                for pid in _ip("netns", "pids", name, check=False).stdout.split():
                    _kill_pid(int(pid))
                _ip("netns", "del", name, check=False)
                _ip("link", "del", name, check=False)
    return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _free_subnet() -> int:
    """N of a 10.213.N.0/24 that no interface of the root namespace uses yet."""
    used = _ip("-o", "addr", "show", check=False).stdout
    free = [n for n in range(16, 250) if f"10.213.{n}." not in used]
    if not free:
        raise RuntimeError("every 10.213.N.0/24 of the lab's range is in use")
    return free[os.getpid() % len(free)]


def _kill_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_until(predicate, seconds: float, step: float = 0.2, what: str = "condition") -> None:
    """Poll ``predicate`` until true; AssertionError naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"{what}: not within {seconds:g} s")


def leftovers(tag: str) -> list[str]:
    """Namespaces and links whose names carry ``tag`` (empty after `HostLab.close`)."""
    names = _ip("netns", "list", check=False).stdout + _ip("-o", "link", "show", check=False).stdout
    return [line for line in names.splitlines() if tag in line]
