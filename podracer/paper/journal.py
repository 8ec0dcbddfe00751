"""The paper loop's journal: ``RUN_DIR/paper/``, written through `trader.rundir` only.

- ``session.json`` (`rundir.PAPER_SESSION`): written once, when a loop first trades
  the run: ``format_version``, ``session`` (the id in every order's client id), the
  strategy, the broker and its URLs (never the keys), the loop's settings, the tickers,
  the benchmark, the interval and the book it started from. A restart must name the same
  broker and strategy (else one line, nothing written).
- ``journal.jsonl`` (`rundir.PAPER_JOURNAL`): one line per bar, appended whole and
  synced (`rundir.append_json_line`); a line torn by a crash is cut off when the journal
  is opened again (`rundir.repair_json_lines`). Its fields are in docs/contracts.md.
- ``pending.json`` (`rundir.PAPER_PENDING`): the bar whose orders are going out, written
  before the first of them is sent and removed once its record is in the journal. A
  loop killed between the two finds it on restart and finishes that bar with the same
  orders and client ids (the broker adopts those it already has) instead of deciding
  it again.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from trader import rundir
from trader.errors import UserError

MATCHED = ("broker", "strategy", "tickers", "dry_run")
"""Session fields a restart must repeat: another broker, strategy or universe is another journal."""


class Journal:
    """The ``paper/`` folder of one run directory."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.root = Path(run_dir)
        self.session_path = self.root / rundir.PAPER_SESSION
        self.journal_path = self.root / rundir.PAPER_JOURNAL
        self.pending_path = self.root / rundir.PAPER_PENDING
        self.session: dict[str, Any] | None = None

    def existing_session(self) -> dict[str, Any] | None:
        """The session a previous loop started (None: the run was never paper-traded)."""
        if not self.session_path.is_file():
            return None
        return rundir.read_json(self.session_path, version=rundir.PAPER_VERSION)

    def check(self, session: dict[str, Any]) -> dict[str, Any] | None:
        """Refuse a restart that would change what the journal holds; writes nothing."""
        existing = self.existing_session()
        if existing is None:
            return None
        for key in MATCHED:
            if existing.get(key) != session.get(key):
                raise UserError(
                    f"{self.session_path} was started with {key} {existing.get(key)!r}, this loop has "
                    f"{session.get(key)!r}; move the paper/ folder away to start another journal"
                )
        return existing

    def open(self, session: dict[str, Any]) -> dict[str, Any]:
        """Start the journal (writing ``session.json``) or reopen it (its session kept)."""
        existing = self.check(session)
        if existing is None:
            existing = {"format_version": rundir.PAPER_VERSION, "session": uuid.uuid4().hex[:8], **session}
            rundir.write_json(self.session_path, existing)
        rundir.repair_json_lines(self.journal_path)
        self.session = existing
        return existing

    def records(self) -> list[dict[str, Any]]:
        return rundir.read_json_lines(self.journal_path)

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        return rundir.append_json_line(self.journal_path, record)

    def pending(self) -> dict[str, Any] | None:
        if not self.pending_path.is_file():
            return None
        return rundir.read_json(self.pending_path, version=rundir.PAPER_VERSION)

    def set_pending(self, values: dict[str, Any]) -> None:
        rundir.write_json(self.pending_path, {"format_version": rundir.PAPER_VERSION, **values})

    def clear_pending(self) -> None:
        self.pending_path.unlink(missing_ok=True)
