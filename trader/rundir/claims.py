"""Claiming a run directory: `check_new_run` (the one check of every command that starts a run),
`claim_run`, and `clear_run` (``--overwrite``), which removes a run whole and never a file that no
stage writes (`foreign_files`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trader.errors import UserError
from trader.rundir.codec import toml_ready
from trader.rundir.files import file_kind, is_temporary
from trader.rundir.reads import read_toml
from trader.rundir.writes import write_toml


def run_entries(root: str | os.PathLike[str]) -> list[str]:
    """What ``root`` holds at its top level, sorted, folders with a trailing ``/``; a
    killed writer's temporaries are left out ([] when ``root`` is missing)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(
        p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in root.iterdir() if not is_temporary(p)
    )


def foreign_files(root: str | os.PathLike[str]) -> list[str]:
    """Paths under ``root`` (relative, sorted) that no stage of this library writes:
    files outside `FILES`, and links (never followed). A killed writer's temporaries
    are the library's own."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(is_temporary(part) for part in relative.parts):
            continue
        if path.is_symlink() or (path.is_file() and file_kind(relative) is None):
            found.append(relative.as_posix())
        elif not path.is_dir() and not path.is_file():
            found.append(relative.as_posix())  # a socket, a fifo: not ours
    return found


def check_new_run(root: str | os.PathLike[str], *, remedy: str, overwrite: bool = False, what: str = "a run") -> None:
    """The one check of every command that starts a run in ``root`` (`trader train`,
    `tournament`, `walkforward`, `demo`): one `UserError` line, before any work, when
    ``root`` is a file or already holds something, naming the folder and ``remedy``
    (the option that resumes, replaces or writes elsewhere); ``what``: what it holds, in
    the message ("a run", "a tournament").

    With ``overwrite`` a folder that holds only files the library writes passes (the
    caller then calls `clear_run` once its inputs are checked); a file no stage writes
    is refused, named: the library never deletes what it did not create."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} is a file, not a run directory")
    held = run_entries(root)
    if not held:
        return
    if not overwrite:
        listing = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise UserError(f"{root} holds {what} already ({listing}): {remedy}")
    foreign = foreign_files(root)
    if foreign:
        listing = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise UserError(
            f"--overwrite: {root} holds files that no run writes ({listing}); "
            "remove them yourself, or choose another run directory"
        )


def claim_run(root: str | os.PathLike[str], name: str, config: Mapping[str, Any], what: str) -> bool:
    """Start or resume the run whose config file ``name`` (TOML) is in ``root``: a folder
    without it must be new (`check_new_run`), and the config is written first; a folder with
    it resumes only under the same config (``run_dir`` aside: the same folder, by any path),
    else one `UserError` naming the keys that differ. Returns True for a resume.

    :param what: the run's kind in the messages ("a walk-forward", "an experiment")."""
    root = Path(root)
    path = root / name
    wanted = {k: v for k, v in toml_ready(dict(config)).items() if k != "run_dir"}
    if path.is_file():
        saved = {k: v for k, v in read_toml(path).items() if k != "run_dir"}
        if saved != wanted:
            changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
            raise UserError(
                f"{root} holds {what} with another config (differs in {', '.join(changed)}): "
                "give the same options to resume it, or another run directory"
            )
        return True
    check_new_run(root, remedy="give another run directory")
    write_toml(path, dict(config))
    return False


def clear_run(root: str | os.PathLike[str]) -> None:
    """Remove every file of the run in ``root`` (``--overwrite``: the new run replaces
    the old one whole: no stale report, series, checkpoint or baseline is left beside
    it). Refuses, removing nothing, when ``root`` holds a file no stage writes
    (`check_new_run`)."""
    root = Path(root)
    check_new_run(root, remedy="", overwrite=True)
    if not root.is_dir():  # nothing there yet: a new run
        return
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
