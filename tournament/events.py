"""``events.jsonl``: the tournament's log, one JSON object per line, appended and synced.

Kinds and their fields (every line also has ``kind`` and ``time``, Unix seconds):

- ``submitted``: ``pod_id``, ``spec`` (the whole `PodSpec`, so a child's parent and
  hyperparameters are recorded: ``parent_id`` and ``parent_hyperparameters`` beside);
- ``finished`` / ``failed``: ``pod_id``, ``result`` (the whole `PodResult`);
- ``entered``: ``pod_id``, ``score``, ``rank``; ``evicted``: ``pod_id``, ``score``;
- ``cancelled``: ``pod_id`` (in flight when the target score stopped the tournament,
  or started past the time budget: nothing trained; a resume runs it again);
- ``started`` / ``stopped``: the tournament itself (``reason`` on stop).

The log is the record a resumed tournament rebuilds from: a pod is done exactly when
a ``finished`` or ``failed`` line for it is in the log. A line is written whole or
not at all as far as a reader is concerned: a last line cut by a crash is ignored.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from trader import rundir


class EventLog:
    """Append-only JSON-lines log at ``path`` (`trader.rundir.append_json_line`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one event and sync it to disk; return it (non-finite floats as None)."""
        return rundir.append_json_line(self.path, {"kind": kind, "time": time.time(), **fields})

    def read(self) -> list[dict[str, Any]]:
        """Every complete event, oldest first (a torn last line is skipped)."""
        return rundir.read_json_lines(self.path)
