"""A backtest's large groups split over worker processes (``BacktestConfig.workers``).

The time of a compiled backtest of many policies is the policies' group: one sub-environment
per policy, stepped on one core (one torch thread, the project's rule). Its sub-environments
are independent, so the group is cut into ``workers`` shards of consecutive rows, each run as a
group of its own (its env, its rows of the stacked params, `trader.agents.program.take_rows`):
shard 0 in this process, shards 1 .. workers - 1 each in a child process, and the small groups (the
baselines') dealt to the processes whole, the smallest to this one (`engine._deal`). What a child will
run is compiled in this process first (`market_envs.rollout.Rollout.compile_here`). After the pass the
strategies' evidence is computed over the processes too (`map_forked`).

Why forked children, not a pool or a dask cluster (`tournament.cluster`): a worker needs the panel,
the env's tables (a year of minute bars for 100 tickers is hundreds of MB), the policies and the
compiled chunks. A forked child has them all as they are in this process, copied on write: nothing
is pickled or sent, and a child of a process that has compiled the shard's chunk before (the
warm-up of a benchmark, the previous backtest of a session) runs it without compiling. The children
write their records straight into this process's record tensors, allocated in anonymous shared
memory (`shared_zeros`), each its own rows; they send back only an error, if any, or a small result
(`map_forked`: each strategy's evidence), pickled. A child lives for
one backtest: nothing to start, stop or keep in step across backtests.

What it needs, and what `workers` > 1 therefore requires (`check_workers`): ``fork`` (Linux, macOS;
not Windows) and a CPU device (a CUDA context does not survive a fork). Fork copies only the
calling thread; call it from a process's main thread with no other threads holding locks (a plain
script, the CLI), not from inside a threaded server. Each child runs with the calling process's
torch thread setting.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trader.errors import ConfigError


def check_workers(workers: int, device: torch.device) -> None:
    """Refuse `workers` > 1 where forked workers cannot run the backtest (see the module docstring)."""
    if workers == 1:
        return
    if device.type != "cpu":
        raise ConfigError(f"BacktestConfig.workers > 1 runs on the CPU only (forked workers), not on {device}")
    if not hasattr(os, "fork") or sys.platform == "win32":
        raise ConfigError("BacktestConfig.workers > 1 needs fork (Linux, macOS); use workers=1 on this platform")


def split_rows(rows: int, parts: int) -> list[tuple[int, int]]:
    """`rows` consecutive rows cut into `parts` ranges [start, stop) of sizes differing by at most one,
    the larger first (the same size in every part when `parts` divides `rows`: one compiled chunk)."""
    size, extra = divmod(rows, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + size + (1 if k < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def shared_zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros in anonymous shared memory: what a forked child writes into it, the
    parent reads (no file in /dev/shm, whose size a container may limit)."""
    count = 1
    for n in shape:
        count *= int(n)
    size = max(1, count * torch.empty((), dtype=dtype).element_size())
    return torch.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=count).reshape(tuple(shape))


def run_forked(children: Sequence[Callable[[], Any]], here: Callable[[], None]) -> list[Any]:
    """Run each of `children` in a forked child process and `here` in this one, at the same time;
    return the children's results (pickled back through a pipe) when all are done. A failure in a
    child is raised here as a `RuntimeError` carrying the child's traceback (after `here` and every
    other child have finished); a failure here stops the children first."""
    sys.stdout.flush()
    sys.stderr.flush()
    started: list[tuple[int, int]] = []  # (pid, read end of its pipe: its result, or its traceback)
    try:
        for work in children:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: run, send its result or its error, leave without the parent's exit handlers
                code = 0
                try:
                    os.close(read)
                    _compile_in_this_thread()
                    _send(write, pickle.dumps(work()))
                except BaseException:  # noqa: BLE001 - every failure, exit included, goes back to the parent
                    code = 1
                    with contextlib.suppress(OSError):  # under a pipe's buffer: the write never blocks
                        os.write(write, traceback.format_exc().encode()[-65_000:])
                finally:
                    os._exit(code)
            os.close(write)
            started.append((pid, read))
        here()
    except BaseException:
        for pid, _ in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait(started)
        raise
    results, failures = _wait(started)
    if failures:
        raise RuntimeError("a backtest worker process failed:\n" + "\n".join(failures))
    return results


def map_forked(function: Callable[[Any], Any], items: Sequence[Any], processes: int) -> list[Any]:
    """``[function(item) for item in items]``, the items cut into `processes` runs of consecutive items
    (`split_rows`): the first run here, each other in a forked child (`run_forked`), all at once. For
    pure work on what this process holds (a backtest's evidence, strategy by strategy: its daily
    returns); `function`'s results are pickled back."""
    parts = [list(items[a:b]) for a, b in split_rows(len(items), max(1, min(processes, len(items))))]
    first: list[Any] = []
    rest = run_forked(
        [functools.partial(_apply, function, part) for part in parts[1:]],
        lambda: first.extend(_apply(function, parts[0])),
    )
    return first + [result for part in rest for result in part]


def _apply(function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [function(item) for item in items]


def _send(fd: int, data: bytes) -> None:
    """All of `data` into the pipe `fd` (a write larger than the pipe's buffer returns part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _compile_in_this_thread() -> None:
    """In a forked child: compile without inductor's thread pool. torch keeps that pool
    (``AsyncCompile.pool``, torch 2.13) across a fork, with threads that exist only in the parent: a
    child that compiles a chunk through it waits forever (seen with per-stock networks, whose parent had
    compiled the whole group's chunk before forking). One compile thread runs each job in the caller."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1


def _wait(started: list[tuple[int, int]]) -> tuple[list[Any], list[str]]:
    """Reap every child; the results of those that succeeded, and the failures' messages (their
    tracebacks, or how they ended)."""
    results, failures = [], []
    for k, (pid, read) in enumerate(started, start=1):
        chunks = []
        while chunk := os.read(read, 65_536):
            chunks.append(chunk)
        os.close(read)
        _, status = os.waitpid(pid, 0)
        sent = b"".join(chunks)
        if os.WIFSIGNALED(status):
            how = f"ended by signal {os.WTERMSIG(status)}"
        elif os.WEXITSTATUS(status) != 0:
            how = f"exited with status {os.WEXITSTATUS(status)}"
        else:
            results.append(pickle.loads(sent))
            continue
        failures.append(f"worker {k} (pid {pid}) {how}\n{sent.decode(errors='replace')}")
    return results, failures
