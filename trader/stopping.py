"""Stopping a run on a signal: `stop_on_signals`, `StopRequest` and `Interrupted`.

Inside `stop_on_signals` (the CLI's train, walk-forward and experiment commands), a first
SIGINT or SIGTERM asks the training loop (`trader.training.train`) to stop at the end of the
iteration it is in: the run saves ``resume/last`` there and raises `Interrupted` with the
step (a second signal ends at once: the run keeps what its last evaluation saved). How such
a run continues: `trader.resuming`.

Torch-free: the CLI catches the signals without loading the training stack.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (`stop_on_signals`). A `KeyboardInterrupt`, so that no
    ``except Exception`` on the way swallows it.

    :param signal: the signal's number (SIGINT, SIGTERM); the CLI exits with 128 + it.
    :param step: the step a training run stopped at, its state saved there (``resume/last``);
        None when the signal ended the program at once (a second signal, or outside a
        training loop): then only what was saved before is kept.
    :param run_dir: the training run it stopped (None when unknown).
    """

    def __init__(self, signal: int, step: int | None = None, run_dir: Path | None = None) -> None:
        super().__init__(signal, step, run_dir)
        self.signal = int(signal)
        self.step = step
        self.run_dir = run_dir

    @property
    def exit_code(self) -> int:
        """128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports it."""
        return 128 + self.signal


class StopRequest:
    """A request to stop training at the end of the iteration in progress.

    `stop_on_signals` makes one from SIGINT and SIGTERM; a caller (a test) may also `request`
    it itself. While no training loop is `listening`, a signal ends the program at once
    (`Interrupted` without a step), since nothing would look at the request."""

    def __init__(self) -> None:
        self.signal: int | None = None
        """The signal that asked (None: not asked)."""
        self.listening = 0
        """How many training loops are running and look at the request after each iteration."""

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask the running loop to stop, as signal ``signum`` would."""
        self.signal = int(signum)

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: the first signal during a loop is a request; else stop now."""
        if self.requested or not self.listening:
            raise Interrupted(signum)
        self.request(signum)


_ACTIVE: list[StopRequest] = []
"""The requests of the `stop_on_signals` blocks now open (the innermost last)."""


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[StopRequest]:
    """Catch ``signals`` for the block as one `StopRequest`: every `train` inside stops at its
    next iteration's end, saves where it is and raises `Interrupted` with the step; a second
    signal, or one outside a training loop, raises `Interrupted` at once. The previous
    handlers come back at the end. Outside the main thread (where Python cannot catch
    signals) nothing is installed, and the request is only set by `StopRequest.request`."""
    request = StopRequest()
    installed: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        installed = {sig: signal.signal(sig, request.handle) for sig in signals}
    _ACTIVE.append(request)
    try:
        yield request
    finally:
        _ACTIVE.remove(request)
        for sig, handler in installed.items():
            signal.signal(sig, handler)


def active_stop() -> StopRequest | None:
    """The request of the innermost `stop_on_signals` block open now (None outside any)."""
    return _ACTIVE[-1] if _ACTIVE else None
