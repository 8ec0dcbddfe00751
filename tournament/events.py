"""``events.jsonl``: the tournament's log, one JSON object per line, appended and synced.

Kinds and their fields (every line also has ``kind`` and ``time``, Unix seconds):

- ``submitted``: ``pod_id``, ``spec`` (the whole `PodSpec`, so a child's parent and
  hyperparameters are recorded: ``parent_id`` and ``parent_hyperparameters`` beside);
- ``finished`` / ``failed``: ``pod_id``, ``result`` (the whole `PodResult`);
- ``entered``: ``pod_id``, ``score``, ``rank``; ``evicted``: ``pod_id``, ``score``;
- ``cancelled``: ``pod_id`` (in flight when the tournament stopped);
- ``started`` / ``stopped``: the tournament itself (``reason`` on stop).

The log is the record a resumed tournament rebuilds from: a pod is done exactly when
a ``finished`` or ``failed`` line for it is in the log. A line is written whole or
not at all as far as a reader is concerned: a last line cut by a crash is ignored.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only JSON-lines log at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one event and sync it to disk; return it."""
        event = _finite({"kind": kind, "time": time.time(), **fields})
        line = json.dumps(event, sort_keys=True, allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        return event

    def read(self) -> list[dict[str, Any]]:
        """Every complete event, oldest first (a torn last line is skipped)."""
        if not self.path.is_file():
            return []
        events = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events


def _finite(value: Any) -> Any:
    """NaN and infinities become None (JSON has neither); containers are walked."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
