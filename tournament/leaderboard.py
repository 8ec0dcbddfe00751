"""The leaderboard: the best pods so far, ranked by validation score.

Only validation scores rank pods; the test period is read once, by the final
backtest. The board holds at most ``capacity`` entries (the tournament's population).
A finished pod enters when there is room or when it beats the last entry, which is
then evicted. Ties keep the earlier pod ahead (lower index), so the order never
depends on dict or set order. A NaN score (a validation period without a single
trade has no Sharpe) ranks below every number.

Persistence: `save` writes ``leaderboard.json`` whole or not at all through
`trader.rundir`, so a reader (the dashboard, a resumed tournament) never sees half a
file; `load` gives back an equal board.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trader import rundir
from trader.errors import UserError

FORMAT_VERSION = rundir.LEADERBOARD_VERSION


@dataclass(frozen=True)
class Entry:
    """One pod on the board: its score, where it came from, where its weights are."""

    pod_id: str
    index: int
    """Creation order of the pod (breaks ties)."""
    algo: str
    score: float
    """Best validation score of the pod (NaN when it had none that is finite)."""
    generation: int
    parent_id: str | None
    hyperparameters: dict[str, Any]
    """The pod's algo config."""
    checkpoint: str
    """Best checkpoint, relative to the run directory."""
    score_history: list[tuple[float, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    worker: str = ""

    def rank_key(self) -> tuple[float, int]:
        """Sort key: higher score first, NaN last, earlier pod first on ties."""
        score = -math.inf if math.isnan(self.score) else self.score
        return (-score, self.index)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["score"] = _json_float(self.score)
        values["score_history"] = [[s, _json_float(v)] for s, v in self.score_history]
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Entry:
        values = dict(values)
        values["score"] = math.nan if values["score"] is None else float(values["score"])
        values["score_history"] = [
            (float(s), math.nan if v is None else float(v)) for s, v in values.get("score_history", [])
        ]
        return cls(**values)


def _json_float(value: float) -> float | None:
    """JSON has no NaN or infinity: both are stored as null (and read back as NaN)."""
    return value if math.isfinite(value) else None


class Leaderboard:
    """At most ``capacity`` entries, best first.

    :param capacity: how many pods the board keeps (the tournament's population).
    """

    def __init__(self, capacity: int, entries: Iterable[Entry] = ()) -> None:
        if capacity < 1:
            raise UserError(f"leaderboard capacity (population) must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._entries: list[Entry] = sorted(entries, key=Entry.rank_key)[: self.capacity]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, pod_id: object) -> bool:
        return any(entry.pod_id == pod_id for entry in self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Leaderboard):
            return NotImplemented
        return self.capacity == other.capacity and self.ranked() == other.ranked()

    def ranked(self) -> list[Entry]:
        """All entries, best first."""
        return list(self._entries)

    def best(self) -> Entry | None:
        return self._entries[0] if self._entries else None

    def top(self, k: int, algo: str | None = None) -> list[Entry]:
        """The ``k`` best entries (of one algorithm when ``algo`` is given)."""
        chosen = [e for e in self._entries if algo is None or e.algo == algo]
        return chosen[: max(int(k), 0)]

    def get(self, pod_id: str) -> Entry | None:
        return next((e for e in self._entries if e.pod_id == pod_id), None)

    def consider(self, entry: Entry) -> tuple[bool, list[Entry]]:
        """Offer a finished pod: ``(entered, evicted entries)``. A pod id enters once."""
        if entry.pod_id in self:
            raise UserError(f"pod {entry.pod_id} is on the leaderboard already")
        ranked = sorted([*self._entries, entry], key=Entry.rank_key)
        kept, dropped = ranked[: self.capacity], ranked[self.capacity :]
        self._entries = kept
        entered = entry in kept
        return entered, [e for e in dropped if e is not entry]

    # -- persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "capacity": self.capacity,
            "entries": [e.to_dict() for e in self._entries],
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Leaderboard:
        if values.get("format_version") != FORMAT_VERSION:
            raise UserError(f"leaderboard format_version {values.get('format_version')} is not {FORMAT_VERSION}")
        return cls(int(values["capacity"]), (Entry.from_dict(e) for e in values["entries"]))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to ``path``, whole or not at all (`trader.rundir.write_json`)."""
        rundir.write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Leaderboard:
        """The board saved at ``path``; a missing or broken file is one error naming it."""
        values = rundir.read_json(path, version=FORMAT_VERSION)
        try:
            return cls.from_dict(values)
        except (KeyError, TypeError, ValueError) as err:
            raise rundir.RunFileError(f"{path}: not a leaderboard ({type(err).__name__}: {err})") from err


def lineage(pod_id: str, parents: Mapping[str, str | None]) -> list[str]:
    """``pod_id`` and its ancestors, newest first, from a pod -> parent mapping."""
    chain, seen = [], set()
    current: str | None = pod_id
    while current is not None and current not in seen:
        chain.append(current)
        seen.add(current)
        current = parents.get(current)
    return chain
