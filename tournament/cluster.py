"""The dask cluster a tournament runs on: `connect` returns a `Client`.

- Default: `distributed.LocalCluster` with ``workers`` worker *processes*, one thread
  each (torch keeps one thread per process, see `tournament.pod`), its scheduler and
  workers listening on loopback only; its nannies restart a worker that dies, and
  dask runs the lost task again.
- ``scheduler="tls://host:8786"``: join a running cluster over mutual TLS (workers
  started with ``dask worker ADDRESS --tls-...``, anywhere that sees the run
  directory at the same path); the workers present at each moment are used, see
  `tournament.orchestrator`. The certificates come from `TlsFiles` or dask's own
  configuration (``distributed.comm.tls.*``); encryption is always required.
- ``scheduler="tcp://127.0.0.1:8786"``: plain TCP, on loopback only. Dask sends
  pickled functions between client, scheduler and workers, so whoever reaches a
  plain-TCP scheduler runs code on every worker: an address off loopback is refused
  (`check_scheduler`) unless ``insecure``, and every such run warns.
- ``gpus="all"`` or ``"0,1"``: `dask_cuda.LocalCUDACluster`, one worker per GPU
  (``pods_per_gpu`` threads each). dask-cuda pins its own dask, so it lives in the
  ``gpu`` extra (``pip install 'podracer-trader[gpu]'``); nothing else needs it.

The local clusters' workers start with glibc's own allocator settings (`WORKER_ENV_UNSET`).
The local cluster's workers ignore SIGINT (`dask_setup`): Ctrl-C reaches every process of
the terminal's group, and it is the orchestrator's to stop the run (`tournament.orchestrator.Interrupted`);
closing the cluster ends its workers.

Before the `Client` is made, `probe_scheduler` asks the address for its identity
under a hard deadline: something else listening there (a web server, a server that
speaks first) is one `UserError` within the connect timeout, not a hang or a
traceback from dask reading foreign bytes as a frame length.

Dask's own rules that matter here: a task whose worker died is retried on another
worker, and after ``distributed.scheduler.allowed-failures`` deaths (3 by default)
it ends in `distributed.KilledWorker`, which the orchestrator records as a failed pod.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from trader.addresses import is_loopback, split_address
from trader.errors import ConfigError, UserError
from trader.names import gpu_numbers

CONNECT_TIMEOUT = 10.0
"""Seconds joining a scheduler may take before the address counts as unreachable."""

LOOPBACK_HOST = "127.0.0.1"
"""Where the local cluster's scheduler and workers listen."""

PLAIN_SCHEMES = ("tcp", "ws", "ucx")
ENCRYPTED_SCHEMES = ("tls", "wss")
TLS_HINT = (
    "use TLS: tls://HOST:PORT with --tls-ca, --tls-cert and --tls-key "
    "(`trader cluster certs DIR` makes them; see docs/scaling.md)"
)


WORKER_ENV_UNSET = ("MALLOC_TRIM_THRESHOLD_",)
"""Variables dask's nanny sets in each local worker process that the local clusters leave unset
(``distributed.nanny.pre-spawn-environ``; dask unsets one whose value is None). With
``MALLOC_TRIM_THRESHOLD_`` set, glibc also stops raising its mmap threshold, so every tensor above
128 KiB was mapped and unmapped afresh, faulting its pages in each time: a PPO pod of 50,000
transitions (the market preset) took 123 to 127 s in a worker against 55 s without it, most of its time
in the kernel (benchmarks/RESULTS.md, "Pods in dask workers: the allocator"). A worker started by hand
with ``dask worker`` gets it from its nanny: start it with ``--no-nanny`` (`trader cluster certs`
prints the command)."""


WORKER_PRELOAD = __name__
"""The module each local worker process runs as it starts (dask's ``preload``): `dask_setup`."""


def dask_setup(worker: Any) -> None:
    """Dask calls this in each local worker process as it starts (`WORKER_PRELOAD`): the worker
    ignores SIGINT. Without it Ctrl-C, which the terminal sends to every process of its group,
    ended each worker with a traceback of dask's, whatever the orchestrator then did."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class InsecureClusterWarning(UserWarning):
    """A tournament joined a scheduler off loopback over plain TCP (``insecure``)."""


warnings.simplefilter("always", InsecureClusterWarning)  # every run says it, not only the first


@dataclass(frozen=True)
class TlsFiles:
    """The client's side of mutual TLS: PEM files of the cluster's CA, the client's
    certificate and its key. All None: dask's configuration supplies them."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @property
    def given(self) -> bool:
        return any((self.ca, self.cert, self.key))


def check_scheduler(address: str, insecure: bool = False, tls: TlsFiles = TlsFiles()) -> str:
    """The address's scheme, or `ConfigError` when joining it would be unsafe or
    inconsistent: plain TCP off loopback without ``insecure``, TLS files with a plain
    scheme, an unknown scheme. Connects to nothing."""
    scheme, host, _ = split_address(address)
    if scheme not in PLAIN_SCHEMES + ENCRYPTED_SCHEMES:
        raise ConfigError(
            f"scheduler address {address!r}: unknown scheme {scheme!r}; use tls:// (or tcp:// on loopback)"
        )
    if scheme in PLAIN_SCHEMES and tls.given:
        raise ConfigError(f"--tls-ca/--tls-cert/--tls-key need a tls:// scheduler address, got {address!r}")
    if scheme in PLAIN_SCHEMES and not is_loopback(host) and not insecure:
        raise ConfigError(
            f"refusing plain {scheme}:// to {address}: anyone who can reach that port can run code on every "
            f"worker; {TLS_HINT}, or pass --insecure on a network you trust"
        )
    return scheme


def security(address: str, tls: TlsFiles = TlsFiles()) -> Any:
    """A `distributed.security.Security` with encryption required for a tls:// or
    wss:// address (None for a plain one): ``tls``'s files, or dask's configuration
    (``distributed.comm.tls.ca-file`` and ``distributed.comm.tls.client.cert/key``)."""
    scheme, _, _ = split_address(address)
    if scheme not in ENCRYPTED_SCHEMES:
        return None
    from distributed.security import Security

    if tls.given and not all((tls.ca, tls.cert, tls.key)):
        raise UserError("give --tls-ca, --tls-cert and --tls-key together")
    files = {"tls_ca_file": tls.ca, "tls_client_cert": tls.cert, "tls_client_key": tls.key}
    sec = Security(require_encryption=True, **({k: str(v) for k, v in files.items()} if tls.given else {}))
    found = {"--tls-ca": sec.tls_ca_file, "--tls-cert": sec.tls_client_cert, "--tls-key": sec.tls_client_key}
    missing = [flag for flag, path in found.items() if not path]
    if missing:
        raise UserError(
            f"{address} needs {', '.join(missing)} (or distributed.comm.tls.* in dask's config); {TLS_HINT}"
        )
    for flag, path in found.items():
        if not os.path.isfile(path):
            raise UserError(f"{flag} {path}: no such file")
    return sec


def probe_scheduler(address: str, sec: Any = None, timeout: float = CONNECT_TIMEOUT) -> None:
    """Ask ``address`` for its identity within ``timeout`` seconds; `UserError` unless a
    dask scheduler answers (nothing listens, a TLS handshake fails, something else
    speaks there)."""
    import asyncio

    from distributed.comm import connect as comm_connect

    args = sec.get_connection_args("client") if sec is not None else {}

    async def identity() -> Any:
        comm = await comm_connect(address, timeout=timeout, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def ask() -> Any:  # in a thread of its own: the caller may be inside an event loop (Jupyter)
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="probe-scheduler") as pool:
            reply = pool.submit(ask).result()
    except (TimeoutError, asyncio.TimeoutError):
        raise UserError(f"cannot reach the dask scheduler at {address}: no answer within {timeout:g} s") from None
    except OSError as err:
        raise UserError(f"cannot reach the dask scheduler at {address}: {_why(err, address)}") from None
    except Exception as err:  # noqa: BLE001 - foreign bytes read as dask frames fail in many ways
        raise UserError(
            f"{address} does not speak dask's protocol ({type(err).__name__}); is it a dask scheduler?"
        ) from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise UserError(f"{address} answered, but not as a dask scheduler; is it a dask scheduler?")


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _why(err: OSError, address: str) -> str:
    """A connection error in a line, with the likely cause of a refused handshake."""
    text = re.sub(r"^in <[^>]*>: ", "", _one_line(err))  # dask prefixes the comm's repr
    if "SSL" in text or "certificate" in text.lower():
        return f"the TLS handshake failed ({text}); are --tls-ca, --tls-cert and --tls-key from the cluster's own CA?"
    if split_address(address)[0] in PLAIN_SCHEMES and "reset by peer" in text:
        return f"{text}; a scheduler that expects TLS resets plain connections: use tls://"
    return text


def connect(
    workers: int = 2,
    scheduler: str | None = None,
    gpus: str | None = None,
    pods_per_gpu: int = 1,
    *,
    tls: TlsFiles = TlsFiles(),
    insecure: bool = False,
    timeout: float | str | None = None,
):
    """A dask `Client` on the cluster the arguments describe (see the module docstring);
    ``timeout`` (seconds, or dask's "10s") bounds joining a scheduler, `CONNECT_TIMEOUT` by default."""
    from dask.utils import parse_timedelta
    from distributed import Client

    if scheduler:
        timeout = float(parse_timedelta(CONNECT_TIMEOUT if timeout is None else timeout, default="seconds"))
        scheme = check_scheduler(scheduler, insecure, tls)
        if scheme in PLAIN_SCHEMES and not is_loopback(split_address(scheduler)[1]):
            warnings.warn(
                f"--insecure: joining {scheduler} over plain {scheme}://, unencrypted and unauthenticated; "
                f"anyone who can reach it can run code on every worker",
                InsecureClusterWarning,
                stacklevel=2,
            )
        sec = security(scheduler, tls)
        probe_scheduler(scheduler, sec, timeout)
        try:
            return Client(scheduler, timeout=timeout, security=sec)
        except (OSError, TimeoutError) as err:
            raise UserError(
                f"cannot reach the dask scheduler at {scheduler} within {timeout:g} s: {_one_line(err)}"
            ) from err
    import dask

    unset = {f"distributed.nanny.pre-spawn-environ.{name}": None for name in WORKER_ENV_UNSET}
    if gpus:
        with dask.config.set(unset):
            return Client(_cuda_cluster(gpus, pods_per_gpu))
    from distributed import LocalCluster

    if workers < 1:
        raise UserError(f"workers must be >= 1, got {workers}")
    with dask.config.set(unset):
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host=LOOPBACK_HOST,
            dashboard_address=None,
            silence_logs=logging.ERROR,
            preload=[WORKER_PRELOAD],
        )
    return Client(cluster)


def connect_for(config: Any):
    """`connect` with a `TournamentConfig`'s cluster keys."""
    return connect(
        config.workers,
        config.scheduler,
        config.gpus,
        config.pods_per_gpu,
        tls=tls_files(config),
        insecure=config.insecure,
    )


def tls_files(config: Any) -> TlsFiles:
    """A `TournamentConfig`'s TLS files."""
    return TlsFiles(config.tls_ca, config.tls_cert, config.tls_key)


def _cuda_cluster(gpus: str, pods_per_gpu: int):
    import torch

    if not torch.cuda.is_available():
        raise UserError("--gpus needs a CUDA device, and torch sees none on this machine")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as err:
        raise UserError("--gpus needs dask-cuda: pip install 'podracer-trader[gpu]'") from err
    visible = None if gpus == "all" else _gpu_list(gpus, torch.cuda.device_count())
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=visible, threads_per_worker=pods_per_gpu, dashboard_address=None)


def _gpu_list(text: str, count: int) -> list[int]:
    """The GPU numbers in ``gpus="0,1"`` (`trader.names.gpu_numbers`), each one on this machine."""
    ids = list(gpu_numbers(text))
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise UserError(f"--gpus {text!r}: this machine has GPUs 0..{count - 1}")
    return ids


def worker_threads(client) -> int:
    """Threads of the workers connected right now (0 while none is)."""
    return int(sum(client.nthreads().values()))


def close(client) -> None:
    """Close the client and, when it owns one, its local cluster."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()
