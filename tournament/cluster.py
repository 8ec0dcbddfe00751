"""The dask cluster a tournament runs on: one function, `connect`, returning a `Client`.

- Default: `distributed.LocalCluster` with ``workers`` worker *processes*, one thread
  each (torch keeps one thread per process, see `tournament.pod`); its nannies restart
  a worker that dies, and dask runs the lost task again.
- ``scheduler="tcp://host:8786"``: join a running cluster (workers started with
  ``dask worker ADDRESS``, anywhere that sees the run directory at the same path);
  the workers present at each moment are used, see `tournament.orchestrator`.
- ``gpus="all"`` or ``"0,1"``: `dask_cuda.LocalCUDACluster`, one worker per GPU
  (``pods_per_gpu`` threads each). dask-cuda pins its own dask, so it lives in the
  ``gpu`` extra (``pip install 'podracer-trader[gpu]'``); nothing else needs it.

Dask's own rules that matter here: a task whose worker died is retried on another
worker, and after ``distributed.scheduler.allowed-failures`` deaths (3 by default)
it ends in `distributed.KilledWorker`, which the orchestrator records as a failed pod.
"""

from __future__ import annotations


import logging

from trader.errors import UserError

CONNECT_TIMEOUT = "10s"
"""How long joining a scheduler may take before the address counts as unreachable."""


def connect(workers: int = 2, scheduler: str | None = None, gpus: str | None = None,
            pods_per_gpu: int = 1):  # fmt: skip
    """A dask `Client` on the cluster the arguments describe (see the module docstring)."""
    from distributed import Client

    if scheduler:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as err:
            raise UserError(f"cannot reach the dask scheduler at {scheduler} within {CONNECT_TIMEOUT}: {err}") from err
    if gpus:
        return Client(_cuda_cluster(gpus, pods_per_gpu))
    from distributed import LocalCluster

    if workers < 1:
        raise UserError(f"workers must be >= 1, got {workers}")
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)  # fmt: skip
    return Client(cluster)


def _cuda_cluster(gpus: str, pods_per_gpu: int):
    import torch

    if not torch.cuda.is_available():
        raise UserError("--gpus needs a CUDA device, and torch sees none on this machine")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as err:
        raise UserError("--gpus needs dask-cuda: pip install 'podracer-trader[gpu]'") from err
    visible = None if gpus == "all" else _gpu_list(gpus, torch.cuda.device_count())
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=visible, threads_per_worker=pods_per_gpu,
                            dashboard_address=None)  # fmt: skip


def _gpu_list(text: str, count: int) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise UserError(f"--gpus takes 'all' or GPU numbers like 0,1; got {text!r}") from err
    bad = [i for i in ids if not 0 <= i < count]
    if not ids or bad:
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
