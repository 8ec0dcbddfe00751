"""Network addresses, read without resolving a name or opening a socket.

Used where a command decides whether something is exposed beyond this machine: the
tournament joining a dask scheduler (`tournament.cluster`) and the dashboard binding
its port (`trader dashboard --host`). Torch-free and dask-free.
"""

from __future__ import annotations

import ipaddress

from trader.errors import ConfigError


def split_address(address: str) -> tuple[str, str, str]:
    """``(scheme, host, port)`` of a dask address; ``tcp`` when it names no scheme.

    Parsed by hand, with no name resolved: checking an address sends nothing."""
    scheme, sep, rest = address.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", address.strip()
    scheme = scheme.lower()
    if rest.startswith("["):  # [::1]:8786
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.rpartition(":") if rest.count(":") == 1 else (rest, "", "")
    if not host or (port and not port.isdigit()):
        raise ConfigError(f"scheduler address {address!r} is not SCHEME://HOST:PORT (e.g. tls://10.0.0.5:8786)")
    return scheme, host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``;
    any other name counts as remote, since resolving it could say anything."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
