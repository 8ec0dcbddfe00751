"""An HTTP server on a loopback port the kernel picks, serving in a thread for the length of a `with` block.

The listening socket is bound before the port is known, so no other process can take the port first (as it can
with a port probed free, closed, and handed to a subprocess)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve `handler` on 127.0.0.1; yield the port; stop and close the server after the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
